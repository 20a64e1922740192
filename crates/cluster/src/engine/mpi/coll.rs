//! The mpi engine's collectives across hosts, each in three steps: a host-local step in
//! shared memory (checked by the host's engine against the caller's call), an exchange among
//! the hosts' leaders (Bruck's allgather, [`Exchange`], whose every message carries what its
//! sender knows of the calls made, [`Calls`]), and a host-local release in which each leader
//! hands its host what the leaders found: the calls, and an allreduce's result. So every rank
//! learns, within the collective's own messages, whether every rank of the world called the
//! same collective with the same arguments, and gets `CollectiveMismatch` when not; the
//! collectives stay in step (every rank ran every step).
//!
//! The barrier is that agreement alone; the allreduce carries its data in the same steps
//! (large inputs: the leaders agree first, then `MPI_Iallreduce`); float sums are added in
//! rank order. Each collective is a resumable state machine: a call that times out leaves its
//! phase in [`Coll`] and the next call continues from there.

use super::algo::{Buffers, Calls, Exchange, Group};
use super::{raw, MpiEngine};
use crate::collective::{fold_in_order, Collective, DataType, Op};
use crate::config::{BRUCK_MAX, SPREAD_MAX};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::timeout::{Deadline, Timeout};
use raw::Req;

/// The agreement on a call (a barrier between hosts that carries the calls).
enum AgreePhase {
    Idle,
    /// The leaders' exchange of what their hosts called. `host_failed`: this host's ranks
    /// called different collectives (they have had their error; no release follows).
    Leaders {
        ex: Exchange,
        host_failed: bool,
    },
    /// The host-local release of the leader's record (the others give zeros).
    Release(Vec<u8>),
}

enum ReducePhase {
    Idle,
    /// Float sums, one rank per host: the leaders (every rank) exchange their inputs.
    FloatExchange(Exchange),
    /// Float sums otherwise: the agreement on the call first ...
    FloatAgree,
    /// ... then every rank's input gathered over all ranks (small: the exchange) ...
    FloatGather(Exchange),
    /// ... (large: `MPI_Iallgather`).
    Gather {
        req: Req,
        _send: Vec<u8>,
        all: Vec<u8>,
    },
    /// Other reductions: the leaders exchange their hosts' results (small inputs).
    LeadersExchange {
        ex: Exchange,
        host_failed: bool,
    },
    /// Large inputs: the leaders agree on the call first ...
    LeadersAgree {
        ex: Exchange,
        host_failed: bool,
        send: Vec<u8>,
    },
    /// ... then reduce their hosts' results with `MPI_Iallreduce`.
    Leaders {
        req: Req,
        _send: Vec<u8>,
        recv: Vec<u8>,
        calls: Calls,
    },
    /// The host-local release of the leader's record and result (the others give zeros).
    Release(Vec<u8>),
}

/// The phases of this rank's collectives between hosts (behind the engine's collective lock).
pub(super) struct Coll {
    agree: AgreePhase,
    reduce: ReducePhase,
    /// The buffers of the exchanges, between two collectives.
    bufs: Buffers,
    /// The gathered inputs of a float sum or the hosts' results, between two collectives.
    all: Vec<u8>,
}

impl Coll {
    pub(super) fn new() -> Coll {
        Coll {
            agree: AgreePhase::Idle,
            reduce: ReducePhase::Idle,
            bufs: Buffers::default(),
            all: Vec::new(),
        }
    }

    /// An agreement is under way (its host-local step is behind it).
    pub(super) fn agreeing(&self) -> bool {
        !matches!(self.agree, AgreePhase::Idle)
    }
}

/// Bytes of a release of `len` bytes of result: the record, then the result in whole words.
fn release_len(len: usize) -> usize {
    Calls::BYTES + len.div_ceil(8) * 8
}

/// A leader's part of a release: its record, then `result` (zeros when the calls disagree or
/// there is none).
fn contribution(calls: Calls, result: Option<&[u8]>, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; release_len(len)];
    v[..Calls::BYTES].copy_from_slice(&calls.to_bytes());
    if let (true, Some(r)) = (calls.agree(), result) {
        v[Calls::BYTES..Calls::BYTES + len].copy_from_slice(r);
    }
    v
}

/// The calls an exchange found: every rank's when they disagree, else `mine` alone.
fn found(ex: &Exchange, mine: Calls) -> Calls {
    if ex.agree() {
        mine
    } else {
        ex.calls()
    }
}

/// The outcome for a rank that called `call` of an exchange that found `calls`.
fn outcome(ex: &Exchange, call: u64) -> Result<()> {
    if ex.agree() {
        return Ok(());
    }
    ex.calls().verdict(call).and(Err(Error::mismatch(
        Collective::from_word(call),
        Collective::Unknown,
        0,
    )))
}

/// Takes the exchange out of a finished phase, leaving `Idle`.
fn take_agree(p: &mut AgreePhase) -> Option<Exchange> {
    match std::mem::replace(p, AgreePhase::Idle) {
        AgreePhase::Leaders { ex, .. } => Some(ex),
        _ => None,
    }
}

/// Takes the exchange out of a finished phase, leaving `Idle`.
fn take_reduce(p: &mut ReducePhase) -> Option<Exchange> {
    match std::mem::replace(p, ReducePhase::Idle) {
        ReducePhase::FloatExchange(ex)
        | ReducePhase::FloatGather(ex)
        | ReducePhase::LeadersExchange { ex, .. }
        | ReducePhase::LeadersAgree { ex, .. } => Some(ex),
        _ => None,
    }
}

impl MpiEngine {
    fn leader(&self) -> bool {
        self.host.local_rank() == 0
    }

    /// The hosts' leaders (there are several hosts whenever these collectives run).
    fn leader_group(&self) -> Group {
        self.leader_group.expect("several hosts have leaders")
    }

    /// The outcome of a release for a rank that called `call`.
    fn verdict(&self, released: &[u8], call: u64) -> Result<()> {
        match Calls::from_bytes(released) {
            Some(c) => c.verdict(call),
            None => Err(Error::mismatch(
                Collective::from_word(call),
                Collective::Unknown,
                self.members[0],
            )),
        }
    }

    /// The host-local release: an allreduce of unsigned maxima in which the leader gives
    /// `contrib` and every other rank zeros, so the leader's bits reach every rank of the host
    /// unchanged. Checked against `call`, like the host-local step before it.
    fn release(&self, deadline: Deadline, call: u64, contrib: &[u8]) -> Result<Vec<u8>> {
        let mut out = vec![0u8; contrib.len()];
        self.host_wait(deadline, |t| {
            self.host
                .allreduce_as(call, contrib, &mut out, DataType::U64, Op::Max, t)
        })?;
        Ok(out)
    }

    /// What the leader knows after its host-local step ended with `r`: `Ok(false)` when the
    /// host agreed, `Ok(true)` when the host's ranks disagreed (the leader still takes part in
    /// the leaders' exchange so that every host learns of it), the error itself for any other
    /// rank or any other error.
    fn after_host_step(&self, r: Result<()>, calls: &mut Calls) -> Result<bool> {
        match r {
            Ok(()) => Ok(false),
            Err(e @ Error::CollectiveMismatch(_)) if self.leader() => {
                calls.add_error(&e);
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    /// The agreement on `call`, a barrier between hosts too: the host-local step (`host`: the
    /// outcome of the collective's own, already run; `None`: a host-local barrier checked
    /// against `call`), the leaders' exchange of what their hosts called, the release. `Ok`
    /// when every rank of the world called `call`, `CollectiveMismatch` at every rank when
    /// not; resumable after `Timeout`.
    pub(super) fn agree_locked(
        &self,
        c: &mut Coll,
        call: u64,
        mut host: Option<Result<()>>,
        deadline: Deadline,
    ) -> Result<()> {
        let alone = self.members.len() == 1;
        loop {
            match &mut c.agree {
                AgreePhase::Idle => {
                    let r = match host.take() {
                        Some(r) => r,
                        None if !alone => {
                            self.host_wait(deadline, |t| self.host.barrier_for(call, t))
                        }
                        None => Ok(()),
                    };
                    let mut calls = Calls::new(call, self.rank);
                    let host_failed = self.after_host_step(r, &mut calls)?;
                    c.agree = if self.leader() {
                        let bufs = std::mem::take(&mut c.bufs);
                        AgreePhase::Leaders {
                            ex: Exchange::new(&[], self.leader_group(), calls, call, bufs),
                            host_failed,
                        }
                    } else {
                        AgreePhase::Release(vec![0u8; release_len(0)])
                    };
                }
                AgreePhase::Leaders { ex, host_failed } => {
                    self.am_until(deadline, || ex.step())?;
                    let host_failed = *host_failed;
                    let ex = take_agree(&mut c.agree).expect("in the leaders' phase");
                    let r = outcome(&ex, call);
                    let calls = found(&ex, Calls::new(call, self.rank));
                    c.bufs = ex.into_buffers();
                    if host_failed || alone {
                        return r;
                    }
                    c.agree = AgreePhase::Release(contribution(calls, None, 0));
                }
                AgreePhase::Release(contrib) => {
                    let out = self.release(deadline, call, contrib)?;
                    c.agree = AgreePhase::Idle;
                    return self.verdict(&out, call);
                }
            }
        }
    }

    /// The barrier (or another collective with no data, `call`) between hosts.
    pub(super) fn barrier_locked(&self, c: &mut Coll, call: u64, timeout: Timeout) -> Result<()> {
        self.agree_locked(c, call, None, timeout.deadline())
    }

    /// The allreduce `call` (whose word the caller computed) between hosts.
    pub(super) fn allreduce_hosts(
        &self,
        call: u64,
        input: &[u8],
        output: &mut [u8],
        ty: DataType,
        op: Op,
        timeout: Timeout,
    ) -> Result<()> {
        if self.hosts == 1 {
            return self
                .host
                .allreduce_as(call, input, output, ty, op, timeout)
                .map_err(|e| self.lift(e));
        }
        let float_sum = op == Op::Sum && matches!(ty, DataType::F32 | DataType::F64);
        let stride = input.len().div_ceil(8) * 8;
        if float_sum && self.hosts < self.size && stride * self.size <= SPREAD_MAX {
            // Float sums must add every input in rank order (see below). With ranks sharing
            // hosts, gather the inputs hierarchically instead of through a flat allgather of
            // every rank over MPI: each rank places its input at its own rank's place in a
            // zeroed vector, and a maximum of those vectors as unsigned words (each place has
            // one non-zero contributor, so the bits come through unchanged) runs host-local
            // first, then among the hosts' leaders only, then back through the host. Every rank
            // then adds the places in rank order: the same bits as the flat path. The choice
            // depends on the world's shape and the length only, so every rank makes it alike.
            // Every step is checked against the caller's call.
            let mut spread = vec![0u8; stride * self.size];
            spread[self.rank * stride..][..input.len()].copy_from_slice(input);
            let mut all = vec![0u8; stride * self.size];
            self.allreduce_hosts(call, &spread, &mut all, DataType::U64, Op::Max, timeout)?;
            fold_blocks(ty, op, output, &all, stride, self.size);
            return Ok(());
        }
        let deadline = timeout.deadline();
        let len = input.len();
        let alone = self.members.len() == 1;
        let mut guard = self.coll.lock().unwrap_or_else(|e| e.into_inner());
        let c = &mut *guard;
        loop {
            match &mut c.reduce {
                ReducePhase::Idle if float_sum => {
                    // Float addition is not associative: every rank must add the same values
                    // in rank order (as the other engines do), which no tree (MPI's or a
                    // hierarchy's) does. Gather all inputs, fold them in rank order.
                    c.reduce = if self.hosts == self.size && len * self.size <= BRUCK_MAX {
                        // Every rank leads its host: the leaders' exchange is the gather.
                        let (calls, bufs) =
                            (Calls::new(call, self.rank), std::mem::take(&mut c.bufs));
                        ReducePhase::FloatExchange(Exchange::new(
                            input,
                            self.leader_group(),
                            calls,
                            call,
                            bufs,
                        ))
                    } else {
                        ReducePhase::FloatAgree
                    };
                }
                ReducePhase::FloatExchange(ex) | ReducePhase::FloatGather(ex) => {
                    self.am_until(deadline, || ex.step())?;
                    let ex = take_reduce(&mut c.reduce).expect("in an exchange");
                    let r = outcome(&ex, call);
                    if r.is_ok() {
                        c.all.resize(len * self.size, 0);
                        ex.result(&mut c.all);
                        fold_blocks(ty, op, output, &c.all, len, self.size);
                    }
                    c.bufs = ex.into_buffers();
                    return r;
                }
                ReducePhase::FloatAgree => {
                    self.agree_locked_of(c, call, deadline)?;
                    c.reduce = if len * self.size <= BRUCK_MAX {
                        let (calls, bufs) =
                            (Calls::new(call, self.rank), std::mem::take(&mut c.bufs));
                        ReducePhase::FloatGather(Exchange::new(
                            input,
                            self.gather,
                            calls,
                            call,
                            bufs,
                        ))
                    } else {
                        let send = input.to_vec();
                        let mut all = vec![0u8; len * self.size];
                        // SAFETY: both buffers move into the phase (heap memory that stays
                        // put) and are dropped only after the request completed.
                        let req = unsafe {
                            raw::iallgather_bytes(
                                send.as_ptr(),
                                send.len(),
                                all.as_mut_ptr(),
                                self.comm,
                            )?
                        };
                        ReducePhase::Gather {
                            req,
                            _send: send,
                            all,
                        }
                    };
                }
                ReducePhase::Gather { req, all, .. } => {
                    self.am_until(deadline, || req.test())?;
                    fold_blocks(ty, op, output, all, len, self.size);
                    c.reduce = ReducePhase::Idle;
                    return Ok(());
                }
                ReducePhase::Idle => {
                    // Host-local first (skipped when this rank is its host's only one).
                    let mut send = vec![0u8; len];
                    let r = if !alone {
                        self.host_wait(deadline, |t| {
                            self.host.allreduce_as(call, input, &mut send, ty, op, t)
                        })
                    } else {
                        send.copy_from_slice(input);
                        Ok(())
                    };
                    let mut calls = Calls::new(call, self.rank);
                    let host_failed = self.after_host_step(r, &mut calls)?;
                    c.reduce = if !self.leader() {
                        ReducePhase::Release(vec![0u8; release_len(len)])
                    } else if len * self.hosts <= BRUCK_MAX {
                        // Small: the leaders' exchange, fewer steps per call than MPI's
                        // non-blocking allreduce schedule.
                        let bufs = std::mem::take(&mut c.bufs);
                        ReducePhase::LeadersExchange {
                            ex: Exchange::new(&send, self.leader_group(), calls, call, bufs),
                            host_failed,
                        }
                    } else {
                        let bufs = std::mem::take(&mut c.bufs);
                        ReducePhase::LeadersAgree {
                            ex: Exchange::new(&[], self.leader_group(), calls, call, bufs),
                            host_failed,
                            send,
                        }
                    };
                }
                ReducePhase::LeadersExchange { ex, host_failed } => {
                    self.am_until(deadline, || ex.step())?;
                    let host_failed = *host_failed;
                    let ex = take_reduce(&mut c.reduce).expect("in an exchange");
                    let r = outcome(&ex, call);
                    let calls = found(&ex, Calls::new(call, self.rank));
                    let mut result = None;
                    if r.is_ok() {
                        c.all.resize(len * self.hosts, 0);
                        ex.result(&mut c.all);
                        if alone {
                            fold_blocks(ty, op, output, &c.all, len, self.hosts);
                        } else {
                            let mut v = vec![0u8; len];
                            fold_blocks(ty, op, &mut v, &c.all, len, self.hosts);
                            result = Some(v);
                        }
                    }
                    c.bufs = ex.into_buffers();
                    if host_failed || alone {
                        return r;
                    }
                    c.reduce = ReducePhase::Release(contribution(calls, result.as_deref(), len));
                }
                ReducePhase::LeadersAgree {
                    ex,
                    host_failed,
                    send,
                } => {
                    self.am_until(deadline, || ex.step())?;
                    let host_failed = *host_failed;
                    let send = std::mem::take(send);
                    let ex = take_reduce(&mut c.reduce).expect("in an exchange");
                    let r = outcome(&ex, call);
                    let calls = found(&ex, Calls::new(call, self.rank));
                    c.bufs = ex.into_buffers();
                    if r.is_err() {
                        if host_failed || alone {
                            return r;
                        }
                        c.reduce = ReducePhase::Release(contribution(calls, None, len));
                        continue;
                    }
                    let mut recv = vec![0u8; len];
                    // SAFETY: send and recv move into the phase (heap buffers that stay put)
                    // and are dropped only after the request completed.
                    let req = unsafe {
                        raw::iallreduce(
                            send.as_ptr(),
                            recv.as_mut_ptr(),
                            len / ty.size(),
                            raw::datatype(ty),
                            raw::op(op),
                            self.leader_group().comm,
                        )?
                    };
                    c.reduce = ReducePhase::Leaders {
                        req,
                        _send: send,
                        recv,
                        calls,
                    };
                }
                ReducePhase::Leaders {
                    req, recv, calls, ..
                } => {
                    self.am_until(deadline, || req.test())?;
                    if alone {
                        output.copy_from_slice(recv);
                        c.reduce = ReducePhase::Idle;
                        return Ok(());
                    }
                    c.reduce = ReducePhase::Release(contribution(*calls, Some(recv), len));
                }
                ReducePhase::Release(contrib) => {
                    let out = self.release(deadline, call, contrib)?;
                    c.reduce = ReducePhase::Idle;
                    self.verdict(&out, call)?;
                    output.copy_from_slice(&out[Calls::BYTES..Calls::BYTES + len]);
                    return Ok(());
                }
            }
        }
    }

    /// [`MpiEngine::agree_locked`] with a host-local barrier, for a collective whose phase
    /// waits on the agreement: on a mismatch the collective is over (its phase goes back to
    /// idle); on a timeout both stay where they are.
    fn agree_locked_of(&self, c: &mut Coll, call: u64, deadline: Deadline) -> Result<()> {
        let r = self.agree_locked(c, call, None, deadline);
        if let Err(Error::CollectiveMismatch(_)) = r {
            c.reduce = ReducePhase::Idle;
        }
        r
    }
}

/// `out` = the first `out.len()` bytes of each of the `count` blocks of `all` (`stride` apart)
/// folded in block order.
fn fold_blocks(ty: DataType, op: Op, out: &mut [u8], all: &[u8], stride: usize, count: usize) {
    let n = out.len();
    fold_in_order(
        ty,
        op,
        out,
        (0..count).map(|r| &all[r * stride..r * stride + n]),
    );
}

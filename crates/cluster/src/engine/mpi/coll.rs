//! The mpi engine's collectives across hosts: the hierarchical barrier (host-local, then a
//! dissemination barrier of the hosts' leaders, then host-local) and allreduce (host-local,
//! then the leaders, then a host-local broadcast), with float sums kept in rank order. Each is
//! a resumable state machine: a call that times out leaves its phase in [`Coll`] and the next
//! call continues from there.

use super::algo::{Bruck, Dissemination};
use super::{raw, MpiEngine};
use crate::collective::{fold_in_order, DataType, Op};
use crate::config::{BRUCK_MAX, SPREAD_MAX};
use crate::engine::Engine;
use crate::error::Result;
use crate::timeout::Timeout;
use crate::wait;
use raw::Req;

enum BarrierPhase {
    Idle,
    Leaders(Dissemination),
    Release,
}

enum ReducePhase {
    Idle,
    /// The leaders' allreduce over `send` into `recv` is in flight.
    Leaders {
        req: Req,
        _send: Vec<u8>,
        recv: Vec<u8>,
    },
    /// The leaders' allgather of small inputs, with tiers' own point-to-point allgather, to be
    /// combined (any order: not used for float sums, whose order matters).
    LeadersBruck(Bruck),
    /// Host-local broadcast of `recv` (leader) or of identities.
    Release(Vec<u8>),
    /// Float sums: every rank's input gathered, to be added in rank order.
    Gather {
        req: Req,
        _send: Vec<u8>,
        all: Vec<u8>,
    },
    /// The same for small inputs, with tiers' own point-to-point allgather.
    Bruck(Bruck),
}

/// The phases of this rank's barrier and allreduce (behind the engine's collective lock).
pub(super) struct Coll {
    barrier: BarrierPhase,
    reduce: ReducePhase,
}

impl Coll {
    pub(super) fn new() -> Coll {
        Coll {
            barrier: BarrierPhase::Idle,
            reduce: ReducePhase::Idle,
        }
    }
}

/// The neutral element of `op` on `ty`, as bytes (floats: `-0.0` for sums, NaN for min/max,
/// which loses against every number).
fn identity(ty: DataType, op: Op) -> Vec<u8> {
    macro_rules! b {
        ($v:expr) => {
            $v.to_ne_bytes().to_vec()
        };
    }
    match (ty, op) {
        (DataType::I32, Op::Sum) => b!(0i32),
        (DataType::I32, Op::Min) => b!(i32::MAX),
        (DataType::I32, Op::Max) => b!(i32::MIN),
        (DataType::U32, Op::Sum) => b!(0u32),
        (DataType::U32, Op::Min) => b!(u32::MAX),
        (DataType::U32, Op::Max) => b!(u32::MIN),
        (DataType::I64, Op::Sum) => b!(0i64),
        (DataType::I64, Op::Min) => b!(i64::MAX),
        (DataType::I64, Op::Max) => b!(i64::MIN),
        (DataType::U64, Op::Sum) => b!(0u64),
        (DataType::U64, Op::Min) => b!(u64::MAX),
        (DataType::U64, Op::Max) => b!(u64::MIN),
        (DataType::F32, Op::Sum) => b!(-0.0f32),
        (DataType::F32, _) => b!(f32::NAN),
        (DataType::F64, Op::Sum) => b!(-0.0f64),
        (DataType::F64, _) => b!(f64::NAN),
    }
}

impl MpiEngine {
    pub(super) fn barrier_locked(&self, c: &mut Coll, timeout: Timeout) -> Result<()> {
        let deadline = timeout.deadline();
        loop {
            match &mut c.barrier {
                BarrierPhase::Idle => {
                    self.host_wait(deadline, |t| self.host.barrier(t))?;
                    c.barrier = match &self.leaders {
                        Some(l) if self.host.local_rank() == 0 => {
                            BarrierPhase::Leaders(Dissemination::new(*l))
                        }
                        _ => BarrierPhase::Release,
                    };
                }
                BarrierPhase::Leaders(d) => {
                    wait::until(deadline, self.pace(), || d.step())?;
                    c.barrier = BarrierPhase::Release;
                }
                BarrierPhase::Release => {
                    if self.members.len() > 1 {
                        self.host_wait(deadline, |t| self.host.barrier(t))?;
                    }
                    c.barrier = BarrierPhase::Idle;
                    return Ok(());
                }
            }
        }
    }

    pub(super) fn allreduce_hosts(
        &self,
        input: &[u8],
        output: &mut [u8],
        ty: DataType,
        op: Op,
        timeout: Timeout,
    ) -> Result<()> {
        if self.hosts == 1 {
            return self
                .host
                .allreduce(input, output, ty, op, timeout)
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
            let mut spread = vec![0u8; stride * self.size];
            spread[self.rank * stride..][..input.len()].copy_from_slice(input);
            let mut all = vec![0u8; stride * self.size];
            // The inner step, not the guarded entry point: the call being made (and, after a
            // timeout, resumed) is the caller's float sum.
            self.allreduce_hosts(&spread, &mut all, DataType::U64, Op::Max, timeout)?;
            fold_blocks(ty, op, output, &all, stride, self.size);
            return Ok(());
        }
        let deadline = timeout.deadline();
        let leader = self.host.local_rank() == 0;
        let count = input.len() / ty.size();
        let mut c = self.coll.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match &mut c.reduce {
                ReducePhase::Idle
                    if op == Op::Sum && matches!(ty, DataType::F32 | DataType::F64) =>
                {
                    // Float addition is not associative: every rank must add the same values
                    // in rank order (as the other engines do), which no tree (MPI's or a
                    // hierarchy's) does. Gather all inputs, fold them in rank order.
                    if input.len() * self.size <= BRUCK_MAX {
                        c.reduce = ReducePhase::Bruck(Bruck::new(input, self.comm));
                        continue;
                    }
                    let send = input.to_vec();
                    let mut all = vec![0u8; input.len() * self.size];
                    // SAFETY: both buffers move into the phase (heap memory that stays put)
                    // and are dropped only after the request completed.
                    let req = unsafe {
                        raw::iallgather_bytes(
                            send.as_ptr(),
                            send.len(),
                            all.as_mut_ptr(),
                            self.comm,
                        )?
                    };
                    c.reduce = ReducePhase::Gather {
                        req,
                        _send: send,
                        all,
                    };
                }
                ReducePhase::Bruck(b) => {
                    wait::until(deadline, self.pace(), || b.step())?;
                    fold_blocks(ty, op, output, &b.result(), input.len(), self.size);
                    c.reduce = ReducePhase::Idle;
                    return Ok(());
                }
                ReducePhase::Gather { req, all, .. } => {
                    req.wait(deadline, self.pace())?;
                    fold_blocks(ty, op, output, all, input.len(), self.size);
                    c.reduce = ReducePhase::Idle;
                    return Ok(());
                }
                ReducePhase::Idle => {
                    // Host-local first (skipped when this rank is its host's only one).
                    let mut send = vec![0u8; input.len()];
                    if self.members.len() > 1 {
                        self.host_wait(deadline, |t| {
                            self.host.allreduce(input, &mut send, ty, op, t)
                        })?;
                    } else {
                        send.copy_from_slice(input);
                    }
                    c.reduce = if leader && send.len() * self.hosts <= BRUCK_MAX {
                        // Small: tiers' allgather among the leaders, fewer steps per call than
                        // MPI's non-blocking allreduce schedule.
                        let l = self.leaders.expect("several hosts have leaders");
                        ReducePhase::LeadersBruck(Bruck::new(&send, l))
                    } else if leader {
                        let mut recv = vec![0u8; input.len()];
                        let l = self.leaders.expect("several hosts have leaders");
                        // SAFETY: send and recv move into the phase (heap buffers that stay
                        // put) and are dropped only after the request completed.
                        let req = unsafe {
                            raw::iallreduce(
                                send.as_ptr(),
                                recv.as_mut_ptr(),
                                count,
                                raw::datatype(ty),
                                raw::op(op),
                                l,
                            )?
                        };
                        ReducePhase::Leaders {
                            req,
                            _send: send,
                            recv,
                        }
                    } else {
                        let id = identity(ty, op);
                        ReducePhase::Release(id.iter().cycle().take(input.len()).copied().collect())
                    };
                }
                ReducePhase::LeadersBruck(b) => {
                    wait::until(deadline, self.pace(), || b.step())?;
                    let mut r = vec![0u8; input.len()];
                    fold_blocks(ty, op, &mut r, &b.result(), input.len(), self.hosts);
                    c.reduce = ReducePhase::Release(r);
                }
                ReducePhase::Leaders { req, recv, .. } => {
                    req.wait(deadline, self.pace())?;
                    let r = std::mem::take(recv);
                    c.reduce = ReducePhase::Release(r);
                }
                ReducePhase::Release(contrib) => {
                    if self.members.len() > 1 {
                        // The leader's result combined with everyone else's neutral element:
                        // a broadcast through the host's shared-memory allreduce.
                        self.host_wait(deadline, |t| {
                            self.host.allreduce(contrib, output, ty, op, t)
                        })?;
                    } else {
                        output.copy_from_slice(contrib);
                    }
                    c.reduce = ReducePhase::Idle;
                    return Ok(());
                }
            }
        }
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

//! One-sided operations between hosts as ordered two-sided messages (`TIERS_MPI_ONESIDED=
//! messages`): the alternative to MPI windows where MPI's one-sided operations are themselves
//! messages (Open MPI's osc pt2pt over TCP).
//!
//! Over such a transport a window costs round trips that GASPI's semantics do not need: a
//! notification may not overtake its data, so a notified write flushes its target (a round
//! trip answered only when the target next calls MPI) before the notification can go. MPI
//! already orders messages between two ranks on one communicator and tag (non-overtaking), so
//! here every operation on another host's memory is a message on one communicator (`comm`)
//! and one tag (`TAG_OP`): a write is a header with its payload, a notification or an atomic
//! store is a header behind it, and the target applies them in the order they were sent. A
//! notified write is one message each way fewer, a write locally complete when its send is.
//!
//! - Writes up to [`INLINE_MAX`] bytes travel inside their header's message; larger payloads
//!   follow it in messages of at most [`CHUNK`] bytes up to [`CHUNKED_MAX`] (each below MPI's
//!   eager limit), in one message above (`TAG_PAYLOAD`, sent from the source segment and
//!   received straight into the target segment). While a source's payload is being received,
//!   its later headers wait behind it, so that nothing of that source lands out of order.
//! - Reads, atomics and fences are requests answered on `TAG_REPLY`: the origin posts the
//!   receive of the answer before it sends the request, under the same lock as every send of
//!   this rank (`tx`), so the answers of one target match the receives in order. A target
//!   answers a read from its segment memory, and applies an atomic with a processor atomic on
//!   its own word, the instruction its host's ranks use too.
//! - A fence (`Fence` request, answered once everything the origin sent before it has been
//!   applied) is what a full wait, a collective, a segment's deletion and a passive message
//!   add: remote completion where it is promised.
//!
//! The target applies what arrives whenever it polls ([`MpiEngine::am_poll`]): inside every
//! wait of the engine, at `World::progress`, and in the GASPI library's watcher. Between
//! those, as with windows over osc pt2pt, a rank that computes answers nobody.

use super::aside::Aside;
use super::doorbell::{self, Doorbell};
use super::raw::{self, Comm, Req};
use super::{MpiEngine, SEG_HEADER};
use crate::engine::{Engine, KeepAlive};
use crate::error::{Error, Rank, Result};
use crate::timeout::Deadline;
use crate::wait;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A stand-by thread's nap while a payload is still being received: each pass lets MPI read
/// what its sockets hold.
const STAND_BY_NAP: Duration = Duration::from_micros(20);

/// Headers, with their inline payloads.
const TAG_OP: i32 = 0x7440;
/// Payloads of large writes, each right after its header.
const TAG_PAYLOAD: i32 = 0x7441;
/// Answers to reads, atomics and fences.
const TAG_REPLY: i32 = 0x7442;

/// Writes of at most this many bytes travel inside their header's message (one message, a
/// copy at each end); larger ones as messages of their own, without copies. Below the eager
/// limit of MPI's TCP transports (64 KiB in Open MPI, headers included), so a header never
/// waits for its receiver to act before it leaves. Measured across two namespaced hosts
/// (GPI-2's `write_lat`, µs per step): 8 KiB inline and the rest apart gave 63-68 at 16 KiB
/// and 71-77 at 32 KiB, 60,000 bytes inline 37 and 50 (a copy of 32 KiB costs a few µs, a
/// second message a wake-up of its receiver).
pub(super) const INLINE_MAX: usize = 60_000;

/// Larger payloads travel in messages of at most this many bytes, each below the eager limit
/// of MPI's TCP transports (64 KiB in Open MPI, headers included), so that none waits for a
/// rendezvous with its receiver: the target posts the receives of them all into its segment
/// when it applies the header, and the bytes flow while both sides merely poll.
const CHUNK: usize = 64_000;

/// Payloads above this many bytes travel as one message (MPI's rendezvous). With the
/// doorbell, measured across two namespaced hosts over TCP (GPI-2's `write_lat`, µs per
/// step): pieces of 64,000 bytes against 32 KiB and one rendezvous message, 128 KiB 132-144
/// against 134-175 and 400-486, 512 KiB 352-358 against 405-648 and 365-381; at 1 MiB the
/// pieces lose (2.9-3.9 ms against 0.6).
const CHUNKED_MAX: usize = 512 * 1024;

/// The piece length a payload of `len` bytes travels in.
fn piece(len: usize) -> usize {
    if len <= CHUNKED_MAX {
        CHUNK
    } else {
        len
    }
}

const HDR: usize = 40;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
enum Kind {
    /// `len` bytes at `off` of segment `seg`, inline.
    Put = 1,
    /// `len` bytes at `off` of segment `seg`, in the next `TAG_PAYLOAD` message.
    PutLarge = 2,
    /// Notification `off` of segment `seg` set to `a`.
    Notify = 3,
    /// The word at `off` of segment `seg` atomically set to `a`.
    Store = 4,
    /// Answer with `len` bytes at `off` of segment `seg`.
    Get = 5,
    /// Add `a` to the word at `off` of segment `seg`; answer with the old value.
    FetchAdd = 6,
    /// Replace the word at `off` of segment `seg` with `b` if it is `a`; answer with the old.
    Cas = 7,
    /// Answer once everything sent before has been applied.
    Fence = 8,
}

impl Kind {
    fn from_u32(k: u32) -> Option<Kind> {
        Some(match k {
            1 => Kind::Put,
            2 => Kind::PutLarge,
            3 => Kind::Notify,
            4 => Kind::Store,
            5 => Kind::Get,
            6 => Kind::FetchAdd,
            7 => Kind::Cas,
            8 => Kind::Fence,
            _ => return None,
        })
    }
}

/// An operation's header (little-endian on the wire; both ends are the same program).
#[derive(Clone, Copy, Debug)]
struct Hdr {
    kind: Kind,
    seg: u32,
    off: u64,
    len: u64,
    a: u64,
    b: u64,
}

impl Hdr {
    fn new(kind: Kind, seg: u32, off: usize, len: usize) -> Hdr {
        Hdr {
            kind,
            seg,
            off: off as u64,
            len: len as u64,
            a: 0,
            b: 0,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.kind as u32).to_le_bytes());
        out.extend_from_slice(&self.seg.to_le_bytes());
        for v in [self.off, self.len, self.a, self.b] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn decode(b: &[u8]) -> Option<Hdr> {
        if b.len() < HDR {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Some(Hdr {
            kind: Kind::from_u32(u32_at(0))?,
            seg: u32_at(4),
            off: u64_at(8),
            len: u64_at(16),
            a: u64_at(24),
            b: u64_at(32),
        })
    }

    fn message(&self, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(HDR + payload.len());
        self.encode(&mut v);
        v.extend_from_slice(payload);
        v
    }
}

/// What a source's large payload is being received into.
enum Sink {
    /// Segment memory, kept mapped until the receive completes.
    Mem(#[allow(dead_code)] KeepAlive),
    /// A scratch buffer (a write to a segment this rank no longer has, or out of its bounds).
    Discard(#[allow(dead_code)] Vec<u8>),
}

/// One source's incoming stream while a payload of it is on its way.
#[derive(Default)]
struct Incoming {
    /// The receives of the payload's chunks not yet complete, and where they land.
    payload: Option<(Vec<Req>, Sink)>,
    /// Headers of that source that arrived behind the payload, applied after it.
    queued: VecDeque<Vec<u8>>,
}

/// The target's side: what is being received and answered.
#[derive(Default)]
struct Rx {
    incoming: HashMap<Rank, Incoming>,
    /// Answers on their way, with what they are sent from.
    answers: Vec<(Req, Answer)>,
    /// Fences this rank gave up waiting for, until their requests complete.
    abandoned: Vec<Abandoned>,
}

/// A fence whose wait timed out: its requests, and the buffers they read and write.
struct Abandoned {
    reqs: Vec<Req>,
    // The receives write into each box (as posted by `am_fence`).
    #[allow(clippy::vec_box)]
    _answers: Vec<Box<u64>>,
    _msg: Vec<u8>,
}

/// An atomic call as a thread made it: what a repeat after a timeout must match to resume it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct AtomicCall {
    thread: std::thread::ThreadId,
    rank: Rank,
    seg: u32,
    off: u64,
    kind: u32,
    a: u64,
    b: u64,
}

/// An atomic request whose wait timed out: what is left of it, and the buffers its requests
/// write and read.
struct Pending {
    recv: Option<Req>,
    send: Option<Req>,
    answer: Box<u64>,
    _msg: Vec<u8>,
}

enum Answer {
    Word(#[allow(dead_code)] Box<u64>),
    Mem(#[allow(dead_code)] KeepAlive),
}

/// The messages mode's state (see the module documentation).
pub(super) struct Am {
    comm: Comm,
    /// Held across every send of this rank, so that a header and its payload, or a request
    /// and the receive of its answer, go out as one.
    tx: Mutex<()>,
    rx: Mutex<Rx>,
    /// Wakes a target's stand-by thread when a header leaves for it (see [`Doorbell`]).
    pub(super) bell: Option<Doorbell>,
    /// The stand-by steps aside while a thread waits in calls of its own.
    pub(super) aside: Aside,
    /// Atomics whose wait timed out, until the same call resumes them.
    pending: Mutex<HashMap<AtomicCall, Pending>>,
    /// Polls made, for the occasional probe of passive messages (see `am_poll`).
    polls: AtomicU64,
}

impl Am {
    /// The messages mode's state over a duplicate of `comm` (collective: the doorbells'
    /// addresses are gathered; `bell_off`: no doorbells).
    pub(super) fn new(comm: Comm, bell_off: bool) -> Result<Am> {
        let comm = raw::dup(comm)?;
        Ok(Am {
            comm,
            tx: Mutex::new(()),
            rx: Mutex::new(Rx::default()),
            bell: Doorbell::open(comm, bell_off)?,
            aside: Aside::default(),
            pending: Mutex::new(HashMap::new()),
            polls: AtomicU64::new(0),
        })
    }

    /// A thread starts waiting in calls of its own ([`Aside::claim`]); a stand-by asleep on
    /// the doorbell is kicked out of it, since only one thread may sleep there.
    pub(super) fn claim(&self) {
        if self.aside.claim() {
            if let Some(b) = &self.bell {
                b.kick();
            }
        }
    }

    /// Sends header message `msg` to `rank` and rings its doorbell. Under `tx`.
    ///
    /// # Safety
    /// As [`raw::isend`]: `msg` stays valid and unmoved until the request completes.
    unsafe fn send_op(&self, msg: &[u8], rank: Rank) -> Result<Req> {
        // SAFETY: the caller's promise.
        let r = unsafe { raw::isend(msg, rank, TAG_OP, self.comm, false)? };
        if let Some(b) = &self.bell {
            b.ring(rank);
        }
        Ok(r)
    }
}

/// What one operation left to complete at the origin: requests, and the buffers they read.
#[derive(Default)]
pub(super) struct Posted {
    pub(super) reqs: Vec<Req>,
    pub(super) bufs: Vec<Vec<u8>>,
}

impl MpiEngine {
    fn am(&self) -> &Am {
        self.am.as_ref().expect("the messages mode is on")
    }

    /// A write of `len` bytes at `src` to `rank`'s segment `seg` at data offset `off`
    /// (checked by the caller).
    pub(super) fn am_write(
        &self,
        src: *const u8,
        len: usize,
        rank: Rank,
        seg: u32,
        off: usize,
    ) -> Result<Posted> {
        let am = self.am();
        let mut p = Posted::default();
        if len <= INLINE_MAX {
            // SAFETY: src..src + len lies in this rank's segment (checked by the caller).
            let payload = unsafe { std::slice::from_raw_parts(src, len) };
            let msg = Hdr::new(Kind::Put, seg, off, len).message(payload);
            let _tx = am.tx.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: msg moves into `p.bufs` (heap memory that does not move), which lives
            // until the request completes.
            p.reqs.push(unsafe { am.send_op(&msg, rank)? });
            p.bufs.push(msg);
        } else {
            let msg = Hdr::new(Kind::PutLarge, seg, off, len).message(&[]);
            // SAFETY: as above; the payload is read from the source segment until the send
            // completes, which the queue's wait ensures before the program may reuse it
            // (GASPI's rule, as for every write).
            let payload = unsafe { std::slice::from_raw_parts(src, len) };
            let _tx = am.tx.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: see above.
            p.reqs
                .push(unsafe { raw::isend(&msg, rank, TAG_OP, am.comm, false)? });
            p.bufs.push(msg);
            for c in payload.chunks(piece(len)) {
                // SAFETY: see above.
                p.reqs
                    .push(unsafe { raw::isend(c, rank, TAG_PAYLOAD, am.comm, false)? });
            }
            if let Some(b) = &am.bell {
                // The doorbell rings once the payload is on its way: MPI's TCP transport
                // writes a fragment it has queued at its next progress, so one progress
                // first, and the target, woken, finds the bytes in its socket instead of
                // polling for them while this rank waits for a processor.
                raw::progress(am.comm);
                b.ring(rank);
            }
        }
        Ok(p)
    }

    /// A header-only operation (a notification, an atomic store) to `rank`.
    fn am_header(&self, rank: Rank, h: Hdr) -> Result<Posted> {
        let am = self.am();
        let msg = h.message(&[]);
        let mut p = Posted::default();
        let _tx = am.tx.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: msg moves into `p.bufs`, which lives until the request completes.
        p.reqs.push(unsafe { am.send_op(&msg, rank)? });
        p.bufs.push(msg);
        Ok(p)
    }

    /// Notification `id` of `rank`'s segment `seg` set to `value`, behind what was sent before.
    pub(super) fn am_notify(&self, rank: Rank, seg: u32, id: usize, value: u32) -> Result<Posted> {
        let mut h = Hdr::new(Kind::Notify, seg, id, 0);
        h.a = value as u64;
        self.am_header(rank, h)
    }

    /// The word at data offset `off` (checked) of `rank`'s segment `seg` atomically set to
    /// `value`, behind what was sent before.
    pub(super) fn am_store(&self, rank: Rank, seg: u32, off: usize, value: u64) -> Result<Posted> {
        let mut h = Hdr::new(Kind::Store, seg, off, 8);
        h.a = value;
        self.am_header(rank, h)
    }

    /// A read of `len` bytes at data offset `off` (checked) of `rank`'s segment `seg` into
    /// `dst` (this rank's segment memory, checked).
    pub(super) fn am_read(
        &self,
        dst: *mut u8,
        len: usize,
        rank: Rank,
        seg: u32,
        off: usize,
    ) -> Result<Posted> {
        let am = self.am();
        let msg = Hdr::new(Kind::Get, seg, off, len).message(&[]);
        let mut p = Posted::default();
        let _tx = am.tx.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: dst..dst + len is this rank's segment memory, which stays mapped until the
        // queue's wait has completed this receive (GASPI's rule).
        p.reqs
            .push(unsafe { raw::irecv(dst, len, rank, Some(TAG_REPLY), am.comm)? });
        // SAFETY: msg moves into `p.bufs`, which lives until the request completes.
        p.reqs.push(unsafe { am.send_op(&msg, rank)? });
        p.bufs.push(msg);
        Ok(p)
    }

    /// Sends request `h` to `rank` and waits for its 8-byte answer until `deadline`. A request
    /// whose wait timed out stays posted, kept for the same call from the same thread: that
    /// call resumes it instead of sending another, so the operation is applied once (GASPI
    /// programs call a timed-out atomic again until it completes). Its receive stays posted
    /// meanwhile, so that its answer, first on the target's reply stream, lands in it.
    fn am_request(&self, rank: Rank, h: Hdr, deadline: Deadline) -> Result<u64> {
        let am = self.am();
        let key = AtomicCall {
            thread: std::thread::current().id(),
            rank,
            seg: h.seg,
            off: h.off,
            kind: h.kind as u32,
            a: h.a,
            b: h.b,
        };
        let resumed = am
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        let mut p = match resumed {
            Some(p) => p,
            None => {
                let msg = h.message(&[]);
                let mut answer = Box::new(0u64);
                let _tx = am.tx.lock().unwrap_or_else(|e| e.into_inner());
                // SAFETY: `answer` (boxed: it does not move) and `msg` live in the `Pending`
                // beside the requests, which is dropped only once both completed or kept in
                // `Am::pending` (never freed before the engine).
                let recv = unsafe {
                    raw::irecv(
                        &mut *answer as *mut u64 as *mut u8,
                        8,
                        rank,
                        Some(TAG_REPLY),
                        am.comm,
                    )?
                };
                // SAFETY: as above.
                let send = unsafe { am.send_op(&msg, rank)? };
                Pending {
                    recv: Some(recv),
                    send: Some(send),
                    answer,
                    _msg: msg,
                }
            }
        };
        let r = self.am_until(deadline, || {
            for r in [&mut p.recv, &mut p.send] {
                if let Some(q) = r {
                    if q.test()? {
                        *r = None;
                    }
                }
            }
            Ok(p.recv.is_none() && p.send.is_none())
        });
        match r {
            Ok(()) => Ok(*p.answer),
            Err(Error::Timeout) => {
                am.pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, p);
                Err(Error::Timeout)
            }
            Err(e) => {
                // Requests still posted keep their buffers, as a fence given up on does.
                let reqs: Vec<Req> = [p.recv, p.send].into_iter().flatten().collect();
                if !reqs.is_empty() {
                    let mut rx = am.rx.lock().unwrap_or_else(|e| e.into_inner());
                    rx.abandoned.push(Abandoned {
                        reqs,
                        _answers: vec![p.answer],
                        _msg: p._msg,
                    });
                }
                Err(e)
            }
        }
    }

    /// Atomic fetch-and-add on the word at data offset `off` (checked) of `rank`'s `seg`,
    /// waiting for its answer until `deadline` (see [`MpiEngine::am_request`]).
    pub(super) fn am_fetch_add(
        &self,
        rank: Rank,
        seg: u32,
        off: usize,
        v: u64,
        deadline: Deadline,
    ) -> Result<u64> {
        let mut h = Hdr::new(Kind::FetchAdd, seg, off, 8);
        h.a = v;
        self.am_request(rank, h, deadline)
    }

    /// Atomic compare-and-swap on the word at data offset `off` (checked) of `rank`'s `seg`,
    /// as [`MpiEngine::am_fetch_add`].
    pub(super) fn am_compare_swap(
        &self,
        rank: Rank,
        seg: u32,
        off: usize,
        expected: u64,
        new: u64,
        deadline: Deadline,
    ) -> Result<u64> {
        let mut h = Hdr::new(Kind::Cas, seg, off, 8);
        h.a = expected;
        h.b = new;
        self.am_request(rank, h, deadline)
    }

    /// Remote completion: returns once every target of `ranks` has applied what this rank
    /// sent it before (fences to all of them at once, then the answers), or `Err(Timeout)` at
    /// `deadline`, when a target has not answered (it answers only while it polls). A fence
    /// given up on stays posted ([`Rx::abandoned`]): its answer, when it comes, is the first
    /// on its target's reply stream and must land in the receive posted for it.
    pub(super) fn am_fence(&self, ranks: &HashSet<Rank>, deadline: Deadline) -> Result<()> {
        if ranks.is_empty() {
            return Ok(());
        }
        let am = self.am();
        let msg = Hdr::new(Kind::Fence, 0, 0, 0).message(&[]);
        let mut answers: Vec<Box<u64>> = ranks.iter().map(|_| Box::new(0)).collect();
        let mut reqs = Vec::with_capacity(2 * ranks.len());
        {
            let _tx = am.tx.lock().unwrap_or_else(|e| e.into_inner());
            for (&r, a) in ranks.iter().zip(answers.iter_mut()) {
                // SAFETY: the answers (boxed) and `msg` outlive the requests: waited for below.
                reqs.push(unsafe {
                    raw::irecv(
                        &mut **a as *mut u64 as *mut u8,
                        8,
                        r,
                        Some(TAG_REPLY),
                        am.comm,
                    )?
                });
                // SAFETY: as above.
                reqs.push(unsafe { am.send_op(&msg, r)? });
            }
        }
        let r = self.am_until(deadline, || {
            let mut i = 0;
            while i < reqs.len() {
                if reqs[i].test()? {
                    reqs.swap_remove(i);
                } else {
                    i += 1;
                }
            }
            Ok(reqs.is_empty())
        });
        if r.is_err() && !reqs.is_empty() {
            let mut rx = am.rx.lock().unwrap_or_else(|e| e.into_inner());
            rx.abandoned.push(Abandoned {
                reqs,
                _answers: answers,
                _msg: msg,
            });
        }
        r
    }

    /// [`wait::until`] that applies what arrives meanwhile: a rank waiting for its own
    /// operations must still answer the others' (they may be waiting for it in turn).
    pub(super) fn am_until(
        &self,
        deadline: Deadline,
        mut done: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        wait::until(deadline, self.pace(), || {
            self.am_poll()?;
            done()
        })
    }

    /// Applies what other hosts sent this rank (see the module documentation); whether it
    /// found anything. One thread at a time (the others return at once).
    pub(super) fn am_poll(&self) -> Result<bool> {
        let Some(am) = &self.am else {
            return Ok(false);
        };
        let Ok(mut rx) = am.rx.try_lock() else {
            return Ok(false);
        };
        let mut found = false;
        rx.answers.retain_mut(|(r, _)| !r.test().unwrap_or(true));
        rx.abandoned.retain_mut(|a| {
            a.reqs.retain_mut(|r| !r.test().unwrap_or(true));
            !a.reqs.is_empty()
        });
        // Payloads being received, then what queued behind each.
        let busy: Vec<Rank> = rx.incoming.keys().copied().collect();
        for src in busy {
            found |= self.am_resume(&mut rx, src)?;
        }
        // New headers.
        while let Some(m) = raw::improbe(None, TAG_OP, am.comm)? {
            let src = m.source;
            let msg = m.recv(self.pace())?;
            if let Some(b) = &am.bell {
                b.took(src);
            }
            found = true;
            match rx.incoming.get_mut(&src) {
                Some(inc) => inc.queued.push_back(msg),
                None => self.am_apply(&mut rx, src, &msg)?,
            }
        }
        drop(rx);
        // Passive messages: a probe of their own costs a pass of MPI's progress, so with a
        // doorbell only when a ring is still unaccounted for (a passive sender rings too), and
        // at every 64th poll in case a ring was lost.
        let polls = am.polls.fetch_add(1, Ordering::Relaxed);
        if am.bell.as_ref().is_none_or(Doorbell::behind) || polls % 64 == 0 {
            found |= self.passive_take()?;
        }
        Ok(found)
    }

    /// A pass that sleeps on the doorbell ([`Doorbell`]): until a ring arrives or `max`
    /// passes (a short nap while a payload is still coming in), then applies what arrived,
    /// polling until every announced header and its payload are in or
    /// [`doorbell::CATCH_UP`] has passed. Whether it found anything. Without a doorbell,
    /// one poll.
    ///
    /// `standing_by`: the caller is a stand-by thread (it computes nothing and waits for
    /// nothing of its own). While another thread of the rank holds a claim it steps aside
    /// ([`Aside`]) instead, and a claim made while it slept ends its catch-up: the claimant
    /// takes the headers in itself.
    pub(super) fn am_wait(&self, max: Duration, standing_by: bool) -> Result<bool> {
        let Some(am) = self.am.as_ref() else {
            return self.progress();
        };
        let Some(bell) = am.bell.as_ref() else {
            return self.progress();
        };
        let aside = standing_by.then_some(&am.aside);
        if let Some(a) = aside {
            if !a.stand() {
                a.step_aside(max);
                return Ok(false);
            }
        } else if am.aside.standing() {
            // The stand-by still sleeps on the doorbell (kicked by the claim, it leaves at
            // once): one thread sleeps there at a time, or the one that wakes first drains
            // the ring and the other sleeps through it.
            let found = self.am_poll()?;
            std::thread::yield_now();
            return Ok(found);
        }
        let nap = if self.am_behind(bell) {
            STAND_BY_NAP.min(max)
        } else {
            max
        };
        let rang = bell.wait(nap);
        if let Some(a) = aside {
            a.sat();
        }
        let start = Instant::now();
        let mut found = false;
        loop {
            if aside.is_some_and(|a| a.claimed()) {
                break;
            }
            found |= self.am_poll()?;
            let headers = bell.behind();
            if !headers && !self.am_behind(bell) {
                break;
            }
            // Announced headers are on their way: poll for them. A payload alone may take
            // long (its sender pushes it as it waits): poll briefly, then nap until its
            // sender's ring says it has left, so as not to take the processor from it.
            let limit = if headers {
                doorbell::CATCH_UP
            } else {
                doorbell::PAYLOAD_SPIN
            };
            if start.elapsed() >= limit {
                if headers {
                    // Slow, or the ring was not one of ours.
                    bell.forget();
                }
                break;
            }
            std::hint::spin_loop();
        }
        Ok(found || rang)
    }

    /// Whether rings announced headers not taken in yet, or a payload is being received.
    fn am_behind(&self, bell: &Doorbell) -> bool {
        bell.behind()
            || self
                .am
                .as_ref()
                .and_then(|a| a.rx.try_lock().ok())
                .is_some_and(|rx| !rx.incoming.is_empty())
    }

    /// Completes `src`'s payload if it is in, and applies its queued headers until another
    /// payload is on its way or none is left.
    fn am_resume(&self, rx: &mut Rx, src: Rank) -> Result<bool> {
        let mut found = false;
        loop {
            let Some(inc) = rx.incoming.get_mut(&src) else {
                return Ok(found);
            };
            if let Some((reqs, _)) = inc.payload.as_mut() {
                let mut i = 0;
                while i < reqs.len() {
                    if reqs[i].test()? {
                        reqs.swap_remove(i);
                        found = true;
                    } else {
                        i += 1;
                    }
                }
                if !reqs.is_empty() {
                    return Ok(found);
                }
                inc.payload = None;
            }
            match inc.queued.pop_front() {
                Some(msg) => self.am_apply(rx, src, &msg)?,
                None => {
                    rx.incoming.remove(&src);
                    return Ok(found);
                }
            }
        }
    }

    /// The local address of data bytes `off..off + len` of this rank's segment `seg`, if it
    /// has that segment and the range lies inside it.
    fn am_target(&self, seg: u32, off: u64, len: u64) -> Option<(*mut u8, KeepAlive)> {
        let (p, size, keep) = self.host.segment_local(seg).ok()?;
        let end = off.checked_add(len)?;
        if end > size as u64 {
            return None;
        }
        // SAFETY: off + len <= size: inside the segment's data.
        Some((unsafe { p.add(off as usize) }, keep))
    }

    /// The 8-byte word at data offset `off` of this rank's segment `seg`, aligned and inside.
    fn am_word(&self, seg: u32, off: u64) -> Option<(&AtomicU64, KeepAlive)> {
        if off % 8 != 0 {
            return None;
        }
        let (p, keep) = self.am_target(seg, off, 8)?;
        // SAFETY: an aligned 8-byte word inside the mapping `keep` holds (the data starts
        // SEG_HEADER bytes into a page-aligned mapping: aligned offsets stay aligned); the
        // reference does not outlive `keep` at the callers.
        Some((unsafe { &*(p as *const AtomicU64) }, keep))
    }

    /// Applies one message of `src` whose predecessors have all been applied.
    fn am_apply(&self, rx: &mut Rx, src: Rank, msg: &[u8]) -> Result<()> {
        const _: () = assert!(SEG_HEADER % 8 == 0);
        let Some(h) = Hdr::decode(msg) else {
            return Err(Error::Setup(format!(
                "mpi engine: a malformed one-sided message from rank {src} ({} bytes)",
                msg.len()
            )));
        };
        let am = self.am();
        match h.kind {
            Kind::Put => {
                let payload = &msg[HDR..];
                if payload.len() as u64 == h.len {
                    if let Some((p, _keep)) = self.am_target(h.seg, h.off, h.len) {
                        // SAFETY: the range lies inside the mapping `_keep` holds.
                        unsafe {
                            std::ptr::copy_nonoverlapping(payload.as_ptr(), p, payload.len())
                        };
                    }
                }
            }
            Kind::PutLarge => {
                let len = usize::try_from(h.len).unwrap_or(usize::MAX);
                let (p, sink) = match self.am_target(h.seg, h.off, h.len) {
                    Some((p, keep)) => (p, Sink::Mem(keep)),
                    None => {
                        // Received all the same (the stream must go on), into scratch.
                        let mut v = vec![0u8; len.min(1 << 31)];
                        (v.as_mut_ptr(), Sink::Discard(v))
                    }
                };
                let step = piece(len);
                let mut reqs = Vec::with_capacity(len.div_ceil(step));
                for at in (0..len).step_by(step) {
                    // SAFETY: p..p + len lies inside the mapping or buffer `sink` holds, kept
                    // with the requests until they complete; the chunks do not overlap.
                    reqs.push(unsafe {
                        raw::irecv(
                            p.add(at),
                            step.min(len - at),
                            src,
                            Some(TAG_PAYLOAD),
                            am.comm,
                        )?
                    });
                }
                rx.incoming.entry(src).or_default().payload = Some((reqs, sink));
            }
            Kind::Notify => {
                let me = self.host.local_rank();
                // A notification of a segment this rank no longer has is dropped, as a write.
                if h.off < crate::config::NOTIFICATIONS as u64 {
                    let _ = self.host.notify(0, me, h.seg, h.off as usize, h.a as u32);
                }
            }
            Kind::Store => {
                if let Some((w, _keep)) = self.am_word(h.seg, h.off) {
                    w.store(h.a, Ordering::Release);
                }
            }
            Kind::Get => {
                let len = usize::try_from(h.len).unwrap_or(0);
                let req = match self.am_target(h.seg, h.off, h.len) {
                    Some((p, keep)) => {
                        // SAFETY: the range lies inside the mapping `keep` holds, kept with
                        // the request until it completes.
                        let r = unsafe {
                            raw::isend(
                                std::slice::from_raw_parts(p, len),
                                src,
                                TAG_REPLY,
                                am.comm,
                                false,
                            )?
                        };
                        (r, Answer::Mem(keep))
                    }
                    // Gone meanwhile: an empty answer completes the reader's receive.
                    None => {
                        // SAFETY: an empty send reads nothing.
                        let r = unsafe { raw::isend(&[], src, TAG_REPLY, am.comm, false)? };
                        (r, Answer::Word(Box::new(0)))
                    }
                };
                rx.answers.push(req);
            }
            Kind::FetchAdd | Kind::Cas | Kind::Fence => {
                let old = match h.kind {
                    Kind::Fence => 0,
                    _ => match self.am_word(h.seg, h.off) {
                        Some((w, _keep)) if h.kind == Kind::FetchAdd => {
                            w.fetch_add(h.a, Ordering::AcqRel)
                        }
                        Some((w, _keep)) => {
                            match w.compare_exchange(h.a, h.b, Ordering::AcqRel, Ordering::Acquire)
                            {
                                Ok(v) | Err(v) => v,
                            }
                        }
                        None => 0,
                    },
                };
                let w = Box::new(old);
                // SAFETY: the boxed word is kept with the request until it completes.
                let r = unsafe {
                    raw::isend(
                        std::slice::from_raw_parts(&*w as *const u64 as *const u8, 8),
                        src,
                        TAG_REPLY,
                        am.comm,
                        false,
                    )?
                };
                rx.answers.push((r, Answer::Word(w)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_survive_the_wire_and_junk_is_refused() {
        let mut h = Hdr::new(Kind::Cas, 7, 4096, 8);
        h.a = u64::MAX;
        h.b = 0x0123_4567_89ab_cdef;
        let m = h.message(b"xyz");
        assert_eq!(m.len(), HDR + 3);
        let d = Hdr::decode(&m).expect("decodes");
        assert_eq!(
            (d.kind, d.seg, d.off, d.len, d.a, d.b),
            (Kind::Cas, 7, 4096, 8, u64::MAX, 0x0123_4567_89ab_cdef)
        );
        assert!(Hdr::decode(&m[..HDR - 1]).is_none());
        let mut bad = m.clone();
        bad[0] = 99;
        assert!(Hdr::decode(&bad).is_none());
    }
}

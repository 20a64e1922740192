//! Two-sided messaging on the one-sided API: `send` / `recv` with a tag from a named source (no
//! wildcard), and the collectives applications written in that style need (barrier, allreduce,
//! alltoall, alltoallv). It uses only the public calls of a [`World`] (one segment, one queue,
//! notifications), so it runs unchanged on every engine.
//!
//! ```
//! use tiers_cluster::twosided::Comm;
//! use tiers_cluster::{SegId, Timeout};
//!
//! let out = tiers_cluster::run_local(3, |w| {
//!     let c = Comm::new(w, SegId(9), Timeout::Block).unwrap();
//!     let (me, p) = (c.rank(), c.size());
//!     // A ring: send to the right, receive from the left.
//!     c.send((me + 1) % p, 7, &[me as u8; 5], Timeout::Block).unwrap();
//!     let mut buf = [0u8; 16];
//!     let n = c.recv((me + p - 1) % p, 7, &mut buf, Timeout::Block).unwrap();
//!     c.barrier(Timeout::Block).unwrap();
//!     (n, buf[0])
//! }).unwrap();
//! assert_eq!(out, vec![(5, 2), (5, 0), (5, 1)]);
//! ```
//!
//! # Protocol
//!
//! The segment holds, for every ordered pair (sender → this rank), a ring of `slots` slots in
//! the receiver's memory, and as many staging slots per destination at the sender (a one-sided
//! write copies from a local segment). A slot is a 32-byte header (channel, tag, timestamp,
//! message length, chunk length) and up to `slot_bytes - 32` bytes of payload; a longer message
//! travels as consecutive chunks of one ring.
//!
//! - **Data**: the sender writes slot `n mod slots` of its ring at the receiver with
//!   `write_notify`; notification `sender` of the receiver's segment then holds `n + 1` (mod
//!   2³¹, never 0). Notifications are stored, not added, so the receiver reads the newest count
//!   and takes every slot up to it: a write's notification is visible only after its data, and
//!   the engines complete a target's earlier writes before its later notifications.
//! - **Credit**: the receiver, having drained a ring, stores its count of slots taken in
//!   notification `size + receiver` of the sender's segment; the sender writes slot `n` only
//!   when `n - taken < slots`.
//! - **Matching**: each message carries a logical timestamp, counted per (communicator, channel
//!   and tag, sender, receiver); the receiver delivers the messages of one (sender, tag) in
//!   timestamp order. What the receiver drains but nobody has asked for yet waits in a queue
//!   of its own (unbounded, like MPI's unexpected messages).
//! - **Buffering**: `send` copies the message into a per-destination outbox (the sender's log)
//!   and returns once its last chunk is in the receiver's ring; what the receiver drains
//!   waits at the receiver until asked for. Every call that waits also drains and pushes, so
//!   two ranks sending to each other before receiving cannot deadlock, and a rank whose calls
//!   have returned owes its peers nothing (it may block in a one-sided collective of the
//!   [`World`] without stalling a receiver).
//! - **Queue**: a `Comm` posts on the world's queue 0 and waits for its local completion
//!   after each round of posts (its staging slots are then free again), within the call's
//!   deadline (a round whose writes are not complete by then leaves them for the next round
//!   to wait for before it pushes); `flush`, and so `send` and the collectives, end with the
//!   queue's full wait, the writes in their receivers' rings. A program's own
//!   requests on queue 0 are waited for with it, so a program that posts there and wants its
//!   `Comm` calls to return at once should post on another queue.
//!
//! The timestamps, the sender's log and the receiver's queues keyed by timestamp are what a
//! replicated world needs on top: a receiver can pull a message by its (sender, tag, timestamp)
//! from any replica of the sender that still logs it.
//!
//! # Replicas
//!
//! In a job of `tiers run -n N --replicas R` a `Comm` speaks for the logical rank (its
//! [`Comm::rank`] and [`Comm::size`] are logical) and moves messages as VolpexMPI does: the
//! sender logs, the receiver pulls from whichever replica of the sender answers first, a
//! replica that does not answer in time is skipped ([`Comm::state`] shows what this process
//! knows of every replica). The protocol, the log's bound and its limits are in
//! `twosided/replicated.rs`.

mod replicated;

pub use replicated::{Placement, ReplicaState};

use crate::collective::{
    as_bytes, as_bytes_mut, combine, Collective, DataType, Op, Pod, Reducible,
};
use crate::error::{Error, Rank, Result};
use crate::segment::Segment;
use crate::timeout::{Deadline, Timeout};
use crate::world::World;
use crate::{Notification, SegId, NOTIFICATIONS};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;
use tiers_node::Backoff;

/// Bytes of a slot header.
const HEADER: usize = 32;
/// Notification values count slots modulo this (a value is never 0).
const WRAP: u64 = 1 << 31;
/// How long one wait for a notification lasts before the health of the peers is checked again.
const SLICE: Duration = Duration::from_millis(50);

/// Channels: user messages and each collective have their own timestamps.
const USER: u32 = 0;
const BARRIER: u32 = 1;
const ALLREDUCE: u32 = 2;
const ALLTOALL: u32 = 3;

/// Sizes of a [`Comm`]'s rings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Slots per ordered pair of ranks: how many chunks may be in flight to one receiver.
    pub slots: usize,
    /// Bytes of a slot, its 32-byte header included: the chunk size of a long message.
    pub slot_bytes: usize,
}

impl Default for Options {
    /// 8 slots of 32 KiB: 256 KiB in flight per pair keeps a large transfer streaming while the
    /// receiver drains, and the segment (twice `size × slots × slot_bytes`) stays at 2 MiB for
    /// 4 ranks.
    fn default() -> Self {
        Options {
            slots: 8,
            slot_bytes: 32 * 1024,
        }
    }
}

/// A message being sent: its destination's outbox entry.
struct Outgoing {
    channel: u32,
    tag: u32,
    stamp: u64,
    data: Vec<u8>,
    /// Bytes already written to the receiver's ring.
    sent: usize,
}

/// A message being received chunk by chunk.
struct Partial {
    key: (u32, u32),
    stamp: u64,
    data: Vec<u8>,
    total: usize,
}

/// A collective that timed out: which one and how many of its steps are done.
#[derive(Clone, Copy)]
struct Pending {
    call: Collective,
    channel: u32,
    step: usize,
}

struct State {
    /// Per destination: the next timestamp of each (channel, tag).
    next_stamp: HashMap<(Rank, u32, u32), u64>,
    /// Per source: the timestamp the next delivered message of each (channel, tag) must carry.
    expect: HashMap<(Rank, u32, u32), u64>,
    /// Drained, not yet delivered: (source, channel, tag) → timestamp → message.
    arrived: HashMap<(Rank, u32, u32), BTreeMap<u64, Vec<u8>>>,
    /// Per source: the message whose chunks are arriving.
    partial: Vec<Option<Partial>>,
    /// Per source: slots it has written to our ring (as its notification says) and we took.
    written: Vec<u64>,
    taken: Vec<u64>,
    /// Per source: the count of taken slots we last told it.
    told: Vec<u64>,
    /// Per destination: the outbox, slots written there, and slots it has taken.
    outbox: Vec<VecDeque<Outgoing>>,
    pushed: Vec<u64>,
    acked: Vec<u64>,
    pending: Option<Pending>,
    /// The first disagreement the collective in progress found (a message of another call,
    /// a block of another length): its steps go on, so that every message of the call is
    /// taken, and it is returned when the call ends, also after a timeout and a resume.
    wrong: Option<Error>,
    /// Writes posted by a round whose wait for them ran out of time.
    unwaited: bool,
}

/// Two-sided messaging over one segment of a [`World`] (see the [module](self) notes).
///
/// Collective to create (every rank registers its segment). Meant for one thread: it is `Send`
/// but not `Sync`. Only a `send` that timed out leaves a message in the outbox (later calls,
/// or [`Comm::flush`], push it); dropping the `Comm` then loses it.
pub struct Comm<'w> {
    world: &'w World,
    seg: Segment<'w>,
    id: SegId,
    me: Rank,
    size: usize,
    opts: Options,
    state: RefCell<State>,
    /// The replicated mode: `me` and `size` above are then the processes'.
    repl: Option<replicated::Replicas>,
}

impl Drop for Comm<'_> {
    /// A replica goes on serving its peers' requests until they are done (see
    /// `twosided/replicated.rs`); an unreplicated `Comm` leaves at once.
    fn drop(&mut self) {
        if let Some(r) = &self.repl {
            r.leave(self);
        }
    }
}

/// Encodes a slot count as a notification value.
fn encode(n: u64) -> u32 {
    (n % WRAP) as u32 + 1
}

/// The count a notification value stands for, knowing the count is at least `known` and less
/// than `WRAP` beyond it.
fn decode(known: u64, v: u32) -> u64 {
    let v = u64::from(v) - 1;
    known + (v + WRAP - known % WRAP) % WRAP
}

/// A number from 1 to 4093 drawn from `opts`, added to the size of a `Comm`'s segment so that
/// ranks whose options differ register different sizes (see [`Comm::with_options`]).
fn options_mark(opts: Options) -> usize {
    let mut f = crate::Fingerprint::new();
    for w in [opts.slots as u64, opts.slot_bytes as u64] {
        std::hash::Hasher::write(&mut f, &w.to_le_bytes());
    }
    (std::hash::Hasher::finish(&f) % 4093) as usize + 1
}

fn remaining(deadline: Deadline) -> Option<Timeout> {
    deadline.slice(SLICE).map(Timeout::After)
}

impl<'w> Comm<'w> {
    /// Creates the communicator on segment `seg` (registered here, collectively) with the
    /// default [`Options`].
    ///
    /// # Errors
    ///
    /// As [`World::segment_timeout`], and [`Error::Setup`] when the world has more than
    /// `NOTIFICATIONS / 2` ranks (each rank uses two notifications per peer).
    pub fn new(world: &'w World, seg: SegId, timeout: Timeout) -> Result<Comm<'w>> {
        Comm::with_options(world, seg, Options::default(), timeout)
    }

    /// As [`Comm::new`] with ring sizes of one's own. Every rank must give the same options:
    /// a sender writes at the offsets its own options give. They are compared without a
    /// collective of their own (which a creation that timed out could not resume): the
    /// segment's size carries a few bytes more than the rings, a number drawn from the
    /// options, and each rank compares every peer's registered size with its own.
    ///
    /// # Errors
    ///
    /// As [`Comm::new`], and [`Error::Setup`] for no slots, a slot not larger than its header,
    /// a segment whose size overflows, or ranks that gave different options (every rank is
    /// told, and the segment is deleted again).
    pub fn with_options(
        world: &'w World,
        seg: SegId,
        opts: Options,
        timeout: Timeout,
    ) -> Result<Comm<'w>> {
        match Placement::from_env(world)? {
            Some(p) => Comm::replicated(world, seg, opts, p.replicas, timeout),
            None => Comm::physical(world, seg, opts, timeout),
        }
    }

    /// A `Comm` of `world.size() / replicas` logical ranks, each run by `replicas` processes
    /// (world ranks `l·replicas ..`), in VolpexMPI's replicated mode (see the module notes);
    /// what [`Comm::new`] does when the launcher set `TIERS_REPLICAS`. The replica timeout is
    /// `TIERS_REPLICA_TIMEOUT_MS` or 1 s.
    ///
    /// # Errors
    ///
    /// As [`Comm::with_options`], and [`Error::Setup`] when `replicas` is not in 1..=64 or
    /// does not divide the world's size, or for a malformed timeout variable.
    pub fn replicated(
        world: &'w World,
        seg: SegId,
        opts: Options,
        replicas: usize,
        timeout: Timeout,
    ) -> Result<Comm<'w>> {
        let place = Placement::of(world, replicas)?;
        let wait = replicated::timeout_from_env()?;
        let mut c = Comm::physical(world, seg, opts, timeout)?;
        if replicas > 1 {
            c.repl = Some(replicated::Replicas::new(place, wait));
        }
        Ok(c)
    }

    /// Where this process sits among the replicas (`None` when not replicated).
    pub fn placement(&self) -> Option<Placement> {
        self.repl.as_ref().map(replicated::Replicas::placement)
    }

    /// What this process knows of every replica, per logical rank (one `Alive` entry per rank
    /// when not replicated).
    pub fn state(&self) -> Vec<Vec<ReplicaState>> {
        match &self.repl {
            Some(r) => r.state(),
            None => vec![vec![ReplicaState::Alive]; self.size],
        }
    }

    fn physical(world: &'w World, seg: SegId, opts: Options, timeout: Timeout) -> Result<Comm<'w>> {
        let size = world.size();
        if size > NOTIFICATIONS / 2 {
            return Err(Error::Setup(format!(
                "two-sided messaging needs 2 notifications per rank: {size} ranks > {}",
                NOTIFICATIONS / 2
            )));
        }
        if opts.slots == 0 || opts.slot_bytes <= HEADER || opts.slots as u64 >= WRAP {
            return Err(Error::Setup(format!(
                "two-sided rings need slots in 1..2^31 and slots over {HEADER} bytes, not {opts:?}"
            )));
        }
        let bytes = size
            .checked_mul(2)
            .and_then(|x| x.checked_mul(opts.slots))
            .and_then(|x| x.checked_mul(opts.slot_bytes))
            .and_then(|x| x.checked_add(options_mark(opts)))
            .ok_or_else(|| Error::Setup(format!("two-sided segment size overflows: {opts:?}")))?;
        let deadline = timeout.deadline();
        let segment = world.segment_timeout(seg, bytes, timeout)?;
        // A peer's size of 0 (or none) is a process that has left (a stand-in): not compared.
        let other = (0..size)
            .find(|&r| matches!(world.segment_size(seg, r), Ok(n) if n != 0 && n != bytes));
        if let Some(r) = other {
            drop(segment);
            let _ = world.segment_delete(seg, deadline.left());
            return Err(Error::Setup(format!(
                "two-sided messaging: rank {r} gave other ring options than this rank's {opts:?} \
                 (every rank must give the same)"
            )));
        }
        Ok(Comm {
            world,
            seg: segment,
            id: seg,
            me: world.rank(),
            size,
            opts,
            state: RefCell::new(State {
                next_stamp: HashMap::new(),
                expect: HashMap::new(),
                arrived: HashMap::new(),
                partial: (0..size).map(|_| None).collect(),
                written: vec![0; size],
                taken: vec![0; size],
                told: vec![0; size],
                outbox: (0..size).map(|_| VecDeque::new()).collect(),
                pushed: vec![0; size],
                acked: vec![0; size],
                pending: None,
                wrong: None,
                unwaited: false,
            }),
            repl: None,
        })
    }

    /// This rank (the logical rank when replicated).
    pub fn rank(&self) -> Rank {
        self.repl.as_ref().map_or(self.me, |r| r.placement().rank)
    }

    /// Number of ranks (logical ranks when replicated).
    pub fn size(&self) -> usize {
        self.repl
            .as_ref()
            .map_or(self.size, |r| r.placement().ranks)
    }

    /// The world underneath.
    pub fn world(&self) -> &'w World {
        self.world
    }

    fn check_rank(&self, rank: Rank) -> Result<()> {
        if rank >= self.size {
            return Err(Error::NoSuchRank {
                rank,
                size: self.size,
            });
        }
        Ok(())
    }

    fn payload(&self) -> usize {
        self.opts.slot_bytes - HEADER
    }

    /// Offset of slot `i` of the ring from `src` (in this rank's segment, or the same offset in
    /// `src`'s target's).
    fn ring_slot(&self, src: Rank, i: u64) -> usize {
        (src * self.opts.slots + (i % self.opts.slots as u64) as usize) * self.opts.slot_bytes
    }

    fn stage_slot(&self, dst: Rank, i: u64) -> usize {
        ((self.size + dst) * self.opts.slots + (i % self.opts.slots as u64) as usize)
            * self.opts.slot_bytes
    }

    /// Sends `data` to `dest` with `tag`: the message is copied into this rank's outbox, and
    /// the call returns once all of it has reached the receiver's ring (the receiver takes it
    /// whenever it next calls into its `Comm`). While it waits for credit it drains its own
    /// rings, so two ranks sending to each other first do not deadlock.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchRank`], [`Error::PeerFailed`] when `dest` has failed, [`Error::Timeout`]
    /// when the receiver did not make room in time (the message stays queued and leaves during
    /// later calls; [`Comm::flush`] waits for it), and the errors of the one-sided calls
    /// underneath.
    pub fn send(&self, dest: Rank, tag: u32, data: &[u8], timeout: Timeout) -> Result<()> {
        if let Some(r) = &self.repl {
            return r.send(self, dest, tag, data);
        }
        self.check_rank(dest)?;
        self.post(dest, USER, tag, data.to_vec())?;
        self.flush(timeout)
    }

    fn post(&self, dest: Rank, channel: u32, tag: u32, data: Vec<u8>) -> Result<()> {
        if self.world.health(dest)?.is_gone() {
            return Err(Error::PeerFailed(dest));
        }
        let mut st = self.state.borrow_mut();
        let stamp = st.next_stamp.entry((dest, channel, tag)).or_insert(0);
        let s = *stamp;
        *stamp += 1;
        st.outbox[dest].push_back(Outgoing {
            channel,
            tag,
            stamp: s,
            data,
            sent: 0,
        });
        Ok(())
    }

    /// Receives the next message with `tag` from `src` into `buf`; returns its length. A
    /// message longer than `buf` stays queued.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchRank`], [`Error::BufferTooSmall`], [`Error::Timeout`] when none came in
    /// time (calling again resumes), [`Error::PeerFailed`] when `src` failed before sending
    /// it, and the errors of the one-sided calls underneath.
    pub fn recv(&self, src: Rank, tag: u32, buf: &mut [u8], timeout: Timeout) -> Result<usize> {
        let take = |m: &[u8]| {
            if m.len() > buf.len() {
                return Err(Error::BufferTooSmall {
                    need: m.len(),
                    have: buf.len(),
                });
            }
            buf[..m.len()].copy_from_slice(m);
            Ok(m.len())
        };
        if let Some(r) = &self.repl {
            return r.recv(self, src, tag, timeout, take);
        }
        self.check_rank(src)?;
        self.receive(src, USER, tag, timeout.deadline(), take)
    }

    /// As [`Comm::recv`], into a vector of the message's length.
    ///
    /// # Errors
    ///
    /// As [`Comm::recv`] (no `BufferTooSmall`).
    pub fn recv_vec(&self, src: Rank, tag: u32, timeout: Timeout) -> Result<Vec<u8>> {
        if let Some(r) = &self.repl {
            return r.recv(self, src, tag, timeout, |m| Ok(m.to_vec()));
        }
        self.check_rank(src)?;
        self.receive(src, USER, tag, timeout.deadline(), |m| Ok(m.to_vec()))
    }

    /// Waits for the next message of (`src`, `channel`, `tag`) and hands it to `take`, which may
    /// refuse it (it then stays queued).
    fn receive<R>(
        &self,
        src: Rank,
        channel: u32,
        tag: u32,
        deadline: Deadline,
        mut take: impl FnMut(&[u8]) -> Result<R>,
    ) -> Result<R> {
        loop {
            {
                let mut st = self.state.borrow_mut();
                let st = &mut *st;
                let key = (src, channel, tag);
                let want = *st.expect.get(&key).unwrap_or(&0);
                if let Some(q) = st.arrived.get_mut(&key) {
                    if let Some(m) = q.get(&want) {
                        let r = take(m)?;
                        q.remove(&want);
                        if q.is_empty() {
                            st.arrived.remove(&key);
                        }
                        st.expect.insert(key, want + 1);
                        return Ok(r);
                    }
                }
            }
            // Whether the source was gone before the drain: then what it sent has been drained.
            let gone = self.world.health(src)?.is_gone();
            self.progress(deadline)?;
            if self.has(src, channel, tag) {
                continue;
            }
            if gone {
                return Err(Error::PeerFailed(src));
            }
            self.wait(deadline)?;
        }
    }

    /// Waits for a notification of this communicator's segment (or the end of a slice).
    fn wait(&self, deadline: Deadline) -> Result<()> {
        let Some(t) = remaining(deadline) else {
            return Err(Error::Timeout);
        };
        match self.world.notify_waitsome(self.id, 0..2 * self.size, t) {
            Ok(_) | Err(Error::Timeout) => Ok(()),
            // Another rank failed: the wait cannot sleep on notifications any more, so it
            // naps; the caller checks the ranks it needs.
            Err(Error::PeerFailed(_)) => {
                if let Timeout::After(d) = t {
                    std::thread::sleep(d.min(Backoff::SLEEP_MAX));
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn has(&self, src: Rank, channel: u32, tag: u32) -> bool {
        let st = self.state.borrow();
        let key = (src, channel, tag);
        let want = *st.expect.get(&key).unwrap_or(&0);
        st.arrived.get(&key).is_some_and(|q| q.contains_key(&want))
    }

    /// Waits until every message sent has reached its receiver's ring (the receivers must be
    /// calling into their `Comm`s to drain them).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] (calling again resumes), [`Error::PeerFailed`] when a receiver failed,
    /// and the errors of the one-sided calls underneath.
    pub fn flush(&self, timeout: Timeout) -> Result<()> {
        if let Some(r) = &self.repl {
            return r.flush(self);
        }
        let deadline = timeout.deadline();
        loop {
            self.progress(deadline)?;
            let busy: Vec<Rank> = {
                let st = self.state.borrow();
                (0..self.size)
                    .filter(|&d| !st.outbox[d].is_empty())
                    .collect()
            };
            if busy.is_empty() {
                // Every message is posted: once the writes have completed at their targets,
                // every message has reached its receiver's ring.
                let q = self.world.queue(0)?;
                return match q.wait(deadline.left()) {
                    Ok(()) => {
                        self.state.borrow_mut().unwaited = false;
                        Ok(())
                    }
                    Err(e) => Err(e),
                };
            }
            for d in busy {
                if self.world.health(d)?.is_gone() {
                    return Err(Error::PeerFailed(d));
                }
            }
            self.wait(deadline)?;
        }
    }

    /// One round of the progress engine: read the notifications, drain the rings, return
    /// credit, push the outboxes. Never waits beyond the queue's completion, nor beyond
    /// `deadline`: writes that have not completed by then are waited for at the start of the
    /// next round's push (their staging slots are not reused before), and the round returns
    /// without pushing more. So a timeout never interrupts a round half-way, and a step of a
    /// collective that posted is never taken for one that did not.
    fn progress(&self, deadline: Deadline) -> Result<()> {
        let mut st = self.state.borrow_mut();
        let st = &mut *st;
        let p = self.size;
        for r in 0..p {
            let v = self.world.notify_reset(self.id, r)?;
            if v != 0 {
                st.written[r] = decode(st.written[r], v).max(st.written[r]);
            }
            let v = self.world.notify_reset(self.id, p + r)?;
            if v != 0 {
                st.acked[r] = decode(st.acked[r], v).max(st.acked[r]);
            }
        }
        let q = self.world.queue(0)?;
        let mut posted = false;
        // Drain.
        let mut header = [0u8; HEADER];
        for src in 0..p {
            while st.taken[src] < st.written[src] {
                let off = self.ring_slot(src, st.taken[src]);
                self.seg.read(off, &mut header)?;
                let word = |i: usize| {
                    u64::from_le_bytes(header[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]))
                };
                let (ct, stamp, total, chunk) = (word(0), word(1), word(2), word(3));
                let key = ((ct >> 32) as u32, ct as u32);
                let total = usize::try_from(total).map_err(|_| Error::Protocol {
                    from: Some(src),
                    what: format!("a message of {total} bytes").into(),
                })?;
                let chunk = (chunk as usize).min(self.payload());
                let part = st.partial[src].get_or_insert_with(|| Partial {
                    key,
                    stamp,
                    data: Vec::new(),
                    total,
                });
                if part.data.is_empty() && part.total > 0 {
                    part.data
                        .try_reserve_exact(part.total)
                        .map_err(|_| Error::OutOfMemory {
                            what: format!("a message from rank {src}").into(),
                            bytes: total as u64,
                        })?;
                }
                let at = part.data.len();
                let end = (at + chunk).min(part.total);
                part.data.resize(end, 0);
                self.seg.read(off + HEADER, &mut part.data[at..end])?;
                st.taken[src] += 1;
                if part.data.len() >= part.total {
                    if let Some(done) = st.partial[src].take() {
                        st.arrived
                            .entry((src, done.key.0, done.key.1))
                            .or_default()
                            .insert(done.stamp, done.data);
                    }
                }
            }
            // Credit, where the queue has room for it (a round that ran out of time may have
            // left it full: the credit then goes in a later round).
            if st.taken[src] != st.told[src]
                && (q.posted() < self.world.depth || Self::complete(&q, deadline)?)
            {
                let note = Notification {
                    id: p + self.me,
                    value: encode(st.taken[src]),
                };
                // A sender that has left needs no credit.
                match q.notify(src, self.id, note) {
                    Ok(()) => posted = true,
                    Err(Error::PeerFailed(r)) if r == src => {}
                    Err(e) => return Err(e),
                }
                st.told[src] = st.taken[src];
            }
        }
        // Push, once the writes of the rounds before have completed.
        if st.unwaited && !Self::complete(&q, deadline)? {
            return Ok(());
        }
        st.unwaited = false;
        let slots = self.opts.slots as u64;
        let payload = self.payload();
        for dst in 0..p {
            while let Some(m) = st.outbox[dst].front_mut() {
                if st.pushed[dst] - st.acked[dst] >= slots {
                    break;
                }
                if q.posted() + 2 > self.world.depth && !Self::complete(&q, deadline)? {
                    st.unwaited = true;
                    return Ok(());
                }
                let n = st.pushed[dst];
                let chunk = (m.data.len() - m.sent).min(payload);
                let stage = self.stage_slot(dst, n);
                let mut h = [0u8; HEADER];
                h[0..8].copy_from_slice(
                    &((u64::from(m.channel) << 32) | u64::from(m.tag)).to_le_bytes(),
                );
                h[8..16].copy_from_slice(&m.stamp.to_le_bytes());
                h[16..24].copy_from_slice(&(m.data.len() as u64).to_le_bytes());
                h[24..32].copy_from_slice(&(chunk as u64).to_le_bytes());
                self.seg.write(stage, &h)?;
                self.seg
                    .write(stage + HEADER, &m.data[m.sent..m.sent + chunk])?;
                let note = Notification {
                    id: self.me,
                    value: encode(n + 1),
                };
                q.write_notify(
                    self.id.at(stage),
                    self.id.on(dst, self.ring_slot(self.me, n)),
                    HEADER + chunk,
                    note,
                )?;
                posted = true;
                st.pushed[dst] = n + 1;
                m.sent += chunk;
                if m.sent >= m.data.len() {
                    st.outbox[dst].pop_front();
                }
            }
        }
        if posted {
            // The staging slots are reused only after the writes from them have completed.
            st.unwaited = !Self::complete(&q, deadline)?;
        }
        Ok(())
    }

    /// Waits until `deadline` for the writes on queue `q` to complete locally (their staging
    /// slots may be written again): whether they did. Local completion needs nothing of the
    /// targets, so even a test can succeed (a full wait may need every target's answer).
    fn complete(q: &crate::Queue<'_>, deadline: Deadline) -> Result<bool> {
        match q.wait_local(deadline.left()) {
            Ok(()) => Ok(true),
            Err(Error::Timeout) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Runs the steps `start..steps` of a collective, remembering how far it got on a timeout.
    fn collective(
        &self,
        call: Collective,
        channel: u32,
        steps: usize,
        deadline: Deadline,
        mut step: impl FnMut(usize) -> Result<()>,
    ) -> Result<()> {
        let pending = self.state.borrow().pending;
        let start = match pending {
            None => {
                self.state.borrow_mut().wrong = None;
                0
            }
            Some(p) if p.call == call && p.channel == channel => p.step,
            Some(p) => return Err(Error::mismatch(call, p.call, self.me)),
        };
        for s in start..steps {
            match step(s) {
                Ok(()) => {}
                Err(Error::Timeout) => {
                    self.state.borrow_mut().pending = Some(Pending {
                        call,
                        channel,
                        step: s,
                    });
                    return Err(Error::Timeout);
                }
                Err(e) => {
                    let mut st = self.state.borrow_mut();
                    st.pending = None;
                    st.wrong = None;
                    return Err(e);
                }
            }
        }
        // Everything this rank sent in the collective leaves before it returns (its receivers
        // drain while they are in the collective, and leave it only after taking it).
        match self.flush(deadline.left()) {
            Err(Error::Timeout) => {
                self.state.borrow_mut().pending = Some(Pending {
                    call,
                    channel,
                    step: steps,
                });
                Err(Error::Timeout)
            }
            r => {
                let mut st = self.state.borrow_mut();
                st.pending = None;
                // A disagreement found on the way is the call's answer once it has taken
                // every message.
                match (r, st.wrong.take()) {
                    (Ok(()), Some(e)) => Err(e),
                    (r, _) => r,
                }
            }
        }
    }

    /// Collective barrier over messages (dissemination: ⌈log₂ size⌉ rounds), so that ranks
    /// waiting in it keep draining and pushing. After `Err(Timeout)`, calling it again resumes.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`], [`Error::PeerFailed`], [`Error::CollectiveMismatch`] when this rank
    /// has another collective of this `Comm` pending after a timeout.
    pub fn barrier(&self, timeout: Timeout) -> Result<()> {
        if let Some(r) = &self.repl {
            return r.barrier(self, timeout);
        }
        let deadline = timeout.deadline();
        let (me, p) = (self.me, self.size);
        let rounds = (usize::BITS - (p - 1).leading_zeros()) as usize;
        self.collective(Collective::Barrier, BARRIER, 2 * rounds, deadline, |s| {
            let dist = 1usize << (s / 2);
            if s % 2 == 0 {
                self.post((me + dist) % p, BARRIER, (s / 2) as u32, Vec::new())?;
                self.progress(deadline)
            } else {
                self.receive(
                    (me + p - dist) % p,
                    BARRIER,
                    (s / 2) as u32,
                    deadline,
                    |_| Ok(()),
                )
            }
        })
    }

    /// Collective: `output[i] = op over all ranks of input[i]`. Every rank's input goes to every
    /// rank, which folds them in rank order: a float sum has the same bits everywhere. After
    /// `Err(Timeout)`, calling it again with the same arguments resumes.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] when `input` and `output` differ in length;
    /// [`Error::CollectiveMismatch`] when another rank's call has another length, type or
    /// operation (every rank of such a call is told, once it has taken every message of
    /// it); and as [`Comm::barrier`].
    pub fn allreduce<T: Reducible>(
        &self,
        input: &[T],
        output: &mut [T],
        op: Op,
        timeout: Timeout,
    ) -> Result<()> {
        if input.len() != output.len() {
            return Err(Error::LengthMismatch {
                input: input.len(),
                output: output.len(),
            });
        }
        if let Some(r) = &self.repl {
            return r.allreduce(self, input, output, op, timeout);
        }
        let deadline = timeout.deadline();
        let (me, p) = (self.me, self.size);
        let call = Collective::Allreduce {
            len: input.len(),
            ty: T::TYPE,
            op,
        };
        let ty: DataType = T::TYPE;
        let bytes = as_bytes(input);
        let out = as_bytes_mut(output);
        // Each message carries the call (operation, type, length), which its receiver
        // compares with its own: ranks that disagree all get an error rather than results
        // that differ. A message that does not match is taken all the same, and the call goes
        // on taking the others: left queued, they would be the next allreduce's.
        self.collective(call, ALLREDUCE, 1 + p, deadline, |s| {
            if s == 0 {
                let mut msg = call.word().to_le_bytes().to_vec();
                msg.extend_from_slice(bytes);
                for d in (0..p).filter(|&d| d != me) {
                    self.post(d, ALLREDUCE, 0, msg.clone())?;
                }
                return self.progress(deadline);
            }
            let src = s - 1;
            if src == me {
                if src == 0 {
                    out.copy_from_slice(bytes);
                } else {
                    combine(ty, op, out, bytes);
                }
                return Ok(());
            }
            let mut wrong = None;
            self.receive(src, ALLREDUCE, 0, deadline, |m| {
                let theirs = m
                    .get(..CALL_HEADER)
                    .and_then(|h| h.try_into().ok())
                    .map(|h| Collective::from_word(u64::from_le_bytes(h)));
                let data = m.get(CALL_HEADER..).unwrap_or_default();
                match theirs {
                    Some(t) if t == call && data.len() == out.len() => {}
                    Some(t) => {
                        wrong = Some(Error::mismatch(call, t, src));
                        return Ok(());
                    }
                    None => {
                        wrong = Some(Error::mismatch(call, Collective::Unknown, src));
                        return Ok(());
                    }
                }
                if src == 0 {
                    out.copy_from_slice(data);
                } else {
                    combine(ty, op, out, data);
                }
                Ok(())
            })?;
            self.found_wrong(wrong);
            Ok(())
        })
    }

    /// Collective: block `d` of `send` (`send.len() / size` elements) goes to rank `d`, block
    /// `s` of `recv` comes from rank `s`.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] when `send` and `recv` differ in length or are not a multiple
    /// of the size, and as [`Comm::alltoallv`].
    pub fn alltoall<T: Pod>(&self, send: &[T], recv: &mut [T], timeout: Timeout) -> Result<()> {
        let p = self.size();
        if send.len() != recv.len() || send.len() % p != 0 {
            return Err(Error::LengthMismatch {
                input: send.len(),
                output: recv.len(),
            });
        }
        let counts = vec![send.len() / p; p];
        self.alltoallv(send, &counts, recv, &counts, timeout)
    }

    /// Collective: the `send_counts[d]` elements of `send` after those of ranks `0..d` go to
    /// rank `d`; `recv` gets `recv_counts[s]` elements from each rank `s`, in rank order. After
    /// `Err(Timeout)`, calling it again with the same arguments resumes.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`] when a count list is not one per rank, the counts do not add
    /// up to the buffer's length, or a rank sent other than `recv_counts` says;
    /// [`Error::Timeout`], [`Error::PeerFailed`], [`Error::CollectiveMismatch`] as for
    /// [`Comm::barrier`].
    pub fn alltoallv<T: Pod>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        timeout: Timeout,
    ) -> Result<()> {
        let p = self.size();
        let sum = |c: &[usize]| c.iter().try_fold(0usize, |a, &x| a.checked_add(x));
        if send_counts.len() != p || recv_counts.len() != p {
            return Err(Error::LengthMismatch {
                input: send_counts.len(),
                output: p,
            });
        }
        if sum(send_counts) != Some(send.len()) || sum(recv_counts) != Some(recv.len()) {
            return Err(Error::LengthMismatch {
                input: send.len(),
                output: recv.len(),
            });
        }
        let elem = std::mem::size_of::<T>();
        let starts = |c: &[usize]| {
            c.iter()
                .scan(0usize, |a, &x| {
                    let s = *a;
                    *a += x;
                    Some(s * elem)
                })
                .collect::<Vec<_>>()
        };
        let (soff, roff) = (starts(send_counts), starts(recv_counts));
        if let Some(r) = &self.repl {
            return r.alltoallv(
                self,
                send,
                &soff,
                send_counts,
                recv,
                &roff,
                recv_counts,
                timeout,
            );
        }
        let deadline = timeout.deadline();
        let me = self.me;
        let sbytes = as_bytes(send);
        let rbytes = as_bytes_mut(recv);
        // A block of the wrong length, this rank's own included, is an error when the call
        // ends; its steps go on all the same, so that every rank sends and takes every block
        // (an error at one rank alone would leave the others waiting for its blocks, or one
        // exchange ahead).
        self.collective(Collective::Unknown, ALLTOALL, p, deadline, |s| {
            if s == 0 {
                for i in 1..p {
                    let d = (me + i) % p;
                    let (a, n) = (soff[d], send_counts[d] * elem);
                    self.post(d, ALLTOALL, 0, sbytes[a..a + n].to_vec())?;
                }
                let (a, n) = (soff[me], send_counts[me] * elem);
                let (b, m) = (roff[me], recv_counts[me] * elem);
                if n == m {
                    rbytes[b..b + m].copy_from_slice(&sbytes[a..a + n]);
                } else {
                    self.found_wrong(Some(Error::LengthMismatch {
                        input: send_counts[me],
                        output: recv_counts[me],
                    }));
                }
                return self.progress(deadline);
            }
            let src = (me + p - s) % p;
            let (b, m) = (roff[src], recv_counts[src] * elem);
            let mut wrong = None;
            self.receive(src, ALLTOALL, 0, deadline, |msg| {
                if msg.len() != m {
                    wrong = Some(Error::LengthMismatch {
                        input: msg.len() / elem.max(1),
                        output: m / elem.max(1),
                    });
                    return Ok(());
                }
                rbytes[b..b + m].copy_from_slice(msg);
                Ok(())
            })?;
            self.found_wrong(wrong);
            Ok(())
        })
    }

    /// Keeps the first disagreement of the collective in progress (see `State::wrong`).
    fn found_wrong(&self, e: Option<Error>) {
        if let Some(e) = e {
            self.state.borrow_mut().wrong.get_or_insert(e);
        }
    }
}

/// Bytes of the call ahead of an allreduce's data: its [`Collective::word`].
const CALL_HEADER: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_survive_the_wrap() {
        for known in [0, 5, WRAP - 3, WRAP, 3 * WRAP + 17] {
            for ahead in [0, 1, 7, 1000] {
                assert_eq!(decode(known, encode(known + ahead)), known + ahead);
            }
        }
    }
}

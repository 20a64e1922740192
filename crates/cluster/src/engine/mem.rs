//! The shared-memory engine core, common to `local` (threads) and `shm` (processes).
//!
//! Every rank maps every segment of every rank, so a write is one copy into the peer's memory,
//! a notification one release-store plus a futex wake-up when someone sleeps, an atomic one
//! hardware atomic, and the collectives run over the job control block ([`ctl`]). The two
//! engines differ only in where the memory comes from ([`Backing`]).

use super::ctl::{self, Ctl, Line, SegHeader, SEG_HEADER};
use super::{Engine, KeepAlive, Transfer};
use crate::collective::{fold_in_order, Collective, DataType, Op};
use crate::config::{
    self, FAST_REDUCE_MAX, FAST_REDUCE_RANKS, HEALTH_SLICE, MAX_SEGMENTS, NOTIFICATIONS,
    PASSIVE_MAX, PASSIVE_SLOTS, REDUCE_CHUNK,
};
use crate::error::{Error, Rank, Result};
use crate::health::Health;
use crate::sys::{self, Mapping};
use crate::timeout::{Deadline, Timeout};
use crate::wait::{Naps, Pace};
use std::io;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Worlds of more ranks than this arrive at the barrier through a combining tree
/// ([`MemEngine::combine`]); smaller ones at the one counter (fewer steps).
const COMBINE_MIN: usize = 8;

/// The arrivals bits of a barrier counter.
const COUNT_MASK: u64 = (1 << ctl::COUNT_BITS) - 1;

mod fast_reduce;
mod tolerant;

/// Where the memory of a job lives.
pub(crate) trait Backing: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    fn ctl(&self) -> Ctl;
    /// Creates segment `seg` of `rank`, `len` zero bytes (header included).
    fn create_segment(&self, seg: u32, rank: Rank, len: usize) -> io::Result<Arc<Mapping>>;
    /// Maps segment `seg` of `rank`.
    fn open_segment(&self, seg: u32, rank: Rank) -> io::Result<Arc<Mapping>>;
    /// Removes segment `seg` of `rank` (existing mappings stay valid).
    fn remove_segment(&self, seg: u32, rank: Rank);
    /// Whether ranks are processes whose pids can be probed.
    fn processes(&self) -> bool;
}

struct SegTable {
    maps: Vec<Arc<Mapping>>,
    sizes: Vec<usize>,
}

impl SegTable {
    #[inline]
    fn data(&self, r: Rank) -> *mut u8 {
        // SAFETY: every mapping is SEG_HEADER + size bytes long.
        unsafe { self.maps[r].ptr().add(SEG_HEADER) }
    }

    #[inline]
    fn header(&self, r: Rank) -> &SegHeader {
        // SAFETY: the mapping starts with a SegHeader (page-aligned, zero-initialised) and
        // lives as long as &self.
        unsafe { &*(self.maps[r].ptr() as *const SegHeader) }
    }

    #[inline]
    fn check(&self, r: Rank, seg: u32, offset: usize, len: usize) -> Result<*mut u8> {
        let size = self.sizes[r];
        match offset.checked_add(len) {
            Some(end) if end <= size => {
                // SAFETY: offset <= size, inside the mapping.
                Ok(unsafe { self.data(r).add(offset) })
            }
            _ => Err(Error::OutOfBounds {
                rank: r,
                seg,
                offset,
                len,
                size,
            }),
        }
    }
}

enum SegSlot {
    Empty,
    Pending(Arc<Mapping>, usize),
    Ready(Arc<SegTable>),
}

#[derive(Default)]
struct Coll {
    barrier_pending: Option<u32>,
    reduce_seq: u64,
    reduce_next: Option<usize>,
    /// Number of small (one-line) allreduces this rank entered.
    fast_seq: u64,
    /// A small allreduce whose input is published and whose wait timed out.
    fast_pending: bool,
    /// Collectives this rank entered (the index of `RankCtl.calls`).
    calls: u64,
    /// The call that did not complete (timed out, or a peer failed): only it may be called
    /// next, to resume it.
    pending: Option<u64>,
    /// A small allreduce that found another rank in a barrier-based call of the same index,
    /// withdrew its input and arrived at that barrier (so that it completes, as a mismatch);
    /// the wait for it is what remains.
    joined: bool,
}

impl Coll {
    fn busy(&self) -> bool {
        self.barrier_pending.is_some()
            || self.reduce_next.is_some()
            || self.fast_pending
            || self.joined
    }
}

pub(crate) struct MemEngine<B: Backing> {
    b: B,
    ctl: Ctl,
    rank: Rank,
    size: usize,
    /// Creation and deletion state (slow path).
    segs: RwLock<Vec<SegSlot>>,
    /// The ready tables, for the lock-free fast path: `Arc::as_ptr` of the table in `segs` (or,
    /// once deleted, in `graveyard`), null when not ready. Tables are never freed before the
    /// engine, so a pointer loaded here stays valid while `&self` lives.
    ready: Box<[AtomicPtr<SegTable>]>,
    /// Tables of deleted segments (their shm objects are already unlinked).
    graveyard: Mutex<Vec<Arc<SegTable>>>,
    coll: Mutex<Coll>,
    /// How long a waiter busy-polls before it sleeps.
    spin: Duration,
    last_probe: Mutex<Instant>,
    /// Whether a call other than the pending one is refused as a mismatch with this rank
    /// itself. Off for the host-local engine inside the `mpi` engine with several hosts: there
    /// its collectives are steps of the hierarchical ones, which the `mpi` engine guards, and a
    /// resumed step may continue under other arguments (as before the check existed).
    pub(crate) strict_calls: bool,
    /// Replicas per logical rank (`engine/replicas.rs`): above 1 the barrier-based
    /// collectives tolerate a covered dead process (`mem/tolerant.rs`).
    replicas: usize,
    /// How long those wait for a replica that lags behind one of its rank's before they
    /// leave it behind (`engine/replicas.rs`).
    left_behind_after: Duration,
}

fn ring(l: &Line) {
    ring_by(l, 1);
}

fn ring_by(l: &Line, n: u32) {
    l.v.fetch_add(n, Ordering::SeqCst);
    if l.waiters.load(Ordering::SeqCst) != 0 {
        sys::futex_wake_all(&l.v);
    }
}

impl<B: Backing> MemEngine<B> {
    /// Moves this rank's part of the ready segment `seg` into `m` (zeroed, at least as long),
    /// header included: for a host of one rank whose segment memory an MPI window allocates
    /// (the `mpi` engine with every rank its own host, where `MPI_Win_allocate` lets MPI use
    /// its fastest one-sided path). No other process maps the old memory (the host has no
    /// other rank); a thread of this one that reached it through the old table keeps it alive
    /// (the table goes to the graveyard), but writes it makes there are lost: the segment is
    /// not the program's until its creation returns.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn segment_adopt(&self, seg: u32, m: Arc<Mapping>) -> Result<()> {
        let mut s = self.segs.write().unwrap_or_else(|e| e.into_inner());
        let old = self.table(&s, seg, self.rank)?;
        let size = old.sizes[self.rank];
        if self.size != 1 || m.len() < SEG_HEADER + size || m.ptr() as usize % 64 != 0 {
            return Err(Error::Setup(format!(
                "segment {seg}: cannot move {size} bytes of a host of {} ranks into {} bytes at {:p}",
                self.size,
                m.len(),
                m.ptr()
            )));
        }
        // SAFETY: both mappings hold at least SEG_HEADER bytes and are distinct; the header's
        // words are not changing (the segment's creation has not returned).
        unsafe { std::ptr::copy_nonoverlapping(old.maps[self.rank].ptr(), m.ptr(), SEG_HEADER) };
        let mut maps = old.maps.clone();
        maps[self.rank] = m;
        let t = Arc::new(SegTable {
            maps,
            sizes: old.sizes.clone(),
        });
        self.ready[seg as usize].store(Arc::as_ptr(&t) as *mut SegTable, Ordering::Release);
        s[seg as usize] = SegSlot::Ready(t);
        self.graveyard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(old);
        Ok(())
    }

    /// Joins the job as `rank`: marks it healthy and records its pid.
    pub(crate) fn new(b: B, rank: Rank) -> Self {
        let ctl = b.ctl();
        let size = ctl.n();
        let cpus = config::job_cpus();
        let me = ctl.rank(rank);
        me.pid.store(sys::getpid(), Ordering::Relaxed);
        me.state.v.store(ctl::ST_HEALTHY, Ordering::Release);
        MemEngine {
            b,
            ctl,
            rank,
            size,
            segs: RwLock::new((0..MAX_SEGMENTS).map(|_| SegSlot::Empty).collect()),
            ready: (0..MAX_SEGMENTS)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            graveyard: Mutex::new(Vec::new()),
            coll: Mutex::new(Coll::default()),
            // Spinning only pays when every rank has a core of its own.
            spin: if size <= cpus {
                config::SPIN
            } else {
                Duration::ZERO
            },
            last_probe: Mutex::new(Instant::now()),
            strict_calls: true,
            replicas: 1,
            left_behind_after: config::REPLICA_TIMEOUT,
        }
    }

    /// Sets how long waiters busy-poll before they sleep (for an engine that knows better than
    /// this process's affinity mask whether every rank of the host has a core of its own).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn set_spin(&mut self, spin: Duration) {
        self.spin = spin;
    }

    /// Sets the replicas per logical rank of a replicated job (`engine/replicas.rs`).
    pub(crate) fn set_replicas(&mut self, replicas: usize, left_behind_after: Duration) {
        self.replicas = replicas.max(1);
        self.left_behind_after = left_behind_after;
    }

    /// The job's control block.
    #[cfg(test)]
    pub(crate) fn ctl(&self) -> Ctl {
        self.ctl
    }

    fn state(&self, r: Rank) -> u32 {
        self.ctl.rank(r).state.v.load(Ordering::Acquire)
    }

    #[inline]
    fn peer_ok(&self, r: Rank) -> Result<()> {
        match self.state(r) {
            ctl::ST_FAILED | ctl::ST_EXITED if r != self.rank => Err(Error::PeerFailed(r)),
            _ => Ok(()),
        }
    }

    /// The first rank that failed (or, with `exited`, also one that left).
    fn gone(&self, exited: bool) -> Option<Rank> {
        (0..self.size).find(|&r| {
            r != self.rank
                && match self.state(r) {
                    ctl::ST_FAILED => true,
                    ctl::ST_EXITED => exited,
                    _ => false,
                }
        })
    }

    /// Marks peers whose process no longer exists as failed (at most once per slice).
    fn probe(&self) {
        if !self.b.processes() {
            return;
        }
        {
            let mut last = self.last_probe.lock().unwrap_or_else(|e| e.into_inner());
            if last.elapsed() < HEALTH_SLICE {
                return;
            }
            *last = Instant::now();
        }
        for r in (0..self.size).filter(|&r| r != self.rank) {
            let rc = self.ctl.rank(r);
            let pid = rc.pid.load(Ordering::Relaxed);
            if rc.state.v.load(Ordering::Acquire) == ctl::ST_HEALTHY && !sys::pid_alive(pid) {
                let _ = rc.state.v.compare_exchange(
                    ctl::ST_HEALTHY,
                    ctl::ST_FAILED,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                );
            }
        }
    }

    /// Waits on `word` until `ready()`; spins first when cores suffice, then sleeps in slices,
    /// re-checking `gone()` (a peer the wait depends on has failed) after every wake-up.
    fn wait_until(
        &self,
        word: &Line,
        deadline: Deadline,
        mut ready: impl FnMut() -> bool,
        gone: impl Fn() -> Option<Error>,
    ) -> Result<()> {
        if ready() {
            return Ok(());
        }
        // Busy-poll first (the GASPI way: latency), but only for a bounded time, only when
        // every rank has a core, and not for a test; then sleep.
        let spin = match deadline {
            Deadline::Now => Duration::ZERO,
            _ => self.spin,
        };
        let mut pace = Pace::new(spin, Duration::ZERO, Naps::fixed(HEALTH_SLICE));
        while pace.busy() {
            if ready() {
                return Ok(());
            }
        }
        loop {
            let s = word.v.load(Ordering::SeqCst);
            if ready() {
                return Ok(());
            }
            if let Some(e) = gone() {
                // A peer may do its part (say, arrive last at a barrier) and leave between
                // `ready` above and `gone`: what it did before leaving counts.
                return if ready() { Ok(()) } else { Err(e) };
            }
            let Some(slice) = pace.nap(deadline) else {
                self.probe();
                if ready() {
                    return Ok(());
                }
                return Err(gone().unwrap_or(Error::Timeout));
            };
            word.waiters.fetch_add(1, Ordering::SeqCst);
            if ready() {
                word.waiters.fetch_sub(1, Ordering::SeqCst);
                return Ok(());
            }
            sys::futex_wait(&word.v, s, slice);
            word.waiters.fetch_sub(1, Ordering::SeqCst);
            self.probe();
        }
    }

    fn table(&self, slots: &[SegSlot], seg: u32, rank: Rank) -> Result<Arc<SegTable>> {
        match slots.get(seg as usize) {
            Some(SegSlot::Ready(t)) => Ok(t.clone()),
            _ => Err(Error::NoSuchSegment { seg, rank }),
        }
    }

    /// The ready table of `seg`, without locks.
    #[inline]
    fn ready(&self, seg: u32, rank: Rank) -> Result<&SegTable> {
        let p = match self.ready.get(seg as usize) {
            Some(a) => a.load(Ordering::Acquire),
            None => std::ptr::null_mut(),
        };
        if p.is_null() {
            return Err(Error::NoSuchSegment { seg, rank });
        }
        // SAFETY: non-null pointers in `ready` come from Arc::as_ptr of tables that are kept
        // (in `segs` or `graveyard`) until the engine is dropped, which `&self` prevents.
        Ok(unsafe { &*p })
    }

    #[inline]
    fn with_table<R>(
        &self,
        seg: u32,
        rank: Rank,
        f: impl FnOnce(&SegTable) -> Result<R>,
    ) -> Result<R> {
        f(self.ready(seg, rank)?)
    }

    #[inline]
    fn copy(&self, t: &Transfer, write: bool) -> Result<()> {
        let lt = self.ready(t.local.seg.0, self.rank)?;
        let rt = self.ready(t.remote.seg.0, t.remote.rank)?;
        let l = lt.check(self.rank, t.local.seg.0, t.local.offset, t.len)?;
        // A dead peer's failure comes before its bounds (a covered dead replica's stand-in
        // segment is empty).
        let r = rt
            .check(t.remote.rank, t.remote.seg.0, t.remote.offset, t.len)
            .or_else(|e| self.peer_ok(t.remote.rank).and(Err(e)))?;
        self.peer_ok(t.remote.rank)?;
        let (src, dst) = if write { (l, r) } else { (r, l) };
        // SAFETY: both ranges were bounds-checked against their live mappings (kept alive
        // until the engine drops). They may overlap only for a transfer within one segment of this
        // rank, which `copy` (memmove) handles; concurrent access by other ranks is the
        // program's to order with notifications, as in GASPI (bytes, never invalid values).
        unsafe {
            if t.remote.rank == self.rank && t.local.seg.0 == t.remote.seg.0 {
                std::ptr::copy(src, dst, t.len);
            } else {
                super::copy::copy_bytes(src, dst, t.len);
            }
        }
        Ok(())
    }

    fn notify_in(&self, t: &SegTable, rank: Rank, id: usize, value: u32) {
        let h = t.header(rank);
        h.notif[id].store(value, Ordering::Release);
        ring(&h.seq);
    }

    fn atomic_word(&self, t: &SegTable, rank: Rank, seg: u32, offset: usize) -> Result<&AtomicU64> {
        let p = t
            .check(rank, seg, offset, 8)
            .or_else(|e| self.peer_ok(rank).and(Err(e)))?;
        if offset % 8 != 0 {
            return Err(Error::Misaligned { offset, align: 8 });
        }
        self.peer_ok(rank)?;
        // SAFETY: 8 bytes in bounds, 8-aligned (data starts page-aligned); every rank accesses
        // this word atomically for the duration of the atomic operation.
        Ok(unsafe { &*(p as *const AtomicU64) })
    }

    /// Whether `call` may start (`Ok(false)`) or resumes the call that did not complete
    /// (`Ok(true)`); another call while one is pending is a mismatch with this rank itself.
    #[inline]
    fn check(&self, c: &Coll, call: u64) -> Result<bool> {
        match c.pending {
            None => Ok(false),
            Some(p) if p == call => Ok(true),
            Some(_) if !self.strict_calls => Ok(true),
            Some(p) => Err(Error::mismatch(
                Collective::from_word(call),
                Collective::from_word(p),
                self.rank,
            )),
        }
    }

    /// Records that this rank entered the barrier-based collective `call` (its index is
    /// `c.calls`), for peers that look for what it called.
    fn announce(&self, c: &Coll, call: u64) {
        let me = &self.ctl.rank(self.rank).calls;
        me.call[(c.calls % 2) as usize].store(call, Ordering::Relaxed);
        me.seq.store(c.calls, Ordering::Release);
    }

    /// The mismatch error of call `c.calls`, naming a rank that announced another call.
    #[cold]
    fn mismatch(&self, c: &Coll, call: u64) -> Error {
        let mine = Collective::from_word(call);
        let k = c.calls;
        for r in (0..self.size).filter(|&r| r != self.rank) {
            let rc = &self.ctl.rank(r).calls;
            let s = rc.seq.load(Ordering::Acquire);
            // Slot k % 2 is rewritten only at call k + 2, which needs this rank.
            if s == k || s == k + 1 {
                let w = rc.call[(k % 2) as usize].load(Ordering::Relaxed);
                if w != 0 && w != call {
                    return Error::mismatch(mine, Collective::from_word(w), r);
                }
            }
        }
        Error::mismatch(mine, Collective::Unknown, (self.rank + 1) % self.size)
    }

    /// Arrives at the barrier for `call` (or resumes the wait of an arrival that timed out).
    /// Every arrival adds 1 and its call's digest to `barrier_count`; the last arriver checks
    /// that the digests sum to `size` times its own and moves the generation by 2 instead of 1
    /// when they do not, so that every rank of the barrier learns of the mismatch.
    fn arrive(&self, c: &mut Coll, call: u64, timeout: Timeout) -> Result<()> {
        let h = self.ctl.header();
        let g = match c.barrier_pending.take() {
            Some(g) => g,
            None => {
                let g = h.barrier_gen.v.load(Ordering::Acquire);
                let d = Collective::digest(call);
                let mine = 1 | d << ctl::COUNT_BITS;
                // The arrivals this rank brings to the root counter: its own, or, in a world
                // of more than COMBINE_MIN ranks, its group's when it is the group's last.
                let Some(add) = self.combine(mine) else {
                    return self.wait_barrier(c, g, call, timeout);
                };
                let prev = h.barrier_count.v.fetch_add(add, Ordering::AcqRel);
                if (prev & COUNT_MASK) + (add & COUNT_MASK) == self.size as u64 {
                    h.barrier_count.v.store(0, Ordering::Relaxed);
                    let agree = (prev >> ctl::COUNT_BITS) + (add >> ctl::COUNT_BITS)
                        == d * self.size as u64;
                    ring_by(&h.barrier_gen, if agree { 1 } else { 2 });
                    return if agree {
                        Ok(())
                    } else {
                        Err(self.mismatch(c, call))
                    };
                }
                g
            }
        };
        self.wait_barrier(c, g, call, timeout)
    }

    /// In a world of more than [`COMBINE_MIN`] ranks, a combining tree of two levels: ranks
    /// arrive at their group's counter (groups of about √size consecutive ranks, the counter in
    /// the group's first rank's block), and the last arrival of each group carries the
    /// group's count and digests to `barrier_count`. Arrivals at one cache line are serialised
    /// (a line transfer each): 16 ranks cost 16 transfers on one counter, 4 + 4 on two levels
    /// (measured on a 16-core machine, 2.0 µs per barrier at 16 ranks against 0.5 at 8 before
    /// the tree). `Some(what to add to barrier_count)`, or `None` when this rank's group has
    /// not all arrived (its last arrival carries this one). The group counter is back to 0
    /// before its last arrival adds to the root, so before the barrier can complete.
    fn combine(&self, mine: u64) -> Option<u64> {
        if self.size <= COMBINE_MIN || self.replicas > 1 {
            return Some(mine);
        }
        let k = self.size.isqrt();
        let lead = self.rank / k * k;
        let members = k.min(self.size - lead) as u64;
        let counter = &self.ctl.rank(lead).group_count.v;
        let prev = counter.fetch_add(mine, Ordering::AcqRel);
        if (prev & COUNT_MASK) + 1 < members {
            return None;
        }
        counter.store(0, Ordering::Relaxed);
        Some(prev + mine)
    }

    /// Waits for the barrier generation to move from `g` (resumable after a timeout).
    fn wait_barrier(&self, c: &mut Coll, g: u32, call: u64, timeout: Timeout) -> Result<()> {
        let h = self.ctl.header();
        let r = self.wait_until(
            &h.barrier_gen,
            timeout.deadline(),
            || h.barrier_gen.v.load(Ordering::Acquire) != g,
            || self.gone(true).map(Error::PeerFailed),
        );
        if let Err(e) = r {
            c.barrier_pending = Some(g);
            return Err(e);
        }
        if h.barrier_gen.v.load(Ordering::Acquire).wrapping_sub(g) == 2 {
            return Err(self.mismatch(c, call));
        }
        Ok(())
    }

    /// The barrier-based collective `call`: the pending check, the announcement, the arrival.
    fn barrier_as(&self, c: &mut Coll, call: u64, timeout: Timeout) -> Result<()> {
        if !self.check(c, call)? {
            c.calls += 1;
            self.announce(c, call);
        }
        let r = if self.tolerant(call) {
            self.arrive_tolerant(c, call, timeout)
        } else {
            self.arrive(c, call, timeout)
        };
        if c.busy() {
            c.pending = Some(call);
        } else if c.pending.is_some() {
            c.pending = None;
        }
        r
    }

    /// Takes a mailbox lock (the word holds the owner's rank + 1). It is held for one copy, so
    /// spin; yield only when the holder seems preempted, take the lock over from a holder that
    /// has died (see below), and give up with `Timeout` once the deadline has passed.
    fn mailbox_lock(&self, l: &Line, deadline: Deadline) -> Result<()> {
        let me = self.rank as u32 + 1;
        let mut pace = Pace::new(config::SPIN, Duration::ZERO, Naps::fixed(Duration::ZERO));
        let mut yields = tiers_node::Backoff::new()
            .spin_steps(0)
            .yield_limit(0)
            .never_sleep();
        loop {
            let cur = l.v.load(Ordering::Relaxed);
            if cur == 0 {
                if l.v
                    .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return Ok(());
                }
                continue;
            }
            if pace.busy() {
                continue;
            }
            // A holder that died (killed between lock and unlock) never unlocks. Taking its
            // lock over is safe: a sender publishes a message (tail) only after copying it and
            // a receiver frees a slot (head) only after copying out, so the mailbox is
            // consistent at every point where the holder can stop.
            let owner = cur as usize - 1;
            if owner != self.rank && owner < self.size {
                self.probe();
                if self.peer_ok(owner).is_err()
                    && l.v
                        .compare_exchange(cur, me, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                {
                    return Ok(());
                }
            }
            if deadline.expired() {
                return Err(Error::Timeout);
            }
            // Past the spin: the holder is preempted (or dead, checked above); give it the core.
            yields.snooze();
        }
    }

    /// An allreduce checked against `call`, the word of the collective it is a step of (the
    /// `mpi` engine's hierarchical collectives pass the caller's call, so that ranks of a host
    /// that called different collectives are told so even where the steps look alike).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn allreduce_as(
        &self,
        call: u64,
        input: &[u8],
        output: &mut [u8],
        ty: DataType,
        op: Op,
        timeout: Timeout,
    ) -> Result<()> {
        let es = ty.size();
        let per = REDUCE_CHUNK / es * es;
        let chunks = input.len().div_ceil(per);
        let mut c = self.coll.lock().unwrap_or_else(|e| e.into_inner());
        let resume = self.check(&c, call)?;
        if !resume {
            c.calls += 1;
        }
        // The same choice at every rank: it depends on the length and the world only.
        if input.len() <= FAST_REDUCE_MAX && self.size <= FAST_REDUCE_RANKS {
            let r = self.allreduce_line(&mut c, call, input, output, ty, op, timeout);
            if c.busy() {
                c.pending = Some(call);
            } else if c.pending.is_some() {
                c.pending = None;
            }
            return r;
        }
        if !resume {
            self.announce(&c, call);
        }
        let start = c.reduce_next.take().unwrap_or(0);
        for k in start..chunks {
            let lo = k * per;
            let hi = (lo + per).min(input.len());
            let parity = (c.reduce_seq % 2) as usize;
            if c.barrier_pending.is_none() {
                let slot = self.ctl.rank(self.rank).reduce[parity].get() as *mut u8;
                // SAFETY: the slot is this rank's; no other rank reads this parity until the
                // barrier below, and every reader of its previous use has passed the barrier of
                // the chunk in between (double buffering).
                unsafe { std::ptr::copy_nonoverlapping(input[lo..].as_ptr(), slot, hi - lo) };
            }
            if let Err(e) = self.arrive(&mut c, call, timeout) {
                // A mismatch is found at the first chunk, whose barrier completed: nothing
                // is left to resume.
                if !matches!(e, Error::CollectiveMismatch(_)) {
                    c.reduce_next = Some(k);
                }
                c.pending = c.busy().then_some(call);
                return Err(e);
            }
            let slots = (0..self.size).map(|r| {
                let slot = self.ctl.rank(r).reduce[parity].get() as *const u8;
                // SAFETY: rank r filled its slot before arriving at the barrier we passed, and
                // will not touch this parity again before we arrive at the next barrier.
                unsafe { std::slice::from_raw_parts(slot, hi - lo) }
            });
            fold_in_order(ty, op, &mut output[lo..hi], slots);
            c.reduce_seq += 1;
        }
        c.pending = None;
        Ok(())
    }

    /// A barrier checked against `call` (see [`MemEngine::allreduce_as`]).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn barrier_for(&self, call: u64, timeout: Timeout) -> Result<()> {
        let mut c = self.coll.lock().unwrap_or_else(|e| e.into_inner());
        self.barrier_as(&mut c, call, timeout)
    }
}

impl<B: Backing> Engine for MemEngine<B> {
    fn name(&self) -> &'static str {
        self.b.name()
    }
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn local_rank(&self) -> usize {
        self.rank
    }
    fn local_size(&self) -> usize {
        self.size
    }

    fn segment_create(&self, seg: u32, size: usize, timeout: Timeout) -> Result<()> {
        if seg >= MAX_SEGMENTS {
            return Err(Error::SegmentIdTooLarge {
                seg,
                max: MAX_SEGMENTS,
            });
        }
        let call = Collective::SegmentCreate { seg }.word();
        let mut c = self.coll.lock().unwrap_or_else(|e| e.into_inner());
        self.check(&c, call)?;
        let mine = {
            let mut s = self.segs.write().unwrap_or_else(|e| e.into_inner());
            match &s[seg as usize] {
                SegSlot::Ready(_) => return Err(Error::SegmentExists { seg }),
                SegSlot::Pending(m, sz) if *sz == size => m.clone(),
                SegSlot::Pending(..) => return Err(Error::SegmentExists { seg }),
                SegSlot::Empty => {
                    let len = size.checked_add(SEG_HEADER).ok_or_else(|| {
                        Error::Setup(format!("segment {seg}: size {size} too large"))
                    })?;
                    let m = self.b.create_segment(seg, self.rank, len).map_err(|e| {
                        Error::io(format!("creating segment {seg} ({size} bytes)"), e)
                    })?;
                    // SAFETY: the fresh mapping starts with a zeroed SegHeader.
                    let sh = unsafe { &*(m.ptr() as *const SegHeader) };
                    let h = self.ctl.header();
                    sh.owner_start
                        .store(h.launcher_start.load(Ordering::Relaxed), Ordering::Relaxed);
                    sh.owner_ns
                        .store(h.pid_ns.load(Ordering::Relaxed), Ordering::Relaxed);
                    self.ctl.rank(self.rank).seg_size[seg as usize]
                        .store(size as u64 + 1, Ordering::Release);
                    s[seg as usize] = SegSlot::Pending(m.clone(), size);
                    m
                }
            }
        };
        match self.barrier_as(&mut c, call, timeout) {
            Ok(()) => {}
            Err(e @ Error::CollectiveMismatch(_)) => {
                // The others called something else: undo the creation.
                let mut s = self.segs.write().unwrap_or_else(|e| e.into_inner());
                self.ctl.rank(self.rank).seg_size[seg as usize].store(0, Ordering::Release);
                s[seg as usize] = SegSlot::Empty;
                self.b.remove_segment(seg, self.rank);
                return Err(e);
            }
            Err(e) => return Err(e),
        }
        drop(c);
        let mut maps = Vec::with_capacity(self.size);
        let mut sizes = Vec::with_capacity(self.size);
        for r in 0..self.size {
            if r == self.rank {
                maps.push(mine.clone());
                sizes.push(size);
                continue;
            }
            let sz = self.ctl.rank(r).seg_size[seg as usize].load(Ordering::Acquire);
            let m = match sz {
                0 => None,
                _ => self
                    .b
                    .open_segment(seg, r)
                    .ok()
                    .filter(|m| m.len() >= SEG_HEADER + (sz - 1) as usize),
            };
            match m {
                Some(m) => {
                    maps.push(m);
                    sizes.push((sz - 1) as usize);
                }
                // A peer that did its part and has already left (its segment unlinked at its
                // exit: a short program's last collective may be this one), or a dead replica
                // that a live one covers (a tolerant collective let it out): an empty stand-in;
                // calls that name it fail on its health first.
                None if self.state(r) == ctl::ST_EXITED
                    || (self.tolerant(call) && self.covered(r)) =>
                {
                    let m = Mapping::anonymous(SEG_HEADER)
                        .map_err(|e| Error::io(format!("segment {seg}: a stand-in"), e))?;
                    maps.push(Arc::new(m));
                    sizes.push(0);
                }
                None => {
                    if sz == 0 {
                        self.peer_ok(r)?;
                    }
                    return Err(Error::NoSuchSegment { seg, rank: r });
                }
            }
        }
        let mut s = self.segs.write().unwrap_or_else(|e| e.into_inner());
        let t = Arc::new(SegTable { maps, sizes });
        self.ready[seg as usize].store(Arc::as_ptr(&t) as *mut SegTable, Ordering::Release);
        s[seg as usize] = SegSlot::Ready(t);
        Ok(())
    }

    fn segment_delete(&self, seg: u32, timeout: Timeout) -> Result<()> {
        {
            let s = self.segs.read().unwrap_or_else(|e| e.into_inner());
            self.table(&s, seg, self.rank)?;
        }
        // Everyone is done with the segment before anyone frees it.
        {
            let mut c = self.coll.lock().unwrap_or_else(|e| e.into_inner());
            self.barrier_as(&mut c, Collective::SegmentDelete { seg }.word(), timeout)?;
        }
        let mut s = self.segs.write().unwrap_or_else(|e| e.into_inner());
        self.ctl.rank(self.rank).seg_size[seg as usize].store(0, Ordering::Release);
        self.ready[seg as usize].store(std::ptr::null_mut(), Ordering::Release);
        if let SegSlot::Ready(t) = std::mem::replace(&mut s[seg as usize], SegSlot::Empty) {
            self.graveyard
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(t);
        }
        self.b.remove_segment(seg, self.rank);
        Ok(())
    }

    fn segment_local(&self, seg: u32) -> Result<(*mut u8, usize, KeepAlive)> {
        let s = self.segs.read().unwrap_or_else(|e| e.into_inner());
        let t = self.table(&s, seg, self.rank)?;
        Ok((t.data(self.rank), t.sizes[self.rank], t))
    }

    fn segment_size(&self, seg: u32, rank: Rank) -> Result<usize> {
        self.with_table(seg, rank, |t| Ok(t.sizes[rank]))
    }

    #[inline]
    fn write(&self, _queue: usize, t: &Transfer) -> Result<()> {
        self.copy(t, true)
    }

    #[inline]
    fn read(&self, _queue: usize, t: &Transfer) -> Result<()> {
        self.copy(t, false)
    }

    fn notify(&self, _queue: usize, rank: Rank, seg: u32, id: usize, value: u32) -> Result<()> {
        self.with_table(seg, rank, |t| {
            self.peer_ok(rank)?;
            self.notify_in(t, rank, id, value);
            Ok(())
        })
    }

    fn write_notify(&self, queue: usize, t: &Transfer, id: usize, value: u32) -> Result<()> {
        // The copy completes before the release-store of the notification, so a reader that
        // sees the notification (acquire) sees the data.
        self.write(queue, t)?;
        self.notify(queue, t.remote.rank, t.remote.seg.0, id, value)
    }

    fn wait(&self, _queue: usize, _timeout: Timeout) -> Result<()> {
        // Every request completed when it was posted: copies are synchronous here.
        Ok(())
    }

    fn notify_waitsome(
        &self,
        seg: u32,
        first: usize,
        count: usize,
        timeout: Timeout,
    ) -> Result<usize> {
        let t = self.with_table(seg, self.rank, |t| Ok(t.maps[self.rank].clone()))?;
        // SAFETY: the mapping (kept by `t`) starts with a SegHeader.
        let h = unsafe { &*(t.ptr() as *const SegHeader) };
        let end = (first + count).min(NOTIFICATIONS);
        let mut found = None;
        self.wait_until(
            &h.seq,
            timeout.deadline(),
            || {
                found = (first..end).find(|&i| h.notif[i].load(Ordering::Acquire) != 0);
                found.is_some()
            },
            || self.gone(false).map(Error::PeerFailed),
        )?;
        Ok(found.expect("ready means found"))
    }

    fn notify_reset(&self, seg: u32, id: usize) -> Result<u32> {
        self.with_table(seg, self.rank, |t| {
            Ok(t.header(self.rank).notif[id].swap(0, Ordering::AcqRel))
        })
    }

    fn atomic_fetch_add(&self, rank: Rank, seg: u32, offset: usize, value: u64) -> Result<u64> {
        self.with_table(seg, rank, |t| {
            Ok(self
                .atomic_word(t, rank, seg, offset)?
                .fetch_add(value, Ordering::AcqRel))
        })
    }

    fn atomic_compare_swap(
        &self,
        rank: Rank,
        seg: u32,
        offset: usize,
        expected: u64,
        new: u64,
    ) -> Result<u64> {
        self.with_table(seg, rank, |t| {
            let w = self.atomic_word(t, rank, seg, offset)?;
            Ok(
                match w.compare_exchange(expected, new, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(v) | Err(v) => v,
                },
            )
        })
    }

    fn barrier(&self, timeout: Timeout) -> Result<()> {
        // Up to FAST_REDUCE_RANKS ranks, a barrier is an allreduce of nothing on the small
        // allreduce's lines: each rank writes its own line and reads the others', the
        // transfers overlap, where the counter of `arrive` takes them one after the other (the
        // counter's line to each rank in turn, then the generation's line back): 85-115 ns
        // against 100-160 on two cores a 65-85 ns round trip apart. The same choice at every
        // rank (the world's size and replication only); replicated worlds keep the tolerant
        // barrier.
        if self.size <= FAST_REDUCE_RANKS && !self.tolerant(Collective::BARRIER) {
            return self.allreduce_as(
                Collective::BARRIER,
                &[],
                &mut [],
                DataType::U64,
                Op::Sum,
                timeout,
            );
        }
        let mut c = self.coll.lock().unwrap_or_else(|e| e.into_inner());
        self.barrier_as(&mut c, Collective::BARRIER, timeout)
    }

    fn allreduce(
        &self,
        input: &[u8],
        output: &mut [u8],
        ty: DataType,
        op: Op,
        timeout: Timeout,
    ) -> Result<()> {
        // Element sizes are powers of two: a shift, not a division, on the fast path.
        let call = Collective::allreduce_word(input.len() >> ty.size().trailing_zeros(), ty, op);
        self.allreduce_as(call, input, output, ty, op, timeout)
    }

    fn passive_send(&self, rank: Rank, data: &[u8], timeout: Timeout) -> Result<()> {
        if data.len() > PASSIVE_MAX {
            return Err(Error::MessageTooLarge {
                len: data.len(),
                max: PASSIVE_MAX,
            });
        }
        self.peer_ok(rank)?;
        let mb = &self.ctl.rank(rank).mailbox;
        let deadline = timeout.deadline();
        loop {
            self.mailbox_lock(&mb.lock, deadline)?;
            let (h, t) = (
                mb.head.load(Ordering::Relaxed),
                mb.tail.load(Ordering::Relaxed),
            );
            if t.wrapping_sub(h) < PASSIVE_SLOTS as u32 {
                let slot = &mb.slots[t as usize % PASSIVE_SLOTS];
                slot.from.store(self.rank as u32, Ordering::Relaxed);
                slot.len.store(data.len() as u32, Ordering::Relaxed);
                // SAFETY: the slot is free (t - h < SLOTS) and we hold the mailbox lock.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        data.as_ptr(),
                        slot.data.get() as *mut u8,
                        data.len(),
                    )
                };
                mb.tail.store(t.wrapping_add(1), Ordering::Relaxed);
                mb.lock.v.store(0, Ordering::Release);
                ring(&mb.bell);
                return Ok(());
            }
            mb.lock.v.store(0, Ordering::Release);
            self.wait_until(
                &mb.space,
                deadline,
                || {
                    mb.tail
                        .load(Ordering::Relaxed)
                        .wrapping_sub(mb.head.load(Ordering::Relaxed))
                        < PASSIVE_SLOTS as u32
                },
                || self.peer_ok(rank).err(),
            )?;
        }
    }

    fn passive_receive(&self, buf: &mut [u8], timeout: Timeout) -> Result<(Rank, usize)> {
        let mb = &self.ctl.rank(self.rank).mailbox;
        let deadline = timeout.deadline();
        loop {
            if mb.head.load(Ordering::Relaxed) != mb.tail.load(Ordering::Relaxed) {
                self.mailbox_lock(&mb.lock, deadline)?;
                let h = mb.head.load(Ordering::Relaxed);
                if h != mb.tail.load(Ordering::Relaxed) {
                    let slot = &mb.slots[h as usize % PASSIVE_SLOTS];
                    let len = slot.len.load(Ordering::Relaxed) as usize;
                    if len > buf.len() {
                        mb.lock.v.store(0, Ordering::Release);
                        return Err(Error::BufferTooSmall {
                            need: len,
                            have: buf.len(),
                        });
                    }
                    let from = slot.from.load(Ordering::Relaxed) as Rank;
                    // SAFETY: the slot holds a complete message (written under the lock we hold).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            slot.data.get() as *const u8,
                            buf.as_mut_ptr(),
                            len,
                        )
                    };
                    mb.head.store(h.wrapping_add(1), Ordering::Relaxed);
                    mb.lock.v.store(0, Ordering::Release);
                    ring(&mb.space);
                    return Ok((from, len));
                }
                mb.lock.v.store(0, Ordering::Release);
            }
            self.wait_until(
                &mb.bell,
                deadline,
                || mb.head.load(Ordering::Relaxed) != mb.tail.load(Ordering::Relaxed),
                || self.gone(false).map(Error::PeerFailed),
            )?;
        }
    }

    fn passive_max(&self) -> usize {
        PASSIVE_MAX
    }

    fn health(&self, rank: Rank) -> Health {
        Health::from_code(self.state(rank))
    }

    fn leave(&self, failed: bool) {
        let me = self.ctl.rank(self.rank);
        me.state.v.store(
            if failed {
                ctl::ST_FAILED
            } else {
                ctl::ST_EXITED
            },
            Ordering::Release,
        );
        wake_job(&self.ctl);
    }
}

/// Wakes every sleeper on the control block so that it re-checks the state vector.
pub(crate) fn wake_job(c: &Ctl) {
    sys::futex_wake_all(&c.header().barrier_gen.v);
    sys::futex_wake_all(&c.header().fast_bell.v);
    for r in 0..c.n() {
        let mb = &c.rank(r).mailbox;
        sys::futex_wake_all(&mb.bell.v);
        sys::futex_wake_all(&mb.space.v);
    }
}

impl<B: Backing> Drop for MemEngine<B> {
    fn drop(&mut self) {
        let s = self.segs.get_mut().unwrap_or_else(|e| e.into_inner());
        for (i, slot) in s.iter_mut().enumerate() {
            if !matches!(slot, SegSlot::Empty) {
                self.ctl.rank(self.rank).seg_size[i].store(0, Ordering::Release);
                self.b.remove_segment(i as u32, self.rank);
                *slot = SegSlot::Empty;
            }
        }
    }
}

//! The `tcp` engine: ranks are processes on one host or many, connected by TCP sockets, and
//! a rank's death is a [`PeerFailed`](Error::PeerFailed) for the others, never the end of the
//! job (unlike MPI without fault tolerance). It is the transport replicated ranks need
//! across hosts, and a cluster engine that needs nothing installed.
//!
//! - **Connections on demand.** Every rank listens on a port of its own and learns every
//!   other rank's address once, at start-up, from the launcher's rendezvous
//!   ([`rendezvous`]). The first frame for a peer opens a connection to it (within
//!   [`CONNECT_TIMEOUT`]); that connection carries everything this rank sends to that peer, in
//!   order, so a notification never overtakes its data (`wire`).
//! - **A progress engine, not a thread.** Sockets are non-blocking under one epoll instance
//!   (`poll`). Whoever waits (a queue's `wait`, `notify_waitsome`, a collective, the world's
//!   eager or lazy polls, or the proxy policy's thread) runs one *pass*: it waits for ready
//!   sockets, applies the frames that arrived (writes land directly in the segment, reads and
//!   atomics are answered) and writes out what the sockets would not take before. One thread
//!   at a time runs a pass; the others wait for its signal. The passes are counted as
//!   \[Gabriel2010\] instruments VolpexMPI's progress engine ([`TransportStats`]).
//! - **Completion.** A queue's wait is local completion (GASPI's): writes and notifications
//!   are complete when posted, reads when answered. Writes and notifications are acknowledged
//!   by their target once applied, and a rank's collectives wait for those acknowledgements
//!   first (a fence), so what was written before a barrier is in place after it, as on the
//!   shared-memory engines. Acknowledgements are sent only when a fence asks for them.
//! - **Collectives** go through rank 0 (`root`), which checks that every rank made the same
//!   call and folds reductions in rank order.
//! - **Failures.** A connection that ends without the peer's goodbye marks the peer failed;
//!   rank 0 tells every rank about every rank it loses. Calls that need a gone peer return
//!   `PeerFailed` with the same rules as the shared-memory engines.

mod calls;
mod drive;
mod link;
mod poll;
mod reactor;
pub mod rendezvous;
mod root;
mod wire;

use self::link::{Link, Sent};
use self::poll::{Epoll, Waker, IN};
use self::reactor::Reactor;
use self::root::{Outcome, Root};
use self::wire::{Header, Kind};
use super::{Engine, KeepAlive, Transfer, TransportStats};
use crate::collective::{Collective, DataType, Op};
use crate::config::{self, env, MAX_SEGMENTS, NOTIFICATIONS, PASSIVE_MAX, PASSIVE_SLOTS};
use crate::error::{Error, Rank, Result};
use crate::health::Health;
use crate::sys::Mapping;
use crate::timeout::{Deadline, Timeout};
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a connection to a peer may take before the peer counts as failed.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a pass waits for sockets before the waiter re-checks its condition, its
/// deadline and the health of its peers.
const PASS_SLICE: Duration = Duration::from_millis(5);
/// How long a rank that leaves keeps writing out what it still owes its peers.
const LEAVE_FLUSH: Duration = Duration::from_secs(10);

const H_OK: u32 = 0;
const H_FAILED: u32 = 1;
const H_EXITED: u32 = 2;

/// Epoll tokens: the waker, the listener, the outgoing links (`LINK + peer`) and the
/// incoming connections (`CONN + index`).
const T_WAKER: u64 = 0;
const T_LISTENER: u64 = 1;
const T_LINK: u64 = 2;
const T_CONN: u64 = 1 << 32;

/// The notifications of one segment.
struct Notifs(Box<[AtomicU32]>);

impl Notifs {
    fn new() -> Notifs {
        Notifs((0..NOTIFICATIONS).map(|_| AtomicU32::new(0)).collect())
    }
}

/// A segment of this rank, and what this rank knows of the segment of the same id elsewhere.
struct Seg {
    map: Arc<Mapping>,
    size: usize,
    notifs: Arc<Notifs>,
    /// Every rank's size, once the creating collective completed (`None` while it is
    /// pending: remote writes are already accepted, local calls are not).
    sizes: Option<Arc<[usize]>>,
}

/// A read in flight: where its bytes go.
struct Get {
    dst: *mut u8,
    len: usize,
    keep: Arc<Mapping>,
    queue: usize,
    rank: Rank,
    seg: u32,
    /// `Some(ok)` once answered.
    done: Option<bool>,
}

// SAFETY: `dst` points into the mapping `keep` holds; only the thread that runs a pass
// writes through it, under the state lock's hand-over (see `reactor`).
unsafe impl Send for Get {}

#[derive(Default)]
struct State {
    segs: Vec<Option<Seg>>,
    gets: HashMap<u64, Get>,
    /// Atomics in flight: `Some(Ok(old))` once answered, `Some(Err(()))` when refused.
    atomics: HashMap<u64, Option<std::result::Result<u64, ()>>>,
    /// Atomics that timed out waiting for their answer, by call: the request a repeat of the
    /// call resumes.
    atomic_resume: HashMap<AtomicCall, u64>,
    next_req: u64,
    mailbox: VecDeque<(Rank, Vec<u8>)>,
    /// Messages in the mailbox that this rank sent itself (bounded by `PASSIVE_SLOTS`).
    self_msgs: usize,
    /// Answers of the root to collectives of this rank, by number.
    results: HashMap<u64, Outcome>,
    root: Option<Root>,
}

/// This rank's collective calls.
#[derive(Default)]
struct Calls {
    seq: u64,
    /// The call that did not complete (number, word): only it may be called next.
    pending: Option<(u64, u64)>,
}

#[derive(Default)]
struct Stats {
    calls: AtomicU64,
    recv_ready: AtomicU64,
    send_ready: AtomicU64,
    recv_ns: AtomicU64,
    send_ns: AtomicU64,
    frames_in: AtomicU64,
    frames_out: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

/// The tcp engine of one rank.
pub struct TcpEngine {
    rank: Rank,
    size: usize,
    local_rank: usize,
    local_size: usize,
    addrs: Vec<SocketAddr>,
    /// Replicas per logical rank (`engine/replicas.rs`): above 1 every rank runs the
    /// collectives itself, from every rank's contribution, and tolerates a covered dead
    /// replica (see `collective`).
    replicas: usize,
    epoll: Epoll,
    waker: Waker,
    listener: TcpListener,
    links: Vec<Mutex<Link>>,
    /// Per peer: counted frames the peer acknowledged.
    acked: Vec<AtomicU64>,
    /// Per peer: counted frames an acknowledgement was asked for.
    asked: Vec<AtomicU64>,
    /// Per peer: passive messages this rank may still send it.
    credits: Vec<AtomicUsize>,
    health: Vec<AtomicU32>,
    state: Mutex<State>,
    reactor: Mutex<Reactor>,
    signal: (Mutex<u64>, Condvar),
    calls: Mutex<Calls>,
    stats: Stats,
    left: AtomicBool,
    /// The other processes of this replicated job went on without this one (it lagged a
    /// replica of its rank by more than a replica timeout at a world collective).
    left_behind: AtomicBool,
    /// How long a replicated job's collective waits for laggards (`engine/replicas.rs`).
    left_behind_after: Duration,
    /// How long a wait polls the sockets without blocking before it sleeps in `epoll_wait`:
    /// [`config::SPIN`] when every rank of this host has a core of its own (an answer often
    /// comes within microseconds, and a wake-up from `epoll_wait` costs tens), else zero.
    spin: Duration,
    /// Threads waiting in calls that run the passes themselves (`drive`).
    drivers: AtomicUsize,
    /// Whether a stand-by thread is in (or about to enter) a pass.
    standing_by: AtomicBool,
    /// Whether a stand-by thread is parked on `aside` while others drive.
    parked: AtomicBool,
    aside: (Mutex<()>, Condvar),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn ns(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Gives a socket of the caller's the buffers the engine's links ask for, both ways (4 MiB):
/// `tiers gaspi net-limit` measures the network through them, so that its limit is what the
/// engine's links can reach. Set on a listener, the connections it accepts inherit them. Best
/// effort: a refusal leaves the kernel's default.
pub fn link_buffers(s: &impl std::os::fd::AsRawFd) {
    poll::set_buffer(s, true, link::SOCKET_BUFFER);
    poll::set_buffer(s, false, link::SOCKET_BUFFER);
}

/// Attaches to the tcp job the environment describes: listens, joins the rendezvous at
/// `TIERS_TCP_ROOT` and learns every rank's address.
///
/// # Errors
///
/// [`Error::Setup`] when a variable is missing or the rendezvous refuses this rank (a second
/// process claiming the same rank), [`Error::Io`] when the sockets cannot be made or the
/// rendezvous cannot be reached in the init timeout.
pub fn attach(rank: Rank, size: usize) -> Result<TcpEngine> {
    let root = config::env_str(env::TCP_ROOT)
        .ok_or_else(|| Error::Setup(format!("{} is not set", env::TCP_ROOT)))?;
    let bind = config::env_str(env::TCP_BIND).unwrap_or_else(|| "127.0.0.1".into());
    let local_rank = config::env_usize(env::LOCAL_RANK)?.unwrap_or(rank);
    let local_size = config::env_usize(env::LOCAL_SIZE)?.unwrap_or(size);
    if size == 0 || rank >= size {
        return Err(Error::Setup(format!("rank {rank} of a tcp job of {size}")));
    }
    let listener = TcpListener::bind((bind.as_str(), 0))
        .map_err(|e| Error::io(format!("listening on {bind}"), e))?;
    let me = listener
        .local_addr()
        .map_err(|e| Error::io("the listening address", e))?;
    let deadline = Instant::now() + config::init_timeout()?;
    let addrs = rendezvous::join(&root, rank, me, deadline).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            Error::Setup(e.to_string())
        } else {
            Error::io(format!("joining the tcp job at {root}"), e)
        }
    })?;
    if addrs.len() != size {
        return Err(Error::Setup(format!(
            "the tcp rendezvous at {root} serves a job of {} ranks, not {size}",
            addrs.len()
        )));
    }
    TcpEngine::new(rank, size, local_rank, local_size, listener, addrs)
}

/// Every so often while a replicated job's collective waits, each rank that has not
/// contributed is sent a frame, so that a dead one (a closed port, a reset connection) is seen
/// even when it never connected to this rank.
const COLL_PROBE: Duration = Duration::from_millis(20);

impl TcpEngine {
    fn new(
        rank: Rank,
        size: usize,
        local_rank: usize,
        local_size: usize,
        listener: TcpListener,
        addrs: Vec<Option<SocketAddr>>,
    ) -> Result<TcpEngine> {
        let replicas = super::replicas::from_env();
        let io = |what: &str, e| Error::io(what.to_string(), e);
        listener
            .set_nonblocking(true)
            .map_err(|e| io("the listening socket", e))?;
        poll::set_buffer(&listener, false, link::SOCKET_BUFFER);
        let epoll = Epoll::new().map_err(|e| io("creating an epoll instance", e))?;
        let waker = Waker::new().map_err(|e| io("creating an eventfd", e))?;
        epoll
            .add(&waker, IN, T_WAKER)
            .map_err(|e| io("watching the eventfd", e))?;
        epoll
            .add(&listener, IN, T_LISTENER)
            .map_err(|e| io("watching the listening socket", e))?;
        // A process a replicated job started without is failed from the start.
        let absent: Vec<bool> = addrs.iter().map(Option::is_none).collect();
        let mut root = (rank == 0 || replicas > 1).then(|| Root::new(size, replicas));
        if let Some(root) = root.as_mut() {
            for r in (0..size).filter(|&r| absent[r]) {
                root.gone(r);
            }
        }
        let state = State {
            segs: (0..MAX_SEGMENTS).map(|_| None).collect(),
            root,
            ..State::default()
        };
        let addrs = addrs
            .into_iter()
            .map(|a| a.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0))))
            .collect();
        Ok(TcpEngine {
            rank,
            size,
            local_rank,
            local_size,
            addrs,
            replicas,
            epoll,
            waker,
            listener,
            links: absent
                .iter()
                .map(|&a| {
                    let mut l = Link::default();
                    l.broken = a;
                    Mutex::new(l)
                })
                .collect(),
            acked: (0..size).map(|_| AtomicU64::new(0)).collect(),
            asked: (0..size).map(|_| AtomicU64::new(0)).collect(),
            credits: (0..size).map(|_| AtomicUsize::new(PASSIVE_SLOTS)).collect(),
            health: absent
                .iter()
                .map(|&a| AtomicU32::new(if a { H_FAILED } else { H_OK }))
                .collect(),
            state: Mutex::new(state),
            reactor: Mutex::new(Reactor::default()),
            signal: (Mutex::new(0), Condvar::new()),
            calls: Mutex::new(Calls::default()),
            stats: Stats::default(),
            left: AtomicBool::new(false),
            left_behind: AtomicBool::new(false),
            left_behind_after: super::replicas::left_behind_after(),
            spin: match config::env_usize(env::TCP_SPIN_US)? {
                Some(us) => Duration::from_micros(us as u64),
                None if local_size <= config::job_cpus() => config::SPIN,
                None => Duration::ZERO,
            },
            drivers: AtomicUsize::new(0),
            standing_by: AtomicBool::new(false),
            parked: AtomicBool::new(false),
            aside: (Mutex::new(()), Condvar::new()),
        })
    }

    // ---- Health ----

    fn gone_code(&self, r: Rank) -> u32 {
        self.health[r].load(Ordering::Acquire)
    }

    /// `PeerFailed(r)` when `r` failed or left (one-sided calls).
    fn peer_ok(&self, r: Rank) -> Result<()> {
        if r != self.rank && self.gone_code(r) != H_OK {
            return Err(Error::PeerFailed(r));
        }
        Ok(())
    }

    /// The first rank that failed (or, with `exited`, also one that left).
    fn gone(&self, exited: bool) -> Option<Rank> {
        (0..self.size).find(|&r| {
            r != self.rank
                && match self.gone_code(r) {
                    H_FAILED => true,
                    H_EXITED => exited,
                    _ => false,
                }
        })
    }

    /// Rank `r` is gone (`exited`: it said goodbye). The root fails the collectives `r` will
    /// never join and tells every other rank.
    fn mark_gone(&self, r: Rank, exited: bool) {
        if r >= self.size || r == self.rank {
            return;
        }
        let code = if exited { H_EXITED } else { H_FAILED };
        if self.health[r]
            .compare_exchange(H_OK, code, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        lock(&self.links[r]).close();
        let answers = lock(&self.state).root.as_mut().map(|root| root.gone(r));
        if let Some(answers) = answers {
            for (seq, k, o) in answers {
                self.answer(seq, k, o);
            }
            for p in
                (0..self.size).filter(|&p| p != r && p != self.rank && self.gone_code(p) == H_OK)
            {
                let mut h = Header::new(Kind::Gone);
                h.a = r as u64;
                h.b = u64::from(!exited);
                let _ = self.send(p, &h, std::ptr::null(), 0);
            }
        }
        self.wake();
    }

    // ---- Sending ----

    /// Sends a frame to `p`, connecting first if this is the first; returns the link's count
    /// of counted frames.
    fn send(&self, p: Rank, h: &Header, payload: *const u8, len: usize) -> Result<u64> {
        self.send_frames(p, &[(*h, payload, len)])
    }

    /// Sends frames `(header, payload, length)` to `p` in order, together (one system call
    /// when the socket takes them all); the headers' lengths are set here.
    fn send_frames(&self, p: Rank, frames: &[(Header, *const u8, usize)]) -> Result<u64> {
        let t0 = Instant::now();
        let mut l = lock(&self.links[p]);
        if !l.connected()
            && !l.broken
            && l.connect(
                self.addrs[p],
                self.rank,
                &self.epoll,
                T_LINK + p as u64,
                CONNECT_TIMEOUT,
            )
            .is_err()
        {
            l.broken = true;
        }
        let mut bytes = 0;
        let frames: Vec<(Header, *const u8, usize)> = frames
            .iter()
            .map(|&(mut h, ptr, len)| {
                h.len = len as u64;
                (h, ptr, len)
            })
            .collect();
        // SAFETY: the callers pass payloads readable for their lengths (checked ranges of
        // live segments, or buffers of theirs).
        let sent = unsafe { l.send(&frames, &mut bytes) };
        drop(l);
        self.stats.bytes_out.fetch_add(bytes, Ordering::Relaxed);
        self.stats
            .frames_out
            .fetch_add(frames.len() as u64, Ordering::Relaxed);
        self.stats.send_ns.fetch_add(ns(t0), Ordering::Relaxed);
        match sent {
            Sent::Ok(n) => Ok(n),
            // The peer's health is not changed here: a peer that left says goodbye on its
            // own connection, which this rank may not have read yet. Its end (or rank 0's
            // word) marks it.
            Sent::Broken => Err(Error::PeerFailed(p)),
        }
    }

    /// Writes out what the links hold back; whether anything went out.
    fn flush_links(&self) -> bool {
        let mut any = false;
        let mut bytes = 0;
        for l in &self.links {
            if let Ok(mut l) = l.try_lock() {
                if l.backlog() > 0 {
                    any |= l.flush(&mut bytes);
                }
            }
        }
        self.stats.bytes_out.fetch_add(bytes, Ordering::Relaxed);
        any
    }

    /// Flushes the link to `p` (its socket is writable again).
    fn flush_link(&self, p: Rank) -> bool {
        let mut bytes = 0;
        let any = match self.links.get(p) {
            Some(l) => lock(l).flush(&mut bytes),
            None => false,
        };
        self.stats.bytes_out.fetch_add(bytes, Ordering::Relaxed);
        any
    }

    // ---- Waiting ----

    /// Wakes whoever waits: the thread in a pass (through the eventfd) and the others.
    fn wake(&self) {
        self.waker.wake();
        self.signal_all();
    }

    fn signal_all(&self) {
        *lock(&self.signal.0) += 1;
        self.signal.1.notify_all();
    }

    /// One pass of the progress engine, waiting up to `max` for sockets; when another thread
    /// runs one, waits for its end instead. Whether it found work.
    fn poll(&self, max: Duration) -> bool {
        self.poll_since(max, None)
    }

    /// [`poll`](Self::poll), for a waiter that checked its condition when the signal count
    /// was `seen`: when another thread runs the pass, it waits for that pass's signal only if
    /// none came since (a signal between the check and the wait would otherwise be missed, and
    /// the waiter would sleep its whole slice with its answer already in).
    fn poll_since(&self, max: Duration, seen: Option<u64>) -> bool {
        match self.reactor.try_lock() {
            Ok(mut r) => {
                let found = r.pass(self, max);
                drop(r);
                if found {
                    self.signal_all();
                }
                found
            }
            Err(_) => {
                if !max.is_zero() {
                    let g = lock(&self.signal.0);
                    if seen.is_none_or(|s| *g == s) {
                        let _ = self
                            .signal
                            .1
                            .wait_timeout(g, max.min(Duration::from_millis(1)));
                    }
                }
                false
            }
        }
    }

    /// Runs passes until `ready` gives a value, fails, or the deadline passes (a `Test`
    /// still runs one pass without waiting).
    fn wait_until<T>(
        &self,
        deadline: Deadline,
        mut ready: impl FnMut(&Self) -> Result<Option<T>>,
    ) -> Result<T> {
        let mut polled = false;
        let spin_until = Instant::now() + self.spin;
        // Claimed after the first check that fails, and only by a wait that waits: one that
        // is over at once, or a test, costs a stand-by thread nothing.
        let mut claim = None;
        loop {
            let seen = *lock(&self.signal.0);
            match ready(self) {
                Ok(Some(v)) => return Ok(v),
                Ok(None) => polled = false,
                // A failure ends the wait, but only after a pass: what the sockets hold (the
                // data of a peer that then failed, say) must still arrive, and a caller that
                // retries on the error (a replicated receiver) still makes progress.
                Err(e) if polled => return Err(e),
                Err(_) => {
                    self.poll(Duration::ZERO);
                    polled = true;
                    continue;
                }
            }
            let slice = deadline.slice(PASS_SLICE);
            if slice.is_some() && claim.is_none() {
                claim = Some(self.claim());
            }
            match slice {
                Some(_) if !self.spin.is_zero() && Instant::now() < spin_until => {
                    self.poll(Duration::ZERO);
                }
                Some(d) => {
                    self.poll_since(d, Some(seen));
                }
                None => {
                    self.poll(Duration::ZERO);
                    return ready(self)?.ok_or(Error::Timeout);
                }
            }
        }
    }

    // ---- Segments ----

    /// The local range `seg[offset..offset + len]` of a ready segment, and its mapping.
    fn local_range(&self, seg: u32, offset: usize, len: usize) -> Result<(*mut u8, Arc<Mapping>)> {
        let st = lock(&self.state);
        let s = st
            .segs
            .get(seg as usize)
            .and_then(Option::as_ref)
            .filter(|s| s.sizes.is_some())
            .ok_or(Error::NoSuchSegment {
                seg,
                rank: self.rank,
            })?;
        in_bounds(self.rank, seg, offset, len, s.size)?;
        // SAFETY: offset + len <= size <= the mapping's length.
        Ok((unsafe { s.map.ptr().add(offset) }, s.map.clone()))
    }

    /// The size of `seg` at `rank`, as registered by the creating collective.
    fn size_at(&self, seg: u32, rank: Rank) -> Result<usize> {
        let st = lock(&self.state);
        st.segs
            .get(seg as usize)
            .and_then(Option::as_ref)
            .and_then(|s| s.sizes.as_ref())
            .and_then(|z| z.get(rank).copied())
            .ok_or(Error::NoSuchSegment { seg, rank })
    }

    /// Where a remote write of `len` bytes at `seg[offset..]` of this rank lands (pending
    /// segments included); `None` for a segment or range this rank does not have.
    fn write_target(&self, seg: u32, offset: u64, len: u64) -> Option<(*mut u8, Arc<Mapping>)> {
        let st = lock(&self.state);
        let s = st.segs.get(seg as usize)?.as_ref()?;
        let end = offset.checked_add(len)?;
        (end <= s.size as u64).then(|| {
            // SAFETY: in bounds of the mapping.
            (unsafe { s.map.ptr().add(offset as usize) }, s.map.clone())
        })
    }

    // ---- What a pass applies ----

    /// A notification from a peer.
    fn notify_local(&self, seg: u32, id: u64, value: u32) {
        let n = {
            let st = lock(&self.state);
            st.segs
                .get(seg as usize)
                .and_then(Option::as_ref)
                .map(|s| s.notifs.clone())
        };
        if let Some(n) = n {
            if let Some(a) = n.0.get(id as usize) {
                a.store(value, Ordering::Release);
            }
        }
    }

    /// A peer's atomic store of `value` into the word at `seg[offset]` (ignored when the
    /// segment or the word is not there: the sender checked against the sizes it knew).
    fn store_local(&self, seg: u32, offset: u64, value: u64) {
        if let Some((ptr, _keep)) = self
            .write_target(seg, offset, 8)
            .filter(|_| offset % 8 == 0)
        {
            // SAFETY: 8 bytes in bounds of a live mapping, 8-aligned (mappings are
            // page-aligned); the word is stored atomically, as the readers load it.
            unsafe { &*(ptr as *const AtomicU64) }.store(value, Ordering::Release);
        }
    }

    /// Answers a peer's read of `seg[a..a + c]` (request `b`).
    fn serve_get(&self, p: Rank, h: &Header) {
        let mut r = Header::new(Kind::GetReply);
        r.b = h.b;
        match self.write_target(h.seg, h.a, h.c) {
            Some((ptr, _keep)) => {
                let _ = self.send(p, &r, ptr, h.c as usize);
            }
            None => {
                r.d = 1;
                let _ = self.send(p, &r, std::ptr::null(), 0);
            }
        }
    }

    /// Where the answer to read `id` goes: `(destination, length, keep-alive)`.
    fn get_target(&self, id: u64) -> Option<(*mut u8, usize, Arc<Mapping>)> {
        let st = lock(&self.state);
        st.gets.get(&id).map(|g| (g.dst, g.len, g.keep.clone()))
    }

    /// Read `id` is answered (`ok`: its bytes are in place).
    fn get_done(&self, id: u64, ok: bool) {
        if let Some(g) = lock(&self.state).gets.get_mut(&id) {
            g.done = Some(ok);
        }
    }

    /// Performs a peer's atomic on this rank's word and answers.
    fn serve_atomic(&self, p: Rank, h: &Header) {
        let mut r = Header::new(Kind::AtomicReply);
        r.b = h.b;
        match self.write_target(h.seg, h.a, 8).filter(|_| h.a % 8 == 0) {
            Some((ptr, _keep)) => {
                // SAFETY: 8 bytes in bounds of a live mapping, 8-aligned (mappings are
                // page-aligned); this word is accessed atomically for the operation.
                let w = unsafe { &*(ptr as *const AtomicU64) };
                r.c = if h.kind == Kind::FetchAdd {
                    w.fetch_add(h.c, Ordering::AcqRel)
                } else {
                    match w.compare_exchange(h.c, h.d, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(v) | Err(v) => v,
                    }
                };
            }
            None => r.d = 1,
        }
        let _ = self.send(p, &r, std::ptr::null(), 0);
    }

    /// The answer to atomic `id`.
    fn atomic_done(&self, id: u64, old: u64, refused: bool) {
        if let Some(a) = lock(&self.state).atomics.get_mut(&id) {
            *a = Some(if refused { Err(()) } else { Ok(old) });
        }
    }

    /// A passive message from `p`.
    fn mailbox_push(&self, p: Rank, msg: Vec<u8>) {
        lock(&self.state).mailbox.push_back((p, msg));
    }

    /// `p` took `n` of this rank's passive messages.
    fn credit(&self, p: Rank, n: u64) {
        self.credits[p].fetch_add(n as usize, Ordering::AcqRel);
    }

    /// `p` applied `n` counted frames of this rank's.
    fn ack(&self, p: Rank, n: u64) {
        self.acked[p].fetch_max(n, Ordering::AcqRel);
    }

    /// Acknowledges `n` counted frames of `p`'s.
    fn send_ack(&self, p: Rank, n: u64) {
        let mut h = Header::new(Kind::Ack);
        h.a = n;
        let _ = self.send(p, &h, std::ptr::null(), 0);
    }

    /// As the root: `p`'s contribution to collective `seq`.
    fn root_contribute(&self, p: Rank, seq: u64, word: u64, payload: Vec<u8>) {
        let answers = match lock(&self.state).root.as_mut() {
            Some(root) => root.contribute(p, seq, word, payload),
            None => return,
        };
        for (k, o) in answers {
            self.answer(seq, k, o);
        }
    }

    /// As the root: tells rank `k` how collective `seq` ended.
    fn answer(&self, seq: u64, k: Rank, o: Outcome) {
        if k == self.rank {
            self.coll_result(seq, o);
            self.wake();
            return;
        }
        if self.replicas > 1 {
            // Every rank of a replicated job settles its collectives itself.
            return;
        }
        let (b, c, d) = o.status();
        let mut h = Header::new(Kind::CollResult);
        (h.a, h.b, h.c, h.d) = (seq, b, c, d);
        let payload: &[u8] = match &o {
            Outcome::Done(v) => v,
            _ => &[],
        };
        let _ = self.send(k, &h, payload.as_ptr(), payload.len());
    }

    /// The root's answer to this rank's collective `seq`.
    fn coll_result(&self, seq: u64, o: Outcome) {
        lock(&self.state).results.insert(seq, o);
    }

    /// Counts a pass for the statistics.
    fn count_pass(&self, recv: Option<u64>, send: Option<u64>, frames: u64, bytes: u64) {
        let s = &self.stats;
        s.calls.fetch_add(1, Ordering::Relaxed);
        if let Some(t) = recv {
            s.recv_ready.fetch_add(1, Ordering::Relaxed);
            s.recv_ns.fetch_add(t, Ordering::Relaxed);
        }
        if let Some(t) = send {
            s.send_ready.fetch_add(1, Ordering::Relaxed);
            s.send_ns.fetch_add(t, Ordering::Relaxed);
        }
        s.frames_in.fetch_add(frames, Ordering::Relaxed);
        s.bytes_in.fetch_add(bytes, Ordering::Relaxed);
    }

    // ---- Collectives ----

    /// Refuses a call other than the pending one.
    fn check_pending(&self, c: &Calls, word: u64) -> Result<()> {
        match c.pending {
            Some((_, w)) if w != word => Err(Error::mismatch(
                Collective::from_word(word),
                Collective::from_word(w),
                self.rank,
            )),
            _ => Ok(()),
        }
    }

    /// Runs collective `word` with this rank's `payload`; the root's result.
    fn collective(&self, word: u64, payload: &[u8], timeout: Timeout) -> Result<Vec<u8>> {
        let deadline = timeout.deadline();
        let mut c = lock(&self.calls);
        self.check_pending(&c, word)?;
        let seq = match c.pending {
            Some((s, _)) => s,
            None => {
                self.fence(deadline)?;
                c.seq += 1;
                let s = c.seq;
                c.pending = Some((s, word));
                if self.replicas > 1 {
                    self.contribute_everywhere(s, word, payload);
                } else if self.rank == 0 {
                    self.root_contribute(0, s, word, payload.to_vec());
                } else {
                    let mut h = Header::new(Kind::Coll);
                    (h.a, h.b) = (s, word);
                    self.send(0, &h, payload.as_ptr(), payload.len())?;
                }
                s
            }
        };
        let mut probed = Instant::now();
        let mut lagging_since: Option<Instant> = None;
        let o = self.wait_until(deadline, |e| {
            if let Some(o) = lock(&e.state).results.remove(&seq) {
                return Ok(Some(o));
            }
            if e.replicas > 1 {
                if probed.elapsed() >= COLL_PROBE {
                    probed = Instant::now();
                    e.probe_missing(seq);
                }
                // Replicas that lag one of their rank's by a replica timeout are left behind.
                let lagging = lock(&e.state).root.as_ref().and_then(|r| r.lagging(seq));
                match lagging {
                    Some(qs) => {
                        let since = *lagging_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= e.left_behind_after {
                            for q in qs {
                                e.leave_behind(q);
                            }
                        }
                    }
                    None => lagging_since = None,
                }
            } else if e.rank != 0 && e.gone_code(0) != H_OK {
                return Err(Error::PeerFailed(0));
            }
            Ok(None)
        })?;
        c.pending = None;
        if self.replicas > 1 {
            // The round may have settled without a pass (a peer found gone while this rank
            // sent its contribution): read what has come, a `Gone` naming this rank included,
            // before deciding whether this rank was left behind.
            self.poll(Duration::ZERO);
        }
        if self.left_behind.load(Ordering::Acquire) {
            return Err(Error::Setup(format!(
                "replica {} of rank {} came more than {:?} after another replica of its rank to a collective of the world, which went on without it",
                self.rank % self.replicas,
                self.rank / self.replicas,
                self.left_behind_after
            )));
        }
        let mine = Collective::from_word(word);
        match o {
            Outcome::Done(v) => Ok(v),
            Outcome::Mismatch { theirs, rank } => {
                Err(Error::mismatch(mine, Collective::from_word(theirs), rank))
            }
            Outcome::Failed(r) => Err(Error::PeerFailed(r)),
        }
    }

    /// A replicated job's collective `seq`: this rank's contribution to its own round and to
    /// every other rank's (each settles the round itself, so no rank is the one whose death
    /// ends the job). A rank that cannot be reached is gone for the collectives.
    fn contribute_everywhere(&self, seq: u64, word: u64, payload: &[u8]) {
        self.root_contribute(self.rank, seq, word, payload.to_vec());
        let mut h = Header::new(Kind::Coll);
        (h.a, h.b) = (seq, word);
        for p in (0..self.size).filter(|&p| p != self.rank && self.gone_code(p) == H_OK) {
            if self.send(p, &h, payload.as_ptr(), payload.len()).is_err() {
                self.unreachable(p);
            }
        }
    }

    /// Sends a frame to each rank that has not contributed to round `seq` yet; one whose
    /// link breaks is gone for the collectives.
    fn probe_missing(&self, seq: u64) {
        let missing = match lock(&self.state).root.as_ref() {
            Some(root) => root.missing(seq),
            None => return,
        };
        for p in missing.into_iter().filter(|&p| p != self.rank) {
            let h = Header::new(Kind::AckReq);
            if self.send(p, &h, std::ptr::null(), 0).is_err() {
                self.unreachable(p);
            }
        }
    }

    /// Leaves process `q` behind (see `collective`): tells it, then counts it failed here
    /// (which settles the rounds it lagged in and tells the others).
    fn leave_behind(&self, q: Rank) {
        let mut h = Header::new(Kind::Gone);
        (h.a, h.b) = (q as u64, 1);
        let _ = self.send(q, &h, std::ptr::null(), 0);
        self.mark_gone(q, false);
    }

    /// A `Gone` frame naming this rank: the others left it behind.
    fn gone_self(&self) {
        self.left_behind.store(true, Ordering::Release);
        self.wake();
    }

    /// `p` cannot be reached (its link broke) while this rank sends it a replicated job's
    /// collective: it has failed, for the collectives (which settle without it when a replica
    /// covers it) and for every call that names it, since the segments such a round registers
    /// give it no size. (Elsewhere a broken link leaves the health to the peer's own
    /// connection, see `send_frames`; a replicated job's world collectives run only at its
    /// start and end, where a peer that cannot be reached is dead.)
    fn unreachable(&self, p: Rank) {
        self.mark_gone(p, false);
    }

    /// What the progress engine has done so far.
    pub fn stats(&self) -> TransportStats {
        let s = &self.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TransportStats {
            calls: get(&s.calls),
            recv_ready: get(&s.recv_ready),
            send_ready: get(&s.send_ready),
            recv_time: Duration::from_nanos(get(&s.recv_ns)),
            send_time: Duration::from_nanos(get(&s.send_ns)),
            frames_in: get(&s.frames_in),
            frames_out: get(&s.frames_out),
            bytes_in: get(&s.bytes_in),
            bytes_out: get(&s.bytes_out),
        }
    }

    /// Posts a counted frame (see [`Kind::counted`]): acknowledged by the target once applied,
    /// which the next collective's fence waits for.
    fn post_counted(&self, p: Rank, h: &Header, payload: *const u8, len: usize) -> Result<()> {
        self.send(p, h, payload, len).map(drop)
    }

    /// Waits until every write and notification this rank has sent is applied at its
    /// target (acknowledged), or the target is gone: run before a rank contributes to a
    /// collective, so that what it wrote before the collective is in place for every rank
    /// after it (a queue's wait only promises local completion).
    fn fence(&self, deadline: Deadline) -> Result<()> {
        self.wait_until(deadline, |e| {
            let mut done = true;
            for p in (0..e.size).filter(|&p| p != e.rank) {
                let (sent, broken) = {
                    let l = lock(&e.links[p]);
                    (l.counted, l.broken)
                };
                if sent <= e.acked[p].load(Ordering::Acquire) || e.gone_code(p) != H_OK || broken {
                    continue;
                }
                done = false;
                // Ask once for what was sent so far (frames sent later need another ask).
                if e.asked[p].fetch_max(sent, Ordering::AcqRel) < sent {
                    let _ = e.send(p, &Header::new(Kind::AckReq), std::ptr::null(), 0);
                }
            }
            Ok(done.then_some(()))
        })
    }

    /// Checks a transfer: both segments ready, both ranges in bounds, the peer alive.
    fn check_transfer(&self, t: &Transfer) -> Result<(*mut u8, Arc<Mapping>)> {
        let r = t.remote.rank;
        let lseg = t.local.seg.0;
        let rseg = t.remote.seg.0;
        // Segments first (as the shared-memory engines), then ranges.
        self.size_at(lseg, self.rank)?;
        let rsize = self.size_at(rseg, r)?;
        let local = self.local_range(lseg, t.local.offset, t.len)?;
        // A dead peer's failure comes before its bounds (a covered dead replica's segment
        // has no size).
        in_bounds(r, rseg, t.remote.offset, t.len, rsize)
            .or_else(|e| self.peer_ok(r).and(Err(e)))?;
        self.peer_ok(r)?;
        Ok(local)
    }

    /// Checks the 8-byte word at `seg[offset]` of `rank` for an atomic operation: segment,
    /// bounds (a dead peer's failure first), alignment, the peer alive.
    fn check_word(&self, rank: Rank, seg: u32, offset: usize) -> Result<()> {
        let size = self.size_at(seg, rank)?;
        in_bounds(rank, seg, offset, 8, size).or_else(|e| self.peer_ok(rank).and(Err(e)))?;
        if offset % 8 != 0 {
            return Err(Error::Misaligned { offset, align: 8 });
        }
        self.peer_ok(rank)?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &self,
        rank: Rank,
        seg: u32,
        offset: usize,
        kind: Kind,
        c: u64,
        d: u64,
        deadline: Deadline,
    ) -> Result<u64> {
        self.check_word(rank, seg, offset)?;
        if rank == self.rank {
            let (ptr, _keep) = self.local_range(seg, offset, 8)?;
            // SAFETY: 8 bytes in bounds, 8-aligned (the mapping is page-aligned).
            let w = unsafe { &*(ptr as *const AtomicU64) };
            return Ok(if kind == Kind::FetchAdd {
                w.fetch_add(c, Ordering::AcqRel)
            } else {
                match w.compare_exchange(c, d, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(v) | Err(v) => v,
                }
            });
        }
        // The same call from the same thread after a timeout resumes the request that went
        // out then (its operation is applied once at the target), instead of sending another:
        // a timed-out atomic is called again until it completes, as GASPI programs do.
        let key = AtomicCall {
            thread: std::thread::current().id(),
            rank,
            seg,
            offset,
            kind: kind as u32,
            c,
            d,
        };
        let (id, resumed) = {
            let mut st = lock(&self.state);
            match st.atomic_resume.remove(&key) {
                Some(id) => (id, true),
                None => {
                    st.next_req += 1;
                    let id = st.next_req;
                    st.atomics.insert(id, None);
                    (id, false)
                }
            }
        };
        let sent = if resumed {
            Ok(())
        } else {
            let mut h = Header::new(kind);
            (h.seg, h.a, h.b, h.c, h.d) = (seg, offset as u64, id, c, d);
            self.send(rank, &h, std::ptr::null(), 0).map(drop)
        };
        let res = sent.and_then(|()| {
            self.wait_until(deadline, |e| {
                if let Some(Some(v)) = lock(&e.state).atomics.get(&id) {
                    return Ok(Some(*v));
                }
                e.peer_ok(rank).map(|()| None)
            })
        });
        {
            let mut st = lock(&self.state);
            if matches!(res, Err(Error::Timeout)) {
                // Kept for the call that resumes it (another call's answer is dropped).
                st.atomic_resume.insert(key, id);
            } else {
                st.atomics.remove(&id);
            }
        }
        match res? {
            Ok(v) => Ok(v),
            Err(()) => Err(Error::NoSuchSegment { seg, rank }),
        }
    }
}

/// An atomic call as a thread made it (what a repeat after a timeout must match to resume it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct AtomicCall {
    thread: std::thread::ThreadId,
    rank: Rank,
    seg: u32,
    offset: usize,
    kind: u32,
    c: u64,
    d: u64,
}

/// `OutOfBounds` unless `offset + len <= size`.
fn in_bounds(rank: Rank, seg: u32, offset: usize, len: usize, size: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::OutOfBounds {
            rank,
            seg,
            offset,
            len,
            size,
        }),
    }
}

impl Drop for TcpEngine {
    fn drop(&mut self) {
        self.leave(std::thread::panicking());
    }
}

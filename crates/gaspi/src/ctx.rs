//! The state of a GASPI process on tiers: one world, one heap, and GASPI's segments,
//! notifications, queues and groups laid out in that heap.
//!
//! The cluster tier registers segments collectively (every rank, one barrier), while GASPI
//! allocates segments locally and registers them rank by rank, 255 of them with 65,536
//! notifications each. So the library creates one tiers segment per rank, the *heap*, at
//! `gaspi_proc_init` (virtual memory only: pages are committed when touched and returned when
//! a segment is deleted), and every GASPI object lives at an offset in it:
//!
//! | offset | what |
//! |---|---|
//! | 0 | the kill word (`gaspi_proc_kill`) |
//! | `dir` | `[rank][segment]` directory entries: data offset, size, notification offset, valid |
//! | `bar` | `[group][rank]` barrier counters, incremented by the peers |
//! | `rcnt` | `[group][rank]` allreduce counters |
//! | `slots` | `[group][2][rank]` allreduce contributions |
//! | `arena` | GASPI segments: notification words (8 bytes each), then the data |
//!
//! Data moves with the cluster tier's queues between heap offsets; notifications are set with
//! its remote atomics (a write of the data first, so a notification never overtakes its data);
//! barriers and reductions over groups count with remote fetch-and-add.

use crate::types::*;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock, TryLockError};
use std::time::{Duration, Instant};
use tiers_cluster::{Error, Health, SegId, Timeout, Transfer, World, QUEUES};

/// A result whose error is a GASPI return code.
pub type R<T> = std::result::Result<T, i32>;

const NSEG: usize = 256;
/// The page size the heap's layout and bound ranges are rounded to.
pub(crate) const PAGE: usize = 4096;
/// The heap is tiers segment 0.
pub const HEAP: SegId = SegId(0);

/// `x` rounded up to a multiple of `a`, for the runtime's own sizes, which cannot overflow
/// (table sizes, checked bound ranges); a program's sizes go through `checked_next_multiple_of`
/// (`seg.rs`).
pub(crate) fn align(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// Converts a GASPI timeout.
pub fn tmo(t: gaspi_timeout_t) -> Timeout {
    match t {
        GASPI_BLOCK => Timeout::Block,
        GASPI_TEST => Timeout::Test,
        ms => Timeout::millis(ms),
    }
}

/// A cluster-tier error as a GASPI return code.
pub fn code(e: &Error) -> i32 {
    match e {
        Error::Timeout => GASPI_TIMEOUT,
        Error::QueueFull { .. } => GASPI_QUEUE_FULL,
        Error::NoSuchRank { .. } => GASPI_ERR_INV_RANK,
        Error::NoSuchSegment { .. } | Error::SegmentIdTooLarge { .. } => GASPI_ERR_INV_SEG,
        Error::OutOfBounds { .. } => GASPI_ERR_INV_REM_OFF,
        Error::Misaligned { .. } => GASPI_ERR_UNALIGN_OFF,
        Error::NoSuchQueue { .. } => GASPI_ERR_INV_QUEUE,
        Error::NoSuchNotification { .. } => GASPI_ERR_INV_NOTIF_ID,
        Error::ZeroNotification { .. } => GASPI_ERR_INV_NOTIF_VAL,
        Error::MessageTooLarge { .. } | Error::BufferTooSmall { .. } => GASPI_ERR_INV_COMMSIZE,
        _ => GASPI_ERROR,
    }
}

/// [`err`] for `gaspi_proc_init`, which also says why on stderr: a return code alone cannot
/// tell a program's user that, say, the launcher is gone or the heap cannot be mapped (GPI-2
/// prints its start-up errors too). A timeout is not reported: the program may call again.
fn init_failed(e: Error) -> i32 {
    if !matches!(e, Error::Timeout) {
        eprintln!("gaspi_proc_init: {e}");
    }
    err(e)
}

/// [`code`], taking the error by value (for `map_err`).
pub fn err(e: Error) -> i32 {
    code(&e)
}

/// The longest nap of a GASPI wait: about a default timer slack, the shortest nap Linux
/// really takes.
const POLL_NAP_MAX: Duration = Duration::from_micros(50);

/// Polls `cond` until it holds or `timeout` runs out: spins, then yields, then sleeps.
pub fn poll(timeout: gaspi_timeout_t, cond: impl FnMut() -> R<bool>) -> R<()> {
    // A GASPI program polls for latency first (GPI-2 never stops spinning): spin for the
    // cluster tier's spin time, then yield, then nap, at most `POLL_NAP_MAX` at a time, so
    // that a wait for a large transfer (a 1 MiB write takes about 50 µs) overshoots by little.
    poll_napping(timeout, POLL_NAP_MAX, cond)
}

/// [`poll`] with naps of at most `nap_max`.
fn poll_napping(
    timeout: gaspi_timeout_t,
    nap_max: Duration,
    mut cond: impl FnMut() -> R<bool>,
) -> R<()> {
    let start = Instant::now();
    let mut backoff = tiers_node::Backoff::new()
        .spin_limit(0)
        .spin_for(tiers_node::Backoff::SPIN_TIME)
        .with_sleep(tiers_node::Backoff::SLEEP_MIN, nap_max);
    loop {
        if cond()? {
            return Ok(());
        }
        if timeout == GASPI_TEST
            || (timeout != GASPI_BLOCK && start.elapsed() >= Duration::from_millis(timeout))
        {
            return Err(GASPI_TIMEOUT);
        }
        backoff.snooze();
    }
}

/// A local GASPI segment.
#[derive(Clone, Copy, Debug)]
pub struct Seg {
    /// Heap offset of the allocation (the notification words).
    pub notif: usize,
    /// Heap offset of the data.
    pub data: usize,
    /// Bytes of data.
    pub size: usize,
    /// Bytes of the allocation (the notification words, then the data unless `alias`).
    pub total: usize,
    /// The user's pointer for a bound segment (null otherwise).
    pub user: usize,
    /// A bound segment whose bytes are another segment's (a part of it, as GPI-2 binds a
    /// segment's memory again): its data is that segment's, and deleting it frees only its
    /// notification words.
    pub alias: bool,
    /// Made by a `gaspi_segment_create` or `gaspi_segment_use` that has not completed (it
    /// timed out registering or in its barrier): only the same call may find it made already
    /// and go on; any other finds the id taken.
    pub resumable: bool,
}

/// Where a segment lies at some rank.
#[derive(Clone, Copy, Debug)]
pub struct Remote {
    /// Heap offset of the data at that rank.
    pub data: usize,
    /// Bytes of the data.
    pub size: usize,
    /// Heap offset of the notification words at that rank.
    pub notif: usize,
}

/// A GASPI group: its members (ranks, ascending) and whether it has been committed.
pub struct Group {
    /// The member ranks, ascending.
    pub members: Vec<usize>,
    /// `gaspi_group_commit` has succeeded: collectives may use the group.
    pub committed: bool,
}

/// A group id's slot: the group on it, if one exists. Locked only briefly (a collective of
/// the group holds its [`CollSlot`] instead), so that calls that read or change groups never
/// wait for a collective.
pub struct GroupSlot {
    /// The group on this id, if one exists.
    pub group: Option<Group>,
}

/// The collective that a group has under way, as GPI-2 tells them apart
/// (`active_coll_op`): one that timed out must be called again, to resume it, before another
/// collective of the group may start (`GASPI_ERR_ACTIVE_COLL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coll {
    /// `gaspi_barrier` (and `gaspi_group_commit`).
    Barrier,
    /// `gaspi_allreduce`.
    Allreduce,
    /// `gaspi_allreduce_user`.
    AllreduceUser,
}

/// A group id's collective state, locked by the collective under way (with the call's
/// timeout, [`Ctx::lock_within`]); the counts survive the group's deletion, so that a new
/// group on the same id never mistakes old arrivals for new ones.
pub struct CollSlot {
    /// The collective that did not complete and must be resumed first.
    pub active: Option<Coll>,
    /// A barrier of this group timed out and must be resumed before a new one starts.
    pub bar_pending: bool,
    /// The barrier count expected next from each member.
    pub bexp: Vec<u64>,
    /// A reduction of this group timed out: the slot parity it uses, to resume it.
    pub red_pending: Option<usize>,
    /// The reduction count expected next from each member.
    pub rexp: Vec<u64>,
    /// Reductions of this group id completed by this rank (a round each, see
    /// [`Ctx::group_reduce`]).
    pub rdone: u64,
    /// The round of a reduction of several that did not complete (it timed out).
    pub red_round: usize,
    /// `rdone` when the group now on this id was committed: its reductions alternate their
    /// slots from there, the same on every member, whatever each did under earlier groups of
    /// the id (members of another group there did more or fewer).
    pub rbase: u64,
}

/// Where the runtime's own tables lie in the heap, in this order, before the segments' arena.
pub struct Layout {
    /// The segment directory: a 32-byte entry per (rank, segment id).
    pub dir: usize,
    /// The barrier counters: a word per (group, rank).
    pub bar: usize,
    /// The reduction counters: a word per (group, rank).
    pub rcnt: usize,
    /// The reduction slots: two (alternating) per (group, rank).
    pub slots: usize,
    /// The first byte of the arena that segments are allocated from.
    pub arena: usize,
}

impl Layout {
    /// The layout for `n` ranks.
    pub fn new(n: usize) -> Layout {
        let dir = PAGE;
        let bar = align(dir + n * NSEG * 32, 64);
        let rcnt = bar + GROUP_MAX * n * 8;
        let slots = align(rcnt + GROUP_MAX * n * 8, PAGE);
        let arena = align(slots + GROUP_MAX * 2 * n * REDUCE_SLOT, 1 << 21);
        Layout {
            dir,
            bar,
            rcnt,
            slots,
            arena,
        }
    }
}

/// The GASPI process: the cluster-tier world and the state GASPI adds to it, created by
/// `gaspi_proc_init` and dropped by `gaspi_proc_term`.
pub struct Ctx {
    /// The cluster-tier world this process is a rank of.
    pub w: World,
    /// This process's rank.
    pub rank: usize,
    /// The number of ranks.
    pub n: usize,
    /// The heap mapping (tiers segment 0) in this process.
    pub base: *mut u8,
    /// Bytes of the heap.
    pub heap_len: usize,
    /// Where the runtime's tables lie in the heap.
    pub lay: Layout,
    /// The configuration the process was started with.
    pub cfg: gaspi_config_t,
    /// The world runs on the shared-memory engine (every rank's heap is mapped here).
    pub mem_engine: bool,
    /// The engine's progress can sleep until data arrives (the tcp engine): the watcher
    /// stands by in it, and a call that waits drives it itself ([`Ctx::poll`]).
    pub sleeps: bool,
    /// A call that waits drives the engine's progress itself, sleeping in it at most this
    /// long at a time ([`Ctx::drive`]): on the tcp engine, and on the mpi engine where other
    /// hosts ring a doorbell (whose sleep this host's ranks cannot end: shorter naps).
    drive_nap: Option<Duration>,
    /// The local segments, by GASPI segment id.
    pub segs: RwLock<Vec<Option<Seg>>>,
    /// The heap's free ranges `(offset, length)`, in offset order.
    pub(crate) free: Mutex<Vec<(usize, usize)>>,
    /// Requests posted on each queue and not yet waited for (for `GASPI_QUEUE_FULL`).
    pub posted: Vec<AtomicUsize>,
    /// Per queue, the local notifications (heap offsets) of `gaspi_read_notify` calls that
    /// timed out waiting for their reads: the queue's next `gaspi_wait` sets them.
    pub read_notified: Vec<Mutex<Vec<usize>>>,
    /// How many notifications `read_notified` holds in all.
    pub reads_left: AtomicUsize,
    /// Per queue, a failure that a look for left reads found (`look_at_left_reads`): the
    /// queue's `gaspi_wait` returns it.
    pub queue_error: Vec<Mutex<Option<i32>>>,
    /// Which queues exist (`gaspi_queue_create`/`delete`).
    pub queue_exists: Vec<AtomicBool>,
    /// The groups, by id.
    pub groups: Vec<Mutex<GroupSlot>>,
    /// The collective state of each group id.
    pub colls: Vec<Mutex<CollSlot>>,
    /// When the process started (`gaspi_time_get` counts from here).
    pub start: Instant,
    /// Set at termination: the watcher ends, and calls waiting in other threads leave.
    pub stop: AtomicBool,
    /// Calls waiting in this context ([`Ctx::waiting`]): `term` drops the world only once
    /// none is left inside it. A line of its own: the watcher reads `stop` beside it.
    waiting: tiers_node::CachePadded<AtomicUsize>,
    /// Passive send and receive.
    pub passive: crate::passive::Passive,
    /// The statistics counters.
    pub stats: crate::stats::Stats,
}

// SAFETY: `base` is the heap mapping, alive as long as the world; all shared state is in
// atomics, locks or the heap's atomic words.
unsafe impl Send for Ctx {}
// SAFETY: as above.
unsafe impl Sync for Ctx {}

static CTX: AtomicPtr<Ctx> = AtomicPtr::new(std::ptr::null_mut());
/// The configuration `gaspi_config_set` left for the next `gaspi_proc_init`.
pub static CONFIG: Mutex<Option<gaspi_config_t>> = Mutex::new(None);

/// The configuration in force: the one set, else the default.
pub fn config() -> gaspi_config_t {
    CONFIG
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .unwrap_or_else(default_config)
}

/// The running process's context.
pub fn ctx() -> R<&'static Ctx> {
    let p = CTX.load(Ordering::Acquire);
    if p.is_null() {
        return Err(GASPI_ERR_NOINIT);
    }
    // SAFETY: set by init from a leaked box, cleared by term.
    Ok(unsafe { &*p })
}

/// The world of a `gaspi_proc_init` that timed out joining it or making its heap (a
/// collective segment): the next call resumes with it. Dropped, it would leave the job, and
/// the ranks that went on would see this one gone. With it, whether the join's barrier
/// completed (the heap's creation is what remains).
static JOINED: Mutex<Option<(tiers_cluster::World, bool)>> = Mutex::new(None);

/// The thread that ran the last `gaspi_proc_term` (0: none has).
static TERMINATOR: AtomicU64 = AtomicU64::new(0);

/// `gaspi_proc_term` ran in this process: the library does not start again (its world has
/// left the job, which the other ranks saw; a second world would be another job's rank).
static ENDED: AtomicBool = AtomicBool::new(false);

/// This thread's number (from 1), for [`TERMINATOR`].
fn thread_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static ME: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    ME.with(|me| *me)
}

/// [`ctx`] for a call that waits up to `timeout`. After `gaspi_proc_term`, such a call from
/// another thread than the one that terminated is a wait that began as the library ended
/// (a serving thread looping back into its receive): with `GASPI_BLOCK` it blocks for good,
/// as a call already waiting does ([`after_term`]); otherwise, and in the thread that
/// terminated, `GASPI_ERR_NOINIT`.
pub fn ctx_to_wait(timeout: gaspi_timeout_t) -> R<&'static Ctx> {
    let r = ctx();
    if r.is_err() {
        let by = TERMINATOR.load(Ordering::Acquire);
        if by != 0 && by != thread_number() {
            return after_term(Err(TERMINATED), timeout);
        }
    }
    r
}

/// Whether `gaspi_proc_init` has run (and `gaspi_proc_term` not yet).
pub fn initialized() -> bool {
    !CTX.load(Ordering::Acquire).is_null()
}

/// The heap's size: `TIERS_GASPI_HEAP`, else 32 GiB of virtual memory. Off the shm engine
/// (the local engine of a program started without a launcher, the mpi engine) the heap may be
/// private anonymous memory, which the kernel's overcommit heuristic refuses beyond the
/// machine's memory, so there the default is at most half the physical memory, shared by
/// the `ranks_here` ranks of this host.
fn heap_size(private: bool, ranks_here: usize) -> usize {
    let parse = |v: &str| -> Option<usize> {
        let v = v.trim();
        let (num, mul) = match v.chars().last()? {
            'G' | 'g' => (&v[..v.len() - 1], 1usize << 30),
            'M' | 'm' => (&v[..v.len() - 1], 1 << 20),
            'K' | 'k' => (&v[..v.len() - 1], 1 << 10),
            _ => (v, 1),
        };
        num.parse::<usize>().ok()?.checked_mul(mul)
    };
    std::env::var("TIERS_GASPI_HEAP")
        .ok()
        .and_then(|v| parse(&v))
        .unwrap_or_else(|| {
            let default = 32usize << 30;
            if !private {
                return default;
            }
            // SAFETY: sysconf has no preconditions.
            let (pages, page) = unsafe {
                (
                    libc::sysconf(libc::_SC_PHYS_PAGES),
                    libc::sysconf(libc::_SC_PAGESIZE),
                )
            };
            match (usize::try_from(pages), usize::try_from(page)) {
                (Ok(n), Ok(p)) if n > 0 && p > 0 => {
                    default.min(n.saturating_mul(p) / 2 / ranks_here.max(1))
                }
                _ => default,
            }
        })
}

/// `gaspi_proc_init`: joins the job, creates the heap, starts the kill watcher.
pub fn init(timeout: gaspi_timeout_t) -> R<()> {
    if initialized() {
        return Err(GASPI_ERR_INITED);
    }
    if ENDED.load(Ordering::Acquire) {
        eprintln!("gaspi_proc_init: this process ended its part in the job (gaspi_proc_term); it cannot join again");
        return Err(GASPI_ERROR);
    }
    let cfg = config();
    let start = Instant::now();
    // Between hosts over MPI, one-sided operations as ordered messages: the watcher below
    // applies what arrives while the program computes, and GASPI's ordering (a notification
    // after its data) then needs no round trip (`TIERS_MPI_ONESIDED=window` chooses windows).
    tiers_cluster::engine::prefer_onesided_messages();
    let resumed = JOINED.lock().unwrap_or_else(|e| e.into_inner()).take();
    let (w, joined) = match resumed {
        Some(r) => r,
        None => (
            tiers_cluster::Builder::new()
                .queue_depth(1 << 24)
                .attach()
                .map_err(init_failed)?,
            false,
        ),
    };
    // Every rank joins at the world's first barrier, and then makes its heap (a collective
    // segment); either may time out, and the next call resumes where this one stopped.
    let stash = |w: tiers_cluster::World, joined: bool| {
        *JOINED.lock().unwrap_or_else(|e| e.into_inner()) = Some((w, joined));
        GASPI_TIMEOUT
    };
    if !joined {
        // What `attach` left of the timeout (it may have waited in a rendezvous).
        match w.barrier(tmo(time_left(timeout, start))) {
            Ok(()) => {}
            Err(Error::Timeout) => return Err(stash(w, false)),
            Err(e) => return Err(init_failed(e)),
        }
    }
    let n = w.size();
    let rank = w.rank();
    let lay = Layout::new(n);
    let heap_len = heap_size(w.engine_name() != "shm", w.local_size()).max(lay.arena + (64 << 20));
    let made = w
        .segment_timeout(HEAP, heap_len, tmo(time_left(timeout, start)))
        .map(|s| s.as_ptr());
    let base = match made {
        Ok(p) => p,
        Err(Error::Timeout) => return Err(stash(w, true)),
        Err(e) => return Err(init_failed(e)),
    };
    let mem_engine = matches!(w.engine_name(), "shm" | "local");
    let (drives, sleeps, stands_by) = if mem_engine {
        (false, false, false)
    } else {
        let e = w.engine();
        let drives = e.needs_progress() && e.any_thread();
        (
            drives,
            drives && e.progress_sleeps(),
            drives && e.progress_stands_by(),
        )
    };
    let drive_nap = if sleeps {
        Some(DRIVE_NAP)
    } else {
        stands_by.then_some(POLL_NAP_MAX)
    };
    let qn = cfg.queue_num.min(QUEUE_MAX) as usize;
    let c = Box::new(Ctx {
        rank,
        n,
        base,
        heap_len,
        cfg,
        mem_engine,
        sleeps,
        drive_nap,
        segs: RwLock::new(vec![None; NSEG]),
        free: Mutex::new(vec![(lay.arena, heap_len - lay.arena)]),
        lay,
        posted: (0..QUEUE_MAX).map(|_| AtomicUsize::new(0)).collect(),
        read_notified: (0..QUEUE_MAX).map(|_| Mutex::new(Vec::new())).collect(),
        reads_left: AtomicUsize::new(0),
        queue_error: (0..QUEUE_MAX).map(|_| Mutex::new(None)).collect(),
        queue_exists: (0..QUEUE_MAX as usize)
            .map(|q| AtomicBool::new(q < qn))
            .collect(),
        groups: (0..GROUP_MAX)
            .map(|g| {
                Mutex::new(GroupSlot {
                    group: (g == 0).then(|| Group {
                        members: (0..n).collect(),
                        committed: true,
                    }),
                })
            })
            .collect(),
        colls: (0..GROUP_MAX)
            .map(|_| {
                Mutex::new(CollSlot {
                    active: None,
                    bar_pending: false,
                    bexp: vec![0; n],
                    red_pending: None,
                    rexp: vec![0; n],
                    rdone: 0,
                    red_round: 0,
                    rbase: 0,
                })
            })
            .collect(),
        start: Instant::now(),
        stop: AtomicBool::new(false),
        waiting: tiers_node::CachePadded(AtomicUsize::new(0)),
        passive: Default::default(),
        stats: crate::stats::Stats::new(n),
        w,
    });
    let p = Box::into_raw(c);
    TERMINATOR.store(0, Ordering::Release);
    CTX.store(p, Ordering::Release);
    let addr = p as usize;
    // The kill watcher: `gaspi_proc_kill` sets this rank's kill word (another process writes
    // it, so nothing can wake the watcher: it looks every `KILL_POLL`). On an engine whose
    // one-sided operations complete at this rank only while it calls into MPI (the mpi engine
    // between hosts, osc over TCP), it also lets MPI progress every `PROGRESS_POLL`: a GASPI
    // program may wait for a write by spinning on its own segment's memory, calling nothing
    // (GPI-2's write_lat does), and the write must land all the same, as it does on RDMA.
    // Where the engine's progress can sleep until its sockets have data (the tcp engine), or
    // until another host rings this rank's doorbell (the mpi engine's messages mode), the
    // watcher stands by in that sleep instead, as GPI-2's TCP device's thread does: an
    // arriving write is applied at once, and a quiet rank costs no wake-ups but the kill
    // word's.
    let watcher = std::thread::Builder::new()
        .name("gaspi-kill".into())
        .spawn(move || {
            // SAFETY: the context outlives the watcher: term joins it before dropping it.
            let c = unsafe { &*(addr as *const Ctx) };
            let nap = if drives { PROGRESS_POLL } else { KILL_POLL };
            while !c.stop.load(Ordering::Acquire) {
                if c.word(0).load(Ordering::Acquire) != 0 {
                    // SAFETY: ends the process at once, as GPI-2's kill does.
                    unsafe { libc::_exit(0) };
                }
                if stands_by {
                    c.w.progress_stand_by(KILL_POLL);
                    continue;
                }
                if drives {
                    // Probes, not a wait: a wait's pace may yield for milliseconds first when
                    // Open MPI is told to yield when idle. Two of them: Open MPI's progress
                    // runs its callbacks before it reads its sockets, so a put read by one
                    // probe is applied by the next (one probe per wake-up took 360 µs per
                    // GPI-2 write_lat step across two namespaced hosts, two take 130).
                    c.w.progress_now();
                    c.w.progress_now();
                }
                std::thread::park_timeout(nap);
            }
        })
        .map_err(|_| GASPI_ERROR)?;
    *WATCHER.lock().unwrap_or_else(|e| e.into_inner()) = Some(watcher);
    Ok(())
}

/// How often the kill watcher looks at this rank's kill word: a killed rank ends within this
/// long, and the look costs a wake-up every this long.
const KILL_POLL: Duration = Duration::from_millis(2);

/// How often the watcher lets MPI progress where the engine needs it: the most a write to a
/// rank that only spins on its memory waits for the target's side of MPI. 20 µs: GPI-2's
/// write_lat across two namespaced hosts takes 100 µs per step (130 at 50 µs); each wake-up
/// costs two `MPI_Iprobe`s (a few microseconds) while the program runs. With the kernel's
/// default timer slack the nap lasts about 70 µs; taking the slack away (`PR_SET_TIMERSLACK`
/// of 1 ns) made loopback `write_lat` 47 -> 39 µs but doubled every mpi-engine figure across
/// the namespaced hosts (the watchers' probes then took the cores from the programs), and
/// 5 µs naps made the watcher a CPU hog that the scheduler ran only at its 4 ms tick.
const PROGRESS_POLL: Duration = Duration::from_micros(20);

/// The longest a waiting call sleeps in the tcp engine's `epoll_wait` before it checks its
/// condition and timeout again (arriving data and local notifications end it sooner).
const DRIVE_NAP: Duration = Duration::from_millis(1);

/// The kill watcher of the running context, joined by `term`.
static WATCHER: Mutex<Option<std::thread::JoinHandle<()>>> = Mutex::new(None);

/// What a wait returns inside the library when it sees `gaspi_proc_term` begin; never a
/// program's return code ([`after_term`] turns it into one).
pub const TERMINATED: i32 = i32::MIN;

/// The longest a waiting call stays inside the cluster tier before it looks at `stop`.
pub const STOP_LOOK: Duration = Duration::from_millis(10);

/// How long `term` waits for the calls waiting in other threads to leave.
const TERM_GRACE: Duration = Duration::from_millis(500);

/// Looks of a wait on the shm engine before it counts itself as waiting ([`Ctx::poll`]):
/// a few microseconds.
const UNCOUNTED_SPINS: usize = 256;

/// How long `term` lets waits that spin uncounted see `stop` and leave: far above their
/// spin, and above a scheduler tick, for one preempted between two looks.
const UNCOUNTED: Duration = Duration::from_millis(10);

/// A call waiting in the context, counted while it may be inside the world.
pub struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Ctx {
    /// Counts a call that may wait until another thread terminates the process's GASPI, so
    /// that `term` leaves the world alone until it has left: `Err(TERMINATED)` where
    /// termination has begun (nothing of the world may be touched then). With `term`'s
    /// store of `stop` before its look at the count, both sequentially consistent, either
    /// `term` sees this call counted or this call sees `stop`.
    pub fn waiting(&self) -> R<Waiting<'_>> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let w = Waiting(&self.waiting);
        if self.stop.load(Ordering::SeqCst) {
            return Err(TERMINATED);
        }
        Ok(w)
    }

    /// Runs `f`, a call of `timeout` that may wait, counted as waiting ([`Ctx::waiting`]),
    /// and ends it as [`after_term`] says if another thread terminates meanwhile (`f`
    /// returns `Err(TERMINATED)` when it sees that).
    pub fn guarded<T>(&self, timeout: gaspi_timeout_t, f: impl FnOnce() -> R<T>) -> R<T> {
        let r = match self.waiting() {
            Ok(_in) => f(),
            Err(e) => Err(e),
        };
        after_term(r, timeout)
    }

    /// A wait inside the cluster tier by `f` for up to `timeout`, as a waiting call: one
    /// look first (`Timeout::Test`: no clock read, nothing counted), then, if that finds it
    /// not done, [`Ctx::guarded`] and [`Ctx::sliced`].
    pub fn wait_world<T>(
        &self,
        timeout: gaspi_timeout_t,
        mut f: impl FnMut(Timeout) -> std::result::Result<T, Error>,
    ) -> R<T> {
        match f(Timeout::Test) {
            Err(Error::Timeout) if timeout != GASPI_TEST => {
                self.guarded(timeout, || self.sliced(timeout, f))
            }
            r => r.map_err(err),
        }
    }

    /// Runs `f`, a wait inside the cluster tier, with timeouts of at most [`STOP_LOOK`]
    /// until it ends otherwise than by that timeout, `timeout` runs out (`GASPI_TIMEOUT`), or
    /// termination begins (`Err(TERMINATED)`). `GASPI_TEST` is one look.
    pub fn sliced<T>(
        &self,
        timeout: gaspi_timeout_t,
        mut f: impl FnMut(Timeout) -> std::result::Result<T, Error>,
    ) -> R<T> {
        if timeout == GASPI_TEST {
            return f(Timeout::Test).map_err(err);
        }
        let start = Instant::now();
        loop {
            let slice = match timeout {
                GASPI_BLOCK => STOP_LOOK,
                ms => Duration::from_millis(ms)
                    .saturating_sub(start.elapsed())
                    .min(STOP_LOOK),
            };
            match f(Timeout::After(slice)) {
                Err(Error::Timeout) => {
                    self.check_stop()?;
                    if timeout != GASPI_BLOCK && start.elapsed() >= Duration::from_millis(timeout) {
                        return Err(GASPI_TIMEOUT);
                    }
                }
                r => return r.map_err(err),
            }
        }
    }

    /// `Err(TERMINATED)` once termination has begun: what a waiting call checks between
    /// its looks at its condition.
    pub fn check_stop(&self) -> R<()> {
        if self.stop.load(Ordering::SeqCst) {
            Err(TERMINATED)
        } else {
            Ok(())
        }
    }

    /// Locks `m`, which another thread of this rank may hold for a whole wait (a blocking
    /// receive, a collective), within `timeout`, as GPI-2's `lock_gaspi_tout` does:
    /// `GASPI_TIMEOUT` when it stays taken, one try for `GASPI_TEST`. A wait for the lock is
    /// a waiting call ([`Ctx::guarded`]), so the caller must not be inside one.
    pub fn lock_within<'a, T>(
        &self,
        m: &'a Mutex<T>,
        timeout: gaspi_timeout_t,
    ) -> R<MutexGuard<'a, T>> {
        match m.try_lock() {
            Ok(g) => Ok(g),
            Err(TryLockError::Poisoned(e)) => Ok(e.into_inner()),
            Err(TryLockError::WouldBlock) if timeout == GASPI_TEST => Err(GASPI_TIMEOUT),
            Err(TryLockError::WouldBlock) => {
                self.guarded(timeout, || self.lock_counted(m, timeout))
            }
        }
    }

    /// [`Ctx::lock_within`] inside a waiting call: tries, then spins, yields and naps (up to
    /// `LOCK_NAP_MAX`, a holder may keep the lock for as long as a blocking call waits)
    /// until the lock is free, `timeout` runs out or termination begins (`Err(TERMINATED)`).
    pub fn lock_counted<'a, T>(
        &self,
        m: &'a Mutex<T>,
        timeout: gaspi_timeout_t,
    ) -> R<MutexGuard<'a, T>> {
        let mut got = None;
        poll_napping(timeout, LOCK_NAP_MAX, || {
            got = match m.try_lock() {
                Ok(g) => Some(g),
                Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            };
            if got.is_none() {
                self.check_stop()?;
            }
            Ok(got.is_some())
        })?;
        got.ok_or(GASPI_TIMEOUT)
    }
}

/// The longest nap of a wait for a lock ([`Ctx::lock_counted`]): how late a thread learns
/// that the lock it waits for was released, and one wake-up per this long while it waits.
const LOCK_NAP_MAX: Duration = Duration::from_millis(1);

/// What is left of `timeout` since `start`: `GASPI_BLOCK` stays, and a timeout that has run
/// out (or `GASPI_TEST`) is `GASPI_TEST`, one look.
pub fn time_left(timeout: gaspi_timeout_t, start: Instant) -> gaspi_timeout_t {
    match timeout {
        GASPI_BLOCK | GASPI_TEST => timeout,
        ms => ms.saturating_sub(start.elapsed().as_millis() as u64),
    }
}

/// The return of a call that waited while another thread ran `gaspi_proc_term`: a call that
/// would block forever stays blocked (its thread parks, touching nothing of the library, as
/// it stays blocked under GPI-2: a detached thread serving passive messages is a common
/// GASPI pattern, and the process ends when its main thread returns), one with a timeout
/// returns `GASPI_ERR_NOINIT`. Call only after the [`Waiting`] guard is dropped.
pub fn after_term<T>(r: R<T>, timeout: gaspi_timeout_t) -> R<T> {
    match r {
        Err(TERMINATED) if timeout == GASPI_BLOCK => loop {
            std::thread::park();
        },
        Err(TERMINATED) => Err(GASPI_ERR_NOINIT),
        r => r,
    }
}

/// `gaspi_proc_term`.
pub fn term() -> R<()> {
    let p = CTX.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if p.is_null() {
        return Err(GASPI_ERR_NOINIT);
    }
    TERMINATOR.store(thread_number(), Ordering::Release);
    ENDED.store(true, Ordering::Release);
    // SAFETY: from init's Box, alive until dropped below.
    let c = unsafe { &*p };
    c.stop.store(true, Ordering::SeqCst);
    // The watcher reads the context until it sees `stop`: wake it and wait for it to end.
    if let Some(w) = WATCHER.lock().unwrap_or_else(|e| e.into_inner()).take() {
        w.thread().unpark();
        let _ = w.join();
    }
    // Waits spinning uncounted see `stop` within microseconds; counted ones look at it at
    // least every `STOP_LOOK` and leave.
    std::thread::sleep(UNCOUNTED);
    // One that does not within the grace (a wait inside the cluster tier that does not look,
    // such as a queue's) keeps the world: it is left to the process's exit rather than
    // dropped under that call.
    let grace = Instant::now() + TERM_GRACE;
    while c.waiting.load(Ordering::SeqCst) > 0 {
        if Instant::now() >= grace {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: nobody else reaches the context once CTX is cleared and the watcher has ended
    // (calls racing term are the program's error); the world is dropped once. The Box's
    // memory itself is left (a few hundred bytes), as a program may call term from a thread
    // while another still holds a reference obtained before.
    unsafe { std::ptr::drop_in_place(p) };
    Ok(())
}

impl Ctx {
    /// The 8-byte word at heap offset `off` (8-aligned, inside the heap).
    pub fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.heap_len);
        // SAFETY: aligned and inside the heap mapping, which lives as long as self.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    /// Heap offset of the directory entry of `rank`'s segment `seg`.
    pub fn dir(&self, rank: usize, seg: usize) -> usize {
        self.lay.dir + (rank * NSEG + seg) * 32
    }
    /// Heap offset of `rank`'s barrier counter in group `g`.
    pub fn bar(&self, g: usize, rank: usize) -> usize {
        self.lay.bar + (g * self.n + rank) * 8
    }
    /// Heap offset of `rank`'s reduction counter in group `g`.
    pub fn rcnt(&self, g: usize, rank: usize) -> usize {
        self.lay.rcnt + (g * self.n + rank) * 8
    }
    /// Heap offset of `rank`'s reduction slot `parity` (0 or 1) in group `g`.
    pub fn slot(&self, g: usize, parity: usize, rank: usize) -> usize {
        self.lay.slots + ((g * 2 + parity) * self.n + rank) * REDUCE_SLOT
    }

    /// `rank` as an index, or `GASPI_ERR_INV_RANK`.
    pub fn check_rank(&self, rank: gaspi_rank_t) -> R<usize> {
        let r = rank as usize;
        if r >= self.n {
            return Err(GASPI_ERR_INV_RANK);
        }
        Ok(r)
    }

    /// The local segment `id`, or `GASPI_ERR_INV_SEG`.
    pub fn seg(&self, id: gaspi_segment_id_t) -> R<Seg> {
        self.segs.read().unwrap_or_else(|e| e.into_inner())[id as usize].ok_or(GASPI_ERR_INV_SEG)
    }

    /// Segment `id` as `rank` registered it with this rank.
    pub fn remote(&self, rank: usize, id: gaspi_segment_id_t) -> R<Remote> {
        if rank == self.rank {
            let s = self.seg(id)?;
            return Ok(Remote {
                data: s.data,
                size: s.size,
                notif: s.notif,
            });
        }
        let e = self.dir(rank, id as usize);
        if self.word(e + 24).load(Ordering::Acquire) == 0 {
            return Err(GASPI_ERR_INV_SEG);
        }
        Ok(Remote {
            data: self.word(e).load(Ordering::Relaxed) as usize,
            size: self.word(e + 8).load(Ordering::Relaxed) as usize,
            notif: self.word(e + 16).load(Ordering::Relaxed) as usize,
        })
    }

    /// The user's view of segment `id`.
    pub fn ptr(&self, s: &Seg) -> *mut u8 {
        if s.user != 0 {
            s.user as *mut u8
        } else {
            // SAFETY: inside the heap.
            unsafe { self.base.add(s.data) }
        }
    }

    /// Checks a queue id.
    pub fn queue(&self, q: gaspi_queue_id_t) -> R<usize> {
        let q = q as usize;
        if q >= QUEUE_MAX as usize || !self.queue_exists[q].load(Ordering::Acquire) {
            return Err(GASPI_ERR_INV_QUEUE);
        }
        Ok(q)
    }

    /// Reserves `k` entries of GASPI queue `q`.
    pub fn reserve(&self, q: usize, k: usize) -> R<()> {
        let c = &self.posted[q];
        let old = c.fetch_add(k, Ordering::Relaxed);
        if old + k > self.cfg.queue_size_max as usize {
            c.fetch_sub(k, Ordering::Relaxed);
            return Err(GASPI_QUEUE_FULL);
        }
        Ok(())
    }

    /// Gives back `k` of queue `q`'s places taken by a reservation that was not posted.
    pub fn unreserve(&self, q: usize, k: usize) {
        self.posted[q].fetch_sub(k, Ordering::Relaxed);
    }

    /// The cluster-tier queue that carries GASPI queue `q`.
    pub fn tq(&self, q: usize) -> tiers_cluster::Queue<'_> {
        self.w.queue(q % QUEUES).expect("queue index below QUEUES")
    }

    /// The local notification at heap offset `off` of a read on GASPI queue `q`: set at
    /// once on the memory engines (the read is complete when posted); elsewhere once the
    /// read is, waited for within `timeout`. A read that is not complete in time is posted
    /// all the same (`GASPI_SUCCESS`, as GASPI's return means): its notification is set when
    /// a later call sees the queue complete, the queue's `gaspi_wait` or a look at
    /// notifications (`gaspi_notify_waitsome`, `gaspi_notify_reset`), which is how programs
    /// wait for it.
    pub fn read_notification(&self, q: usize, off: usize, timeout: gaspi_timeout_t) -> R<()> {
        if !self.mem_engine {
            match self.tq(q).wait(tmo(timeout)) {
                Ok(()) => {}
                Err(Error::Timeout) => {
                    self.read_notified[q]
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(off);
                    self.reads_left.fetch_add(1, Ordering::Release);
                    return Ok(());
                }
                Err(e) => return Err(err(e)),
            }
        }
        self.set_notification(q % QUEUES, self.rank, off, 1)
    }

    /// Sets the notifications that reads of queue `q` left behind (the queue completed).
    pub fn read_notifications_done(&self, q: usize) -> R<()> {
        let offs = std::mem::take(
            &mut *self.read_notified[q]
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        self.reads_left.fetch_sub(offs.len(), Ordering::AcqRel);
        for off in offs {
            self.set_notification(q % QUEUES, self.rank, off, 1)?;
        }
        Ok(())
    }

    /// Completes, if they are, the queues of reads that left their notifications behind
    /// (one look each), and sets those notifications. A failure of the queue is kept for its
    /// `gaspi_wait` to return. Nothing to do costs one load.
    pub fn look_at_left_reads(&self) {
        if self.reads_left.load(Ordering::Acquire) == 0 {
            return;
        }
        for q in 0..self.read_notified.len() {
            let left = !self.read_notified[q]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty();
            if !left {
                continue;
            }
            match self.tq(q).wait(Timeout::Test) {
                Ok(()) => {
                    let _ = self.read_notifications_done(q);
                }
                Err(Error::Timeout) => {}
                Err(e) => {
                    *self.queue_error[q]
                        .lock()
                        .unwrap_or_else(|p| p.into_inner()) = Some(err(e));
                    let _ = self.read_notifications_done(q);
                }
            }
        }
    }

    /// Checks a transfer and turns it into heap offsets.
    pub fn transfer(
        &self,
        lseg: gaspi_segment_id_t,
        loff: u64,
        rank: gaspi_rank_t,
        rseg: gaspi_segment_id_t,
        roff: u64,
        size: u64,
    ) -> R<Transfer> {
        let r = self.check_rank(rank)?;
        if size > self.cfg.transfer_size_max {
            return Err(GASPI_ERR_INV_COMMSIZE);
        }
        let l = self.seg(lseg)?;
        if loff.checked_add(size).is_none_or(|e| e > l.size as u64) {
            return Err(GASPI_ERR_INV_LOC_OFF);
        }
        let rm = self.remote(r, rseg)?;
        if roff.checked_add(size).is_none_or(|e| e > rm.size as u64) {
            return Err(GASPI_ERR_INV_REM_OFF);
        }
        Ok(Transfer::new(
            HEAP.at(l.data + loff as usize),
            HEAP.on(r, rm.data + roff as usize),
            size as usize,
        ))
    }

    /// Sets notification word `off` at `rank` to `value`, after the data posted before it on
    /// tiers queue `tq` (a mem engine copies at post time, so only other engines wait).
    pub fn set_notification(&self, tq: usize, rank: usize, off: usize, value: u64) -> R<()> {
        if rank == self.rank {
            self.word(off).store(value, Ordering::Release);
            if self.sleeps {
                // A thread of this rank may wait for it asleep in the engine's progress.
                self.w.progress_interrupt();
            }
            return Ok(());
        }
        if !self.mem_engine {
            // After the data on the same queue: on the tcp engine a store that travels
            // behind it, elsewhere a wait for the queue and a compare-and-swap.
            return self
                .w
                .queue(tq)
                .map_err(err)?
                .atomic_store(HEAP.on(rank, off), value)
                .map_err(err);
        }
        let mut old = 0;
        loop {
            let got = self
                .w
                .atomic_compare_swap(HEAP, off, rank, old, value)
                .map_err(err)?;
            if got == old {
                return Ok(());
            }
            old = got;
        }
    }

    /// Adds one to counter word `off` at `rank`.
    pub fn bump(&self, rank: usize, off: usize) -> R<()> {
        if rank == self.rank {
            self.word(off).fetch_add(1, Ordering::AcqRel);
            return Ok(());
        }
        self.w
            .atomic_fetch_add(HEAP, off, rank, 1)
            .map(|_| ())
            .map_err(err)
    }

    /// [`poll`] for a condition on this rank's heap words. Off the memory engines the words
    /// are written by the MPI engine's one-sided operations, which may complete only while
    /// the target calls into MPI (osc over TCP): each check that fails is followed by a 1 µs wait on the
    /// heap's cluster-tier notification 0, which the library never sets, because that wait is
    /// the cluster tier's public call that lets MPI progress (its atomics on the rank's own
    /// words stay processor atomics and do not).
    ///
    /// Counted as a waiting call ([`Ctx::waiting`]); a `gaspi_proc_term` in another thread
    /// ends it as [`after_term`] says.
    pub fn poll(&self, timeout: gaspi_timeout_t, mut cond: impl FnMut() -> R<bool>) -> R<()> {
        // What arrives within a short spin is taken without counting the call: counting is
        // an atomic read-modify-write, on x86 a full fence, which would stall the wait until
        // the stores before it (the notification just sent to a peer) have left, about 50 ns
        // of a 250 ns ping-pong on the shm engine. `term` gives such spinners `UNCOUNTED`
        // to see `stop` before it looks at the count.
        if cond()? {
            return Ok(());
        }
        if self.mem_engine && timeout != GASPI_TEST {
            for _ in 0..UNCOUNTED_SPINS {
                if let Err(e) = self.check_stop() {
                    return after_term(Err(e), timeout);
                }
                if cond()? {
                    return Ok(());
                }
                std::hint::spin_loop();
            }
        }
        self.guarded(timeout, || {
            self.poll_counted(timeout, || {
                self.check_stop()?;
                cond()
            })
        })
    }

    fn poll_counted(&self, timeout: gaspi_timeout_t, mut cond: impl FnMut() -> R<bool>) -> R<()> {
        if self.mem_engine {
            return poll(timeout, cond);
        }
        if let Some(nap) = self.drive_nap {
            return self.drive(timeout, nap, cond);
        }
        poll(timeout, || {
            if cond()? {
                return Ok(true);
            }
            match self
                .w
                .notify_waitsome(HEAP, 0..1, Timeout::After(Duration::from_micros(1)))
            {
                Ok(_) | Err(Error::Timeout) => Ok(false),
                Err(e) => Err(err(e)),
            }
        })
    }

    /// [`poll`] on an engine whose progress sleeps until data arrives (the tcp engine, the
    /// mpi engine's doorbell): the caller claims the engine's progress (the watcher steps
    /// aside) and runs its passes itself, without waiting for `POLL_NAP_MAX` after the spin,
    /// then sleeping in the engine's progress for up to `nap` (`epoll_wait` on the tcp
    /// engine, woken by arriving data or by a local notification,
    /// [`World::progress_interrupt`](tiers_cluster::World::progress_interrupt); the doorbell
    /// on the mpi engine, woken by another host's operation).
    /// Applying an arriving write in the waiting thread saves the hand-over from the watcher,
    /// a wake-up per message: 50 µs per step of GPI-2's `write_notify_lat` and `barrier` on
    /// loopback before, on a loaded 2-core host.
    fn drive(
        &self,
        timeout: gaspi_timeout_t,
        nap: Duration,
        mut cond: impl FnMut() -> R<bool>,
    ) -> R<()> {
        if cond()? {
            return Ok(());
        }
        if timeout == GASPI_TEST {
            // A test claims nothing: a program that tests in a loop would kick the watcher
            // out of its pass at every call. One pass, when the watcher is not in one.
            self.w.progress_now();
            return if cond()? { Ok(()) } else { Err(GASPI_TIMEOUT) };
        }
        let _claim = self.w.progress_claim();
        let start = Instant::now();
        loop {
            if cond()? {
                return Ok(());
            }
            let waited = start.elapsed();
            if timeout != GASPI_BLOCK && waited >= Duration::from_millis(timeout) {
                return Err(GASPI_TIMEOUT);
            }
            if waited < tiers_node::Backoff::SPIN_TIME {
                self.w.progress_now();
            } else {
                self.w.progress_wait(nap);
            }
        }
    }

    /// Rank `r`'s health (failed when the world cannot say).
    pub fn health(&self, r: usize) -> Health {
        self.w.health(r).unwrap_or(Health::Failed)
    }
}

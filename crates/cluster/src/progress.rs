//! Progress policies: who moves the bytes of one-sided requests, and when.
//!
//! GASPI promises only that a request is complete when [`Queue::wait`](crate::Queue::wait)
//! returns; what happens in between is the progress policy of the world ([`Progress`]), chosen
//! with `TIERS_PROGRESS=eager|lazy|proxy` or [`Builder::progress`](crate::Builder::progress):
//!
//! - **eager** (the default): every call polls the engine. On the shared-memory engines a write
//!   is one copy made when it is posted, so nothing is left to poll; the `mpi` engine with
//!   other hosts polls MPI once per post.
//! - **lazy**: the engine is polled only as often as the transfers in flight need (once every
//!   [`LAZY_POLL_EVERY`](crate::LAZY_POLL_EVERY) posts, and only while requests are in flight), since
//!   each poll is a call into MPI that finds nothing most of the time.
//! - **proxy**: a thread per rank (pinned to a core of its own when one is free) drives the
//!   engine. Writes and reads of at least the proxy threshold (and anything posted behind them
//!   on the same queue, which keeps a queue's requests in order) are handed to it, so `write`
//!   returns at once and the copy overlaps the caller's computation; smaller ones stay inline,
//!   where handing over costs more than copying. With other hosts on the `mpi` engine it also
//!   polls MPI while it has nothing to copy. A caller that waits for a queue performs the
//!   queue's requests the proxy has not started yet, so a wait completes even when the proxy
//!   has no core to run on.
//!
//! [`World::progress_stats`](crate::World::progress_stats) counts what the policy did.
//!
//! ```
//! use tiers_cluster::{Builder, Notification, Progress, SegId, Timeout};
//!
//! let worlds = Builder::new().progress(Progress::Proxy).local(2).unwrap();
//! let sums = std::thread::scope(|s| {
//!     let hs: Vec<_> = worlds
//!         .iter()
//!         .map(|w| {
//!             s.spawn(move || {
//!                 const N: usize = 1 << 20;
//!                 let seg = w.segment(SegId(0), 2 * N).unwrap();
//!                 for i in 0..N / 8 {
//!                     seg.set::<u64>(i, i as u64 + w.rank() as u64).unwrap();
//!                 }
//!                 let peer = 1 - w.rank();
//!                 let q = w.queue(0).unwrap();
//!                 // Returns at once: the proxy copies the megabyte while this thread could
//!                 // compute; the notification lands only after the data.
//!                 let note = Notification { id: 0, value: 1 };
//!                 q.write_notify(SegId(0).at(0), SegId(0).on(peer, N), N, note).unwrap();
//!                 q.wait(Timeout::Block).unwrap();
//!                 w.notify_waitsome(SegId(0), 0..1, Timeout::Block).unwrap();
//!                 w.notify_reset(SegId(0), 0).unwrap();
//!                 let got: u64 = (N / 8..N / 4).map(|i| seg.get::<u64>(i).unwrap()).sum();
//!                 w.barrier(Timeout::Block).unwrap();
//!                 let st = w.progress_stats();
//!                 assert_eq!(st.handed_off_bytes, N as u64);
//!                 got
//!             })
//!         })
//!         .collect();
//!     hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
//! });
//! let n = (1u64 << 20) / 8;
//! assert_eq!(sums, vec![n * (n - 1) / 2 + n, n * (n - 1) / 2]);
//! ```

use crate::config::{FIRST_NAP, HEALTH_SLICE, MAX_NAP, SPIN};
use crate::engine::{Engine, Transfer};
use crate::error::{Error, Rank, Result};
use crate::timeout::Timeout;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tiers_node::Backoff;

/// Who drives the transfers of a world's queues (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Progress {
    /// Poll the engine on every call (tiers' behaviour before policies existed).
    #[default]
    Eager,
    /// Poll only as often as the transfers in flight need.
    Lazy,
    /// A progress thread per rank performs large transfers and polls the engine.
    Proxy,
}

impl Progress {
    /// Every policy, in the order of the `TIERS_PROGRESS` values.
    pub const ALL: [Progress; 3] = [Progress::Eager, Progress::Lazy, Progress::Proxy];

    /// The name as in `TIERS_PROGRESS`.
    pub fn name(self) -> &'static str {
        match self {
            Progress::Eager => "eager",
            Progress::Lazy => "lazy",
            Progress::Proxy => "proxy",
        }
    }
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Progress {
    type Err = Error;
    /// `eager`, `lazy` or `proxy`; anything else is [`Error::Setup`].
    fn from_str(s: &str) -> Result<Progress> {
        Progress::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                Error::Setup(format!(
                    "unknown progress policy {s:?} (eager, lazy, proxy)"
                ))
            })
    }
}

/// What a world's progress policy has done since the world was built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgressStats {
    /// The policy.
    pub policy: Progress,
    /// Polls of the engine and rounds of the proxy thread.
    pub calls: u64,
    /// Of those, the ones that found something to do (a transfer to perform; a poll of MPI
    /// cannot tell, so on the `mpi` engine only the proxy's transfers count).
    pub found_work: u64,
    /// Time spent in those calls.
    pub time: Duration,
    /// Requests handed to the proxy (posted, not performed, by the caller).
    pub handed_off: u64,
    /// Bytes of those requests.
    pub handed_off_bytes: u64,
    /// Of those bytes, the ones the proxy thread moved (the rest were moved by callers that
    /// waited for their queue before the proxy got to them).
    pub proxy_bytes: u64,
    /// Whether a proxy thread runs.
    pub proxy_running: bool,
    /// The core the proxy thread is pinned to; `None`: no core was free for it, so it shares
    /// the cores of the compute threads (and overlap depends on the scheduler).
    pub proxy_cpu: Option<usize>,
}

/// The counters behind [`ProgressStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    calls: AtomicU64,
    found: AtomicU64,
    nanos: AtomicU64,
    handed: AtomicU64,
    handed_bytes: AtomicU64,
    proxy_bytes: AtomicU64,
}

impl Counters {
    /// Counts one call that began at `t0` and found work or not.
    fn count(&self, t0: Instant, found: bool) {
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.found.fetch_add(u64::from(found), Ordering::Relaxed);
        self.nanos.fetch_add(ns, Ordering::Relaxed);
    }

    /// One timed, counted poll of the engine.
    pub(crate) fn poll(&self, engine: &dyn Engine) -> Result<()> {
        let t0 = Instant::now();
        let r = engine.progress();
        self.count(t0, matches!(r, Ok(true)));
        r.map(|_| ())
    }

    pub(crate) fn stats(
        &self,
        policy: Progress,
        proxy_running: bool,
        cpu: Option<usize>,
    ) -> ProgressStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ProgressStats {
            policy,
            calls: l(&self.calls),
            found_work: l(&self.found),
            time: Duration::from_nanos(l(&self.nanos)),
            handed_off: l(&self.handed),
            handed_off_bytes: l(&self.handed_bytes),
            proxy_bytes: l(&self.proxy_bytes),
            proxy_running,
            proxy_cpu: cpu,
        }
    }
}

/// One request as posted on a queue.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Job {
    Write(Transfer),
    Read(Transfer),
    WriteNotify(Transfer, usize, u32),
    Notify(Rank, u32, usize, u32),
    /// An atomic store of a word: rank, segment, offset, value.
    Store(Rank, u32, usize, u64),
}

impl Job {
    /// Bytes the request moves.
    pub(crate) fn len(&self) -> usize {
        match self {
            Job::Write(t) | Job::Read(t) | Job::WriteNotify(t, ..) => t.len,
            Job::Notify(..) | Job::Store(..) => 0,
        }
    }

    /// Performs the request on `engine`'s queue `q`.
    pub(crate) fn run(&self, engine: &dyn Engine, q: usize) -> Result<()> {
        match *self {
            Job::Write(t) => engine.write(q, &t),
            Job::Read(t) => engine.read(q, &t),
            Job::WriteNotify(t, id, v) => engine.write_notify(q, &t, id, v),
            Job::Notify(rank, seg, id, v) => engine.notify(q, rank, seg, id, v),
            Job::Store(rank, seg, offset, v) => engine.atomic_store(q, rank, seg, offset, v),
        }
    }
}

/// The requests of one queue handed to the proxy, in posting order. `busy` while someone
/// performs the first one: the next starts only after it, so a queue's requests (a write,
/// then the notification that says it arrived) take effect in order.
#[derive(Default)]
struct Lane {
    jobs: VecDeque<Job>,
    busy: bool,
}

/// What the proxy thread and the posting threads share.
struct Shared {
    engine: Arc<dyn Engine>,
    counters: Arc<Counters>,
    lanes: Box<[Mutex<Lane>]>,
    /// Per queue: requests handed over and not yet performed.
    pending: Box<[AtomicUsize]>,
    /// Per queue: the first error of a handed-over request, reported by the next wait.
    errors: Box<[Mutex<Option<Error>>]>,
    /// Set (under `bell`) while the proxy thread sleeps.
    sleeping: AtomicBool,
    bell: Mutex<()>,
    ring: Condvar,
    stop: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lane only means a thread panicked while holding it; its state is a queue of
    // plain values that stays consistent at every point.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// Performs the first request of queue `q`'s lane, unless it is empty or another thread
    /// is performing one; returns whether it did.
    fn run_one(&self, q: usize, by_proxy: bool) -> bool {
        let job = {
            let mut lane = lock(&self.lanes[q]);
            if lane.busy {
                return false;
            }
            let Some(job) = lane.jobs.pop_front() else {
                return false;
            };
            lane.busy = true;
            job
        };
        let r = job.run(&*self.engine, q);
        if by_proxy {
            let n = job.len() as u64;
            self.counters.proxy_bytes.fetch_add(n, Ordering::Relaxed);
        }
        if let Err(e) = r {
            lock(&self.errors[q]).get_or_insert(e);
        }
        lock(&self.lanes[q]).busy = false;
        self.pending[q].fetch_sub(1, Ordering::Release);
        true
    }

    /// One round of the proxy thread over every queue; returns whether it found work.
    fn round(&self) -> bool {
        let mut found = false;
        for q in 0..self.lanes.len() {
            while self.run_one(q, true) {
                found = true;
            }
        }
        found
    }

    fn has_work(&self) -> bool {
        self.lanes.iter().any(|l| !lock(l).jobs.is_empty())
    }

    /// The proxy thread: rounds while there is work, MPI polls between naps while the engine
    /// needs them, otherwise sleep until a request is handed over.
    fn serve(&self, spin: Duration) {
        let polls = self.engine.needs_progress();
        // On a core of its own the thread watches for work a little before it sleeps (a
        // hand-over then costs no wake-up); its naps are the polled ones while MPI needs it.
        let schedule = Backoff::new()
            .spin_limit(0)
            .spin_for(spin)
            .yield_limit(0)
            .with_sleep(FIRST_NAP, MAX_NAP);
        let mut backoff = schedule.clone();
        loop {
            let t0 = Instant::now();
            let found = self.round();
            if polls {
                let _ = self.engine.progress();
            }
            self.counters.count(t0, found);
            if found {
                backoff = schedule.clone();
                continue;
            }
            if self.stop.load(Ordering::Acquire) && !self.has_work() {
                return;
            }
            let mut watch = schedule.clone();
            while watch.busy() && !self.has_work() {}
            if self.has_work() {
                continue;
            }
            let g = lock(&self.bell);
            self.sleeping.store(true, Ordering::SeqCst);
            if !self.has_work() && !self.stop.load(Ordering::Acquire) {
                let nap = backoff.nap();
                let d = if polls { nap } else { HEALTH_SLICE };
                let _ = self.ring.wait_timeout(g, d);
            }
            self.sleeping.store(false, Ordering::SeqCst);
        }
    }

    fn wake(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            let _g = lock(&self.bell);
            self.ring.notify_one();
        }
    }
}

/// A world's progress thread and the queues of requests handed to it.
pub(crate) struct Proxy {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
    cpu: Option<usize>,
}

impl Proxy {
    /// Starts the thread for `engine` with `queues` queues, pinned to `cpu` when given.
    pub(crate) fn start(
        engine: Arc<dyn Engine>,
        counters: Arc<Counters>,
        queues: usize,
        cpu: Option<usize>,
    ) -> Result<Proxy> {
        let shared = Arc::new(Shared {
            engine,
            counters,
            lanes: (0..queues).map(|_| Mutex::default()).collect(),
            pending: (0..queues).map(|_| AtomicUsize::new(0)).collect(),
            errors: (0..queues).map(|_| Mutex::new(None)).collect(),
            sleeping: AtomicBool::new(false),
            bell: Mutex::new(()),
            ring: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("tiers-progress-{}", shared.engine.rank()))
            .spawn(move || {
                if let Some(c) = cpu {
                    // Pinning is an optimisation: unpinned, the thread still works.
                    let _ = tiers_node::affinity::set(&[c]);
                }
                // Spinning pays only on a core nobody else needs.
                s.serve(if cpu.is_some() { SPIN } else { Duration::ZERO });
            })
            .map_err(|e| Error::Setup(format!("cannot start the progress thread: {e}")))?;
        Ok(Proxy {
            shared,
            thread: Some(thread),
            cpu,
        })
    }

    /// The core the thread is pinned to.
    pub(crate) fn cpu(&self) -> Option<usize> {
        self.cpu
    }

    /// Whether queue `q` has requests handed over and not yet performed (a request posted
    /// now must follow them).
    #[inline]
    pub(crate) fn behind(&self, q: usize) -> bool {
        self.shared.pending[q].load(Ordering::Acquire) != 0
    }

    /// Hands `job` on queue `q` to the thread.
    pub(crate) fn hand_off(&self, q: usize, job: Job) {
        let s = &self.shared;
        s.pending[q].fetch_add(1, Ordering::AcqRel);
        lock(&s.lanes[q]).jobs.push_back(job);
        s.counters.handed.fetch_add(1, Ordering::Relaxed);
        s.counters
            .handed_bytes
            .fetch_add(job.len() as u64, Ordering::Relaxed);
        s.wake();
    }

    /// Waits until every request of queue `q` handed over has been performed (performing
    /// those the thread has not started), then reports the first error among them.
    pub(crate) fn drain(&self, q: usize, timeout: Timeout) -> Result<()> {
        let s = &self.shared;
        let deadline = timeout.deadline();
        // The proxy is performing this queue's current request: let it finish (it may share
        // this core, so the wait turns to yields, never to naps).
        let mut backoff = Backoff::new().never_sleep();
        while s.pending[q].load(Ordering::Acquire) != 0 {
            if s.run_one(q, false) {
                continue;
            }
            if deadline.expired() {
                return Err(Error::Timeout);
            }
            backoff.snooze();
        }
        match lock(&s.errors[q]).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Proxy {
    /// Performs what is still handed over, then stops the thread.
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let _g = lock(&self.shared.bell);
            self.shared.ring.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A core for the proxy of local rank `local_rank` of `local_size`, when one is free: this
/// process's cores beyond those its compute threads (`threads` per rank) take, counting every
/// rank of the host when they share this process's cores (the `local` engine, or an unpinned
/// launcher).
pub(crate) fn free_cpu(local_rank: usize, local_size: usize, threads: usize) -> Option<usize> {
    let mask = tiers_node::affinity::get().ok()?;
    let job = crate::config::job_cpus();
    // A rank pinned to fewer cores than the job has owns its mask; otherwise the host's
    // ranks share it.
    let (sharing, me) = if mask.len() < job {
        (1, 0)
    } else {
        (local_size.max(1), local_rank)
    };
    let busy = sharing.checked_mul(threads)?;
    let spare = mask.len().checked_sub(busy)?;
    if me < spare {
        mask.get(mask.len() - 1 - me).copied()
    } else {
        None
    }
}

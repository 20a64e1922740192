//! The world: this rank's handle on the job, and how it is set up from the environment.

use crate::config::{self, DEFAULT_QUEUE_DEPTH, NOTIFICATIONS, PROXY_MIN, QUEUES};
use crate::engine::{self, Engine, FromEnv};
use crate::error::{Error, Rank, Result};
use crate::health::Health;
use crate::progress::{self, Counters, Progress, ProgressStats, Proxy};
use crate::timeout::Timeout;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

/// Sets up a [`World`].
#[derive(Clone, Debug)]
pub struct Builder {
    queue_depth: usize,
    /// `None`: [`env::INIT_TIMEOUT_MS`](crate::env::INIT_TIMEOUT_MS)'s, read when joining.
    init_timeout: Option<Duration>,
    /// `None`: `TIERS_PROGRESS` decides.
    progress: Option<Progress>,
    /// `None`: `TIERS_PROXY_MIN` decides.
    proxy_min: Option<usize>,
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

impl Builder {
    /// Defaults: queue depth [`DEFAULT_QUEUE_DEPTH`], 60 s (or `TIERS_INIT_TIMEOUT_MS`) for
    /// all ranks to join.
    pub fn new() -> Builder {
        Builder {
            queue_depth: DEFAULT_QUEUE_DEPTH,
            init_timeout: None,
            progress: None,
            proxy_min: None,
        }
    }

    /// The progress policy of the world (instead of `TIERS_PROGRESS`); see
    /// [`progress`](crate::progress).
    ///
    /// ```
    /// use tiers_cluster::{Builder, Progress};
    ///
    /// let w = Builder::new().progress(Progress::Lazy).local(1).unwrap().remove(0);
    /// assert_eq!(w.progress(), Progress::Lazy);
    /// assert_eq!(w.progress_stats().calls, 0); // the local engine needs no polls
    /// ```
    pub fn progress(mut self, p: Progress) -> Builder {
        self.progress = Some(p);
        self
    }

    /// The smallest write or read the `proxy` policy hands to its thread (instead of
    /// `TIERS_PROXY_MIN`, default [`PROXY_MIN`]; 0 hands over everything).
    pub fn proxy_min(mut self, bytes: usize) -> Builder {
        self.proxy_min = Some(bytes);
        self
    }

    /// The policy and threshold asked for in code, else by `TIERS_PROGRESS` and
    /// `TIERS_PROXY_MIN`.
    fn resolve(mut self) -> Result<Builder> {
        if self.init_timeout.is_none() {
            self.init_timeout = Some(config::init_timeout()?);
        }
        if self.progress.is_none() {
            self.progress = Some(config::progress()?);
        }
        if self.proxy_min.is_none() {
            self.proxy_min = Some(config::proxy_min()?);
        }
        Ok(self)
    }

    /// Requests a queue may hold between two waits (at least 1).
    pub fn queue_depth(mut self, n: usize) -> Builder {
        self.queue_depth = n.max(1);
        self
    }

    /// How long `build` waits for every rank to join.
    pub fn init_timeout(mut self, d: Duration) -> Builder {
        self.init_timeout = Some(d);
        self
    }

    /// Joins the job the launcher environment describes; with none, a world of one rank. The
    /// progress policy is the one given to [`progress`](Builder::progress), else
    /// `TIERS_PROGRESS`'s.
    ///
    /// With `TIERS_ENGINE=local` and more than one rank, use [`spmd`](crate::spmd) instead,
    /// which starts one thread per rank.
    ///
    /// # Errors
    ///
    /// [`Error::Setup`] when the environment is wrong (an unknown engine or progress policy, a
    /// variable that is missing or not a number, several `local` ranks), or the progress
    /// thread cannot be started, [`Error::Io`] when the job's shared
    /// memory cannot be mapped, [`Error::Mpi`] when MPI fails, [`Error::Setup`] naming the
    /// init timeout when not every rank joins within it, and [`Error::PeerFailed`] when a
    /// rank fails before it joins.
    pub fn build(self) -> Result<World> {
        let b = self.resolve()?;
        match engine::from_env()? {
            FromEnv::Process(e) => b.join(e),
            _ => b.attach(),
        }
    }

    /// As [`Builder::build`], without waiting for every rank to join: the world's first
    /// [`World::barrier`] does that, and can be called again after a timeout, so that a
    /// program can join in steps (GASPI's `gaspi_proc_init` with a short timeout, called until
    /// it succeeds). Dropping the world before that barrier completed leaves the job: the
    /// other ranks see this rank gone.
    ///
    /// # Errors
    ///
    /// As [`Builder::build`], but for the init timeout, which is the barrier's to answer.
    pub fn attach(self) -> Result<World> {
        let b = self.resolve()?;
        match engine::from_env()? {
            FromEnv::Threads { ranks: 1, .. } => b.local(1).map(|mut v| v.remove(0)),
            FromEnv::Threads { ranks, .. } => Err(Error::Setup(format!(
                "the local engine runs {ranks} ranks as threads: start them with tiers_cluster::spmd"
            ))),
            FromEnv::Process(e) => b.start(e),
        }
    }

    /// Wraps an engine of a job of processes and waits for every rank to join.
    /// The timeout is the builder's, else `TIERS_INIT_TIMEOUT_MS`'s (it was read only by
    /// `build`, and `spmd` waited the default 60 s whatever the variable said).
    fn join(self, e: Box<dyn Engine>) -> Result<World> {
        let b = self.resolve()?;
        let t = b.init_timeout.unwrap_or(config::INIT_TIMEOUT);
        let w = b.start(e)?;
        match w.barrier(Timeout::After(t)) {
            Ok(()) => Ok(w),
            Err(Error::Timeout) => Err(Error::Setup(format!(
                "not every rank of the job joined within {:.3} s (the init timeout: {})",
                t.as_secs_f64(),
                config::env::INIT_TIMEOUT_MS
            ))),
            Err(e) => Err(e),
        }
    }

    /// `n` in-process worlds (the `local` engine), rank `i` at index `i`; give each to its own
    /// thread.
    ///
    /// # Errors
    ///
    /// [`Error::Setup`] when `n` is 0, [`Error::Io`] when the job's memory cannot be mapped.
    pub fn local(self, n: usize) -> Result<Vec<World>> {
        let b = self.resolve()?;
        engine::local::job(n)?
            .into_iter()
            .map(|e| b.start(Box::new(e)))
            .collect()
    }

    /// Wraps an engine (for engines outside this crate), with the progress policy set by
    /// [`progress`](Builder::progress) (eager if none was). Should the proxy policy's thread
    /// not start, the world polls as eager does ([`ProgressStats::proxy_running`] says so).
    pub fn wrap(&self, engine: Box<dyn Engine>) -> World {
        let engine: Arc<dyn Engine> = Arc::from(engine);
        let counters = Arc::new(Counters::default());
        let proxy = self.proxy(&engine, &counters).unwrap_or(None);
        self.assemble(engine, counters, proxy)
    }

    /// Wraps an engine; an error when the proxy thread cannot be started.
    fn start(&self, engine: Box<dyn Engine>) -> Result<World> {
        let engine: Arc<dyn Engine> = Arc::from(engine);
        let counters = Arc::new(Counters::default());
        let proxy = self.proxy(&engine, &counters)?;
        Ok(self.assemble(engine, counters, proxy))
    }

    /// The progress thread the policy asks for. It needs an engine that any thread may call;
    /// without one (MPI without `MPI_THREAD_MULTIPLE`) there is none and the world polls as
    /// eager does.
    fn proxy(&self, engine: &Arc<dyn Engine>, counters: &Arc<Counters>) -> Result<Option<Proxy>> {
        if self.progress != Some(Progress::Proxy) || !engine.any_thread() {
            return Ok(None);
        }
        let cpu = progress::free_cpu(engine.local_rank(), engine.local_size(), config::threads());
        Proxy::start(Arc::clone(engine), Arc::clone(counters), QUEUES, cpu).map(Some)
    }

    fn assemble(
        &self,
        engine: Arc<dyn Engine>,
        counters: Arc<Counters>,
        proxy: Option<Proxy>,
    ) -> World {
        World {
            size: engine.size(),
            polls: proxy.is_none() && engine.needs_progress(),
            engine,
            depth: self.queue_depth,
            posted: (0..QUEUES).map(|_| AtomicUsize::new(0)).collect(),
            policy: self.progress.unwrap_or_default(),
            counters,
            proxy,
            proxy_min: self.proxy_min.unwrap_or(PROXY_MIN),
            ticks: AtomicUsize::new(0),
            failed: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

/// Joins the job the launcher started (see [`Builder::build`]).
///
/// # Errors
///
/// As [`Builder::build`].
pub fn init() -> Result<World> {
    Builder::new().build()
}

/// Runs `f` as every rank of this process: once with the process's world under the `shm`
/// engine (or without a launcher), or on one thread per rank under the `local` engine
/// (`tiers run --engine local`). Returns the results of this process's ranks in rank order.
///
/// # Errors
///
/// As [`Builder::build`].
pub fn spmd<R: Send>(f: impl Fn(&World) -> R + Sync) -> Result<Vec<R>> {
    let b = Builder::new();
    let w = match engine::from_env()? {
        FromEnv::Threads {
            ranks,
            explicit: true,
        } => return run_local(ranks, f),
        FromEnv::Threads { ranks, .. } => b.local(ranks)?.remove(0),
        FromEnv::Process(e) => b.join(e)?,
    };
    Ok(vec![f(&w)])
}

/// Runs `f` on `n` in-process ranks (the `local` engine), one thread each, and returns their
/// results in rank order. A rank whose closure panics is marked failed (its peers see
/// `PeerFailed`); the panic is then re-raised here.
///
/// # Errors
///
/// As [`Builder::local`].
pub fn run_local<R: Send>(n: usize, f: impl Fn(&World) -> R + Sync) -> Result<Vec<R>> {
    let ws = Builder::new().local(n)?;
    let f = &f;
    Ok(std::thread::scope(|s| {
        let hs: Vec<_> = ws.into_iter().map(|w| s.spawn(move || f(&w))).collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    }))
}

pub use crate::addr::SegId;

/// This rank's handle on the job: segments, queues, notifications, passive messages,
/// collectives, atomics and the state vector. Shared by the threads of the rank (`Sync`).
///
/// Dropping it leaves the job (peers see this rank as exited, or as failed when dropped during
/// a panic).
pub struct World {
    // The proxy goes first: dropped before the engine's last handle, it finishes its work
    // while the engine still serves it.
    pub(crate) proxy: Option<Proxy>,
    pub(crate) engine: Arc<dyn Engine>,
    pub(crate) depth: usize,
    pub(crate) posted: Box<[AtomicUsize]>,
    /// Cached: checked on every remote access.
    size: usize,
    pub(crate) policy: Progress,
    /// The caller polls the engine (eager or lazy, on an engine that needs polls).
    pub(crate) polls: bool,
    pub(crate) counters: Arc<Counters>,
    pub(crate) proxy_min: usize,
    /// Posts seen by the lazy policy.
    pub(crate) ticks: AtomicUsize,
    /// [`World::fail`] was called: the drop leaves the job as failed.
    pub(crate) failed: std::sync::atomic::AtomicBool,
}

impl World {
    /// This rank.
    pub fn rank(&self) -> Rank {
        self.engine.rank()
    }
    /// Number of ranks.
    #[inline]
    pub fn size(&self) -> usize {
        self.size
    }
    /// Rank among the ranks of this host.
    pub fn local_rank(&self) -> usize {
        self.engine.local_rank()
    }
    /// Ranks on this host.
    pub fn local_size(&self) -> usize {
        self.engine.local_size()
    }
    /// The engine's name (`local`, `shm`).
    pub fn engine_name(&self) -> &'static str {
        self.engine.name()
    }
    /// What the engine is and how it progresses. (Its raw operations take no argument
    /// checks; a program posts through the world's own calls.)
    pub fn engine(&self) -> crate::engine::EngineInfo<'_> {
        crate::engine::EngineInfo(&*self.engine)
    }
    /// The progress policy (see [`progress`](crate::progress)).
    pub fn progress(&self) -> Progress {
        self.policy
    }
    /// What the progress policy has done so far: polls, polls that found work, time in them,
    /// requests and bytes handed to the proxy, bytes the proxy moved, and where it runs.
    ///
    /// ```
    /// use tiers_cluster::{Builder, Progress};
    ///
    /// let w = Builder::new().progress(Progress::Proxy).local(1).unwrap().remove(0);
    /// let st = w.progress_stats();
    /// assert!(st.proxy_running);
    /// assert_eq!(st.handed_off, 0);
    /// ```
    pub fn progress_stats(&self) -> ProgressStats {
        let cpu = self.proxy.as_ref().and_then(Proxy::cpu);
        self.counters.stats(self.policy, self.proxy.is_some(), cpu)
    }

    /// Whether `rank`'s one-sided operations on this rank's segments land straight in this
    /// rank's memory: true for every rank on the shared-memory engines, for the ranks of
    /// this host on the mpi engine (with one-sided operations between hosts as messages, or
    /// on one host: with MPI windows between hosts, atomics go through MPI), and for this
    /// rank alone on the tcp engine. A thread waiting for data from a rank it shares memory
    /// with spins on that memory; data from any other arrives only while this rank progresses
    /// ([`progress_stand_by`](World::progress_stand_by) sleeps until it comes). False for a
    /// rank outside the world.
    pub fn shares_memory_with(&self, rank: Rank) -> bool {
        rank < self.size && self.engine.shares_memory_with(rank)
    }

    /// Lets the engine progress once, now, without waiting: on engines whose one-sided
    /// operations by other ranks complete at this rank only while it calls in (the mpi engine
    /// between hosts: one `MPI_Iprobe`), a thread that has nothing else to call (a watcher
    /// beside a rank that spins on its own memory) calls this instead. Elsewhere it does
    /// nothing. Returns whether the engine needs such calls.
    pub fn progress_now(&self) -> bool {
        if !self.engine.needs_progress() {
            return false;
        }
        let _ = self.engine.progress();
        true
    }

    /// Like [`progress_now`](World::progress_now), but on an engine whose progress can sleep
    /// until its transport has work (the tcp engine: one pass whose `epoll_wait` lasts up to
    /// `max`; the mpi engine's doorbell, rung by other hosts' operations only) it sleeps until
    /// data arrives or `max` passes, so a watcher thread applies
    /// arriving writes at once and costs nothing meanwhile. Elsewhere it does nothing (no
    /// progress needed) or polls once. Returns whether the engine needs such calls.
    pub fn progress_wait(&self, max: std::time::Duration) -> bool {
        if !self.engine.needs_progress() {
            return false;
        }
        let _ = self.engine.progress_wait(max);
        true
    }

    /// [`progress_wait`](World::progress_wait) for a thread that only stands by for arriving
    /// data while the program computes (a watcher): while another thread of the rank holds a
    /// [`progress_claim`](World::progress_claim), it naps up to `max` instead, and the claim's
    /// end wakes it. Returns whether the engine needs such calls.
    pub fn progress_stand_by(&self, max: std::time::Duration) -> bool {
        if !self.engine.needs_progress() {
            return false;
        }
        let _ = self.engine.progress_stand_by(max);
        true
    }

    /// Claims the engine's progress for the calling thread, which is about to wait for data
    /// by calling [`progress_now`](World::progress_now) and
    /// [`progress_wait`](World::progress_wait) in a loop (a library's own wait on memory that
    /// arriving writes change). On the tcp engine, and on the mpi engine's messages mode
    /// with doorbells, a stand-by thread then steps aside, so the waiting thread applies what
    /// arrives itself instead of being woken by the stand-by after it did (or polling beside
    /// it): one wake-up per message fewer. The tcp engine's own waits claim on their own.
    /// Claims nest; each ends when its guard is dropped.
    pub fn progress_claim(&self) -> ProgressClaim<'_> {
        self.engine.progress_claim();
        ProgressClaim(&*self.engine)
    }

    /// Wakes a thread asleep in [`progress_wait`](World::progress_wait) under a claim, so
    /// that it re-checks its condition: call it after changing memory of this rank that such
    /// a thread may wait on without a message arriving (a flag set by another thread).
    pub fn progress_interrupt(&self) {
        self.engine.progress_interrupt();
    }

    /// What the transport's progress engine has done so far (calls, calls that found a socket
    /// ready to read or to write, time in each), on engines that count it (`tcp`); `None`
    /// on the shared-memory engines, which have no progress engine.
    pub fn transport_stats(&self) -> Option<crate::engine::TransportStats> {
        self.engine.transport_stats()
    }

    #[inline]
    pub(crate) fn check_rank(&self, rank: Rank) -> Result<()> {
        if rank >= self.size() {
            return Err(Error::NoSuchRank {
                rank,
                size: self.size(),
            });
        }
        Ok(())
    }

    pub(crate) fn check_notification(&self, id: usize) -> Result<()> {
        if id >= NOTIFICATIONS {
            return Err(Error::NoSuchNotification {
                id,
                count: NOTIFICATIONS,
            });
        }
        Ok(())
    }

    /// The health of `rank`.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchRank`] when `rank` is not in the world.
    pub fn health(&self, rank: Rank) -> Result<Health> {
        self.check_rank(rank)?;
        Ok(self.engine.health(rank))
    }

    /// The state vector: the health of every rank.
    pub fn state(&self) -> Vec<Health> {
        (0..self.size()).map(|r| self.engine.health(r)).collect()
    }

    /// Collective barrier. After `Err(Timeout)`, calling it again resumes the same barrier.
    ///
    /// # Errors
    ///
    /// [`Error::CollectiveMismatch`] when other ranks called another collective or this rank
    /// has another one pending after a timeout, [`Error::Timeout`] when not every rank arrived
    /// in time (resumable),
    /// [`Error::PeerFailed`] when a rank has failed or left, [`Error::Mpi`] when MPI fails.
    pub fn barrier(&self, timeout: Timeout) -> Result<()> {
        self.engine.barrier(timeout)
    }
}

impl World {
    /// Ends this rank's part in the job as a failure, as a panic would: its peers see it as
    /// failed ([`Error::PeerFailed`], [`Health::Failed`](crate::Health::Failed)) instead of
    /// waiting for it, and on the `mpi` engine, where peers on other hosts cannot be told, the
    /// process's exit aborts the whole job (`MPI_Abort`) instead of waiting for them in MPI's
    /// finalisation. Call it when this rank returns an error its peers do not share (an
    /// output it could not write, bad input only it read): leaving normally, it would wait in
    /// the collective teardown of the `mpi` engine for peers that may be waiting for it.
    ///
    /// The world stays usable for local work; what it sends after this is undefined.
    pub fn fail(&self) {
        self.failed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.engine.leave(true);
    }

    /// `r`, after [`World::fail`] when it is an error: the end of a rank's work whose error
    /// its peers may not share.
    ///
    /// ```
    /// let out = tiers_cluster::run_local(1, |w| {
    ///     w.fail_if_err("not a number".parse::<u32>())
    /// })
    /// .unwrap();
    /// assert!(out[0].is_err());
    /// ```
    pub fn fail_if_err<T, E>(&self, r: std::result::Result<T, E>) -> std::result::Result<T, E> {
        if r.is_err() {
            self.fail();
        }
        r
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // Requests still handed over are performed before this rank leaves.
        self.proxy = None;
        let failed = *self.failed.get_mut();
        self.engine.leave(failed || std::thread::panicking());
    }
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("engine", &self.engine_name())
            .field("rank", &self.rank())
            .field("size", &self.size())
            .field("progress", &self.policy)
            .finish()
    }
}

/// A claim on the engine's progress ([`World::progress_claim`]), ended when dropped.
#[must_use = "the claim ends when the guard is dropped"]
pub struct ProgressClaim<'a>(&'a dyn Engine);

impl Drop for ProgressClaim<'_> {
    fn drop(&mut self) {
        self.0.progress_release();
    }
}

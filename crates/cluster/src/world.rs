//! The world: this rank's handle on the job, and how it is set up from the environment.

use crate::config::{self, DEFAULT_QUEUE_DEPTH, NOTIFICATIONS, QUEUES};
use crate::engine::{self, Engine, FromEnv};
use crate::error::{Error, Rank, Result};
use crate::health::Health;
use crate::timeout::Timeout;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

/// Sets up a [`World`].
#[derive(Clone, Debug)]
pub struct Builder {
    queue_depth: usize,
    init_timeout: Duration,
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
            init_timeout: config::init_timeout(),
        }
    }

    /// Requests a queue may hold between two waits (at least 1).
    pub fn queue_depth(mut self, n: usize) -> Builder {
        self.queue_depth = n.max(1);
        self
    }

    /// How long `build` waits for every rank to join.
    pub fn init_timeout(mut self, d: Duration) -> Builder {
        self.init_timeout = d;
        self
    }

    /// Joins the job the launcher environment describes; with none, a world of one rank.
    ///
    /// With `TIERS_ENGINE=local` and more than one rank, use [`spmd`](crate::spmd) instead,
    /// which starts one thread per rank.
    ///
    /// # Errors
    ///
    /// [`Error::Setup`] when the environment is wrong (an unknown engine, a variable that is
    /// missing or not a number, several `local` ranks), [`Error::Io`] when the job's shared
    /// memory cannot be mapped, [`Error::Mpi`] when MPI fails, and [`Error::Timeout`] or
    /// [`Error::PeerFailed`] when not every rank joins within the init timeout.
    pub fn build(self) -> Result<World> {
        match engine::from_env()? {
            FromEnv::Threads { ranks: 1, .. } => self.local(1).map(|mut v| v.remove(0)),
            FromEnv::Threads { ranks, .. } => Err(Error::Setup(format!(
                "the local engine runs {ranks} ranks as threads: start them with tiers_cluster::spmd"
            ))),
            FromEnv::Process(e) => self.join(e),
        }
    }

    /// Wraps an engine of a job of processes and waits for every rank to join.
    fn join(self, e: Box<dyn Engine>) -> Result<World> {
        let t = self.init_timeout;
        let w = self.wrap(e);
        w.barrier(Timeout::After(t))?;
        Ok(w)
    }

    /// `n` in-process worlds (the `local` engine), rank `i` at index `i`; give each to its own
    /// thread.
    ///
    /// # Errors
    ///
    /// [`Error::Setup`] when `n` is 0, [`Error::Io`] when the job's memory cannot be mapped.
    pub fn local(self, n: usize) -> Result<Vec<World>> {
        Ok(engine::local::job(n)?
            .into_iter()
            .map(|e| self.wrap(Box::new(e)))
            .collect())
    }

    /// Wraps an engine (for engines outside this crate).
    pub fn wrap(&self, engine: Box<dyn Engine>) -> World {
        World {
            size: engine.size(),
            engine,
            depth: self.queue_depth,
            posted: (0..QUEUES).map(|_| AtomicUsize::new(0)).collect(),
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
    pub(crate) engine: Box<dyn Engine>,
    pub(crate) depth: usize,
    pub(crate) posted: Box<[AtomicUsize]>,
    /// Cached: checked on every remote access.
    size: usize,
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
    /// The engine.
    pub fn engine(&self) -> &dyn Engine {
        &*self.engine
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

impl Drop for World {
    fn drop(&mut self) {
        self.engine.leave(std::thread::panicking());
    }
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("engine", &self.engine_name())
            .field("rank", &self.rank())
            .field("size", &self.size())
            .finish()
    }
}

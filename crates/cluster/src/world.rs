//! The world: this rank's handle on the job, and how it is set up from the environment.

use crate::engine::{self, ctl, Engine};
use crate::error::{Error, Rank, Result};
use crate::health::Health;
use crate::timeout::Timeout;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

/// Environment variables the launcher sets for every rank.
pub mod env {
    /// `local` or `shm` (absent: a world of one rank).
    pub const ENGINE: &str = "TIERS_ENGINE";
    /// The job id (names the shared-memory objects).
    pub const JOB: &str = "TIERS_JOB";
    /// This rank.
    pub const RANK: &str = "TIERS_RANK";
    /// Number of ranks.
    pub const SIZE: &str = "TIERS_SIZE";
    /// Rank among those on this host.
    pub const LOCAL_RANK: &str = "TIERS_LOCAL_RANK";
    /// Ranks on this host.
    pub const LOCAL_SIZE: &str = "TIERS_LOCAL_SIZE";
    /// Node-tier worker threads per rank (`tiers run --threads`).
    pub const THREADS: &str = "TIERS_THREADS";
    /// Milliseconds `init` waits for all ranks to join (default 60000).
    pub const INIT_TIMEOUT_MS: &str = "TIERS_INIT_TIMEOUT_MS";
    /// Processors the whole job may use (the launcher's affinity mask). A rank pinned to one
    /// core cannot tell from its own mask whether its peers have cores of their own.
    pub const JOB_CPUS: &str = "TIERS_JOB_CPUS";
}

/// Number of independent queues.
pub const QUEUES: usize = 8;
/// Default number of requests a queue holds between two waits.
pub const DEFAULT_QUEUE_DEPTH: usize = 1024;
/// Notifications per segment.
pub const NOTIFICATIONS: usize = ctl::NOTIFICATIONS;
/// Segment ids are `0..MAX_SEGMENTS`.
pub const MAX_SEGMENTS: u32 = ctl::MAX_SEGMENTS;

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

fn env_usize(name: &str) -> Result<Option<usize>> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .map(Some)
            .map_err(|_| Error::Setup(format!("{name}={v:?} is not a number"))),
        Err(_) => Ok(None),
    }
}

impl Builder {
    /// Defaults: queue depth [`DEFAULT_QUEUE_DEPTH`], 60 s (or `TIERS_INIT_TIMEOUT_MS`) for
    /// all ranks to join.
    pub fn new() -> Builder {
        let ms = env_usize(env::INIT_TIMEOUT_MS)
            .ok()
            .flatten()
            .unwrap_or(60_000);
        Builder {
            queue_depth: DEFAULT_QUEUE_DEPTH,
            init_timeout: Duration::from_millis(ms as u64),
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
    pub fn build(self) -> Result<World> {
        #[cfg(feature = "mpi")]
        if engine::mpi::selected() {
            let w = self.wrap(engine::mpi::from_env()?);
            w.barrier(Timeout::After(self.init_timeout))?;
            return Ok(w);
        }
        match std::env::var(env::ENGINE).ok().as_deref() {
            None | Some("") => self.local(1).map(|mut v| v.remove(0)),
            Some("local") => {
                let n = env_usize(env::SIZE)?.unwrap_or(1);
                if n != 1 {
                    return Err(Error::Setup(format!(
                        "the local engine runs {n} ranks as threads: start them with tiers_cluster::spmd"
                    )));
                }
                self.local(1).map(|mut v| v.remove(0))
            }
            Some("shm") => {
                let job = std::env::var(env::JOB)
                    .map_err(|_| Error::Setup(format!("{} is not set", env::JOB)))?;
                let rank = env_usize(env::RANK)?
                    .ok_or_else(|| Error::Setup(format!("{} is not set", env::RANK)))?;
                let e = engine::shm::attach(&job, rank)?;
                let t = self.init_timeout;
                let w = self.wrap(Box::new(e));
                w.barrier(Timeout::After(t))?;
                Ok(w)
            }
            Some(other) => Err(Error::Setup(format!(
                "unknown engine {other:?} (local, shm)"
            ))),
        }
    }

    /// `n` in-process worlds (the `local` engine), rank `i` at index `i`.
    pub fn local(self, n: usize) -> Result<Vec<World>> {
        engine::local::worlds_with(n, self)
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
pub fn init() -> Result<World> {
    Builder::new().build()
}

/// Runs `f` as every rank of this process: once with the process's world under the `shm`
/// engine (or without a launcher), or on one thread per rank under the `local` engine
/// (`tiers run --engine local`). Returns the results of this process's ranks in rank order.
pub fn spmd<R: Send>(f: impl Fn(&World) -> R + Sync) -> Result<Vec<R>> {
    if std::env::var(env::ENGINE).ok().as_deref() == Some("local") {
        let n = env_usize(env::SIZE)?.unwrap_or(1);
        return engine::local::run(n, f);
    }
    let w = init()?;
    Ok(vec![f(&w)])
}

/// Node-tier worker threads per rank the launcher asked for (`--threads`), default 1.
pub fn threads() -> usize {
    env_usize(env::THREADS).ok().flatten().unwrap_or(1).max(1)
}

/// A segment id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegId(pub u32);

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
    pub fn health(&self, rank: Rank) -> Result<Health> {
        self.check_rank(rank)?;
        Ok(self.engine.health(rank))
    }

    /// The state vector: the health of every rank.
    pub fn state(&self) -> Vec<Health> {
        (0..self.size()).map(|r| self.engine.health(r)).collect()
    }

    /// Collective barrier. After `Err(Timeout)`, calling it again resumes the same barrier.
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

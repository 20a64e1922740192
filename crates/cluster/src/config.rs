//! Configuration of the cluster tier, in one place: the environment a rank reads (and the
//! launcher writes), the limits of the API, and the tunables of the engines, each with the
//! reason for its value.
//!
//! This module sits below both the [`World`](crate::World) and the engines: both read their
//! settings here, and neither reads the other's. The shared-memory layout of the engines
//! ([`engine::ctl`](crate::engine)) is sized from the limits below, not the other way round.

use crate::error::{Error, Result};
use std::time::Duration;

/// Environment variables of a rank: set by the launcher (`tiers run`) for every rank, or by
/// the user.
pub mod env {
    /// `local`, `shm`, `tcp` or `mpi` (absent: a world of one rank, or the `mpi` engine under an MPI
    /// launcher).
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
    /// The MPI thread level the `mpi` engine asks for: `funneled` or `multiple` (default:
    /// `multiple` when [`THREADS`] asks for more than one worker per rank, else `funneled`).
    pub const MPI_THREADS: &str = "TIERS_MPI_THREADS";
    /// `0`: the `mpi` engine sends everything through MPI, even between ranks of one host
    /// (default: ranks of one host share memory).
    pub const MPI_HOST_LOCAL: &str = "TIERS_MPI_HOST_LOCAL";
    /// `K`: the `mpi` engine splits the ranks of each machine into hosts of `K` consecutive
    /// ranks (shared memory inside each, MPI between them), emulating several hosts on one
    /// machine (default: one host per machine).
    pub const MPI_RANKS_PER_HOST: &str = "TIERS_MPI_RANKS_PER_HOST";
    /// `0`: a queue's local wait (GASPI's `gaspi_wait`) on the `mpi` engine also waits until
    /// the writes have landed at their targets on other hosts, as a full wait does (default:
    /// with Open MPI, small writes are left in flight and flushed before anything that must
    /// see them; see the engine's README).
    pub const MPI_LOCAL_WAIT: &str = "TIERS_MPI_LOCAL_WAIT";
    /// How the mpi engine carries one-sided operations between hosts: `window` (MPI-3 RMA
    /// windows, the default) or `messages` (ordered two-sided messages applied by the target;
    /// the GASPI library's default, `engine::prefer_onesided_messages`).
    pub const MPI_ONESIDED: &str = "TIERS_MPI_ONESIDED";
    /// Milliseconds a rank of the `mpi` engine that exits with its world still open (a GASPI
    /// program without `gaspi_proc_term`, `std::process::exit` before the world's drop)
    /// waits for every other rank to exit too before it aborts the job (default 60,000).
    pub const MPI_EXIT_TIMEOUT_MS: &str = "TIERS_MPI_EXIT_TIMEOUT_MS";
    /// `0`: in the `mpi` engine's messages mode, no doorbell (a datagram that wakes a target's
    /// stand-by thread when an operation has been sent to it; default on, see the engine's
    /// README).
    pub const MPI_DOORBELL: &str = "TIERS_MPI_DOORBELL";
    /// Whether the mpi engine lets MPI allocate segment memory (`MPI_Win_allocate`, whose
    /// windows MPI serves fastest) when every rank is alone on its host: `1` yes, `0` no (windows
    /// over memory of tiers' own, as with several ranks per host); unset: yes unless Open MPI's
    /// shared-memory transport would crash on it (see the engine's README).
    pub const MPI_ALLOCATE: &str = "TIERS_MPI_ALLOCATE";
    /// The progress policy of every world of the process: `eager` (default), `lazy` or
    /// `proxy` (see [`Progress`](crate::Progress)).
    pub const PROGRESS: &str = "TIERS_PROGRESS";
    /// The smallest transfer (bytes) the `proxy` policy hands to its thread (default
    /// [`PROXY_MIN`](crate::PROXY_MIN)).
    pub const PROXY_MIN: &str = "TIERS_PROXY_MIN";
    /// Replicas per logical rank (`tiers run --replicas R`; absent or 1: no replication). The
    /// world then has `R ×` logical ranks processes; process `r` is replica `r % R` of logical
    /// rank `r / R`.
    pub const REPLICAS: &str = "TIERS_REPLICAS";
    /// The `tcp` engine's rendezvous, `HOST:PORT`, served by the launcher (of the first host):
    /// every rank sends its listening address there and gets every other rank's back.
    pub const TCP_ROOT: &str = "TIERS_TCP_ROOT";
    /// The address a `tcp` rank listens on (default `127.0.0.1`; the host's address on the
    /// job's network when ranks span hosts).
    pub const TCP_BIND: &str = "TIERS_TCP_BIND";
    /// Microseconds a `tcp` rank's wait polls its sockets without blocking before it sleeps
    /// in `epoll_wait` (default 50 when every rank of the host has
    /// a core; 0 never spins).
    pub const TCP_SPIN_US: &str = "TIERS_TCP_SPIN_US";
    /// This process's replica index, `0..R` (set with [`REPLICAS`]).
    pub const REPLICA: &str = "TIERS_REPLICA";
    /// Milliseconds a replicated receiver waits for one replica of a sender before it marks it
    /// suspect and asks the next (default `REPLICA_TIMEOUT`, 1000)).
    pub const REPLICA_TIMEOUT_MS: &str = "TIERS_REPLICA_TIMEOUT_MS";
}

/// How long a replicated receiver waits for the replica of a sender it asked before it asks
/// the next one too: long enough that a replica busy computing between two calls (IS class A
/// ranks 2^22 keys between exchanges in well under a second) is not taken for a stopped one,
/// short enough that a stopped replica costs the job a second once.
pub const REPLICA_TIMEOUT: Duration = Duration::from_millis(1000);

/// Messages a replica keeps in its send log per destination rank before it drops the oldest
/// (see `twosided::replicated`): a replica that lags its siblings by more than this many
/// messages to one rank can no longer be served by the replicas that dropped them.
pub const REPLICA_LOG_MESSAGES: usize = 4096;

/// Bytes a replica keeps in its send log in all before it drops the oldest messages, whoever
/// has taken them: bounds the log of a job whose receivers' replicas all lag.
pub const REPLICA_LOG_BYTES: usize = 1 << 30;

/// Variables an MPI launcher sets for its ranks (Open MPI, MPICH/Hydra and Slurm's PMI,
/// PMIx): any of them means this process was started by one.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) const MPI_LAUNCHER_VARS: [&str; 3] = ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"];

/// Open MPI's "yield when idle" setting (`--mca mpi_yield_when_idle 1`), given when ranks
/// outnumber cores: the `mpi` engine then yields and sleeps rather than spins, as MPI does.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) const OMPI_YIELD_WHEN_IDLE: &str = "OMPI_MCA_mpi_yield_when_idle";

// ---- Limits of the API ----

/// Number of independent queues (GPI-2's default): a queue is the unit of completion, so a
/// few let independent streams of requests (workers, bulk traffic) be waited for apart.
pub const QUEUES: usize = 8;
/// Default number of requests a queue holds between two waits (GPI-2's default): the `mpi`
/// engine keeps a request handle per post until the wait, so the count is bounded; a post
/// beyond it is refused, never silently blocked on.
pub const DEFAULT_QUEUE_DEPTH: usize = 1024;
/// Notifications per segment: the notification area at the head of every segment mapping
/// (two pages with this many) and the range a `notify_waitsome` scans.
pub const NOTIFICATIONS: usize = 1024;
/// Segment ids are `0..MAX_SEGMENTS` (a table of this many sizes per rank lives in the
/// control block).
pub const MAX_SEGMENTS: u32 = 64;
/// Slots in each rank's passive mailbox: a sender waits while all are full.
pub(crate) const PASSIVE_SLOTS: usize = 16;
/// The largest passive message (bytes): each mailbox slot holds one, so the control block
/// grows by `PASSIVE_SLOTS` times this per rank.
pub(crate) const PASSIVE_MAX: usize = 32 * 1024;

// ---- Collectives ----

/// Bytes of each rank's allreduce staging slot (one of two, used alternately): a larger
/// allreduce runs in chunks of this size, one barrier each.
pub(crate) const REDUCE_CHUNK: usize = 4096;
/// The largest allreduce (bytes) that travels with its arrival flag: one cache line less the
/// flag and the length (8 bytes).
pub(crate) const FAST_REDUCE_MAX: usize = 56;
/// Most ranks for which the one-line allreduce is used: each rank reads every other's line,
/// which stops paying beyond a handful of ranks.
pub(crate) const FAST_REDUCE_RANKS: usize = 8;
/// The `mpi` engine gathers every rank's input for a float sum (rank order); up to this many
/// bytes in all, with its own point-to-point allgather (Bruck), which takes fewer steps per
/// call than `MPI_Iallgather`'s schedule.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) const BRUCK_MAX: usize = 64 * 1024;
/// Largest rank-indexed vector (bytes) a float sum is gathered in hierarchically when ranks
/// share hosts (beyond it, the flat gather).
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) const SPREAD_MAX: usize = 4096;
/// Writes from this size on are `MPI_Rput`s, whose local completion a queue wait tests with
/// its timeout before it flushes; smaller ones are `MPI_Put`s, which MPI may pack together
/// (request-based puts go out one message each over TCP: 1.4x MPI_Put's time at 8 B).
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) const RPUT_MIN: usize = 64 * 1024;

// ---- Progress (see `crate::progress`) ----

/// The smallest write or read the `proxy` policy hands to its thread; smaller ones are
/// performed by the caller. Handing over costs a lock, a queue entry and often a futex wake
/// (1 to 3 µs), the time a copy of 16 to 32 KiB takes at 10 GB/s, so below this size the
/// caller is done sooner by copying itself. ([`Builder::proxy_min`](crate::Builder::proxy_min)
/// changes it per world.)
pub const PROXY_MIN: usize = 32 * 1024;
/// Under the `lazy` policy, the engine is polled once every this many posts while requests
/// are in flight (and at every wait): a poll of MPI is a call (an `MPI_Iprobe`, 0.1 to 1 µs)
/// that finds nothing most of the time, while MPI's own progress inside the puts and the
/// flush of the wait moves the data along anyway.
pub const LAZY_POLL_EVERY: usize = 16;

/// The progress policy `TIERS_PROGRESS` asks for; eager when unset.
///
/// # Errors
///
/// [`Error::Setup`] for a value other than `eager`, `lazy` or `proxy`.
pub(crate) fn progress() -> Result<crate::progress::Progress> {
    match env_str(env::PROGRESS).as_deref() {
        None | Some("") => Ok(crate::progress::Progress::default()),
        Some(v) => v.parse(),
    }
}

/// The proxy threshold `TIERS_PROXY_MIN` asks for; [`PROXY_MIN`] when unset.
///
/// # Errors
///
/// [`Error::Setup`] when it is not a number.
pub(crate) fn proxy_min() -> Result<usize> {
    Ok(env_usize(env::PROXY_MIN)?.unwrap_or(PROXY_MIN))
}

// ---- Waiting (see `crate::wait`) ----

/// How long a waiter busy-polls before it sleeps, when every rank of the host has a core of
/// its own (the GASPI way: latency first, but bounded). Also how long a mailbox lock is spun
/// on before its holder is suspected of being preempted or dead.
pub(crate) const SPIN: Duration = Duration::from_micros(50);
/// How long a waiter on a futex sleeps before it re-checks the health of its peers (a wake-up
/// ends the sleep early; a dead peer rings no bell).
pub(crate) const HEALTH_SLICE: Duration = Duration::from_millis(25);
/// The first nap of a waiter that must poll (MPI progress): short, since the answer of
/// another host often comes within tens of microseconds.
pub(crate) const FIRST_NAP: Duration = Duration::from_micros(20);
/// The longest nap between two polls of MPI progress (naps double up to it), so that a long
/// wait costs little CPU and an answer is still seen within a millisecond.
pub(crate) const MAX_NAP: Duration = Duration::from_millis(1);
/// How long the `mpi` engine polls MPI before it naps, when the host's ranks have a core each
/// (measured: about 4096 `MPI_Test`s or 2000 progress polls over shared memory).
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) const MPI_SPIN: Duration = Duration::from_micros(100);
/// The same when ranks outnumber the host's cores: one clock check's worth of polls
/// (`tiers_node::Backoff::CLOCK_EVERY`), then naps that hand the core over.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) const MPI_SPIN_CROWDED: Duration = Duration::from_micros(1);
/// How long the `mpi` engine polls during setup (communicator splits, the host's control
/// block): every rank arrives at about the same time, and setup happens once.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) const MPI_SETUP_SPIN: Duration = Duration::from_micros(500);
/// With Open MPI told to yield when idle ([`OMPI_YIELD_WHEN_IDLE`]), how long a wait yields
/// at every poll (as MPI's own blocking calls do, handing the core to a rank that has work)
/// before it naps.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) const MPI_YIELD_FOR: Duration = Duration::from_millis(20);
/// How long an idle endpoint worker or progress thread sleeps before it re-checks for the
/// end of the run (a message wakes it earlier).
pub(crate) const ENDPOINT_SLEEP: Duration = Duration::from_millis(1);

// ---- Setup ----

/// How long `init` waits for every rank to join, unless [`env::INIT_TIMEOUT_MS`] says: long
/// enough for a loaded machine to start every process.
pub(crate) const INIT_TIMEOUT: Duration = Duration::from_secs(60);

// ---- The launcher ----

/// Time the other ranks get to finish after one has failed (`tiers run --grace`).
pub(crate) const LAUNCH_GRACE: Duration = Duration::from_secs(2);
/// How often the launcher looks at its ranks (exits, signals, deadlines).
pub(crate) const LAUNCH_WATCH: Duration = Duration::from_millis(2);
/// How long ranks get after `SIGTERM` before `SIGKILL`.
pub(crate) const LAUNCH_KILL_AFTER: Duration = Duration::from_secs(1);
/// The most ranks one launcher starts on one host. Each rank has a process, a slot in the
/// job's control block (its passive mailbox alone is `PASSIVE_SLOTS` × `PASSIVE_MAX` =
/// 512 KiB, so 4096 ranks take 2 GiB of /dev/shm) and, with `--prefix`, two forwarding
/// threads; no machine tiers targets has more cores than this.
pub const MAX_RANKS: usize = 4096;
/// The most worker threads per rank a launcher starts a job with (`--threads`): well above
/// any machine's cores per rank, and small enough that ranks × threads cannot overflow.
pub const MAX_THREADS: usize = 1024;
/// The longest piece of a line `tiers run --prefix` holds before writing it out: a longer
/// line is written in pieces, each with the prefix, instead of growing without bound.
pub(crate) const PREFIX_LINE_MAX: usize = 64 * 1024;

// ---- Reading the environment ----

/// `name` as a number; `None` when unset.
pub(crate) fn env_usize(name: &str) -> Result<Option<usize>> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .map(Some)
            .map_err(|_| Error::Setup(format!("{name}={v:?} is not a number"))),
        Err(_) => Ok(None),
    }
}

/// `name` as a string; `None` when unset or not Unicode.
pub(crate) fn env_str(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Node-tier worker threads per rank the launcher asked for (`--threads`), default 1.
pub fn threads() -> usize {
    env_usize(env::THREADS).ok().flatten().unwrap_or(1).max(1)
}

/// How long `init` waits for every rank: [`env::INIT_TIMEOUT_MS`], else [`INIT_TIMEOUT`].
///
/// # Errors
///
/// [`Error::Setup`] for a value that is not a positive number of milliseconds.
pub(crate) fn init_timeout() -> Result<Duration> {
    Ok(env_millis(env::INIT_TIMEOUT_MS)?.unwrap_or(INIT_TIMEOUT))
}

/// The replicas' timeout: [`env::REPLICA_TIMEOUT_MS`], else [`REPLICA_TIMEOUT`].
///
/// # Errors
///
/// As [`init_timeout`].
pub(crate) fn replica_timeout() -> Result<Duration> {
    Ok(env_millis(env::REPLICA_TIMEOUT_MS)?.unwrap_or(REPLICA_TIMEOUT))
}

/// The longest duration a variable may give (a year): deadlines are instants, and one
/// `u64::MAX` milliseconds away cannot be represented.
const MAX_MILLIS: u64 = 365 * 24 * 3600 * 1000;

/// Variable `name` as a duration in milliseconds; `None` when unset.
///
/// # Errors
///
/// As [`parse_millis`].
pub(crate) fn env_millis(name: &str) -> Result<Option<Duration>> {
    parse_millis(name, std::env::var(name).ok().as_deref())
}

/// `value` of variable `name` as a duration: a positive whole number of milliseconds, spaces
/// around it allowed, read the same wherever the variable is read (the launcher, the engines,
/// the replicated layer); `None` for no value.
///
/// # Errors
///
/// [`Error::Setup`] naming the variable for anything else (`abc`, `-5`, `0`).
pub fn parse_millis(name: &str, value: Option<&str>) -> Result<Option<Duration>> {
    let Some(v) = value else { return Ok(None) };
    match v.trim().parse::<u64>() {
        Ok(ms) if ms > 0 && ms <= MAX_MILLIS => Ok(Some(Duration::from_millis(ms))),
        _ => Err(Error::Setup(format!(
            "{name}={v:?}: a positive whole number of milliseconds, at most {MAX_MILLIS} (a year)"
        ))),
    }
}

/// The processors of the whole job: the launcher says ([`env::JOB_CPUS`]: its ranks may each
/// be pinned to one core, so a rank's own mask says nothing about its peers), else this
/// process's affinity mask.
pub(crate) fn job_cpus() -> usize {
    env_usize(env::JOB_CPUS)
        .ok()
        .flatten()
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

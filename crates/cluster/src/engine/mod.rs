//! Engines: what moves the bytes underneath a [`World`](crate::World).
//!
//! The [`Engine`] trait is the whole contract between the cluster tier's API (argument checks,
//! queue accounting, typed views) and a transport. It is shaped after GASPI's primitives rather
//! than after any one transport, so that:
//!
//! - `local` (ranks are threads of one process) and `shm` (ranks are processes of one host)
//!   implement it with loads, stores and copies in shared memory (both in `mem`);
//! - an MPI engine can implement it with MPI-3 windows: `write`/`read` become `MPI_Put`/`MPI_Get`
//!   whose completion is only promised by [`Engine::wait`] (a flush of the targets the queue
//!   touched), notifications become a put into the target's notification window after a flush,
//!   atomics become `MPI_Fetch_and_op`/`MPI_Compare_and_swap`, and the collectives may be MPI's.
//!
//! Engines receive arguments already checked for rank, queue and notification range by the
//! `World`; they check segments and bounds, which only they know.
//!
//! Which engine a process runs is decided in one place, `engine::from_env`, from the
//! environment ([`env`](mod@crate::env)). Engines depend on nothing above them: the world
//! wraps what they build.
//!
//! Design notes (the control block and who writes which word, the barrier generation, the
//! small-allreduce lines, mailbox takeover, failure detection, resumable collectives, the MPI
//! engine's host-local/remote split) are in `README.md` beside this file
//! (`crates/cluster/src/engine/README.md`).

pub(crate) mod copy;
pub(crate) mod ctl;
pub mod local;
pub(crate) mod mem;
#[cfg(feature = "mpi")]
pub mod mpi;
pub(crate) mod replicas;
pub mod shm;
pub mod tcp;

use crate::addr::{Local, Remote};
use crate::collective::{DataType, Op};
use crate::config::{self, env};
use crate::error::{Error, Rank, Result};
use crate::health::Health;
use crate::timeout::Timeout;

/// The engine the environment of this process asks for.
enum Which {
    /// No launcher: a world of one rank.
    Alone,
    /// `TIERS_ENGINE=local`: this many ranks as threads of this process.
    Local(usize),
    /// `TIERS_ENGINE=shm`: rank `rank` of the job `job`, one process per rank.
    Shm { job: String, rank: Rank },
    /// `TIERS_ENGINE=tcp`: rank `rank` of `size`, over sockets.
    Tcp { rank: Rank, size: usize },
    /// `TIERS_ENGINE=mpi`, or an MPI launcher's environment without `TIERS_ENGINE`.
    #[cfg(feature = "mpi")]
    Mpi,
}

/// Decides the engine from `TIERS_ENGINE` and its variables (an MPI launcher's environment
/// counts as `mpi` when the feature is on and `TIERS_ENGINE` is unset).
fn which() -> Result<Which> {
    let engine = config::env_str(env::ENGINE);
    #[cfg(feature = "mpi")]
    if match engine.as_deref() {
        Some("mpi") => true,
        None | Some("") => mpi::launched(),
        _ => false,
    } {
        return Ok(Which::Mpi);
    }
    match engine.as_deref() {
        None | Some("") => Ok(Which::Alone),
        Some("local") => match config::env_usize(env::SIZE)?.unwrap_or(1) {
            n @ 1..=config::MAX_RANKS => Ok(Which::Local(n)),
            n => Err(Error::Setup(format!(
                "{}={n}: the local engine runs 1..={} ranks",
                env::SIZE,
                config::MAX_RANKS
            ))),
        },
        Some("shm") => {
            let job = config::env_str(env::JOB)
                .ok_or_else(|| Error::Setup(format!("{} is not set", env::JOB)))?;
            let rank = config::env_usize(env::RANK)?
                .ok_or_else(|| Error::Setup(format!("{} is not set", env::RANK)))?;
            Ok(Which::Shm { job, rank })
        }
        Some("tcp") => {
            let rank = config::env_usize(env::RANK)?
                .ok_or_else(|| Error::Setup(format!("{} is not set", env::RANK)))?;
            let size = config::env_usize(env::SIZE)?
                .ok_or_else(|| Error::Setup(format!("{} is not set", env::SIZE)))?;
            Ok(Which::Tcp { rank, size })
        }
        Some(other) => Err(Error::Setup(format!(
            "unknown engine {other:?} (local, shm, tcp{})",
            if cfg!(feature = "mpi") { ", mpi" } else { "" }
        ))),
    }
}

/// See [`prefer_onesided_messages`].
static PREFER_MESSAGES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes one-sided operations between hosts travel as ordered messages on the mpi engine by
/// default in this process (as `TIERS_MPI_ONESIDED=messages`; the variable, when set, still
/// decides). For a library that polls the engine from a thread of its own, so that every
/// rank applies what others send it while its program computes (the GASPI library's
/// watcher): there the messages save the round trips of MPI windows over TCP. Call it before
/// the world is built; no effect on other engines, or without the `mpi` feature.
pub fn prefer_onesided_messages() {
    PREFER_MESSAGES.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether [`prefer_onesided_messages`] was called.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) fn onesided_messages_preferred() -> bool {
    PREFER_MESSAGES.load(std::sync::atomic::Ordering::Relaxed)
}

/// What the environment of this process asks for (see [`from_env`]).
pub(crate) enum FromEnv {
    /// Ranks that are threads of this process (the `local` engine): `explicit` when
    /// `TIERS_ENGINE=local` said so, rather than no launcher at all.
    Threads {
        /// Number of ranks.
        ranks: usize,
        /// Whether `TIERS_ENGINE=local` asked for them.
        explicit: bool,
    },
    /// This process's rank of a job of processes, attached (the world still has to wait for
    /// its peers to join).
    Process(Box<dyn Engine>),
}

/// The one place where an engine is chosen: from `TIERS_ENGINE` (and the variables of the
/// launcher that set it), attaching to the job when it is one of processes.
pub(crate) fn from_env() -> Result<FromEnv> {
    Ok(match which()? {
        Which::Alone => FromEnv::Threads {
            ranks: 1,
            explicit: false,
        },
        Which::Local(ranks) => FromEnv::Threads {
            ranks,
            explicit: true,
        },
        Which::Shm { job, rank } => FromEnv::Process(Box::new(shm::attach(&job, rank)?)),
        Which::Tcp { rank, size } => FromEnv::Process(Box::new(tcp::attach(rank, size)?)),
        #[cfg(feature = "mpi")]
        Which::Mpi => FromEnv::Process(mpi::from_env()?),
    })
}

/// One one-sided transfer: `len` bytes between a place in the calling rank's segment
/// (`local`: segment and offset) and a place in another rank's (`remote`: rank, segment and
/// offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The calling rank's side: the source of a write, the destination of a read.
    pub local: Local,
    /// The other side.
    pub remote: Remote,
    /// Bytes to move.
    pub len: usize,
}

impl Transfer {
    /// `len` bytes between `local` and `remote`.
    #[inline]
    pub const fn new(local: Local, remote: Remote, len: usize) -> Transfer {
        Transfer { local, remote, len }
    }

    /// The same transfer addressed to rank `rank` (an engine's own numbering of the peer).
    #[inline]
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) const fn with_rank(self, rank: Rank) -> Transfer {
        Transfer {
            local: self.local,
            remote: Remote {
                rank,
                seg: self.remote.seg,
                offset: self.remote.offset,
            },
            len: self.len,
        }
    }
}

/// A transport for the cluster tier. All methods take `&self`: a world is shared by the
/// threads of its rank.
///
/// This is the interface an engine implements, not the one a program calls: its methods
/// take their arguments as [`World`](crate::World) has checked them (ranks below the size,
/// segments that exist, offsets and notification ids in range, matching lengths) and may
/// panic or wait forever on others. A program reaches its engine through the world, whose
/// [`World::engine`](crate::World::engine) answers questions about it ([`EngineInfo`]) but
/// posts nothing.
///
/// Completion model (GASPI): `write`, `read`, `notify` and `write_notify` *post* a request on a
/// queue and may return before it is done; [`Engine::wait`] returns once every request posted on
/// that queue is locally complete (source reusable, read data present). `write_notify` makes the
/// notification visible at the target only after the data.
pub trait Engine: Send + Sync {
    /// Short name, as in `TIERS_ENGINE` (`local`, `shm`, `mpi`).
    fn name(&self) -> &'static str;
    /// This rank.
    fn rank(&self) -> Rank;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// Rank among the ranks of this host.
    fn local_rank(&self) -> usize;
    /// Number of ranks on this host.
    fn local_size(&self) -> usize;

    /// Collective: creates and registers segment `seg` of `size` bytes at every rank (sizes may
    /// differ between ranks). Resumable after `Timeout` by calling it again with the same
    /// arguments.
    fn segment_create(&self, seg: u32, size: usize, timeout: Timeout) -> Result<()>;
    /// Collective: deregisters and frees `seg` at every rank.
    fn segment_delete(&self, seg: u32, timeout: Timeout) -> Result<()>;
    /// The calling rank's memory of `seg`: pointer to the first byte, and length. The pointer
    /// stays valid while the returned keep-alive handle lives.
    fn segment_local(&self, seg: u32) -> Result<(*mut u8, usize, KeepAlive)>;
    /// The registered size of `seg` at `rank`.
    fn segment_size(&self, seg: u32, rank: Rank) -> Result<usize>;

    /// Posts a write (local → remote).
    fn write(&self, queue: usize, t: &Transfer) -> Result<()>;
    /// Posts a read (remote → local).
    fn read(&self, queue: usize, t: &Transfer) -> Result<()>;
    /// Posts notification `id` with `value` (non-zero) at `rank`'s segment `seg`.
    fn notify(&self, queue: usize, rank: Rank, seg: u32, id: usize, value: u32) -> Result<()>;
    /// Posts a write followed by a notification that becomes visible only after the data.
    fn write_notify(&self, queue: usize, t: &Transfer, id: usize, value: u32) -> Result<()>;
    /// Waits for local completion of everything posted on `queue` (the `mpi` engine also
    /// waits until the writes have landed at their targets on other hosts).
    fn wait(&self, queue: usize, timeout: Timeout) -> Result<()>;
    /// Waits for local completion only (GASPI's `gaspi_wait`): sources reusable, read data
    /// present; writes may still be on their way to their targets, where they land before
    /// any later barrier, collective, notification, atomic or passive message of this rank
    /// takes effect, and before a later read of this rank from the same target. Only the
    /// `mpi` engine between hosts differs from [`Engine::wait`] (it skips the round trip of
    /// `MPI_Win_flush`).
    fn wait_local(&self, queue: usize, timeout: Timeout) -> Result<()> {
        self.wait(queue, timeout)
    }

    /// Waits until one of notifications `first..first + count` of the local `seg` is non-zero;
    /// returns its id (the lowest such).
    fn notify_waitsome(
        &self,
        seg: u32,
        first: usize,
        count: usize,
        timeout: Timeout,
    ) -> Result<usize>;
    /// Atomically reads and zeroes notification `id` of the local `seg`.
    fn notify_reset(&self, seg: u32, id: usize) -> Result<u32>;

    /// Atomically adds `value` to the 8-byte word at `seg[offset]` of `rank`; returns the old value.
    fn atomic_fetch_add(&self, rank: Rank, seg: u32, offset: usize, value: u64) -> Result<u64>;
    /// Atomically replaces the word with `new` if it equals `expected`; returns the old value.
    fn atomic_compare_swap(
        &self,
        rank: Rank,
        seg: u32,
        offset: usize,
        expected: u64,
        new: u64,
    ) -> Result<u64>;
    /// [`Engine::atomic_fetch_add`] whose wait for the answer ends at `timeout`
    /// ([`Error::Timeout`]; the request has gone out, and the same call from the same thread
    /// resumes it, so that the operation is applied once). The default
    /// waits as the untimed call does: right for engines whose atomics complete at once
    /// (memory). The tcp engine and the mpi engine's messages mode bound the wait; the mpi
    /// engine's windows wait inside MPI.
    fn atomic_fetch_add_timeout(
        &self,
        rank: Rank,
        seg: u32,
        offset: usize,
        value: u64,
        timeout: Timeout,
    ) -> Result<u64> {
        let _ = timeout;
        self.atomic_fetch_add(rank, seg, offset, value)
    }
    /// [`Engine::atomic_compare_swap`] whose wait ends at `timeout`, as
    /// [`Engine::atomic_fetch_add_timeout`].
    #[allow(clippy::too_many_arguments)]
    fn atomic_compare_swap_timeout(
        &self,
        rank: Rank,
        seg: u32,
        offset: usize,
        expected: u64,
        new: u64,
        timeout: Timeout,
    ) -> Result<u64> {
        let _ = timeout;
        self.atomic_compare_swap(rank, seg, offset, expected, new)
    }

    /// Atomically stores `value` into the 8-byte word at `seg[offset]` of `rank`, applied
    /// after every request posted before it on queue `queue` (a flag after its data, as a
    /// notification is, but into any word). The default waits for the queue, then swaps the
    /// value in with compare-and-swap (a round trip where atomics travel); the tcp engine
    /// sends it after them on the same connection, complete when posted.
    fn atomic_store(
        &self,
        queue: usize,
        rank: Rank,
        seg: u32,
        offset: usize,
        value: u64,
    ) -> Result<()> {
        self.wait(queue, Timeout::Block)?;
        let mut old = 0;
        loop {
            let got = self.atomic_compare_swap(rank, seg, offset, old, value)?;
            if got == old {
                return Ok(());
            }
            old = got;
        }
    }

    /// Collective barrier; resumable after `Timeout`.
    fn barrier(&self, timeout: Timeout) -> Result<()>;
    /// Collective allreduce of `input` into `output` (same length, whole elements of `ty`);
    /// every rank gets bit-identical results. Resumable after `Timeout`.
    fn allreduce(
        &self,
        input: &[u8],
        output: &mut [u8],
        ty: DataType,
        op: Op,
        timeout: Timeout,
    ) -> Result<()>;

    /// Sends a passive message to `rank` (waits while its mailbox is full).
    fn passive_send(&self, rank: Rank, data: &[u8], timeout: Timeout) -> Result<()>;
    /// Receives the next passive message into `buf`, sleeping (no spinning) while none is
    /// there; returns the sender and the length.
    fn passive_receive(&self, buf: &mut [u8], timeout: Timeout) -> Result<(Rank, usize)>;
    /// The largest passive message.
    fn passive_max(&self) -> usize;

    /// The health of `rank` as this engine knows it.
    fn health(&self, rank: Rank) -> Health;
    /// Marks this rank as gone (`failed`: abnormally), waking everyone who waits for it.
    fn leave(&self, failed: bool);

    /// Whether transfers need polls between calls to complete (MPI between hosts, where
    /// one-sided operations travel as messages); the progress policies poll only such
    /// engines. Shared-memory engines finish every transfer when it is posted: no.
    fn needs_progress(&self) -> bool {
        false
    }
    /// Whether `rank`'s one-sided operations on this rank's segments land straight in its
    /// memory (shared memory on one host), so that nothing at this rank has to progress for
    /// them. Engines whose transfers need no progress share memory with every rank; the
    /// others at least with this rank.
    fn shares_memory_with(&self, rank: Rank) -> bool {
        !self.needs_progress() || rank == self.rank()
    }
    /// One poll of the transport; returns whether it found work to do (when it can tell).
    fn progress(&self) -> Result<bool> {
        Ok(false)
    }
    /// Whether [`progress_wait`](Engine::progress_wait) sleeps until the transport has work
    /// (a socket becomes ready) rather than polling once: a watcher thread can then stand by
    /// for arriving data as GPI-2's TCP device's thread does, at no cost while none comes.
    fn progress_sleeps(&self) -> bool {
        false
    }
    /// One poll of the transport that may sleep up to `max` until it has something to do
    /// (where [`progress_sleeps`](Engine::progress_sleeps), and on the mpi engine until another
    /// host rings its doorbell); elsewhere one [`progress`](Engine::progress).
    fn progress_wait(&self, max: std::time::Duration) -> Result<bool> {
        let _ = max;
        self.progress()
    }
    /// Whether [`progress_stand_by`](Engine::progress_stand_by) sleeps until the transport
    /// has work for this rank, so that a thread standing by for arriving data need not probe
    /// on a timer: where [`progress_sleeps`](Engine::progress_sleeps), and on the mpi engine
    /// where another host's operations ring a doorbell.
    fn progress_stands_by(&self) -> bool {
        self.progress_sleeps()
    }
    /// A thread is about to wait in calls of its own that drive the progress engine
    /// ([`progress_wait`](Engine::progress_wait) in a loop): a thread that only stands by
    /// ([`progress_stand_by`](Engine::progress_stand_by)) steps aside until the matching
    /// [`progress_release`](Engine::progress_release), so that arriving data is applied by the
    /// thread that waits for it rather than handed over with a wake-up. Claims nest.
    fn progress_claim(&self) {}
    /// Ends a [`progress_claim`](Engine::progress_claim).
    fn progress_release(&self) {}
    /// [`progress_wait`](Engine::progress_wait) for a thread that only stands by for
    /// arriving data while the program computes: while another thread holds a claim, it
    /// naps up to `max` instead (the claim's release ends the nap).
    fn progress_stand_by(&self, max: std::time::Duration) -> Result<bool> {
        self.progress_wait(max)
    }
    /// Wakes a thread asleep in [`progress_wait`](Engine::progress_wait) under a claim, so
    /// that it re-checks its condition: this rank changed memory that a thread may wait on
    /// without a message arriving (a notification set locally).
    fn progress_interrupt(&self) {}
    /// Whether any thread of the rank may call the engine (a progress thread then may):
    /// MPI without `MPI_THREAD_MULTIPLE` allows only the thread that initialised it.
    fn any_thread(&self) -> bool {
        true
    }
    /// What the transport's progress engine has done, for engines that count it (`tcp`).
    fn transport_stats(&self) -> Option<TransportStats> {
        None
    }
}

/// The counters of a socket transport's progress engine, after \[Gabriel2010\]'s
/// instrumentation of VolpexMPI: how often it was called, how often a call found a socket
/// ready to read or to write, and the time spent handling each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Passes of the progress engine (each one `epoll_wait` and what it found).
    pub calls: u64,
    /// Passes that found a socket ready to read (or a connection to accept).
    pub recv_ready: u64,
    /// Passes that wrote out a backlog to a socket that was ready to write.
    pub send_ready: u64,
    /// Time reading and applying frames.
    pub recv_time: std::time::Duration,
    /// Time writing frames (at the post, and the backlogs in passes).
    pub send_time: std::time::Duration,
    /// Frames received.
    pub frames_in: u64,
    /// Frames sent.
    pub frames_out: u64,
    /// Bytes received.
    pub bytes_in: u64,
    /// Bytes the sockets took.
    pub bytes_out: u64,
}

impl TransportStats {
    /// The counts of `self` since `earlier` (both from the same engine; a count that went
    /// backwards, `earlier` being the later, is 0).
    pub fn since(&self, earlier: &TransportStats) -> TransportStats {
        TransportStats {
            calls: self.calls.saturating_sub(earlier.calls),
            recv_ready: self.recv_ready.saturating_sub(earlier.recv_ready),
            send_ready: self.send_ready.saturating_sub(earlier.send_ready),
            recv_time: self.recv_time.saturating_sub(earlier.recv_time),
            send_time: self.send_time.saturating_sub(earlier.send_time),
            frames_in: self.frames_in.saturating_sub(earlier.frames_in),
            frames_out: self.frames_out.saturating_sub(earlier.frames_out),
            bytes_in: self.bytes_in.saturating_sub(earlier.bytes_in),
            bytes_out: self.bytes_out.saturating_sub(earlier.bytes_out),
        }
    }
}

/// Keeps a segment's memory mapped while a local view of it lives.
pub type KeepAlive = std::sync::Arc<dyn Send + Sync>;

/// What a program may learn about its world's engine ([`World::engine`](crate::World::engine)):
/// its nature and how it progresses, not its raw operations (those take no argument checks:
/// see [`Engine`]).
#[derive(Clone, Copy)]
pub struct EngineInfo<'a>(pub(crate) &'a dyn Engine);

impl EngineInfo<'_> {
    /// The engine's name (`local`, `shm`, `tcp`, `mpi`).
    pub fn name(&self) -> &'static str {
        self.0.name()
    }
    /// Ranks in the world.
    pub fn size(&self) -> usize {
        self.0.size()
    }
    /// Ranks on this host.
    pub fn local_size(&self) -> usize {
        self.0.local_size()
    }
    /// See [`Engine::needs_progress`].
    pub fn needs_progress(&self) -> bool {
        self.0.needs_progress()
    }
    /// See [`Engine::any_thread`].
    pub fn any_thread(&self) -> bool {
        self.0.any_thread()
    }
    /// See [`Engine::progress_sleeps`].
    pub fn progress_sleeps(&self) -> bool {
        self.0.progress_sleeps()
    }
    /// See [`Engine::progress_stands_by`].
    pub fn progress_stands_by(&self) -> bool {
        self.0.progress_stands_by()
    }
}

impl std::fmt::Debug for EngineInfo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineInfo")
            .field("name", &self.name())
            .field("size", &self.size())
            .field("local_size", &self.local_size())
            .finish()
    }
}

//! The `mpi` engine (cargo feature `mpi`): tiers across machines, multi-tier inside.
//!
//! Ranks that share a host (`MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`) form a shared-memory
//! job of their own and reach each other through the same code as the `shm` engine
//! (`MemEngine`): one copy per write, futex wake-ups, hardware atomics. Only traffic to
//! ranks on other hosts goes through MPI:
//!
//! - a segment is the host mapping (notification header + data) exposed as an MPI-3 window
//!   (`MPI_Win_create`, one passive-target `lock_all` epoch for its whole life);
//! - write/read are `MPI_Rput`/`MPI_Rget` (writes under 64 KiB plain `MPI_Put`s, which MPI
//!   may pack together); a queue remembers its requests and the
//!   (window, rank) pairs it touched, and `wait` tests the requests (a real timeout) and then
//!   flushes exactly those targets;
//! - `write_notify` puts the data, flushes that target, then puts the notification (GASPI
//!   ordering: the notification is never visible before the data);
//! - atomics are `MPI_Fetch_and_op` / `MPI_Compare_and_swap` plus a flush;
//! - barrier and allreduce are hierarchical: host-local in shared memory, then among one
//!   leader per host (Bruck's allgather of point-to-point messages, a dissemination barrier
//!   when there is no data, measured faster than `MPI_Ibarrier`; `MPI_Iallreduce` for large
//!   inputs), then host-local again. Every message among the leaders carries what its sender
//!   knows of the calls made, and the last host-local step hands it to every rank, so ranks
//!   that called different collectives, or the same with other arguments, all get
//!   `CollectiveMismatch` (see `coll.rs`). Float sums are added in rank order on every rank
//!   after an allgather of all inputs (Bruck's algorithm when small, `MPI_Iallgather` when
//!   large);
//! - passive messages to other hosts are `MPI_Isend`s matched with `MPI_Improbe`.
//!
//! Every wait drives non-blocking MPI calls with tests, so timeouts are real, and sleeps
//! (futex on the host-local word, with MPI progress polled in growing slices up to 1 ms) when
//! asked to wait long, rather than spinning a core.
//!
//! With one host (`mpirun -n 2` on a laptop) no MPI call is on any data path at all; with
//! [`MpiConfig::host_local`] off every rank is its own "host" and everything goes through MPI
//! (the `tiers-mpi` rows of the benchmarks).

mod algo;
mod am;
mod aside;
pub mod baseline;
mod coll;
mod completion;
mod doorbell;
mod exit;
mod notify;
mod passive;
use passive::Passive;
mod raw;
mod segments;

pub use raw::{launched, thread_multiple, Threading};

use super::ctl::{self, Ctl, SEG_HEADER};
use super::mem::{Backing, MemEngine};
use super::{Engine, KeepAlive, Transfer};
use crate::collective::{Collective, DataType, Op};
use crate::config::{self, env, MAX_SEGMENTS, PASSIVE_MAX, QUEUES, RPUT_MIN};
use crate::error::{Error, Rank, Result};
use crate::health::Health;
use crate::sys::{self, Mapping};
use crate::timeout::{Deadline, Timeout};
use crate::wait::{Naps, Pace};
use coll::Coll;
use completion::QState;
use raw::{Comm, Req, Win};
use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// Tag of passive messages between hosts.
const TAG_PASSIVE: i32 = 0x7431;

/// How to set up an mpi world.
#[derive(Clone, Copy, Debug)]
pub struct MpiConfig {
    /// The MPI thread level to ask for.
    pub threading: Threading,
    /// Ranks on one host use shared memory among themselves (the default); off, every rank
    /// talks to every other through MPI.
    pub host_local: bool,
    /// Splits the ranks of each machine into "hosts" of this many consecutive ranks (shared
    /// memory inside each, MPI between them): several hosts emulated on one machine, to run
    /// the hierarchical paths where there is no cluster. `None`: one host per machine.
    pub ranks_per_host: Option<usize>,
}

impl MpiConfig {
    /// From the environment: `TIERS_MPI_THREADS=funneled|multiple` (default: multiple when
    /// `TIERS_THREADS` asks for more than one worker per rank, otherwise funneled) and
    /// `TIERS_MPI_HOST_LOCAL=0` to send everything through MPI, `TIERS_MPI_RANKS_PER_HOST=K`
    /// to emulate hosts of K ranks (a positive number; anything else is ignored).
    pub fn from_env() -> MpiConfig {
        let threading = match config::env_str(env::MPI_THREADS).as_deref() {
            Some("multiple") => Threading::Multiple,
            Some("funneled") => Threading::Funneled,
            _ if config::threads() > 1 => Threading::Multiple,
            _ => Threading::Funneled,
        };
        let host_local = config::env_str(env::MPI_HOST_LOCAL).as_deref() != Some("0");
        let ranks_per_host = config::env_str(env::MPI_RANKS_PER_HOST)
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&k| k > 0);
        MpiConfig {
            threading,
            host_local,
            ranks_per_host,
        }
    }
}

/// Whether `tiers_cluster::init()` should use this engine: `TIERS_ENGINE=mpi`, or no
/// `TIERS_ENGINE` and an MPI launcher's environment.
pub fn selected() -> bool {
    matches!(super::which(), Ok(super::Which::Mpi))
}

/// The engine `init()` uses under an MPI launcher (configured from the environment).
pub fn from_env() -> Result<Box<dyn Engine>> {
    Ok(Box::new(MpiEngine::new(MpiConfig::from_env())?))
}

/// What the barrier, or the allreduce of one `f64` sum, of a world of `size` ranks with
/// `local_size` per host runs (printed by the benchmarks).
pub fn collective_algorithm(e: crate::EngineInfo<'_>, barrier: bool) -> &'static str {
    match (e.local_size() == e.size(), e.local_size() == 1, barrier) {
        (true, _, true) => "shared-memory barrier (one host)",
        (true, _, false) => "shared-memory allreduce (one host)",
        (_, true, true) => {
            "dissemination barrier carrying the calls (Bruck, MPI_Isend/MPI_Improbe + MPI_Test)"
        }
        (_, true, false) => {
            "f64 sum: allgather carrying the calls (Bruck, MPI_Isend/MPI_Improbe), added in \
             rank order"
        }
        (_, _, true) => {
            "hierarchical: shm barrier, host leaders' dissemination barrier carrying the calls \
             (MPI_Isend/MPI_Improbe), shm broadcast of the calls"
        }
        (_, _, false) => {
            "f64 sum: rank-indexed inputs gathered by shm, then among host leaders (Bruck \
             carrying the calls, MPI_Isend/MPI_Improbe), then by shm, added in rank order \
             (other types and ops: shm allreduce, host leaders' Bruck allgather or agreement + \
             MPI_Iallreduce, shm broadcast)"
        }
    }
}

/// The memory of the ranks of one host: named shared memory when the host has several ranks,
/// anonymous memory when it has one.
struct HostBacking {
    job: String,
    ctl: Ctl,
    _map: Arc<Mapping>,
    shared: bool,
}

impl Backing for HostBacking {
    fn name(&self) -> &'static str {
        "mpi"
    }
    fn ctl(&self) -> Ctl {
        self.ctl
    }
    fn create_segment(&self, seg: u32, rank: Rank, len: usize) -> io::Result<Arc<Mapping>> {
        if !self.shared {
            return Mapping::anonymous(len).map(Arc::new);
        }
        let name = super::shm::seg_name(&self.job, seg, rank);
        let _ = sys::shm_unlink(&name); // a leftover of a crashed job with our name
        Mapping::create(&name, len).map(Arc::new)
    }
    fn open_segment(&self, seg: u32, rank: Rank) -> io::Result<Arc<Mapping>> {
        Mapping::open(&super::shm::seg_name(&self.job, seg, rank)).map(Arc::new)
    }
    fn remove_segment(&self, seg: u32, rank: Rank) {
        if self.shared {
            let _ = sys::shm_unlink(&super::shm::seg_name(&self.job, seg, rank));
        }
    }
    fn processes(&self) -> bool {
        true
    }
}

/// A registered segment as MPI sees it.
struct MpiSeg {
    /// This rank's data (after the notification header) and its size.
    data: *mut u8,
    size: usize,
    /// Keeps the mapping behind `data` (and the window's memory) alive.
    _keep: KeepAlive,
    /// Registered size at every world rank.
    sizes: Vec<usize>,
    /// The window over header + data, collective over all ranks.
    win: Win,
    /// Where each rank's header starts in its part of the window, when MPI allocated the
    /// memory (aligned inside it, see `segments.rs`); empty: at 0.
    pads: Vec<usize>,
}

impl MpiSeg {
    /// The displacement in `rank`'s part of the window of byte `off` of its mapping (header
    /// included).
    #[inline]
    fn disp(&self, rank: Rank, off: usize) -> usize {
        self.pads.get(rank).copied().unwrap_or(0) + off
    }
}

// SAFETY: `data` points into a mapping kept alive by `_keep`; it is only used for bounds-checked
// MPI transfers whose ordering the program establishes, as in the shm engine.
unsafe impl Send for MpiSeg {}
// SAFETY: as above.
unsafe impl Sync for MpiSeg {}

enum Slot {
    Empty,
    /// Sizes are being gathered (resumable after a timeout).
    Gathering {
        req: Req,
        _send: Box<u64>,
        sizes: Vec<u64>,
    },
    Ready(Arc<MpiSeg>),
}

/// The `mpi` engine. See the module documentation.
pub struct MpiEngine {
    rank: Rank,
    size: usize,
    comm: Comm,
    host: MemEngine<HostBacking>,
    host_ctl: Ctl,
    /// World ranks of this host, by host-local index.
    members: Vec<Rank>,
    /// For every world rank, its index on this host (`None`: another host).
    local_index: Vec<Option<usize>>,
    /// Number of hosts.
    hosts: usize,
    /// Host leaders (host-local index 0), when there are several hosts: the group of the
    /// collectives' exchanges (`algo::Exchange`) and of `MPI_Iallreduce`.
    leader_group: Option<algo::Group>,
    /// Every rank, on a communicator of its own, for the float sums' gathers (an exchange
    /// receives any tag: no other point-to-point traffic may share its communicator).
    gather: algo::Group,
    segs: RwLock<Vec<Slot>>,
    queues: Vec<Mutex<QState>>,
    coll: Mutex<Coll>,
    /// Between hosts: the collective that did not complete (timed out, or a peer failed);
    /// only it may be called next. (On one host the host engine keeps this.)
    pending: Mutex<Option<Collective>>,
    passive: Mutex<Passive>,
    /// Targets whose puts completed locally (`wait_local`) but are not known to have landed:
    /// flushed before anything that must see them there (see [`MpiEngine::flush_deferred`]).
    deferred: Mutex<HashSet<(u32, Rank)>>,
    /// `deferred` is not empty (checked without the lock on every synchronising call).
    any_deferred: std::sync::atomic::AtomicBool,
    /// Whether `wait_local` may leave small puts in flight: Open MPI (whose osc components
    /// deliver a target's small puts in the order they were posted), unless
    /// `TIERS_MPI_LOCAL_WAIT=0`.
    local_wait: bool,
    /// One-sided operations between hosts as ordered messages (`TIERS_MPI_ONESIDED=messages`,
    /// see `am.rs`) rather than through the windows.
    am: Option<am::Am>,
    /// Segment memory comes from `MPI_Win_allocate`: every rank is alone on its host, and
    /// `TIERS_MPI_ALLOCATE=1`, or it is unset and [`segments::allocate_is_safe`].
    allocate: bool,
    /// Segments on memory MPI allocated, for the atomics' lock-free lookup: `Arc::as_ptr` of
    /// the ready segment, null otherwise.
    ready: Box<[std::sync::atomic::AtomicPtr<MpiSeg>]>,
    /// Deleted segments whose memory came from MPI (and their windows): freed with the
    /// engine, since lock-free readers of `ready` and the host engine's may still hold them.
    retired: Mutex<Vec<Arc<MpiSeg>>>,
    /// How long a wait polls MPI before it naps.
    spin: Duration,
    /// Open MPI was told to yield when idle: waits yield rather than spin.
    yields: bool,
    /// This rank left the job as failed ([`Engine::leave`] with `failed`): dropping the
    /// engine then skips the collective teardown, and the process's exit aborts the job.
    failed: std::sync::atomic::AtomicBool,
}

fn job_id(leader_pid: u32) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let c = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    // The pid first, as the shm engine's names, so that `tiers run`'s stale sweep knows them.
    format!("{leader_pid}xmpi{c}t{:x}", t & 0xfffff)
}

impl MpiEngine {
    /// Joins the MPI job (initialising MPI if needed). Collective over `MPI_COMM_WORLD`.
    pub fn new(cfg: MpiConfig) -> Result<MpiEngine> {
        let messages = match config::env_str(env::MPI_ONESIDED).as_deref() {
            Some("messages") => true,
            Some("window") => false,
            Some(other) => {
                return Err(Error::Setup(format!(
                    "{}={other}: expected `window` (MPI windows) or `messages` (ordered \
                     messages applied by the target)",
                    env::MPI_ONESIDED
                )))
            }
            None => super::onesided_messages_preferred(),
        };
        let bell_off = doorbell::turned_off(config::env_str(env::MPI_DOORBELL).as_deref())?;
        let allocate = match config::env_str(env::MPI_ALLOCATE).as_deref() {
            Some("1") => Some(true),
            Some("0") => Some(false),
            Some(other) => {
                return Err(Error::Setup(format!(
                    "{}={other}: expected 1 (segment memory from MPI_Win_allocate when every \
                     rank is alone on its host) or 0 (never)",
                    env::MPI_ALLOCATE
                )))
            }
            None => None,
        };
        raw::init(cfg.threading)?;
        let setup = Deadline::Never;
        let comm = raw::dup(raw::world())?;
        let (rank, size) = raw::rank_size(comm);
        let host_comm = if cfg.host_local {
            let machine = raw::split_shared(comm)?;
            match cfg.ranks_per_host {
                Some(k) => {
                    let (i, _) = raw::rank_size(machine);
                    raw::split(machine, Some((i / k) as i32), i as i32)?
                        .expect("a colour was given")
                }
                None => machine,
            }
        } else {
            raw::split(comm, Some(rank as i32), 0)?.expect("a colour was given")
        };
        let (hidx, hsize) = raw::rank_size(host_comm);
        let members: Vec<Rank> = raw::allgather_u64(rank as u64, host_comm, setup)?
            .into_iter()
            .map(|r| r as Rank)
            .collect();
        let leader_of = raw::allgather_u64(members[0] as u64, comm, setup)?;
        let mut local_index = vec![None; size];
        for (i, &r) in members.iter().enumerate() {
            local_index[r] = Some(i);
        }
        let hosts = leader_of
            .iter()
            .enumerate()
            .filter(|&(r, &l)| l as usize == r)
            .count();
        let leaders = raw::split(comm, (hidx == 0).then_some(0), rank as i32)?;
        let leaders = if hosts > 1 { leaders } else { None };
        if hosts > 1 {
            raw::read_sockets_at_every_progress();
        }
        let leader_group = leaders.map(|comm| {
            let (me, n) = raw::rank_size(comm);
            algo::Group { comm, me, n }
        });
        let gather = algo::Group {
            comm: raw::dup(comm)?,
            me: rank,
            n: size,
        };
        // The exchanges carry the calls in their tags.
        let ub = raw::tag_ub();
        if hosts > 1 && ub < algo::TAG_BITS_NEEDED {
            return Err(Error::Setup(format!(
                "mpi engine: this MPI's largest tag (MPI_TAG_UB) is {ub}; the collectives \
                 between hosts need {}",
                algo::TAG_BITS_NEEDED
            )));
        }

        // The host's control block: created by the leader, named after its pid.
        let leader_pid = raw::allgather_u64(sys::getpid() as u64, host_comm, setup)?[0] as u32;
        let job = job_id(leader_pid);
        let shared = hsize > 1;
        // Every rank of the host computes a job id; the leader's is the one used.
        let job = if shared {
            let ids = raw::allgather_u64(if hidx == 0 { fnv(&job) } else { 0 }, host_comm, setup)?;
            format!("{leader_pid}xmpi{:x}", ids[0])
        } else {
            job
        };
        let ctl_name = super::shm::ctl_name(&job);
        let map = if !shared {
            Mapping::anonymous(Ctl::len(1))
        } else if hidx == 0 {
            let _ = sys::shm_unlink(&ctl_name);
            Mapping::create(&ctl_name, Ctl::len(hsize))
        } else {
            raw::ibarrier(host_comm)?.wait(setup, raw::setup_pace())?;
            Mapping::open(&ctl_name)
        }
        .map_err(|e| Error::io(format!("mapping the host's control block of job {job}"), e))?;
        let ctl = if hidx == 0 {
            // SAFETY: a fresh zeroed, page-aligned mapping of Ctl::len(hsize) bytes, kept in
            // the backing below.
            let c = unsafe { Ctl::init(map.ptr(), hsize, leader_pid) };
            if shared {
                raw::ibarrier(host_comm)?.wait(setup, raw::setup_pace())?;
            }
            c
        } else {
            // SAFETY: the leader's mapping of its control block, page-aligned, map.len() long.
            unsafe { Ctl::attach(map.ptr(), map.len()) }
                .ok_or_else(|| Error::Setup("mpi engine: not a control block".into()))?
        };
        let mut host = MemEngine::new(
            HostBacking {
                job,
                ctl,
                _map: Arc::new(map),
                shared,
            },
            hidx,
        );
        host.strict_calls = hosts == 1;
        // MPI launchers pin each rank to a core of its own, so this process's affinity mask
        // (one core) says nothing about whether the host's ranks each have one: count the
        // host's processors instead. Spinning a little before sleeping is what makes the
        // host-local barrier and allreduce fast.
        // When MPI was told to yield rather than spin (`--mca mpi_yield_when_idle 1`: more
        // ranks than cores, as with several hosts on one machine), sleep rather than spin too.
        let cpus = host_cpus();
        let yields = config::env_str(config::OMPI_YIELD_WHEN_IDLE)
            .is_some_and(|v| matches!(v.as_str(), "1" | "true" | "yes"));
        host.set_spin(if hsize <= cpus && !yields {
            config::SPIN
        } else {
            Duration::ZERO
        });
        // Everyone of the host has attached: the name can go (crash-proof from here on).
        if shared {
            raw::ibarrier(host_comm)?.wait(setup, raw::setup_pace())?;
            if hidx == 0 {
                let _ = sys::shm_unlink(&ctl_name);
            }
        }
        exit::prepare_exit()?;
        let engine = MpiEngine {
            rank,
            size,
            comm,
            host,
            host_ctl: ctl,
            members,
            local_index,
            hosts,
            leader_group,
            gather,
            segs: RwLock::new((0..MAX_SEGMENTS).map(|_| Slot::Empty).collect()),
            queues: (0..QUEUES).map(|_| Mutex::new(QState::default())).collect(),
            coll: Mutex::new(Coll::new()),
            pending: Mutex::new(None),
            passive: Mutex::new(Passive::default()),
            deferred: Mutex::new(HashSet::new()),
            any_deferred: std::sync::atomic::AtomicBool::new(false),
            local_wait: hosts > 1
                && raw::is_open_mpi()
                && config::env_str(env::MPI_LOCAL_WAIT).as_deref() != Some("0"),
            am: if messages && hosts > 1 {
                Some(am::Am::new(comm, bell_off)?)
            } else {
                None
            },
            allocate: hosts == size
                && hosts > 1
                && allocate.unwrap_or_else(segments::allocate_is_safe),
            ready: (0..MAX_SEGMENTS)
                .map(|_| std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            retired: Mutex::new(Vec::new()),
            failed: std::sync::atomic::AtomicBool::new(false),
            spin: if hsize <= cpus {
                config::MPI_SPIN
            } else {
                config::MPI_SPIN_CROWDED
            },
            yields,
        };
        exit::world_made();
        Ok(engine)
    }

    /// The pace of a wait that polls MPI: spin while the host's ranks have cores of their own
    /// (briefly otherwise), or yield when Open MPI was told to, then nap.
    ///
    /// In the messages mode other hosts' operations on this rank's memory wait for its polls,
    /// so its naps stay at the first one's length (a poll every [`config::FIRST_NAP`]) instead
    /// of doubling to a millisecond.
    fn pace(&self) -> Pace {
        let naps = self.naps();
        if self.yields {
            Pace::new(Duration::ZERO, config::MPI_YIELD_FOR, naps)
        } else {
            Pace::new(self.spin, Duration::ZERO, naps)
        }
    }

    fn naps(&self) -> Naps {
        if self.am.is_some() {
            Naps::fixed(config::FIRST_NAP)
        } else {
            Naps::POLLED
        }
    }

    /// Lets MPI progress between the tests of a wait: applies what other hosts sent in the
    /// messages mode, else one probe (osc pt2pt applies others' operations inside it).
    fn poll_mpi(&self) {
        if self.am.is_some() {
            let _ = self.am_poll();
        } else {
            raw::progress(self.comm);
            let _ = self.passive_take();
        }
    }

    /// Runs the collective `call` between hosts, refusing it while another one is pending.
    fn guarded(&self, call: Collective, f: impl FnOnce() -> Result<()>) -> Result<()> {
        if let Some(p) = *self.pending.lock().unwrap_or_else(|e| e.into_inner()) {
            if p != call {
                return Err(Error::mismatch(call, p, self.rank));
            }
        }
        // Puts a local wait left in flight land before any collective between hosts.
        self.flush_deferred(None)?;
        let r = f();
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) =
            matches!(r, Err(Error::Timeout | Error::PeerFailed(_))).then_some(call);
        r
    }

    /// A host-local error speaks of host-local ranks: name world ranks instead.
    fn lift(&self, e: Error) -> Error {
        let w = |r: Rank| self.members.get(r).copied().unwrap_or(r);
        match e {
            Error::OutOfBounds {
                rank,
                seg,
                offset,
                len,
                size,
            } => Error::OutOfBounds {
                rank: w(rank),
                seg,
                offset,
                len,
                size,
            },
            Error::CollectiveMismatch(m) => Error::mismatch(m.mine, m.theirs, w(m.rank)),
            Error::NoSuchRank { rank, .. } => Error::NoSuchRank {
                rank: w(rank),
                size: self.size,
            },
            Error::NoSuchSegment { seg, rank } => Error::NoSuchSegment { seg, rank: w(rank) },
            Error::PeerFailed(r) => Error::PeerFailed(w(r)),
            e => e,
        }
    }

    #[inline]
    fn local(&self, r: Rank) -> Option<usize> {
        self.local_index.get(r).copied().flatten()
    }

    fn seg(&self, seg: u32, rank: Rank) -> Result<Arc<MpiSeg>> {
        let s = self.segs.read().unwrap_or_else(|e| e.into_inner());
        match s.get(seg as usize) {
            Some(Slot::Ready(m)) => Ok(m.clone()),
            _ => Err(Error::NoSuchSegment { seg, rank }),
        }
    }

    /// Checks a transfer to another host; returns the local address, the window and the
    /// target displacement.
    fn remote(&self, t: &Transfer) -> Result<(*mut u8, Arc<MpiSeg>, usize)> {
        self.with_remote(t, |src, r, disp| Ok((src, r.clone(), disp)))
    }

    /// [`Self::remote`] without reference counting: runs `f` under the segment table's read
    /// lock (the fast path of small writes).
    #[inline]
    fn with_remote<R>(
        &self,
        t: &Transfer,
        f: impl FnOnce(*mut u8, &Arc<MpiSeg>, usize) -> Result<R>,
    ) -> Result<R> {
        let segs = self.segs.read().unwrap_or_else(|e| e.into_inner());
        let (Some(Slot::Ready(l)), Some(Slot::Ready(r))) = (
            segs.get(t.local.seg.0 as usize),
            segs.get(t.remote.seg.0 as usize),
        ) else {
            let (seg, rank) = match segs.get(t.local.seg.0 as usize) {
                Some(Slot::Ready(_)) => (t.remote.seg.0, t.remote.rank),
                _ => (t.local.seg.0, self.rank),
            };
            return Err(Error::NoSuchSegment { seg, rank });
        };
        let lp = check(l.size, self.rank, t.local.seg.0, t.local.offset, t.len)?;
        check(
            r.sizes[t.remote.rank],
            t.remote.rank,
            t.remote.seg.0,
            t.remote.offset,
            t.len,
        )?;
        // SAFETY: local_off + len <= size of this rank's segment (checked above).
        let src = unsafe { l.data.add(lp) };
        f(src, r, r.disp(t.remote.rank, SEG_HEADER + t.remote.offset))
    }

    /// Runs a host-local wait `f` (resumable after `Err(Timeout)`) until `deadline`. With other
    /// hosts in the job it runs in short slices and lets MPI progress between them: where MPI
    /// carries one-sided operations as messages (osc pt2pt over TCP), an operation of another
    /// host on this rank's memory completes only while this rank calls into MPI, and the rank
    /// that issued it may be the one this wait is waiting for.
    fn host_wait<T>(
        &self,
        deadline: Deadline,
        mut f: impl FnMut(Timeout) -> Result<T>,
    ) -> Result<T> {
        let as_timeout = |d: Option<Duration>| d.map_or(Timeout::Test, Timeout::After);
        if self.hosts == 1 {
            let t = match deadline {
                Deadline::Never => Timeout::Block,
                d => as_timeout(d.slice(Duration::MAX)),
            };
            return f(t).map_err(|e| self.lift(e));
        }
        // The host-local wait spins and sleeps by itself: hand it ever longer slices.
        let mut pace = Pace::new(Duration::ZERO, Duration::ZERO, self.naps());
        loop {
            match f(as_timeout(pace.nap(deadline))) {
                Err(Error::Timeout) => {}
                r => return r.map_err(|e| self.lift(e)),
            }
            self.poll_mpi();
            if deadline.expired() {
                return Err(Error::Timeout);
            }
        }
    }

    /// A host-local rank that failed, in world numbering.
    fn host_gone(&self) -> Option<Rank> {
        let me = self.host.local_rank();
        (0..self.members.len())
            .find(|&i| i != me && self.host.health(i) == Health::Failed)
            .map(|i| self.members[i])
    }
}

/// `offset + len` within `size`: returns `offset`.
pub(super) fn check(size: usize, rank: Rank, seg: u32, offset: usize, len: usize) -> Result<usize> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(offset),
        _ => Err(Error::OutOfBounds {
            rank,
            seg,
            offset,
            len,
            size,
        }),
    }
}

/// Processors online on this host (not this process's affinity mask, which an MPI launcher
/// narrows to the rank's own core).
fn host_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let mask = std::thread::available_parallelism().map_or(1, |n| n.get());
    usize::try_from(n).unwrap_or(0).max(mask)
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

impl Engine for MpiEngine {
    fn name(&self) -> &'static str {
        "mpi"
    }

    fn needs_progress(&self) -> bool {
        self.hosts > 1
    }

    fn shares_memory_with(&self, rank: Rank) -> bool {
        // With other hosts and MPI windows, even this host's ranks' atomics go through MPI
        // (`own_atomics`), which applies them only while this rank calls in.
        rank == self.rank || self.local(rank).is_some() && (self.hosts == 1 || self.am.is_some())
    }

    fn progress(&self) -> Result<bool> {
        if self.hosts > 1 {
            self.poll_mpi();
        }
        Ok(false)
    }

    fn any_thread(&self) -> bool {
        raw::any_thread()
    }

    fn progress_stands_by(&self) -> bool {
        self.am.as_ref().is_some_and(|a| a.bell.is_some())
    }

    fn progress_stand_by(&self, max: Duration) -> Result<bool> {
        if self.progress_stands_by() {
            self.am_wait(max, true)
        } else {
            self.progress()
        }
    }

    /// With a doorbell, a pass that sleeps on it up to `max`. It wakes only for other
    /// hosts' operations: a caller that also waits for this host's ranks (whose writes land
    /// in shared memory and ring nothing) keeps `max` short.
    fn progress_wait(&self, max: Duration) -> Result<bool> {
        if self.progress_stands_by() {
            self.am_wait(max, false)
        } else {
            self.progress()
        }
    }

    fn progress_claim(&self) {
        if let Some(am) = &self.am {
            am.claim();
        }
    }

    fn progress_release(&self) {
        if let Some(am) = &self.am {
            am.aside.release();
        }
    }
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn local_rank(&self) -> usize {
        self.host.local_rank()
    }
    fn local_size(&self) -> usize {
        self.members.len()
    }

    fn segment_create(&self, seg: u32, size: usize, timeout: Timeout) -> Result<()> {
        if seg >= MAX_SEGMENTS {
            return Err(Error::SegmentIdTooLarge {
                seg,
                max: MAX_SEGMENTS,
            });
        }
        if self.hosts == 1 {
            return self
                .host
                .segment_create(seg, size, timeout)
                .map_err(|e| self.lift(e));
        }
        self.guarded(Collective::SegmentCreate { seg }, || {
            self.segment_create_hosts(seg, size, timeout)
        })
    }

    fn segment_delete(&self, seg: u32, timeout: Timeout) -> Result<()> {
        if self.hosts == 1 {
            return self
                .host
                .segment_delete(seg, timeout)
                .map_err(|e| self.lift(e));
        }
        self.guarded(Collective::SegmentDelete { seg }, || {
            self.segment_delete_hosts(seg, timeout)
        })
    }

    fn segment_local(&self, seg: u32) -> Result<(*mut u8, usize, KeepAlive)> {
        self.host.segment_local(seg).map_err(|e| self.lift(e))
    }

    fn segment_size(&self, seg: u32, rank: Rank) -> Result<usize> {
        match self.local(rank) {
            Some(i) => self.host.segment_size(seg, i).map_err(|e| self.lift(e)),
            None => Ok(self.seg(seg, rank)?.sizes[rank]),
        }
    }

    #[inline]
    fn write(&self, queue: usize, t: &Transfer) -> Result<()> {
        if let Some(i) = self.local(t.remote.rank) {
            // A fresh Ok(()) (see Queue::post): no copy of the whole Result on success.
            return match self.host.write(queue, &t.with_rank(i)) {
                Ok(()) => Ok(()),
                Err(e) => Err(self.lift(e)),
            };
        }
        if self.am.is_some() {
            let p = self.with_remote(t, |src, _, _| {
                self.am_write(src, t.len, t.remote.rank, t.remote.seg.0, t.remote.offset)
            })?;
            self.post_am(queue, t.remote.seg.0, t.remote.rank, p);
            return Ok(());
        }
        let req = self.with_remote(t, |src, s, disp| {
            // SAFETY: src..src+len lies in this rank's segment (checked), which stays mapped
            // until the segment is deleted, which the program does only after waiting for
            // its queues (GASPI's rule); disp + len lies in the target's window (checked against
            // its registered size). The queue's wait completes the put before the program may
            // reuse the source.
            unsafe {
                if t.len < RPUT_MIN {
                    s.win.put(src, t.len, t.remote.rank, disp).map(|()| None)
                } else {
                    s.win.rput(src, t.len, t.remote.rank, disp).map(Some)
                }
            }
        })?;
        self.post(
            queue,
            t.remote.seg.0,
            t.remote.rank,
            req,
            None,
            t.len >= RPUT_MIN,
        );
        Ok(())
    }

    #[inline]
    fn read(&self, queue: usize, t: &Transfer) -> Result<()> {
        if let Some(i) = self.local(t.remote.rank) {
            return match self.host.read(queue, &t.with_rank(i)) {
                Ok(()) => Ok(()),
                Err(e) => Err(self.lift(e)),
            };
        }
        if self.am.is_some() {
            // Behind this rank's writes to that target in its stream: no flush.
            let p = self.with_remote(t, |dst, _, _| {
                self.am_read(dst, t.len, t.remote.rank, t.remote.seg.0, t.remote.offset)
            })?;
            self.post_am(queue, t.remote.seg.0, t.remote.rank, p);
            return Ok(());
        }
        self.flush_deferred(Some(t.remote.rank))?;
        let (dst, s, disp) = self.remote(t)?;
        // SAFETY: as in write; the local range is this rank's to overwrite (GASPI read).
        let req = unsafe { s.win.rget(dst, t.len, t.remote.rank, disp)? };
        self.post(queue, t.remote.seg.0, t.remote.rank, Some(req), None, false);
        Ok(())
    }

    fn notify(&self, queue: usize, rank: Rank, seg: u32, id: usize, value: u32) -> Result<()> {
        match self
            .local(rank)
            .filter(|_| self.notified_through_mpi(seg).is_none())
        {
            Some(i) => self
                .host
                .notify(queue, i, seg, id, value)
                .map_err(|e| self.lift(e)),
            None => self.notify_remote(queue, rank, seg, id, value),
        }
    }

    fn write_notify(&self, queue: usize, t: &Transfer, id: usize, value: u32) -> Result<()> {
        if let Some(i) = self.local(t.remote.rank) {
            if self.notified_through_mpi(t.remote.seg.0).is_some() {
                // This rank itself, on memory MPI allocated: the data by copy, the
                // notification as every other rank's.
                self.write(queue, t)?;
                return self.notify_remote(queue, t.remote.rank, t.remote.seg.0, id, value);
            }
            return self
                .host
                .write_notify(queue, &t.with_rank(i), id, value)
                .map_err(|e| self.lift(e));
        }
        self.write(queue, t)?;
        if self.am.is_some() {
            return self.notify_remote(queue, t.remote.rank, t.remote.seg.0, id, value);
        }
        // The data must be complete at the target before the notification can land.
        self.seg(t.remote.seg.0, t.remote.rank)?
            .win
            .flush(t.remote.rank)?;
        self.notify_remote(queue, t.remote.rank, t.remote.seg.0, id, value)
    }

    fn wait(&self, queue: usize, timeout: Timeout) -> Result<()> {
        self.wait_queue(queue, timeout, false)
    }

    fn wait_local(&self, queue: usize, timeout: Timeout) -> Result<()> {
        self.wait_queue(queue, timeout, self.local_wait)
    }

    fn notify_waitsome(
        &self,
        seg: u32,
        first: usize,
        count: usize,
        timeout: Timeout,
    ) -> Result<usize> {
        if self.hosts == 1 {
            return self
                .host
                .notify_waitsome(seg, first, count, timeout)
                .map_err(|e| self.lift(e));
        }
        self.notify_waitsome_hosts(seg, first, count, timeout)
    }

    fn notify_reset(&self, seg: u32, id: usize) -> Result<u32> {
        self.notify_reset_here(seg, id)
    }

    fn atomic_fetch_add(&self, rank: Rank, seg: u32, offset: usize, value: u64) -> Result<u64> {
        self.atomic_fetch_add_timeout(rank, seg, offset, value, Timeout::Block)
    }

    fn atomic_compare_swap(
        &self,
        rank: Rank,
        seg: u32,
        offset: usize,
        expected: u64,
        new: u64,
    ) -> Result<u64> {
        self.atomic_compare_swap_timeout(rank, seg, offset, expected, new, Timeout::Block)
    }

    /// The timeout bounds the wait for another host's answer in the messages mode (a call
    /// repeated after a timeout resumes its request); with windows, MPI's own calls wait.
    fn atomic_fetch_add_timeout(
        &self,
        rank: Rank,
        seg: u32,
        offset: usize,
        value: u64,
        timeout: Timeout,
    ) -> Result<u64> {
        // With other hosts in the job, atomics on another rank of this host go through MPI too:
        // MPI may apply another host's atomic at the target with its own read-modify-write
        // (emulated one-sided, e.g. over TCP), atomic only with respect to MPI's other atomics,
        // so a processor atomic from a third process on the same word could be lost (seen: a
        // counter one short across 3 hosts x 2 ranks). A rank's atomics on its own words stay
        // processor atomics: the emulation applies remote atomics inside this rank's own MPI
        // calls, on this thread, so they cannot interleave (and Open MPI's rdma component
        // crashed on atomics to self over `MPI_Win_create` memory).
        // In the messages mode every atomic is a processor atomic at its target, so the
        // host's own ranks use theirs directly. On memory MPI allocated, MPI may apply other
        // ranks' atomics from their side (shared memory within a node), so this rank's own go
        // through MPI too (see `own_atomics`).
        if let Some(i) = self
            .local(rank)
            .filter(|_| self.hosts == 1 || self.own_atomics(rank))
        {
            return self
                .host
                .atomic_fetch_add(i, seg, offset, value)
                .map_err(|e| self.lift(e));
        }
        if self.am.is_some() {
            self.atomic_seg(seg, rank, offset)?;
            return self.am_fetch_add(rank, seg, offset, value, timeout.deadline());
        }
        self.flush_deferred(None)?;
        let s = self.atomic_seg(seg, rank, offset)?;
        s.win
            .fetch_add(rank, s.disp(rank, SEG_HEADER + offset), value)
    }

    fn atomic_compare_swap_timeout(
        &self,
        rank: Rank,
        seg: u32,
        offset: usize,
        expected: u64,
        new: u64,
        timeout: Timeout,
    ) -> Result<u64> {
        // Through MPI whenever there are other hosts, except on this rank's own words (see
        // `atomic_fetch_add`).
        if let Some(i) = self
            .local(rank)
            .filter(|_| self.hosts == 1 || self.own_atomics(rank))
        {
            return self
                .host
                .atomic_compare_swap(i, seg, offset, expected, new)
                .map_err(|e| self.lift(e));
        }
        if self.am.is_some() {
            self.atomic_seg(seg, rank, offset)?;
            return self.am_compare_swap(rank, seg, offset, expected, new, timeout.deadline());
        }
        self.flush_deferred(None)?;
        let s = self.atomic_seg(seg, rank, offset)?;
        s.win
            .compare_swap(rank, s.disp(rank, SEG_HEADER + offset), expected, new)
    }

    /// In the messages mode, a store message behind the queue's writes to another host
    /// (complete when sent); otherwise the queue's wait and a compare-and-swap loop.
    fn atomic_store(
        &self,
        queue: usize,
        rank: Rank,
        seg: u32,
        offset: usize,
        value: u64,
    ) -> Result<()> {
        if self.am.is_some() && rank < self.size && self.local(rank).is_none() {
            self.atomic_seg(seg, rank, offset)?;
            let p = self.am_store(rank, seg, offset, value)?;
            self.post_am(queue, seg, rank, p);
            return Ok(());
        }
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

    fn barrier(&self, timeout: Timeout) -> Result<()> {
        if self.hosts == 1 {
            return self.host.barrier(timeout).map_err(|e| self.lift(e));
        }
        self.guarded(Collective::Barrier, || {
            let mut c = self.coll.lock().unwrap_or_else(|e| e.into_inner());
            self.barrier_locked(&mut c, Collective::BARRIER, timeout)
        })
    }

    fn allreduce(
        &self,
        input: &[u8],
        output: &mut [u8],
        ty: DataType,
        op: Op,
        timeout: Timeout,
    ) -> Result<()> {
        let len = input.len() / ty.size();
        let word = Collective::allreduce_word(len, ty, op);
        if self.hosts == 1 {
            return self.allreduce_hosts(word, input, output, ty, op, timeout);
        }
        let call = Collective::Allreduce { len, ty, op };
        self.guarded(call, || {
            self.allreduce_hosts(word, input, output, ty, op, timeout)
        })
    }

    fn passive_send(&self, rank: Rank, data: &[u8], timeout: Timeout) -> Result<()> {
        self.passive_send_to(rank, data, timeout)
    }

    fn passive_receive(&self, buf: &mut [u8], timeout: Timeout) -> Result<(Rank, usize)> {
        self.passive_receive_any(buf, timeout)
    }

    fn passive_max(&self) -> usize {
        PASSIVE_MAX
    }

    fn health(&self, rank: Rank) -> Health {
        match self.local(rank) {
            Some(i) => self.host.health(i),
            // A process of another host that dies ends the MPI job (the launcher's rule), so
            // while this rank runs, the others are up.
            None => Health::Healthy,
        }
    }

    fn leave(&self, failed: bool) {
        if failed {
            // Peers on other hosts learn of it only from the launcher: the exit aborts the
            // job rather than waiting for them in MPI's finalisation.
            self.failed.store(true, Ordering::Relaxed);
            exit::abort_at_exit();
        }
        self.host.leave(failed);
    }
}

impl Drop for MpiEngine {
    fn drop(&mut self) {
        exit::world_dropped();
        if std::thread::panicking() || *self.failed.get_mut() {
            // Freeing windows is collective: a failing rank must not wait for the others.
            // Nor can it finalise MPI at its exit (a fence over every process, while peers
            // may wait for this rank without a deadline): its exit aborts the job.
            exit::abort_at_exit();
            return;
        }
        let s = std::mem::take(&mut *self.segs.get_mut().unwrap_or_else(|e| e.into_inner()));
        let windows = s.iter().any(|slot| matches!(slot, Slot::Ready(_)))
            || !self
                .retired
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty();
        if windows && self.am.is_some() {
            // In the messages mode a rank answers the others' fences only while it polls, and
            // `MPI_Win_free` (collective) does not poll: a rank that went on to free its
            // windows while another still waited for its answer to a fence (a segment's
            // deletion, a full wait) hung both. A barrier that polls first: once every rank
            // is in it, no fence is outstanding. Its error (a collective left pending after a
            // timeout) leaves the windows to be freed as before.
            let _ = Engine::barrier(self, Timeout::Block);
        }
        for slot in s {
            if let Slot::Ready(m) = slot {
                if let Ok(m) = Arc::try_unwrap(m) {
                    let _ = m.win.free();
                }
            }
        }
        // Deleted in the same order on every rank (deletion is collective).
        for m in std::mem::take(&mut *self.retired.get_mut().unwrap_or_else(|e| e.into_inner())) {
            if let Ok(m) = Arc::try_unwrap(m) {
                let _ = m.win.free();
            }
        }
    }
}

//! The `shm` engine: ranks are processes of one host, segments are POSIX shared-memory objects.
//!
//! Object names are `/tiers-<job>-ctl` (the control block the launcher creates) and
//! `/tiers-<job>-s<seg>-r<rank>` (segments), mode 0600; the job id starts with the launcher's
//! pid, which lets [`sweep_stale`] remove the objects of jobs whose launcher is gone.

use super::ctl::Ctl;
use super::mem::{wake_job, Backing, MemEngine};
use crate::error::{Error, Rank, Result};
use crate::sys::{self, Mapping};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const DIR: &str = "/dev/shm";

/// Name of the control block of `job`.
pub fn ctl_name(job: &str) -> String {
    format!("/tiers-{job}-ctl")
}

/// Name of segment `seg` of `rank` in `job`.
pub fn seg_name(job: &str, seg: u32, rank: Rank) -> String {
    format!("/tiers-{job}-s{seg}-r{rank}")
}

/// A fresh job id: this process's pid and a per-process counter mixed with the clock.
pub fn new_job_id() -> String {
    use std::sync::atomic::AtomicU32;
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let c = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{}x{:x}{c}", sys::getpid(), t & 0xfffff)
}

pub(crate) struct ShmBacking {
    job: String,
    _map: Arc<Mapping>,
    ctl: Ctl,
}

impl Backing for ShmBacking {
    fn name(&self) -> &'static str {
        "shm"
    }
    fn ctl(&self) -> Ctl {
        self.ctl
    }
    fn create_segment(&self, seg: u32, rank: Rank, len: usize) -> io::Result<Arc<Mapping>> {
        let name = seg_name(&self.job, seg, rank);
        match Mapping::create(&name, len) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // Left over by an earlier incarnation of this rank that crashed.
                let _ = sys::shm_unlink(&name);
                Mapping::create(&name, len).map(Arc::new)
            }
            r => r.map(Arc::new),
        }
    }
    fn open_segment(&self, seg: u32, rank: Rank) -> io::Result<Arc<Mapping>> {
        Mapping::open(&seg_name(&self.job, seg, rank)).map(Arc::new)
    }
    fn remove_segment(&self, seg: u32, rank: Rank) {
        let _ = sys::shm_unlink(&seg_name(&self.job, seg, rank));
    }
    fn processes(&self) -> bool {
        true
    }
}

/// Joins `job` as `rank` (the control block must exist).
pub(crate) fn attach(job: &str, rank: Rank) -> Result<MemEngine<ShmBacking>> {
    let map = Mapping::open(&ctl_name(job))
        .map_err(|e| Error::io(format!("opening the control block of job {job}"), e))?;
    // SAFETY: the mapping is page-aligned and `map.len()` long; it is kept in the backing.
    let ctl = unsafe { Ctl::attach(map.ptr(), map.len()) }
        .ok_or_else(|| Error::Setup(format!("job {job}: not a control block")))?;
    if rank >= ctl.n() {
        return Err(Error::NoSuchRank {
            rank,
            size: ctl.n(),
        });
    }
    // One process per rank: a second process joining as a rank that a live process holds
    // (a copy started by hand, or a script that forks its program) would otherwise share its
    // mailbox and collectives and hang the job. Refuse it, and mark the rank failed so that
    // every peer, the first holder included, ends with an error instead of waiting.
    let me = sys::getpid();
    let slot = &ctl.rank(rank).pid;
    let mut held = slot.load(Ordering::Acquire);
    loop {
        if held != 0 && held != me && sys::pid_alive(held) {
            ctl.rank(rank)
                .state
                .v
                .store(super::ctl::ST_FAILED, Ordering::Release);
            return Err(Error::Setup(format!(
                "job {job}: rank {rank} is already taken by process {held}; two processes cannot join as the same rank"
            )));
        }
        match slot.compare_exchange(held, me, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(now) => held = now,
        }
    }
    // A second process that came before this one and was refused has marked the rank failed
    // (or, in a replicated job, the others went on without this replica): this one fails too.
    if ctl.rank(rank).state.v.load(Ordering::Acquire) == super::ctl::ST_FAILED {
        return Err(Error::Setup(format!(
            "job {job}: rank {rank} was marked failed before it joined: another process tried to join as this rank (two processes cannot join as the same rank), or, as a replica, it came too late and its rank went on without it"
        )));
    }
    let mut e = MemEngine::new(
        ShmBacking {
            job: job.to_string(),
            _map: Arc::new(map),
            ctl,
        },
        rank,
    );
    e.set_replicas(
        super::replicas::from_env(),
        super::replicas::left_behind_after(),
    );
    Ok(e)
}

/// The launcher's handle on a job's control block: creates it, marks ranks, removes every
/// object of the job on drop.
pub struct JobControl {
    job: String,
    _map: Mapping,
    ctl: Ctl,
}

impl JobControl {
    /// Creates the control block of an `n`-rank job.
    pub fn create(job: &str, n: usize) -> io::Result<JobControl> {
        let map = Mapping::create(&ctl_name(job), Ctl::len(n))?;
        // SAFETY: a fresh zeroed shared mapping of Ctl::len(n) bytes, kept in self.
        let ctl = unsafe { Ctl::init(map.ptr(), n, sys::getpid()) };
        Ok(JobControl {
            job: job.to_string(),
            _map: map,
            ctl,
        })
    }

    /// The job id.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// Marks `rank` failed (`true`) or exited, and wakes every sleeper so it re-checks.
    pub fn mark(&self, rank: Rank, failed: bool) {
        let code = if failed {
            super::ctl::ST_FAILED
        } else {
            super::ctl::ST_EXITED
        };
        self.ctl.rank(rank).state.v.store(code, Ordering::Release);
        wake_job(&self.ctl);
    }

    /// The health of `rank`.
    pub fn health(&self, rank: Rank) -> crate::Health {
        crate::Health::from_code(self.ctl.rank(rank).state.v.load(Ordering::Acquire))
    }
}

impl Drop for JobControl {
    fn drop(&mut self) {
        remove_job(&self.job);
    }
}

/// Removes every shared-memory object of `job`.
pub fn remove_job(job: &str) {
    let prefix = format!("tiers-{job}-");
    for name in list().into_iter().filter(|n| n.starts_with(&prefix)) {
        let _ = sys::shm_unlink(&format!("/{name}"));
    }
}

/// Names (without the leading `/`) of all tiers objects on this host.
pub fn list() -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(DIR) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("tiers-"))
        .collect()
}

/// The launcher pid encoded in an object name `tiers-<pid>x...-...`.
fn owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("tiers-")?;
    let pid = rest.split('x').next()?;
    pid.parse().ok()
}

/// Removes the objects of every job whose launcher process no longer exists (left behind by a
/// `kill -9` of the launcher); returns how many it removed.
///
/// The pid in an object's name is not trusted alone: the object records its launcher's start
/// time and PID namespace (`Header.launcher_start`, `pid_ns`; `SegHeader.owner_*`). An object of
/// another PID namespace is left alone (its pid means nothing here); one whose pid now names a
/// process with another start time is stale (the pid was reused). Objects of an older format or
/// still being initialised (no start time) are removed only when their pid is dead.
pub fn sweep_stale() -> usize {
    let ns = sys::pid_ns().unwrap_or(0);
    let mut n = 0;
    for name in list() {
        let Some(pid) = owner(&name) else { continue };
        let Some((start, their_ns)) = recorded_owner(&name) else {
            continue;
        };
        if their_ns != 0 && ns != 0 && their_ns != ns {
            continue;
        }
        let alive = sys::pid_alive(pid) && (start == 0 || sys::start_time(pid) == Some(start));
        if !alive && sys::shm_unlink(&format!("/{name}")).is_ok() {
            n += 1;
        }
    }
    n
}

/// The launcher start time and PID namespace an object records (zeros when it is too short or
/// not initialised); `None` when it cannot be opened (another user's, or already gone).
fn recorded_owner(name: &str) -> Option<(u64, u64)> {
    let m = Mapping::open(&format!("/{name}")).ok()?;
    if name.ends_with("-ctl") {
        if m.len() < std::mem::size_of::<super::ctl::Header>() {
            return Some((0, 0));
        }
        // SAFETY: the mapping holds a whole Header (checked), page-aligned; only atomics read.
        let h = unsafe { &*(m.ptr() as *const super::ctl::Header) };
        Some((
            h.launcher_start.load(Ordering::Relaxed),
            h.pid_ns.load(Ordering::Relaxed),
        ))
    } else {
        if m.len() < std::mem::size_of::<super::ctl::SegHeader>() {
            return Some((0, 0));
        }
        // SAFETY: as above, for a SegHeader.
        let h = unsafe { &*(m.ptr() as *const super::ctl::SegHeader) };
        Some((
            h.owner_start.load(Ordering::Relaxed),
            h.owner_ns.load(Ordering::Relaxed),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_of_another_pid_namespace_is_left_alone() {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let dead = c.id();
        c.wait().unwrap();
        // Dead here, but the job says it belongs to another PID namespace: its pid means
        // nothing in this one.
        let other = format!("{dead}x07e5");
        let jc = JobControl::create(&other, 1).unwrap();
        jc.ctl.header().pid_ns.store(1, Ordering::Relaxed);
        sweep_stale();
        assert!(list().iter().any(|o| o == &format!("tiers-{other}-ctl")));
        // The same job in this namespace is stale.
        jc.ctl
            .header()
            .pid_ns
            .store(sys::pid_ns().unwrap_or(0), Ordering::Relaxed);
        sweep_stale();
        assert!(!list().iter().any(|o| o == &format!("tiers-{other}-ctl")));
        drop(jc);
    }
}

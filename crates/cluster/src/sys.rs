//! The few operating-system calls of the cluster tier, each behind a small safe wrapper:
//! process-shared futexes, POSIX shared-memory objects and their mappings, process liveness.

use std::ffi::CString;
use std::io;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `word` holds `expected`, at most `timeout`. May return early.
///
/// Unlike the node tier's futex this one is *not* `FUTEX_PRIVATE`: the word may live in a
/// mapping shared with other processes, and the kernel must key the wait on the physical page.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT reads the aligned 32-bit word behind a valid reference; the timespec
    // outlives the call. Every error (EAGAIN, EINTR, ETIMEDOUT) means "return and re-check".
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes every waiter on `word`, in any process.
pub fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE uses the address only as a key; the reference keeps it mapped.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// A shared mapping of a POSIX shared-memory object (or, for in-process ranks, of anonymous
/// memory). Unmapped on drop; the object itself is removed with [`shm_unlink`]. A mapping
/// made with [`Mapping::borrowed`] stands for memory someone else owns and frees (an MPI
/// window's) and is left alone on drop.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
    owned: bool,
}

// SAFETY: the mapping is plain memory; all concurrent access goes through atomics or through
// raw-pointer copies whose ordering the callers establish with those atomics.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Zeroed anonymous shared memory of `len` bytes (in-process ranks).
    pub fn anonymous(len: usize) -> io::Result<Mapping> {
        Self::map(-1, len, libc::MAP_SHARED | libc::MAP_ANONYMOUS)
    }

    /// Creates the object `name` (exclusive, mode 0600) with `len` zero bytes and maps it.
    pub fn create(name: &str, len: usize) -> io::Result<Mapping> {
        let c = cname(name)?;
        // SAFETY: a valid NUL-terminated name; the returned descriptor is closed below.
        let fd = unsafe {
            libc::shm_open(
                c.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                0o600 as libc::mode_t,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a descriptor we own.
        let r = unsafe { libc::ftruncate(fd, len as libc::off_t) };
        let res = if r != 0 {
            Err(io::Error::last_os_error())
        } else {
            Self::map(fd, len, libc::MAP_SHARED)
        };
        // SAFETY: fd is ours; the mapping (if any) keeps the object alive.
        unsafe { libc::close(fd) };
        if res.is_err() {
            let _ = shm_unlink(name);
        }
        res
    }

    /// Opens the existing object `name` and maps all of it.
    pub fn open(name: &str) -> io::Result<Mapping> {
        let c = cname(name)?;
        // SAFETY: a valid NUL-terminated name; the descriptor is closed below.
        let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fstat writes into a zeroed stat of the right type.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is ours and st is a valid out-pointer.
        let res = if unsafe { libc::fstat(fd, &mut st) } != 0 {
            Err(io::Error::last_os_error())
        } else {
            Self::map(fd, st.st_size as usize, libc::MAP_SHARED)
        };
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
        res
    }

    fn map(fd: libc::c_int, len: usize, flags: libc::c_int) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a fresh mapping chosen by the kernel; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: p as *mut u8,
            len,
            owned: true,
        })
    }

    /// Stands for `len` bytes at `ptr` that another owner allocated and will free.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be valid, writable memory, aligned to 8 bytes at least, until
    /// the last user of this `Mapping` is gone (dropping it frees nothing).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub unsafe fn borrowed(ptr: *mut u8, len: usize) -> Mapping {
        Mapping {
            ptr,
            len,
            owned: false,
        }
    }

    /// The first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: ptr/len are exactly what mmap returned; nothing borrows the mapping any more
        // (every user holds an Arc to the owner of this Mapping).
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

fn cname(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))
}

/// Removes the shared-memory object `name` (mappings stay valid until unmapped).
pub fn shm_unlink(name: &str) -> io::Result<()> {
    let c = cname(name)?;
    // SAFETY: a valid NUL-terminated name.
    if unsafe { libc::shm_unlink(c.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the shared-memory object `name` exists.
pub fn shm_exists(name: &str) -> bool {
    let Ok(c) = cname(name) else { return false };
    // SAFETY: a valid NUL-terminated name; the descriptor, if any, is closed at once.
    let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDONLY, 0) };
    if fd >= 0 {
        // SAFETY: fd was just opened here.
        unsafe { libc::close(fd) };
    }
    fd >= 0
}

/// Whether process `pid` exists (a zombie counts as existing).
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission; nothing is delivered.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The start time of process `pid` (field 22 of `/proc/PID/stat`, clock ticks since boot), or
/// `None` if there is no such process here. A pid can be reused; a pid with the same start time
/// is the same process.
pub fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    stat_start(&s)
}

/// Field 22 of a `/proc/PID/stat` line. The command name (field 2) may hold spaces and
/// parentheses, so the fields are counted from the last `)`.
fn stat_start(s: &[u8]) -> Option<u64> {
    let close = s.iter().rposition(|&b| b == b')')?;
    // After ')': field 3 (state) is the first; field 22 is the twentieth.
    let f = s[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty())
        .nth(19)?;
    std::str::from_utf8(f).ok()?.trim().parse().ok()
}

/// The inode of this process's PID namespace (`/proc/self/ns/pid`): pids mean something only
/// inside one namespace, and `/dev/shm` may be shared by several.
pub fn pid_ns() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

/// This process's id.
pub fn getpid() -> u32 {
    std::process::id()
}

/// Prepares `cmd` so that the child leads a process group of its own, dies with the launcher
/// (PR_SET_PDEATHSIG) and, if `cpus` is not empty, runs pinned to those cpus.
pub fn child_setup(cmd: &mut std::process::Command, cpus: &[usize]) {
    use std::os::unix::process::CommandExt;
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: CPU_SET writes the bit of c into our local set (it ignores c >= CPU_SETSIZE).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    let pin = !cpus.is_empty();
    let parent = getpid() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe system
    // calls (setpgid, prctl, getppid, sched_setaffinity, _exit) on data copied before the fork.
    unsafe {
        cmd.pre_exec(move || {
            // A process group of its own, so that ending the rank ends what it started.
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                // The launcher died before prctl took effect.
                libc::_exit(137);
            }
            if pin {
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            }
            Ok(())
        });
    }
}

/// A small process that outlives the launcher: if the launcher dies without ending its job
/// (killed with `SIGKILL`, which it cannot catch), the ranks die with it (`PR_SET_PDEATHSIG`)
/// but what they started would not; the guardian then kills the ranks' process groups. It
/// waits on a pipe whose only writer is the launcher: end of file without a byte means the
/// launcher is gone. [`Guardian::release`] (or dropping it) lets it leave without signalling.
pub struct Guardian {
    pid: libc::pid_t,
    fd: libc::c_int,
}

impl Guardian {
    /// Starts the guardian of the process groups `groups` (the ranks' pids: each rank leads
    /// its group).
    ///
    /// Before it kills group `g` it checks that the number still names the group it was given:
    /// while a process group exists, Linux gives its number to no new process, so the group is
    /// the rank's unless a process `g` now exists with a start time other than the rank's
    /// (recorded here). Then the group is left alone.
    pub fn start(groups: &[u32]) -> io::Result<Guardian> {
        // Everything the guardian needs is prepared before the fork (no allocation after it).
        let groups: Vec<(libc::pid_t, u64, CString)> = groups
            .iter()
            .filter_map(|&g| libc::pid_t::try_from(g).ok())
            .filter(|&g| g > 0)
            .filter_map(|g| {
                let path = CString::new(format!("/proc/{g}/stat")).ok()?;
                Some((g, start_time(g as u32).unwrap_or(0), path))
            })
            .collect();
        // Where to stop closing descriptors should close_range be missing (kernels before 5.9).
        let max_fd = {
            let mut r = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit writes the struct it is given.
            let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0;
            if ok {
                r.rlim_cur.min(65_536) as libc::c_uint
            } else {
                1024
            }
        };
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: fds is a valid array of two ints for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fork has no preconditions. This process may have other threads, so the child
        // below makes only async-signal-safe calls (close, signal, read, kill, _exit) on data
        // prepared before the fork, and never returns.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            let e = io::Error::last_os_error();
            // SAFETY: closing the two descriptors pipe2 just gave us.
            unsafe {
                libc::close(fds[0]);
                libc::close(fds[1]);
            }
            return Err(e);
        }
        if pid == 0 {
            // SAFETY: async-signal-safe calls only (see above); `groups` is read, not freed.
            unsafe {
                libc::close(fds[1]);
                // Hold nothing of the launcher's but the pipe: an inherited end of a rank's
                // stdin or output pipe would keep the rank from ever seeing EOF or EPIPE.
                let keep = fds[0] as libc::c_uint;
                if keep > 3 {
                    libc::close_range(3, keep - 1, 0);
                }
                if libc::close_range(keep + 1, libc::c_uint::MAX, 0) != 0 {
                    for fd in (keep + 1)..(keep + 1 + max_fd) {
                        libc::close(fd as libc::c_int);
                    }
                }
                // Terminal signals are for the launcher, which ends the job itself.
                libc::signal(libc::SIGINT, libc::SIG_IGN);
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                let mut b = 0u8;
                let n = loop {
                    let n = libc::read(fds[0], (&mut b as *mut u8).cast(), 1);
                    if n < 0 && *libc::__errno_location() == libc::EINTR {
                        continue;
                    }
                    break n;
                };
                if n <= 0 {
                    for (g, start, path) in &groups {
                        if group_is_ours(path, *start) {
                            libc::kill(-*g, libc::SIGKILL);
                        }
                    }
                }
                libc::_exit(0);
            }
        }
        // SAFETY: the read end is the guardian's; this process keeps only the write end.
        unsafe { libc::close(fds[0]) };
        Ok(Guardian { pid, fd: fds[1] })
    }

    /// The job ended normally: the guardian leaves without signalling anyone.
    pub fn release(self) {
        drop(self);
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        // SAFETY: fd is our write end of the pipe and pid our child; both used once here.
        unsafe {
            libc::write(self.fd, b"x".as_ptr().cast(), 1);
            libc::close(self.fd);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// Whether process group `g` (whose leader's stat file is `path`, and whose leader started at
/// `start`, 0 if it had already gone) is still the group it was: true when no process `g`
/// exists (the group, if any, is still the old one: its number cannot be reused while it
/// exists) or when process `g` started at `start`. Async-signal-safe: open, read and close on a
/// stack buffer, no allocation (the guardian runs it in a forked child of a threaded process).
fn group_is_ours(path: &CString, start: u64) -> bool {
    let mut buf = [0u8; 1024];
    // SAFETY: a valid NUL-terminated path; the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return true;
    }
    let mut len = 0;
    while len < buf.len() {
        // SAFETY: reads into the unused tail of our stack buffer.
        let n = unsafe { libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len) };
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    if len == 0 {
        return true; // the process ended between open and read
    }
    start != 0 && stat_start(&buf[..len]) == Some(start)
}

static TERM: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn on_term(sig: libc::c_int) {
    TERM.store(sig, std::sync::atomic::Ordering::SeqCst);
}

/// Records SIGINT, SIGTERM and SIGHUP instead of dying, so the launcher can clean up.
pub fn catch_termination() {
    for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: the handler only stores into an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(
                s,
                on_term as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
}

/// The termination signal received, if any.
pub fn termination() -> Option<i32> {
    match TERM.load(std::sync::atomic::Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Sends `sig` to process `pid`.
pub fn signal(pid: u32, sig: i32) {
    if pid == 0 || pid > i32::MAX as u32 {
        return;
    }
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// Sends `sig` to the process group that `pid` leads (see [`child_setup`]), or to `pid` alone
/// when it does not lead one yet (it has just been forked).
pub fn signal_group(pid: u32, sig: i32) {
    if pid == 0 || pid > i32::MAX as u32 {
        return;
    }
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(-(pid as libc::pid_t), sig) } != 0 {
        signal(pid, sig);
    }
}

/// Sends `sig` to process group `pid` (the one a rank led), and not to the process of that
/// number as [`signal_group`] falls back to; whether any process got it (signal 0 only asks).
/// The caller makes sure the group is still the rank's.
pub fn signal_group_only(pid: u32, sig: i32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(-(pid as libc::pid_t), sig) == 0 }
}

/// A short name of signal `sig`.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_read_past_a_command_name_with_spaces_and_parentheses() {
        let line = b"42 (a b) c)) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 987654 0 0";
        assert_eq!(stat_start(line), Some(987654));
        assert_eq!(stat_start(b"garbage"), None);
        let me = getpid();
        assert!(start_time(me).is_some());
        assert_eq!(start_time(me), start_time(me));
    }

    #[test]
    fn a_group_whose_number_names_another_process_is_not_ours() {
        let me = getpid();
        let path = CString::new(format!("/proc/{me}/stat")).unwrap();
        let start = start_time(me).unwrap();
        assert!(group_is_ours(&path, start));
        // The same number, but a process that started at another time: a reused number.
        assert!(!group_is_ours(&path, start + 1));
        assert!(!group_is_ours(&path, 0));
        // No such process: the group, if it still exists, is the old one.
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let dead = c.id();
        c.wait().unwrap();
        let path = CString::new(format!("/proc/{dead}/stat")).unwrap();
        assert!(group_is_ours(&path, 12345));
    }
}

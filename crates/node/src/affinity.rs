//! Getting and setting the processors the calling thread may run on.

use std::io;

/// The processors the calling thread may run on.
#[cfg(target_os = "linux")]
pub fn get() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data for which all-zero is a valid (empty) set, and
    // sched_getaffinity writes at most size_of::<cpu_set_t>() bytes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// Restricts the calling thread to `cpus`. Fails (leaving the mask as it was) when the list is
/// empty, names a processor beyond the kernel's set size, or names none this process may use.
#[cfg(target_os = "linux")]
pub fn set(cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "empty cpu list",
        ));
    }
    // SAFETY: as in `get`; CPU_SET is only called with indices below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            if c >= libc::CPU_SETSIZE as usize {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("cpu {c} is out of range"),
                ));
            }
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Without Linux affinity calls: every processor, and setting is refused.
#[cfg(not(target_os = "linux"))]
pub fn get() -> io::Result<Vec<usize>> {
    Ok((0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect())
}

/// Without Linux affinity calls: refused.
#[cfg(not(target_os = "linux"))]
pub fn set(_cpus: &[usize]) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "thread affinity is not supported on this OS",
    ))
}

/// The processor the calling thread is running on right now, if the OS says.
pub fn current_cpu() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sched_getcpu takes no arguments and returns -1 on error.
        let c = unsafe { libc::sched_getcpu() };
        if c >= 0 {
            return Some(c as usize);
        }
    }
    None
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn pin_and_restore() {
        let before = get().unwrap();
        assert!(!before.is_empty());
        let target = *before.last().unwrap();
        std::thread::spawn(move || {
            set(&[target]).unwrap();
            assert_eq!(get().unwrap(), vec![target]);
            assert_eq!(current_cpu(), Some(target));
        })
        .join()
        .unwrap();
        assert_eq!(
            get().unwrap(),
            before,
            "another thread's pinning must not change ours"
        );
    }

    #[test]
    fn bad_sets_are_refused() {
        assert!(set(&[]).is_err());
        assert!(set(&[1 << 20]).is_err());
    }
}

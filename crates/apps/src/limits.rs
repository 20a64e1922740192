//! Sizes checked before allocating: computed with checked arithmetic and compared with the
//! machine's memory, so that an absurd parameter is an error naming it instead of an abort.

use crate::{Error, Result};

/// Bytes of physical memory on this machine (`None` if the system does not say).
pub fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && page > 0).then(|| pages as u64 * page as u64)
}

/// Checks that `count` elements of `elem_bytes` each (`what`, for the message) can be held:
/// the product does not overflow and fits in the machine's physical memory. Returns the bytes.
pub fn check_alloc(what: &str, count: usize, elem_bytes: usize) -> Result<usize> {
    let bytes = count.checked_mul(elem_bytes).ok_or_else(|| {
        Error::Invalid(format!(
            "{what}: {count} elements of {elem_bytes} bytes overflow the address space"
        ))
    })?;
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    if let Some(mem) = physical_memory() {
        if bytes as u64 > mem {
            return Err(Error::Invalid(format!(
                "{what} needs {:.1} GiB, more than this machine's {:.1} GiB of memory",
                gib(bytes as u64),
                gib(mem)
            )));
        }
    }
    for (limit, whose) in [
        (
            address_space_limit(),
            "this process's address-space limit (ulimit -v)",
        ),
        (
            cgroup_memory_limit(),
            "its control group's memory limit (memory.max)",
        ),
    ] {
        if let Some(l) = limit.filter(|&l| bytes as u64 > l) {
            return Err(Error::Invalid(format!(
                "{what} needs {:.1} GiB, more than the {:.1} GiB of {whose}",
                gib(bytes as u64),
                gib(l)
            )));
        }
    }
    Ok(bytes)
}

/// The soft `RLIMIT_AS` of this process, when it has one.
pub fn address_space_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// The memory limit of this process's control group (cgroup v2 `memory.max`), when it has one.
pub fn cgroup_memory_limit() -> Option<u64> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cg.lines().find_map(|l| l.strip_prefix("0::"))?;
    let max =
        std::fs::read_to_string(format!("/sys/fs/cgroup{}/memory.max", path.trim_end())).ok()?;
    max.trim().parse().ok()
}

/// `a * b`, or an error naming `what`.
pub fn mul(what: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| Error::Invalid(format!("{what}: {a} x {b} overflows")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_sizes_are_errors() {
        assert!(physical_memory().is_some_and(|m| m > 1 << 20));
        assert_eq!(check_alloc("x", 10, 8).unwrap(), 80);
        let e = check_alloc("points", usize::MAX / 2, 8)
            .unwrap_err()
            .to_string();
        assert!(e.contains("points") && e.contains("overflow"), "{e}");
        let e = check_alloc("points", 1 << 50, 8).unwrap_err().to_string();
        assert!(e.contains("more than this machine"), "{e}");
        assert!(mul("n", usize::MAX, 2).is_err());
    }
}

//! The C peers compiled by build.rs (pthread and OpenMP), when they were compiled.

#[cfg(tiers_peer_pthread)]
mod ffi {
    extern "C" {
        pub fn tiers_peer_pthread_barrier(threads: i32, iters: i64, cpus: *const i32) -> f64;
        pub fn tiers_peer_pthread_mutex(
            threads: i32,
            iters: i64,
            cpus: *const i32,
            count: *mut u64,
        ) -> f64;
    }
}

#[cfg(tiers_peer_openmp)]
mod omp {
    extern "C" {
        pub fn tiers_peer_omp_barrier(threads: i32, iters: i64, cpus: *const i32) -> f64;
        pub fn tiers_peer_omp_critical(
            threads: i32,
            iters: i64,
            cpus: *const i32,
            count: *mut u64,
        ) -> f64;
        pub fn tiers_peer_omp_team(threads: i32) -> i32;
    }
}

fn cpu_arg(cpus: &[usize], threads: usize) -> Vec<i32> {
    (0..threads)
        .map(|i| cpus.get(i).map_or(-1, |&c| c as i32))
        .collect()
}

/// Seconds for `iters` pthread barriers on `threads` threads, or `None` without the peer.
#[allow(unused_variables)]
pub fn pthread_barrier(threads: usize, iters: u64, cpus: &[usize]) -> Option<f64> {
    #[cfg(tiers_peer_pthread)]
    {
        let c = cpu_arg(cpus, threads);
        // SAFETY: the C function reads `threads` ints from `c`, which has that many.
        return Some(unsafe {
            ffi::tiers_peer_pthread_barrier(threads as i32, iters as i64, c.as_ptr())
        });
    }
    #[allow(unreachable_code)]
    None
}

/// Seconds for `threads` threads each taking a pthread mutex `iters` times to increment a
/// shared counter, and the final count; `None` without the peer.
#[allow(unused_variables)]
pub fn pthread_mutex(threads: usize, iters: u64, cpus: &[usize]) -> Option<(f64, u64)> {
    #[cfg(tiers_peer_pthread)]
    {
        let c = cpu_arg(cpus, threads);
        let mut count = 0u64;
        // SAFETY: as above; `count` is a valid out-pointer.
        let t = unsafe {
            ffi::tiers_peer_pthread_mutex(threads as i32, iters as i64, c.as_ptr(), &mut count)
        };
        return Some((t, count));
    }
    #[allow(unreachable_code)]
    None
}

/// Seconds for `iters` OpenMP barriers on a team of `threads`, or `None` without the peer.
#[allow(unused_variables)]
pub fn omp_barrier(threads: usize, iters: u64, cpus: &[usize]) -> Option<f64> {
    #[cfg(tiers_peer_openmp)]
    {
        let c = cpu_arg(cpus, threads);
        // SAFETY: the C function reads one int per team member from `c`; the team has at most
        // `threads` members.
        return Some(unsafe {
            omp::tiers_peer_omp_barrier(threads as i32, iters as i64, c.as_ptr())
        });
    }
    #[allow(unreachable_code)]
    None
}

/// As [`pthread_mutex`], with `#pragma omp critical`.
#[allow(unused_variables)]
pub fn omp_critical(threads: usize, iters: u64, cpus: &[usize]) -> Option<(f64, u64)> {
    #[cfg(tiers_peer_openmp)]
    {
        let c = cpu_arg(cpus, threads);
        let mut count = 0u64;
        // SAFETY: as above; `count` is a valid out-pointer.
        let t = unsafe {
            omp::tiers_peer_omp_critical(threads as i32, iters as i64, c.as_ptr(), &mut count)
        };
        return Some((t, count));
    }
    #[allow(unreachable_code)]
    None
}

/// The team size OpenMP gives for `threads`, or `None` without the peer.
#[allow(unused_variables)]
pub fn omp_team(threads: usize) -> Option<usize> {
    #[cfg(tiers_peer_openmp)]
    {
        // SAFETY: no pointers involved.
        return Some(unsafe { omp::tiers_peer_omp_team(threads as i32) } as usize);
    }
    #[allow(unreachable_code)]
    None
}

/// Why a peer row is missing, for the report's notes.
pub const NO_PTHREAD: &str = "pthread peer not built (no C compiler at build time)";
/// Why an OpenMP row is missing.
pub const NO_OPENMP: &str = "openmp peer not built (no C compiler with -fopenmp at build time)";

//! Sleeping on a 32-bit word: Linux futexes, the mechanism behind every "sleep until another
//! thread changes this word" in the node tier (relaxed barrier, parked workers, queue wake-up).
//!
//! Callers always re-check their condition in a loop: a futex wait may return spuriously. That
//! contract is what lets the loom build replace the wait with a yield.

use crate::sync::AtomicU32;
use std::time::Duration;

/// Sleeps while `word` holds `expected`, at most `timeout` (forever if `None`). May return early.
#[cfg(all(target_os = "linux", not(loom)))]
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts;
    let ts_ptr = match timeout {
        Some(d) => {
            ts = libc::timespec {
                tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            };
            &ts as *const libc::timespec
        }
        None => core::ptr::null(),
    };
    // SAFETY: FUTEX_WAIT reads the aligned 32-bit word behind a valid reference and compares it
    // with `expected`; the timespec outlives the call. Errors (EAGAIN, EINTR, ETIMEDOUT) are all
    // "return and let the caller re-check".
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            ts_ptr,
        );
    }
}

/// Wakes up to `n` threads sleeping on `word`.
#[cfg(all(target_os = "linux", not(loom)))]
pub fn wake(word: &AtomicU32, n: u32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key; the reference keeps it valid.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n.min(i32::MAX as u32) as i32,
        );
    }
}

/// Fallback without futexes: a short sleep stands in for the wait (callers re-check anyway).
#[cfg(all(not(target_os = "linux"), not(loom)))]
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    if word.load(crate::sync::Ordering::Acquire) == expected {
        std::thread::sleep(
            timeout
                .unwrap_or(Duration::from_micros(50))
                .min(Duration::from_micros(50)),
        );
    }
}

/// Fallback without futexes: nothing to do, sleepers poll.
#[cfg(all(not(target_os = "linux"), not(loom)))]
pub fn wake(_word: &AtomicU32, _n: u32) {}

/// Under loom a wait is a yield (a legal spurious wake-up) and a wake does nothing.
#[cfg(loom)]
pub fn wait(_word: &AtomicU32, _expected: u32, _timeout: Option<Duration>) {
    loom::thread::yield_now();
}

/// Under loom a wait is a yield (a legal spurious wake-up) and a wake does nothing.
#[cfg(loom)]
pub fn wake(_word: &AtomicU32, _n: u32) {}

/// Wakes every thread sleeping on `word`.
pub fn wake_all(word: &AtomicU32) {
    wake(word, u32::MAX);
}

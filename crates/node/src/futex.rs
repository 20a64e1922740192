//! Sleeping on a 32-bit word: Linux futexes, the mechanism behind every "sleep until another
//! thread changes this word" in the node tier (relaxed barrier, parked workers, queue wake-up).
//!
//! Callers always re-check their condition in a loop: a futex wait may return spuriously. Under
//! loom the futex is modelled (see `model`), so the models also catch lost wake-ups.

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

/// The futex as the loom models see it: a waiter whose word still holds `expected` really
/// blocks until a `wake` on the same word, so a lost wake-up shows up as a deadlock in the
/// model. The check-and-enqueue and the wake both run under one lock, as the kernel's hash
/// bucket lock orders them. A wait with a timeout is a yield (a legal spurious return).
#[cfg(loom)]
mod model {
    use crate::sync::{AtomicU32, Ordering};
    use loom::sync::Mutex;
    use loom::thread::Thread;
    use std::time::Duration;

    loom::lazy_static! {
        /// (address of the word, sleeping thread), in the order they went to sleep.
        static ref SLEEPERS: Mutex<Vec<(usize, Thread)>> = Mutex::new(Vec::new());
    }

    fn key(word: &AtomicU32) -> usize {
        word as *const AtomicU32 as usize
    }

    pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
        if timeout.is_some() {
            loom::thread::yield_now();
            return;
        }
        let me = loom::thread::current();
        {
            let mut sleepers = SLEEPERS.lock().unwrap();
            if word.load(Ordering::SeqCst) != expected {
                return;
            }
            sleepers.push((key(word), me.clone()));
        }
        loop {
            loom::thread::park();
            let sleepers = SLEEPERS.lock().unwrap();
            if !sleepers
                .iter()
                .any(|(k, t)| *k == key(word) && t.id() == me.id())
            {
                return;
            }
        }
    }

    pub fn wake(word: &AtomicU32, n: u32) {
        let mut sleepers = SLEEPERS.lock().unwrap();
        let mut woken = 0;
        sleepers.retain(|(k, t)| {
            if *k == key(word) && woken < n {
                woken += 1;
                t.unpark();
                false
            } else {
                true
            }
        });
    }
}

/// Under loom: blocks (in the model) while `word` holds `expected`, until a [`wake`].
#[cfg(loom)]
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    model::wait(word, expected, timeout)
}

/// Under loom: wakes up to `n` model threads blocked on `word`.
#[cfg(loom)]
pub fn wake(word: &AtomicU32, n: u32) {
    model::wake(word, n)
}

/// Wakes up to `n` threads sleeping on `word` and returns how many it woke (0 where the
/// platform or the loom model cannot tell, which callers must treat as "maybe none").
#[cfg(all(target_os = "linux", not(loom)))]
pub fn wake_count(word: &AtomicU32, n: u32) -> usize {
    // SAFETY: as in `wake`; FUTEX_WAKE returns the number of woken waiters or -1.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n.min(i32::MAX as u32) as i32,
        )
    };
    r.max(0) as usize
}

/// Wakes up to `n` threads sleeping on `word`; reports 0 (unknown).
#[cfg(any(not(target_os = "linux"), loom))]
pub fn wake_count(word: &AtomicU32, n: u32) -> usize {
    wake(word, n);
    0
}

/// Wakes every thread sleeping on `word`.
pub fn wake_all(word: &AtomicU32) {
    wake(word, u32::MAX);
}

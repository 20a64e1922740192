//! Test-and-test-and-set with exponential back-off: waiters read the lock word (which stays in
//! their cache while it is held) and only try the atomic swap when it looks free. Not fair: the
//! releasing thread often takes it again while the line is still in its cache, which is why it
//! is the fastest lock for a short, hot critical section.

use super::{Backoff, RawLock};
use crate::sync::{AtomicBool, Ordering};

/// A test-and-test-and-set spin lock.
#[derive(Debug)]
pub struct TtasLock {
    locked: AtomicBool,
}

impl TtasLock {
    /// An unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        TtasLock {
            locked: AtomicBool::new(false),
        }
    }

    /// An unlocked lock.
    #[cfg(loom)]
    pub fn new() -> Self {
        TtasLock {
            locked: AtomicBool::new(false),
        }
    }
}

impl Default for TtasLock {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the lock is held by whoever swapped `locked` from false to true (Acquire), until it
// stores false (Release).
unsafe impl RawLock for TtasLock {
    type Token = ();
    const NAME: &'static str = "ttas";

    #[inline]
    fn lock(&self) {
        if !self.locked.swap(true, Ordering::Acquire) {
            return;
        }
        let mut backoff = Backoff::new();
        loop {
            while self.locked.load(Ordering::Relaxed) {
                backoff.snooze();
            }
            if !self.locked.swap(true, Ordering::Acquire) {
                return;
            }
        }
    }

    #[inline]
    fn try_lock(&self) -> Option<()> {
        (!self.locked.load(Ordering::Relaxed) && !self.locked.swap(true, Ordering::Acquire))
            .then_some(())
    }

    #[inline]
    unsafe fn unlock(&self, _token: ()) {
        self.locked.store(false, Ordering::Release);
    }
}

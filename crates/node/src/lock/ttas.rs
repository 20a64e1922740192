//! Test-and-test-and-set with exponential back-off, parking when the wait gets long.
//!
//! Waiters read the lock word (which stays in their cache while it is held) and only try the
//! atomic swap when it looks free. Not fair: the releasing thread often takes the lock again
//! while the line is still in its cache, which is why this is the fastest lock for a short,
//! hot critical section. Every look a waiter takes pulls the line away from the holder, so the
//! looks get rarer (exponential back-off) and, past a limit, the waiter sleeps on a futex: the
//! holder then runs at uncontended speed and pays one wake-up per sleeping episode, not per
//! release.

use super::RawLock;
use crate::futex;
use crate::sync::{AtomicU32, Ordering};
use crate::wait::Backoff;

/// The waiting schedule, chosen by measuring a contended increment on two cores: two looks
/// after 1 and 2 pauses, then seven looks each after a yield, then sleep on the futex.
/// Polling while the lock is held, or spinning longer, keeps the line bouncing away from the
/// holder (parking_lot's four looks after 2-8 pauses measured 1.3-1.45x slower on an AVX-512
/// EPYC; a yield, which finds no other thread to run on a core of its own, keeps the waiter off
/// the line for longer than a pause); sleeping sooner makes the holder pay a wake-up every few
/// releases (no yields: 1.2-1.7x slower). The waiter does not poll while it pauses: every read
/// pulls the line from the holder.
const WAIT: Backoff = Backoff::new().spin_limit(1).yield_limit(7);

/// A test-and-test-and-set lock that spins, then sleeps.
#[derive(Debug)]
pub struct TtasLock {
    /// 0 free, 1 held.
    locked: AtomicU32,
    /// Threads asleep (or about to sleep) on `locked`.
    sleepers: AtomicU32,
    /// A wake-up is in flight: later releases need not send another.
    waking: AtomicU32,
}

impl TtasLock {
    /// An unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        TtasLock {
            locked: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            waking: AtomicU32::new(0),
        }
    }

    /// An unlocked lock.
    #[cfg(loom)]
    pub fn new() -> Self {
        TtasLock {
            locked: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            waking: AtomicU32::new(0),
        }
    }

    #[cold]
    fn lock_slow(&self) {
        let mut backoff = WAIT;
        while !backoff.is_completed() {
            backoff.snooze();
            if self.try_lock().is_some() {
                return;
            }
        }
        loop {
            // Announce, then look once more: a release either sees us in `sleepers` and wakes
            // us, or happened before our swap, which then finds the lock free (SeqCst order).
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            if self.locked.swap(1, Ordering::SeqCst) == 0 {
                self.sleepers.fetch_sub(1, Ordering::Relaxed);
                return;
            }
            futex::wait(&self.locked, 1, None);
            self.sleepers.fetch_sub(1, Ordering::Relaxed);
            self.waking.store(0, Ordering::Release);
        }
    }
}

impl Default for TtasLock {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the lock is held by whoever swapped `locked` from 0 to 1 (Acquire or SeqCst), until
// it swaps it back to 0 (SeqCst, which includes Release).
unsafe impl RawLock for TtasLock {
    type Token = ();
    const NAME: &'static str = "ttas";

    #[inline]
    fn lock(&self) {
        if self.locked.swap(1, Ordering::Acquire) != 0 {
            self.lock_slow();
        }
    }

    #[inline]
    fn try_lock(&self) -> Option<()> {
        (self.locked.load(Ordering::Relaxed) == 0 && self.locked.swap(1, Ordering::Acquire) == 0)
            .then_some(())
    }

    // SAFETY (for callers): `RawLock::unlock`'s contract: the token of this lock, held by
    // this thread and not yet released.
    #[inline]
    unsafe fn unlock(&self, _token: ()) {
        self.locked.swap(0, Ordering::SeqCst);
        // One wake-up in flight at a time: the woken thread clears `waking` when it runs. A wake
        // that found nobody asleep yet (a waiter between announcing and sleeping) clears it
        // here, so the next release tries again.
        if self.sleepers.load(Ordering::SeqCst) != 0
            && self.waking.swap(1, Ordering::AcqRel) == 0
            && futex::wake_count(&self.locked, 1) == 0
        {
            self.waking.store(0, Ordering::Release);
        }
    }
}

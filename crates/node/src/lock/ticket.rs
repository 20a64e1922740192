//! The ticket lock: take a number, wait until it is served. FIFO-fair; waiters back off in
//! proportion to how many are ahead of them, so the shared word is polled less under contention.

use super::RawLock;
use crate::sync::{spin_hint, yield_now, AtomicU32, Ordering};

/// A FIFO ticket lock.
#[derive(Debug)]
pub struct TicketLock {
    next: AtomicU32,
    serving: AtomicU32,
}

impl TicketLock {
    /// An unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        TicketLock {
            next: AtomicU32::new(0),
            serving: AtomicU32::new(0),
        }
    }

    /// An unlocked lock.
    #[cfg(loom)]
    pub fn new() -> Self {
        TicketLock {
            next: AtomicU32::new(0),
            serving: AtomicU32::new(0),
        }
    }
}

impl Default for TicketLock {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: a holder is the one thread whose ticket equals `serving`; `serving` advances only in
// `unlock`, with Release, and is read with Acquire before entering.
unsafe impl RawLock for TicketLock {
    type Token = ();
    const NAME: &'static str = "ticket";

    #[inline]
    fn lock(&self) {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        let mut rounds = 0u32;
        loop {
            let now = self.serving.load(Ordering::Acquire);
            if now == ticket {
                return;
            }
            let ahead = ticket.wrapping_sub(now);
            for _ in 0..ahead.min(64) * 2 {
                spin_hint();
            }
            rounds += 1;
            if rounds > 64 {
                // Our turn may be held up by a descheduled thread ahead of us.
                yield_now();
            }
        }
    }

    #[inline]
    fn try_lock(&self) -> Option<()> {
        // Acquire: the previous holder's critical section is released through `serving`
        // (the CAS on `next` only reads a Relaxed `fetch_add`, which publishes nothing).
        let now = self.serving.load(Ordering::Acquire);
        self.next
            .compare_exchange(
                now,
                now.wrapping_add(1),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .ok()
            .map(|_| ())
    }

    // SAFETY (for callers): `RawLock::unlock`'s contract: the token of this lock, held by
    // this thread and not yet released.
    #[inline]
    unsafe fn unlock(&self, _token: ()) {
        // Only the holder writes `serving`, so a load and a store suffice.
        let now = self.serving.load(Ordering::Relaxed);
        self.serving.store(now.wrapping_add(1), Ordering::Release);
    }
}

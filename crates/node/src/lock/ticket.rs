//! The ticket lock: take a number, wait until it is served. FIFO-fair; waiters back off in
//! proportion to how many are ahead of them, so the shared word is polled less under contention.

use super::RawLock;
use crate::sync::{AtomicU32, Ordering};
use crate::wait::Backoff;

/// Pause hints per waiter ahead between two looks at `serving`: the waiter's turn comes no
/// sooner than that many critical sections and hand-overs away, so it looks rarely while it is
/// far back (every look pulls the shared line across) and often when it is next.
const PAUSES_PER_WAITER_AHEAD: u32 = 2;
/// Waiters ahead past which the pause stops growing (it is then 128 hints, a few µs at most).
const MAX_AHEAD: u32 = 64;
/// Looks before a waiter also yields each round: a turn that takes this long is probably held
/// up by a descheduled thread ahead, which needs the core.
const LOOKS_BEFORE_YIELDING: u32 = 64;
/// The wait besides the proportional pause: [`LOOKS_BEFORE_YIELDING`] looks, then a yield each
/// round for as long as it takes. Never a nap: nobody would wake the waiter, and in a FIFO
/// lock a waiter that naps through its turn holds up everyone behind it. These are the values
/// the lock has had since it was written, not re-measured.
const WAIT: Backoff = Backoff::new()
    .without_pause()
    .spin_limit(0)
    .spin_steps(LOOKS_BEFORE_YIELDING)
    .yield_limit(0)
    .never_sleep();

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
        let mut backoff = WAIT;
        loop {
            let now = self.serving.load(Ordering::Acquire);
            if now == ticket {
                return;
            }
            let ahead = ticket.wrapping_sub(now);
            Backoff::pause(ahead.min(MAX_AHEAD) * PAUSES_PER_WAITER_AHEAD);
            backoff.snooze();
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

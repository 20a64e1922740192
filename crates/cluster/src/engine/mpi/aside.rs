//! Who drives the messages mode's progress: a thread that waits for data in calls of its own
//! (a GASPI wait, under [`Engine::progress_claim`](crate::engine::Engine::progress_claim)),
//! or the stand-by thread that sleeps on the doorbell while the program computes.
//!
//! Both used to poll MPI at once: after a ring the stand-by caught up for up to
//! [`CATCH_UP`](super::doorbell::CATCH_UP) while the waiting thread spun on the same
//! receives, two threads of one rank busy on one payload, and on a host with few cores the
//! sender's thread (which pushes the payload out as it waits) lost the processor to them.
//! While a claim is held the stand-by steps aside: it naps on a condition variable, and the
//! last claim's release wakes it, so that a rank that computes between waits is stood by for
//! at once. The waiting thread sleeps on the doorbell itself.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// The claims on a rank's progress and the stand-by that steps aside for them.
#[derive(Default)]
pub(super) struct Aside {
    /// Claims held (they nest, and several threads may wait at once).
    drivers: AtomicUsize,
    /// The stand-by naps on `wake` (a release must wake it).
    parked: AtomicBool,
    /// The stand-by sleeps on the doorbell: a claim must kick it out, since only one thread
    /// may sleep there (one that wakes drains the rings, and the other sleeps on).
    standing: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Aside {
    /// A thread starts waiting in calls of its own; whether the stand-by sleeps on the
    /// doorbell and must be kicked out of it.
    pub(super) fn claim(&self) -> bool {
        self.drivers.fetch_add(1, SeqCst);
        self.standing.load(SeqCst)
    }

    /// The stand-by is about to sleep on the doorbell; false (it must not) while a claim is
    /// held. Dekker with [`claim`](Self::claim): either the claim sees it standing and kicks
    /// it, or it sees the claim.
    pub(super) fn stand(&self) -> bool {
        self.standing.store(true, SeqCst);
        if self.claimed() {
            self.standing.store(false, SeqCst);
            return false;
        }
        true
    }

    /// The stand-by woke from the doorbell.
    pub(super) fn sat(&self) {
        self.standing.store(false, SeqCst);
    }

    /// Whether the stand-by sleeps on the doorbell (a claimant must not sleep there too).
    pub(super) fn standing(&self) -> bool {
        self.standing.load(SeqCst)
    }

    /// Ends a [`claim`](Self::claim); the last one wakes a stand-by that stepped aside.
    pub(super) fn release(&self) {
        // Dekker with `step_aside`: either it sees no claim left, or this sees it parked and
        // takes the lock, which it holds until its wait has begun.
        if self.drivers.fetch_sub(1, SeqCst) == 1 && self.parked.load(SeqCst) {
            let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_all();
        }
    }

    /// Whether a thread holds a claim.
    pub(super) fn claimed(&self) -> bool {
        self.drivers.load(SeqCst) > 0
    }

    /// The stand-by's nap while a claim is held: until the last release, at most `max`.
    pub(super) fn step_aside(&self, max: Duration) {
        let g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.parked.store(true, SeqCst);
        let g = if self.claimed() {
            self.wake
                .wait_timeout(g, max)
                .unwrap_or_else(|e| e.into_inner())
                .0
        } else {
            g
        };
        self.parked.store(false, SeqCst);
        drop(g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    /// A stand-by stepping aside (for up to 20 s) in a thread of its own; how long it napped.
    fn nap_in_thread(a: &Arc<Aside>) -> std::thread::JoinHandle<Duration> {
        let b = a.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            b.step_aside(Duration::from_secs(20));
            start.elapsed()
        })
    }

    #[test]
    fn the_last_release_ends_the_nap() {
        let a = Arc::new(Aside::default());
        a.claim();
        a.claim();
        let t = nap_in_thread(&a);
        std::thread::sleep(Duration::from_millis(50));
        a.release();
        std::thread::sleep(Duration::from_millis(50));
        assert!(!t.is_finished(), "one claim is still held");
        a.release();
        let napped = t.join().unwrap();
        assert!(napped < Duration::from_secs(10), "napped {napped:?}");
        assert!(!a.claimed());
    }

    #[test]
    fn no_claim_no_nap() {
        let a = Aside::default();
        let start = Instant::now();
        a.step_aside(Duration::from_secs(20));
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    /// Claims and releases racing a stand-by, many times: no release is missed (a missed one
    /// would leave the stand-by asleep for its whole `max`).
    #[test]
    fn releases_race_the_stand_by() {
        let a = Arc::new(Aside::default());
        for _ in 0..2000 {
            a.claim();
            let t = nap_in_thread(&a);
            a.release();
            let napped = t.join().unwrap();
            assert!(napped < Duration::from_secs(10), "a release was missed");
        }
    }
}

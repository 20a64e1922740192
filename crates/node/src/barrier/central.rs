//! The central, sense-reversing barrier: one shared arrival counter; the last thread to arrive
//! resets it and publishes the new episode ("sense") that everyone else waits for.

use super::{bad_index, effective_policy, no_parties, Barrier, Breakable, AHEAD};
use crate::padded::CachePadded;
use crate::sync::{AtomicU32, AtomicUsize, Ordering};
use crate::wait::{reached, Signal, WaitPolicy};

/// A central counter barrier waiting under any [`WaitPolicy`].
pub struct CentralBarrier {
    parties: usize,
    policy: WaitPolicy,
    name: &'static str,
    count: CachePadded<AtomicUsize>,
    release: CachePadded<Signal>,
    /// Each thread's own episode number, a line apart.
    episodes: Box<[CachePadded<AtomicU32>]>,
}

impl CentralBarrier {
    /// A barrier for `parties` threads that waits under `policy`.
    ///
    /// # Panics
    ///
    /// When `parties` is 0.
    pub fn new(parties: usize, policy: WaitPolicy) -> Self {
        Self::named(parties, policy, "central")
    }

    fn named(parties: usize, policy: WaitPolicy, name: &'static str) -> Self {
        if parties == 0 {
            no_parties(name);
        }
        CentralBarrier {
            parties,
            policy: effective_policy(policy, parties),
            name,
            count: CachePadded::new(AtomicUsize::new(0)),
            release: CachePadded::new(Signal::new(0)),
            episodes: (0..parties)
                .map(|_| CachePadded::new(AtomicU32::new(0)))
                .collect(),
        }
    }
}

impl Barrier for CentralBarrier {
    fn parties(&self) -> usize {
        self.parties
    }

    #[inline]
    fn wait(&self, me: usize) -> bool {
        if me >= self.parties {
            bad_index(self.name, me, self.parties);
        }
        let e = self.episodes[me].load(Ordering::Relaxed).wrapping_add(1);
        self.episodes[me].store(e, Ordering::Relaxed);
        if self.count.fetch_add(1, Ordering::AcqRel) == self.parties - 1 {
            // Nobody can arrive for the next episode before the release below, so the reset
            // cannot race with an arrival.
            self.count.store(0, Ordering::Relaxed);
            // A broken barrier's release is far ahead of every episode (`break_open`): left
            // there, or a later episode's waiters would wait for ever.
            if !reached(self.release.get(), e) {
                self.release.set(e, self.policy);
            }
            true
        } else {
            self.release.wait_until(self.policy, |v| reached(v, e));
            false
        }
    }

    fn name(&self) -> &'static str {
        self.name
    }
}

impl Breakable for CentralBarrier {
    fn break_open(&self, me: usize) {
        let Some(e) = self.episodes.get(me) else {
            bad_index(self.name, me, self.parties);
        };
        let e = e.load(Ordering::Relaxed);
        self.release.set(e.wrapping_add(AHEAD), WaitPolicy::Park);
    }

    fn mend(&self) {
        self.count.store(0, Ordering::Relaxed);
        self.release.reset();
        for e in self.episodes.iter() {
            e.store(0, Ordering::Relaxed);
        }
    }
}

/// The relaxed barrier: a central barrier whose waiters sleep on a futex at once. For arrival
/// spreads of milliseconds, where spinning would only steal cores from the late threads.
pub struct RelaxedBarrier(CentralBarrier);

impl RelaxedBarrier {
    /// A barrier for `parties` threads.
    ///
    /// # Panics
    ///
    /// When `parties` is 0.
    pub fn new(parties: usize) -> Self {
        RelaxedBarrier(CentralBarrier::named(parties, WaitPolicy::Park, "relaxed"))
    }
}

impl Barrier for RelaxedBarrier {
    fn parties(&self) -> usize {
        self.0.parties
    }
    #[inline]
    fn wait(&self, me: usize) -> bool {
        self.0.wait(me)
    }
    fn name(&self) -> &'static str {
        "relaxed"
    }
}

impl Breakable for RelaxedBarrier {
    fn break_open(&self, me: usize) {
        self.0.break_open(me)
    }
    fn mend(&self) {
        self.0.mend()
    }
}

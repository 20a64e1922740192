//! The dissemination barrier (Hensgen, Finkel & Manber): in round k, thread i signals thread
//! (i + 2ᵏ) mod n and waits for the signal of thread (i − 2ᵏ) mod n. After ⌈log₂ n⌉ rounds
//! every thread has heard, transitively, from every other.

use super::{bad_index, effective_policy, no_parties, Barrier, Breakable, AHEAD};
use crate::padded::CachePadded;
use crate::sync::{AtomicU32, Ordering};
use crate::wait::{reached, Signal, WaitPolicy};

/// Enough rounds for 2¹⁶ threads.
const MAX_ROUNDS: usize = 16;

struct Slot {
    /// The owner's episode number; only the owner touches it.
    episode: AtomicU32,
    /// `flags[k]`: the last episode in which this thread's round-k partner signalled it.
    flags: [Signal; MAX_ROUNDS],
}

/// A dissemination barrier whose waiting follows a [`WaitPolicy`].
pub struct DisseminationBarrier {
    parties: usize,
    rounds: usize,
    policy: WaitPolicy,
    name: &'static str,
    slots: Box<[CachePadded<Slot>]>,
}

impl DisseminationBarrier {
    /// A barrier for `parties` threads that waits under `policy`.
    ///
    /// # Panics
    ///
    /// When `parties` is 0 or above 2^16.
    pub fn new(parties: usize, policy: WaitPolicy) -> Self {
        let name = match policy {
            WaitPolicy::Spin => "active",
            WaitPolicy::Pause => "passive",
            WaitPolicy::Park => "dissemination-park",
            WaitPolicy::Auto => "adaptive",
        };
        Self::named(parties, policy, name)
    }

    fn named(parties: usize, policy: WaitPolicy, name: &'static str) -> Self {
        if parties == 0 {
            no_parties(name);
        }
        let rounds = (usize::BITS - (parties - 1).leading_zeros()) as usize;
        assert!(
            rounds <= MAX_ROUNDS,
            "tiers: at most 65536 threads per barrier"
        );
        let slots = (0..parties)
            .map(|_| {
                CachePadded::new(Slot {
                    episode: AtomicU32::new(0),
                    flags: std::array::from_fn(|_| Signal::new(0)),
                })
            })
            .collect();
        DisseminationBarrier {
            parties,
            rounds,
            policy: effective_policy(policy, parties),
            name,
            slots,
        }
    }

    /// The wait policy.
    pub fn policy(&self) -> WaitPolicy {
        self.policy
    }

    /// Sets every flag to `value`, waking its sleepers.
    pub(super) fn open_at(&self, value: u32) {
        for slot in self.slots.iter() {
            for flag in &slot.flags[..self.rounds] {
                flag.set(value, WaitPolicy::Park);
            }
        }
    }
}

impl Breakable for DisseminationBarrier {
    fn break_open(&self, me: usize) {
        let Some(slot) = self.slots.get(me) else {
            bad_index(self.name, me, self.parties);
        };
        let e = slot.episode.load(Ordering::Relaxed);
        self.open_at(e.wrapping_add(AHEAD));
    }

    fn mend(&self) {
        for slot in self.slots.iter() {
            slot.episode.store(0, Ordering::Relaxed);
            for flag in &slot.flags {
                flag.reset();
            }
        }
    }
}

impl Barrier for DisseminationBarrier {
    fn parties(&self) -> usize {
        self.parties
    }

    #[inline]
    fn wait(&self, me: usize) -> bool {
        if me >= self.parties {
            bad_index(self.name, me, self.parties);
        }
        let mine = &self.slots[me];
        let e = mine.episode.load(Ordering::Relaxed).wrapping_add(1);
        mine.episode.store(e, Ordering::Relaxed);
        let mut dist = 1;
        for k in 0..self.rounds {
            let mut partner = me + dist;
            if partner >= self.parties {
                partner -= self.parties;
            }
            self.slots[partner].flags[k].set(e, self.policy);
            mine.flags[k].wait_until(self.policy, |v| reached(v, e));
            dist <<= 1;
        }
        me == 0
    }

    fn name(&self) -> &'static str {
        self.name
    }
}

macro_rules! policy_barrier {
    ($(#[$doc:meta])* $name:ident, $policy:expr, $label:literal) => {
        $(#[$doc])*
        pub struct $name(DisseminationBarrier);

        impl $name {
            /// A barrier for `parties` threads.
            ///
            /// # Panics
            ///
            /// When `parties` is 0 or above 2^16.
            pub fn new(parties: usize) -> Self {
                $name(DisseminationBarrier::named(parties, $policy, $label))
            }
        }

        impl Barrier for $name {
            fn parties(&self) -> usize {
                self.0.parties
            }
            #[inline]
            fn wait(&self, me: usize) -> bool {
                self.0.wait(me)
            }
            fn name(&self) -> &'static str {
                $label
            }
        }

        impl Breakable for $name {
            fn break_open(&self, me: usize) {
                self.0.break_open(me)
            }
            fn mend(&self) {
                self.0.mend()
            }
        }
    };
}

policy_barrier!(
    /// The active barrier: dissemination with busy spinning. The fastest answer, at the cost of
    /// a fully busy core per waiting thread.
    ActiveBarrier,
    WaitPolicy::Spin,
    "active"
);
policy_barrier!(
    /// The passive barrier: dissemination, spinning with PAUSE so the waiting core does not
    /// flood the memory bus with loads.
    PassiveBarrier,
    WaitPolicy::Pause,
    "passive"
);
policy_barrier!(
    /// The adaptive barrier, the pool's default: dissemination that spins briefly with PAUSE,
    /// then sleeps on a futex, so it is fast when threads arrive together and frees the cores
    /// when they do not.
    AdaptiveBarrier,
    WaitPolicy::Auto,
    "adaptive"
);

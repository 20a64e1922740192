//! Barriers: every thread of a group waits until all have arrived.
//!
//! MCTP ([GPI-MCTP]) offers active, passive, relaxed and NUMA barriers; tiers has each of them
//! plus an adaptive one that the pool uses by default:
//!
//! | type | algorithm | waiting |
//! |---|---|---|
//! | [`ActiveBarrier`] | dissemination, one flag per thread and round | busy spin |
//! | [`PassiveBarrier`] | dissemination | spin with PAUSE |
//! | [`RelaxedBarrier`] | central counter, sense reversal | futex sleep |
//! | [`CentralBarrier`] | central counter, sense reversal | any [`WaitPolicy`] |
//! | [`HierBarrier`] | gather within a cache/NUMA domain, dissemination across domains | any |
//! | [`AdaptiveBarrier`] | dissemination | spin, then sleep |
//!
//! Sense reversal is done with episode numbers: every flag holds the number of the episode that
//! last set it, which generalises the one-bit sense and never needs a reset. A dissemination
//! barrier costs each thread ⌈log₂ n⌉ flag writes into other threads' cache lines and no
//! read-modify-write on a shared line, which is why it beats the central counter (and
//! libgomp's barrier, which is one).
//!
//! Every `wait` takes the caller's index in `0..parties`; an index out of range panics with a
//! message that names the barrier's size, so a barrier entered by more threads than it was made
//! for fails loudly instead of deadlocking.

mod central;
mod dissemination;
mod hier;

pub use central::{CentralBarrier, RelaxedBarrier};
pub use dissemination::{ActiveBarrier, AdaptiveBarrier, DisseminationBarrier, PassiveBarrier};
pub use hier::HierBarrier;

use crate::wait::WaitPolicy;

/// A barrier for a fixed number of parties, each entering with its own index.
pub trait Barrier: Send + Sync {
    /// How many threads the barrier was made for.
    fn parties(&self) -> usize;
    /// Blocks until all parties have called `wait` for this episode. `me` is the caller's index
    /// in `0..parties()`; two threads must not use the same index at once. Returns `true` on
    /// exactly one party (the leader of the episode).
    fn wait(&self, me: usize) -> bool;
    /// A short name for tables (`active`, `passive`, …).
    fn name(&self) -> &'static str;
}

/// How far ahead of a party's episode [`Breakable::break_open`] sets the flags: every party is
/// within one episode of any other, so every wait of every party passes, however many of them
/// run until the barrier is mended (a region whose parties leave at their next barrier runs
/// one more at most).
const AHEAD: u32 = 1 << 28;

/// A barrier that can let its parties go when one of them will never arrive: the pool breaks
/// its team barrier open when a worker's closure panics, so that the others leave the region
/// instead of waiting for ever (as they would at `std::sync::Barrier`). Every barrier of this
/// module is breakable.
pub trait Breakable: Barrier {
    /// Lets every party through every wait, now and later, until [`Breakable::mend`]: every
    /// flag is set far ahead of the episode of party `me`, which must not be inside `wait`.
    /// Sleeping waiters are woken.
    fn break_open(&self, me: usize);
    /// Makes the barrier as new. Only while no party is inside `wait` (between regions).
    fn mend(&self);
}

/// The barrier kinds, for choosing one by name (command line, benchmarks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum BarrierKind {
    /// [`ActiveBarrier`]
    Active,
    /// [`PassiveBarrier`]
    Passive,
    /// [`RelaxedBarrier`]
    Relaxed,
    /// [`CentralBarrier`] with PAUSE spinning
    Central,
    /// [`HierBarrier`] over the machine's cache/NUMA domains
    Hier,
    /// [`AdaptiveBarrier`]
    Adaptive,
}

impl BarrierKind {
    /// Every kind, in table order.
    pub const ALL: [BarrierKind; 6] = [
        BarrierKind::Active,
        BarrierKind::Passive,
        BarrierKind::Relaxed,
        BarrierKind::Central,
        BarrierKind::Hier,
        BarrierKind::Adaptive,
    ];

    /// The kind's short name.
    pub fn name(self) -> &'static str {
        match self {
            BarrierKind::Active => "active",
            BarrierKind::Passive => "passive",
            BarrierKind::Relaxed => "relaxed",
            BarrierKind::Central => "central",
            BarrierKind::Hier => "hier",
            BarrierKind::Adaptive => "adaptive",
        }
    }

    /// Parses a short name.
    pub fn parse(s: &str) -> Option<BarrierKind> {
        BarrierKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Makes a barrier of this kind for `parties` threads. The hierarchical kind groups the
    /// threads by the domains of `cpus` (the processors they are pinned to, in index order) on
    /// the detected topology; with no `cpus` it groups them as they would be placed compactly.
    ///
    /// # Panics
    ///
    /// When `parties` is 0, or above 2^16 for the dissemination kinds (active, passive,
    /// adaptive).
    pub fn build(self, parties: usize, cpus: Option<&[usize]>) -> Box<dyn Barrier> {
        // The same barrier, its vtable the supertrait's (no wrapper on the wait path).
        self.build_breakable(parties, cpus)
    }

    /// As [`BarrierKind::build`], as a [`Breakable`] barrier.
    pub fn build_breakable(self, parties: usize, cpus: Option<&[usize]>) -> Box<dyn Breakable> {
        match self {
            BarrierKind::Active => Box::new(ActiveBarrier::new(parties)),
            BarrierKind::Passive => Box::new(PassiveBarrier::new(parties)),
            BarrierKind::Relaxed => Box::new(RelaxedBarrier::new(parties)),
            BarrierKind::Central => Box::new(CentralBarrier::new(parties, WaitPolicy::Pause)),
            BarrierKind::Hier => Box::new(HierBarrier::for_cpus(parties, cpus, WaitPolicy::Pause)),
            BarrierKind::Adaptive => Box::new(AdaptiveBarrier::new(parties)),
        }
    }
}

/// The policy a barrier of `parties` threads really waits with: an adaptive wait turns into a
/// sleeping one when the threads outnumber the processors this process may use, because then a
/// spinning waiter only delays the thread it waits for (measured: 4 threads on 2 cores wait
/// 20x longer with spinning than with sleeping).
pub(crate) fn effective_policy(policy: WaitPolicy, parties: usize) -> WaitPolicy {
    #[cfg(not(loom))]
    if policy == WaitPolicy::Auto {
        let topo = crate::topology::Topology::get();
        let hw = if topo.affinity.is_empty() {
            topo.hw_threads()
        } else {
            topo.affinity.len()
        };
        if parties > hw {
            return WaitPolicy::Park;
        }
    }
    #[cfg(loom)]
    let _ = parties;
    policy
}

#[cold]
#[inline(never)]
pub(crate) fn bad_index(name: &str, me: usize, parties: usize) -> ! {
    panic!(
        "tiers: {name} barrier made for {parties} threads was entered with thread index {me} \
         (indices run 0..{parties}); more threads use it than it was made for"
    )
}

#[cold]
#[inline(never)]
pub(crate) fn no_parties(name: &str) -> ! {
    panic!("tiers: a {name} barrier needs at least one party")
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Each thread bumps a counter between episodes; after every barrier all threads must see
    /// exactly `parties * episode` increments: nobody ran ahead, nobody was left behind.
    fn check(b: Arc<dyn Barrier>, episodes: usize) {
        let n = b.parties();
        let count = Arc::new(AtomicUsize::new(0));
        let leaders = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..n)
            .map(|me| {
                let (b, count, leaders) = (b.clone(), count.clone(), leaders.clone());
                std::thread::spawn(move || {
                    for e in 1..=episodes {
                        count.fetch_add(1, Ordering::Relaxed);
                        if b.wait(me) {
                            leaders.fetch_add(1, Ordering::Relaxed);
                        }
                        assert_eq!(count.load(Ordering::Relaxed), n * e, "{} e={e}", b.name());
                        b.wait(me);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(
            leaders.load(Ordering::Relaxed),
            episodes,
            "{}: one leader per episode",
            b.name()
        );
    }

    #[test]
    fn every_kind_synchronises_many_thread_counts() {
        for kind in BarrierKind::ALL {
            for n in [1, 2, 3, 5, 8] {
                let episodes = if kind == BarrierKind::Relaxed {
                    100
                } else {
                    300
                };
                check(Arc::from(kind.build(n, None)), episodes);
            }
        }
    }

    #[test]
    fn hierarchical_with_explicit_groups() {
        for groups in [
            vec![vec![0, 1], vec![2, 3]],
            vec![vec![0], vec![1, 2, 3, 4]],
            vec![vec![2, 0], vec![1]],
        ] {
            let n = groups.iter().map(|g| g.len()).sum();
            check(
                Arc::new(HierBarrier::with_groups(n, groups, WaitPolicy::Auto)),
                200,
            );
        }
    }

    /// One party of three never comes and the barrier is broken open: the other two get
    /// through any number of episodes, for every kind (the central counter's last arriver
    /// must not pull the release back), and after mending the barrier synchronises again.
    #[test]
    fn a_broken_barrier_lets_the_others_through_every_episode() {
        for kind in BarrierKind::ALL {
            let b: Arc<dyn Breakable> = Arc::from(kind.build_breakable(3, None));
            b.break_open(2);
            let hs: Vec<_> = (0..2)
                .map(|me| {
                    let b = b.clone();
                    std::thread::spawn(move || {
                        for _ in 0..10 {
                            b.wait(me);
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            b.mend();
            let b: Arc<dyn Barrier> = Arc::new(Mended(b));
            check(b, 50);
        }
    }

    /// A breakable barrier seen as a plain one (for `check`).
    struct Mended(Arc<dyn Breakable>);

    impl Barrier for Mended {
        fn parties(&self) -> usize {
            self.0.parties()
        }
        fn wait(&self, me: usize) -> bool {
            self.0.wait(me)
        }
        fn name(&self) -> &'static str {
            self.0.name()
        }
    }

    #[test]
    #[should_panic(expected = "made for 2 threads was entered with thread index 2")]
    fn too_many_threads_panics_with_a_message() {
        let b = ActiveBarrier::new(2);
        b.wait(2);
    }

    #[test]
    #[should_panic(expected = "at least one party")]
    fn zero_parties_panics() {
        let _ = CentralBarrier::new(0, WaitPolicy::Spin);
    }

    #[test]
    fn names_round_trip() {
        for k in BarrierKind::ALL {
            assert_eq!(BarrierKind::parse(k.name()), Some(k));
            assert_eq!(k.build(2, None).name(), k.name());
        }
    }
}

//! The hierarchical (NUMA) barrier of [GPI-MCTP]: threads first meet inside their domain (the
//! threads sharing a last-level cache or a NUMA node), then one leader per domain meets the other
//! leaders, then each leader releases its domain. Only the leaders' flags cross domains, so the
//! traffic between sockets is one line per domain per round instead of one per thread.

use super::{bad_index, effective_policy, no_parties, Barrier, Breakable, AHEAD};
use crate::padded::CachePadded;
use crate::placement::Placement;
use crate::sync::{AtomicU32, Ordering};
use crate::topology::Topology;
use crate::wait::{reached, Signal, WaitPolicy};

use super::dissemination::DisseminationBarrier;

struct Member {
    episode: AtomicU32,
    /// Set by this thread when it arrives; read by its leader.
    arrived: Signal,
    /// This thread's group.
    group: usize,
}

struct Group {
    /// Thread indices; `members[0]` leads.
    members: Vec<usize>,
    /// Set by the leader when the whole barrier is complete.
    release: CachePadded<Signal>,
}

/// A two-level barrier: gather within a domain, dissemination among domain leaders, release.
pub struct HierBarrier {
    parties: usize,
    policy: WaitPolicy,
    members: Box<[CachePadded<Member>]>,
    groups: Vec<Group>,
    leaders: DisseminationBarrier,
    /// For each group leader, its index among the leaders.
    leader_index: Box<[usize]>,
}

impl HierBarrier {
    /// A barrier for `parties` threads grouped explicitly: every index in `0..parties` must
    /// appear in exactly one non-empty group; the first index of each group leads it.
    ///
    /// # Panics
    ///
    /// When `parties` is 0, there are more than 2^16 groups, or `groups` breaks the rule above
    /// (an empty group, an index out of range, in two groups or in none).
    pub fn with_groups(parties: usize, groups: Vec<Vec<usize>>, policy: WaitPolicy) -> Self {
        if parties == 0 {
            no_parties("hier");
        }
        let mut group_of = vec![usize::MAX; parties];
        for (g, members) in groups.iter().enumerate() {
            assert!(
                !members.is_empty(),
                "tiers: hier barrier group {g} is empty"
            );
            for &m in members {
                assert!(
                    m < parties,
                    "tiers: hier barrier group {g} names thread {m} of {parties}"
                );
                assert!(
                    group_of[m] == usize::MAX,
                    "tiers: thread {m} is in two hier barrier groups"
                );
                group_of[m] = g;
            }
        }
        if let Some(m) = group_of.iter().position(|&g| g == usize::MAX) {
            panic!("tiers: thread {m} is in no hier barrier group");
        }
        let mut leader_index = vec![usize::MAX; parties];
        for (g, members) in groups.iter().enumerate() {
            leader_index[members[0]] = g;
        }
        let policy = effective_policy(policy, parties);
        HierBarrier {
            parties,
            policy,
            members: group_of
                .iter()
                .map(|&group| {
                    CachePadded::new(Member {
                        episode: AtomicU32::new(0),
                        arrived: Signal::new(0),
                        group,
                    })
                })
                .collect(),
            leaders: DisseminationBarrier::new(groups.len(), policy),
            groups: groups
                .into_iter()
                .map(|members| Group {
                    members,
                    release: CachePadded::new(Signal::new(0)),
                })
                .collect(),
            leader_index: leader_index.into_boxed_slice(),
        }
    }

    /// A barrier whose thread `i` runs on processor `cpus[i]`, grouped by the domains of the
    /// detected topology (shared last-level cache, else NUMA node, else package). With no
    /// `cpus`, the threads are assumed placed compactly.
    ///
    /// # Panics
    ///
    /// When `parties` is 0.
    pub fn for_cpus(parties: usize, cpus: Option<&[usize]>, policy: WaitPolicy) -> Self {
        let topo = Topology::detect();
        let placed;
        let cpus = match cpus {
            Some(c) if !c.is_empty() => c,
            // No list, or an empty one: the compact placement's.
            _ => {
                placed = Placement::Compact.cpus(parties, &topo);
                &placed
            }
        };
        let mut domains: Vec<(usize, Vec<usize>)> = Vec::new();
        for t in 0..parties {
            let d = topo.barrier_domain(cpus[t % cpus.len().max(1)]);
            match domains.iter_mut().find(|(id, _)| *id == d) {
                Some((_, v)) => v.push(t),
                None => domains.push((d, vec![t])),
            }
        }
        Self::with_groups(
            parties,
            domains.into_iter().map(|(_, v)| v).collect(),
            policy,
        )
    }

    /// How many domains the threads were grouped into.
    pub fn groups(&self) -> usize {
        self.groups.len()
    }
}

impl Barrier for HierBarrier {
    fn parties(&self) -> usize {
        self.parties
    }

    fn wait(&self, me: usize) -> bool {
        if me >= self.parties {
            bad_index("hier", me, self.parties);
        }
        let mine = &self.members[me];
        let e = mine.episode.load(Ordering::Relaxed).wrapping_add(1);
        mine.episode.store(e, Ordering::Relaxed);
        let group = &self.groups[mine.group];
        if group.members[0] != me {
            mine.arrived.set(e, self.policy);
            group.release.wait_until(self.policy, |v| reached(v, e));
            return false;
        }
        for &m in &group.members[1..] {
            self.members[m]
                .arrived
                .wait_until(self.policy, |v| reached(v, e));
        }
        let lead = self.leaders.wait(self.leader_index[me]);
        group.release.set(e, self.policy);
        lead
    }

    fn name(&self) -> &'static str {
        "hier"
    }
}

impl Breakable for HierBarrier {
    fn break_open(&self, me: usize) {
        let Some(mine) = self.members.get(me) else {
            bad_index("hier", me, self.parties);
        };
        // The leaders' episodes move with their own: one leaders' episode per episode here.
        let ahead = mine.episode.load(Ordering::Relaxed).wrapping_add(AHEAD);
        for m in self.members.iter() {
            m.arrived.set(ahead, WaitPolicy::Park);
        }
        for g in &self.groups {
            g.release.set(ahead, WaitPolicy::Park);
        }
        self.leaders.open_at(ahead);
    }

    fn mend(&self) {
        for m in self.members.iter() {
            m.episode.store(0, Ordering::Relaxed);
            m.arrived.reset();
        }
        for g in &self.groups {
            g.release.reset();
        }
        self.leaders.mend();
    }
}

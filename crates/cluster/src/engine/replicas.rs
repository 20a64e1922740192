//! What the engines know of replication: in a job of `tiers run --replicas R` the world is the
//! job's processes, and process `p` is replica `p % R` of logical rank `p / R`. The replicated
//! two-sided layer above skips a dead replica on its own, but it starts and ends with
//! world-level collectives (the world's join, the registration of its segment). So that a
//! replica may die at any moment, those collectives (barriers, segment creation and deletion)
//! count a dead process as arrived while another replica of its logical rank lives: it is
//! *covered*. An allreduce still fails on any death (its result would depend on who saw the
//! dead contribution).

use crate::collective::Collective;
use crate::config::{env, env_usize};
use crate::error::Rank;

/// Replicas per logical rank of this process's job (`TIERS_REPLICAS`; 1 when unset or
/// malformed, which the replicated layer reports on its own).
pub(crate) fn from_env() -> usize {
    env_usize(env::REPLICAS).ok().flatten().unwrap_or(1).max(1)
}

/// How long a replicated job's world-level collective waits for a process that has not
/// arrived while a replica of its rank has, before it goes on without it: the replica timeout
/// (`TIERS_REPLICA_TIMEOUT_MS`, default [`REPLICA_TIMEOUT`](crate::config::REPLICA_TIMEOUT);
/// a malformed value is the replicated layer's to report).
pub(crate) fn left_behind_after() -> std::time::Duration {
    crate::config::replica_timeout().unwrap_or(crate::config::REPLICA_TIMEOUT)
}

/// The other replicas of process `q`'s logical rank (processes `l·R .. l·R + R` but `q`).
pub(crate) fn siblings(q: Rank, replicas: usize, size: usize) -> impl Iterator<Item = Rank> {
    let r = replicas.max(1);
    let first = q / r * r;
    (first..(first + r).min(size)).filter(move |&j| j != q)
}

/// Whether process `q`, dead by `dead`, is covered: the job is replicated and another replica
/// of `q`'s logical rank is not dead.
pub(crate) fn covered(q: Rank, replicas: usize, size: usize, dead: impl Fn(Rank) -> bool) -> bool {
    replicas > 1 && dead(q) && siblings(q, replicas, size).any(|j| !dead(j))
}

/// Whether collective `word` may complete without a covered dead process (see the module
/// notes): barriers and segment creation and deletion, not allreduces.
pub(crate) fn tolerant(word: u64) -> bool {
    matches!(
        Collective::from_word(word),
        Collective::Barrier | Collective::SegmentCreate { .. } | Collective::SegmentDelete { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_replica_is_covered_only_while_another_of_its_rank_lives() {
        let dead = |set: &'static [usize]| move |r: Rank| set.contains(&r);
        // 3 ranks x 2 replicas: processes 0,1 | 2,3 | 4,5.
        assert!(covered(1, 2, 6, dead(&[1])));
        assert!(covered(2, 2, 6, dead(&[2, 5])));
        assert!(!covered(2, 2, 6, dead(&[2, 3])));
        assert!(
            !covered(3, 2, 6, dead(&[2])),
            "a live process is not covered"
        );
        assert!(
            !covered(1, 1, 6, dead(&[1])),
            "nothing is covered without replicas"
        );
        assert!(tolerant(Collective::Barrier.word()));
        assert!(tolerant(Collective::SegmentCreate { seg: 3 }.word()));
        assert!(!tolerant(Collective::allreduce_word(
            1,
            crate::collective::DataType::F64,
            crate::collective::Op::Sum
        )));
    }
}

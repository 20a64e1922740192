//! The collectives of the tcp engine, as rank 0 (the root) runs them: every rank sends its
//! contribution to collective number `k` (its call word and payload) to the root; once all
//! are in, the root checks that the calls agree and answers each rank with the result (or the
//! mismatch, or the rank that failed).
//!
//! A star costs `2(P − 1)` frames per collective, which on the socket transport is what the
//! latency is made of anyway; it makes the agreement check exact (the root sees every call
//! word) and the float sums identical everywhere (folded once, in rank order).
//!
//! A replicated job cannot have one rank whose death ends every collective: there every rank
//! sends its contribution to every other and runs a `Root` of its own, which settles the
//! round for itself (`P(P − 1)` frames, paid at start-up and teardown only, where the world's
//! collectives are). A round of a barrier or a segment's creation or deletion then completes
//! without a gone rank that a live replica of its logical rank covers
//! (`engine/replicas.rs`); the gone rank's entry in a segment's sizes is 0.

use crate::collective::{fold_in_order, Collective};
use crate::engine::replicas;
use crate::error::Rank;
use std::collections::HashMap;

/// How a collective ended, for one rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Every rank made the same call: the result.
    Done(Vec<u8>),
    /// `rank` (the lowest whose call differs from this rank's) called `theirs`.
    Mismatch { theirs: u64, rank: Rank },
    /// This rank failed or left before contributing.
    Failed(Rank),
}

impl Outcome {
    /// Wire form: `(status, c, d)` of a `CollResult` header.
    pub(super) fn status(&self) -> (u64, u64, u64) {
        match self {
            Outcome::Done(_) => (0, 0, 0),
            Outcome::Mismatch { theirs, rank } => (1, *theirs, *rank as u64),
            Outcome::Failed(r) => (2, *r as u64, 0),
        }
    }

    /// From the wire form (and the payload of a `Done`).
    pub(super) fn from_status(b: u64, c: u64, d: u64, payload: Vec<u8>) -> Outcome {
        match b {
            0 => Outcome::Done(payload),
            1 => Outcome::Mismatch {
                theirs: c,
                rank: d as Rank,
            },
            _ => Outcome::Failed(c as Rank),
        }
    }
}

struct Round {
    got: Vec<Option<(u64, Vec<u8>)>>,
    count: usize,
}

/// The root's open rounds.
pub(super) struct Root {
    size: usize,
    rounds: HashMap<u64, Round>,
    /// Ranks known to be gone (failed or left).
    gone: Vec<bool>,
    /// Replicas per logical rank (1: not replicated).
    replicas: usize,
}

impl Root {
    pub(super) fn new(size: usize, replicas: usize) -> Root {
        Root {
            size,
            rounds: HashMap::new(),
            gone: vec![false; size],
            replicas,
        }
    }

    /// The ranks missing from round `seq` when every one of them lags a replica of its
    /// logical rank that has contributed (a replicated job's laggards, see `collective`);
    /// `None` when some missing rank has no such replica, or nothing is missing.
    pub(super) fn lagging(&self, seq: u64) -> Option<Vec<Rank>> {
        let r = self.rounds.get(&seq)?;
        let missing = self.missing(seq);
        let lag = !missing.is_empty()
            && self.replicas > 1
            && missing.iter().all(|&q| {
                replicas::siblings(q, self.replicas, self.size).any(|j| r.got[j].is_some())
            });
        lag.then_some(missing)
    }

    /// The ranks that have not contributed to round `seq` and are not known to be gone.
    pub(super) fn missing(&self, seq: u64) -> Vec<Rank> {
        (0..self.size)
            .filter(|&k| !self.gone[k] && self.rounds.get(&seq).is_none_or(|r| r.got[k].is_none()))
            .collect()
    }

    /// Rank `from`'s contribution to collective `seq`; when it completes the round (or the
    /// round cannot complete), the answers to send, one per contributor.
    pub(super) fn contribute(
        &mut self,
        from: Rank,
        seq: u64,
        word: u64,
        payload: Vec<u8>,
    ) -> Vec<(Rank, Outcome)> {
        if from >= self.size {
            return Vec::new();
        }
        let size = self.size;
        let r = self.rounds.entry(seq).or_insert_with(|| Round {
            got: vec![None; size],
            count: 0,
        });
        if r.got[from].is_none() {
            r.count += 1;
        }
        r.got[from] = Some((word, payload));
        self.settle(seq)
    }

    /// Rank `r` is gone: every round it has not contributed to fails. The answers, with
    /// the number of their round.
    pub(super) fn gone(&mut self, r: Rank) -> Vec<(u64, Rank, Outcome)> {
        if r >= self.size || self.gone[r] {
            return Vec::new();
        }
        self.gone[r] = true;
        let mut seqs: Vec<u64> = self.rounds.keys().copied().collect();
        seqs.sort_unstable();
        seqs.into_iter()
            .flat_map(|s| self.settle(s).into_iter().map(move |(k, o)| (s, k, o)))
            .collect()
    }

    /// Ends round `seq` when every rank contributed, or when a rank that did not is gone.
    fn settle(&mut self, seq: u64) -> Vec<(Rank, Outcome)> {
        let Some(r) = self.rounds.get(&seq) else {
            return Vec::new();
        };
        if r.count < self.size {
            // A gone rank that did not contribute fails the round at once, unless the call
            // tolerates it and a replica covers it; then the round waits for the live rest.
            let word = r.got.iter().flatten().map(|g| g.0).next();
            let gone = &self.gone;
            let uncovered = (0..self.size).find(|&k| {
                r.got[k].is_none()
                    && gone[k]
                    && !(word.is_some_and(replicas::tolerant)
                        && replicas::covered(k, self.replicas, self.size, |j| gone[j]))
            });
            if let Some(dead) = uncovered {
                let r = self.rounds.remove(&seq).expect("present");
                return (0..self.size)
                    .filter(|&k| r.got[k].is_some())
                    .map(|k| (k, Outcome::Failed(dead)))
                    .collect();
            }
            if (0..self.size).any(|k| r.got[k].is_none() && !gone[k]) {
                return Vec::new();
            }
        }
        let r = self.rounds.remove(&seq).expect("present");
        let present: Vec<bool> = r.got.iter().map(Option::is_some).collect();
        // A covered gone rank stands in with the first contributor's call and an empty
        // payload of the same length (a segment size of 0).
        let first = r.got.iter().flatten().next().cloned().unwrap_or_default();
        let got: Vec<(u64, Vec<u8>)> = r
            .got
            .into_iter()
            .map(|g| g.unwrap_or_else(|| (first.0, vec![0; first.1.len()])))
            .collect();
        let words: Vec<u64> = got.iter().map(|g| g.0).collect();
        if words.iter().all(|&w| w == words[0]) {
            let result = combine(words[0], &got);
            return (0..self.size)
                .filter(|&k| present[k])
                .map(|k| (k, Outcome::Done(result.clone())))
                .collect();
        }
        (0..self.size)
            .filter(|&k| present[k])
            .map(|k| {
                let other = (0..self.size)
                    .find(|&j| words[j] != words[k])
                    .expect("the words differ");
                (
                    k,
                    Outcome::Mismatch {
                        theirs: words[other],
                        rank: other,
                    },
                )
            })
            .collect()
    }
}

/// The result of an agreed collective `word` from every rank's payload, in rank order.
fn combine(word: u64, got: &[(u64, Vec<u8>)]) -> Vec<u8> {
    match Collective::from_word(word) {
        Collective::Allreduce { ty, op, .. } => {
            let len = got[0].1.len();
            if got.iter().any(|g| g.1.len() != len) {
                // The call words carry the length: payloads of other lengths are a protocol
                // error; answer with nothing rather than fold garbage.
                return Vec::new();
            }
            let mut out = vec![0u8; len];
            fold_in_order(ty, op, &mut out, got.iter().map(|g| g.1.as_slice()));
            out
        }
        // Segment creation: every rank's size, in rank order.
        _ => got.iter().flat_map(|g| g.1.iter().copied()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{DataType, Op};

    #[test]
    fn a_round_completes_agrees_or_names_the_odd_rank() {
        let mut root = Root::new(3, 1);
        let w = Collective::Barrier.word();
        assert!(root.contribute(2, 1, w, vec![]).is_empty());
        assert!(root.contribute(0, 1, w, vec![]).is_empty());
        let out = root.contribute(1, 1, w, vec![]);
        assert_eq!(out.len(), 3);
        assert!(out.iter().all(|o| o.1 == Outcome::Done(vec![])));

        let a = Collective::Allreduce {
            len: 1,
            ty: DataType::F64,
            op: Op::Sum,
        }
        .word();
        for k in 0..3 {
            let out = root.contribute(k, 2, a, (k as f64 + 0.5).to_ne_bytes().to_vec());
            if k == 2 {
                let want = 0.5f64 + 1.5 + 2.5;
                assert!(out
                    .iter()
                    .all(|o| o.1 == Outcome::Done(want.to_ne_bytes().to_vec())));
            }
        }

        root.contribute(0, 3, w, vec![]);
        root.contribute(1, 3, a, vec![0; 8]);
        let out = root.contribute(2, 3, w, vec![]);
        assert_eq!(out[0].1, Outcome::Mismatch { theirs: a, rank: 1 });
        assert_eq!(out[1].1, Outcome::Mismatch { theirs: w, rank: 0 });
        assert_eq!(out[2].1, Outcome::Mismatch { theirs: a, rank: 1 });
    }

    #[test]
    fn a_replicated_round_completes_without_a_covered_gone_replica() {
        // 2 ranks x 2 replicas: processes 0,1 | 2,3.
        let mut root = Root::new(4, 2);
        let create = Collective::SegmentCreate { seg: 1 }.word();
        for k in [0, 2] {
            assert!(root
                .contribute(k, 1, create, 64u64.to_le_bytes().to_vec())
                .is_empty());
        }
        assert_eq!(root.missing(1), vec![1, 3]);
        assert!(root.gone(3).is_empty(), "rank 1 still waits for process 1");
        let out = root.contribute(1, 1, create, 64u64.to_le_bytes().to_vec());
        let sizes: Vec<u8> = [64u64, 64, 64, 0]
            .iter()
            .flat_map(|s| s.to_le_bytes())
            .collect();
        assert_eq!(out.len(), 3, "{out:?}");
        assert!(out
            .iter()
            .all(|(k, o)| *k != 3 && *o == Outcome::Done(sizes.clone())));
        // Process 2 gone too: rank 1 has no replica left, and the barrier fails on it.
        let w = Collective::Barrier.word();
        root.contribute(0, 2, w, vec![]);
        root.contribute(1, 2, w, vec![]);
        let out = root.gone(2);
        assert_eq!(
            out,
            vec![(2, 0, Outcome::Failed(2)), (2, 1, Outcome::Failed(2))]
        );
        // An allreduce never goes on without a contribution.
        let mut root = Root::new(4, 2);
        let a = Collective::Allreduce {
            len: 1,
            ty: DataType::F64,
            op: Op::Sum,
        }
        .word();
        for k in 0..3 {
            root.contribute(k, 1, a, 1f64.to_ne_bytes().to_vec());
        }
        let out = root.gone(3);
        assert!(out.iter().all(|o| o.2 == Outcome::Failed(3)), "{out:?}");
    }

    #[test]
    fn a_gone_rank_fails_the_rounds_it_missed() {
        let mut root = Root::new(3, 1);
        let w = Collective::Barrier.word();
        root.contribute(0, 1, w, vec![]);
        root.contribute(2, 1, w, vec![]);
        let out = root.gone(1);
        assert_eq!(
            out,
            vec![(1, 0, Outcome::Failed(1)), (1, 2, Outcome::Failed(1))]
        );
        // Later rounds fail as soon as they start.
        let out = root.contribute(0, 2, w, vec![]);
        assert_eq!(out, vec![(0, Outcome::Failed(1))]);
        let (b, c, d) = Outcome::Failed(1).status();
        assert_eq!(Outcome::from_status(b, c, d, vec![]), Outcome::Failed(1));
    }
}

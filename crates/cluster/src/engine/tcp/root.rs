//! The collectives of the tcp engine, as rank 0 (the root) runs them: every rank sends its
//! contribution to collective number `k` (its call word and payload) to the root; once all
//! are in, the root checks that the calls agree and answers each rank with the result (or the
//! mismatch, or the rank that failed).
//!
//! A star costs `2(P − 1)` frames per collective, which on the socket transport is what the
//! latency is made of anyway; it makes the agreement check exact (the root sees every call
//! word) and the float sums identical everywhere (folded once, in rank order).

use crate::collective::{fold_in_order, Collective};
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
}

impl Root {
    pub(super) fn new(size: usize) -> Root {
        Root {
            size,
            rounds: HashMap::new(),
            gone: vec![false; size],
        }
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
            let missing = (0..self.size).find(|&k| r.got[k].is_none() && self.gone[k]);
            let Some(dead) = missing else {
                return Vec::new();
            };
            let r = self.rounds.remove(&seq).expect("present");
            return (0..self.size)
                .filter(|&k| r.got[k].is_some())
                .map(|k| (k, Outcome::Failed(dead)))
                .collect();
        }
        let r = self.rounds.remove(&seq).expect("present");
        let got: Vec<(u64, Vec<u8>)> = r.got.into_iter().map(|g| g.expect("complete")).collect();
        let words: Vec<u64> = got.iter().map(|g| g.0).collect();
        if words.iter().all(|&w| w == words[0]) {
            let result = combine(words[0], &got);
            return (0..self.size)
                .map(|k| (k, Outcome::Done(result.clone())))
                .collect();
        }
        (0..self.size)
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
        let mut root = Root::new(3);
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
    fn a_gone_rank_fails_the_rounds_it_missed() {
        let mut root = Root::new(3);
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

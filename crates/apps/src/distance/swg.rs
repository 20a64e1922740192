//! Smith-Waterman-Gotoh local alignment with affine gaps, and SPIDAL's alignment distance.
//!
//! SPIDAL computes its sequence distances with JAligner's Smith-Waterman-Gotoh using the
//! EDNAFULL nucleotide matrix, gap open 16 and gap extension 4, and takes
//! d = 1 − (identical pairs) / (alignment length) over the local alignment. Gap convention as
//! JAligner: a gap of length L costs `open + (L − 1) · extend`. Scores: A/C/G/T match +5,
//! mismatch −4 (EDNAFULL); any pair involving an ambiguity code scores −2 (EDNAFULL gives N/N −1
//! and partial credit to other codes; such bases are rare in the data sets here). A column is
//! identical when its two bytes are equal (an `N` facing an `N` counts), in both engines.
//!
//! Two engines compute the same optimal local alignment:
//!
//! - [`Engine::Bio`], the default (`--metric swg`): rust-bio's `pairwise::Aligner::local`, the
//!   full dynamic programme with traceback from the maintained bioinformatics crate. Since
//!   rust-bio 4.0 a gap of length L scores `gap_open + (L − 1) · gap_extend`, the same
//!   convention as ours, so its scores are simply ours negated: gap_open −16, gap_extend −4.
//!   The substitution scores are [`Scoring::substitution`], handed to rust-bio as its score
//!   function.
//! - [`Engine::Native`] (`--metric swg:native`): tiers' own kernel below, one row of scores
//!   and one traceback byte per cell, no allocation per pair. It is kept because it is faster
//!   (about 3.4× on one core with `tiers bench distances`): rust-bio keeps three score columns,
//!   clip bookkeeping, a two-byte traceback cell and a vector of operations per alignment.
//!
//! Both give the same optimal score on every pair. When several alignments reach that score
//! they may trace back different ones, and so count different identities and lengths:
//!
//! - native: in a cell, stopping (score 0) wins a tie, then the diagonal, then a gap in `a`
//!   (a step along `b`), then a gap in `b`; a gap opens rather than extends on a tie; the
//!   alignment ends in the first best cell in row-major order (rows along `a`).
//! - rust-bio: the diagonal wins a tie, then a gap in `b` (its `Ins`, a step along `a`), then a
//!   gap in `a` (`Del`), then starting afresh, so a prefix that scores exactly 0 is kept; a gap
//!   opens rather than extends on a tie; its suffix-clip bookkeeping ends the alignment in the
//!   first best cell it finds scanning column by column (columns along `b`).
//!
//! On the Alu-like test sequences 3 to 4 % of the pairs have optimal alignments with different
//! summaries, and the engines pick different ones in under half of those; in every such pair
//! examined, rust-bio had kept a prefix that scores exactly 0. The tests compute, independently of both
//! tracebacks, the summaries of all the optimal alignments of many pairs, and check that both
//! engines reach the optimal score, that each summary is one of those, and so that the two
//! agree wherever that summary is unique.

use bio::alignment::pairwise;
use bio::alignment::AlignmentOperation;

/// Scoring parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scoring {
    /// Score of two identical unambiguous bases.
    pub matched: i32,
    /// Score of two different unambiguous bases.
    pub mismatch: i32,
    /// Score of a pair involving an ambiguity code.
    pub ambiguous: i32,
    /// Penalty of the first gap position (positive).
    pub open: i32,
    /// Penalty of each further gap position (positive).
    pub extend: i32,
}

impl Default for Scoring {
    fn default() -> Self {
        Scoring {
            matched: 5,
            mismatch: -4,
            ambiguous: -2,
            open: 16,
            extend: 4,
        }
    }
}

impl Scoring {
    /// The score of aligning base `x` with base `y`: `matched` for equal A/C/G/T, `mismatch`
    /// for different ones, `ambiguous` when either is anything else.
    #[inline(always)]
    pub fn substitution(&self, x: u8, y: u8) -> i32 {
        if x == y && unambiguous(x) {
            self.matched
        } else if unambiguous(x) && unambiguous(y) {
            self.mismatch
        } else {
            self.ambiguous
        }
    }
}

/// rust-bio's score function hook (its closures implement the same trait).
impl pairwise::MatchFunc for Scoring {
    #[inline(always)]
    fn score(&self, a: u8, b: u8) -> i32 {
        self.substitution(a, b)
    }
}

/// Summary of one local alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alignment {
    /// The optimal local score.
    pub score: i32,
    /// Columns where both sequences have the same base.
    pub identical: u32,
    /// Columns in the alignment, gaps included.
    pub length: u32,
}

impl Alignment {
    /// SPIDAL's distance: 1 − identical / length (1 when nothing aligns).
    pub fn distance(&self) -> f64 {
        if self.length == 0 {
            1.0
        } else {
            1.0 - f64::from(self.identical) / f64::from(self.length)
        }
    }
}

/// Which implementation aligns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Engine {
    /// rust-bio's local aligner (the default).
    #[default]
    Bio,
    /// tiers' own kernel (faster; same scores, see the module documentation for ties).
    Native,
}

/// An aligner with reusable buffers, so a worker aligns many pairs without reallocating.
pub struct Aligner {
    scoring: Scoring,
    state: State,
}

enum State {
    Bio(Box<pairwise::Aligner<Scoring>>),
    Native(Native),
}

impl Aligner {
    /// An aligner with the given scoring, on the default engine (rust-bio).
    pub fn new(scoring: Scoring) -> Aligner {
        Aligner::with_engine(scoring, Engine::Bio)
    }

    /// An aligner with the given scoring on the given engine.
    pub fn with_engine(scoring: Scoring, engine: Engine) -> Aligner {
        let state = match engine {
            Engine::Bio => State::Bio(Box::new(pairwise::Aligner::with_capacity(
                300,
                300,
                -scoring.open,
                -scoring.extend,
                scoring,
            ))),
            Engine::Native => State::Native(Native::default()),
        };
        Aligner { scoring, state }
    }

    /// The engine this aligner runs.
    pub fn engine(&self) -> Engine {
        match self.state {
            State::Bio(_) => Engine::Bio,
            State::Native(_) => Engine::Native,
        }
    }

    /// Aligns `a` against `b` locally and counts the identities and columns of the optimal
    /// alignment found (clipped ends are not columns).
    pub fn align(&mut self, a: &[u8], b: &[u8]) -> Alignment {
        match &mut self.state {
            State::Bio(al) => {
                let r = al.local(a, b);
                let (mut identical, mut length) = (0u32, 0u32);
                for op in &r.operations {
                    match op {
                        AlignmentOperation::Match => {
                            identical += 1;
                            length += 1;
                        }
                        AlignmentOperation::Subst
                        | AlignmentOperation::Ins
                        | AlignmentOperation::Del => length += 1,
                        AlignmentOperation::Xclip(_) | AlignmentOperation::Yclip(_) => {}
                    }
                }
                Alignment {
                    score: r.score,
                    identical,
                    length,
                }
            }
            State::Native(n) => n.align(&self.scoring, a, b),
        }
    }
}

const NEG: i32 = i32::MIN / 4;
// Traceback byte: bits 0-1 where H came from (0 stop, 1 diagonal, 2 E, 3 F);
// bit 2: E opened from H (else extended); bit 3: F opened from H (else extended).
const H_DIAG: u8 = 1;
const H_E: u8 = 2;
const H_F: u8 = 3;
const E_OPEN: u8 = 4;
const F_OPEN: u8 = 8;

fn unambiguous(b: u8) -> bool {
    matches!(b, b'A' | b'C' | b'G' | b'T')
}

/// The native kernel's buffers: one row of H and F scores, one traceback byte per cell.
#[derive(Default)]
struct Native {
    h: Vec<i32>,
    f: Vec<i32>,
    tb: Vec<u8>,
}

impl Native {
    /// Aligns `a` (rows) against `b` (columns) and counts identities and columns of the best
    /// local alignment (the first maximum in row-major order, for determinism).
    fn align(&mut self, sc: &Scoring, a: &[u8], b: &[u8]) -> Alignment {
        let (n, m) = (a.len(), b.len());
        let sc = *sc;
        let w = m + 1;
        self.h.clear();
        self.h.resize(w, 0);
        self.f.clear();
        self.f.resize(w, NEG);
        self.tb.clear();
        self.tb.resize((n + 1) * w, 0);
        let (mut best, mut bi, mut bj) = (0i32, 0usize, 0usize);
        for i in 1..=n {
            let ai = a[i - 1];
            let mut diag = 0i32; // H[i-1][j-1]
            let mut hleft = 0i32; // H[i][j-1]
            let mut e = NEG; // E[i][j-1]
            let row = &mut self.tb[i * w..(i + 1) * w];
            for j in 1..=m {
                let bj_ = b[j - 1];
                let s = sc.substitution(ai, bj_);
                let mut t = 0u8;
                // E: gap in `a` (move along b).
                let e_open = hleft - sc.open;
                let e_ext = e - sc.extend;
                e = if e_open >= e_ext {
                    t |= E_OPEN;
                    e_open
                } else {
                    e_ext
                };
                // F: gap in `b` (move along a); self.h[j] still holds H[i-1][j].
                let hup = self.h[j];
                let f_open = hup - sc.open;
                let f_ext = self.f[j] - sc.extend;
                let f = if f_open >= f_ext {
                    t |= F_OPEN;
                    f_open
                } else {
                    f_ext
                };
                self.f[j] = f;
                let d = diag + s;
                let mut h = 0;
                if d > h {
                    h = d;
                    t = (t & !3) | H_DIAG;
                }
                if e > h {
                    h = e;
                    t = (t & !3) | H_E;
                }
                if f > h {
                    h = f;
                    t = (t & !3) | H_F;
                }
                row[j] = t;
                diag = hup;
                self.h[j] = h;
                hleft = h;
                if h > best {
                    best = h;
                    bi = i;
                    bj = j;
                }
            }
        }
        // Traceback from the best cell.
        let (mut i, mut j) = (bi, bj);
        let (mut identical, mut length) = (0u32, 0u32);
        #[derive(PartialEq)]
        enum State {
            H,
            E,
            F,
        }
        let mut state = State::H;
        while i > 0 && j > 0 {
            let t = self.tb[i * w + j];
            match state {
                State::H => match t & 3 {
                    H_DIAG => {
                        length += 1;
                        if a[i - 1] == b[j - 1] {
                            identical += 1;
                        }
                        i -= 1;
                        j -= 1;
                    }
                    H_E => state = State::E,
                    H_F => state = State::F,
                    _ => break,
                },
                State::E => {
                    length += 1;
                    if t & E_OPEN != 0 {
                        state = State::H;
                    }
                    j -= 1;
                }
                State::F => {
                    length += 1;
                    if t & F_OPEN != 0 {
                        state = State::H;
                    }
                    i -= 1;
                }
            }
        }
        Alignment {
            score: best,
            identical,
            length,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alu::{generate, AluSpec};
    use crate::rng::Rng;

    const ENGINES: [Engine; 2] = [Engine::Bio, Engine::Native];

    fn al_with(engine: Engine, a: &[u8], b: &[u8]) -> Alignment {
        Aligner::with_engine(Scoring::default(), engine).align(a, b)
    }

    /// The alignment on both engines, checked to be the same.
    fn al(a: &[u8], b: &[u8]) -> Alignment {
        let x = al_with(Engine::Bio, a, b);
        assert_eq!(x, al_with(Engine::Native, a, b), "engines differ");
        x
    }

    #[test]
    fn identical_sequences() {
        let a = al(b"ACGTACGTAC", b"ACGTACGTAC");
        assert_eq!(
            a,
            Alignment {
                score: 50,
                identical: 10,
                length: 10
            }
        );
        assert_eq!(a.distance(), 0.0);
    }

    #[test]
    fn one_mismatch_in_the_middle() {
        // 10 columns, 9 identical: 9*5 - 4 = 41 beats stopping at either side (25 or 20).
        let a = al(b"ACGTAGGTAC", b"ACGTACGTAC");
        assert_eq!(
            a,
            Alignment {
                score: 41,
                identical: 9,
                length: 10
            }
        );
        assert!((a.distance() - 0.1).abs() < 1e-12);
    }

    #[test]
    fn affine_gap() {
        // b lacks 3 bases: one gap of 3 costs 16 + 2*4 = 24; 21 flanking matches give 105.
        let x = b"ACGTACGTACTTTGCATGCATGCA";
        let y = b"ACGTACGTACGCATGCATGCA";
        let a = al(x, y);
        assert_eq!(a.score, 21 * 5 - 24);
        assert_eq!(a.length, 24);
        assert_eq!(a.identical, 21);
        // Same result with the roles swapped.
        let b = al(y, x);
        assert_eq!(
            (b.score, b.identical, b.length),
            (a.score, a.identical, a.length)
        );
    }

    #[test]
    fn gap_of_length_l_costs_open_plus_l_minus_one_extends() {
        // 12 matching bases each side of a gap of L bases (1..=6) in one sequence only: the
        // gap is worth taking (120 - 36 at most, against 60 for one flank alone).
        let left = b"ACGTTGCAACGT";
        let right = b"TTGACCAGTGCA";
        for l in 1..=6usize {
            let mut x = left.to_vec();
            x.extend(vec![b'G'; l]);
            x.extend_from_slice(right);
            let y = [&left[..], &right[..]].concat();
            let cost = 16 + (l as i32 - 1) * 4;
            for (p, q) in [(&x, &y), (&y, &x)] {
                let a = al(p, q);
                assert_eq!(a.score, 24 * 5 - cost, "gap of {l}");
                assert_eq!((a.identical, a.length), (24, 24 + l as u32), "gap of {l}");
            }
        }
    }

    #[test]
    fn local_not_global() {
        // Unrelated flanks are left out of a local alignment.
        let a = al(b"TTTTTTACGTACGTGGGGGG", b"CCCCACGTACGTAAAA");
        assert_eq!(a.identical, 8);
        assert_eq!(a.length, 8);
        for e in ENGINES {
            assert_eq!(al_with(e, b"AAAA", b"CCCC").distance(), 1.0);
            assert_eq!(al_with(e, b"AAAA", b"CCCC").length, 0);
            assert_eq!(al_with(e, b"", b"ACGT").length, 0);
            assert_eq!(al_with(e, b"ACGT", b"").length, 0);
        }
    }

    #[test]
    fn ambiguity_codes() {
        // N/N is an identical column that scores -2; N against a base scores -2 too.
        let a = al(b"ACGTACGNACGTACG", b"ACGTACGNACGTACG");
        assert_eq!(a.score, 14 * 5 - 2);
        assert_eq!((a.identical, a.length), (15, 15));
        let a = al(b"ACGTACGNACGTACG", b"ACGTACGTACGTACG");
        assert_eq!(a.score, 14 * 5 - 2);
        assert_eq!((a.identical, a.length), (14, 15));
        assert_eq!(Scoring::default().substitution(b'R', b'R'), -2);
        assert_eq!(Scoring::default().substitution(b'A', b'A'), 5);
        assert_eq!(Scoring::default().substitution(b'A', b'T'), -4);
    }

    #[test]
    fn a_zero_scoring_prefix_is_a_tie_the_engines_break_differently() {
        // GTCA, a 2-base gap and AATTCAT/AATACAT score 20 - 20 + 26 = 26, as AATTCAT/AATACAT
        // alone: rust-bio keeps the zero-scoring prefix, the native kernel stops before it.
        let (x, y) = (b"GTCATGAATTCAT", b"GTCAAATACAT");
        let bio = al_with(Engine::Bio, x, y);
        let native = al_with(Engine::Native, x, y);
        assert_eq!((bio.score, bio.identical, bio.length), (26, 10, 13));
        assert_eq!((native.score, native.identical, native.length), (26, 6, 7));
        let (best, set) = optimal_summaries(&Scoring::default(), x, y);
        assert_eq!(best, 26);
        assert!(set.contains(&(10, 13)) && set.contains(&(6, 7)), "{set:?}");
    }

    /// The summaries (identities, columns) of a set of optimal paths.
    type Summaries = Vec<(u32, u32)>;

    /// The best score among `options` (score, summaries of the optimal paths, identities and
    /// columns the step adds) and the summaries of every option reaching it.
    fn best_of(options: &[(i32, &Summaries, u32, u32)]) -> (i32, Summaries) {
        let best = options.iter().map(|o| o.0).max().unwrap();
        let mut set: Summaries = options
            .iter()
            .filter(|o| o.0 == best)
            .flat_map(|o| o.1.iter().map(move |&(id, len)| (id + o.2, len + o.3)))
            .collect();
        set.sort_unstable();
        set.dedup();
        (best, set)
    }

    /// The optimal local score of `a` against `b` and the summaries (identities, columns) of
    /// all the local alignments that reach it, by Gotoh's recurrences carrying for each state
    /// the summaries of all the optimal paths into it (a path through an optimal alignment is
    /// optimal into each state it passes). Independent of both engines' tracebacks.
    fn optimal_summaries(sc: &Scoring, a: &[u8], b: &[u8]) -> (i32, Summaries) {
        let (n, m) = (a.len(), b.len());
        let neg = i32::MIN / 4;
        let empty: Summaries = vec![(0, 0)];
        let none: Summaries = Vec::new();
        // H: best alignment ending at (i, j), 0 for the empty one; E: ending with a gap in
        // `a` (a step along `b`); F: ending with a gap in `b` (a step along `a`). Row i - 1
        // of H and F is kept while row i is computed.
        let mut h_up: Vec<(i32, Summaries)> = vec![(0, empty.clone()); m + 1];
        let mut f_up: Vec<(i32, Summaries)> = vec![(neg, none.clone()); m + 1];
        let (mut best, mut set) = (0i32, empty.clone());
        for i in 1..=n {
            let mut h_row: Vec<(i32, Summaries)> = vec![(0, empty.clone())];
            let mut f_row: Vec<(i32, Summaries)> = vec![(neg, none.clone())];
            let mut e_left: (i32, Summaries) = (neg, none.clone());
            for j in 1..=m {
                let hl = &h_row[j - 1];
                let e = best_of(&[
                    (hl.0 - sc.open, &hl.1, 0, 1),
                    (e_left.0 - sc.extend, &e_left.1, 0, 1),
                ]);
                let (hu, fu) = (&h_up[j], &f_up[j]);
                let f = best_of(&[
                    (hu.0 - sc.open, &hu.1, 0, 1),
                    (fu.0 - sc.extend, &fu.1, 0, 1),
                ]);
                let d = &h_up[j - 1];
                let same = u32::from(a[i - 1] == b[j - 1]);
                let h = best_of(&[
                    (0, &empty, 0, 0),
                    (d.0 + sc.substitution(a[i - 1], b[j - 1]), &d.1, same, 1),
                    (e.0, &e.1, 0, 0),
                    (f.0, &f.1, 0, 0),
                ]);
                if h.0 > best {
                    (best, set) = (h.0, Vec::new());
                }
                if h.0 == best {
                    set.extend_from_slice(&h.1);
                }
                h_row.push(h);
                f_row.push(f);
                e_left = e;
            }
            h_up = h_row;
            f_up = f_row;
        }
        if best == 0 {
            set = empty; // no match anywhere: only the empty alignment scores 0
        }
        set.sort_unstable();
        set.dedup();
        (best, set)
    }

    /// A copy of `s` with point mutations, short indels and the odd ambiguity code.
    fn mutate(rng: &mut Rng, s: &[u8], rate: f64) -> Vec<u8> {
        let mut out = Vec::with_capacity(s.len() + 8);
        for &c in s {
            let u = rng.f64();
            if u < rate {
                out.push(b"ACGT"[rng.below(4) as usize]);
            } else if u < 1.2 * rate {
                // deletion
            } else if u < 1.4 * rate {
                out.push(c);
                for _ in 0..=rng.below(3) {
                    out.push(b"ACGT"[rng.below(4) as usize]);
                }
            } else if u < 1.45 * rate {
                out.push(b"NRY"[rng.below(3) as usize]);
            } else {
                out.push(c);
            }
        }
        out
    }

    /// Both engines on every ordered pair: the optimal score always, and each engine's
    /// identities and columns those of one of the optimal alignments, so the two agree wherever
    /// all the optimal alignments have the same summary. Returns the number of pairs with one
    /// summary, with several, and with several where the engines differ.
    fn check_engines(seqs: &[Vec<u8>]) -> (usize, usize, usize) {
        let sc = Scoring::default();
        let mut bio = Aligner::with_engine(sc, Engine::Bio);
        let mut native = Aligner::with_engine(sc, Engine::Native);
        let (mut unique, mut tied, mut differ) = (0, 0, 0);
        for i in 0..seqs.len() {
            for j in 0..seqs.len() {
                if i == j {
                    continue;
                }
                let (a, b) = (&seqs[i], &seqs[j]);
                let (x, y) = (bio.align(a, b), native.align(a, b));
                let (best, set) = optimal_summaries(&sc, a, b);
                assert_eq!(x.score, best, "bio score, pair {i} {j}");
                assert_eq!(y.score, best, "native score, pair {i} {j}");
                assert!(
                    set.contains(&(x.identical, x.length)),
                    "pair {i} {j}: bio {x:?} is none of the optimal alignments {set:?}"
                );
                assert!(
                    set.contains(&(y.identical, y.length)),
                    "pair {i} {j}: native {y:?} is none of the optimal alignments {set:?}"
                );
                if set.len() == 1 {
                    assert_eq!(x, y, "pair {i} {j}");
                    unique += 1;
                } else {
                    tied += 1;
                    differ += usize::from(x != y);
                }
            }
        }
        (unique, tied, differ)
    }

    #[test]
    fn engines_agree_on_alu_sequences() {
        // Both orders of every pair of 20 Alu-like sequences (about 280 bases, with indels).
        let seqs: Vec<Vec<u8>> = generate(&AluSpec {
            n: 20,
            indel: 0.01,
            seed: 7,
            ..Default::default()
        })
        .into_iter()
        .map(|s| s.record.seq)
        .collect();
        let (unique, tied, differ) = check_engines(&seqs);
        eprintln!(
            "alu: {unique} pairs with one optimal summary, {tied} with several, {differ} differing"
        );
        assert!(
            unique >= 9 * (unique + tied) / 10,
            "{unique} unique, {tied} tied"
        );
    }

    #[test]
    fn engines_agree_on_short_and_ambiguous_sequences() {
        // Short random sequences (ties are common) and mutated copies with ambiguity codes.
        let mut rng = Rng::new(11);
        let mut seqs: Vec<Vec<u8>> = Vec::new();
        for _ in 0..12 {
            let len = 8 + rng.below(40) as usize;
            let s: Vec<u8> = (0..len).map(|_| b"ACGT"[rng.below(4) as usize]).collect();
            seqs.push(mutate(&mut rng, &s, 0.1));
            seqs.push(s);
        }
        let (unique, tied, differ) = check_engines(&seqs);
        eprintln!("short: {unique} pairs with one optimal summary, {tied} with several, {differ} differing");
        assert!(unique > 0 && tied > 0, "{unique} unique, {tied} tied");
    }
}

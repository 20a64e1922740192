//! Smith-Waterman-Gotoh local alignment with affine gaps, and SPIDAL's alignment distance.
//!
//! SPIDAL computes its sequence distances with JAligner's Smith-Waterman-Gotoh using the
//! EDNAFULL nucleotide matrix, gap open 16 and gap extension 4, and takes
//! d = 1 − (identical pairs) / (alignment length) over the local alignment. We implement that
//! here rather than depending on an alignment crate: the full bioinformatics crates pull in a
//! large dependency tree for one 100-line dynamic programme, and we need the traceback counts
//! (identities, columns), not just the score. Gap convention as JAligner: a gap of length L
//! costs `open + (L − 1) · extend`. Scores: A/C/G/T match +5, mismatch −4 (EDNAFULL); any pair
//! involving an ambiguity code scores −2 (EDNAFULL gives N/N −1 and partial credit to other
//! codes; such bases are rare in the data sets here).

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

/// Reusable buffers, so a worker aligns many pairs without allocating.
#[derive(Default)]
pub struct Aligner {
    scoring: Scoring,
    h: Vec<i32>,
    f: Vec<i32>,
    tb: Vec<u8>,
}

impl Aligner {
    /// An aligner with the given scoring.
    pub fn new(scoring: Scoring) -> Aligner {
        Aligner {
            scoring,
            ..Default::default()
        }
    }

    /// Aligns `a` (rows) against `b` (columns) and counts identities and columns of the best
    /// local alignment (the first maximum in row-major order, for determinism).
    pub fn align(&mut self, a: &[u8], b: &[u8]) -> Alignment {
        let (n, m) = (a.len(), b.len());
        let sc = self.scoring;
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
                let s = if ai == bj_ && unambiguous(ai) {
                    sc.matched
                } else if unambiguous(ai) && unambiguous(bj_) {
                    sc.mismatch
                } else {
                    sc.ambiguous
                };
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

    fn al(a: &[u8], b: &[u8]) -> Alignment {
        Aligner::new(Scoring::default()).align(a, b)
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
    fn local_not_global() {
        // Unrelated flanks are left out of a local alignment.
        let a = al(b"TTTTTTACGTACGTGGGGGG", b"CCCCACGTACGTAAAA");
        assert_eq!(a.identical, 8);
        assert_eq!(a.length, 8);
        assert_eq!(al(b"AAAA", b"CCCC").distance(), 1.0);
        assert_eq!(al(b"", b"ACGT").length, 0);
    }
}

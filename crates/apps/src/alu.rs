//! Synthetic Alu-like sequences with planted family and subfamily labels.
//!
//! Real Alu repeats are ~280-base copies of one consensus that fall into families (AluJ, AluS,
//! AluY) and subfamilies separated by a few diagnostic mutations; each copy then drifts by a few
//! percent of point mutations and small indels and ends in a poly-A tail. This generator plants
//! that structure with a seeded RNG so that clustering can be scored against known labels.

use crate::fasta::Record;
use crate::rng::Rng;

/// The most subfamilies (families × subfamilies) a spec may plant.
pub const MAX_GROUPS: usize = 1 << 20;

/// Generator settings.
#[derive(Clone, Debug)]
pub struct AluSpec {
    /// Number of sequences.
    pub n: usize,
    /// Number of families.
    pub families: usize,
    /// Subfamilies per family.
    pub subfamilies: usize,
    /// Consensus length in bases.
    pub length: usize,
    /// Fraction of positions where a family differs from the consensus.
    pub family_divergence: f64,
    /// Fraction of positions where a subfamily differs from its family.
    pub subfamily_divergence: f64,
    /// Per-copy point mutation rate.
    pub mutation: f64,
    /// Per-copy rate of 1–3 base insertions or deletions, per position.
    pub indel: f64,
    /// Seed of the generator.
    pub seed: u64,
}

impl AluSpec {
    /// Checks the spec: at least one sequence, family and subfamily, rates between 0 and 1,
    /// and sequences that fit in memory.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |m: String| Err(crate::Error::Invalid(m));
        if self.n == 0 || self.families == 0 || self.subfamilies == 0 || self.length == 0 {
            return bad(format!(
                "sequences, families, subfamilies and length must be at least 1 (n {}, families {}, subfamilies {}, length {})",
                self.n, self.families, self.subfamilies, self.length
            ));
        }
        for (name, v) in [
            ("family divergence", self.family_divergence),
            ("subfamily divergence", self.subfamily_divergence),
            ("mutation rate", self.mutation),
            ("indel rate", self.indel),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(format!("the {name} must be between 0 and 1, not {v}"));
            }
        }
        // Every subfamily's consensus is made whatever `n` is: bounded, so that an absurd
        // count is an error rather than hours of work or an abort.
        let groups = crate::limits::mul("families x subfamilies", self.families, self.subfamilies)?;
        if groups > MAX_GROUPS {
            return bad(format!(
                "families x subfamilies is {groups}, more than the {MAX_GROUPS} planted subfamilies allowed"
            ));
        }
        crate::limits::check_alloc(
            "the subfamilies' consensus sequences",
            crate::limits::mul("subfamilies x length", groups, self.length)?,
            1,
        )?;
        // Each sequence, its FASTA text and its record: a few times the length, with indels.
        crate::limits::check_alloc(
            "the sequences",
            crate::limits::mul("sequences x length", self.n, self.length)?,
            8,
        )?;
        Ok(())
    }
}

impl Default for AluSpec {
    fn default() -> Self {
        AluSpec {
            n: 1000,
            families: 4,
            subfamilies: 3,
            length: 280,
            family_divergence: 0.12,
            subfamily_divergence: 0.04,
            mutation: 0.02,
            indel: 0.002,
            seed: 1,
        }
    }
}

/// A generated sequence with its planted labels.
#[derive(Clone, Debug)]
pub struct AluSeq {
    /// The record (id `alu<i>_f<F>_s<S>`).
    pub record: Record,
    /// Family index.
    pub family: usize,
    /// Subfamily index, global (family * subfamilies + local).
    pub subfamily: usize,
}

const BASES: &[u8; 4] = b"ACGT";

fn mutate_point(rng: &mut Rng, b: u8) -> u8 {
    loop {
        let c = BASES[rng.below(4) as usize];
        if c != b {
            return c;
        }
    }
}

/// Copies `src` with exactly `round(frac * len)` positions substituted (distinct positions), so
/// that family and subfamily separations are as planted, not just on average.
fn diverge(rng: &mut Rng, src: &[u8], frac: f64) -> Vec<u8> {
    let mut out = src.to_vec();
    let k = ((frac * src.len() as f64).round() as usize).min(src.len());
    let mut idx: Vec<usize> = (0..src.len()).collect();
    for i in 0..k {
        let j = i + rng.below((src.len() - i) as u64) as usize;
        idx.swap(i, j);
        out[idx[i]] = mutate_point(rng, out[idx[i]]);
    }
    out
}

/// Generates the sequences; sequence `i` belongs to subfamily `i % (families*subfamilies)`
/// so the labels are balanced.
///
/// # Panics
///
/// When a count of the spec is zero (`tiers data alu` checks them first).
pub fn generate(spec: &AluSpec) -> Vec<AluSeq> {
    assert!(spec.families > 0 && spec.subfamilies > 0 && spec.length > 0);
    let mut rng = Rng::new(spec.seed);
    let consensus: Vec<u8> = (0..spec.length)
        .map(|_| BASES[rng.below(4) as usize])
        .collect();
    let mut subs: Vec<Vec<u8>> = Vec::new();
    for _ in 0..spec.families {
        let fam = diverge(&mut rng, &consensus, spec.family_divergence);
        for _ in 0..spec.subfamilies {
            subs.push(diverge(&mut rng, &fam, spec.subfamily_divergence));
        }
    }
    let groups = subs.len();
    (0..spec.n)
        .map(|i| {
            let s = i % groups;
            let mut seq = Vec::with_capacity(spec.length + 40);
            for &b in &subs[s] {
                let r = rng.f64();
                if r < spec.indel / 2.0 {
                    continue; // deletion of this base (longer ones come from repeated draws)
                }
                let b = if rng.f64() < spec.mutation {
                    mutate_point(&mut rng, b)
                } else {
                    b
                };
                seq.push(b);
                if r >= spec.indel / 2.0 && r < spec.indel {
                    for _ in 0..1 + rng.below(3) {
                        seq.push(BASES[rng.below(4) as usize]);
                    }
                }
            }
            // Poly-A tail of 8–24 bases.
            let tail = 8 + rng.below(17) as usize;
            seq.resize(seq.len() + tail, b'A');
            let (f, _) = (s / spec.subfamilies, s % spec.subfamilies);
            AluSeq {
                record: Record {
                    id: format!("alu{i}_f{f}_s{s}"),
                    seq,
                },
                family: f,
                subfamily: s,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_family_counts_are_refused_before_any_work() {
        let with = |families, subfamilies| AluSpec {
            n: 10,
            families,
            subfamilies,
            ..Default::default()
        };
        assert!(with(4, 3).validate().is_ok());
        assert!(with(1 << 10, 1 << 10).validate().is_ok());
        for (f, s) in [(1 << 10, (1 << 10) + 1), (100_000_000, 3), (3, usize::MAX)] {
            let e = with(f, s).validate().unwrap_err().to_string();
            assert!(e.contains("families x subfamilies"), "{e}");
        }
    }

    #[test]
    fn deterministic_and_labelled() {
        let spec = AluSpec {
            n: 50,
            ..Default::default()
        };
        let a = generate(&spec);
        let b = generate(&spec);
        assert_eq!(a.len(), 50);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.record, y.record);
        }
        assert_eq!(a[13].subfamily, 13 % 12);
        assert_eq!(a[13].family, (13 % 12) / 3);
        for s in &a {
            assert!(s.record.seq.len() > 250 && s.record.seq.len() < 340);
            assert!(s.record.seq.ends_with(b"AAAAAAAA"));
        }
        let c = generate(&AluSpec { seed: 2, ..spec });
        assert_ne!(a[0].record.seq, c[0].record.seq);
    }
}

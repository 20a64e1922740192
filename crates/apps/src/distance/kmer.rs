//! An alignment-free k-mer distance (Edgar 2004, as MUSCLE's first stage uses):
//! d = 1 − Σ_τ min(n_a(τ), n_b(τ)) / min(K_a, K_b), where n_x(τ) counts k-mer τ in x and K_x is
//! the number of k-mers in x. It is cheap (a pass over 4^k counts per pair), tolerant of indels,
//! and tracks alignment identity closely for related sequences. K-mers touching an ambiguous
//! base (N, R, …) are skipped.

/// Dense k-mer count profile of one sequence.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    counts: Counts,
    total: u64,
}

/// The counts, 16 bits each where the sequence has too few k-mers for a count to pass
/// 65,535 (half the memory of 4^k counts per sequence, for the sequences of usual lengths),
/// else 32 bits; a count that would pass even that saturates, and the profile says so.
#[derive(Clone, Debug)]
enum Counts {
    Small(Vec<u16>),
    Large(Vec<u32>),
}

impl Default for Counts {
    fn default() -> Counts {
        Counts::Small(Vec::new())
    }
}

impl Profile {
    /// The number of k-mers counted (windows of k unambiguous bases).
    pub fn words(&self) -> u64 {
        self.total
    }

    /// Whether a count saturated (more than 2^32 − 1 of one k-mer): its distances are then
    /// not exact.
    pub fn saturated(&self) -> bool {
        matches!(&self.counts, Counts::Large(c) if c.contains(&u32::MAX))
    }
}

fn code(b: u8) -> Option<usize> {
    match b {
        b'A' => Some(0),
        b'C' => Some(1),
        b'G' => Some(2),
        b'T' => Some(3),
        _ => None,
    }
}

/// The count profile of `seq` for word length `k` (1..=8).
///
/// # Panics
///
/// When `k` is outside 1..=8 ([`Metric::parse`](super::Metric::parse) refuses those).
pub fn profile(seq: &[u8], k: usize) -> Profile {
    assert!((1..=8).contains(&k), "k-mer length must be 1..=8");
    // No count can pass the number of k-mers, at most len − k + 1.
    if seq.len() < usize::from(u16::MAX) + k {
        let (counts, total) = count::<u16>(seq, k);
        Profile {
            counts: Counts::Small(counts),
            total,
        }
    } else {
        let (counts, total) = count::<u32>(seq, k);
        Profile {
            counts: Counts::Large(counts),
            total,
        }
    }
}

/// A count of k-mers: `u16` or `u32`.
trait Count: Copy + Default + Into<u64> {
    fn inc(self) -> Self;
}

impl Count for u16 {
    fn inc(self) -> u16 {
        self.saturating_add(1)
    }
}

impl Count for u32 {
    fn inc(self) -> u32 {
        self.saturating_add(1)
    }
}

fn count<C: Count>(seq: &[u8], k: usize) -> (Vec<C>, u64) {
    let mut counts = vec![C::default(); 1 << (2 * k)];
    let mask = (1usize << (2 * k)) - 1;
    let (mut word, mut valid, mut total) = (0usize, 0usize, 0u64);
    for &b in seq {
        match code(b) {
            Some(c) => {
                word = ((word << 2) | c) & mask;
                valid += 1;
                if valid >= k {
                    counts[word] = counts[word].inc();
                    total += 1;
                }
            }
            None => valid = 0,
        }
    }
    (counts, total)
}

/// Σ min(x, y) over two count vectors.
fn shared<A: Count, B: Count>(a: &[A], b: &[B]) -> u64 {
    a.iter().zip(b).map(|(&x, &y)| x.into().min(y.into())).sum()
}

/// The k-mer distance of two profiles (1 when either has no k-mers).
pub fn distance(a: &Profile, b: &Profile) -> f64 {
    let denom = a.total.min(b.total);
    if denom == 0 {
        return 1.0;
    }
    let shared = match (&a.counts, &b.counts) {
        // The common case, as it was before long sequences had their own counts: 16-bit
        // minima summed in 32 bits (the sum is below 2^16 here), which vectorises well.
        (Counts::Small(x), Counts::Small(y)) => u64::from(
            x.iter()
                .zip(y)
                .map(|(&p, &q)| u32::from(p.min(q)))
                .sum::<u32>(),
        ),
        (Counts::Small(x), Counts::Large(y)) => shared(x, y),
        (Counts::Large(x), Counts::Small(y)) => shared(x, y),
        (Counts::Large(x), Counts::Large(y)) => shared(x, y),
    };
    (1.0 - shared as f64 / denom as f64).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_cases() {
        let k = 2;
        let a = profile(b"ACGT", k); // AC CG GT
        let b = profile(b"ACGA", k); // AC CG GA
        assert_eq!(distance(&a, &a), 0.0);
        assert!((distance(&a, &b) - (1.0 - 2.0 / 3.0)).abs() < 1e-12);
        let c = profile(b"TTTT", k);
        assert_eq!(distance(&a, &c), 1.0);
        // Ambiguous bases break words: ACNGT has AC and GT only.
        let d = profile(b"ACNGT", k);
        assert_eq!(d.total, 2);
        assert_eq!(distance(&d, &a), 0.0);
    }

    /// Sequences with more than 65,535 of one k-mer count exactly (the 16-bit counts of
    /// shorter sequences would saturate), against each other and against short ones.
    #[test]
    fn long_repetitive_sequences_count_exactly() {
        let long = vec![b'A'; 70_000];
        let a = profile(&long, 5);
        assert!(matches!(a.counts, Counts::Large(_)));
        assert_eq!(a.total, 69_996);
        assert_eq!(distance(&a, &a), 0.0);
        assert!(!a.saturated());
        let mut other = long.clone();
        other[35_000] = b'C';
        let b = profile(&other, 5);
        // 5 k-mers of A's lost to the C, 5 new ones: 69,991 of 69,996 shared.
        assert!((distance(&a, &b) - 5.0 / 69_996.0).abs() < 1e-12);
        let short = profile(&long[..1000], 5);
        assert!(matches!(short.counts, Counts::Small(_)));
        assert_eq!(distance(&short, &a), 0.0);
        assert_eq!(distance(&a, &short), 0.0);
    }
}

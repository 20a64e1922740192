//! An alignment-free k-mer distance (Edgar 2004, as MUSCLE's first stage uses):
//! d = 1 − Σ_τ min(n_a(τ), n_b(τ)) / min(K_a, K_b), where n_x(τ) counts k-mer τ in x and K_x is
//! the number of k-mers in x. It is cheap (a pass over 4^k counts per pair), tolerant of indels,
//! and tracks alignment identity closely for related sequences. K-mers touching an ambiguous
//! base (N, R, …) are skipped.

/// Dense k-mer count profile of one sequence.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    counts: Vec<u16>,
    total: u32,
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
    let mut counts = vec![0u16; 1 << (2 * k)];
    let mask = (1usize << (2 * k)) - 1;
    let (mut word, mut valid, mut total) = (0usize, 0usize, 0u32);
    for &b in seq {
        match code(b) {
            Some(c) => {
                word = ((word << 2) | c) & mask;
                valid += 1;
                if valid >= k {
                    counts[word] = counts[word].saturating_add(1);
                    total += 1;
                }
            }
            None => valid = 0,
        }
    }
    Profile { counts, total }
}

/// The k-mer distance of two profiles (1 when either has no k-mers).
pub fn distance(a: &Profile, b: &Profile) -> f64 {
    let denom = a.total.min(b.total);
    if denom == 0 {
        return 1.0;
    }
    let shared: u32 = a
        .counts
        .iter()
        .zip(&b.counts)
        .map(|(&x, &y)| u32::from(x.min(y)))
        .sum();
    (1.0 - f64::from(shared) / f64::from(denom)).max(0.0)
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
}

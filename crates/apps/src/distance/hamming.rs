//! Hamming distance: the fraction of differing positions of two equal-length sequences.

/// Fraction of positions where `a` and `b` differ; `None` when the lengths differ.
pub fn hamming(a: &[u8], b: &[u8]) -> Option<f64> {
    if a.len() != b.len() {
        return None;
    }
    if a.is_empty() {
        return Some(0.0);
    }
    let diff = a.iter().zip(b).filter(|(x, y)| x != y).count();
    Some(diff as f64 / a.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_cases() {
        assert_eq!(hamming(b"ACGT", b"ACGT"), Some(0.0));
        assert_eq!(hamming(b"ACGT", b"ACGA"), Some(0.25));
        assert_eq!(hamming(b"AAAA", b"TTTT"), Some(1.0));
        assert_eq!(hamming(b"ACG", b"ACGT"), None);
    }
}

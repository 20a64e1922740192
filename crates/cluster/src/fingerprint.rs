//! A stable 64-bit hash (FNV-1a) for fingerprints that processes compare: the same bytes give
//! the same value in every process and every build, which `std`'s `DefaultHasher` does not
//! promise. Used where ranks check that they were given the same arguments, and to name
//! shared objects after a path.

use std::hash::Hasher;

/// FNV-1a, 64 bits, as a [`Hasher`]: `value.hash(&mut Fingerprint::new())` fingerprints any
/// `Hash` value (integers as their native-endian bytes, strings with a terminator).
#[derive(Clone, Copy, Debug)]
pub struct Fingerprint(u64);

impl Fingerprint {
    /// The empty fingerprint (FNV's offset basis).
    pub const fn new() -> Fingerprint {
        Fingerprint(0xcbf2_9ce4_8422_2325)
    }

    /// The fingerprint of `bytes`.
    pub fn of(bytes: &[u8]) -> u64 {
        let mut h = Fingerprint::new();
        h.write(bytes);
        h.finish()
    }
}

impl Default for Fingerprint {
    fn default() -> Fingerprint {
        Fingerprint::new()
    }
}

impl Hasher for Fingerprint {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // FNV-1a 64 of "" and of "a" (the reference implementation's test vectors).
        assert_eq!(Fingerprint::of(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(Fingerprint::of(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}

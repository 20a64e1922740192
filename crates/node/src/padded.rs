//! Cache-line padding: the seed's lesson that per-processor data kept in a plain array shares
//! cache lines and runs many times slower than data kept a line apart.

use core::ops::{Deref, DerefMut};

/// Pads and aligns a value to 128 bytes: two 64-byte lines, because Intel's adjacent-line
/// prefetcher pulls lines in pairs (the same choice crossbeam makes on x86-64).
#[cfg_attr(any(target_arch = "x86_64", target_arch = "aarch64"), repr(align(128)))]
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    repr(align(64))
)]
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachePadded<T>(pub T);

impl<T> CachePadded<T> {
    /// Wraps `value`.
    pub const fn new(value: T) -> Self {
        CachePadded(value)
    }
    /// Unwraps the value.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> Deref for CachePadded<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for CachePadded<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// The cache-line size assumed for padding and alignment, in bytes.
pub const CACHE_LINE: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn padded_values_do_not_share_lines() {
        let v = [CachePadded::new(0u8), CachePadded::new(1u8)];
        let a = &v[0] as *const _ as usize;
        let b = &v[1] as *const _ as usize;
        assert!(b - a >= CACHE_LINE);
        assert_eq!(a % CACHE_LINE, 0);
        assert_eq!(*v[1], 1);
    }
}

//! The byte copy under a shared-memory write or read.
//!
//! A one-sided write between ranks of one host is one copy into the peer's mapping, so the copy
//! *is* the write's cost from a few KiB up. glibc's `memcpy` switches to `rep movsb` from about
//! 2–4 KiB (its `rep_movsb_threshold`), and on AMD Zen cores `rep movsb` moves a 4–16 KiB block
//! held in cache at about two thirds of the rate of a plain loop of 32-byte vector loads and
//! stores (measured here: 41 vs 61–71 GB/s at 4 KiB, 46 vs 64–75 GB/s at 8 KiB). MPI's
//! shared-memory `MPI_Put` is that `memcpy`. So in that size band, where most halo and block
//! transfers of the applications fall, tiers copies with its own AVX2 loop; below it and above
//! it (where the copy streams from memory and every method runs at the memory's rate) it calls
//! `memcpy`. The loop is chosen at run time: without AVX2 everything goes to `memcpy`.

/// Smallest length copied by the vector loop.
pub(crate) const VECTOR_MIN: usize = 2048;
/// Largest length copied by the vector loop (beyond this the copy is bound by memory).
pub(crate) const VECTOR_MAX: usize = 256 * 1024;

/// Copies `len` bytes from `src` to `dst`.
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`]: `src` valid for `len` reads, `dst` valid for `len`
/// writes, the two ranges disjoint. No alignment is required.
#[inline]
pub(crate) unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if (VECTOR_MIN..=VECTOR_MAX).contains(&len) && std::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 is present (checked just above); the pointer contract is the caller's.
            unsafe { copy_avx2(src, dst, len) };
            return;
        }
    }
    // SAFETY: the caller's contract is copy_nonoverlapping's.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
}

/// 128 bytes per step in four unaligned 32-byte loads then four stores (loads first, so the
/// core can run them ahead of the stores), the tail by `memcpy`.
///
/// # Safety
/// The CPU supports AVX2, and the contract of [`copy_bytes`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn copy_avx2(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_storeu_si256};
    let mut i = 0;
    while i + 128 <= len {
        // SAFETY: i + 128 <= len, so every 32-byte access lies inside the caller's ranges;
        // loadu/storeu accept any alignment.
        unsafe {
            let s = src.add(i) as *const __m256i;
            let d = dst.add(i) as *mut __m256i;
            let a = _mm256_loadu_si256(s);
            let b = _mm256_loadu_si256(s.add(1));
            let c = _mm256_loadu_si256(s.add(2));
            let e = _mm256_loadu_si256(s.add(3));
            _mm256_storeu_si256(d, a);
            _mm256_storeu_si256(d.add(1), b);
            _mm256_storeu_si256(d.add(2), c);
            _mm256_storeu_si256(d.add(3), e);
        }
        i += 128;
    }
    // SAFETY: the remaining len - i bytes lie inside both ranges.
    unsafe { std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length around the band's edges and the loop's step, at misaligned offsets, copies
    /// exactly the bytes asked for and nothing beside them.
    #[test]
    fn copies_exactly() {
        let src: Vec<u8> = (0..VECTOR_MAX + 300)
            .map(|i| (i * 131 % 251) as u8)
            .collect();
        let mut lens: Vec<usize> = vec![0, 1, 31, 127, 128, 129, 1000, VECTOR_MAX, VECTOR_MAX + 1];
        lens.extend(VECTOR_MIN - 2..VECTOR_MIN + 260);
        lens.extend([4096, 4096 + 77, 65536 - 3, 100_000]);
        for &len in &lens {
            for (so, d_off) in [(0, 0), (3, 0), (0, 5), (7, 33)] {
                let mut dst = vec![0xAAu8; len + 80];
                // SAFETY: src has so + len bytes, dst has d_off + len; separate vectors.
                unsafe { copy_bytes(src.as_ptr().add(so), dst.as_mut_ptr().add(d_off), len) };
                assert_eq!(&dst[d_off..d_off + len], &src[so..so + len], "len {len}");
                assert!(dst[..d_off].iter().all(|&b| b == 0xAA), "before, len {len}");
                assert!(
                    dst[d_off + len..].iter().all(|&b| b == 0xAA),
                    "after, len {len}"
                );
            }
        }
    }
}

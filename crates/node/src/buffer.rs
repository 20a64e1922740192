//! Aligned buffers: cache-line alignment keeps a worker's block from sharing its first and last
//! line with a neighbour's, and page alignment lets the operating system place every page on
//! the NUMA node of the worker that first touches it. [`AlignedBuf::first_touch`] lets each pool
//! worker initialise the block it will later work on, which is what puts it there.

use crate::pool::{Pool, Schedule};
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;
use std::alloc::{self, Layout};

/// An alignment for [`AlignedBuf`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// 64 bytes.
    CacheLine,
    /// 4096 bytes.
    Page,
    /// Any power of two.
    Bytes(usize),
}

impl Align {
    /// The alignment in bytes.
    pub fn bytes(self) -> usize {
        match self {
            Align::CacheLine => crate::padded::CACHE_LINE,
            Align::Page => 4096,
            Align::Bytes(b) => b,
        }
    }
}

/// A fixed-length slice of `T` whose start is aligned to at least [`Align`].
pub struct AlignedBuf<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    layout: Layout,
}

// SAFETY: the buffer owns its elements like a Box<[T]>.
unsafe impl<T: Copy + Send> Send for AlignedBuf<T> {}
// SAFETY: shared access only gives `&[T]`.
unsafe impl<T: Copy + Sync> Sync for AlignedBuf<T> {}

/// Why an [`AlignedBuf`] could not be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufError {
    /// The alignment is not a power of two, or above [`MAX_ALIGN`].
    Alignment(usize),
    /// `len` elements overflow the address space.
    TooLarge {
        /// Elements asked for.
        len: usize,
        /// Bytes of one.
        elem: usize,
    },
    /// The allocator had no room for this many bytes.
    OutOfMemory(usize),
}

impl core::fmt::Display for BufError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BufError::Alignment(a) => write!(
                f,
                "alignment {a}: a power of two up to {MAX_ALIGN} bytes is needed"
            ),
            BufError::TooLarge { len, elem } => write!(
                f,
                "{len} elements of {elem} bytes overflow the address space"
            ),
            BufError::OutOfMemory(b) => write!(f, "no memory for {b} bytes"),
        }
    }
}

impl std::error::Error for BufError {}

/// The largest alignment a buffer takes: 1 GiB (a huge page); beyond it the allocator's
/// padding alone would exhaust memory.
pub const MAX_ALIGN: usize = 1 << 30;

impl<T: Copy> AlignedBuf<T> {
    fn layout(len: usize, align: Align) -> Result<Layout, BufError> {
        let a = align.bytes().max(core::mem::align_of::<T>());
        if !a.is_power_of_two() || a > MAX_ALIGN {
            return Err(BufError::Alignment(a));
        }
        let elem = core::mem::size_of::<T>();
        let too_large = BufError::TooLarge { len, elem };
        let size = elem.checked_mul(len).ok_or(too_large.clone())?;
        Layout::from_size_align(size.max(1), a).map_err(|_| too_large)
    }

    /// Allocates room for `len` elements, uninitialised.
    fn alloc(len: usize, align: Align) -> Result<(NonNull<T>, Layout), BufError> {
        let layout = Self::layout(len, align)?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc::alloc(layout) } as *mut T;
        NonNull::new(p)
            .map(|p| (p, layout))
            .ok_or(BufError::OutOfMemory(layout.size()))
    }

    /// `len` copies of `value`, written by the calling thread.
    ///
    /// # Panics
    ///
    /// As [`AlignedBuf::try_filled`] fails, with its error.
    pub fn filled(len: usize, align: Align, value: T) -> Self {
        Self::try_filled(len, align, value).unwrap_or_else(|e| panic!("tiers: AlignedBuf: {e}"))
    }

    /// `len` copies of `value`, written by the calling thread; an error for an alignment
    /// that is not a power of two up to [`MAX_ALIGN`], a size that overflows, or no memory.
    pub fn try_filled(len: usize, align: Align, value: T) -> Result<Self, BufError> {
        let (ptr, layout) = Self::alloc(len, align)?;
        for i in 0..len {
            // SAFETY: i < len, inside the allocation.
            unsafe { ptr.as_ptr().add(i).write(value) };
        }
        Ok(AlignedBuf { ptr, len, layout })
    }

    /// `len` copies of `value`, each element written by the pool worker that a static schedule
    /// gives it to, so each page lands on that worker's NUMA node (first touch).
    ///
    /// # Panics
    ///
    /// As [`AlignedBuf::try_first_touch`] fails, with its error.
    pub fn first_touch(pool: &Pool, len: usize, align: Align, value: T) -> Self
    where
        T: Send + Sync,
    {
        Self::try_first_touch(pool, len, align, value)
            .unwrap_or_else(|e| panic!("tiers: AlignedBuf: {e}"))
    }

    /// As [`AlignedBuf::first_touch`]; the errors of [`AlignedBuf::try_filled`].
    pub fn try_first_touch(
        pool: &Pool,
        len: usize,
        align: Align,
        value: T,
    ) -> Result<Self, BufError>
    where
        T: Send + Sync,
    {
        let (ptr, layout) = Self::alloc(len, align)?;
        let base = SendPtr(ptr.as_ptr());
        pool.for_each_range(0..len, Schedule::Static, |r| {
            let base = &base;
            for i in r {
                // SAFETY: every index in 0..len is written exactly once, by one worker.
                unsafe { base.0.add(i).write(value) };
            }
        });
        Ok(AlignedBuf { ptr, len, layout })
    }

    /// The alignment actually used, in bytes.
    pub fn alignment(&self) -> usize {
        self.layout.align()
    }
}

struct SendPtr<T>(*mut T);
// SAFETY: used only to let workers write disjoint elements of one allocation.
unsafe impl<T> Sync for SendPtr<T> {}

impl<T: Copy> Deref for AlignedBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: ptr points at len initialised elements owned by self.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> DerefMut for AlignedBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in deref, with unique access through &mut self.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Drop for AlignedBuf<T> {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `alloc`; T: Copy needs no drop.
        unsafe { alloc::dealloc(self.ptr.as_ptr() as *mut u8, self.layout) }
    }
}

impl<T: Copy + core::fmt::Debug> core::fmt::Debug for AlignedBuf<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn alignment_and_contents() {
        for (align, bytes) in [
            (Align::CacheLine, 64),
            (Align::Page, 4096),
            (Align::Bytes(256), 256),
        ] {
            let mut b = AlignedBuf::filled(1000, align, 1.5f64);
            assert_eq!(b.as_ptr() as usize % bytes, 0);
            assert_eq!(b.alignment(), bytes);
            b[999] = 2.0;
            assert_eq!(b.iter().sum::<f64>(), 999.0 * 1.5 + 2.0);
        }
        let empty = AlignedBuf::<u8>::filled(0, Align::Page, 0);
        assert!(empty.is_empty());
    }

    #[test]
    fn first_touch_by_the_pool() {
        let pool = Pool::builder().threads(3).build().unwrap();
        let b = AlignedBuf::first_touch(&pool, 100_003, Align::Page, 7u32);
        assert_eq!(b.len(), 100_003);
        assert!(b.iter().all(|&v| v == 7));
        assert_eq!(b.as_ptr() as usize % 4096, 0);
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    /// Alignments and lengths no buffer can have are errors, not an abort in the allocator.
    #[test]
    fn impossible_buffers_are_errors() {
        for a in [MAX_ALIGN * 2, 1usize << 40, 1 << 63, 24] {
            assert!(
                matches!(
                    AlignedBuf::try_filled(10, Align::Bytes(a), 1u64),
                    Err(BufError::Alignment(_))
                ),
                "{a}"
            );
        }
        assert!(matches!(
            AlignedBuf::try_filled(usize::MAX, Align::CacheLine, 1u64),
            Err(BufError::TooLarge { .. })
        ));
        let b = AlignedBuf::try_filled(10, Align::Bytes(1 << 21), 7u8).unwrap();
        assert_eq!(b.alignment(), 1 << 21);
        assert!(b.iter().all(|&v| v == 7));
    }
}

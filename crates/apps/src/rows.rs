//! Parallel writes to disjoint row blocks of one buffer.
//!
//! The apps keep their N-row matrices (points, memberships, distance rows) in one contiguous
//! row-major `Vec`, so that a row block is a plain slice that could later live on another rank.
//! The node tier's `for_each_range` hands every worker sub-ranges that cover the range exactly
//! once and never overlap; this module turns that guarantee into `&mut` row-block slices. It is
//! the only place in the crate with `unsafe` code.

use core::marker::PhantomData;
use core::ops::Range;
use tiers_node::{Pool, Schedule};

/// A raw view of a row-major buffer that can be shared among workers.
struct RawRows<'a, T> {
    ptr: *mut T,
    rows: usize,
    width: usize,
    _life: PhantomData<&'a mut [T]>,
}

// SAFETY: `RawRows` is only used inside `par_rows*`, where each worker dereferences row ranges
// that `for_each_range` guarantees to be pairwise disjoint, so no element is reached from two
// threads; moving `&mut T` across threads requires `T: Send`.
unsafe impl<T: Send> Sync for RawRows<'_, T> {}

impl<'a, T> RawRows<'a, T> {
    fn new(data: &'a mut [T], width: usize) -> Self {
        assert!(width > 0, "row width must be positive");
        assert_eq!(
            data.len() % width,
            0,
            "buffer is not a whole number of rows"
        );
        RawRows {
            ptr: data.as_mut_ptr(),
            rows: data.len() / width,
            width,
            _life: PhantomData,
        }
    }

    /// # Safety
    /// No two live slices returned by this method may come from overlapping row ranges.
    #[allow(clippy::mut_from_ref)]
    unsafe fn rows(&self, r: &Range<usize>) -> &mut [T] {
        assert!(
            r.start <= r.end && r.end <= self.rows,
            "row range out of bounds"
        );
        // SAFETY: the range lies inside the buffer (checked above) and the caller promises it
        // overlaps no other live slice; the buffer outlives 'a, which bounds the result.
        unsafe {
            core::slice::from_raw_parts_mut(
                self.ptr.add(r.start * self.width),
                (r.end - r.start) * self.width,
            )
        }
    }
}

/// Calls `f(rows, block)` for sub-ranges `rows` of `0..data.len()/width` shared out by
/// `schedule`, where `block` is the `&mut` slice of exactly those rows. Every row is visited once.
pub fn par_rows<T, F>(pool: &Pool, data: &mut [T], width: usize, schedule: Schedule, f: F)
where
    T: Send,
    F: Fn(Range<usize>, &mut [T]) + Sync,
{
    let raw = RawRows::new(data, width);
    let n = raw.rows;
    pool.for_each_range(0..n, schedule, |r| {
        // SAFETY: for_each_range hands out pairwise-disjoint sub-ranges of 0..n.
        let block = unsafe { raw.rows(&r) };
        f(r, block)
    });
}

/// Like [`par_rows`] over two buffers with the same number of rows (widths may differ).
pub fn par_rows2<A, B, F>(
    pool: &Pool,
    a: &mut [A],
    wa: usize,
    b: &mut [B],
    wb: usize,
    schedule: Schedule,
    f: F,
) where
    A: Send,
    B: Send,
    F: Fn(Range<usize>, &mut [A], &mut [B]) + Sync,
{
    let ra = RawRows::new(a, wa);
    let rb = RawRows::new(b, wb);
    assert_eq!(ra.rows, rb.rows, "buffers differ in row count");
    let n = ra.rows;
    pool.for_each_range(0..n, schedule, |r| {
        // SAFETY: for_each_range hands out pairwise-disjoint sub-ranges of 0..n, and the two
        // buffers are distinct `&mut` borrows.
        let (x, y) = unsafe { (ra.rows(&r), rb.rows(&r)) };
        f(r, x, y)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_written_once() {
        let pool = Pool::builder().threads(2).build().unwrap();
        for sched in [Schedule::Static, Schedule::Blocked(3), Schedule::Dynamic(2)] {
            let mut v = vec![0u32; 17 * 3];
            par_rows(&pool, &mut v, 3, sched, |r, block| {
                for (k, row) in r.zip(block.chunks_mut(3)) {
                    for x in row.iter_mut() {
                        *x += k as u32 + 1;
                    }
                }
            });
            for (i, row) in v.chunks(3).enumerate() {
                assert!(row.iter().all(|&x| x == i as u32 + 1));
            }
        }
    }
}

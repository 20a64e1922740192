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

    /// Pointer to element `k` of the buffer (checked to lie inside it).
    fn elem(&self, k: usize) -> *mut T {
        assert!(k < self.rows * self.width, "element out of bounds");
        self.ptr.wrapping_add(k)
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

/// Slots of one buffer that workers fill each at most once, in an order a schedule decides
/// (the tiled Guttman transform's per-tile partial sums: a pair of tiles writes the slots of
/// two row blocks, which no row range expresses).
pub(crate) struct Slots<'a, T> {
    ptr: *mut T,
    len: usize,
    _life: PhantomData<&'a mut [T]>,
}

// SAFETY: workers only write through `put`, whose contract is that no slot is written by two
// threads nor read while the `Slots` lives (the `&mut` borrow keeps every other access out);
// moving a `T` across threads requires `T: Send`.
unsafe impl<T: Send> Sync for Slots<'_, T> {}

impl<'a, T: Copy> Slots<'a, T> {
    pub(crate) fn new(data: &'a mut [T]) -> Self {
        Slots {
            ptr: data.as_mut_ptr(),
            len: data.len(),
            _life: PhantomData,
        }
    }

    /// Writes slot `k` (checked to lie inside the buffer).
    ///
    /// # Safety
    /// No other thread may write slot `k` while this `Slots` lives.
    pub(crate) unsafe fn put(&self, k: usize, v: T) {
        assert!(k < self.len, "slot {k} out of bounds ({})", self.len);
        // SAFETY: k is inside the buffer (checked), which outlives 'a; the caller promises no
        // other thread writes this slot, and nothing reads the buffer while it is borrowed.
        unsafe { self.ptr.add(k).write(v) }
    }
}

/// Copies the upper triangle of the row-major n×n `data` onto its lower triangle
/// (`data[i][j] = data[j][i]` for j < i), rows claimed by the workers in blocks.
pub fn mirror_upper<T>(pool: &Pool, data: &mut [T], n: usize)
where
    T: Copy + Send + Sync,
{
    assert_eq!(data.len(), n * n, "matrix data is not {n}x{n}");
    let raw = RawRows::new(data, n.max(1));
    pool.for_each_range(0..n, Schedule::Dynamic(16), |r| {
        for i in r {
            for j in 0..i {
                // SAFETY: both indices lie inside the n×n buffer (`elem` checks). Element
                // (j, i) with j < i is in the upper triangle, which no worker writes during this
                // call; element (i, j) with j < i is in row i's lower triangle, which only the
                // one worker holding row i (for_each_range hands out disjoint rows) writes. The
                // accesses are by raw pointer to single elements, never through slices.
                unsafe { *raw.elem(i * n + j) = *raw.elem(j * n + i) };
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_makes_symmetric() {
        for threads in [1, 2, 3] {
            let pool = Pool::builder().threads(threads).build().unwrap();
            for n in [0, 1, 2, 7, 40] {
                let mut m: Vec<u32> = (0..n * n)
                    .map(|k| {
                        if k % n.max(1) > k / n.max(1) {
                            k as u32
                        } else {
                            0
                        }
                    })
                    .collect();
                mirror_upper(&pool, &mut m, n);
                for i in 0..n {
                    assert_eq!(m[i * n + i], 0);
                    for j in i + 1..n {
                        assert_eq!(m[i * n + j], (i * n + j) as u32);
                        assert_eq!(m[j * n + i], m[i * n + j]);
                    }
                }
            }
        }
    }

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

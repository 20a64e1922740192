//! Processor-private data (\[Mei2010\]): one value per worker, each in its own cache line, so
//! that workers updating their own copies never invalidate each other's caches. The seed
//! measured a plain array of per-core counters running many times slower than padded or
//! thread-local ones; `tiers bench private` repeats that measurement.

use crate::padded::CachePadded;

/// One `T` per worker, a cache line (or more) apart.
///
/// Worker `i` uses `get(i)`/`get_mut(i)`; any worker may read another's copy (for a final
/// reduction, or to steal work). With interior mutability (`Cell`-free types such as atomics)
/// the copies can be updated through `&self`; [`PerWorker::local`] finds the calling worker's
/// copy through the pool's thread-local worker index.
pub struct PerWorker<T> {
    slots: Box<[CachePadded<T>]>,
}

impl<T> PerWorker<T> {
    /// `n` copies made by `init(i)`.
    pub fn new(n: usize, mut init: impl FnMut(usize) -> T) -> Self {
        PerWorker {
            slots: (0..n).map(|i| CachePadded::new(init(i))).collect(),
        }
    }

    /// Number of copies.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// No copies at all.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Worker `i`'s copy.
    #[inline(always)]
    pub fn get(&self, i: usize) -> &T {
        &self.slots[i]
    }

    /// Worker `i`'s copy, mutably.
    #[inline(always)]
    pub fn get_mut(&mut self, i: usize) -> &mut T {
        &mut self.slots[i]
    }

    /// The calling worker's copy (by the index the pool gave this thread), or `None` outside a
    /// pool worker or when the index is out of range.
    #[inline]
    pub fn local(&self) -> Option<&T> {
        crate::pool::current_worker().and_then(|i| self.slots.get(i).map(|s| &**s))
    }

    /// Every copy, in worker order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().map(|s| &**s)
    }

    /// Every copy, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().map(|s| &mut **s)
    }

    /// The copies, unpadded.
    pub fn into_vec(self) -> Vec<T> {
        self.slots
            .into_vec()
            .into_iter()
            .map(CachePadded::into_inner)
            .collect()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn copies_are_separate_and_a_line_apart() {
        let mut p = PerWorker::new(4, |i| i as u64 * 10);
        *p.get_mut(2) += 1;
        assert_eq!(p.iter().copied().collect::<Vec<_>>(), vec![0, 10, 21, 30]);
        let a = p.get(0) as *const u64 as usize;
        let b = p.get(1) as *const u64 as usize;
        assert!(b - a >= 64);
        assert_eq!(p.into_vec(), vec![0, 10, 21, 30]);
    }

    #[test]
    fn shared_counters_sum_across_threads() {
        let p = PerWorker::new(3, |_| AtomicU64::new(0));
        std::thread::scope(|s| {
            for i in 0..3 {
                let p = &p;
                s.spawn(move || {
                    for _ in 0..1000 {
                        p.get(i).fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(
            p.iter().map(|c| c.load(Ordering::Relaxed)).sum::<u64>(),
            3000
        );
        assert!(p.local().is_none(), "not a pool worker");
    }
}

//! Locks and critical sections ([GPI-MCTP], Fig. 5: the time to pass through a critical section
//! that increments a shared integer).
//!
//! | lock | fairness | hand-off |
//! |---|---|---|
//! | [`TicketLock`] | FIFO | every waiter spins on one shared word, backing off in proportion to its place in line |
//! | [`McsLock`] | FIFO | every waiter spins on its own cache line; the holder hands over to its successor |
//! | [`TtasLock`] | none | test-and-test-and-set with exponential back-off; the lock stays where it is hot |
//!
//! [`Lock<R, T>`] puts data behind any of them and hands out guards; the lock is released when
//! the guard drops, so there is no manual unlock to forget. [`critical`] runs a closure inside
//! the process-wide critical section, like OpenMP's unnamed `critical`.

mod mcs;
mod ticket;
mod ttas;

pub use mcs::McsLock;
pub use ticket::TicketLock;
pub use ttas::TtasLock;

use crate::sync::UnsafeCell;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};

/// A raw mutual-exclusion lock.
///
/// # Safety
/// Implementations must guarantee that between a `lock` (or successful `try_lock`) and the
/// matching `unlock` no other `lock` returns, and that `unlock` releases (Release ordering)
/// what `lock` acquires (Acquire ordering).
pub unsafe trait RawLock: Send + Sync {
    /// What the holder keeps until it unlocks (the queue node of an MCS lock).
    type Token;
    /// Acquires the lock, waiting as long as needed.
    fn lock(&self) -> Self::Token;
    /// Acquires the lock if it is free.
    fn try_lock(&self) -> Option<Self::Token>;
    /// Releases the lock.
    ///
    /// # Safety
    /// `token` must come from a `lock`/`try_lock` of this lock, on this thread, not yet unlocked.
    unsafe fn unlock(&self, token: Self::Token);
    /// Short name for tables.
    const NAME: &'static str;
}

/// Data `T` protected by the raw lock `R`.
///
/// Aligned to a cache line: the lock word and (small) data travel together between cores,
/// and no neighbouring variable shares the line the lock makes hot.
#[repr(align(64))]
pub struct Lock<R: RawLock, T> {
    raw: R,
    data: UnsafeCell<T>,
}

// SAFETY: the lock hands out access to `T` to one thread at a time, so sharing the `Lock`
// only needs `T: Send` (exactly as for std::sync::Mutex).
unsafe impl<R: RawLock, T: Send> Sync for Lock<R, T> {}
// SAFETY: moving the lock moves the data; no guard can exist at that moment.
unsafe impl<R: RawLock, T: Send> Send for Lock<R, T> {}

impl<R: RawLock + Default, T> Lock<R, T> {
    /// Protects `value`.
    pub fn new(value: T) -> Self {
        Lock {
            raw: R::default(),
            data: UnsafeCell::new(value),
        }
    }
}

impl<R: RawLock, T> Lock<R, T> {
    /// Protects `value` with the given raw lock.
    pub fn with_raw(raw: R, value: T) -> Self {
        Lock {
            raw,
            data: UnsafeCell::new(value),
        }
    }

    /// Returns the data, consuming the lock.
    #[cfg(not(loom))]
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<R: RawLock, T> Lock<R, T> {
    /// Acquires the lock; it is released when the guard drops.
    ///
    /// # Panics
    ///
    /// An MCS lock panics when the thread already holds eight of them (its queue
    /// nodes are per thread); `try_lock` then answers `None`. Locking a lock this thread holds
    /// waits for ever, as with `std::sync::Mutex`.
    #[inline]
    pub fn lock(&self) -> LockGuard<'_, R, T> {
        let token = self.raw.lock();
        LockGuard {
            lock: self,
            token: core::mem::ManuallyDrop::new(token),
            _not_send: PhantomData,
        }
    }

    /// Acquires the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> Option<LockGuard<'_, R, T>> {
        let token = self.raw.try_lock()?;
        Some(LockGuard {
            lock: self,
            token: core::mem::ManuallyDrop::new(token),
            _not_send: PhantomData,
        })
    }

    /// Runs `f` inside the critical section guarded by this lock.
    #[inline]
    pub fn critical<U>(&self, f: impl FnOnce(&mut T) -> U) -> U {
        let mut g = self.lock();
        f(&mut g)
    }
}

/// Access to the data of a held [`Lock`]; unlocks on drop. Not `Send`: a lock is released by
/// the thread that took it (the MCS lock's queue node lives in that thread).
pub struct LockGuard<'a, R: RawLock, T> {
    lock: &'a Lock<R, T>,
    token: core::mem::ManuallyDrop<R::Token>,
    _not_send: PhantomData<*const ()>,
}

// SAFETY: a shared guard only gives `&T`, so it may be shared when `T: Sync`.
unsafe impl<R: RawLock, T: Sync> Sync for LockGuard<'_, R, T> {}

impl<R: RawLock, T> Deref for LockGuard<'_, R, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard proves the lock is held, so no one else accesses the data.
        self.lock.data.with(|p| unsafe { &*p })
    }
}

impl<R: RawLock, T> DerefMut for LockGuard<'_, R, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for deref, and `&mut self` makes this the only access through the guard.
        self.lock.data.with_mut(|p| unsafe { &mut *p })
    }
}

impl<R: RawLock, T> Drop for LockGuard<'_, R, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the token came from this lock's `lock`/`try_lock` on this thread (the guard is
        // not Send) and is taken out exactly once, here.
        unsafe {
            self.lock
                .raw
                .unlock(core::mem::ManuallyDrop::take(&mut self.token))
        }
    }
}

/// The process-wide critical section used by [`critical`].
#[cfg(not(loom))]
static CRITICAL: Lock<McsLock, ()> = Lock {
    raw: McsLock::new(),
    data: UnsafeCell::new(()),
};

/// Runs `f` inside the process-wide critical section (OpenMP's unnamed `critical`): no two
/// threads run a `critical` closure at the same time. Nesting `critical` deadlocks, as in OpenMP.
#[cfg(not(loom))]
pub fn critical<U>(f: impl FnOnce() -> U) -> U {
    let _g = CRITICAL.lock();
    f()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn hammer<R: RawLock + Default + 'static>(threads: usize, iters: usize) {
        let lock = Arc::new(Lock::<R, (u64, u64)>::new((0, 0)));
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..iters {
                        let mut g = lock.lock();
                        // Two fields updated non-atomically: a torn update shows a broken lock.
                        g.0 += 1;
                        std::hint::black_box(&mut *g);
                        g.1 += 1;
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let g = lock.lock();
        assert_eq!(
            *g,
            ((threads * iters) as u64, (threads * iters) as u64),
            "{}",
            R::NAME
        );
    }

    #[test]
    fn every_lock_excludes_with_more_threads_than_cores() {
        for t in [1, 2, 4, 8] {
            hammer::<TicketLock>(t, 20_000);
            hammer::<McsLock>(t, 20_000);
            hammer::<TtasLock>(t, 20_000);
        }
    }

    #[test]
    fn try_lock_fails_while_held() {
        let l = Lock::<McsLock, i32>::new(1);
        let g = l.lock();
        std::thread::scope(|s| {
            s.spawn(|| assert!(l.try_lock().is_none()));
        });
        drop(g);
        assert!(l.try_lock().is_some());
        let t = Lock::<TicketLock, i32>::new(1);
        let g = t.lock();
        std::thread::scope(|s| {
            s.spawn(|| assert!(t.try_lock().is_none()));
        });
        drop(g);
        assert_eq!(*t.try_lock().unwrap(), 1);
        let s = Lock::<TtasLock, i32>::new(1);
        let g = s.lock();
        assert!(s.try_lock().is_none());
        drop(g);
        assert!(s.try_lock().is_some());
    }

    #[test]
    fn mcs_guards_released_out_of_order() {
        let (a, b, c) = (
            Lock::<McsLock, u8>::new(0),
            Lock::<McsLock, u8>::new(0),
            Lock::<McsLock, u8>::new(0),
        );
        let ga = a.lock();
        let gb = b.lock();
        drop(ga);
        let gc = c.lock(); // must not reuse b's queue node
        drop(gb);
        drop(gc);
        std::thread::scope(|s| {
            s.spawn(|| *b.lock() += 1);
        });
        assert_eq!(*b.lock(), 1);
    }

    #[test]
    fn critical_sections_exclude() {
        let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let inside = Arc::new(std::sync::atomic::AtomicBool::new(false));
        std::thread::scope(|s| {
            for _ in 0..4 {
                let (counter, inside) = (counter.clone(), inside.clone());
                s.spawn(move || {
                    for _ in 0..5000 {
                        critical(|| {
                            assert!(!inside.swap(true, std::sync::atomic::Ordering::Relaxed));
                            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            inside.store(false, std::sync::atomic::Ordering::Relaxed);
                        });
                    }
                });
            }
        });
        assert_eq!(counter.load(std::sync::atomic::Ordering::Relaxed), 20_000);
    }

    #[test]
    fn critical_method_returns_value() {
        let l = Lock::<TicketLock, Vec<i32>>::new(vec![]);
        let n = l.critical(|v| {
            v.push(3);
            v.len()
        });
        assert_eq!(n, 1);
        assert_eq!(l.into_inner(), vec![3]);
    }
}

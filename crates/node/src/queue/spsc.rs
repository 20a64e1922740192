//! A bounded single-producer single-consumer ring: Lamport's queue with the producer's
//! index caching of Rigtorp/Folly, and a stamp per slot for the consumer.
//!
//! The producer keeps a private copy of the consumer's index and rereads the shared one only
//! when its copy says the ring is full. The consumer does not read the producer's index at
//! all: each slot carries the position of the message it holds (plus one), stored by the
//! producer after the value, so the consumer learns that a message is there from the line the
//! message itself is in. When the consumer keeps up with the producer (the common case: an
//! empty ring most of the time), a message then costs the transfer of its slot's line only,
//! and several messages that share a line travel together, where an index read by the consumer
//! would add a second line per message, bouncing between the two cores.

use super::Full;
use crate::padded::CachePadded;
use crate::sync::{Arc, AtomicUsize, Ordering, UnsafeCell};
use core::mem::MaybeUninit;

/// A message's place: the value and the stamp that says which position it holds.
struct Slot<T> {
    /// `pos + 1` once the message of position `pos` is in `value` (0: never written).
    stamp: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

pub(crate) struct Ring<T> {
    /// Next slot the consumer reads; written by the consumer only.
    head: CachePadded<AtomicUsize>,
    /// Next slot the producer writes; written by the producer only (the consumer reads it
    /// only for [`Ring::len`]).
    tail: CachePadded<AtomicUsize>,
    /// The producer's copy of `head`.
    head_cache: CachePadded<AtomicUsize>,
    mask: usize,
    slots: Box<[Slot<T>]>,
}

// SAFETY: slots are handed from one producer thread to one consumer thread through the
// Release/Acquire pairs on each slot's `stamp` (producer to consumer) and on `head` (consumer
// to producer); a slot is never accessed by both at once.
unsafe impl<T: Send> Send for Ring<T> {}
// SAFETY: as above; the producer and consumer halves are separate, unique handles.
unsafe impl<T: Send> Sync for Ring<T> {}

impl<T> Ring<T> {
    pub(crate) fn new(capacity: usize) -> Self {
        assert!(
            (1..=MAX_CAPACITY).contains(&capacity),
            "tiers: a queue's capacity is 1 to {MAX_CAPACITY} messages, not {capacity}"
        );
        let cap = capacity.next_power_of_two();
        Ring {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            head_cache: CachePadded::new(AtomicUsize::new(0)),
            mask: cap - 1,
            slots: (0..cap)
                .map(|_| Slot {
                    stamp: AtomicUsize::new(0),
                    value: UnsafeCell::new(MaybeUninit::uninit()),
                })
                .collect(),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Producer side.
    ///
    /// # Safety
    /// Only one thread at a time may act as this ring's producer.
    #[inline]
    pub(crate) unsafe fn push(&self, value: T) -> Result<(), Full<T>> {
        let t = self.tail.load(Ordering::Relaxed);
        let mut h = self.head_cache.load(Ordering::Relaxed);
        if t.wrapping_sub(h) > self.mask {
            h = self.head.load(Ordering::Acquire);
            self.head_cache.store(h, Ordering::Relaxed);
            if t.wrapping_sub(h) > self.mask {
                return Err(Full(value));
            }
        }
        let slot = &self.slots[t & self.mask];
        // SAFETY: slot t is outside [head, tail): the consumer has finished with it (Acquire on
        // head) and will not read it before our Release store of its stamp.
        slot.value.with_mut(|p| unsafe { (*p).write(value) });
        slot.stamp.store(t.wrapping_add(1), Ordering::Release);
        self.tail.store(t.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Producer side: free slots now, refreshing the producer's copy of `head`.
    ///
    /// # Safety
    /// Only the ring's producer may call it (it writes the producer's copy of `head`).
    #[inline]
    pub(crate) unsafe fn room(&self) -> usize {
        let h = self.head.load(Ordering::Acquire);
        self.head_cache.store(h, Ordering::Relaxed);
        self.capacity() - self.tail.load(Ordering::Relaxed).wrapping_sub(h)
    }

    /// Consumer side: takes up to `max` messages, handing each to `f`, and publishes the new
    /// head once. Returns how many were taken.
    ///
    /// # Safety
    /// Only one thread at a time may act as this ring's consumer.
    #[inline]
    pub(crate) unsafe fn drain(&self, max: usize, mut f: impl FnMut(T)) -> usize {
        // Whether the message of position `pos` is in its slot (Acquire: its value too).
        let ready = |pos: usize| {
            self.slots[pos & self.mask].stamp.load(Ordering::Acquire) == pos.wrapping_add(1)
        };
        let h = self.head.load(Ordering::Relaxed);
        if max == 0 || !ready(h) {
            return 0;
        }
        let mut n = 0;
        loop {
            // SAFETY: `ready` saw the stamp of message `h + n`, stored by the producer after
            // the value (Release, read with Acquire); we take the value out exactly once (head
            // moves past it before the callback can unwind).
            let v = self.slots[h.wrapping_add(n) & self.mask]
                .value
                .with(|p| unsafe { (*p).assume_init_read() });
            n += 1;
            if n == max || !ready(h.wrapping_add(n)) {
                // Publish progress once, before the last callback.
                self.head.store(h.wrapping_add(n), Ordering::Release);
                f(v);
                return n;
            }
            let guard = HeadOnUnwind {
                ring: self,
                pos: h.wrapping_add(n),
            };
            f(v);
            core::mem::forget(guard);
        }
    }

    /// Messages in the ring now (a snapshot).
    pub(crate) fn len(&self) -> usize {
        self.tail
            .load(Ordering::Acquire)
            .wrapping_sub(self.head.load(Ordering::Acquire))
    }
}

/// Publishes `pos` as the head if a consumer callback unwinds mid-batch.
struct HeadOnUnwind<'a, T> {
    ring: &'a Ring<T>,
    pos: usize,
}

impl<T> Drop for HeadOnUnwind<'_, T> {
    fn drop(&mut self) {
        self.ring.head.store(self.pos, Ordering::Release);
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // `&mut self` already orders both sides' accesses before this (through the `Arc`).
        // The Acquire loads say so to thread checkers too (DRD, under `tiers_valgrind`), which
        // see the stamps' annotated Release stores but not the `Arc`'s own synchronisation.
        let h = self.head.load(Ordering::Acquire);
        let t = self.tail.load(Ordering::Acquire);
        let mut pos = h;
        while pos != t {
            let slot = &self.slots[pos & self.mask];
            let _ = slot.stamp.load(Ordering::Acquire);
            // SAFETY: `&mut self`: no producer or consumer is left; [head, tail) holds values.
            slot.value.with_mut(|p| unsafe { (*p).assume_init_drop() });
            pos = pos.wrapping_add(1);
        }
    }
}

/// The sending half of an SPSC channel.
pub struct Producer<T> {
    ring: Arc<Ring<T>>,
}

/// The receiving half of an SPSC channel.
pub struct Consumer<T> {
    ring: Arc<Ring<T>>,
}

/// The largest capacity of a queue (2^32 messages: rounded up to a power of two, a larger
/// one would overflow, and its slots alone would not fit in memory).
pub const MAX_CAPACITY: usize = 1 << 32;

/// A bounded SPSC channel with room for at least `capacity` messages (rounded up to a power of two).
///
/// # Panics
///
/// When `capacity` is 0 or above [`MAX_CAPACITY`] (a fault of the caller).
pub fn channel<T: Send>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    let ring = Arc::new(Ring::new(capacity));
    (Producer { ring: ring.clone() }, Consumer { ring })
}

impl<T: Send> Producer<T> {
    /// Appends `value`, or gives it back if the ring is full.
    #[inline]
    pub fn try_push(&mut self, value: T) -> Result<(), Full<T>> {
        // SAFETY: `&mut self` on the unique producer handle.
        unsafe { self.ring.push(value) }
    }

    /// The ring's capacity.
    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }
}

impl<T: Send> Consumer<T> {
    /// Takes the oldest message.
    #[inline]
    pub fn try_pop(&mut self) -> Option<T> {
        let mut out = None;
        // SAFETY: `&mut self` on the unique consumer handle.
        unsafe { self.ring.drain(1, |v| out = Some(v)) };
        out
    }

    /// Hands every message present now to `f` (at most `max`); returns how many.
    #[inline]
    pub fn drain(&mut self, max: usize, f: impl FnMut(T)) -> usize {
        // SAFETY: `&mut self` on the unique consumer handle.
        unsafe { self.ring.drain(max, f) }
    }

    /// Messages waiting now.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// No message is waiting now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_full_and_empty() {
        let (mut p, mut c) = channel::<u32>(3);
        assert_eq!(p.capacity(), 4);
        assert_eq!(c.try_pop(), None);
        for i in 0..4 {
            p.try_push(i).unwrap();
        }
        assert_eq!(p.try_push(9), Err(Full(9)));
        assert_eq!(c.len(), 4);
        assert_eq!(c.try_pop(), Some(0));
        p.try_push(4).unwrap();
        let mut got = vec![];
        assert_eq!(c.drain(usize::MAX, |v| got.push(v)), 4);
        assert_eq!(got, vec![1, 2, 3, 4]);
        assert!(c.is_empty());
    }

    #[test]
    fn values_left_behind_are_dropped() {
        let v = std::sync::Arc::new(());
        {
            let (mut p, _c) = channel(8);
            for _ in 0..5 {
                p.try_push(v.clone()).unwrap();
            }
        }
        assert_eq!(std::sync::Arc::strong_count(&v), 1);
    }

    #[test]
    fn panicking_consumer_loses_nothing_and_duplicates_nothing() {
        let (mut p, mut c) = channel::<u32>(8);
        for i in 0..6 {
            p.try_push(i).unwrap();
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            c.drain(usize::MAX, |v| {
                if v == 2 {
                    panic!("boom")
                }
            })
        }));
        assert!(r.is_err());
        let mut rest = vec![];
        c.drain(usize::MAX, |v| rest.push(v));
        assert_eq!(rest, vec![3, 4, 5]);
    }

    #[test]
    fn stress_one_million_in_order() {
        let (mut p, mut c) = channel::<u64>(64);
        const N: u64 = 1_000_000;
        let t = std::thread::spawn(move || {
            for i in 0..N {
                let mut v = i;
                loop {
                    match p.try_push(v) {
                        Ok(()) => break,
                        Err(Full(back)) => {
                            v = back;
                            std::thread::yield_now();
                        }
                    }
                }
            }
        });
        let mut next = 0;
        while next < N {
            c.drain(usize::MAX, |v| {
                assert_eq!(v, next);
                next += 1;
            });
        }
        t.join().unwrap();
    }
}

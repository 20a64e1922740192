//! The inbox: the multi-producer single-consumer queue made of one SPSC ring per producer.

use super::spsc::Ring;
use super::{Full, NoRoom};
use crate::futex;
use crate::sync::{fence, Arc, AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Mutex, Ordering};
use crate::wait::Backoff;
use std::time::{Duration, Instant};

struct Shared<T> {
    /// Registered rings, `count` of them; each pointer comes from `Arc::into_raw`.
    rings: Box<[AtomicPtr<Ring<T>>]>,
    count: AtomicUsize,
    capacity: usize,
    /// Serialises registration (rare; never on the message path).
    register: Mutex<()>,
    /// Bumped by notifying senders; the consumer sleeps on it.
    bell: AtomicU32,
    /// The consumer is (about to be) asleep.
    sleeping: AtomicU32,
    /// The consumer (the `Inbox`) has been dropped: nobody will make room again.
    closed: AtomicBool,
    /// Makes `Shared<T>` Send/Sync exactly when rings of `T` are (when `T: Send`).
    _rings: core::marker::PhantomData<Ring<T>>,
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        let n = self.count.load(Ordering::Relaxed);
        for slot in &self.rings[..n] {
            // SAFETY: each registered pointer came from Arc::into_raw and is released once, here.
            unsafe { drop(Arc::from_raw(slot.load(Ordering::Relaxed) as *const Ring<T>)) };
        }
    }
}

/// The inbox of one consumer: a multi-producer single-consumer queue made of one lock-free SPSC
/// ring per producer.
///
/// The `Inbox` value is the consumer; [`Inbox::sender`] registers a producer, and cloning
/// an [`InboxSender`] registers another, so every producing thread owns its ring. Messages from one
/// sender arrive in the order sent; messages from different senders interleave.
pub struct Inbox<T> {
    shared: Arc<Shared<T>>,
    /// Ring to poll first next time (round-robin fairness).
    start: usize,
}

impl<T> Drop for Inbox<T> {
    /// Tells the senders: a push waiting for room would wait for ever.
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
    }
}

/// A producer of an [`Inbox`]: owns one ring. Clone it to get another producer (another ring).
pub struct InboxSender<T> {
    shared: Arc<Shared<T>>,
    ring: Arc<Ring<T>>,
}

/// How [`Inbox::pop_timeout`] waits before it sleeps: 256 looks a PAUSE apart (a few µs),
/// then straight to the futex. The consumer polls the producers' rings, which they write, so
/// it looks often only briefly.
const POP_SPIN: Backoff = Backoff::new().spin_limit(0).spin_steps(256).yield_limit(0);
/// How [`Inbox::recv_batch`] waits before it sleeps: 12 looks after pauses doubling from 1 to
/// 128 hints (then 128), 16 yields, then [`Inbox::pop_timeout`]. See `recv_batch` for why the
/// pauses grow.
const RECV_BATCH: Backoff = Backoff::new().spin_limit(7).spin_steps(12).yield_limit(16);
/// How [`InboxSender::push`] waits for room in a full ring: looks a PAUSE apart for
/// [`Backoff::SPIN_TIME`] (50 µs), then a yield before each look for as long as it takes (the
/// consumer, which makes the room, may need this core; nobody would wake a sleeping
/// producer). The spin is long because a yield is dear where another program shares this
/// core: the scheduler hands that program a whole slice (3-4 ms) while the consumer, on its
/// own core, frees the room within microseconds. With 63 looks (3 µs) before the first
/// yield, a producer sharing its core with a busy loop streamed 0.3-5 M messages/s against
/// crossbeam's 8-40 M; a consumer that shares the producer's core costs at most 50 µs per
/// ring of messages.
const PUSH: Backoff = Backoff::new()
    .spin_limit(0)
    .spin_for(Backoff::SPIN_TIME)
    .yield_limit(0)
    .never_sleep();

/// The default ring capacity per producer.
pub const DEFAULT_CAPACITY: usize = 1024;
/// The default maximum number of producers.
pub const DEFAULT_MAX_PRODUCERS: usize = 256;

impl<T: Send> Inbox<T> {
    /// A queue whose producers each get a ring of `capacity` messages (rounded up to a power of
    /// two), for up to [`DEFAULT_MAX_PRODUCERS`] producers.
    ///
    /// # Panics
    ///
    /// When `capacity` is 0 or above [`spsc::MAX_CAPACITY`](super::spsc::MAX_CAPACITY) (a
    /// fault of the caller).
    pub fn new(capacity: usize) -> Self {
        Self::with_max_producers(capacity, DEFAULT_MAX_PRODUCERS)
    }

    /// As [`Inbox::new`], for up to `max_producers` producers.
    ///
    /// # Panics
    ///
    /// As [`Inbox::new`], and when `max_producers` is 0 or above 2^20 (each takes a slot
    /// whether used or not).
    pub fn with_max_producers(capacity: usize, max_producers: usize) -> Self {
        assert!(
            (1..=1 << 20).contains(&max_producers),
            "tiers: a queue has room for 1 to 2^20 producers, not {max_producers}"
        );
        assert!(
            (1..=super::spsc::MAX_CAPACITY).contains(&capacity),
            "tiers: a queue's capacity is 1 to {} messages, not {capacity}",
            super::spsc::MAX_CAPACITY
        );
        Inbox {
            shared: Arc::new(Shared {
                rings: (0..max_producers)
                    .map(|_| AtomicPtr::new(core::ptr::null_mut()))
                    .collect(),
                count: AtomicUsize::new(0),
                capacity,
                register: Mutex::new(()),
                bell: AtomicU32::new(0),
                sleeping: AtomicU32::new(0),
                closed: AtomicBool::new(false),
                _rings: core::marker::PhantomData,
            }),
            start: 0,
        }
    }

    /// Registers a new producer.
    ///
    /// # Panics
    ///
    /// When the queue already has its maximum number of producers (every sender ever made
    /// counts, dropped or not); [`Inbox::try_sender`] answers that case with an error.
    pub fn sender(&self) -> InboxSender<T> {
        match try_register(&self.shared) {
            Ok(s) => s,
            Err(e) => panic!("tiers: {e}"),
        }
    }

    /// Registers a new producer, or says that the queue has no room for another.
    pub fn try_sender(&self) -> Result<InboxSender<T>, NoRoom> {
        try_register(&self.shared)
    }

    /// Registered producers.
    pub fn producers(&self) -> usize {
        self.shared.count.load(Ordering::Acquire)
    }

    /// Takes one message, if any.
    #[inline]
    pub fn try_pop(&mut self) -> Option<T> {
        let mut out = None;
        self.drain(1, |v| out = Some(v));
        out
    }

    /// Hands up to `max` waiting messages to `f`, visiting the producers round-robin and
    /// taking each producer's messages as one batch. Returns how many were taken.
    #[inline]
    pub fn drain(&mut self, max: usize, mut f: impl FnMut(T)) -> usize {
        let n = self.shared.count.load(Ordering::Acquire);
        let mut taken = 0;
        for k in 0..n {
            if taken >= max {
                break;
            }
            let mut i = self.start + k;
            if i >= n {
                i -= n;
            }
            let ring = self.shared.rings[i].load(Ordering::Acquire);
            // SAFETY: registered rings stay alive as long as `shared`; `&mut self` makes this
            // the only consumer.
            taken += unsafe { (*ring).drain(max - taken, &mut f) };
        }
        if n > 0 {
            self.start = if self.start + 1 >= n {
                0
            } else {
                self.start + 1
            };
        }
        taken
    }

    /// Waits up to `timeout` for a message: spins briefly, then sleeps. A sleeping consumer is
    /// woken at once by [`InboxSender::push_notify`]; plain pushes are noticed within a millisecond.
    pub fn pop_timeout(&mut self, timeout: Duration) -> Option<T> {
        let mut backoff = POP_SPIN;
        while !backoff.is_completed() {
            if let Some(v) = self.try_pop() {
                return Some(v);
            }
            backoff.snooze();
        }
        let deadline = crate::wait::after(Instant::now(), timeout);
        loop {
            let bell = self.shared.bell.load(Ordering::Acquire);
            self.shared.sleeping.store(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if let Some(v) = self.try_pop() {
                self.shared.sleeping.store(0, Ordering::Relaxed);
                return Some(v);
            }
            let now = Instant::now();
            if now >= deadline {
                self.shared.sleeping.store(0, Ordering::Relaxed);
                return None;
            }
            futex::wait(
                &self.shared.bell,
                bell,
                Some((deadline - now).min(Backoff::SLEEP_MAX)),
            );
            self.shared.sleeping.store(0, Ordering::Relaxed);
        }
    }

    /// Waits up to `timeout` for at least one message, then hands up to `max` waiting messages
    /// to `f`; returns how many (0 after a timeout).
    ///
    /// Polling adapts, as the VolpexMPI seed found a progress engine should: each empty poll
    /// doubles the pause before the next (up to a few microseconds), then the consumer yields
    /// and finally sleeps. A consumer that polls the rings as fast as it can steals the
    /// producers' cache lines on every message; backing off lets them fill several slots per
    /// visit, which is what makes a busy stream several times faster.
    pub fn recv_batch(&mut self, max: usize, timeout: Duration, mut f: impl FnMut(T)) -> usize {
        if max == 0 {
            return 0;
        }
        let mut backoff = RECV_BATCH;
        // The timeout runs from the end of the spin phase (no clock is read before it).
        let mut deadline = None;
        let deadline = loop {
            let n = self.drain(max, &mut f);
            if n > 0 {
                return n;
            }
            if !backoff.is_spinning() {
                let d =
                    *deadline.get_or_insert_with(|| crate::wait::after(Instant::now(), timeout));
                if backoff.is_completed() {
                    break d;
                }
                if Instant::now() >= d {
                    return 0;
                }
            }
            backoff.snooze();
        };
        match self.pop_timeout(deadline.saturating_duration_since(Instant::now())) {
            Some(v) => {
                f(v);
                1 + self.drain(max.saturating_sub(1), f)
            }
            None => 0,
        }
    }

    /// Messages waiting now (a snapshot).
    pub fn len(&self) -> usize {
        let n = self.shared.count.load(Ordering::Acquire);
        // SAFETY: registered rings live as long as `shared`.
        (0..n)
            .map(|i| unsafe { (*self.shared.rings[i].load(Ordering::Acquire)).len() })
            .sum()
    }

    /// No message is waiting now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn try_register<T: Send>(shared: &Arc<Shared<T>>) -> Result<InboxSender<T>, NoRoom> {
    let _g = shared.register.lock().unwrap_or_else(|e| e.into_inner());
    let n = shared.count.load(Ordering::Relaxed);
    if n >= shared.rings.len() {
        return Err(NoRoom {
            max_producers: shared.rings.len(),
        });
    }
    let ring = Arc::new(Ring::new(shared.capacity));
    shared.rings[n].store(
        Arc::into_raw(ring.clone()) as *mut Ring<T>,
        Ordering::Release,
    );
    shared.count.store(n + 1, Ordering::Release);
    Ok(InboxSender {
        shared: shared.clone(),
        ring,
    })
}

impl<T: Send> InboxSender<T> {
    /// Registers another producer with its own ring, or says that the queue has no room.
    pub fn try_clone(&self) -> Result<InboxSender<T>, NoRoom> {
        try_register(&self.shared)
    }

    /// Appends `value` to this producer's ring, or gives it back if the ring is full.
    #[inline]
    pub fn try_push(&mut self, value: T) -> Result<(), Full<T>> {
        // SAFETY: each sender owns its ring; `&mut self` makes this the only producer.
        unsafe { self.ring.push(value) }
    }

    /// Appends `value`, waiting (spinning, then yielding) while the ring is full. Once the
    /// consumer has been dropped ([`InboxSender::is_closed`]) it waits no more: a value that
    /// finds the ring full is dropped, since nobody will take it.
    ///
    /// A full ring means the consumer is the slower side: the producer then waits until an
    /// eighth of the ring is free before it writes again, so that it does not read the
    /// consumer's index after every message taken (each read would pull the line the
    /// consumer writes at every message, slowing the consumer further), and the two sides
    /// trade the index's line once per batch instead.
    #[inline]
    pub fn push(&mut self, value: T) {
        if let Err(Full(v)) = self.try_push(value) {
            self.push_when_room(v);
        }
    }

    #[cold]
    fn push_when_room(&mut self, mut value: T) {
        // The consumer may be asleep in `pop_timeout`, on a bell that plain pushes do not
        // ring: the full ring would then wait for its nap (up to a millisecond per ring of
        // messages, 100× slower than it should be where the two threads share a core). Ring
        // it, on this slow path only.
        self.wake_consumer();
        let refill = (self.ring.capacity() / 8).max(1);
        let mut backoff = PUSH;
        loop {
            if self.is_closed() {
                return;
            }
            backoff.snooze();
            // SAFETY: each sender owns its ring; `&mut self` makes this the only producer.
            if unsafe { self.ring.room() } >= refill {
                match self.try_push(value) {
                    Ok(()) => return,
                    Err(Full(v)) => value = v,
                }
            }
        }
    }

    /// Whether the consumer (the [`Inbox`]) has been dropped: what is pushed from then on is
    /// never taken.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// As [`InboxSender::try_push`], and wakes the consumer if it sleeps in
    /// [`Inbox::pop_timeout`]. Costs a full fence more than `try_push`.
    #[inline]
    pub fn push_notify(&mut self, value: T) -> Result<(), Full<T>> {
        self.try_push(value)?;
        self.wake_consumer();
        Ok(())
    }

    /// Wakes the consumer if it sleeps in [`Inbox::pop_timeout`]: the fence orders this
    /// producer's pushes before its look at `sleeping`, as the consumer's orders `sleeping`
    /// before its last look at the rings, so either the consumer sees the messages or this
    /// sees it asleep.
    fn wake_consumer(&self) {
        fence(Ordering::SeqCst);
        if self.shared.sleeping.load(Ordering::SeqCst) != 0 {
            self.shared.bell.fetch_add(1, Ordering::Release);
            futex::wake(&self.shared.bell, 1);
        }
    }
}

impl<T: Send> Clone for InboxSender<T> {
    /// Registers another producer with its own ring.
    ///
    /// # Panics
    ///
    /// As [`Inbox::sender`]; [`InboxSender::try_clone`] answers with an error instead.
    fn clone(&self) -> Self {
        match try_register(&self.shared) {
            Ok(s) => s,
            Err(e) => panic!("tiers: {e}"),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn per_producer_order_and_nothing_lost() {
        const P: usize = 6; // more producers than cores
        const N: u64 = 100_000;
        let mut q = Inbox::<(usize, u64)>::new(128);
        let tx = q.sender();
        let hs: Vec<_> = (0..P)
            .map(|p| {
                let mut tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..N {
                        tx.push((p, i));
                    }
                })
            })
            .collect();
        drop(tx);
        let mut next = [0u64; P];
        let mut got = 0;
        while got < P as u64 * N {
            got += q.drain(usize::MAX, |(p, i)| {
                assert_eq!(i, next[p], "producer {p} out of order");
                next[p] += 1;
            }) as u64;
        }
        for h in hs {
            h.join().unwrap();
        }
        assert!(next.iter().all(|&n| n == N));
        assert_eq!(q.producers(), P + 1);
        assert!(q.is_empty());
    }

    #[test]
    fn full_ring_is_reported() {
        let q = Inbox::<u8>::new(2);
        let mut tx = q.sender();
        tx.try_push(1).unwrap();
        tx.try_push(2).unwrap();
        assert_eq!(tx.try_push(3), Err(Full(3)));
        // Another producer has its own room.
        let mut tx2 = tx.clone();
        tx2.try_push(4).unwrap();
        assert_eq!(q.len(), 3);
    }

    #[test]
    #[should_panic(expected = "made for 2 producers has no room for another")]
    fn too_many_producers_panics() {
        let q = Inbox::<u8>::with_max_producers(4, 2);
        let _a = q.sender();
        let _b = q.sender();
        let _c = q.sender();
    }

    #[test]
    fn too_many_producers_is_an_error_on_the_try_forms() {
        let q = Inbox::<u8>::with_max_producers(4, 2);
        let a = q.try_sender().unwrap();
        let mut b = a.try_clone().unwrap();
        assert_eq!(q.try_sender().err(), Some(NoRoom { max_producers: 2 }));
        assert_eq!(a.try_clone().err(), Some(NoRoom { max_producers: 2 }));
        // The refused registrations took nothing: the two rings still work.
        b.try_push(7).unwrap();
        assert_eq!(q.producers(), 2);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn sleeping_consumer_is_woken_and_times_out() {
        let mut q = Inbox::<u32>::new(4);
        let t0 = Instant::now();
        assert_eq!(q.pop_timeout(Duration::from_millis(20)), None);
        assert!(t0.elapsed() >= Duration::from_millis(20));
        let mut tx = q.sender();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            tx.push_notify(7).unwrap();
            tx
        });
        assert_eq!(q.pop_timeout(Duration::from_secs(10)), Some(7));
        let mut tx = h.join().unwrap();
        tx.try_push(8).unwrap();
        assert_eq!(q.pop_timeout(Duration::from_secs(10)), Some(8));
        // A timeout of Duration::MAX is a wait without end, not an overflow (the messages
        // come after the spin, so that the deadline is computed).
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            tx.push_notify(9).unwrap();
            std::thread::sleep(Duration::from_millis(10));
            tx.push_notify(10).unwrap();
            tx
        });
        assert_eq!(q.pop_timeout(Duration::MAX), Some(9));
        let mut got = Vec::new();
        assert_eq!(q.recv_batch(8, Duration::MAX, |v| got.push(v)), 1);
        assert_eq!(got, [10]);
        drop(h.join().unwrap());
        let mut b = Backoff::new()
            .spin_for(Duration::MAX)
            .yield_for(Duration::MAX);
        b.snooze();
        assert!(b.is_spinning());
    }

    /// A sender whose consumer is gone never waits for room that will not come, and says so.
    #[test]
    fn a_push_to_a_dropped_inbox_does_not_wait() {
        let q = Inbox::new(2);
        let mut tx = q.sender();
        assert!(!tx.is_closed());
        drop(q);
        assert!(tx.is_closed());
        for i in 0..10 {
            tx.push(i);
        }
    }

    /// A batch of at most 0 messages takes none, whatever is waiting.
    #[test]
    fn a_batch_of_zero_takes_nothing() {
        let mut q = Inbox::new(4);
        let mut tx = q.sender();
        tx.push(1);
        let mut got = Vec::new();
        assert_eq!(
            q.recv_batch(0, Duration::from_millis(50), |v| got.push(v)),
            0
        );
        assert!(got.is_empty());
        assert_eq!(q.try_pop(), Some(1));
    }

    #[test]
    fn dropping_the_queue_drops_pending_messages() {
        let v = std::sync::Arc::new(());
        let q = Inbox::new(8);
        let mut tx = q.sender();
        tx.try_push(v.clone()).unwrap();
        drop(q);
        drop(tx);
        assert_eq!(std::sync::Arc::strong_count(&v), 1);
    }
}

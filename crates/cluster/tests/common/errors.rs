//! Typed errors: each bad argument is refused with the error that names its values, and
//! nothing is posted.

use super::{ok, Fixture, S1};
use tiers_cluster::{
    Error, Notification, SegId, Timeout, World, DEFAULT_QUEUE_DEPTH, NOTIFICATIONS,
};

/// A rank that does not exist, as a target of every kind of call.
pub fn bad_rank_is_refused(w: &World) {
    let f = Fixture::new(w);
    let n = f.n;
    let q = ok(w.queue(3), "queue");
    assert_eq!(
        q.write(S1.at(0), S1.on(n, 0), 8),
        Err(Error::NoSuchRank { rank: n, size: n })
    );
    assert_eq!(
        q.read(S1.at(0), S1.on(n + 5, 0), 8),
        Err(Error::NoSuchRank {
            rank: n + 5,
            size: n
        })
    );
    assert_eq!(
        w.atomic_fetch_add(S1, 0, n, 1),
        Err(Error::NoSuchRank { rank: n, size: n })
    );
    assert_eq!(
        q.atomic_store(S1.on(n, 0), 1),
        Err(Error::NoSuchRank { rank: n, size: n })
    );
    assert_eq!(
        w.passive_send(n, &[1], Timeout::Test),
        Err(Error::NoSuchRank { rank: n, size: n })
    );
    assert_eq!(w.health(n), Err(Error::NoSuchRank { rank: n, size: n }));
    assert_eq!(q.posted(), 0);
    f.done();
}

/// Ranges past the end of a segment, remote or local, including one whose end overflows.
pub fn out_of_bounds_is_refused(w: &World) {
    let f = Fixture::new(w);
    let (me, peer) = (f.me, f.next);
    let size1 = Fixture::size1(f.n);
    let q = ok(w.queue(3), "queue");
    assert_eq!(
        q.write(S1.at(0), S1.on(peer, size1 - 4), 8),
        Err(Error::OutOfBounds {
            rank: peer,
            seg: 1,
            offset: size1 - 4,
            len: 8,
            size: size1
        })
    );
    assert_eq!(
        q.read(S1.at(size1), S1.on(peer, 0), 1),
        Err(Error::OutOfBounds {
            rank: me,
            seg: 1,
            offset: size1,
            len: 1,
            size: size1
        })
    );
    assert_eq!(
        q.write(S1.at(0), S1.on(peer, usize::MAX), 2),
        Err(Error::OutOfBounds {
            rank: peer,
            seg: 1,
            offset: usize::MAX,
            len: 2,
            size: size1
        })
    );
    assert_eq!(
        w.atomic_compare_swap(S1, size1, peer, 0, 1),
        Err(Error::OutOfBounds {
            rank: peer,
            seg: 1,
            offset: size1,
            len: 8,
            size: size1
        })
    );
    assert_eq!(q.posted(), 0);
    let seg = ok(w.local(S1), "local");
    assert!(matches!(
        seg.get::<u64>(size1 / 8),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        seg.write(size1 - 1, &[0, 0]),
        Err(Error::OutOfBounds { .. })
    ));
    f.done();
}

/// A segment id nobody registered, remote or local.
pub fn unknown_segment_is_refused(w: &World) {
    let f = Fixture::new(w);
    let (me, peer) = (f.me, f.next);
    let q = ok(w.queue(3), "queue");
    assert_eq!(
        q.write(S1.at(0), SegId(9).on(peer, 0), 8),
        Err(Error::NoSuchSegment { seg: 9, rank: peer })
    );
    assert_eq!(
        q.write(SegId(9).at(0), S1.on(peer, 0), 8),
        Err(Error::NoSuchSegment { seg: 9, rank: me })
    );
    assert_eq!(
        w.atomic_fetch_add(SegId(9), 0, peer, 1),
        Err(Error::NoSuchSegment { seg: 9, rank: peer })
    );
    assert_eq!(
        w.notify_reset(SegId(9), 0),
        Err(Error::NoSuchSegment { seg: 9, rank: me })
    );
    assert!(matches!(w.local(SegId(9)), Err(Error::NoSuchSegment { seg: 9, rank }) if rank == me));
    assert_eq!(q.posted(), 0);
    f.done();
}

/// An atomic on a word that is not 8-aligned.
pub fn misaligned_atomic_is_refused(w: &World) {
    let f = Fixture::new(w);
    assert_eq!(
        w.atomic_fetch_add(S1, 4, f.next, 1),
        Err(Error::Misaligned {
            offset: 4,
            align: 8
        })
    );
    assert_eq!(
        f.q.atomic_store(S1.on(f.next, 12), 1),
        Err(Error::Misaligned {
            offset: 12,
            align: 8
        })
    );
    // A word that would end past the segment.
    let end = Fixture::size1(f.n);
    assert!(matches!(
        f.q.atomic_store(S1.on(f.next, end - 4), 1),
        Err(Error::OutOfBounds { .. } | Error::Misaligned { .. })
    ));
    for off in [end, usize::MAX - 7] {
        assert!(matches!(
            f.q.atomic_store(S1.on(f.next, off), 1),
            Err(Error::OutOfBounds { .. })
        ));
    }
    assert_eq!(f.q.posted(), 0);
    f.done();
}

/// Queue and notification ids out of range, an empty range, and the value 0 (which means
/// "not set").
pub fn bad_queue_or_notification_is_refused(w: &World) {
    let f = Fixture::new(w);
    let peer = f.next;
    let q = ok(w.queue(3), "queue");
    assert!(matches!(
        w.queue(8),
        Err(Error::NoSuchQueue { queue: 8, count: 8 })
    ));
    assert_eq!(NOTIFICATIONS, 1024);
    assert_eq!(
        q.notify(peer, S1, Notification { id: 1024, value: 1 }),
        Err(Error::NoSuchNotification {
            id: 1024,
            count: 1024
        })
    );
    assert_eq!(
        q.notify(peer, S1, Notification { id: 3, value: 0 }),
        Err(Error::ZeroNotification { id: 3 })
    );
    assert_eq!(
        w.notify_waitsome(S1, 5..5, Timeout::Test),
        Err(Error::NoSuchNotification { id: 5, count: 1024 })
    );
    assert_eq!(
        w.notify_waitsome(S1, 1000..1030, Timeout::Test),
        Err(Error::NoSuchNotification {
            id: 1029,
            count: 1024
        })
    );
    assert_eq!(
        w.notify_reset(S1, 5000),
        Err(Error::NoSuchNotification {
            id: 5000,
            count: 1024
        })
    );
    assert_eq!(q.posted(), 0);
    f.done();
}

/// A passive message longer than the engine carries.
pub fn oversized_passive_message_is_refused(w: &World) {
    let peer = (w.rank() + 1) % w.size();
    let big = vec![0u8; w.passive_max() + 1];
    assert_eq!(
        w.passive_send(peer, &big, Timeout::Test),
        Err(Error::MessageTooLarge {
            len: big.len(),
            max: w.passive_max()
        })
    );
    ok(w.barrier(Timeout::Block), "barrier");
}

/// A segment id beyond the limit, and one already registered.
pub fn bad_segment_ids_are_refused(w: &World) {
    let f = Fixture::new(w);
    assert!(matches!(
        w.segment(SegId(64), 8),
        Err(Error::SegmentIdTooLarge { seg: 64, max: 64 })
    ));
    assert!(matches!(
        w.segment(S1, 8),
        Err(Error::SegmentExists { seg: 1 })
    ));
    f.done();
}

/// A queue holds its depth of requests: one more is refused and nothing is posted; a wait
/// empties it.
pub fn full_queue_is_refused_until_a_wait(w: &World) {
    let f = Fixture::new(w);
    let me = f.me;
    let q = ok(w.queue(3), "queue");
    for i in 0..DEFAULT_QUEUE_DEPTH {
        ok(
            q.write(S1.at(0), S1.on(me, 8 * (i % 64) + 512), 8),
            "fill queue",
        );
    }
    assert_eq!(
        q.write(S1.at(0), S1.on(me, 0), 8),
        Err(Error::QueueFull {
            queue: 3,
            depth: DEFAULT_QUEUE_DEPTH
        })
    );
    assert_eq!(q.posted(), DEFAULT_QUEUE_DEPTH);
    ok(q.wait(Timeout::Block), "wait");
    assert_eq!(q.posted(), 0);
    ok(q.write(S1.at(0), S1.on(me, 0), 8), "after wait");
    ok(q.wait(Timeout::Block), "wait");
    ok(w.barrier(Timeout::Block), "barrier");
    f.done();
}

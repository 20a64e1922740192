//! The cluster-tier test suite, generic over the world it runs in: the same functions run as
//! threads (`local` engine) and as processes (`shm` engine).
#![allow(dead_code)]

use std::time::Duration;
use tiers_cluster::{Error, Health, Op, Reducible, SegId, Timeout, Transfer, World};

const S1: SegId = SegId(1);
const S2: SegId = SegId(2);

fn ok<T>(r: tiers_cluster::Result<T>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Every operation, ordering, list operations, timeouts, resumable collectives, errors.
pub fn suite(w: &World) {
    let (me, n) = (w.rank(), w.size());
    assert!(me < n);
    assert_eq!(w.state(), vec![Health::Healthy; n]);
    let blk = Timeout::Block;
    let seg = ok(w.segment(S1, 4096 + 64 * n), "segment 1");
    assert_eq!(seg.len(), 4096 + 64 * n);
    let s2 = ok(w.segment(S2, 1024 * (me + 1)), "segment 2");
    assert_eq!(s2.len(), 1024 * (me + 1));
    for r in 0..n {
        assert_eq!(ok(w.segment_size(S2, r), "size"), 1024 * (r + 1));
    }
    let q = ok(w.queue(1), "queue");
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;

    // write_notify ordering: 300 rounds of data + notification around the ring; the receiver
    // must always see the data of the round the notification announces.
    for round in 1..=300u32 {
        let v = [round as u8; 256];
        ok(seg.write(0, &v), "local write");
        ok(
            q.write_notify(S1, 0, next, S1, 1024, 256, 7, round),
            "write_notify",
        );
        ok(q.wait(blk), "wait");
        let id = ok(w.notify_waitsome(S1, 0..8, blk), "waitsome");
        assert_eq!(id, 7);
        assert_eq!(ok(w.notify_reset(S1, 7), "reset"), round);
        let mut got = [0u8; 256];
        ok(seg.read(1024, &mut got), "local read");
        assert!(
            got.iter().all(|&b| b == round as u8),
            "round {round}: data after notification"
        );
        // Nobody may run more than one round ahead (the notification would be overwritten).
        ok(q.notify(prev, S1, 8, round), "ack");
        ok(w.notify_waitsome(S1, 8..9, blk), "ack wait");
        ok(w.notify_reset(S1, 8), "ack reset");
    }
    ok(w.barrier(blk), "barrier");

    // Plain writes and reads into every rank, then check.
    for r in 0..n {
        let pat: Vec<u8> = (0..64).map(|i| (me * 31 + r * 7 + i) as u8).collect();
        ok(seg.write(2048, &pat), "pattern");
        ok(q.write(S1, 2048, r, S1, 4096 + 64 * me, 64), "write");
        ok(q.wait(blk), "wait");
    }
    ok(w.barrier(blk), "barrier");
    for src in 0..n {
        let mut got = [0u8; 64];
        ok(seg.read(4096 + 64 * src, &mut got), "read back");
        let want: Vec<u8> = (0..64).map(|i| (src * 31 + me * 7 + i) as u8).collect();
        assert_eq!(&got[..], &want[..], "data from rank {src}");
    }
    // Read what `next` received from me.
    ok(q.read(S1, 3000, next, S1, 4096 + 64 * me, 64), "read");
    ok(q.wait(blk), "wait");
    let mut got = [0u8; 64];
    ok(seg.read(3000, &mut got), "read local");
    let want: Vec<u8> = (0..64).map(|i| (me * 31 + next * 7 + i) as u8).collect();
    assert_eq!(&got[..], &want[..]);
    ok(w.barrier(blk), "barrier");

    // List operations: 8 writes of 8 bytes each into `next`'s segment 2, then one notification.
    for i in 0..8u64 {
        ok(s2.set::<u64>(i as usize, (me as u64) << 32 | i), "set");
    }
    let list: Vec<Transfer> = (0..8)
        .map(|i| Transfer::new(S2, 8 * i, next, S2, 512 + 8 * (7 - i), 8))
        .collect();
    ok(
        q.write_list_notify(&list, next, S2, 3, 5),
        "write_list_notify",
    );
    ok(q.wait(blk), "wait");
    assert_eq!(ok(w.notify_waitsome(S2, 0..8, blk), "list waitsome"), 3);
    assert_eq!(ok(w.notify_reset(S2, 3), "reset"), 5);
    assert_eq!(ok(w.notify_reset(S2, 3), "reset again"), 0);
    for i in 0..8u64 {
        assert_eq!(
            ok(s2.get::<u64>(64 + (7 - i as usize)), "get"),
            (prev as u64) << 32 | i
        );
    }
    let rl: Vec<Transfer> = (0..4)
        .map(|i| Transfer::new(S2, 256 + 8 * i, prev, S2, 8 * i, 8))
        .collect();
    ok(w.barrier(blk), "barrier");
    ok(q.read_list(&rl), "read_list");
    ok(q.wait(blk), "wait");
    for i in 0..4u64 {
        assert_eq!(
            ok(s2.get::<u64>(32 + i as usize), "get"),
            (prev as u64) << 32 | i
        );
    }
    ok(w.barrier(blk), "barrier");

    // Timeouts: nothing set, nothing sent.
    assert_eq!(
        w.notify_waitsome(S1, 100..200, Timeout::Test),
        Err(Error::Timeout)
    );
    assert_eq!(
        w.notify_waitsome(S1, 100..200, Timeout::millis(20)),
        Err(Error::Timeout)
    );
    let mut buf = vec![0u8; 64 * 1024];
    assert_eq!(
        w.passive_receive(&mut buf, Timeout::Test),
        Err(Error::Timeout)
    );
    assert_eq!(
        w.passive_receive(&mut buf, Timeout::millis(10)),
        Err(Error::Timeout)
    );

    // Resumable barrier and allreduce: rank 0 starts them while the others are held back.
    if n > 1 {
        if me == 0 {
            assert_eq!(w.barrier(Timeout::Test), Err(Error::Timeout));
            assert_eq!(w.barrier(Timeout::millis(5)), Err(Error::Timeout));
            for r in 1..n {
                ok(q.notify(r, S1, 20, 1), "release");
            }
            ok(q.wait(blk), "wait");
            ok(w.barrier(blk), "resumed barrier");
            let x = vec![1.5f64; 1000];
            let mut y = vec![0.0f64; 1000];
            assert_eq!(
                w.allreduce(&x, &mut y, Op::Sum, Timeout::Test),
                Err(Error::Timeout)
            );
            for r in 1..n {
                ok(q.notify(r, S1, 21, 1), "release");
            }
            ok(q.wait(blk), "wait");
            ok(w.allreduce(&x, &mut y, Op::Sum, blk), "resumed allreduce");
            assert!(
                y.iter().all(|&v| v == 1.5 * n as f64),
                "resumed allreduce result"
            );
            // The same for an allreduce small enough to travel with its arrival flag.
            let mut z = [0.0f64; 2];
            assert_eq!(
                w.allreduce(&[2.5f64, -1.0], &mut z, Op::Sum, Timeout::Test),
                Err(Error::Timeout)
            );
            assert_eq!(
                w.allreduce(&[2.5f64, -1.0], &mut z, Op::Sum, Timeout::millis(5)),
                Err(Error::Timeout)
            );
            for r in 1..n {
                ok(q.notify(r, S1, 22, 1), "release");
            }
            ok(q.wait(blk), "wait");
            ok(
                w.allreduce(&[2.5f64, -1.0], &mut z, Op::Sum, blk),
                "resumed small allreduce",
            );
            assert_eq!(
                z,
                [2.5 * n as f64, -(n as f64)],
                "resumed small allreduce result"
            );
        } else {
            ok(w.notify_waitsome(S1, 20..21, blk), "held");
            ok(w.notify_reset(S1, 20), "reset");
            ok(w.barrier(blk), "barrier");
            let x = vec![1.5f64; 1000];
            let mut y = vec![0.0f64; 1000];
            ok(w.notify_waitsome(S1, 21..22, blk), "held");
            ok(w.notify_reset(S1, 21), "reset");
            ok(w.allreduce(&x, &mut y, Op::Sum, blk), "allreduce");
            assert!(y.iter().all(|&v| v == 1.5 * n as f64));
            ok(w.notify_waitsome(S1, 22..23, blk), "held");
            ok(w.notify_reset(S1, 22), "reset");
            let mut z = [0.0f64; 2];
            ok(
                w.allreduce(&[2.5f64, -1.0], &mut z, Op::Sum, blk),
                "small allreduce",
            );
            assert_eq!(z, [2.5 * n as f64, -(n as f64)]);
        }
    }

    allreduce_all(w);

    // Atomics: every rank adds 1 to rank 0's word 100 times; one compare-swap wins.
    for _ in 0..100 {
        ok(w.atomic_fetch_add(S1, 3584, 0, 1), "fetch_add");
    }
    let old = ok(
        w.atomic_compare_swap(S1, 3592, n - 1, 0, me as u64 + 1),
        "cas",
    );
    ok(w.barrier(blk), "barrier");
    let won = (old == 0) as u64;
    let mut wins = [0u64];
    ok(w.allreduce(&[won], &mut wins, Op::Sum, blk), "allreduce");
    assert_eq!(wins[0], 1, "exactly one compare-swap wins");
    if me == 0 {
        assert_eq!(ok(seg.get::<u64>(448), "counter"), 100 * n as u64);
    }
    if me == n - 1 {
        let v = ok(seg.get::<u64>(449), "cas word");
        assert!(v >= 1 && v <= n as u64);
    }
    let cur = ok(w.atomic_fetch_add(S1, 3584, 0, 0), "read counter");
    assert_eq!(cur, 100 * n as u64);
    ok(w.barrier(blk), "barrier");

    // Passive messages around the ring, then a full mailbox and a short buffer.
    let msg: Vec<u8> = (0..100 + me).map(|i| (i + me) as u8).collect();
    ok(w.passive_send(next, &msg, blk), "passive send");
    let (from, len) = ok(w.passive_receive(&mut buf, blk), "passive receive");
    assert_eq!((from, len), (prev, 100 + prev));
    assert!(buf[..len]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == (i + prev) as u8));
    ok(w.barrier(blk), "barrier");
    if me == 0 {
        let mut k = 0u32;
        loop {
            match w.passive_send(0, &k.to_le_bytes(), Timeout::Test) {
                Ok(()) => k += 1,
                Err(Error::Timeout) => break,
                Err(e) => panic!("self send: {e}"),
            }
            assert!(k < 10_000, "a mailbox must fill up");
        }
        assert!(k >= 1);
        let mut small = [0u8; 2];
        assert_eq!(
            w.passive_receive(&mut small, Timeout::Test),
            Err(Error::BufferTooSmall { need: 4, have: 2 })
        );
        for i in 0..k {
            let (from, len) = ok(w.passive_receive(&mut buf, Timeout::Test), "drain");
            assert_eq!((from, len), (0, 4));
            assert_eq!(u32::from_le_bytes(buf[..4].try_into().unwrap()), i, "FIFO");
        }
    }
    ok(w.barrier(blk), "barrier");

    errors(w);

    // Delete and re-create.
    ok(w.segment_delete(S2, blk), "delete");
    assert_eq!(
        q.write(S1, 0, next, S2, 0, 8),
        Err(Error::NoSuchSegment { seg: 2, rank: next })
    );
    let s2 = ok(w.segment(S2, 128), "re-create");
    assert_eq!(s2.len(), 128);
    assert_eq!(ok(s2.get::<u64>(0), "zeroed"), 0);
    ok(q.write(S1, 0, next, S2, 120, 8), "write to re-created");
    ok(q.wait(blk), "wait");
    ok(w.barrier(blk), "final barrier");
}

fn check_reduce<T: Reducible + PartialEq + std::fmt::Debug>(
    w: &World,
    len: usize,
    f: impl Fn(usize, usize) -> T,
    fold: impl Fn(T, T) -> T,
    op: Op,
) {
    let (me, n) = (w.rank(), w.size());
    let x: Vec<T> = (0..len).map(|i| f(me, i)).collect();
    let mut y: Vec<T> = x.clone();
    ok(w.allreduce(&x, &mut y, op, Timeout::Block), "allreduce");
    for (i, got) in y.iter().enumerate() {
        let mut want = f(0, i);
        for r in 1..n {
            want = fold(want, f(r, i));
        }
        assert_eq!(*got, want, "{op:?} element {i} of {len}");
    }
}

fn allreduce_all(w: &World) {
    // 1 to 14 four-byte elements travel with the arrival flags (up to 56 bytes); 15 and 3000
    // take the general path.
    for len in [1usize, 7, 14, 15, 3000] {
        check_reduce(
            w,
            len,
            |r, i| (r as i32 - 2) * (i as i32 % 97),
            |a, b| a.wrapping_add(b),
            Op::Sum,
        );
        check_reduce(
            w,
            len,
            |r, i| (r as i32 - 2) * (i as i32 % 97),
            |a, b| a.min(b),
            Op::Min,
        );
        check_reduce(
            w,
            len,
            |r, i| (r as u32 + 1) * (i as u32),
            |a, b| a.max(b),
            Op::Max,
        );
        check_reduce(
            w,
            len,
            |r, i| (r as u32) ^ (i as u32),
            |a, b| a.wrapping_add(b),
            Op::Sum,
        );
        check_reduce(
            w,
            len,
            |r, i| (i as i64) << 33 | r as i64,
            |a, b| a.max(b),
            Op::Max,
        );
        check_reduce(
            w,
            len,
            |r, i| i as i64 - r as i64 * 1000,
            |a, b| a.min(b),
            Op::Min,
        );
        check_reduce(
            w,
            len,
            |r, i| u64::MAX - (r * i) as u64,
            |a, b| a.wrapping_add(b),
            Op::Sum,
        );
        check_reduce(w, len, |r, i| (r * 3 + i) as u64, |a, b| a.min(b), Op::Min);
        check_reduce(
            w,
            len,
            |r, i| r as f32 * 0.25 + i as f32,
            |a, b| a + b,
            Op::Sum,
        );
        check_reduce(
            w,
            len,
            |r, i| -(r as f32) + i as f32,
            |a, b| a.min(b),
            Op::Min,
        );
        check_reduce(
            w,
            len,
            |r, i| r as f64 * 0.1 + i as f64,
            |a, b| a + b,
            Op::Sum,
        );
        check_reduce(
            w,
            len,
            |r, i| (r as f64).sin() * i as f64,
            |a, b| a.max(b),
            Op::Max,
        );
    }
    let mut y = [0i32; 2];
    assert_eq!(
        w.allreduce(&[1i32, 2, 3], &mut y, Op::Sum, Timeout::Block),
        Err(Error::LengthMismatch {
            input: 3,
            output: 2
        })
    );
}

/// Each error from a bad argument, with the values it names.
fn errors(w: &World) {
    let (me, n) = (w.rank(), w.size());
    let q = ok(w.queue(3), "queue");
    let size1 = 4096 + 64 * n;
    assert_eq!(
        q.write(S1, 0, n, S1, 0, 8),
        Err(Error::NoSuchRank { rank: n, size: n })
    );
    assert_eq!(
        q.read(S1, 0, n + 5, S1, 0, 8),
        Err(Error::NoSuchRank {
            rank: n + 5,
            size: n
        })
    );
    let peer = (me + 1) % n;
    assert_eq!(
        q.write(S1, 0, peer, S1, size1 - 4, 8),
        Err(Error::OutOfBounds {
            rank: peer,
            seg: 1,
            offset: size1 - 4,
            len: 8,
            size: size1
        })
    );
    assert_eq!(
        q.read(S1, size1, peer, S1, 0, 1),
        Err(Error::OutOfBounds {
            rank: me,
            seg: 1,
            offset: size1,
            len: 1,
            size: size1
        })
    );
    assert_eq!(
        q.write(S1, 0, peer, S1, usize::MAX, 2),
        Err(Error::OutOfBounds {
            rank: peer,
            seg: 1,
            offset: usize::MAX,
            len: 2,
            size: size1
        })
    );
    assert_eq!(
        q.write(S1, 0, peer, SegId(9), 0, 8),
        Err(Error::NoSuchSegment { seg: 9, rank: peer })
    );
    assert_eq!(
        q.write(SegId(9), 0, peer, S1, 0, 8),
        Err(Error::NoSuchSegment { seg: 9, rank: me })
    );
    assert_eq!(
        w.atomic_fetch_add(S1, 4, peer, 1),
        Err(Error::Misaligned {
            offset: 4,
            align: 8
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
    assert_eq!(
        w.atomic_fetch_add(S1, 0, n, 1),
        Err(Error::NoSuchRank { rank: n, size: n })
    );
    assert_eq!(
        w.atomic_fetch_add(SegId(9), 0, peer, 1),
        Err(Error::NoSuchSegment { seg: 9, rank: peer })
    );
    assert!(matches!(
        w.queue(8),
        Err(Error::NoSuchQueue { queue: 8, count: 8 })
    ));
    assert_eq!(
        q.notify(peer, S1, 1024, 1),
        Err(Error::NoSuchNotification {
            id: 1024,
            count: 1024
        })
    );
    assert_eq!(
        q.notify(peer, S1, 3, 0),
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
    assert_eq!(
        w.notify_reset(SegId(9), 0),
        Err(Error::NoSuchSegment { seg: 9, rank: me })
    );
    let big = vec![0u8; w.passive_max() + 1];
    assert_eq!(
        w.passive_send(peer, &big, Timeout::Test),
        Err(Error::MessageTooLarge {
            len: big.len(),
            max: w.passive_max()
        })
    );
    assert_eq!(
        w.passive_send(n, &[1], Timeout::Test),
        Err(Error::NoSuchRank { rank: n, size: n })
    );
    assert!(matches!(
        w.segment(SegId(64), 8),
        Err(Error::SegmentIdTooLarge { seg: 64, max: 64 })
    ));
    assert!(matches!(
        w.segment(S1, 8),
        Err(Error::SegmentExists { seg: 1 })
    ));
    assert!(matches!(w.local(SegId(9)), Err(Error::NoSuchSegment { seg: 9, rank }) if rank == me));
    assert_eq!(w.health(n), Err(Error::NoSuchRank { rank: n, size: n }));
    let seg = ok(w.local(S1), "local");
    assert!(matches!(
        seg.get::<u64>(size1 / 8),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        seg.write(size1 - 1, &[0, 0]),
        Err(Error::OutOfBounds { .. })
    ));
    // A full queue is reported, nothing posted; a wait empties it.
    for i in 0..tiers_cluster::DEFAULT_QUEUE_DEPTH {
        ok(q.write(S1, 0, me, S1, 8 * (i % 64) + 512, 8), "fill queue");
    }
    assert_eq!(
        q.write(S1, 0, me, S1, 0, 8),
        Err(Error::QueueFull {
            queue: 3,
            depth: tiers_cluster::DEFAULT_QUEUE_DEPTH
        })
    );
    assert_eq!(q.posted(), tiers_cluster::DEFAULT_QUEUE_DEPTH);
    ok(q.wait(Timeout::Block), "wait");
    assert_eq!(q.posted(), 0);
    ok(q.write(S1, 0, me, S1, 0, 8), "after wait");
    ok(q.wait(Timeout::Block), "wait");
    // Messages name the values.
    let msg = Error::OutOfBounds {
        rank: 1,
        seg: 2,
        offset: 30,
        len: 4,
        size: 32,
    }
    .to_string();
    assert!(
        msg.contains("30..34") && msg.contains("32") && msg.contains("rank 1"),
        "{msg}"
    );
    ok(w.barrier(Timeout::Block), "barrier");
}

/// Rank `victim` dies after the first barrier; the survivors must see it fail (or time out),
/// never hang.
pub fn killed(w: &World, victim: usize, die: impl FnOnce()) {
    let (me, n) = (w.rank(), w.size());
    assert!(n >= 2 && victim < n);
    let _seg = ok(w.segment(S1, 4096), "segment");
    ok(w.barrier(Timeout::Block), "barrier");
    if me == victim {
        die();
        return;
    }
    let r = w.barrier(Timeout::After(Duration::from_secs(30)));
    assert!(
        matches!(r, Err(Error::PeerFailed(_)) | Err(Error::Timeout)),
        "barrier after a death: {r:?}"
    );
    let mut buf = [0u8; 16];
    let r = w.passive_receive(&mut buf, Timeout::After(Duration::from_secs(30)));
    assert!(
        matches!(r, Err(Error::PeerFailed(_)) | Err(Error::Timeout)),
        "receive: {r:?}"
    );
    assert_eq!(w.health(victim), Ok(Health::Failed));
    let q = ok(w.queue(0), "queue");
    assert_eq!(
        q.write(S1, 0, victim, S1, 0, 8),
        Err(Error::PeerFailed(victim))
    );
    assert_eq!(
        w.atomic_fetch_add(S1, 0, victim, 1),
        Err(Error::PeerFailed(victim))
    );
}

/// A small deterministic generator (splitmix64), the same on every rank for the same seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, k: usize) -> usize {
        (self.next() % k as u64) as usize
    }
}

/// Many random valid and invalid operations, each result checked against a model of every
/// segment of every rank. Phases: one rank acts while the others wait; every rank draws the
/// same random sequence, so every rank can keep the whole model.
pub fn random(w: &World, seed: u64) {
    let (me, n) = (w.rank(), w.size());
    let segs = [SegId(5), SegId(6)];
    let size = |s: usize, r: usize| 256 + 64 * r + 32 * s;
    let views: Vec<_> = (0..2)
        .map(|s| ok(w.segment(segs[s], size(s, me)), "segment"))
        .collect();
    let mut model: Vec<Vec<Vec<u8>>> = (0..2)
        .map(|s| (0..n).map(|r| vec![0u8; size(s, r)]).collect())
        .collect();
    let q = ok(w.queue(2), "queue");
    let mut rng = Rng::new(seed);
    let mut checked = 0usize;
    for phase in 0..2 * n {
        let actor = phase % n;
        for _ in 0..300 {
            let kind = rng.below(6);
            // Segment index 2 is an unregistered id; rank n does not exist.
            let ls = rng.below(5).min(2);
            let rs = rng.below(5).min(2);
            let r = if rng.below(10) == 0 { n } else { rng.below(n) };
            let lo = rng.below(size(1, n) + 16);
            let ro = rng.below(size(1, n) + 16);
            let len = rng.below(48);
            let value = rng.next();
            let sid = |s: usize| if s < 2 { segs[s] } else { SegId(7) };
            let bounds = |s: usize, rank: usize, off: usize, len: usize| -> Result<(), Error> {
                if off + len <= size(s, rank) {
                    Ok(())
                } else {
                    Err(Error::OutOfBounds {
                        rank,
                        seg: sid(s).0,
                        offset: off,
                        len,
                        size: size(s, rank),
                    })
                }
            };
            let expect: Result<u64, Error> = (|| match kind {
                0 | 1 => {
                    if r >= n {
                        return Err(Error::NoSuchRank { rank: r, size: n });
                    }
                    if ls == 2 {
                        return Err(Error::NoSuchSegment {
                            seg: 7,
                            rank: actor,
                        });
                    }
                    if rs == 2 {
                        return Err(Error::NoSuchSegment { seg: 7, rank: r });
                    }
                    bounds(ls, actor, lo, len)?;
                    bounds(rs, r, ro, len)?;
                    if kind == 0 {
                        let tmp = model[ls][actor][lo..lo + len].to_vec();
                        model[rs][r][ro..ro + len].copy_from_slice(&tmp);
                    } else {
                        let tmp = model[rs][r][ro..ro + len].to_vec();
                        model[ls][actor][lo..lo + len].copy_from_slice(&tmp);
                    }
                    Ok(0)
                }
                2 | 3 => {
                    let off = ro / 4 * 4;
                    if r >= n {
                        return Err(Error::NoSuchRank { rank: r, size: n });
                    }
                    if rs == 2 {
                        return Err(Error::NoSuchSegment { seg: 7, rank: r });
                    }
                    bounds(rs, r, off, 8)?;
                    if off % 8 != 0 {
                        return Err(Error::Misaligned {
                            offset: off,
                            align: 8,
                        });
                    }
                    let cell = &mut model[rs][r][off..off + 8];
                    let old = u64::from_ne_bytes(cell.try_into().unwrap());
                    let new = if kind == 2 {
                        old.wrapping_add(value)
                    } else if value % 2 == 0 {
                        if old == value % 5 {
                            value
                        } else {
                            old
                        }
                    } else {
                        if old == 0 {
                            value
                        } else {
                            old
                        }
                    };
                    cell.copy_from_slice(&new.to_ne_bytes());
                    Ok(old)
                }
                4 => {
                    if ls == 2 {
                        return Ok(0);
                    }
                    bounds(ls, actor, lo, len)?;
                    for (i, b) in model[ls][actor][lo..lo + len].iter_mut().enumerate() {
                        *b = (value >> (i % 8 * 8)) as u8;
                    }
                    Ok(0)
                }
                _ => Ok(0),
            })();
            if me != actor {
                continue;
            }
            let got: Result<u64, Error> = match kind {
                0 => q.write(sid(ls), lo, r, sid(rs), ro, len).map(|_| 0),
                1 => q.read(sid(ls), lo, r, sid(rs), ro, len).map(|_| 0),
                2 => w.atomic_fetch_add(sid(rs), ro / 4 * 4, r, value),
                3 => {
                    let expected = if value % 2 == 0 { value % 5 } else { 0 };
                    w.atomic_compare_swap(sid(rs), ro / 4 * 4, r, expected, value)
                }
                4 => {
                    if ls == 2 {
                        Ok(0)
                    } else {
                        let bytes: Vec<u8> =
                            (0..len).map(|i| (value >> (i % 8 * 8)) as u8).collect();
                        views[ls].write(lo, &bytes).map(|_| 0)
                    }
                }
                _ => q.wait(Timeout::Block).map(|_| 0),
            };
            assert_eq!(got, expect, "phase {phase} op kind {kind}");
            checked += 1;
        }
        ok(q.wait(Timeout::Block), "wait");
        ok(w.barrier(Timeout::Block), "phase barrier");
        for s in 0..2 {
            let mut mine = vec![0u8; size(s, me)];
            ok(views[s].read(0, &mut mine), "read own");
            assert!(
                mine == model[s][me],
                "segment {s} of rank {me} after phase {phase}"
            );
        }
        ok(w.barrier(Timeout::Block), "phase barrier");
    }
    let mut total = [0u64];
    ok(
        w.allreduce(&[checked as u64], &mut total, Op::Sum, Timeout::Block),
        "count",
    );
    assert_eq!(total[0], (2 * n * 300) as u64);
}

/// Message-driven endpoints: every endpoint exchanges numbered requests and replies with its
/// 2 neighbours on each side for 50 steps; handlers check every message; the number of
/// messages handled over all ranks must be exactly what the protocol implies.
pub fn endpoints(w: &World, workers: usize, delivery: tiers_cluster::endpoint::Delivery) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use tiers_cluster::endpoint::{self, Ctx, Endpoint, EpId};
    const K: usize = 2;
    const STEPS: u32 = 50;
    const TOTAL: usize = 11;
    struct E<'a> {
        step: u32,
        replies: usize,
        handled: &'a AtomicU64,
    }
    fn msg(kind: u8, from: EpId, step: u32) -> Vec<u8> {
        let mut v = vec![kind];
        v.extend_from_slice(&(from as u32).to_le_bytes());
        v.extend_from_slice(&step.to_le_bytes());
        v.resize(16 + from % 7 * 100, 0xab);
        v
    }
    impl E<'_> {
        fn ask(&self, ctx: &mut Ctx<'_>) -> tiers_cluster::Result<()> {
            let (me, n) = (ctx.id(), ctx.total());
            for d in 1..=K {
                ctx.send((me + d) % n, msg(1, me, self.step))?;
                ctx.send((me + n - d) % n, msg(1, me, self.step))?;
            }
            Ok(())
        }
    }
    impl Endpoint for E<'_> {
        fn start(&mut self, ctx: &mut Ctx<'_>) -> tiers_cluster::Result<()> {
            self.ask(ctx)
        }
        fn receive(
            &mut self,
            ctx: &mut Ctx<'_>,
            from: EpId,
            data: Vec<u8>,
        ) -> tiers_cluster::Result<()> {
            self.handled.fetch_add(1, Ordering::Relaxed);
            let sender = u32::from_le_bytes(data[1..5].try_into().unwrap()) as usize;
            let step = u32::from_le_bytes(data[5..9].try_into().unwrap());
            assert_eq!(sender, from, "sender recorded in the message");
            assert_eq!(data.len(), 16 + from % 7 * 100, "length kept");
            let n = ctx.total();
            let dist = (from + n - ctx.id()) % n;
            assert!(dist <= K || n - dist <= K, "only neighbours talk");
            if data[0] == 1 {
                return ctx.send(from, msg(2, ctx.id(), step));
            }
            assert_eq!(data[0], 2);
            assert_eq!(step, self.step, "a reply belongs to the current step");
            self.replies += 1;
            if self.replies == 2 * K {
                self.replies = 0;
                self.step += 1;
                if self.step == STEPS {
                    return ctx.finish();
                }
                self.ask(ctx)?;
            }
            Ok(())
        }
    }
    let pool = tiers_node::Pool::builder()
        .threads(workers)
        .build()
        .unwrap();
    let handled = AtomicU64::new(0);
    for _ in 0..2 {
        ok(
            endpoint::run(w, &pool, TOTAL, delivery, |_| E {
                step: 0,
                replies: 0,
                handled: &handled,
            }),
            "endpoints",
        );
    }
    let mut total = [0u64];
    ok(
        w.allreduce(
            &[handled.load(Ordering::Relaxed)],
            &mut total,
            Op::Sum,
            Timeout::Block,
        ),
        "count",
    );
    // Per run: every endpoint sends 2K requests per step and gets 2K replies.
    assert_eq!(total[0], 2 * (TOTAL * STEPS as usize * 2 * K * 2) as u64);
}

/// `t` threads of every rank communicate at once (the hybrid pattern: several workers per rank
/// each with its own queue). Thread `i` of rank `r` writes a block into every other rank with a
/// notification only thread `i` there waits for, reads a block back from its right neighbour,
/// and adds to a global counter at rank 0; every block and the counter's total are checked.
pub fn threads(w: &World, t: usize, rounds: usize) {
    const S: SegId = SegId(5);
    const BLK: usize = 4096 + 24; // crosses the vector-copy band and ends misaligned
    let (me, n) = (w.rank(), w.size());
    assert!(t <= tiers_cluster::QUEUES && 2 * t * n <= tiers_cluster::NOTIFICATIONS);
    // Blocks land at (sender · t + thread) · BLK; the counter sits after them; the send
    // staging area of thread i after that.
    let recv = n * t * BLK;
    let stage = recv + 64;
    let seg = ok(w.segment(S, stage + t * BLK), "threads segment");
    let blk = Timeout::After(Duration::from_secs(120));
    ok(w.barrier(blk), "barrier before threads");
    let pattern = |from: usize, thread: usize, round: usize, k: usize| {
        (from * 131 + thread * 29 + round * 7 + k) as u8
    };
    std::thread::scope(|s| {
        for i in 0..t {
            let seg = &seg;
            s.spawn(move || {
                let q = ok(w.queue(i), "queue");
                for round in 0..rounds {
                    let mine: Vec<u8> = (0..BLK).map(|k| pattern(me, i, round, k)).collect();
                    ok(seg.write(stage + i * BLK, &mine), "stage");
                    // Notification ids: thread i's range is i·n .. (i+1)·n, one per sender.
                    for r in (0..n).filter(|&r| r != me) {
                        ok(
                            q.write_notify(
                                S,
                                stage + i * BLK,
                                r,
                                S,
                                (me * t + i) * BLK,
                                BLK,
                                i * n + me,
                                1 + round as u32,
                            ),
                            "threaded write_notify",
                        );
                    }
                    ok(w.atomic_fetch_add(S, recv, 0, 1), "threaded fetch_add");
                    ok(q.wait(blk), "threaded queue wait");
                    for _ in 0..n - 1 {
                        let id = ok(
                            w.notify_waitsome(S, i * n..(i + 1) * n, blk),
                            "threaded waitsome",
                        );
                        let from = id - i * n;
                        assert_ne!(from, me);
                        assert_eq!(
                            ok(w.notify_reset(S, id), "reset"),
                            1 + round as u32,
                            "round"
                        );
                        let mut got = vec![0u8; BLK];
                        ok(seg.read((from * t + i) * BLK, &mut got), "local read");
                        assert!(
                            got.iter()
                                .enumerate()
                                .all(|(k, &b)| b == pattern(from, i, round, k)),
                            "rank {me} thread {i} round {round}: block from {from} is wrong"
                        );
                    }
                    // A read from the right neighbour of what it received from us this round:
                    // nobody overwrites it before every thread of every rank passed this round's
                    // wait, which the per-round acknowledgements below ensure.
                    if n > 1 {
                        let right = (me + 1) % n;
                        let dst = stage + i * BLK;
                        ok(
                            q.read(S, dst, right, S, (me * t + i) * BLK, BLK),
                            "threaded read",
                        );
                        ok(q.wait(blk), "read wait");
                        let mut got = vec![0u8; BLK];
                        ok(seg.read(dst, &mut got), "local read");
                        assert!(
                            got.iter()
                                .enumerate()
                                .all(|(k, &b)| b == pattern(me, i, round, k)),
                            "rank {me} thread {i} round {round}: read back from {right} is wrong"
                        );
                    }
                    // Acknowledge to every sender's thread i (id i·n + me at its segment is not
                    // free: use the counter-free second half, ids (t + i)·n + me).
                    for r in (0..n).filter(|&r| r != me) {
                        ok(q.notify(r, S, (t + i) * n + me, 1), "ack");
                    }
                    ok(q.wait(blk), "ack wait");
                    for _ in 0..n - 1 {
                        let id = ok(
                            w.notify_waitsome(S, (t + i) * n..(t + i + 1) * n, blk),
                            "ack waitsome",
                        );
                        ok(w.notify_reset(S, id), "ack reset");
                    }
                }
            });
        }
    });
    ok(w.barrier(blk), "barrier after threads");
    if me == 0 {
        let total = ok(w.atomic_fetch_add(S, recv, 0, 0), "counter");
        assert_eq!(
            total,
            (n * t * rounds) as u64,
            "fetch_add total from every thread"
        );
    }
    ok(w.barrier(blk), "barrier at the end");
    ok(w.segment_delete(S, blk), "delete");
}

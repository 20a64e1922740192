//! Several threads of every rank communicating at once.

use super::ok;
use std::time::Duration;
use tiers_cluster::{Notification, SegId, Timeout, World};

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
                                S.at(stage + i * BLK),
                                S.on(r, (me * t + i) * BLK),
                                BLK,
                                Notification {
                                    id: i * n + me,
                                    value: 1 + round as u32,
                                },
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
                            q.read(S.at(dst), S.on(right, (me * t + i) * BLK), BLK),
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
                        ok(
                            q.notify(
                                r,
                                S,
                                Notification {
                                    id: (t + i) * n + me,
                                    value: 1,
                                },
                            ),
                            "ack",
                        );
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

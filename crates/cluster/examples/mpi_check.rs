//! Cross-host checks of the mpi engine, run under `mpirun` by `.ci/multihost`:
//!
//! - `topology HOSTS`: every rank sees `size / HOSTS` ranks on its host (multi-tier detection);
//! - `kneighbor`: \[Mei2010\]'s kNeighbor (k = 3): every rank sends a message to its 3 neighbours
//!   on each side with `write_notify`, checks every byte of the 6 it receives, acknowledges
//!   them, and waits for its 6 acknowledgements; 16 B..16 KiB, time per step on rank 0;
//! - `allreduce`: sums (integer and float, in rank order), min and max of several lengths
//!   against values computed locally, and a global counter of `fetch_add`s from every rank.
//!
//! Exits non-zero (panics) on the first wrong result.

#[cfg(feature = "mpi")]
fn main() {
    use std::time::Instant;
    use tiers_cluster::{Notification, Op, SegId, Timeout};

    let args: Vec<String> = std::env::args().skip(1).collect();
    let w = tiers_cluster::init().expect("init");
    assert_eq!(w.engine_name(), "mpi", "not started by an MPI launcher");
    let (me, n) = (w.rank(), w.size());
    let blk = Timeout::After(std::time::Duration::from_secs(60));
    match args.first().map(String::as_str) {
        Some("topology") => {
            let hosts: usize = args.get(1).and_then(|h| h.parse().ok()).expect("HOSTS");
            assert_eq!(
                w.local_size(),
                n / hosts,
                "rank {me}: ranks on this host (MPI_Comm_split_type shared)"
            );
            let mut hs = [0u64];
            w.allreduce(&[u64::from(w.local_rank() == 0)], &mut hs, Op::Sum, blk)
                .expect("allreduce");
            assert_eq!(hs[0] as usize, hosts, "host leaders");
            if me == 0 {
                println!(
                    "topology: {n} ranks on {hosts} hosts, {} per host: ok",
                    n / hosts
                );
            }
        }
        Some("kneighbor") => {
            const K: usize = 3;
            let max = 16 * 1024;
            let seg = w.segment(SegId(3), 2 * K * max + max).expect("segment");
            let q = w.queue(0).expect("queue");
            let pattern = |step: usize, src: usize, slot: usize| (step * 7 + src * 13 + slot) as u8;
            // Slot of a message that travels `d` ranks in direction `side` (0: up, 1: down).
            let slot = |side: usize, d: usize| side * K + d - 1;
            let target = |side: usize, d: usize| {
                if side == 0 {
                    (me + d) % n
                } else {
                    (me + n * K - d) % n
                }
            };
            let source = |side: usize, d: usize| {
                if side == 0 {
                    (me + n * K - d) % n
                } else {
                    (me + d) % n
                }
            };
            let mut size = 16;
            while size <= max {
                let steps = 50;
                w.barrier(blk).expect("barrier");
                let t0 = Instant::now();
                for step in 1..=steps {
                    for side in 0..2 {
                        for d in 1..=K {
                            let s = slot(side, d);
                            let v = vec![pattern(step, me, s); size];
                            let src_off = 2 * K * max;
                            // The outgoing buffer is the segment's tail, one per slot in turn.
                            seg.write(src_off, &v).expect("local write");
                            q.write_notify(
                                SegId(3).at(src_off),
                                SegId(3).on(target(side, d), s * max),
                                size,
                                Notification {
                                    id: s,
                                    value: step as u32,
                                },
                            )
                            .expect("write_notify");
                            q.wait(blk).expect("wait");
                        }
                    }
                    let mut buf = vec![0u8; size];
                    // Slot by slot: a fast neighbour may already refill a slot for the next
                    // step once it has our acknowledgement.
                    for id in 0..2 * K {
                        w.notify_waitsome(SegId(3), id..id + 1, blk)
                            .expect("waitsome");
                        let val = w.notify_reset(SegId(3), id).expect("reset");
                        assert_eq!(val as usize, step, "rank {me}: step of slot {id}");
                        seg.read(id * max, &mut buf).expect("read");
                        let (side, d) = (id / K, id % K + 1);
                        let src = source(side, d);
                        let want = pattern(step, src, id);
                        assert!(
                            buf.iter().all(|&b| b == want),
                            "rank {me}: {size} B from rank {src}, step {step}: wrong data"
                        );
                        q.notify(
                            src,
                            SegId(3),
                            Notification {
                                id: 64 + id,
                                value: step as u32,
                            },
                        )
                        .expect("ack");
                    }
                    q.wait(blk).expect("wait");
                    let mut acks = 0;
                    while acks < 2 * K {
                        let id = w
                            .notify_waitsome(SegId(3), 64..64 + 2 * K, blk)
                            .expect("ack wait");
                        assert_eq!(w.notify_reset(SegId(3), id).expect("reset"), step as u32);
                        acks += 1;
                    }
                }
                let us = t0.elapsed().as_secs_f64() * 1e6 / steps as f64;
                if me == 0 {
                    println!("kneighbor k=3: {size} B: {us:.1} us per step");
                }
                size *= 4;
            }
            w.barrier(blk).expect("barrier");
            if me == 0 {
                println!("kneighbor: {n} ranks, every message checked: ok");
            }
        }
        Some("allreduce") => {
            for len in [1usize, 7, 1000, 5000] {
                let x: Vec<i64> = (0..len)
                    .map(|i| (me as i64 - 3) * (i as i64 % 101))
                    .collect();
                let mut y = vec![0i64; len];
                w.allreduce(&x, &mut y, Op::Sum, blk).expect("sum");
                for (i, v) in y.iter().enumerate() {
                    let want: i64 = (0..n).map(|r| (r as i64 - 3) * (i as i64 % 101)).sum();
                    assert_eq!(*v, want, "i64 sum, element {i} of {len}");
                }
                let xf: Vec<f64> = (0..len).map(|i| 0.1 * (me + 1) as f64 + i as f64).collect();
                let mut yf = vec![0f64; len];
                w.allreduce(&xf, &mut yf, Op::Sum, blk).expect("fsum");
                for (i, v) in yf.iter().enumerate() {
                    let mut want = 0.1 + i as f64;
                    for r in 1..n {
                        want += 0.1 * (r + 1) as f64 + i as f64;
                    }
                    assert_eq!(
                        v.to_bits(),
                        want.to_bits(),
                        "f64 sum in rank order, element {i}"
                    );
                }
                let xu: Vec<u32> = (0..len).map(|i| (me * 1000 + i) as u32).collect();
                let mut yu = vec![0u32; len];
                w.allreduce(&xu, &mut yu, Op::Max, blk).expect("max");
                assert!(yu
                    .iter()
                    .enumerate()
                    .all(|(i, &v)| v == ((n - 1) * 1000 + i) as u32));
                w.allreduce(&xu, &mut yu, Op::Min, blk).expect("min");
                assert!(yu.iter().enumerate().all(|(i, &v)| v == i as u32));
            }
            // A global counter at rank 0 and one at the last rank, bumped by everyone.
            let seg = w.segment(SegId(4), 64).expect("segment");
            let reps = 1000u64;
            for _ in 0..reps {
                w.atomic_fetch_add(SegId(4), 0, 0, 1).expect("fetch_add");
                w.atomic_fetch_add(SegId(4), 8, n - 1, 3)
                    .expect("fetch_add");
            }
            w.barrier(blk).expect("barrier");
            if me == 0 {
                assert_eq!(
                    seg.get::<u64>(0).unwrap(),
                    reps * n as u64,
                    "counter at rank 0"
                );
            }
            if me == n - 1 {
                assert_eq!(
                    seg.get::<u64>(1).unwrap(),
                    3 * reps * n as u64,
                    "counter at rank n-1"
                );
            }
            // compare_swap: exactly one rank wins each round.
            for round in 0..20u64 {
                let old = w
                    .atomic_compare_swap(SegId(4), 16, 0, round, round + 1)
                    .expect("cas");
                let mut wins = [0u64];
                w.allreduce(&[u64::from(old == round)], &mut wins, Op::Sum, blk)
                    .expect("allreduce");
                assert_eq!(wins[0], 1, "round {round}: one winner");
            }
            w.barrier(blk).expect("barrier");
            if me == 0 {
                println!("allreduce and atomics: {n} ranks: ok");
            }
        }
        other => panic!("usage: mpi_check topology HOSTS | kneighbor | allreduce (got {other:?})"),
    }
}

#[cfg(not(feature = "mpi"))]
fn main() {
    eprintln!("mpi_check needs the mpi feature: cargo run --features mpi --example mpi_check");
    std::process::exit(2);
}

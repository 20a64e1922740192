//! Replicated two-sided messaging (`Comm::replicated`) on the `local` engine: every replica of a
//! logical rank computes what the unreplicated rank computes, with small rings so that long
//! messages travel in many chunks; a replica that stops taking part mid-run is skipped and the
//! others finish with the same results. (Processes killed with `kill -9` under the launcher
//! are in the `tiers` crate's `cli_replication` tests.)

use tiers_cluster::twosided::{Comm, Options, ReplicaState};
use tiers_cluster::{run_local, Op, SegId, Timeout};

const SEG: SegId = SegId(5);
const SMALL: Options = Options {
    slots: 3,
    slot_bytes: 96,
};

/// A program written for `c.size()` ranks: a ring of long messages, an allreduce and an
/// alltoallv of uneven blocks, `rounds` times; returns everything it received.
fn program(c: &Comm<'_>, rounds: usize, stop_after: Option<usize>) -> Option<Vec<u64>> {
    let (me, p) = (c.rank(), c.size());
    let mut seen = Vec::new();
    for round in 0..rounds {
        if stop_after == Some(round) {
            return None;
        }
        let msg: Vec<u8> = (0..200 + 37 * me + round)
            .map(|k| (k * 7 + me * 13 + round) as u8)
            .collect();
        c.send((me + 1) % p, round as u32, &msg, Timeout::Block)
            .expect("send");
        let got = c
            .recv_vec((me + p - 1) % p, round as u32, Timeout::Block)
            .expect("recv");
        seen.extend(got.iter().map(|&b| u64::from(b)));
        let mut sum = [0u64; 3];
        c.allreduce(
            &[me as u64 + round as u64, 1, (me * me) as u64],
            &mut sum,
            Op::Sum,
            Timeout::Block,
        )
        .expect("allreduce");
        seen.extend(sum);
        // Rank d gets d + me + round elements from each rank.
        let counts: Vec<usize> = (0..p).map(|d| d + me + round).collect();
        let send: Vec<u64> = (0..counts.iter().sum::<usize>())
            .map(|i| (me * 1000 + i) as u64)
            .collect();
        let rcounts: Vec<usize> = (0..p).map(|s| me + s + round).collect();
        let mut recv = vec![0u64; rcounts.iter().sum()];
        c.alltoallv(&send, &counts, &mut recv, &rcounts, Timeout::Block)
            .expect("alltoallv");
        seen.extend(recv);
        c.barrier(Timeout::Block).expect("barrier");
    }
    Some(seen)
}

#[test]
fn every_replica_computes_what_the_unreplicated_rank_does() {
    let plain = run_local(3, |w| {
        let c = Comm::with_options(w, SEG, SMALL, Timeout::Block).unwrap();
        program(&c, 4, None).unwrap()
    })
    .unwrap();
    let repl = run_local(6, |w| {
        let c = Comm::replicated(w, SEG, SMALL, 2, Timeout::Block).unwrap();
        let place = c.placement().unwrap();
        assert_eq!(
            (place.rank, place.replica, place.ranks),
            (w.rank() / 2, w.rank() % 2, 3)
        );
        let out = program(&c, 4, None).unwrap();
        (c.rank(), c.size(), out, c.state())
    })
    .unwrap();
    for (rank, size, out, state) in repl {
        assert_eq!(size, 3);
        assert_eq!(out, plain[rank], "rank {rank}");
        assert_eq!(state.len(), 3);
        assert!(
            state.iter().flatten().all(|&s| s == ReplicaState::Alive),
            "{state:?}"
        );
    }
}

#[test]
fn a_replica_that_stops_taking_part_is_skipped() {
    let plain = run_local(2, |w| {
        let c = Comm::with_options(w, SEG, SMALL, Timeout::Block).unwrap();
        program(&c, 5, None).unwrap()
    })
    .unwrap();
    // Process 0 is replica 0 of rank 0, the replica its peers ask first; it leaves after two
    // rounds without a word (its `Comm` is never dropped, so it never says it is done).
    let repl = run_local(4, |w| {
        let c = Comm::replicated(w, SEG, SMALL, 2, Timeout::Block).unwrap();
        let out = program(&c, 5, (w.rank() == 0).then_some(2));
        if out.is_some() {
            // Process 0's world is gone once its thread has returned; the next call sees it.
            while !w.health(0).unwrap().is_gone() {
                std::thread::yield_now();
            }
            c.flush(Timeout::Block).unwrap();
        }
        let state = c.state();
        if out.is_none() {
            std::mem::forget(c);
        }
        (w.rank(), out, state)
    })
    .unwrap();
    for (p, out, state) in repl {
        if p == 0 {
            assert!(out.is_none());
            continue;
        }
        assert_eq!(out.as_ref(), Some(&plain[p / 2]), "process {p}");
        assert_eq!(state[0][0], ReplicaState::Dead, "process {p}: {state:?}");
        assert_eq!(state[0][1], ReplicaState::Alive, "process {p}: {state:?}");
    }
}

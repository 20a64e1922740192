//! Global atomics: fetch-and-add and compare-and-swap on words of any rank.

use super::{ok, Fixture, S1};
use tiers_cluster::{Op, Timeout, World};

const BLK: Timeout = Timeout::Block;

/// Every rank adds 1 to rank 0's word 100 times (every third add with a timeout, every
/// third with a timeout of `Block`): the word ends at 100·n, seen in rank 0's memory and
/// through a fetch-and-add of 0 from every rank.
pub fn fetch_add_from_every_rank_adds_up(w: &World) {
    let f = Fixture::new(w);
    for k in 0..100 {
        match k % 3 {
            0 => ok(w.atomic_fetch_add(S1, 3584, 0, 1), "fetch_add"),
            1 => ok(
                w.atomic_fetch_add_timeout(S1, 3584, 0, 1, Timeout::millis(60_000)),
                "fetch_add with a timeout",
            ),
            _ => ok(
                w.atomic_fetch_add_timeout(S1, 3584, 0, 1, BLK),
                "fetch_add blocking",
            ),
        };
    }
    ok(w.barrier(BLK), "barrier");
    if f.me == 0 {
        assert_eq!(ok(f.seg.get::<u64>(448), "counter"), 100 * f.n as u64);
    }
    let cur = ok(w.atomic_fetch_add(S1, 3584, 0, 0), "read counter");
    assert_eq!(cur, 100 * f.n as u64);
    ok(w.barrier(BLK), "barrier");
    f.done();
}

/// Every rank tries to swap the last rank's zero word for its own rank + 1: exactly one wins,
/// and the word holds a winner's value.
pub fn one_compare_swap_wins(w: &World) {
    let f = Fixture::new(w);
    // Odd ranks through the call with a timeout.
    let old = if f.me % 2 == 0 {
        ok(
            w.atomic_compare_swap(S1, 3592, f.n - 1, 0, f.me as u64 + 1),
            "cas",
        )
    } else {
        ok(
            w.atomic_compare_swap_timeout(
                S1,
                3592,
                f.n - 1,
                0,
                f.me as u64 + 1,
                Timeout::millis(60_000),
            ),
            "cas with a timeout",
        )
    };
    ok(w.barrier(BLK), "barrier");
    let won = (old == 0) as u64;
    let mut wins = [0u64];
    ok(w.allreduce(&[won], &mut wins, Op::Sum, BLK), "allreduce");
    assert_eq!(wins[0], 1, "exactly one compare-swap wins");
    if f.me == f.n - 1 {
        let v = ok(f.seg.get::<u64>(449), "cas word");
        assert!(v >= 1 && v <= f.n as u64);
    }
    ok(w.barrier(BLK), "barrier");
    f.done();
}

//! Barrier and allreduce: resumable after a timeout, and the allreduce of every type and
//! operation at lengths on both sides of the small (one-line) path.

use super::{ok, Fixture, S1};
use tiers_cluster::{Collective, Error, Notification, Op, Reducible, SegId, Timeout, World};

const BLK: Timeout = Timeout::Block;

/// Rank 0 releases every other rank, held back in [`held`] until notification `id` arrives.
fn release(f: &Fixture<'_>, id: usize) {
    for r in 1..f.n {
        ok(f.q.notify(r, S1, Notification { id, value: 1 }), "release");
    }
    ok(f.q.wait(BLK), "wait");
}

/// Waits for rank 0's [`release`].
fn held(f: &Fixture<'_>, id: usize) {
    ok(f.w.notify_waitsome(S1, id..id + 1, BLK), "held");
    ok(f.w.notify_reset(S1, id), "reset");
}

/// A barrier that rank 0 enters alone times out (at once or after a while); called again once
/// the others are let go, it completes.
pub fn barrier_resumes_after_a_timeout(w: &World) {
    let f = Fixture::new(w);
    if f.n > 1 {
        if f.me == 0 {
            assert_eq!(w.barrier(Timeout::Test), Err(Error::Timeout));
            assert_eq!(w.barrier(Timeout::millis(5)), Err(Error::Timeout));
            release(&f, 20);
            ok(w.barrier(BLK), "resumed barrier");
        } else {
            held(&f, 20);
            ok(w.barrier(BLK), "barrier");
        }
    }
    f.done();
}

/// The same for an allreduce of 1000 `f64` (the general path), resumed with the same
/// arguments.
pub fn allreduce_resumes_after_a_timeout(w: &World) {
    let f = Fixture::new(w);
    if f.n > 1 {
        let x = vec![1.5f64; 1000];
        let mut y = vec![0.0f64; 1000];
        if f.me == 0 {
            assert_eq!(
                w.allreduce(&x, &mut y, Op::Sum, Timeout::Test),
                Err(Error::Timeout)
            );
            release(&f, 21);
            ok(w.allreduce(&x, &mut y, Op::Sum, BLK), "resumed allreduce");
        } else {
            held(&f, 21);
            ok(w.allreduce(&x, &mut y, Op::Sum, BLK), "allreduce");
        }
        assert!(
            y.iter().all(|&v| v == 1.5 * f.n as f64),
            "resumed allreduce result"
        );
    }
    f.done();
}

/// The same for an allreduce small enough to travel with its arrival flag.
pub fn small_allreduce_resumes_after_a_timeout(w: &World) {
    let f = Fixture::new(w);
    if f.n > 1 {
        let x = [2.5f64, -1.0];
        let mut z = [0.0f64; 2];
        if f.me == 0 {
            assert_eq!(
                w.allreduce(&x, &mut z, Op::Sum, Timeout::Test),
                Err(Error::Timeout)
            );
            assert_eq!(
                w.allreduce(&x, &mut z, Op::Sum, Timeout::millis(5)),
                Err(Error::Timeout)
            );
            release(&f, 22);
            ok(
                w.allreduce(&x, &mut z, Op::Sum, BLK),
                "resumed small allreduce",
            );
        } else {
            held(&f, 22);
            ok(w.allreduce(&x, &mut z, Op::Sum, BLK), "small allreduce");
        }
        let n = f.n as f64;
        assert_eq!(z, [2.5 * n, -n], "resumed small allreduce result");
    }
    f.done();
}

/// Allreduces `f(rank, i)` for `i < len` with `op` at each length, and checks every element
/// against `fold` over the ranks in rank order. 1 to 14 four-byte elements travel with the
/// arrival flags (up to 56 bytes); 15 and 3000 take the general path.
fn check_reduce<T: Reducible + PartialEq + std::fmt::Debug>(
    w: &World,
    f: impl Fn(usize, usize) -> T,
    fold: impl Fn(T, T) -> T,
    op: Op,
) {
    let (me, n) = (w.rank(), w.size());
    for len in [1usize, 7, 14, 15, 3000] {
        let x: Vec<T> = (0..len).map(|i| f(me, i)).collect();
        let mut y: Vec<T> = x.clone();
        ok(w.allreduce(&x, &mut y, op, BLK), "allreduce");
        for (i, got) in y.iter().enumerate() {
            let mut want = f(0, i);
            for r in 1..n {
                want = fold(want, f(r, i));
            }
            assert_eq!(*got, want, "{op:?} element {i} of {len}");
        }
    }
}

pub fn allreduce_sum_i32(w: &World) {
    check_reduce(
        w,
        |r, i| (r as i32 - 2) * (i as i32 % 97),
        |a, b| a.wrapping_add(b),
        Op::Sum,
    );
}

pub fn allreduce_min_i32(w: &World) {
    check_reduce(
        w,
        |r, i| (r as i32 - 2) * (i as i32 % 97),
        |a, b| a.min(b),
        Op::Min,
    );
}

pub fn allreduce_max_u32(w: &World) {
    check_reduce(
        w,
        |r, i| (r as u32 + 1) * (i as u32),
        |a, b| a.max(b),
        Op::Max,
    );
}

pub fn allreduce_sum_u32(w: &World) {
    check_reduce(
        w,
        |r, i| (r as u32) ^ (i as u32),
        |a, b| a.wrapping_add(b),
        Op::Sum,
    );
}

pub fn allreduce_max_i64(w: &World) {
    check_reduce(
        w,
        |r, i| (i as i64) << 33 | r as i64,
        |a, b| a.max(b),
        Op::Max,
    );
}

pub fn allreduce_min_i64(w: &World) {
    check_reduce(
        w,
        |r, i| i as i64 - r as i64 * 1000,
        |a, b| a.min(b),
        Op::Min,
    );
}

pub fn allreduce_sum_u64(w: &World) {
    check_reduce(
        w,
        |r, i| u64::MAX - (r * i) as u64,
        |a, b| a.wrapping_add(b),
        Op::Sum,
    );
}

pub fn allreduce_min_u64(w: &World) {
    check_reduce(w, |r, i| (r * 3 + i) as u64, |a, b| a.min(b), Op::Min);
}

pub fn allreduce_sum_f32(w: &World) {
    check_reduce(w, |r, i| r as f32 * 0.25 + i as f32, |a, b| a + b, Op::Sum);
}

pub fn allreduce_min_f32(w: &World) {
    check_reduce(w, |r, i| -(r as f32) + i as f32, |a, b| a.min(b), Op::Min);
}

pub fn allreduce_sum_f64(w: &World) {
    check_reduce(w, |r, i| r as f64 * 0.1 + i as f64, |a, b| a + b, Op::Sum);
}

pub fn allreduce_max_f64(w: &World) {
    check_reduce(
        w,
        |r, i| (r as f64).sin() * i as f64,
        |a, b| a.max(b),
        Op::Max,
    );
}

/// Input and output of different lengths are refused.
pub fn allreduce_refuses_mismatched_lengths(w: &World) {
    let mut y = [0i32; 2];
    assert_eq!(
        w.allreduce(&[1i32, 2, 3], &mut y, Op::Sum, BLK),
        Err(Error::LengthMismatch {
            input: 3,
            output: 2
        })
    );
}

/// Long enough for any machine, short enough that a hang fails the test instead of the job.
const LONG: Timeout = Timeout::After(std::time::Duration::from_secs(30));

/// Whether this world has collectives to disagree on (every engine checks them).
fn checks_collectives(w: &World) -> bool {
    w.size() > 1
}

/// The error rank 0 (which called `zero`) and every other rank (which called `other`) expect.
fn mismatch(w: &World, zero: Collective, other: Collective) -> Error {
    if w.rank() == 0 {
        Error::mismatch(zero, other, 1)
    } else {
        Error::mismatch(other, zero, 0)
    }
}

/// The collectives are in step: a barrier and an allreduce give the right answer.
fn in_step(w: &World, what: &str) {
    ok(w.barrier(LONG), &format!("barrier after {what}"));
    let mut y = [0u64; 1];
    ok(
        w.allreduce(&[w.rank() as u64 + 1], &mut y, Op::Sum, LONG),
        &format!("allreduce after {what}"),
    );
    let n = w.size() as u64;
    assert_eq!(y[0], n * (n + 1) / 2, "allreduce after {what}");
}

fn ar<T: Reducible>(len: usize, op: Op) -> Collective {
    Collective::Allreduce {
        len,
        ty: T::TYPE,
        op,
    }
}

/// Rank 0 calls an allreduce that differs from the others' in its operation, its element
/// type, its length (on the small path, across the small and the general path, on the general
/// path): every rank gets `CollectiveMismatch` naming both calls, and the collectives stay in
/// step.
pub fn allreduce_mismatches_are_reported(w: &World) {
    if !checks_collectives(w) {
        return;
    }
    let zero = w.rank() == 0;
    let mut y = vec![0i32; 2];
    let op = if zero { Op::Max } else { Op::Sum };
    assert_eq!(
        w.allreduce(&[1i32, 2], &mut y, op, LONG),
        Err(mismatch(w, ar::<i32>(2, Op::Max), ar::<i32>(2, Op::Sum)))
    );
    in_step(w, "another operation");

    let r = if zero {
        let mut y = [0u32; 2];
        w.allreduce(&[1u32, 2], &mut y, Op::Sum, LONG)
    } else {
        w.allreduce(&[1i32, 2], &mut y, Op::Sum, LONG)
    };
    assert_eq!(
        r,
        Err(mismatch(w, ar::<u32>(2, Op::Sum), ar::<i32>(2, Op::Sum)))
    );
    in_step(w, "another type");

    for (a, b) in [(2, 3), (2, 1000), (1000, 2), (1000, 3000)] {
        let len = if zero { a } else { b };
        let x = vec![1.0f64; len];
        let mut y = vec![0.0f64; len];
        assert_eq!(
            w.allreduce(&x, &mut y, Op::Sum, LONG),
            Err(mismatch(w, ar::<f64>(a, Op::Sum), ar::<f64>(b, Op::Sum))),
            "lengths {a} and {b}"
        );
        in_step(w, &format!("lengths {a} and {b}"));
    }
}

/// Rank 0 calls a barrier while the others call an allreduce (small, then general) or create
/// a segment, and ranks create different segments: every rank gets `CollectiveMismatch`, the
/// segment is not left half-created, and the collectives stay in step.
pub fn barrier_against_other_collectives_is_reported(w: &World) {
    if !checks_collectives(w) {
        return;
    }
    let zero = w.rank() == 0;
    for len in [1, 1000] {
        let r = if zero {
            w.barrier(LONG)
        } else {
            let x = vec![1u64; len];
            let mut y = vec![0u64; len];
            w.allreduce(&x, &mut y, Op::Sum, LONG)
        };
        assert_eq!(
            r,
            Err(mismatch(w, Collective::Barrier, ar::<u64>(len, Op::Sum))),
            "barrier against an allreduce of {len}"
        );
        in_step(w, "barrier against allreduce");
    }

    let s3 = SegId(3);
    let r = if zero {
        w.barrier(LONG)
    } else {
        w.segment_timeout(s3, 64, LONG).map(|_| ())
    };
    assert_eq!(
        r,
        Err(mismatch(
            w,
            Collective::Barrier,
            Collective::SegmentCreate { seg: 3 }
        ))
    );
    in_step(w, "barrier against segment()");

    let seg = if zero { 3 } else { 4 };
    assert_eq!(
        w.segment_timeout(SegId(seg), 64, LONG).map(|_| ()),
        Err(mismatch(
            w,
            Collective::SegmentCreate { seg: 3 },
            Collective::SegmentCreate { seg: 4 }
        ))
    );
    in_step(w, "different segments");
    // Nothing was left behind: the segment can be created by all (sizes may differ).
    let s = ok(
        w.segment_timeout(s3, 64 * (w.rank() + 1), LONG),
        "segment 3",
    );
    assert_eq!(s.len(), 64 * (w.rank() + 1));
    ok(w.segment_delete(s3, LONG), "delete segment 3");
}

/// Ranks whose calls differ in a regular way (allreduces of 8, 10, 12... elements, segments
/// 5, 6, 7...), the middle one arriving last, on the general path: every rank gets
/// `CollectiveMismatch` (a sum of linear digests of the calls passed the check, and the ranks
/// went on with different calls), no segment is left half-created, and the collectives stay
/// in step.
pub fn regular_differences_between_three_calls_are_reported(w: &World) {
    if w.size() < 3 {
        return;
    }
    let r = w.rank();
    let late = |k: usize| {
        if r == k {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    late(1);
    let len = 8 + 2 * r;
    let x = vec![1u64; len];
    let mut y = vec![0u64; len];
    let got = w.allreduce(&x, &mut y, Op::Sum, LONG);
    assert!(
        matches!(got, Err(Error::CollectiveMismatch(_))),
        "rank {r}, allreduce of {len}: {got:?}"
    );
    in_step(w, "allreduces of regular lengths");
    late(1);
    let seg = SegId(5 + r as u32);
    let got = w.segment_timeout(seg, 64, LONG).map(|_| ());
    assert!(
        matches!(got, Err(Error::CollectiveMismatch(_))),
        "rank {r}, segment {seg:?}: {got:?}"
    );
    in_step(w, "segments of regular ids");
    let s = ok(w.segment_timeout(SegId(5), 64, LONG), "segment 5");
    assert_eq!(s.len(), 64);
    ok(w.segment_delete(SegId(5), LONG), "delete segment 5");
}

/// A rank whose barrier timed out and that then calls another collective gets
/// `CollectiveMismatch` naming itself and the pending barrier; resumed, the barrier completes.
pub fn another_collective_after_a_timeout_is_refused(w: &World) {
    let f = Fixture::new(w);
    if f.n > 1 {
        if f.me == 0 {
            assert_eq!(w.barrier(Timeout::Test), Err(Error::Timeout));
            let mut y = [0u64; 1];
            assert_eq!(
                w.allreduce(&[1u64], &mut y, Op::Sum, Timeout::Test),
                Err(Error::mismatch(
                    ar::<u64>(1, Op::Sum),
                    Collective::Barrier,
                    0
                ))
            );
            release(&f, 22);
            ok(w.barrier(BLK), "resumed barrier");
        } else {
            held(&f, 22);
            ok(w.barrier(BLK), "barrier");
        }
        in_step(w, "a resumed barrier");
    }
    f.done();
}

//! Barrier and allreduce: resumable after a timeout, and the allreduce of every type and
//! operation at lengths on both sides of the small (one-line) path.

use super::{ok, Fixture, S1};
use tiers_cluster::{Error, Notification, Op, Reducible, Timeout, World};

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

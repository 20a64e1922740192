//! The physical limit a benchmark chases, measured in the same run as its implementations and
//! printed as one more row, named [`IMPL`] (`"limit"`), with a note of how it was measured
//! (the row's `measured` field in JSON, a `limit:` line under the table).
//!
//! Three limits, each a [`Candidate`] that joins the benchmark's own [`compare`](crate::compare)
//! so that it alternates with them under the same load:
//!
//! - [`round_trip`]: a cache line bounced between two threads pinned to the two processors
//!   the benchmark uses (one full round trip: A writes, B sees it and writes back, A sees
//!   that). A barrier, a lock hand-over or a message between those processors cannot be
//!   cheaper than the transfers it needs. [`ping_pong`] is the same exchange on any shared
//!   word, for processes that share a mapping.
//! - [`memcpy`]: a copy of the same bytes between two private buffers (one-sided writes).
//! - [`cross_copy`]: the same bytes copied back and forth between two threads pinned to the
//!   benchmark's two processors, each copy reading the lines the other thread wrote last (a
//!   ping-pong of writes: each side sends back what it received). Between cores that moves
//!   every line through the coherence protocol, which costs several private memcpys at
//!   sizes that fit the caches.
//! - [`read_once`]: a STREAM-style read of a matrix by the threads of a pool (an iteration
//!   that reads the matrix cannot take less time).
//!
//! A [`Report`](crate::Report) with limit rows prints a `vs limit` column: every value divided
//! by the limit of its configuration (the limit row whose parameters it shares), in the
//! benchmark's unit, so `2.0` is twice the limit's time for times, half the limit's rate
//! reads `0.5` for rates.

use crate::Candidate;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tiers_node::Pool;

/// The implementation name of a limit row.
pub const IMPL: &str = "limit";

/// A word alone in its cache line (and the adjacent one, which some prefetchers pair).
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct Line(pub AtomicU64);

/// How many empty polls before a waiting side yields its processor (only matters when the two
/// sides share one; a transfer between two cores is over long before).
const YIELD_AFTER: u32 = 1 << 16;

fn spin_until(mut ready: impl FnMut() -> bool) {
    let mut polls = 0u32;
    while !ready() {
        // A bare load loop, without PAUSE: the limit is the fastest the line can travel.
        polls += 1;
        if polls == YIELD_AFTER {
            polls = 0;
            std::thread::yield_now();
        }
    }
}

/// One side (`0` or `1`) of `round_trips` cache-line round trips on `line`. Side 0 starts each
/// exchange (makes the word odd) and waits for the answer (the next even value); side 1 waits
/// for an odd value and answers. Both sides must run the same count, starting from an even
/// value (zero, or what a previous complete exchange left).
pub fn ping_pong(line: &AtomicU64, side: usize, round_trips: u64) {
    for _ in 0..round_trips {
        if side == 0 {
            let v = line.load(Ordering::Relaxed);
            line.store(v + 1, Ordering::Release);
            spin_until(|| line.load(Ordering::Acquire) == v + 2);
        } else {
            let mut v = 0;
            spin_until(|| {
                v = line.load(Ordering::Acquire);
                v % 2 == 1
            });
            line.store(v + 1, Ordering::Release);
        }
    }
}

/// Round trips per timed batch of [`ping_pong_floor`].
pub const BATCH: u64 = 256;

/// Side 0 of `round_trips` round trips, as [`ping_pong`], timed in batches of [`BATCH`];
/// returns the time `round_trips` would take at the pace of the fastest batch. That is the
/// limit's estimate: a preemption of either side (a loaded machine) slows some batches but
/// cannot make the hardware faster, so the fastest batch is the transfer itself.
pub fn ping_pong_floor(line: &AtomicU64, round_trips: u64) -> Duration {
    let mut best = f64::INFINITY;
    let mut left = round_trips;
    while left > 0 {
        let k = left.min(BATCH);
        let t = Instant::now();
        ping_pong(line, 0, k);
        best = best.min(t.elapsed().as_secs_f64() / k as f64);
        left -= k;
    }
    if round_trips == 0 {
        return Duration::ZERO;
    }
    Duration::from_secs_f64(best * round_trips as f64)
}

/// The first two distinct processors of `cpus` (the benchmark's threads in order), if any.
pub fn pair(cpus: &[usize]) -> Option<(usize, usize)> {
    let a = *cpus.first()?;
    cpus.iter().find(|&&c| c != a).map(|&b| (a, b))
}

/// How [`round_trip`] measured, for the row's `measured` note.
pub fn round_trip_note(a: usize, b: usize) -> String {
    format!("cache-line round trip between cpus {a} and {b} (two threads pinned there bounce one line: a full round trip, two one-way transfers; {FLOOR})")
}

/// How [`round_trip`] measured, for a row that takes half of it: one one-way transfer of a
/// cache line, the least a two-party barrier (each side's flag reaches the other at once) or
/// a lock hand-over (the lock's line moves once) needs.
pub fn one_way_note(a: usize, b: usize) -> String {
    format!("half a cache-line round trip between cpus {a} and {b}, one one-way transfer (two threads pinned there bounce one line; {FLOOR})")
}

/// How the round trips are timed, for notes.
pub const FLOOR: &str = "each sample at the pace of its fastest batch of 256, so that preemption on a loaded machine does not count as transfer time";

/// A candidate timing cache-line round trips between a thread pinned to `a` and one pinned to
/// `b` ([`ping_pong_floor`]); `compare` then gives seconds per round trip. The threads start
/// and exchange once before the clock starts.
pub fn round_trip(a: usize, b: usize) -> Candidate<'static> {
    let line = Box::new(Line::default());
    Candidate::new(IMPL, move |n| {
        let line = &line.0;
        std::thread::scope(|s| {
            s.spawn(|| {
                let _ = tiers_node::affinity::set(&[b]);
                ping_pong(line, 1, n + 1);
            });
            s.spawn(|| {
                let _ = tiers_node::affinity::set(&[a]);
                ping_pong(line, 0, 1);
                ping_pong_floor(line, n)
            })
            .join()
            .expect("round-trip thread panicked")
        })
    })
}

/// The cache-line round trip of this machine in ns, between the first two cpus this process
/// may run on: the fastest of a few thousand round trips (as [`ping_pong_floor`]), measured
/// once per process and kept. `None` where the process may run on one cpu only. Reports carry
/// it in their `machine` so that every figure's caption can name it, beside the `limit` rows
/// that measure it on their own terms.
pub fn machine_round_trip_ns() -> Option<f64> {
    static ONCE: std::sync::OnceLock<Option<f64>> = std::sync::OnceLock::new();
    *ONCE.get_or_init(|| {
        let topo = tiers_node::Topology::get();
        let (a, b) = pair(&topo.affinity)?;
        let n = 4 * BATCH;
        let mut c = round_trip(a, b);
        let d = (c.run)(n);
        let ns = d.as_secs_f64() * 1e9 / n as f64;
        // Pinning back: the measuring threads were scoped, the caller's affinity is untouched.
        (ns.is_finite() && ns > 0.0).then(|| (ns * 10.0).round() / 10.0)
    })
}

/// How [`memcpy`] measured.
pub fn memcpy_note() -> String {
    "memcpy of the same bytes between two private buffers of this process (copy_from_slice)".into()
}

/// A candidate copying `bytes` bytes between two private buffers; seconds per copy.
pub fn memcpy(bytes: usize) -> Candidate<'static> {
    let a = vec![1u8; bytes.max(1)];
    let mut b = vec![2u8; bytes.max(1)];
    Candidate::new(IMPL, move |n| {
        let t = Instant::now();
        for _ in 0..n {
            b[..bytes].copy_from_slice(black_box(&a[..bytes]));
            black_box(&mut b);
        }
        t.elapsed()
    })
}

/// How [`cross_copy`] measured.
pub fn cross_copy_note(a: usize, b: usize) -> String {
    format!("a ping-pong of the same bytes between two threads pinned to cpus {a} and {b}: each copies the buffer the other just filled into the other's (copy_from_slice) and hands over with one cache line; half a round per sample")
}

/// A candidate of `n` half rounds of a ping-pong of copies of `bytes` bytes between a thread
/// pinned to `a` and one pinned to `b` (see [`cross_copy_note`]); seconds per half round
/// (one copy and one hand-over). Both buffers are touched by both threads before the clock
/// starts.
pub fn cross_copy(a: usize, b: usize, bytes: usize) -> Candidate<'static> {
    struct Bufs(*mut u8, *mut u8);
    // SAFETY: the two threads take turns (the hand-over word orders every copy after the
    // other's), so no byte is written by one while the other reads or writes it.
    unsafe impl Sync for Bufs {}
    let n_bytes = bytes.max(1);
    let mut x = vec![1u8; n_bytes];
    let mut y = vec![2u8; n_bytes];
    let line = Box::new(Line::default());
    Candidate::new(IMPL, move |n| {
        let bufs = Bufs(x.as_mut_ptr(), y.as_mut_ptr());
        let (line, bufs) = (&line.0, &bufs);
        line.store(0, Ordering::SeqCst);
        // Side s copies at turns s, s + 2, ...: side 0 from x into y, side 1 back.
        let side = |s: u64, turns: u64| {
            for i in 0..turns {
                let turn = 2 * i + s;
                spin_until(|| line.load(Ordering::Acquire) == turn);
                let (from, to) = if s == 0 {
                    (bufs.0, bufs.1)
                } else {
                    (bufs.1, bufs.0)
                };
                // SAFETY: both buffers hold n_bytes bytes; see Bufs for the turns.
                unsafe { std::ptr::copy_nonoverlapping(from, to, n_bytes) };
                line.store(turn + 1, Ordering::Release);
            }
        };
        // One warm-up round, then n half rounds (n / 2 rounds, rounded up).
        let rounds = n.div_ceil(2) + 1;
        std::thread::scope(|s| {
            s.spawn(|| {
                let _ = tiers_node::affinity::set(&[b]);
                side(1, rounds);
            });
            s.spawn(|| {
                let _ = tiers_node::affinity::set(&[a]);
                side(0, 1);
                spin_until(|| line.load(Ordering::Acquire) == 2);
                let t = Instant::now();
                for i in 1..rounds {
                    let turn = 2 * i;
                    spin_until(|| line.load(Ordering::Acquire) == turn);
                    // SAFETY: as in `side`.
                    unsafe { std::ptr::copy_nonoverlapping(bufs.0, bufs.1, n_bytes) };
                    line.store(turn + 1, Ordering::Release);
                }
                spin_until(|| line.load(Ordering::Acquire) == 2 * rounds);
                let half = t.elapsed().as_secs_f64() / (2 * (rounds - 1)) as f64;
                Duration::from_secs_f64(half * n as f64)
            })
            .join()
            .expect("cross-copy thread panicked")
        })
    })
}

/// How [`read_once`] measured: `what` names the data (e.g. "the 2000x2000 f32 matrix").
pub fn read_once_note(what: &str, threads: usize) -> String {
    format!("STREAM-style read of {what} once by the pool's {threads} thread(s), each its row block (sum in 16 lanes)")
}

/// The sum of `x` in 16 independent lanes (vectorisable, one pass).
fn sum16(x: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    acc.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

/// A candidate reading `data` once per iteration on the workers of `pool`, each worker its
/// contiguous share; seconds per read of the whole of `data`.
pub fn read_once<'a>(pool: &'a Pool, data: &'a [f32]) -> Candidate<'a> {
    Candidate::new(IMPL, move |n| {
        let t = Instant::now();
        for _ in 0..n {
            pool.spmd(|w| {
                let r = w.static_range(&(0..data.len()));
                black_box(sum16(black_box(&data[r])));
            });
        }
        t.elapsed()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_pong_ends_even_and_counts_both_sides() {
        let line = Line::default();
        std::thread::scope(|s| {
            s.spawn(|| ping_pong(&line.0, 1, 1000));
            ping_pong(&line.0, 0, 1000);
        });
        assert_eq!(line.0.load(Ordering::Relaxed), 2000);
        // Again from where it ended.
        std::thread::scope(|s| {
            s.spawn(|| ping_pong(&line.0, 1, 10));
            ping_pong(&line.0, 0, 10);
        });
        assert_eq!(line.0.load(Ordering::Relaxed), 2020);
        // Timed by batches: the same exchange, a time for all of it.
        std::thread::scope(|s| {
            s.spawn(|| ping_pong(&line.0, 1, 1000));
            assert!(ping_pong_floor(&line.0, 1000) > Duration::ZERO);
        });
        assert_eq!(line.0.load(Ordering::Relaxed), 4020);
    }

    #[test]
    fn pairs() {
        assert_eq!(pair(&[0, 1, 0, 1]), Some((0, 1)));
        assert_eq!(pair(&[3, 3, 5]), Some((3, 5)));
        assert_eq!(pair(&[2]), None);
        assert_eq!(pair(&[2, 2]), None);
        assert_eq!(pair(&[]), None);
    }

    #[test]
    fn limits_measure_something() {
        let cpus = tiers_node::affinity::get().unwrap_or_default();
        let (a, b) = pair(&cpus).unwrap_or((0, 0));
        let mut c = [round_trip(a, b), memcpy(4096)];
        let r = crate::compare(0.01, &mut c);
        assert!(r.iter().all(|(v, _)| *v > 0.0 && v.is_finite()), "{r:?}");
        let pool = Pool::builder()
            .threads(1)
            .warn_oversubscription(false)
            .build()
            .unwrap();
        let data = vec![1.0f32; 1000];
        assert_eq!(sum16(&data), 1000.0);
        let mut c = [read_once(&pool, &data)];
        assert!(crate::compare(0.01, &mut c)[0].0 > 0.0);
    }
}

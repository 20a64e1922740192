//! `tiers bench ranks`: barrier, allreduce of one f64 and fetch_add latency across ranks; the
//! `limit` row is the cache-line round trip between ranks 0 and 1, measured the same way.

use super::{imp, sync_measure, BenchResult, RankLine};
use serde_json::json;
use tiers_bench::{limit, progress, Opts, Report};
use tiers_cluster::{Op, SegId, Timeout, World};

/// Rounds of the rows and the limit, alternated.
const ROUNDS: usize = 3;

pub(in crate::bench) fn run(w: &World, opts: &Opts) -> BenchResult {
    let _seg = w.segment(SegId(0), 64)?;
    let mut report = Report::new("ranks", "ns", true);
    progress(opts, format!("ranks: {} ranks", w.size()));
    let line = RankLine::new(w)?;
    // The rows and the limit are measured in alternating rounds, so that each sees the same
    // state of the machine (a virtual machine's cores move between fast and slow round trips
    // from one second to the next); each is the median of its rounds.
    let t = opts.min_time / ROUNDS as f64;
    let mut samples = [const { Vec::new() }; 4];
    let mut y = [0.0f64];
    for _ in 0..ROUNDS {
        samples[0].push(sync_measure(w, t, |n| {
            for _ in 0..n {
                w.barrier(Timeout::Block).expect("barrier");
            }
        })?);
        samples[1].push(sync_measure(w, t, |n| {
            for i in 0..n {
                w.allreduce(&[i as f64], &mut y, Op::Sum, Timeout::Block)
                    .expect("allreduce");
            }
        })?);
        samples[2].push(sync_measure(w, t, |n| {
            for _ in 0..n {
                w.atomic_fetch_add(SegId(0), 0, 0, 1).expect("fetch_add");
            }
        })?);
        if let Some(l) = &line {
            samples[3].push(round_trips(w, l, t)?);
        }
    }
    let rows = ["barrier", "allreduce", "fetch_add"]
        .into_iter()
        .zip(&samples)
        .map(|(op, v)| (op, tiers_bench::median(v)));
    let round_trip = line.as_ref().map(|_| tiers_bench::median(&samples[3]));
    for (op, secs) in rows {
        report.push(
            &imp(w),
            &[("op", json!(op)), ("ranks", json!(w.size()))],
            secs * 1e9,
        );
    }
    match (&line, round_trip) {
        (Some(l), Some(secs)) => {
            // Half a round trip: a barrier or allreduce of two ranks needs a line to go each
            // way, both at once. fetch_add has none: a rank may repeat its adds while it
            // holds the word's line.
            for op in ["barrier", "allreduce"] {
                report.push_limit(
                    &[("op", json!(op)), ("ranks", json!(w.size()))],
                    secs * 1e9 / 2.0,
                    l.note("half a cache-line round trip (one one-way transfer each way, both at once)"),
                );
            }
        }
        _ => report.note("limit: none with one rank (nothing crosses between cores)"),
    }
    report.note(format!("every rank runs the same count; the time is the slowest rank's; fetch_add: all ranks add to one word at rank 0; each row and the limit: the median of {ROUNDS} alternating rounds"));
    w.barrier(Timeout::Block)?;
    Ok(report)
}

/// Seconds per cache-line round trip between ranks 0 and 1 (the median over samples of
/// [`limit::ping_pong_floor`] at rank 0; every rank takes part in the count all agree on).
fn round_trips(w: &World, l: &RankLine, min_time: f64) -> BenchResult<f64> {
    // 20,000 round trips take 2-20 ms between two cores; samples to fill `min_time` at 1 us
    // per round trip, 5 at least.
    const N: u64 = 20_000;
    let samples = ((min_time / (N as f64 * 1e-6)).ceil() as usize).clamp(5, 100);
    let mut v = Vec::with_capacity(samples);
    for _ in 0..=samples {
        w.barrier(Timeout::Block)?;
        match w.rank() {
            0 => v.push(limit::ping_pong_floor(l.line(), N).as_secs_f64() / N as f64),
            1 => limit::ping_pong(l.line(), 1, N),
            _ => {}
        }
    }
    let mut m = [0.0];
    if w.rank() == 0 {
        v.remove(0); // the first sample warms up
        m[0] = tiers_bench::median(&v);
    }
    let mut out = [0.0];
    w.allreduce(&m, &mut out, Op::Sum, Timeout::Block)?;
    Ok(out[0])
}

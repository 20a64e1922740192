//! `tiers bench ranks`: barrier, allreduce of one f64 and fetch_add latency across ranks.

use super::{imp, sync_measure, BenchResult};
use serde_json::json;
use tiers_bench::{progress, Opts, Report};
use tiers_cluster::{Op, SegId, Timeout, World};

pub(in crate::bench) fn run(w: &World, opts: &Opts) -> BenchResult {
    let _seg = w.segment(SegId(0), 64)?;
    let mut report = Report::new("ranks", "ns", true);
    let mut rows = Vec::new();
    progress(opts, format!("ranks: {} ranks", w.size()));
    let t = sync_measure(w, opts.min_time, |n| {
        for _ in 0..n {
            w.barrier(Timeout::Block).expect("barrier");
        }
    })?;
    rows.push(("barrier", t));
    let mut y = [0.0f64];
    let t = sync_measure(w, opts.min_time, |n| {
        for i in 0..n {
            w.allreduce(&[i as f64], &mut y, Op::Sum, Timeout::Block)
                .expect("allreduce");
        }
    })?;
    rows.push(("allreduce", t));
    let t = sync_measure(w, opts.min_time, |n| {
        for _ in 0..n {
            w.atomic_fetch_add(SegId(0), 0, 0, 1).expect("fetch_add");
        }
    })?;
    rows.push(("fetch_add", t));
    for (op, secs) in rows {
        report.push(
            &imp(w),
            &[("op", json!(op)), ("ranks", json!(w.size()))],
            secs * 1e9,
        );
    }
    report.note("every rank runs the same count; the time is the slowest rank's; fetch_add: all ranks add to one word at rank 0");
    w.barrier(Timeout::Block)?;
    Ok(report)
}

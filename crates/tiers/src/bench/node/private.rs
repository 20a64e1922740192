//! `tiers bench private`: \[Mei2010\]'s processor-private data table. Every thread increments its
//! own counter; ns per access for counters kept in a plain array (neighbours share cache lines:
//! false sharing), a padded [`PerWorker`], a `thread_local!`, and `PerWorker::local` (the pool's
//! thread-local worker index, then the padded slot). The `limit` row is the cache-line round
//! trip between the first two processors in use: what the false-sharing `array` pays per
//! access at worst, and what the private counters must stay far below.

use super::threads;
use serde_json::json;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use tiers_bench::{compare, limit, progress, Candidate, Opts, Report};
use tiers_node::PerWorker;

std::thread_local! {
    static COUNTER: Cell<u64> = const { Cell::new(0) };
}

/// A non-RMW increment (load, add, store), as a plain `counter[i]++` in C compiles to.
#[inline(always)]
fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

pub fn run(opts: &Opts) -> Report {
    let mut report = Report::new("private", "ns", true);
    for &t in &opts.threads {
        progress(opts, format!("private: {t} thread(s)"));
        let cpus = threads::cpus(t);
        let array: Vec<AtomicU64> = (0..t).map(|_| AtomicU64::new(0)).collect();
        let padded = PerWorker::new(t, |_| AtomicU64::new(0));
        let pool = tiers_node::Pool::builder()
            .threads(t)
            .warn_oversubscription(false)
            .build()
            .expect("pool");
        let mut cands = vec![
            Candidate::new("array", |n| {
                threads::timed(t, &cpus, |tid| {
                    let c = &array[tid];
                    for _ in 0..n {
                        bump(std::hint::black_box(c));
                    }
                })
            }),
            Candidate::new("tiers-padded", |n| {
                threads::timed(t, &cpus, |tid| {
                    let c = padded.get(tid);
                    for _ in 0..n {
                        bump(std::hint::black_box(c));
                    }
                })
            }),
            Candidate::new("thread-local", |n| {
                threads::timed(t, &cpus, |_| {
                    for _ in 0..n {
                        COUNTER.with(|c| c.set(std::hint::black_box(c.get() + 1)));
                    }
                })
            }),
            Candidate::new("tiers-local", |n| {
                let t0 = std::time::Instant::now();
                pool.spmd(|_| {
                    let mine = padded.local().expect("inside the pool");
                    for _ in 0..n {
                        bump(std::hint::black_box(mine));
                    }
                });
                t0.elapsed()
            }),
        ];
        let pair = threads::limit_candidate(&mut report, &mut cands, &cpus);
        let results = compare(opts.min_time, &mut cands);
        for (c, (med, _)) in cands.iter().zip(results) {
            let params = [("threads", json!(t))];
            match pair {
                Some((a, b)) if c.name == limit::IMPL => {
                    report.push_limit(&params, med * 1e9, limit::round_trip_note(a, b));
                }
                _ => {
                    report.push(&c.name, &params, med * 1e9);
                }
            }
        }
    }
    report
}

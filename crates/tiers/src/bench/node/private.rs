//! `tiers bench private`: \[Mei2010\]'s processor-private data table. Every thread increments its
//! own counter; ns per access for counters kept in a plain array (neighbours share cache lines:
//! false sharing), a padded [`PerWorker`], a `thread_local!`, and `PerWorker::local` (the pool's
//! thread-local worker index, then the padded slot). The `limit` row is the same increment by
//! one thread alone, of a counter on a cache line of its own: what no counter kept per thread
//! can beat. The false-sharing `array` pays up to a cache-line round trip per access instead.

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
        // The caller, worker 0, pinned as the other candidates' first thread is.
        let pool = tiers_node::Pool::builder()
            .threads(t)
            .pin_caller(true)
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
        cands.push(Candidate::new(limit::IMPL, |n| {
            threads::timed(1, &cpus, |_| {
                let c = tiers_node::CachePadded::new(AtomicU64::new(0));
                for _ in 0..n {
                    bump(std::hint::black_box(&c));
                }
            })
        }));
        let results = compare(opts.min_time, &mut cands);
        for (c, (med, _)) in cands.iter().zip(results) {
            let params = [("threads", json!(t))];
            if c.name == limit::IMPL {
                report.push_limit(
                    &params,
                    med * 1e9,
                    "one thread alone incrementing a counter on a cache line of its own (the same load, add and store)",
                );
            } else {
                report.push(&c.name, &params, med * 1e9);
            }
        }
    }
    report
}

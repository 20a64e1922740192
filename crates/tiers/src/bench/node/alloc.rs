//! `tiers bench alloc`: \[Mei2010\]'s allocation test: every thread allocates and frees a block of
//! the same size 100,000 times; µs per thread, the system allocator against mimalloc (a
//! scalable, thread-caching allocator).

use super::threads;
use serde_json::json;
use std::alloc::{GlobalAlloc, Layout, System};
use std::time::Duration;
use tiers_bench::{compare, progress, Candidate, Opts, Report};

const PAIRS: u64 = 100_000;

fn churn<A: GlobalAlloc>(a: &A, layout: Layout) {
    for _ in 0..PAIRS {
        // SAFETY: the layout has a non-zero size; the block is written once and freed with the
        // same allocator and layout.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null(), "allocation failed");
            p.write_volatile(1);
            a.dealloc(p, layout);
        }
    }
}

pub fn run(opts: &Opts) -> Report {
    let mut report = Report::new("alloc", "us", true);
    for &t in &opts.threads {
        for size in [16usize, 256, 4096, 65536] {
            progress(opts, format!("alloc: {t} thread(s), {size} B"));
            let cpus = threads::cpus(t);
            let layout = Layout::from_size_align(size, 16).expect("layout");
            let mi = mimalloc::MiMalloc;
            let mut cands = vec![
                Candidate::new("system", |n| {
                    let mut d = Duration::ZERO;
                    for _ in 0..n {
                        d += threads::timed(t, &cpus, |_| churn(&System, layout));
                    }
                    d
                }),
                Candidate::new("mimalloc", |n| {
                    let mut d = Duration::ZERO;
                    for _ in 0..n {
                        d += threads::timed(t, &cpus, |_| churn(&mi, layout));
                    }
                    d
                }),
            ];
            let results = compare(opts.min_time, &mut cands);
            for (c, (med, _)) in cands.iter().zip(results) {
                report.push(
                    &c.name,
                    &[("threads", json!(t)), ("size", json!(size))],
                    med * 1e6,
                );
            }
        }
    }
    report
}

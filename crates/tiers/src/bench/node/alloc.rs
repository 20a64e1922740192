//! `tiers bench alloc`: \[Mei2010\]'s allocation test: every thread allocates and frees a block of
//! the same size 100,000 times; µs per thread, the system allocator against mimalloc (a
//! scalable, thread-caching allocator). The `limit` row is what no allocator can beat: the
//! same loop taking the block from, and giving it back to, a free list of the thread's own
//! (one pointer popped and pushed, the block written once).

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

/// The loop of [`churn`] over a free list of one block of the thread's own.
fn churn_floor(size: usize) {
    let mut block = vec![0u8; size];
    let mut free: Vec<*mut u8> = Vec::with_capacity(1);
    free.push(block.as_mut_ptr());
    for _ in 0..PAIRS {
        let p = std::hint::black_box(free.pop()).expect("the block is free");
        // SAFETY: p points at the first byte of `block`, alive for the whole loop.
        unsafe { p.write_volatile(1) };
        free.push(p);
        std::hint::black_box(&mut free);
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
                Candidate::new(tiers_bench::limit::IMPL, |n| {
                    let mut d = Duration::ZERO;
                    for _ in 0..n {
                        d += threads::timed(t, &cpus, |_| churn_floor(size));
                    }
                    d
                }),
            ];
            let results = compare(opts.min_time, &mut cands);
            let params = [("threads", json!(t)), ("size", json!(size))];
            for (c, (med, _)) in cands.iter().zip(results) {
                if c.name == tiers_bench::limit::IMPL {
                    report.push_limit(
                        &params,
                        med * 1e6,
                        "the same loop over a free list of the thread's own (one pointer popped and pushed per pair, the block written once): no allocator's bookkeeping",
                    );
                } else {
                    report.push(&c.name, &params, med * 1e6);
                }
            }
        }
    }
    report
}

//! Running a measured body on pinned threads, the same way for tiers and for every Rust peer.

use std::sync::Barrier as StdBarrier;
use std::time::{Duration, Instant};
use tiers_bench::{limit, Candidate, Report};

/// Processors for `n` benchmark threads: compact placement on this machine.
pub fn cpus(n: usize) -> Vec<usize> {
    tiers_node::Placement::Compact.cpus(n, tiers_node::Topology::get())
}

/// Runs `body(tid)` on `n` threads pinned to `cpus`, thread 0 being the caller's helper thread
/// too; returns the time thread 0 measured from an untimed start barrier to the end of a second
/// untimed barrier after every body finished.
pub fn timed<F>(n: usize, cpus: &[usize], body: F) -> Duration
where
    F: Fn(usize) + Sync,
{
    let start = StdBarrier::new(n);
    let mut elapsed = Duration::ZERO;
    std::thread::scope(|s| {
        let (start, body) = (&start, &body);
        for tid in 1..n {
            let cpu = cpus.get(tid).copied();
            s.spawn(move || {
                if let Some(c) = cpu {
                    let _ = tiers_node::affinity::set(&[c]);
                }
                start.wait();
                body(tid);
                start.wait();
            });
        }
        let h = s.spawn(|| {
            if let Some(&c) = cpus.first() {
                let _ = tiers_node::affinity::set(&[c]);
            }
            start.wait();
            let t0 = Instant::now();
            body(0);
            start.wait();
            t0.elapsed()
        });
        elapsed = h.join().expect("benchmark thread panicked");
    });
    elapsed
}

/// Note of a configuration without a `limit` row.
pub const NO_LIMIT: &str =
    "limit: no row where the threads use one processor (nothing crosses between cores)";

/// Adds the cache-line round trip between the first two distinct processors of `cpus` to
/// `cands` and returns them; with a single processor adds a note to `report` instead.
pub fn limit_candidate(
    report: &mut Report,
    cands: &mut Vec<Candidate<'_>>,
    cpus: &[usize],
) -> Option<(usize, usize)> {
    let pair = limit::pair(cpus);
    match pair {
        Some((a, b)) => cands.push(limit::round_trip(a, b)),
        None => {
            if !report.notes.iter().any(|n| n == NO_LIMIT) {
                report.note(NO_LIMIT);
            }
        }
    }
    pair
}

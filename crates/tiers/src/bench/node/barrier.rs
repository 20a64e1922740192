//! `tiers bench barrier`: ns per barrier episode, every tiers barrier against std, pthread and
//! OpenMP barriers ([GPI-MCTP], Fig. 4), all on threads pinned compactly; the `limit` row is
//! half the cache-line round trip between the first two processors in use, measured
//! alongside: one one-way transfer, as a two-party barrier needs (each side's flag goes to
//! the other, both at once).

use super::{peers, threads};
use serde_json::json;
use std::time::Duration;
use tiers_bench::{compare, limit, progress, Candidate, Opts, Report};
use tiers_node::{Barrier, BarrierKind};

pub fn run(opts: &Opts) -> Report {
    let mut report = Report::new("barrier", "ns", true);
    for &t in &opts.threads {
        progress(opts, format!("barrier: {t} thread(s)"));
        let cpus = threads::cpus(t);
        let barriers: Vec<(String, Box<dyn Barrier>)> = [
            BarrierKind::Active,
            BarrierKind::Passive,
            BarrierKind::Hier,
            BarrierKind::Adaptive,
            BarrierKind::Central,
            BarrierKind::Relaxed,
        ]
        .into_iter()
        .map(|k| (format!("tiers-{}", k.name()), k.build(t, Some(&cpus))))
        .collect();
        let std_barrier = std::sync::Barrier::new(t);
        let mut cands: Vec<Candidate<'_>> = barriers
            .iter()
            .map(|(name, b)| {
                let cpus = cpus.clone();
                Candidate::new(name.clone(), move |n| {
                    threads::timed(t, &cpus, |tid| {
                        for _ in 0..n {
                            b.wait(tid);
                        }
                    })
                })
            })
            .collect();
        {
            let cpus = cpus.clone();
            let sb = &std_barrier;
            cands.push(Candidate::new("std", move |n| {
                threads::timed(t, &cpus, |_| {
                    for _ in 0..n {
                        sb.wait();
                    }
                })
            }));
        }
        if peers::pthread_barrier(t, 1, &cpus).is_some() {
            let cpus = cpus.clone();
            cands.push(Candidate::new("pthread", move |n| {
                Duration::from_secs_f64(peers::pthread_barrier(t, n, &cpus).unwrap_or(f64::NAN))
            }));
        } else if !report.notes.iter().any(|n| n == peers::NO_PTHREAD) {
            report.note(peers::NO_PTHREAD);
        }
        match peers::omp_team(t) {
            Some(team) if team == t => {
                let cpus = cpus.clone();
                cands.push(Candidate::new("openmp", move |n| {
                    Duration::from_secs_f64(peers::omp_barrier(t, n, &cpus).unwrap_or(f64::NAN))
                }));
            }
            Some(team) => report.note(format!(
                "openmp gave a team of {team} for {t} threads; row skipped"
            )),
            None => {
                if !report.notes.iter().any(|n| n == peers::NO_OPENMP) {
                    report.note(peers::NO_OPENMP);
                }
            }
        }
        let pair = threads::limit_candidate(&mut report, &mut cands, &cpus);
        let results = compare(opts.min_time, &mut cands);
        for (c, (med, samples)) in cands.iter().zip(results) {
            let params = [("threads", json!(t))];
            let row = match pair {
                Some((a, b)) if c.name == limit::IMPL => {
                    report.push_limit(&params, med * 1e9 / 2.0, limit::one_way_note(a, b))
                }
                _ => report.push(&c.name, &params, med * 1e9),
            };
            row.extra.push(("samples".into(), json!(samples.len())));
        }
    }
    report
}

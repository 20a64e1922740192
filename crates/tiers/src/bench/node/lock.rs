//! `tiers bench lock`: a contended critical section that increments a shared integer (
//! [GPI-MCTP], Fig. 5), ns per operation (total time over all operations of all threads): the tiers
//! locks against std Mutex, parking_lot, the pthread mutex and OpenMP's critical. The `limit`
//! row is half the cache-line round trip between the first two processors in use: one
//! one-way transfer, what one hand-over of the lock between them costs at least (a lock
//! taken again by the same thread, as test-and-set locks allow, hands nothing over and can
//! be cheaper).

use super::{peers, threads};
use serde_json::json;
use std::time::Duration;
use tiers_bench::{compare, limit, progress, Candidate, Opts, Report};
use tiers_node::{Lock, McsLock, RawLock, TicketLock, TtasLock};

fn tiers_lock<R: RawLock + Default + 'static>(t: usize, cpus: Vec<usize>) -> Candidate<'static> {
    let lock = Lock::<R, u64>::new(0);
    Candidate::new(format!("tiers-{}", R::NAME), move |n| {
        *lock.lock() = 0;
        let d = threads::timed(t, &cpus, |_| {
            for _ in 0..n {
                *lock.lock() += 1;
            }
        });
        assert_eq!(*lock.lock(), n * t as u64, "{} lost an increment", R::NAME);
        d
    })
}

pub fn run(opts: &Opts) -> Report {
    let mut report = Report::new("lock", "ns", true);
    for &t in &opts.threads {
        progress(opts, format!("lock: {t} thread(s)"));
        let cpus = threads::cpus(t);
        let mut cands = vec![
            tiers_lock::<TtasLock>(t, cpus.clone()),
            tiers_lock::<TicketLock>(t, cpus.clone()),
            tiers_lock::<McsLock>(t, cpus.clone()),
        ];
        {
            let cpus = cpus.clone();
            let m = std::sync::Mutex::new(0u64);
            cands.push(Candidate::new("std", move |n| {
                *m.lock().unwrap() = 0;
                let d = threads::timed(t, &cpus, |_| {
                    for _ in 0..n {
                        *m.lock().unwrap() += 1;
                    }
                });
                assert_eq!(*m.lock().unwrap(), n * t as u64);
                d
            }));
        }
        {
            let cpus = cpus.clone();
            let m = parking_lot::Mutex::new(0u64);
            cands.push(Candidate::new("parking_lot", move |n| {
                *m.lock() = 0;
                let d = threads::timed(t, &cpus, |_| {
                    for _ in 0..n {
                        *m.lock() += 1;
                    }
                });
                assert_eq!(*m.lock(), n * t as u64);
                d
            }));
        }
        if peers::pthread_mutex(t, 1, &cpus).is_some() {
            let cpus = cpus.clone();
            cands.push(Candidate::new("pthread", move |n| {
                let (s, count) = peers::pthread_mutex(t, n, &cpus).expect("peer built");
                assert_eq!(count, n * t as u64);
                Duration::from_secs_f64(s)
            }));
        } else if !report.notes.iter().any(|n| n == peers::NO_PTHREAD) {
            report.note(peers::NO_PTHREAD);
        }
        match peers::omp_team(t) {
            Some(team) if team == t => {
                let cpus = cpus.clone();
                cands.push(Candidate::new("openmp", move |n| {
                    let (s, count) = peers::omp_critical(t, n, &cpus).expect("peer built");
                    assert_eq!(count, n * t as u64);
                    Duration::from_secs_f64(s)
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
        for (c, (med, _)) in cands.iter().zip(results) {
            let params = [("threads", json!(t))];
            match pair {
                Some((a, b)) if c.name == limit::IMPL => {
                    report.push_limit(&params, med * 1e9 / 2.0, limit::one_way_note(a, b));
                }
                // compare() divides by iterations per thread; per operation divide by threads.
                _ => {
                    report.push(&c.name, &params, med * 1e9 / t as f64);
                }
            }
        }
    }
    report
}

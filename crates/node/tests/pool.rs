//! The pool: regions, loops, schedules, panics, suspend/resume, stop/start, two pools meeting.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tiers_node::{
    AdaptiveBarrier, Barrier, BarrierKind, Placement, Pool, PoolError, Schedule, WaitPolicy,
};

fn pool(n: usize, wait: WaitPolicy) -> Pool {
    Pool::builder()
        .threads(n)
        .wait(wait)
        .warn_oversubscription(false)
        .build()
        .unwrap()
}

#[test]
fn zero_threads_is_a_clear_error() {
    let e = Pool::builder().threads(0).build().unwrap_err();
    assert!(matches!(e, PoolError::ZeroThreads));
    assert!(e.to_string().contains("at least one thread"));
}

#[test]
fn too_many_threads_is_a_clear_error_before_any_allocation() {
    for n in [Pool::MAX_THREADS + 1, 1_000_000_000, usize::MAX] {
        let e = Pool::builder().threads(n).build().unwrap_err();
        assert!(matches!(e, PoolError::TooManyThreads(m) if m == n));
        assert!(e.to_string().contains("at most 65536"), "{e}");
    }
}

#[test]
fn spmd_runs_once_per_worker_with_distinct_indices() {
    for wait in [
        WaitPolicy::Spin,
        WaitPolicy::Pause,
        WaitPolicy::Park,
        WaitPolicy::Auto,
    ] {
        for n in [1, 2, 3, 5] {
            let p = pool(n, wait);
            let seen: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            for _ in 0..200 {
                p.spmd(|w| {
                    assert_eq!(w.count(), n);
                    seen[w.index()].fetch_add(1, Ordering::Relaxed);
                });
            }
            assert!(
                seen.iter().all(|s| s.load(Ordering::Relaxed) == 200),
                "{wait:?} n={n}"
            );
        }
    }
}

#[test]
fn worker_barrier_orders_phases() {
    let p = pool(4, WaitPolicy::Auto);
    let data: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
    p.spmd(|w| {
        for round in 1..=100u64 {
            data[w.index()].store(round, Ordering::Relaxed);
            w.barrier();
            for d in &data {
                assert_eq!(d.load(Ordering::Relaxed), round);
            }
            w.barrier();
        }
    });
}

#[test]
fn loops_cover_every_index_exactly_once() {
    let p = pool(3, WaitPolicy::Auto);
    for sched in [
        Schedule::Static,
        Schedule::Blocked(64),
        Schedule::Blocked(1),
        Schedule::Dynamic(1),
        Schedule::Dynamic(7),
    ] {
        for range in [0..0, 5..6, 0..1000, 13..1013] {
            let hits: Vec<AtomicUsize> = (0..1013).map(|_| AtomicUsize::new(0)).collect();
            p.for_each(range.clone(), sched, |i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            for (i, h) in hits.iter().enumerate() {
                assert_eq!(
                    h.load(Ordering::Relaxed),
                    usize::from(range.contains(&i)),
                    "{sched:?} {range:?} i={i}"
                );
            }
        }
    }
}

/// Block and chunk sizes near `usize::MAX`, and ranges at the top of `usize`: every index
/// once, none outside the range, and the loop ends (sizes that wrapped ran indices twice, or
/// from 0, for ever).
#[test]
fn huge_blocks_and_ranges_at_the_top_cover_every_index_once() {
    let p = pool(2, WaitPolicy::Auto);
    let top = usize::MAX - 4..usize::MAX;
    for schedule in [
        Schedule::Dynamic(1 << 63),
        Schedule::Dynamic(usize::MAX),
        Schedule::Dynamic(1),
        Schedule::Blocked(1 << 63),
        Schedule::Blocked(usize::MAX),
        Schedule::Blocked(1),
        Schedule::Dynamic(0),
        Schedule::Blocked(0),
    ] {
        for range in [0..10, top.clone()] {
            let seen: Vec<AtomicUsize> = range.clone().map(|_| AtomicUsize::new(0)).collect();
            let outside = AtomicUsize::new(0);
            p.for_each(range.clone(), schedule, |i| {
                if range.contains(&i) {
                    seen[i - range.start].fetch_add(1, Ordering::Relaxed);
                } else {
                    outside.fetch_add(1, Ordering::Relaxed);
                }
            });
            assert_eq!(outside.load(Ordering::Relaxed), 0, "{schedule:?} {range:?}");
            assert!(
                seen.iter().all(|s| s.load(Ordering::Relaxed) == 1),
                "{schedule:?} {range:?}"
            );
        }
    }
}

/// An empty processor list pins nothing (it divided by its length), for a pool and for a
/// hierarchical barrier.
#[test]
fn an_empty_processor_list_pins_nothing() {
    let p = Pool::builder()
        .threads(2)
        .placement(Placement::List(Vec::new()))
        .warn_oversubscription(false)
        .build()
        .unwrap();
    let n = AtomicUsize::new(0);
    p.for_each(0..100, Schedule::Static, |_| {
        n.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(n.load(Ordering::Relaxed), 100);
    let b = tiers_node::HierBarrier::for_cpus(2, Some(&[]), WaitPolicy::Auto);
    std::thread::scope(|s| {
        for t in 0..2 {
            let b = &b;
            s.spawn(move || b.wait(t));
        }
    });
}

#[test]
fn static_schedule_is_a_row_block_partition() {
    let p = pool(3, WaitPolicy::Auto);
    let ranges = std::sync::Mutex::new(vec![]);
    p.for_each_range(0..10, Schedule::Static, |r| ranges.lock().unwrap().push(r));
    let mut r = ranges.into_inner().unwrap();
    r.sort_by_key(|r| r.start);
    assert_eq!(r, vec![0..4, 4..7, 7..10]);
}

#[test]
fn blocked_schedule_deals_blocks_round_robin() {
    let p = pool(2, WaitPolicy::Auto);
    let owner: Vec<AtomicUsize> = (0..10).map(|_| AtomicUsize::new(9)).collect();
    p.spmd(|w| {
        let _ = w;
    });
    p.for_each_range(0..10, Schedule::Blocked(3), |r| {
        let me = tiers_node::current_worker().unwrap();
        for i in r {
            owner[i].store(me, Ordering::Relaxed);
        }
    });
    let o: Vec<usize> = owner.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    assert_eq!(o, vec![0, 0, 0, 1, 1, 1, 0, 0, 0, 1]);
}

#[test]
fn reduce_is_deterministic_and_thread_count_independent_for_integers() {
    for n in [1, 2, 3, 4] {
        let p = pool(n, WaitPolicy::Auto);
        for sched in [
            Schedule::Static,
            Schedule::Blocked(10),
            Schedule::Dynamic(3),
        ] {
            let s = p.reduce(
                0..10_000,
                sched,
                || 0u64,
                |r| r.map(|i| (i * i) as u64).sum(),
                |a, b| a + b,
            );
            assert_eq!(s, (0..10_000u64).map(|i| i * i).sum::<u64>());
        }
        let empty = p.reduce(5..5, Schedule::Static, || 7u64, |_| 1, |a, b| a + b);
        assert_eq!(
            empty,
            7 * n as u64 - 7 * (n as u64 - 1) + 7 * (n as u64 - 1)
        );
    }
}

#[test]
fn panics_reach_the_caller_and_the_pool_survives() {
    let p = pool(3, WaitPolicy::Auto);
    for victim in 0..3 {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            p.spmd(|w| {
                if w.index() == victim {
                    panic!("worker {victim} fails");
                }
            })
        }));
        let msg = r.unwrap_err();
        let msg = msg.downcast_ref::<String>().unwrap();
        assert_eq!(msg, &format!("worker {victim} fails"));
    }
    let count = AtomicUsize::new(0);
    p.spmd(|_| {
        count.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(count.into_inner(), 3);
}

/// A worker that panics while the others wait for it at the team barrier (or before they get
/// there, or after their last barrier) must not leave them waiting for ever: the region ends,
/// the caller gets that worker's panic (not one of the others leaving), and the pool's barrier
/// works again in the next region, for every barrier kind.
#[test]
fn a_panic_beside_waiting_workers_ends_the_region_and_the_barrier_recovers() {
    const BARRIERS: usize = 3;
    for kind in BarrierKind::ALL {
        for n in [2, 3, 4] {
            let p = Pool::builder()
                .threads(n)
                .barrier(kind)
                .warn_oversubscription(false)
                .build()
                .unwrap();
            for victim in 0..n {
                for after in [0, 1, BARRIERS] {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        p.spmd(|w| {
                            for b in 0..BARRIERS {
                                if w.index() == victim && b == after {
                                    panic!("worker {victim} fails after {after}");
                                }
                                w.barrier();
                            }
                            if w.index() == victim && after == BARRIERS {
                                panic!("worker {victim} fails after {after}");
                            }
                        })
                    }));
                    let msg = r.expect_err("the region's panic reaches the caller");
                    assert_eq!(
                        msg.downcast_ref::<String>().map(String::as_str),
                        Some(format!("worker {victim} fails after {after}").as_str()),
                        "{} barrier, {n} threads",
                        kind.name()
                    );
                    // The barrier synchronises again: nobody runs ahead, nobody is left behind.
                    let count = AtomicUsize::new(0);
                    let wrong = AtomicUsize::new(0);
                    p.spmd(|w| {
                        for e in 1..=20 {
                            count.fetch_add(1, Ordering::Relaxed);
                            w.barrier();
                            if count.load(Ordering::Relaxed) != n * e {
                                wrong.fetch_add(1, Ordering::Relaxed);
                            }
                            w.barrier();
                        }
                    });
                    assert_eq!(
                        wrong.into_inner(),
                        0,
                        "{} barrier, {n} threads, victim {victim} after {after}",
                        kind.name()
                    );
                }
            }
        }
    }
}

#[test]
fn suspend_resume_stop_start() {
    let mut p = pool(3, WaitPolicy::Spin);
    p.suspend();
    assert!(p.is_suspended());
    let c = AtomicUsize::new(0);
    p.spmd(|_| {
        c.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(
        c.load(Ordering::Relaxed),
        3,
        "regions still run while suspended"
    );
    std::thread::sleep(Duration::from_millis(20));
    p.resume();
    assert!(!p.is_suspended());
    p.stop();
    assert!(!p.is_running());
    p.start().unwrap();
    p.spmd(|_| {
        c.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(c.load(Ordering::Relaxed), 6);
}

#[test]
#[should_panic(expected = "cannot be called from inside a region of the same pool")]
fn nested_region_of_the_same_pool_panics() {
    let p = pool(2, WaitPolicy::Auto);
    p.spmd(|w| {
        if w.index() == 0 {
            p.spmd(|_| {});
        }
    });
}

#[test]
fn two_pools_synchronise_through_one_barrier() {
    let a = pool(2, WaitPolicy::Auto);
    let b = pool(3, WaitPolicy::Auto);
    let bar = Arc::new(AdaptiveBarrier::new(5));
    let stage: Vec<AtomicU64> = (0..5).map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|s| {
        s.spawn(|| {
            a.spmd(|w| {
                for r in 1..=50 {
                    stage[w.index()].store(r, Ordering::Relaxed);
                    bar.wait(w.index());
                    assert!(stage.iter().all(|x| x.load(Ordering::Relaxed) == r));
                    bar.wait(w.index());
                }
            })
        });
        b.spmd(|w| {
            for r in 1..=50 {
                stage[2 + w.index()].store(r, Ordering::Relaxed);
                bar.wait(2 + w.index());
                assert!(stage.iter().all(|x| x.load(Ordering::Relaxed) == r));
                bar.wait(2 + w.index());
            }
        });
    });
}

#[test]
fn workers_are_pinned_where_placement_says() {
    let topo = tiers_node::Topology::detect();
    let last = *topo.affinity.last().unwrap();
    let p = Pool::builder()
        .threads(2)
        .placement(Placement::List(vec![last, last]))
        .build()
        .unwrap();
    assert_eq!(p.cpus(), &[last, last]);
    let where_ = std::sync::Mutex::new(None);
    p.spmd(|w| {
        if w.index() == 1 {
            *where_.lock().unwrap() = Some(tiers_node::affinity::get().unwrap());
        }
    });
    assert_eq!(where_.into_inner().unwrap(), Some(vec![last]));
}

#[test]
fn regions_from_many_threads_are_serialised() {
    let p = pool(2, WaitPolicy::Auto);
    let c = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..100 {
                    p.spmd(|_| {
                        c.fetch_add(1, Ordering::Relaxed);
                    });
                }
            });
        }
    });
    assert_eq!(c.into_inner(), 4 * 100 * 2);
}

#[test]
fn per_worker_local_finds_the_calling_workers_copy() {
    let p = pool(3, WaitPolicy::Auto);
    let data = tiers_node::PerWorker::new(3, |_| AtomicUsize::new(0));
    p.spmd(|w| {
        data.local()
            .unwrap()
            .store(w.index() + 100, Ordering::Relaxed);
    });
    let v: Vec<usize> = data.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    assert_eq!(v, vec![100, 101, 102]);
}

/// A region of a pool started inside another pool's region inside the first's is refused
/// as the direct nesting is (it waited for itself), on 1 and 2 threads.
#[test]
fn nesting_through_another_pool_panics_instead_of_waiting() {
    for n in [1, 2] {
        let a = pool(n, WaitPolicy::Auto);
        let b = pool(n, WaitPolicy::Auto);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            a.spmd(|w| {
                if w.index() == 0 {
                    b.spmd(|v| {
                        if v.index() == 0 {
                            a.spmd(|_| {});
                        }
                    });
                }
            })
        }));
        let msg = r.expect_err("refused");
        let msg = msg
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| msg.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        assert!(msg.contains("same pool"), "{n} threads: {msg}");
        // Both pools still work.
        let c = AtomicUsize::new(0);
        a.spmd(|_| {
            c.fetch_add(1, Ordering::Relaxed);
        });
        b.spmd(|_| {
            c.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(c.load(Ordering::Relaxed), 2 * n);
    }
}

/// suspend() and resume() from inside a region of the pool are refused (they waited for the
/// region they are in).
#[test]
#[should_panic(expected = "Pool::suspend cannot be called from inside a region")]
fn suspend_inside_a_region_panics() {
    let p = pool(2, WaitPolicy::Auto);
    p.spmd(|w| {
        if w.index() == 1 {
            p.suspend();
        }
    });
}

/// A pool of one thread runs its loops as a region like any other size: the worker index is
/// known inside, and nesting is refused.
#[test]
fn one_thread_loops_run_as_regions() {
    let p = pool(1, WaitPolicy::Auto);
    let seen = AtomicUsize::new(0);
    p.for_each(0..10, Schedule::Static, |_| {
        if tiers_node::current_worker() == Some(0) {
            seen.fetch_add(1, Ordering::Relaxed);
        }
    });
    assert_eq!(seen.load(Ordering::Relaxed), 10);
    let sum = p.reduce(
        0..10,
        Schedule::Static,
        || 0usize,
        |r| {
            r.filter(|_| tiers_node::current_worker() == Some(0))
                .count()
        },
        |a, b| a + b,
    );
    assert_eq!(sum, 10);
}

/// A thread name prefix no thread can take is an error of `build`.
#[test]
fn a_name_with_a_nul_byte_is_an_error() {
    let e = Pool::builder().threads(2).name("bad\0name").build();
    assert!(matches!(e, Err(tiers_node::PoolError::BadName(_))));
}

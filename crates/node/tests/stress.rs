//! Stress tests: many iterations, more threads than the machine has cores, random batch sizes.
//! Every test checks exact outcomes (counts, order, mutual exclusion), never timings.
//!
//! The default sizes keep the whole file well under a minute in `--release` on 2 cores;
//! `TIERS_STRESS=N` multiplies the iteration counts by N for longer runs.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tiers_node::barrier::DisseminationBarrier;
use tiers_node::lock::{Lock, McsLock, RawLock, TicketLock, TtasLock};
use tiers_node::{
    Barrier, BarrierKind, CentralBarrier, HierBarrier, Inbox, Pool, Schedule, WaitPolicy,
};

/// The iteration multiplier from `TIERS_STRESS` (default 1).
fn scale() -> usize {
    std::env::var("TIERS_STRESS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// A small deterministic generator (xorshift), so a failing run can be repeated.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

// ---------------------------------------------------------------------------------------------
// Barriers

/// Every thread bumps a shared counter, then waits; after the barrier the counter must be
/// exactly `n` per episode so far (nobody ran ahead, nobody was left behind), and every episode
/// has exactly one leader. A second wait per episode keeps the next bump out of the check.
fn hammer_barrier(b: Arc<dyn Barrier>, episodes: usize) {
    let n = b.parties();
    let count = Arc::new(AtomicUsize::new(0));
    let leaders = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|s| {
        for me in 0..n {
            let (b, count, leaders) = (&b, &count, &leaders);
            s.spawn(move || {
                for e in 1..=episodes {
                    count.fetch_add(1, Ordering::Relaxed);
                    if b.wait(me) {
                        leaders.fetch_add(1, Ordering::Relaxed);
                    }
                    assert_eq!(
                        count.load(Ordering::Relaxed),
                        n * e,
                        "{} with {n} threads, episode {e}",
                        b.name()
                    );
                    b.wait(me);
                }
            });
        }
    });
    assert_eq!(
        leaders.load(Ordering::Relaxed),
        episodes,
        "{} with {n} threads: one leader per episode",
        b.name()
    );
}

/// Episodes for `n` threads waiting under `policy` on a 2-core machine: spinning waiters that
/// outnumber the cores pass an episode only when the scheduler runs the late thread.
fn episodes(policy_spins: bool, n: usize) -> usize {
    let base = if policy_spins && n > 2 { 300 } else { 2000 };
    base * scale()
}

#[test]
fn every_barrier_kind_with_more_threads_than_cores() {
    for kind in BarrierKind::ALL {
        for n in [3, 4, 8] {
            let spins = matches!(
                kind,
                BarrierKind::Active
                    | BarrierKind::Passive
                    | BarrierKind::Central
                    | BarrierKind::Hier
            );
            hammer_barrier(Arc::from(kind.build(n, None)), episodes(spins, n));
        }
    }
}

#[test]
fn central_and_dissemination_barriers_under_every_policy() {
    for policy in [
        WaitPolicy::Spin,
        WaitPolicy::Pause,
        WaitPolicy::Park,
        WaitPolicy::Auto,
    ] {
        let spins = matches!(policy, WaitPolicy::Spin | WaitPolicy::Pause);
        for n in [3, 5] {
            hammer_barrier(Arc::new(CentralBarrier::new(n, policy)), episodes(spins, n));
            hammer_barrier(
                Arc::new(DisseminationBarrier::new(n, policy)),
                episodes(spins, n),
            );
        }
    }
}

#[test]
fn hierarchical_barrier_with_explicit_groups() {
    let layouts: Vec<Vec<Vec<usize>>> = vec![
        vec![vec![0, 1, 2]],
        vec![vec![0], vec![1], vec![2], vec![3]],
        vec![vec![3, 0], vec![1, 2]],
        vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]],
        vec![vec![7], vec![0, 1, 2], vec![6, 5, 4, 3]],
    ];
    for groups in layouts {
        let n = groups.iter().map(|g| g.len()).sum();
        for policy in [WaitPolicy::Park, WaitPolicy::Auto, WaitPolicy::Pause] {
            let spins = policy == WaitPolicy::Pause;
            hammer_barrier(
                Arc::new(HierBarrier::with_groups(n, groups.clone(), policy)),
                episodes(spins, n),
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Locks

/// `threads` threads take the lock `iters` times each (every 7th time by spinning on
/// `try_lock`) and update two fields non-atomically, with a flag that must never be seen set on
/// entry: a broken lock shows as a torn pair, a seen flag, or a lost increment.
fn hammer_lock<R: RawLock + Default>(threads: usize, iters: usize) {
    let lock = Lock::<R, (u64, u64)>::new((0, 0));
    let inside = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (lock, inside) = (&lock, &inside);
            s.spawn(move || {
                for i in 0..iters {
                    let mut g = if (i + t) % 7 == 0 {
                        loop {
                            if let Some(g) = lock.try_lock() {
                                break g;
                            }
                            std::thread::yield_now();
                        }
                    } else {
                        lock.lock()
                    };
                    assert!(
                        !inside.swap(true, Ordering::Relaxed),
                        "{}: two holders",
                        R::NAME
                    );
                    assert_eq!(g.0, g.1, "{}: torn update", R::NAME);
                    g.0 += 1;
                    std::hint::black_box(&mut *g);
                    g.1 += 1;
                    inside.store(false, Ordering::Relaxed);
                }
            });
        }
    });
    let total = (threads * iters) as u64;
    assert_eq!(*lock.lock(), (total, total), "{}", R::NAME);
}

#[test]
fn locks_with_more_threads_than_cores() {
    let iters = 20_000 * scale();
    for threads in [3, 4, 8] {
        hammer_lock::<TicketLock>(threads, iters);
        hammer_lock::<McsLock>(threads, iters);
        hammer_lock::<TtasLock>(threads, iters);
    }
}

#[test]
fn mcs_locks_nested_and_released_out_of_order() {
    let locks: Vec<Lock<McsLock, u64>> = (0..3).map(|_| Lock::new(0)).collect();
    let iters = 5_000 * scale();
    std::thread::scope(|s| {
        for _ in 0..4 {
            let locks = &locks;
            s.spawn(move || {
                for _ in 0..iters {
                    // Always in index order (no deadlock), released in a different order.
                    let mut a = locks[0].lock();
                    let mut b = locks[1].lock();
                    let mut c = locks[2].lock();
                    *a += 1;
                    drop(a);
                    *c += 1;
                    drop(c);
                    *b += 1;
                    drop(b);
                }
            });
        }
    });
    for l in &locks {
        assert_eq!(*l.lock(), 4 * iters as u64);
    }
}

// ---------------------------------------------------------------------------------------------
// Inbox

#[test]
fn inbox_many_producers_random_batches() {
    const PRODUCERS: usize = 8;
    let per = 50_000 * scale();
    for capacity in [1, 4, 64] {
        let mut q = Inbox::<(usize, usize)>::with_max_producers(capacity, PRODUCERS);
        let tx = q.sender();
        let mut senders = vec![tx];
        for _ in 1..PRODUCERS {
            let s = senders[0].clone();
            senders.push(s);
        }
        std::thread::scope(|s| {
            for (p, mut tx) in senders.into_iter().enumerate() {
                s.spawn(move || {
                    let mut rng = Rng::new(p as u64 + 1);
                    for i in 0..per {
                        if rng.below(4) == 0 {
                            // The notifying push, as a message-driven scheduler uses it.
                            let mut v = (p, i);
                            while let Err(tiers_node::Full(back)) = tx.push_notify(v) {
                                v = back;
                                std::thread::yield_now();
                            }
                        } else {
                            tx.push((p, i));
                        }
                    }
                });
            }
            let mut next = [0usize; PRODUCERS];
            let mut got = 0;
            let mut rng = Rng::new(99);
            while got < PRODUCERS * per {
                let mut check = |(p, i): (usize, usize)| {
                    assert_eq!(i, next[p], "producer {p} out of order");
                    next[p] += 1;
                };
                got += match rng.below(4) {
                    0 => q
                        .pop_timeout(Duration::from_millis(50))
                        .map(&mut check)
                        .map_or(0, |_| 1),
                    1 => q.recv_batch(1 + rng.below(100), Duration::from_millis(50), &mut check),
                    _ => q.drain(1 + rng.below(100), &mut check),
                };
            }
            assert!(next.iter().all(|&n| n == per));
        });
        assert!(q.is_empty());
    }
}

#[test]
fn inbox_senders_registered_while_messages_flow() {
    let mut q = Inbox::<usize>::with_max_producers(16, 64);
    let first = q.sender();
    let per = 2_000 * scale();
    let total = std::thread::scope(|s| {
        for _ in 0..4 {
            let seed = first.clone();
            s.spawn(move || {
                // Each thread keeps cloning (registering new rings) while it sends.
                let mut tx = seed;
                for i in 0..per {
                    if i % (per / 8).max(1) == 0 {
                        tx = tx.clone();
                    }
                    tx.push(1);
                }
            });
        }
        drop(first);
        let mut sum = 0;
        while sum < 4 * per {
            sum += q.recv_batch(64, Duration::from_millis(20), |v| assert_eq!(v, 1));
        }
        sum
    });
    assert_eq!(total, 4 * per);
    assert!(q.producers() <= 64);
}

// ---------------------------------------------------------------------------------------------
// Pool

fn pool(n: usize, wait: WaitPolicy) -> Pool {
    Pool::builder()
        .threads(n)
        .wait(wait)
        .warn_oversubscription(false)
        .build()
        .unwrap()
}

#[test]
fn pool_many_tiny_regions() {
    let regions = 5_000 * scale();
    for (n, wait) in [
        (3, WaitPolicy::Auto),
        (4, WaitPolicy::Park),
        (3, WaitPolicy::Pause),
        (8, WaitPolicy::Auto),
    ] {
        let p = pool(n, wait);
        let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        for _ in 0..regions {
            p.spmd(|w| {
                hits[w.index()].fetch_add(1, Ordering::Relaxed);
            });
        }
        for (i, h) in hits.iter().enumerate() {
            assert_eq!(
                h.load(Ordering::Relaxed),
                regions,
                "{wait:?} n={n} worker {i}"
            );
        }
        let sum = AtomicU64::new(0);
        p.for_each(0..10_000, Schedule::Dynamic(3), |i| {
            sum.fetch_add(i as u64, Ordering::Relaxed);
        });
        assert_eq!(sum.into_inner(), 49_995_000);
    }
}

#[test]
fn pool_regions_with_panics_stay_usable() {
    let regions = 1_000 * scale();
    let p = pool(4, WaitPolicy::Auto);
    let hits: Vec<AtomicUsize> = (0..4).map(|_| AtomicUsize::new(0)).collect();
    let mut rng = Rng::new(7);
    let mut panics = 0;
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for r in 0..regions {
        // Every third region panics on one worker (sometimes the caller, worker 0).
        let victim = if r % 3 == 0 { rng.below(4) } else { usize::MAX };
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            p.spmd(|w| {
                hits[w.index()].fetch_add(1, Ordering::Relaxed);
                if w.index() == victim {
                    panic!("region {r} fails on worker {victim}");
                }
            })
        }));
        if victim != usize::MAX {
            panics += 1;
            let msg = res.expect_err("the panic must reach the caller");
            let msg = msg
                .downcast_ref::<String>()
                .expect("the worker's own payload");
            assert_eq!(msg, &format!("region {r} fails on worker {victim}"));
        } else {
            assert!(res.is_ok());
        }
    }
    std::panic::set_hook(quiet);
    assert_eq!(panics, regions.div_ceil(3));
    // Every worker ran every region exactly once, panicking or not.
    for h in &hits {
        assert_eq!(h.load(Ordering::Relaxed), regions);
    }
}

/// Several threads start regions on one pool while another keeps suspending and resuming it:
/// every region must run exactly once on every worker.
fn suspend_resume_race(wait: WaitPolicy, n: usize, regions_per_thread: usize) {
    let p = Arc::new(pool(n, wait));
    let hits: Arc<Vec<AtomicUsize>> = Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let toggler = {
        let (p, stop) = (p.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if k % 2 == 0 {
                    p.suspend();
                } else {
                    p.resume();
                }
                k += 1;
                if k % 16 == 0 {
                    std::thread::yield_now();
                }
            }
            p.resume();
        })
    };
    let callers: Vec<_> = (0..3)
        .map(|c| {
            let (p, hits) = (p.clone(), hits.clone());
            std::thread::spawn(move || {
                for r in 0..regions_per_thread {
                    if (r + c) % 5 == 0 {
                        // A control event right before the region, from the same thread.
                        p.resume();
                    }
                    p.spmd(|w| {
                        hits[w.index()].fetch_add(1, Ordering::Relaxed);
                    });
                }
            })
        })
        .collect();
    for c in callers {
        c.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    toggler.join().unwrap();
    for (i, h) in hits.iter().enumerate() {
        assert_eq!(
            h.load(Ordering::Relaxed),
            3 * regions_per_thread,
            "{wait:?} n={n}: worker {i} ran a region more or less than once"
        );
    }
    assert!(!p.is_suspended());
}

#[test]
fn pool_suspend_resume_races_with_regions() {
    let regions = 3_000 * scale();
    suspend_resume_race(WaitPolicy::Auto, 3, regions);
    suspend_resume_race(WaitPolicy::Spin, 4, regions);
    suspend_resume_race(WaitPolicy::Park, 3, regions);
}

#[test]
fn pool_stop_start_cycles() {
    let mut p = pool(3, WaitPolicy::Auto);
    let cycles = 50 * scale();
    let hits = AtomicUsize::new(0);
    for _ in 0..cycles {
        for _ in 0..10 {
            p.spmd(|_| {
                hits.fetch_add(1, Ordering::Relaxed);
            });
        }
        p.stop();
        assert!(!p.is_running());
        p.start().unwrap();
    }
    assert_eq!(hits.into_inner(), cycles * 10 * 3);
}

//! Loom models of the node tier's lock-free code: every interleaving (up to a preemption bound)
//! of small scenarios is run, and loom checks the accesses to shared cells for causality, so a
//! missing Release/Acquire pair fails here even on a machine whose hardware would hide it.
//! Under loom the futex is modelled too (a waiter really blocks), so a lost wake-up shows up as
//! a deadlock.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p tiers-node --test loom --release`.
//!
//! Three-thread models use the sleeping (Park) policies: with three threads spinning, loom's
//! paths grow past any useful branch limit, while blocked threads keep the state space small.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use tiers_node::barrier::DisseminationBarrier;
use tiers_node::lock::{Lock, McsLock, RawLock, TicketLock, TtasLock};
use tiers_node::queue::spsc;
use tiers_node::wait::LoomSignal;
use tiers_node::{
    ActiveBarrier, AdaptiveBarrier, Barrier, Breakable, CentralBarrier, Full, HierBarrier, Inbox,
    PassiveBarrier, RelaxedBarrier, WaitPolicy,
};

/// Runs `f` under loom with at most `bound` preemptions (unless LOOM_MAX_PREEMPTIONS says
/// otherwise), which keeps the spin loops' state space small.
fn model<F>(bound: usize, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(bound);
    }
    // Spin loops yield at every poll, and every yield is a branch.
    b.max_branches = b.max_branches.max(20_000);
    b.check(f);
}

// ---------------------------------------------------------------------------------------------
// SPSC ring

/// A message that owns heap memory, so a slot read twice or never would show as a double free
/// or a leak, and whose contents loom checks for causality.
type Msg = Box<u32>;

fn push_all(p: &mut spsc::Producer<Msg>, values: &[u32]) {
    for &v in values {
        let mut m = Box::new(v);
        loop {
            match p.try_push(m) {
                Ok(()) => break,
                Err(Full(back)) => {
                    m = back;
                    thread::yield_now();
                }
            }
        }
    }
}

#[test]
fn spsc_push_pop_across_threads_capacity_two() {
    model(3, || {
        let (mut p, mut c) = spsc::channel::<Msg>(2);
        assert_eq!(p.capacity(), 2);
        let t = thread::spawn(move || push_all(&mut p, &[1, 2, 3]));
        let mut next = 1;
        while next <= 3 {
            match c.try_pop() {
                Some(v) => {
                    assert_eq!(*v, next);
                    next += 1;
                }
                None => thread::yield_now(),
            }
        }
        assert_eq!(c.try_pop(), None);
        t.join().unwrap();
    });
}

#[test]
fn spsc_batched_drain_across_threads() {
    model(3, || {
        let (mut p, mut c) = spsc::channel::<Msg>(2);
        let t = thread::spawn(move || push_all(&mut p, &[1, 2, 3, 4]));
        let mut got = Vec::new();
        while got.len() < 4 {
            if c.drain(usize::MAX, |v| got.push(*v)) == 0 {
                thread::yield_now();
            }
        }
        assert_eq!(got, vec![1, 2, 3, 4]);
        t.join().unwrap();
    });
}

#[test]
fn spsc_full_and_empty_are_seen_by_the_other_side() {
    model(3, || {
        let (mut p, mut c) = spsc::channel::<Msg>(2);
        let t = thread::spawn(move || {
            // The ring holds two: a third push must fail until the consumer takes one.
            p.try_push(Box::new(1)).unwrap();
            p.try_push(Box::new(2)).unwrap();
            let mut pushed_third = false;
            for _ in 0..3 {
                match p.try_push(Box::new(3)) {
                    Ok(()) => {
                        pushed_third = true;
                        break;
                    }
                    Err(Full(_)) => thread::yield_now(),
                }
            }
            pushed_third
        });
        let first = loop {
            if let Some(v) = c.try_pop() {
                break v;
            }
            thread::yield_now();
        };
        assert_eq!(*first, 1);
        let pushed_third = t.join().unwrap();
        let mut rest = Vec::new();
        c.drain(usize::MAX, |v| rest.push(*v));
        if pushed_third {
            assert_eq!(rest, vec![2, 3]);
        } else {
            assert_eq!(rest, vec![2]);
        }
        assert!(c.is_empty());
    });
}

#[test]
fn spsc_values_left_in_the_ring_are_dropped_once() {
    model(3, || {
        let token = Arc::new(());
        let (mut p, mut c) = spsc::channel::<Arc<()>>(2);
        let tk = token.clone();
        let t = thread::spawn(move || {
            p.try_push(tk.clone()).unwrap();
            p.try_push(tk).unwrap();
        });
        // Take whatever has arrived, then let the rest be dropped with the ring.
        let taken = c.try_pop();
        t.join().unwrap();
        drop(taken);
        drop(c);
        assert_eq!(Arc::strong_count(&token), 1);
    });
}

// ---------------------------------------------------------------------------------------------
// Inbox

#[test]
fn inbox_two_producers() {
    model(2, || {
        let mut q = Inbox::<(usize, Msg)>::with_max_producers(2, 2);
        let mut a = q.sender();
        let mut b = q.sender();
        let ta = thread::spawn(move || {
            a.push((0, Box::new(0)));
            a.push((0, Box::new(1)));
        });
        let tb = thread::spawn(move || {
            b.push((1, Box::new(0)));
            b.push((1, Box::new(1)));
        });
        let mut next = [0u32; 2];
        let mut got = 0;
        while got < 4 {
            let n = q.drain(usize::MAX, |(p, v)| {
                assert_eq!(*v, next[p], "producer {p} out of order");
                next[p] += 1;
            });
            if n == 0 {
                thread::yield_now();
            }
            got += n;
        }
        ta.join().unwrap();
        tb.join().unwrap();
        assert_eq!(next, [2, 2]);
        assert!(q.is_empty());
    });
}

#[test]
fn inbox_producer_registered_while_consumer_drains() {
    model(2, || {
        let mut q = Inbox::<Msg>::with_max_producers(2, 2);
        let a = q.sender();
        let t = thread::spawn(move || {
            // Cloning registers a second ring concurrently with the consumer's polling.
            let mut b = a.clone();
            b.push(Box::new(7));
        });
        let mut got = None;
        while got.is_none() {
            got = q.try_pop();
            if got.is_none() {
                thread::yield_now();
            }
        }
        assert_eq!(*got.unwrap(), 7);
        t.join().unwrap();
        assert_eq!(q.producers(), 2);
    });
}

// ---------------------------------------------------------------------------------------------
// Barriers

const EPISODES: usize = 2;

/// `n` threads pass `EPISODES` episodes of `b`. In episode e every thread first writes its own
/// cell of row e, and after the barrier reads every cell of that row: loom flags a read that
/// is not ordered after the write. Exactly one thread must be told it leads each episode.
fn barrier_model<B, F>(n: usize, bound: usize, make: F)
where
    B: Barrier + 'static,
    F: Fn() -> B + Sync + Send + 'static,
{
    model(bound, move || {
        let b = Arc::new(make());
        assert_eq!(b.parties(), n);
        let cells: Arc<Vec<Vec<UnsafeCell<usize>>>> = Arc::new(
            (0..EPISODES)
                .map(|_| (0..n).map(|_| UnsafeCell::new(usize::MAX)).collect())
                .collect(),
        );
        let leaders: Arc<Vec<AtomicUsize>> =
            Arc::new((0..EPISODES).map(|_| AtomicUsize::new(0)).collect());
        let body = {
            let (b, cells, leaders) = (b.clone(), cells.clone(), leaders.clone());
            move |me: usize| {
                for e in 0..EPISODES {
                    // SAFETY: cell (e, me) is written only by thread `me`, before the barrier.
                    cells[e][me].with_mut(|p| unsafe { *p = e * 100 + me });
                    if b.wait(me) {
                        leaders[e].fetch_add(1, Ordering::Relaxed);
                    }
                    for (j, cell) in cells[e].iter().enumerate() {
                        // SAFETY: after the barrier, row e is only read.
                        let v = cell.with(|p| unsafe { *p });
                        assert_eq!(
                            v,
                            e * 100 + j,
                            "episode {e}: thread {me} missed {j}'s write"
                        );
                    }
                }
            }
        };
        let hs: Vec<_> = (1..n)
            .map(|me| {
                let body = body.clone();
                thread::spawn(move || body(me))
            })
            .collect();
        body(0);
        for h in hs {
            h.join().unwrap();
        }
        for (e, l) in leaders.iter().enumerate() {
            assert_eq!(l.load(Ordering::Relaxed), 1, "episode {e}: one leader");
        }
    });
}

#[test]
fn barrier_active_2() {
    barrier_model(2, 3, || ActiveBarrier::new(2));
}

#[test]
fn barrier_passive_2() {
    barrier_model(2, 3, || PassiveBarrier::new(2));
}

#[test]
fn barrier_adaptive_2() {
    barrier_model(2, 3, || AdaptiveBarrier::new(2));
}

#[test]
fn barrier_dissemination_park_2() {
    barrier_model(2, 3, || DisseminationBarrier::new(2, WaitPolicy::Park));
}

#[test]
fn barrier_central_spin_2() {
    barrier_model(2, 3, || CentralBarrier::new(2, WaitPolicy::Spin));
}

/// Thread 1 will never arrive (its closure panicked): it raises a flag and breaks the barrier
/// open, as the pool does. Thread 0 must get through its waits, whichever comes first (a lost
/// wake-up of a sleeping waiter is a deadlock here), and must see the flag once through (the
/// pool's workers check it after the barrier). Mended, the barrier synchronises again.
fn broken_model<B, F>(bound: usize, make: F)
where
    B: Breakable + 'static,
    F: Fn() -> B + Sync + Send + 'static,
{
    model(bound, move || {
        let b = Arc::new(make());
        let gone = Arc::new(AtomicUsize::new(0));
        let t = {
            let (b, gone) = (b.clone(), gone.clone());
            thread::spawn(move || {
                gone.store(1, Ordering::Release);
                b.break_open(1);
            })
        };
        b.wait(0);
        assert_eq!(gone.load(Ordering::Acquire), 1, "through before the break");
        b.wait(0);
        t.join().unwrap();
        b.mend();
        let cell = Arc::new(UnsafeCell::new(0usize));
        let t = {
            let (b, cell) = (b.clone(), cell.clone());
            thread::spawn(move || {
                // SAFETY: written only here, before the barrier; read only after it.
                cell.with_mut(|p| unsafe { *p = 7 });
                b.wait(1);
            })
        };
        b.wait(0);
        // SAFETY: after the barrier, the cell is only read.
        assert_eq!(
            cell.with(|p| unsafe { *p }),
            7,
            "mended barrier let 0 through early"
        );
        t.join().unwrap();
    });
}

#[test]
fn broken_dissemination_park_2() {
    broken_model(3, || DisseminationBarrier::new(2, WaitPolicy::Park));
}

#[test]
fn broken_adaptive_2() {
    broken_model(3, || AdaptiveBarrier::new(2));
}

#[test]
fn broken_relaxed_2() {
    broken_model(3, || RelaxedBarrier::new(2));
}

#[test]
fn broken_hier_two_groups_2() {
    broken_model(3, || {
        HierBarrier::with_groups(2, vec![vec![0], vec![1]], WaitPolicy::Park)
    });
}

#[test]
fn barrier_central_pause_2() {
    barrier_model(2, 3, || CentralBarrier::new(2, WaitPolicy::Pause));
}

#[test]
fn barrier_central_auto_2() {
    barrier_model(2, 3, || CentralBarrier::new(2, WaitPolicy::Auto));
}

#[test]
fn barrier_dissemination_park_3() {
    barrier_model(3, 2, || DisseminationBarrier::new(3, WaitPolicy::Park));
}

#[test]
fn barrier_relaxed_2() {
    barrier_model(2, 3, || RelaxedBarrier::new(2));
}

#[test]
fn barrier_relaxed_3() {
    barrier_model(3, 2, || RelaxedBarrier::new(3));
}

#[test]
fn barrier_hier_one_group_2() {
    barrier_model(2, 3, || {
        HierBarrier::with_groups(2, vec![vec![0, 1]], WaitPolicy::Pause)
    });
}

#[test]
fn barrier_hier_two_groups_2() {
    barrier_model(2, 3, || {
        HierBarrier::with_groups(2, vec![vec![1], vec![0]], WaitPolicy::Park)
    });
}

#[test]
fn barrier_hier_two_groups_3() {
    barrier_model(3, 2, || {
        HierBarrier::with_groups(3, vec![vec![0], vec![2, 1]], WaitPolicy::Park)
    });
}

// ---------------------------------------------------------------------------------------------
// Locks

/// `threads` threads each take the lock `rounds` times and bump the protected counter; the
/// lock's data lives in a loom cell, so two holders at once (or a holder that does not see the
/// previous holder's write) fail the model.
fn lock_model<R: RawLock + Default + 'static>(threads: usize, rounds: usize, bound: usize) {
    model(bound, move || {
        let lock = Arc::new(Lock::<R, usize>::new(0));
        let hs: Vec<_> = (1..threads)
            .map(|_| {
                let lock = lock.clone();
                thread::spawn(move || {
                    for _ in 0..rounds {
                        *lock.lock() += 1;
                    }
                })
            })
            .collect();
        for _ in 0..rounds {
            *lock.lock() += 1;
        }
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(*lock.lock(), threads * rounds);
    });
}

/// One thread takes and releases the lock while another uses `try_lock`: when the try
/// succeeds, it must see the first thread's write (or run entirely before it). The relaxed
/// `progress` flag tells nothing about memory; it only gives the model a scheduling point
/// between the other thread's release and the try.
fn try_lock_model<R: RawLock + Default + 'static>() {
    model(3, || {
        let lock = Arc::new(Lock::<R, usize>::new(0));
        let progress = Arc::new(AtomicUsize::new(0));
        let (l2, p2) = (lock.clone(), progress.clone());
        let t = thread::spawn(move || {
            *l2.lock() += 1;
            p2.store(1, Ordering::Relaxed);
        });
        let _ = progress.load(Ordering::Relaxed);
        if let Some(mut g) = lock.try_lock() {
            assert!(*g <= 1);
            *g += 10;
        }
        t.join().unwrap();
        let v = *lock.lock();
        assert!(v == 1 || v == 11, "{v}");
    });
}

#[test]
fn lock_ticket_2_threads() {
    lock_model::<TicketLock>(2, 2, 3);
}

#[test]
fn lock_ticket_3_threads() {
    lock_model::<TicketLock>(3, 1, 2);
}

#[test]
fn lock_ticket_try_lock_sees_the_last_holder() {
    try_lock_model::<TicketLock>();
}

#[test]
fn lock_mcs_2_threads_successor_linking() {
    // The releaser regularly finds a successor that has swapped itself into the tail but not
    // yet linked itself behind it, and must wait for the link.
    lock_model::<McsLock>(2, 2, 3);
}

#[test]
fn lock_mcs_try_lock_sees_the_last_holder() {
    try_lock_model::<McsLock>();
}

#[test]
fn lock_mcs_nested_locks_reuse_nodes() {
    // Two MCS locks held at once by each thread, released out of order: the per-thread queue
    // nodes are reused while the other thread may still be linking behind them.
    model(3, || {
        let a = Arc::new(Lock::<McsLock, usize>::new(0));
        let b = Arc::new(Lock::<McsLock, usize>::new(0));
        let (a2, b2) = (a.clone(), b.clone());
        let t = thread::spawn(move || {
            // Both threads lock a before b (no deadlock) and release a first.
            let mut ga = a2.lock();
            let mut gb = b2.lock();
            *ga += 1;
            drop(ga);
            *gb += 1;
            drop(gb);
            *b2.lock() += 1;
        });
        let mut ga = a.lock();
        let mut gb = b.lock();
        *ga += 1;
        drop(ga);
        *gb += 1;
        drop(gb);
        t.join().unwrap();
        assert_eq!(*a.lock(), 2);
        assert_eq!(*b.lock(), 3);
    });
}

#[test]
fn lock_ttas_2_threads() {
    lock_model::<TtasLock>(2, 2, 3);
}

#[test]
fn lock_ttas_try_lock_sees_the_last_holder() {
    try_lock_model::<TtasLock>();
}

// ---------------------------------------------------------------------------------------------
// The wait Signal

/// A publisher writes data, then sets the signal; `waiters` threads wait for it under
/// `policy` and must see the data. With a parking policy a waiter may announce itself with
/// the sleeper bit and block: a set that forgot to wake it deadlocks the model.
fn signal_model(policy: WaitPolicy, waiters: usize, bound: usize) {
    model(bound, move || {
        let s = Arc::new(LoomSignal::new(0));
        let data = Arc::new(UnsafeCell::new(0u32));
        let hs: Vec<_> = (0..waiters)
            .map(|_| {
                let (s, data) = (s.clone(), data.clone());
                thread::spawn(move || {
                    let v = s.wait_until(policy, |v| v >= 1);
                    assert_eq!(v, 1);
                    // SAFETY: written before the set we waited for, read-only afterwards.
                    assert_eq!(data.with(|p| unsafe { *p }), 42);
                })
            })
            .collect();
        // SAFETY: nobody reads before the set below.
        data.with_mut(|p| unsafe { *p = 42 });
        s.set(1, policy);
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(s.get(), 1);
    });
}

#[test]
fn signal_park_one_waiter() {
    signal_model(WaitPolicy::Park, 1, 4);
}

#[test]
fn signal_park_two_waiters() {
    signal_model(WaitPolicy::Park, 2, 3);
}

#[test]
fn signal_auto_one_waiter() {
    signal_model(WaitPolicy::Auto, 1, 4);
}

#[test]
fn signal_spin_and_pause() {
    signal_model(WaitPolicy::Spin, 1, 4);
    signal_model(WaitPolicy::Pause, 1, 4);
}

#[test]
fn signal_successive_values_wake_a_sleeper_each_time() {
    // The sleeper bit is cleared by each set; a waiter that sleeps again for the next value
    // must announce itself again, and the second set must wake it.
    model(4, || {
        let s = Arc::new(LoomSignal::new(0));
        let s2 = s.clone();
        let t = thread::spawn(move || {
            assert_eq!(s2.wait_until(WaitPolicy::Park, |v| v >= 1), 1);
            s2.set(2, WaitPolicy::Park);
            s2.wait_until(WaitPolicy::Park, |v| v >= 3)
        });
        s.set(1, WaitPolicy::Park);
        s.wait_until(WaitPolicy::Park, |v| v >= 2);
        s.set(3, WaitPolicy::Park);
        assert_eq!(t.join().unwrap(), 3);
    });
}

//! Every unsafe path of the node tier, exercised briefly with real threads, for running under
//! valgrind (`.ci/valgrind`): memcheck for invalid accesses, uninitialised reads and leaks,
//! DRD for pthread and lock misuse. Sizes are small because valgrind runs one thread at a time;
//! `UNSAFE_PATHS_SCALE=N` multiplies them.
//!
//! Exits non-zero (a panic) when any result is wrong, so the run checks behaviour too.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tiers_node::barrier::DisseminationBarrier;
use tiers_node::lock::{Lock, McsLock, RawLock, TicketLock, TtasLock};
use tiers_node::queue::spsc;
use tiers_node::{
    critical, Align, AlignedBuf, Barrier, BarrierKind, CentralBarrier, HierBarrier, Inbox,
    PerWorker, Pool, Schedule, WaitPolicy,
};

fn scale() -> usize {
    std::env::var("UNSAFE_PATHS_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// A single-producer ring of boxed values (heap memory moved through the slots): a slot read
/// twice is a double free, a slot never read is a leak; some values stay in the ring at drop.
fn spsc_ring(n: usize) {
    let (mut tx, mut rx) = spsc::channel::<Box<usize>>(8);
    std::thread::scope(|s| {
        s.spawn(move || {
            for i in 0..n {
                let mut v = Box::new(i);
                while let Err(full) = tx.try_push(v) {
                    v = full.0;
                    std::thread::yield_now();
                }
            }
        });
        let mut next = 0;
        while next < n - 5 {
            let got = rx.drain(3.min(n - 5 - next), |v| {
                assert_eq!(*v, next);
                next += 1;
            });
            if got == 0 {
                std::thread::yield_now();
            }
        }
        // The last five stay in the ring and are dropped with it.
    });
}

/// The many-producer inbox: heap messages from three producers, in order per producer, and one
/// message left in the queue when it is dropped.
fn inbox(n: usize) {
    const PRODUCERS: usize = 3;
    let mut q = Inbox::<Box<(usize, usize)>>::with_max_producers(4, PRODUCERS + 1);
    let senders: Vec<_> = (0..PRODUCERS).map(|_| q.sender()).collect();
    let mut last = [None::<usize>; PRODUCERS];
    let mut seen = 0;
    std::thread::scope(|s| {
        for (p, mut tx) in senders.into_iter().enumerate() {
            s.spawn(move || {
                for i in 0..n {
                    tx.push(Box::new((p, i)));
                }
            });
        }
        while seen < PRODUCERS * n {
            let got = q.drain(16, |m| {
                let (p, i) = *m;
                assert_eq!(last[p].map_or(0, |l| l + 1), i, "producer {p} out of order");
                last[p] = Some(i);
            });
            if got == 0 {
                std::thread::yield_now();
            }
            seen += got;
        }
    });
    let mut late = q.sender();
    late.push(Box::new((9, 9)));
}

/// Two fields updated under the lock (every fifth time taken by `try_lock`); a broken lock
/// tears them or loses an increment.
fn lock<R: RawLock + Default>(threads: usize, n: usize) {
    let lock = Lock::<R, (u64, u64)>::new((0, 0));
    std::thread::scope(|s| {
        for t in 0..threads {
            let lock = &lock;
            s.spawn(move || {
                for i in 0..n {
                    let mut g = if (i + t) % 5 == 0 {
                        loop {
                            if let Some(g) = lock.try_lock() {
                                break g;
                            }
                            std::thread::yield_now();
                        }
                    } else {
                        lock.lock()
                    };
                    assert_eq!(g.0, g.1, "{}: torn", R::NAME);
                    g.0 += 1;
                    g.1 += 1;
                }
            });
        }
    });
    let total = (threads * n) as u64;
    assert_eq!(*lock.lock(), (total, total), "{}", R::NAME);
}

fn barrier(b: Arc<dyn Barrier>, episodes: usize) {
    let parties = b.parties();
    let count = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for me in 0..parties {
            let (b, count) = (&b, &count);
            s.spawn(move || {
                for e in 1..=episodes {
                    count.fetch_add(1, Ordering::Relaxed);
                    b.wait(me);
                    assert_eq!(count.load(Ordering::Relaxed), parties * e, "{}", b.name());
                    b.wait(me);
                }
            });
        }
    });
}

/// SPMD regions, every loop schedule, a reduction, per-worker data, suspend/resume, a worker's
/// panic, stop/start, and a first-touch buffer.
fn pool_regions(n: usize) {
    let mut pool = Pool::builder()
        .threads(2)
        .wait(WaitPolicy::Auto)
        .warn_oversubscription(false)
        .build()
        .expect("pool");
    let hits = AtomicUsize::new(0);
    for schedule in [
        Schedule::Static,
        Schedule::Blocked(64),
        Schedule::Dynamic(7),
    ] {
        pool.for_each(0..n, schedule, |_| {
            hits.fetch_add(1, Ordering::Relaxed);
        });
    }
    assert_eq!(hits.load(Ordering::Relaxed), 3 * n);
    let per = PerWorker::new(pool.threads(), |i| i);
    pool.spmd(|w| assert_eq!(*per.get(w.index()), w.index()));
    let sum: usize = pool.reduce(
        0..n,
        Schedule::Dynamic(5),
        || 0,
        |r| r.sum::<usize>(),
        |a, b| a + b,
    );
    assert_eq!(sum, n * (n - 1) / 2);
    pool.suspend();
    pool.resume();
    let buf = AlignedBuf::first_touch(&pool, 10_000, Align::Page, 7u32);
    assert_eq!(buf.as_ptr() as usize % 4096, 0);
    assert!(buf.iter().all(|&x| x == 7));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.spmd(|w| {
            if w.index() == 1 {
                panic!("worker panic, expected");
            }
        })
    }));
    assert!(caught.is_err(), "a worker's panic reaches the caller");
    pool.stop();
    pool.start().expect("restart");
    pool.spmd(|_| {});
}

fn aligned_buffers() {
    for (align, a) in [
        (Align::CacheLine, 64),
        (Align::Page, 4096),
        (Align::Bytes(256), 256),
    ] {
        let mut b = AlignedBuf::filled(1000, align, 1.5f64);
        assert_eq!(b.as_ptr() as usize % a, 0);
        b[999] = 2.0;
        assert_eq!(b.iter().sum::<f64>(), 1.5 * 999.0 + 2.0);
    }
    let empty = AlignedBuf::filled(0, Align::Page, 0u8);
    assert!(empty.is_empty());
}

fn main() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.to_string().contains("expected") {
            default_hook(info);
        }
    }));
    let k = scale();
    let step = |name: &str| eprintln!("unsafe_paths: {name}");
    step("spsc ring");
    spsc_ring(2_000 * k);
    step("Inbox");
    inbox(500 * k);
    step("locks");
    critical(|| {});
    lock::<TicketLock>(2, 500 * k);
    lock::<McsLock>(3, 500 * k);
    lock::<TtasLock>(3, 500 * k);
    step("barriers");
    for kind in BarrierKind::ALL {
        barrier(Arc::from(kind.build(2, None)), 50 * k);
    }
    barrier(Arc::new(CentralBarrier::new(3, WaitPolicy::Park)), 50 * k);
    barrier(
        Arc::new(DisseminationBarrier::new(3, WaitPolicy::Park)),
        50 * k,
    );
    barrier(
        Arc::new(HierBarrier::with_groups(
            4,
            vec![vec![0, 1], vec![2, 3]],
            WaitPolicy::Park,
        )),
        30 * k,
    );
    step("pool regions and first-touch buffers");
    pool_regions(1_000 * k);
    step("aligned buffers");
    aligned_buffers();
    eprintln!("unsafe_paths: all passed");
}

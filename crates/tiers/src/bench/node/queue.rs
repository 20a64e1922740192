//! `tiers bench queue`: N producers, one consumer, messages per second: the tiers Inbox (one
//! SPSC ring per producer) against std's mpsc channel, crossbeam-channel and crossbeam's
//! SegQueue. `--threads` lists producer counts (default 1-4); the consumer is one more thread.

use super::threads;
use serde_json::json;
use std::sync::Barrier as StdBarrier;
use std::time::{Duration, Instant};
use tiers_bench::{compare, progress, Candidate, Opts, Report};
use tiers_node::{Inbox, InboxSender};

/// Runs `producers` producer bodies and one consumer body on pinned threads (the consumer on
/// the first processor); returns the consumer's time from the start to its last message.
fn run_pc<P, C>(producers: usize, cpus: &[usize], produce: P, consume: C) -> Duration
where
    P: Fn(usize) + Sync,
    C: FnOnce() + Send,
{
    let start = StdBarrier::new(producers + 1);
    std::thread::scope(|s| {
        for p in 0..producers {
            let (start, produce) = (&start, &produce);
            let cpu = cpus.get(1 + p).copied();
            s.spawn(move || {
                if let Some(c) = cpu {
                    let _ = tiers_node::affinity::set(&[c]);
                }
                start.wait();
                produce(p);
            });
        }
        let cpu = cpus.first().copied();
        let start = &start;
        s.spawn(move || {
            if let Some(c) = cpu {
                let _ = tiers_node::affinity::set(&[c]);
            }
            start.wait();
            let t0 = Instant::now();
            consume();
            t0.elapsed()
        })
        .join()
        .expect("consumer panicked")
    })
}

fn expect_sum(producers: usize, n: u64) -> u64 {
    producers as u64 * n * (n - 1) / 2
}

pub fn run(opts: &Opts) -> Report {
    let mut report = Report::new("queue", "msg/s", false);
    let counts = if opts.threads.is_empty() {
        vec![1, 2, 3, 4]
    } else {
        opts.threads.clone()
    };
    for &p in &counts {
        progress(opts, format!("queue: {p} producer(s), 1 consumer"));
        let cpus = threads::cpus(p + 1);
        let mut q = Inbox::<u64>::new(1 << 14);
        let senders: Vec<std::sync::Mutex<InboxSender<u64>>> =
            (0..p).map(|_| std::sync::Mutex::new(q.sender())).collect();
        let mut cands = Vec::new();
        {
            let cpus = cpus.clone();
            cands.push(Candidate::new("tiers", move |n| {
                let total = p as u64 * n;
                let q = &mut q;
                run_pc(
                    p,
                    &cpus,
                    |i| {
                        let mut tx = senders[i].lock().unwrap();
                        for v in 0..n {
                            tx.push(v);
                        }
                    },
                    move || {
                        let (mut got, mut sum) = (0u64, 0u64);
                        while got < total {
                            got += q.recv_batch(usize::MAX, Duration::from_secs(10), |v| sum += v)
                                as u64;
                        }
                        assert_eq!(sum, expect_sum(p, n));
                    },
                )
            }));
        }
        {
            let cpus = cpus.clone();
            cands.push(Candidate::new("crossbeam-channel", move |n| {
                let (tx, rx) = crossbeam_channel::unbounded::<u64>();
                let total = p as u64 * n;
                run_pc(
                    p,
                    &cpus,
                    |_| {
                        let tx = tx.clone();
                        for v in 0..n {
                            tx.send(v).unwrap();
                        }
                    },
                    move || {
                        let mut sum = 0;
                        for _ in 0..total {
                            sum += rx.recv().unwrap();
                        }
                        assert_eq!(sum, expect_sum(p, n));
                    },
                )
            }));
        }
        {
            let cpus = cpus.clone();
            cands.push(Candidate::new("std-mpsc", move |n| {
                let (tx, rx) = std::sync::mpsc::channel::<u64>();
                let tx = std::sync::Mutex::new(tx);
                let total = p as u64 * n;
                run_pc(
                    p,
                    &cpus,
                    |_| {
                        let tx = tx.lock().unwrap().clone();
                        for v in 0..n {
                            tx.send(v).unwrap();
                        }
                    },
                    move || {
                        let mut sum = 0;
                        for _ in 0..total {
                            sum += rx.recv().unwrap();
                        }
                        assert_eq!(sum, expect_sum(p, n));
                    },
                )
            }));
        }
        {
            let cpus = cpus.clone();
            cands.push(Candidate::new("crossbeam-segqueue", move |n| {
                let q = crossbeam_queue::SegQueue::<u64>::new();
                let total = p as u64 * n;
                run_pc(
                    p,
                    &cpus,
                    |_| {
                        for v in 0..n {
                            q.push(v);
                        }
                    },
                    || {
                        let (mut got, mut sum) = (0, 0);
                        while got < total {
                            if let Some(v) = q.pop() {
                                sum += v;
                                got += 1;
                            } else {
                                // The same polite polling as a blocking receive: never
                                // starve a producer that shares our core.
                                std::thread::yield_now();
                            }
                        }
                        assert_eq!(sum, expect_sum(p, n));
                    },
                )
            }));
        }
        let results = compare(opts.min_time, &mut cands);
        for (c, (med, _)) in cands.iter().zip(results) {
            // compare() gives seconds per message per producer; rate over all producers:
            report.push(&c.name, &[("producers", json!(p))], p as f64 / med);
        }
    }
    report
}

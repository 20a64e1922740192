//! `tiers bench queue`: N producers and one consumer, every queue at the same capacity.
//!
//! Two cases, as the parameter `case`:
//!
//! - `stream`: each producer pushes its messages one at a time; messages per second over all
//!   producers. The consumer takes one message at a time (`tiers`: `Inbox::try_pop`), except
//!   in the row labelled `tiers-batch`, which drains everything present per visit
//!   (`Inbox::recv_batch`, one index update per batch). The peers: crossbeam-channel and std's
//!   `sync_channel`, bounded, and the same design as the tiers inbox, one bounded crossbeam
//!   `ArrayQueue` per producer polled round-robin (`arrayqueue-per-producer`).
//! - `ping-pong` (one producer): a message and its answer through two queues between the two
//!   processors, in round trips per second; the `limit` row is the cache-line round trip
//!   between the same processors (the fewest transfers a message and its answer need).
//!
//! Capacity: the tiers default ring (`DEFAULT_CAPACITY` messages) per producer; the
//! channels hold producers × that, each `ArrayQueue` that. `--threads` lists producer counts
//! (default 1-4); the consumer is one more thread, on the first processor.

use super::threads;
use serde_json::json;
use std::sync::Barrier as StdBarrier;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tiers_bench::{compare, limit, progress, Candidate, Opts, Report};
use tiers_node::queue::DEFAULT_CAPACITY;
use tiers_node::{Backoff, Inbox, InboxSender};

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

/// How a consumer of a queue that does not block waits for a message in the stream case: the
/// schedule of `Inbox::recv_batch` (looks after pauses doubling from 1 to 128 hints, then
/// yields), so that it leaves the producer's lines alone while they fill. The same for tiers
/// and the same-design peer; crossbeam-channel and std wait in their own `recv`.
const STREAM_WAIT: Backoff = Backoff::new()
    .spin_limit(7)
    .spin_steps(12)
    .yield_limit(16)
    .never_sleep();

/// How either side of the ping-pong (and a producer facing a full queue) waits: a look every
/// spin hint, then yields (the answer comes within a round trip; backing off would only add
/// latency).
const POLL_WAIT: Backoff = Backoff::new()
    .spin_limit(0)
    .spin_steps(64)
    .yield_limit(0)
    .never_sleep();

/// Polls `f` until it gives a value, waiting by `schedule` between looks.
#[inline]
fn poll_with<T>(schedule: Backoff, mut f: impl FnMut() -> Option<T>) -> T {
    let mut backoff = schedule;
    loop {
        if let Some(v) = f() {
            return v;
        }
        backoff.snooze();
    }
}

/// [`poll_with`] at [`POLL_WAIT`].
#[inline]
fn poll<T>(f: impl FnMut() -> Option<T>) -> T {
    poll_with(POLL_WAIT, f)
}

/// Pushes into a bounded `ArrayQueue`, polling while it is full.
#[inline]
fn push_aq(q: &crossbeam_queue::ArrayQueue<u64>, v: u64) {
    let mut v = v;
    poll(|| match q.push(v) {
        Ok(()) => Some(()),
        Err(back) => {
            v = back;
            None
        }
    })
}

/// The same design as the tiers inbox from crossbeam parts: one bounded `ArrayQueue` per
/// producer, the consumer visiting them round-robin, one message per visit.
struct Rings {
    rings: Vec<crossbeam_queue::ArrayQueue<u64>>,
}

impl Rings {
    fn new(producers: usize, capacity: usize) -> Rings {
        Rings {
            rings: (0..producers)
                .map(|_| crossbeam_queue::ArrayQueue::new(capacity))
                .collect(),
        }
    }

    /// One message, from the first non-empty ring after `next`.
    #[inline]
    fn try_pop(&self, next: &mut usize) -> Option<u64> {
        let n = self.rings.len();
        for k in 0..n {
            let i = (*next + k) % n;
            if let Some(v) = self.rings[i].pop() {
                *next = (i + 1) % n;
                return Some(v);
            }
        }
        None
    }
}

/// The stream candidates for `p` producers.
fn stream<'a>(
    p: usize,
    cpus: &'a [usize],
    senders: &'a [Mutex<InboxSender<u64>>],
    inbox: &'a Mutex<Inbox<u64>>,
) -> Vec<Candidate<'a>> {
    let cap = DEFAULT_CAPACITY;
    let mut cands = Vec::new();
    let tiers_produce = move |i: usize, n: u64| {
        let mut tx = senders[i].lock().expect("sender");
        for v in 0..n {
            tx.push(v);
        }
    };
    cands.push(Candidate::new("tiers", move |n| {
        let total = p as u64 * n;
        let mut q = inbox.lock().expect("inbox");
        let q = &mut *q;
        run_pc(
            p,
            cpus,
            |i| tiers_produce(i, n),
            move || {
                let mut sum = 0u64;
                for _ in 0..total {
                    sum += poll_with(STREAM_WAIT, || q.try_pop());
                }
                assert_eq!(sum, expect_sum(p, n));
            },
        )
    }));
    cands.push(Candidate::new("crossbeam-channel", move |n| {
        let (tx, rx) = crossbeam_channel::bounded::<u64>(p * cap);
        let total = p as u64 * n;
        run_pc(
            p,
            cpus,
            |_| {
                let tx = tx.clone();
                for v in 0..n {
                    tx.send(v).expect("send");
                }
            },
            move || {
                let mut sum = 0;
                for _ in 0..total {
                    sum += rx.recv().expect("recv");
                }
                assert_eq!(sum, expect_sum(p, n));
            },
        )
    }));
    cands.push(Candidate::new("std-mpsc", move |n| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<u64>(p * cap);
        let tx = Mutex::new(tx);
        let total = p as u64 * n;
        run_pc(
            p,
            cpus,
            |_| {
                let tx = tx.lock().expect("sender").clone();
                for v in 0..n {
                    tx.send(v).expect("send");
                }
            },
            move || {
                let mut sum = 0;
                for _ in 0..total {
                    sum += rx.recv().expect("recv");
                }
                assert_eq!(sum, expect_sum(p, n));
            },
        )
    }));
    cands.push(Candidate::new("arrayqueue-per-producer", move |n| {
        let q = Rings::new(p, cap);
        let total = p as u64 * n;
        run_pc(
            p,
            cpus,
            |i| {
                for v in 0..n {
                    push_aq(&q.rings[i], v);
                }
            },
            || {
                let (mut sum, mut next) = (0, 0);
                for _ in 0..total {
                    sum += poll_with(STREAM_WAIT, || q.try_pop(&mut next));
                }
                assert_eq!(sum, expect_sum(p, n));
            },
        )
    }));
    cands.push(Candidate::new("tiers-batch", move |n| {
        let total = p as u64 * n;
        let mut q = inbox.lock().expect("inbox");
        let q = &mut *q;
        run_pc(
            p,
            cpus,
            |i| tiers_produce(i, n),
            move || {
                let (mut got, mut sum) = (0u64, 0u64);
                while got < total {
                    got += q.recv_batch(usize::MAX, Duration::from_secs(10), |v| sum += v) as u64;
                }
                assert_eq!(sum, expect_sum(p, n));
            },
        )
    }));
    cands
}

/// Runs `a` on the first processor and `b` on the second, from a common start; the time `a`
/// took.
fn pair(cpus: &[usize], a: impl FnOnce() + Send, b: impl FnOnce() + Send) -> Duration {
    let start = StdBarrier::new(2);
    let pin = |i: usize| {
        if let Some(&c) = cpus.get(i) {
            let _ = tiers_node::affinity::set(&[c]);
        }
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            pin(1);
            start.wait();
            b();
        });
        s.spawn(|| {
            pin(0);
            start.wait();
            let t = Instant::now();
            a();
            t.elapsed()
        })
        .join()
        .expect("ping-pong thread panicked")
    })
}

/// The ping-pong candidates: `n` round trips of a message and its answer.
fn ping_pong(cpus: &[usize]) -> Vec<Candidate<'_>> {
    let cap = DEFAULT_CAPACITY;
    vec![
        Candidate::new("tiers", move |n| {
            let (mut ra, mut rb) = (Inbox::<u64>::new(cap), Inbox::<u64>::new(cap));
            let (mut to_a, mut to_b) = (ra.sender(), rb.sender());
            pair(
                cpus,
                move || {
                    for i in 0..n {
                        to_b.push(i);
                        assert_eq!(poll(|| ra.try_pop()), i);
                    }
                },
                move || {
                    for _ in 0..n {
                        let v = poll(|| rb.try_pop());
                        to_a.push(v);
                    }
                },
            )
        }),
        Candidate::new("crossbeam-channel", move |n| {
            let (to_a, ra) = crossbeam_channel::bounded::<u64>(cap);
            let (to_b, rb) = crossbeam_channel::bounded::<u64>(cap);
            pair(
                cpus,
                move || {
                    for i in 0..n {
                        to_b.send(i).expect("send");
                        assert_eq!(ra.recv().expect("recv"), i);
                    }
                },
                move || {
                    for _ in 0..n {
                        to_a.send(rb.recv().expect("recv")).expect("send");
                    }
                },
            )
        }),
        Candidate::new("std-mpsc", move |n| {
            let (to_a, ra) = std::sync::mpsc::sync_channel::<u64>(cap);
            let (to_b, rb) = std::sync::mpsc::sync_channel::<u64>(cap);
            pair(
                cpus,
                move || {
                    for i in 0..n {
                        to_b.send(i).expect("send");
                        assert_eq!(ra.recv().expect("recv"), i);
                    }
                },
                move || {
                    for _ in 0..n {
                        to_a.send(rb.recv().expect("recv")).expect("send");
                    }
                },
            )
        }),
        Candidate::new("arrayqueue-per-producer", move |n| {
            let (a, b) = (
                crossbeam_queue::ArrayQueue::new(cap),
                crossbeam_queue::ArrayQueue::new(cap),
            );
            let (a, b) = (&a, &b);
            pair(
                cpus,
                move || {
                    for i in 0..n {
                        push_aq(b, i);
                        assert_eq!(poll(|| a.pop()), i);
                    }
                },
                move || {
                    for _ in 0..n {
                        let v = poll(|| b.pop());
                        push_aq(a, v);
                    }
                },
            )
        }),
    ]
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
        let inbox = Inbox::<u64>::new(DEFAULT_CAPACITY);
        let senders: Vec<Mutex<InboxSender<u64>>> =
            (0..p).map(|_| Mutex::new(inbox.sender())).collect();
        let inbox = Mutex::new(inbox);
        let mut cands = stream(p, &cpus, &senders, &inbox);
        let results = compare(opts.min_time, &mut cands);
        for (c, (med, _)) in cands.iter().zip(results) {
            // compare() gives seconds per message per producer; rate over all producers:
            report.push(
                &c.name,
                &[("case", json!("stream")), ("producers", json!(p))],
                p as f64 / med,
            );
        }
    }
    let cpus = threads::cpus(2);
    if counts.contains(&1) {
        progress(opts, "queue: ping-pong between two threads");
        let mut cands = ping_pong(&cpus);
        let pair = threads::limit_candidate(&mut report, &mut cands, &cpus);
        let results = compare(opts.min_time, &mut cands);
        let params = [("case", json!("ping-pong")), ("producers", json!(1))];
        for (c, (med, _)) in cands.iter().zip(results) {
            // compare() gives seconds per round trip; the rate of round trips:
            let row = match pair {
                Some((a, b)) if c.name == limit::IMPL => {
                    report.push_limit(&params, 1.0 / med, limit::round_trip_note(a, b))
                }
                _ => report.push(&c.name, &params, 1.0 / med),
            };
            row.extra
                .push(("ns_per_round_trip".into(), json!(med * 1e9)));
        }
    }
    report.note(format!(
        "capacity: {DEFAULT_CAPACITY} messages per producer everywhere (the tiers inbox's default ring; one ArrayQueue of {DEFAULT_CAPACITY} per producer; the channels bounded to producers x {DEFAULT_CAPACITY}); stream: messages/s over all producers, each message pushed and taken one at a time except in tiers-batch (the consumer drains all present, one index update per batch); ping-pong (with 1 producer in the list): round trips/s of a message and its answer between two threads, value in msg/s units meaning round trips/s, ns_per_round_trip in JSON"
    ));
    report
}

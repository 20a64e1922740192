//! The progress policies on the `local` engine: the whole cluster-tier suite under each
//! policy (the proxy also with every request handed to its thread), notified writes the proxy
//! performs (data before notification, queue order kept, many rounds), and the counters.

mod common;

use tiers_cluster::{Builder, Error, Notification, Progress, SegId, Timeout, World};

/// Runs `f` on `n` ranks of worlds built by `b`, one thread each.
fn run_with<R: Send>(b: Builder, n: usize, f: impl Fn(&World) -> R + Sync) -> Vec<R> {
    let ws = b.local(n).unwrap();
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> = ws.into_iter().map(|w| s.spawn(move || f(&w))).collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// The configurations the suite runs under: each policy, and the proxy handing over every
/// request (threshold 0), so that every path of the suite goes through its thread.
fn configs() -> Vec<(String, Builder)> {
    configs_for("")
}

/// [`configs`] for behaviour `name`. The random model checks each write against atomics and
/// local stores made right after it, before any wait: it relies on the shared-memory
/// engines completing a write when it is posted, which the proxy gives up for large
/// transfers (GASPI promises completion only at the wait). So it runs with the proxy's
/// default threshold (its transfers are all below it), not with everything handed over.
fn configs_for(name: &str) -> Vec<(String, Builder)> {
    let mut v: Vec<(String, Builder)> = Progress::ALL
        .into_iter()
        .map(|p| (p.to_string(), Builder::new().progress(p)))
        .collect();
    if name != "random_ops_against_a_model" {
        v.push((
            "proxy, everything handed over".into(),
            Builder::new().progress(Progress::Proxy).proxy_min(0),
        ));
    }
    v
}

macro_rules! under_every_policy {
    ($($family:ident :: $name:ident),* $(,)?) => {
        /// The suite, one test per behaviour, each under every policy on 1 to 4 ranks.
        mod policies {
            $(
                #[test]
                fn $name() {
                    for (what, b) in super::configs_for(stringify!($name)) {
                        for n in 1..=4 {
                            let r = std::panic::catch_unwind(|| {
                                super::run_with(b.clone(), n, crate::common::$family::$name)
                            });
                            if r.is_err() {
                                panic!("{} failed under {what} on {n} ranks", stringify!($name));
                            }
                        }
                    }
                }
            )*
        }
    };
}
common::suite!(under_every_policy);

#[test]
fn several_threads_per_rank_under_every_policy() {
    for (_, b) in configs() {
        for n in 1..=3 {
            run_with(b.clone(), n, |w| common::threads::threads(w, 4, 100));
        }
    }
}

/// Byte `i` of round `round`'s block from `rank`.
fn pattern(round: u32, rank: usize, i: usize) -> u8 {
    (i as u32)
        .wrapping_mul(31)
        .wrapping_add(round.wrapping_mul(7))
        .wrapping_add(rank as u32 * 101) as u8
}

/// Many rounds of large writes, then a small write and a notification on the same queue,
/// handed to the proxy: when the notification is seen, all of the round's bytes are there
/// (the notification follows the data, and the requests of a queue keep their order even
/// though the small ones would have been performed inline).
fn proxy_rounds(w: &World, rounds: u32) {
    const BIG: usize = 96 * 1024;
    const SMALL: usize = 512;
    let n = w.size();
    let me = w.rank();
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    // Send area [0, 2 BIG + SMALL), receive area after it.
    let area = 2 * BIG + SMALL;
    let seg = w.segment(SegId(3), 2 * area).unwrap();
    let q = w.queue(1).unwrap();
    let mut buf = vec![0u8; area];
    for round in 1..=rounds {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = pattern(round, me, i);
        }
        seg.write(0, &buf).unwrap();
        let s = SegId(3);
        q.write(s.at(0), s.on(next, area), BIG).unwrap();
        q.write(s.at(BIG), s.on(next, area + BIG), BIG).unwrap();
        q.write(s.at(2 * BIG), s.on(next, area + 2 * BIG), SMALL)
            .unwrap();
        q.notify(
            next,
            s,
            Notification {
                id: 5,
                value: round,
            },
        )
        .unwrap();
        // The receiver checks before the sender waits: the proxy may still be copying.
        let id = w.notify_waitsome(s, 5..6, Timeout::Block).unwrap();
        assert_eq!(id, 5);
        assert_eq!(w.notify_reset(s, 5).unwrap(), round);
        let mut got = vec![0u8; area];
        seg.read(area, &mut got).unwrap();
        for (i, b) in got.iter().enumerate() {
            assert_eq!(*b, pattern(round, prev, i), "round {round}, byte {i}");
        }
        q.wait(Timeout::Block).unwrap();
        // Nobody writes the next round into a receive area still being read.
        w.barrier(Timeout::Block).unwrap();
    }
    w.segment_delete(SegId(3), Timeout::Block).unwrap();
}

#[test]
fn proxy_performs_writes_in_order_with_the_notification_last() {
    for n in 1..=3 {
        let stats = run_with(Builder::new().progress(Progress::Proxy), n, |w| {
            proxy_rounds(w, 200);
            w.progress_stats()
        });
        for st in stats {
            // Per round: two large writes handed over, and the small write and the
            // notification queued behind them if the large ones were still pending.
            assert!(st.handed_off >= 2 * 200, "{st:?}");
            assert!(st.handed_off_bytes >= 2 * 200 * 96 * 1024, "{st:?}");
            assert!(st.proxy_bytes <= st.handed_off_bytes, "{st:?}");
            assert!(st.found_work <= st.calls, "{st:?}");
        }
    }
}

#[test]
fn stress_many_rounds_with_everything_handed_over() {
    run_with(
        Builder::new().progress(Progress::Proxy).proxy_min(0),
        4,
        |w| proxy_rounds(w, 1000),
    );
}

#[test]
fn counters_count_what_the_policy_did() {
    const N: usize = 64 * 1024;
    for p in Progress::ALL {
        let stats = run_with(Builder::new().progress(p).proxy_min(N), 2, |w| {
            let seg = w.segment(SegId(0), 4 * N).unwrap();
            let peer = 1 - w.rank();
            let q = w.queue(0).unwrap();
            // Three writes at the threshold or above, two below it.
            for (k, len) in [N, 100, 2 * N, 8, N].into_iter().enumerate() {
                let off = k * 8;
                q.write(
                    SegId(0).at(off),
                    SegId(0).on(peer, off),
                    len.min(4 * N - off),
                )
                .unwrap();
            }
            q.wait(Timeout::Block).unwrap();
            w.barrier(Timeout::Block).unwrap();
            drop(seg);
            w.segment_delete(SegId(0), Timeout::Block).unwrap();
            w.progress_stats()
        });
        for st in stats {
            assert_eq!(st.policy, p);
            if p == Progress::Proxy {
                assert!(st.proxy_running);
                // The two small writes are handed over only when queued behind a large one.
                assert!((3..=5).contains(&st.handed_off), "{st:?}");
                assert!(st.handed_off_bytes >= 4 * N as u64, "{st:?}");
                assert!(st.handed_off_bytes <= 4 * N as u64 + 108, "{st:?}");
                assert!(st.proxy_bytes <= st.handed_off_bytes);
                assert!(st.found_work <= st.calls);
                if st.proxy_bytes > 0 {
                    assert!(st.found_work > 0, "{st:?}");
                }
            } else {
                // The local engine finishes every copy when it is posted: nothing to poll,
                // nothing handed over.
                assert!(!st.proxy_running);
                assert_eq!((st.calls, st.handed_off, st.proxy_bytes), (0, 0, 0));
            }
        }
    }
}

#[test]
fn a_bad_handed_over_request_is_refused_when_posted() {
    run_with(
        Builder::new().progress(Progress::Proxy).proxy_min(0),
        2,
        |w| {
            let _seg = w.segment(SegId(0), 4096).unwrap();
            let q = w.queue(0).unwrap();
            let peer = 1 - w.rank();
            assert!(matches!(
                q.write(SegId(0).at(0), SegId(0).on(peer, 4000), 200),
                Err(Error::OutOfBounds { .. })
            ));
            assert!(matches!(
                q.write(SegId(0).at(0), SegId(9).on(peer, 0), 8),
                Err(Error::NoSuchSegment { .. })
            ));
            assert_eq!(q.posted(), 0);
            q.wait(Timeout::Block).unwrap();
            w.barrier(Timeout::Block).unwrap();
            drop(_seg);
            w.segment_delete(SegId(0), Timeout::Block).unwrap();
        },
    );
}

#[test]
fn progress_policy_names_parse_and_bad_ones_are_refused() {
    for p in Progress::ALL {
        assert_eq!(p.name().parse::<Progress>(), Ok(p));
    }
    assert!(matches!("eagre".parse::<Progress>(), Err(Error::Setup(_))));
    // The variable: only this test of the binary reads it (the others say their policy).
    std::env::set_var(tiers_cluster::env::PROGRESS, "sometimes");
    let bad = Builder::new().local(1);
    std::env::set_var(tiers_cluster::env::PROGRESS, "proxy");
    let good = Builder::new().local(1);
    std::env::remove_var(tiers_cluster::env::PROGRESS);
    assert!(matches!(bad, Err(Error::Setup(m)) if m.contains("sometimes")));
    assert_eq!(good.unwrap()[0].progress(), Progress::Proxy);
}

/// Every behaviour one after another in one world under each policy: requests the proxy
/// still holds at the end of one behaviour must not leak into the next.
#[test]
fn all_behaviours_in_one_world_under_every_policy() {
    for (what, b) in configs_for("random_ops_against_a_model") {
        run_with(b, 3, |w| {
            for (name, f) in common::ALL {
                if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(w))) {
                    eprintln!("{name} failed under {what} after the behaviours before it");
                    std::panic::resume_unwind(p);
                }
            }
        });
    }
}

//! The suite on the `local` engine (ranks are threads): every behaviour of
//! [`common::suite!`] as a test of its own (`local::<behaviour>`) on 1 to 4 ranks, then the
//! tests of this engine.

mod common;
#[path = "common/endpoints.rs"]
mod endpoints;
#[path = "common/failures.rs"]
mod failures;

use std::time::Duration;
use tiers_cluster::run_local;
use tiers_cluster::{Error, Health, Notification, SegId, Timeout, World};

/// Runs `f` on 1 to 4 ranks; a failure says on how many.
fn on_1_to_4_ranks(f: fn(&World)) {
    for n in 1..=4 {
        if let Err(p) = std::panic::catch_unwind(|| run_local(n, f).unwrap()) {
            let msg = p
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            panic!("on {n} ranks: {msg}");
        }
    }
}

macro_rules! on_local_engine {
    ($($family:ident :: $name:ident),* $(,)?) => {
        /// The suite, one test per behaviour.
        mod local {
            $(
                #[test]
                fn $name() {
                    super::on_1_to_4_ranks(crate::common::$family::$name);
                }
            )*
        }
    };
}
common::suite!(on_local_engine);

/// Every behaviour one after another in one world (as the mpi tests run them): each leaves the
/// world as it found it.
#[test]
fn all_behaviours_in_one_world() {
    for n in 1..=4 {
        play_all_behaviours(n);
    }
}

/// Every behaviour of the suite in order, in one local world of `n` ranks; a failure names
/// the behaviour.
fn play_all_behaviours(n: usize) {
    run_local(n, |w| {
        for (name, f) in common::ALL {
            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(w))) {
                eprintln!("{name} failed on {n} ranks after the behaviours before it");
                std::panic::resume_unwind(p);
            }
        }
    })
    .unwrap();
}

/// Error messages name the values of the error.
#[test]
fn error_messages_name_their_values() {
    let msg = Error::OutOfBounds {
        rank: 1,
        seg: 2,
        offset: 30,
        len: 4,
        size: 32,
    }
    .to_string();
    assert!(
        msg.contains("30..34") && msg.contains("32") && msg.contains("rank 1"),
        "{msg}"
    );
}

#[test]
fn several_threads_per_rank_communicate_at_once() {
    for n in 1..=3 {
        run_local(n, |w| common::threads::threads(w, 4, 200)).unwrap();
    }
}

#[test]
fn killed_rank() {
    for (n, victim) in [(2, 1), (3, 2), (4, 3), (2, 0), (3, 0), (4, 1)] {
        let worlds = tiers_cluster::Builder::new().local(n).unwrap();
        std::thread::scope(|s| {
            let hs: Vec<_> = worlds
                .into_iter()
                .map(|w| {
                    s.spawn(move || {
                        // A rank "dies" by panicking: its world is dropped while unwinding.
                        failures::killed(&w, victim, || panic!("rank dies on purpose"))
                    })
                })
                .collect();
            let res: Vec<_> = hs.into_iter().map(|h| h.join()).collect();
            for (r, res) in res.iter().enumerate() {
                if r == victim {
                    assert!(res.is_err(), "the victim panicked ({n} ranks)");
                } else {
                    assert!(
                        res.is_ok(),
                        "survivor {r} passes ({n} ranks, victim {victim})"
                    );
                }
            }
        });
    }
}

/// A rank that gives up with `World::fail` (an error only it saw) is seen failed by its
/// peers at once, as a rank that panicked.
#[test]
fn a_rank_that_fails_is_seen_failed() {
    for (n, victim) in [(2, 1), (3, 0)] {
        let worlds = tiers_cluster::Builder::new().local(n).unwrap();
        let t = std::time::Instant::now();
        std::thread::scope(|s| {
            for w in worlds {
                s.spawn(move || failures::killed(&w, victim, || w.fail()));
            }
        });
        // Not the scenario's 30 s timeouts: the failure was seen.
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    }
}

#[test]
fn one_rank_world_without_launcher() {
    // No TIERS_ENGINE in the test environment: one rank.
    let w = tiers_cluster::init().unwrap();
    assert_eq!((w.rank(), w.size()), (0, 1));
    let seg = w.segment(SegId(0), 16).unwrap();
    w.queue(0)
        .unwrap()
        .write_notify(
            SegId(0).at(0),
            SegId(0).on(0, 8),
            8,
            Notification { id: 1, value: 9 },
        )
        .unwrap();
    assert_eq!(w.notify_waitsome(SegId(0), 0..4, Timeout::Test), Ok(1));
    assert_eq!(w.notify_reset(SegId(0), 1), Ok(9));
    assert_eq!(seg.get::<u64>(1), Ok(0));
    assert_eq!(w.state(), vec![Health::Healthy]);
    assert_eq!(w.barrier(Timeout::Test), Ok(()));
    assert_eq!(
        w.passive_receive(&mut [0u8; 4], Timeout::Test),
        Err(Error::Timeout)
    );
}

#[test]
fn endpoints_on_workers_bypass_and_engine() {
    use tiers_cluster::endpoint::Delivery;
    let w = tiers_cluster::Builder::new().local(1).unwrap().remove(0);
    for workers in [1, 2, 3] {
        endpoints::endpoints(&w, workers, Delivery::Bypass);
        endpoints::endpoints(&w, workers, Delivery::Engine);
    }
    for n in 2..=4 {
        run_local(n, |w| endpoints::endpoints(w, 2, Delivery::Bypass)).unwrap();
        run_local(n, |w| endpoints::endpoints(w, 1, Delivery::Engine)).unwrap();
    }
}

/// A worker whose handler fails stops draining its inbox: a sender that fills that inbox gets
/// an error instead of retrying forever, and the run returns the failure.
#[test]
fn sending_to_a_stopped_worker_ends_with_an_error() {
    use tiers_cluster::endpoint::{self, Ctx, Delivery, Endpoint, EpId};
    struct E;
    impl Endpoint for E {
        fn start(&mut self, ctx: &mut Ctx<'_>) -> tiers_cluster::Result<()> {
            if ctx.id() == 1 {
                return Err(Error::Setup("endpoint 1 fails on purpose".into()));
            }
            // Far more messages than an inbox holds (4096).
            for i in 0..20_000u32 {
                ctx.send(1, i.to_le_bytes().to_vec())?;
            }
            ctx.finish()
        }
        fn receive(&mut self, _: &mut Ctx<'_>, _: EpId, _: Vec<u8>) -> tiers_cluster::Result<()> {
            Ok(())
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let w = tiers_cluster::Builder::new().local(1).unwrap().remove(0);
        let pool = tiers_node::Pool::builder().threads(2).build().unwrap();
        let _ = tx.send(endpoint::run(&w, &pool, 2, Delivery::Bypass, |_| E));
    });
    let r = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the run must end, not retry forever");
    match r {
        Err(Error::Setup(_)) | Err(Error::EndpointStopped { endpoint: 1 }) => {}
        other => panic!("expected the failure, got {other:?}"),
    }
}

/// Worlds of more than 8 ranks arrive at barrier-based collectives through a combining tree
/// (groups of about √n ranks): every behaviour in one world of 9 and of 16 ranks (groups of 3,
/// and of 4 whole groups), mismatches and resumed timeouts included, and many barriers in a
/// row that no rank may leave before every rank has arrived.
#[test]
fn many_ranks_meet_at_the_combining_barrier() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    for n in [9, 16] {
        play_all_behaviours(n);
        let arrived = AtomicUsize::new(0);
        run_local(n, |w| {
            for i in 0..300 {
                arrived.fetch_add(1, Ordering::SeqCst);
                w.barrier(Timeout::Block).unwrap();
                let seen = arrived.load(Ordering::SeqCst);
                assert!(
                    seen >= n * (i + 1),
                    "rank {} left barrier {i} of {n} ranks having seen {seen} arrivals",
                    w.rank()
                );
                w.barrier(Timeout::Block).unwrap();
            }
        })
        .unwrap();
    }
}

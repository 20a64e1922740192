//! The suite on the `tcp` engine: ranks are processes started by the launcher with
//! `engine = "tcp"` (sockets on loopback, a rendezvous served by the launcher), which re-runs
//! this test binary with the scenario to play in `TIERS_TEST_SCENARIO`. Every behaviour of
//! [`common::suite!`] is a test of its own (`tcp::<behaviour>`), one job per behaviour and
//! number of ranks (1 to 4); then several threads per rank, endpoints, a rank killed with
//! `-9` (the others get `PeerFailed`, the job is not torn down by the transport), the suite
//! under every progress policy, and two processes claiming one rank.

mod common;
#[path = "common/endpoints.rs"]
mod endpoints;
#[path = "common/failures.rs"]
mod failures;

use std::time::Duration;
use tiers_cluster::launch::{End, Job, Outcome};

const SCENARIO: &str = "TIERS_TEST_SCENARIO";

/// The rank side: does nothing in a normal test run.
#[test]
fn child() {
    let Ok(s) = std::env::var(SCENARIO) else {
        return;
    };
    if s == "spmd-suite" {
        let w = tiers_cluster::init().expect("init");
        for (_, f) in common::ALL {
            f(&w);
        }
        let st = w
            .transport_stats()
            .expect("the tcp engine counts its passes");
        assert!(st.calls > 0 && st.frames_in > 0 && st.bytes_out > 0 || w.size() == 1);
        return;
    }
    let w = tiers_cluster::init().expect("init");
    assert_eq!(w.engine_name(), "tcp");
    if let Some((_, f)) = common::ALL.iter().find(|(name, _)| *name == s) {
        f(&w);
        return;
    }
    match s.as_str() {
        "threads" => common::threads::threads(&w, 4, 200),
        "endpoints" => {
            endpoints::endpoints(&w, 2, tiers_cluster::endpoint::Delivery::Bypass);
            endpoints::endpoints(&w, 1, tiers_cluster::endpoint::Delivery::Engine);
        }
        "killed" | "killed0" => {
            let victim = if s == "killed0" { 0 } else { w.size() - 1 };
            failures::killed(&w, victim, || {
                // SAFETY: kill has no memory-safety preconditions; this process ends here.
                unsafe { libc::kill(std::process::id() as libc::pid_t, libc::SIGKILL) };
                unreachable!("SIGKILL is not ignored");
            })
        }
        "failed" => {
            let victim = w.size() - 1;
            failures::killed(&w, victim, || w.fail())
        }
        other => panic!("unknown scenario {other}"),
    }
}

/// Runs `scenario` on `n` tcp ranks with more variables for them.
fn launch_env(n: usize, scenario: &str, vars: &[(&str, &str)]) -> Outcome {
    let exe = std::env::current_exe().unwrap();
    let mut job = Job::new(n, exe)
        .args(["child", "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env(SCENARIO, scenario)
        .env("TIERS_INIT_TIMEOUT_MS", "120000");
    for (k, v) in vars {
        job = job.env(k, v);
    }
    job.engine = "tcp".into();
    job.grace = Duration::from_secs(30);
    job.pin = false;
    job.report = false;
    job.discard_stdout = true;
    job.run().expect("launch")
}

/// Plays `behaviour` in jobs of 1 to 4 processes.
fn on_1_to_4_ranks(behaviour: &str) {
    for n in 1..=4 {
        let out = launch_env(n, behaviour, &[]);
        assert_eq!(
            out.ends,
            vec![End::Exited(0); n],
            "{behaviour} on {n} ranks"
        );
    }
}

macro_rules! on_tcp_engine {
    ($($family:ident :: $name:ident),* $(,)?) => {
        /// The suite, one test per behaviour.
        mod tcp {
            $(
                #[test]
                fn $name() {
                    super::on_1_to_4_ranks(stringify!($name));
                }
            )*
        }
    };
}
common::suite!(on_tcp_engine);

#[test]
fn several_threads_per_process_communicate_at_once() {
    for n in [1, 2, 3] {
        let out = launch_env(n, "threads", &[]);
        assert_eq!(out.ends, vec![End::Exited(0); n], "{n} ranks");
    }
}

#[test]
fn endpoints_across_processes() {
    for n in 1..=3 {
        let out = launch_env(n, "endpoints", &[]);
        assert_eq!(out.ends, vec![End::Exited(0); n], "{n} ranks");
    }
}

#[test]
fn killed_process_is_reported_and_survivors_see_it() {
    for (n, scenario, victim) in [
        (2, "killed", 1),
        (3, "killed", 2),
        (4, "killed", 3),
        (2, "killed0", 0),
        (3, "killed0", 0),
    ] {
        let t = std::time::Instant::now();
        let out = launch_env(n, scenario, &[]);
        let mut want = vec![End::Exited(0); n];
        want[victim] = End::Signaled(libc::SIGKILL);
        assert_eq!(out.ends, want, "{n} ranks, victim {victim}");
        // The survivors saw the death long before the 30 s timeouts of the scenario.
        assert!(t.elapsed() < Duration::from_secs(25), "{:?}", t.elapsed());
    }
}

/// A rank that gives up with `World::fail` exits normally, and its peers see it failed at
/// once (its links close without a goodbye).
#[test]
fn a_rank_that_fails_is_seen_failed() {
    for n in [2, 3] {
        let t = std::time::Instant::now();
        let out = launch_env(n, "failed", &[]);
        assert_eq!(out.ends, vec![End::Exited(0); n], "{n} ranks");
        assert!(t.elapsed() < Duration::from_secs(25), "{:?}", t.elapsed());
    }
}

/// The whole suite in one world of processes under each progress policy: eager and lazy
/// polls of the sockets, and the proxy thread running the passes (also handed every transfer
/// of 64 bytes or more).
#[test]
fn the_suite_under_every_progress_policy() {
    for (policy, min) in [("eager", ""), ("lazy", ""), ("proxy", ""), ("proxy", "64")] {
        let mut vars = vec![(tiers_cluster::env::PROGRESS, policy)];
        if !min.is_empty() {
            vars.push((tiers_cluster::env::PROXY_MIN, min));
        }
        let out = launch_env(3, "spmd-suite", &vars);
        assert!(
            out.ends.iter().all(|e| *e == End::Exited(0)),
            "{policy} {min}: {:?}",
            out.ends
        );
    }
}

//! The suite on the `shm` engine: ranks are processes started by the launcher, which re-runs
//! this test binary with the scenario to play in `TIERS_TEST_SCENARIO`.

mod common;

use std::time::Duration;
use tiers_cluster::engine::shm;
use tiers_cluster::launch::{End, Job, Outcome};

const SCENARIO: &str = "TIERS_TEST_SCENARIO";

/// The rank side: does nothing in a normal test run.
#[test]
fn child() {
    let Ok(s) = std::env::var(SCENARIO) else {
        return;
    };
    if s == "spmd-suite" {
        tiers_cluster::spmd(common::suite).expect("spmd");
        return;
    }
    let w = tiers_cluster::init().expect("init");
    assert_eq!(w.engine_name(), "shm");
    match s.as_str() {
        "suite" => common::suite(&w),
        "random" => common::random(&w, 0xfeed),
        "endpoints" => {
            common::endpoints(&w, 2, tiers_cluster::endpoint::Delivery::Bypass);
            common::endpoints(&w, 1, tiers_cluster::endpoint::Delivery::Engine);
        }
        "killed" => common::killed(&w, || {
            // SAFETY: kill has no memory-safety preconditions; this process ends here.
            unsafe { libc::kill(std::process::id() as libc::pid_t, libc::SIGKILL) };
            unreachable!("SIGKILL is not ignored");
        }),
        other => panic!("unknown scenario {other}"),
    }
}

fn launch(n: usize, scenario: &str, engine: &str) -> Outcome {
    let exe = std::env::current_exe().unwrap();
    let mut job = Job::new(n, exe)
        .args(["child", "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env(SCENARIO, scenario)
        .env("TIERS_INIT_TIMEOUT_MS", "120000");
    job.engine = engine.into();
    job.grace = Duration::from_secs(30);
    job.pin = false;
    job.report = false;
    job.discard_stdout = true;
    let out = job.run().expect("launch");
    let prefix = format!("tiers-{}-", out.job);
    let left: Vec<String> = shm::list()
        .into_iter()
        .filter(|o| o.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "objects left behind: {left:?}");
    out
}

#[test]
fn suite_on_processes_1_to_4_ranks() {
    for n in 1..=4 {
        let out = launch(n, "suite", "shm");
        assert_eq!(out.ends, vec![End::Exited(0); n], "{n} ranks");
    }
}

#[test]
fn random_ops_on_processes() {
    for n in [2, 3] {
        let out = launch(n, "random", "shm");
        assert_eq!(out.ends, vec![End::Exited(0); n], "{n} ranks");
    }
}

#[test]
fn endpoints_across_processes() {
    for n in [2, 3] {
        let out = launch(n, "endpoints", "shm");
        assert_eq!(out.ends, vec![End::Exited(0); n], "{n} ranks");
    }
}

#[test]
fn killed_process_is_reported_and_survivors_see_it() {
    for n in [2, 4] {
        let out = launch(n, "killed", "shm");
        let mut want = vec![End::Exited(0); n];
        want[n - 1] = End::Signaled(libc::SIGKILL);
        assert_eq!(out.ends, want, "{n} ranks");
    }
}

#[test]
fn local_engine_under_the_launcher() {
    let out = launch(3, "spmd-suite", "local");
    assert_eq!(out.ends, vec![End::Exited(0)]);
}

#[test]
fn a_failing_rank_is_reported() {
    // A rank whose scenario is unknown panics: exit code 101, the others end too.
    let out = launch(2, "no-such-scenario", "shm");
    assert!(
        out.ends
            .iter()
            .all(|e| *e == End::Exited(101) || *e == End::Stopped),
        "{:?}",
        out.ends
    );
    assert!(!out.success());
}

#[test]
fn stale_objects_of_dead_launchers_are_swept() {
    let mut c = std::process::Command::new("true").spawn().unwrap();
    let dead = c.id();
    c.wait().unwrap();
    let job = format!("{dead}x5ta1e");
    let jc = shm::JobControl::create(&job, 2).unwrap();
    std::mem::forget(jc); // as if its launcher had been killed with -9
    assert!(shm::list().iter().any(|o| o == &format!("tiers-{job}-ctl")));
    shm::sweep_stale();
    assert!(!shm::list()
        .iter()
        .any(|o| o.starts_with(&format!("tiers-{job}-"))));
}

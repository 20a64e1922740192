//! The suite on the `shm` engine: ranks are processes started by the launcher, which re-runs
//! this test binary with the scenario to play in `TIERS_TEST_SCENARIO`. Every behaviour of
//! [`common::suite!`] is a test of its own (`shm::<behaviour>`), one job per behaviour and
//! number of ranks (1 to 4).

mod common;
#[path = "common/endpoints.rs"]
mod endpoints;
#[path = "common/failures.rs"]
mod failures;

use std::time::Duration;
use tiers_cluster::engine::shm as engine;
use tiers_cluster::launch::{End, Job, Outcome};

const SCENARIO: &str = "TIERS_TEST_SCENARIO";
const PID_DIR: &str = "TIERS_TEST_PID_DIR";

/// The rank side: does nothing in a normal test run.
#[test]
fn child() {
    let Ok(s) = std::env::var(SCENARIO) else {
        return;
    };
    if s == "launcher" {
        // A launcher of its own (killed with -9 by `killed_launcher_leaves_nothing`).
        let exe = std::env::current_exe().unwrap();
        let mut job = Job::new(2, exe)
            .args(["child", "--exact", "--nocapture", "--test-threads=1", "-q"])
            .env(SCENARIO, "sleeper");
        job.pin = false;
        job.report = false;
        job.discard_stdout = true;
        job.run().expect("launch");
        return;
    }
    if s == "spmd-suite" {
        tiers_cluster::spmd(|w| {
            for (_, f) in common::ALL {
                f(w);
            }
        })
        .expect("spmd");
        return;
    }
    let w = tiers_cluster::init().expect("init");
    assert_eq!(w.engine_name(), "shm");
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
        "noop" => {}
        "left-after-segment" => {
            // Rank 0 arrives at a segment's creation, gives up (a timeout), and resumes it
            // only once rank 1 has completed the creation and left: what rank 1 did before
            // leaving counts, and a call that names rank 1 afterwards fails on its health.
            use tiers_cluster::{Error, Health, SegId, Timeout};
            if w.rank() == 1 {
                std::thread::sleep(Duration::from_millis(300));
                w.segment(SegId(1), 4096).expect("rank 1: segment");
                return;
            }
            let first = w.segment_timeout(SegId(1), 4096, Timeout::millis(1));
            assert!(matches!(first, Err(Error::Timeout)), "{:?}", first.err());
            let t = std::time::Instant::now();
            while w.health(1).expect("health") != Health::Exited {
                assert!(t.elapsed() < Duration::from_secs(60), "rank 1 never left");
                std::thread::sleep(Duration::from_millis(5));
            }
            w.segment_timeout(SegId(1), 4096, Timeout::Block)
                .expect("a creation that the peer completed before it left");
            let q = w.queue(0).expect("queue");
            let r = q
                .write(SegId(1).at(0), SegId(1).on(1, 0), 8)
                .and_then(|()| q.wait(Timeout::millis(10_000)));
            assert!(matches!(r, Err(Error::PeerFailed(1))), "{r:?}");
        }
        "sleeper" => {
            // Holds a segment, records its pid, then waits (for the launcher's death).
            let _seg = w.segment(tiers_cluster::SegId(0), 4096).expect("segment");
            w.barrier(tiers_cluster::Timeout::Block).expect("barrier");
            let dir = std::env::var(PID_DIR).expect("pid dir");
            // And a process of its own, which must not outlive the launcher either.
            let mut child = std::process::Command::new("sleep")
                .arg("120")
                .spawn()
                .expect("start sleep");
            std::fs::write(format!("{dir}/{}.child", w.rank()), child.id().to_string())
                .expect("child pid file");
            std::fs::write(
                format!("{dir}/{}", w.rank()),
                std::process::id().to_string(),
            )
            .expect("pid file");
            std::thread::sleep(Duration::from_secs(120));
            let _ = child.kill();
            let _ = child.wait();
        }
        other => panic!("unknown scenario {other}"),
    }
}

fn launch(n: usize, scenario: &str, engine: &str) -> Outcome {
    launch_env(n, scenario, engine, &[])
}

/// [`launch`] with more variables for the ranks.
fn launch_env(n: usize, scenario: &str, engine: &str, vars: &[(&str, &str)]) -> Outcome {
    let exe = std::env::current_exe().unwrap();
    let mut job = Job::new(n, exe)
        .args(["child", "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env(SCENARIO, scenario)
        .env("TIERS_INIT_TIMEOUT_MS", "120000");
    for (k, v) in vars {
        job = job.env(k, v);
    }
    job.engine = engine.into();
    job.grace = Duration::from_secs(30);
    job.pin = false;
    job.report = false;
    job.discard_stdout = true;
    let out = job.run().expect("launch");
    let prefix = format!("tiers-{}-", out.job);
    let left: Vec<String> = engine::list()
        .into_iter()
        .filter(|o| o.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "objects left behind: {left:?}");
    out
}

/// Plays `behaviour` in jobs of 1 to 4 processes.
fn on_1_to_4_ranks(behaviour: &str) {
    for n in 1..=4 {
        let out = launch(n, behaviour, "shm");
        assert_eq!(
            out.ends,
            vec![End::Exited(0); n],
            "{behaviour} on {n} ranks"
        );
    }
}

macro_rules! on_shm_engine {
    ($($family:ident :: $name:ident),* $(,)?) => {
        /// The suite, one test per behaviour.
        mod shm {
            $(
                #[test]
                fn $name() {
                    super::on_1_to_4_ranks(stringify!($name));
                }
            )*
        }
    };
}
common::suite!(on_shm_engine);

#[test]
fn a_collective_completed_by_a_peer_that_then_left_succeeds() {
    let out = launch(2, "left-after-segment", "shm");
    assert_eq!(out.ends, vec![End::Exited(0); 2]);
}

#[test]
fn several_threads_per_process_communicate_at_once() {
    for n in [1, 2, 3] {
        let out = launch(n, "threads", "shm");
        assert_eq!(out.ends, vec![End::Exited(0); n], "{n} ranks");
    }
}

#[test]
fn endpoints_across_processes() {
    for n in 1..=4 {
        let out = launch(n, "endpoints", "shm");
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
        let out = launch(n, scenario, "shm");
        let mut want = vec![End::Exited(0); n];
        want[victim] = End::Signaled(libc::SIGKILL);
        assert_eq!(out.ends, want, "{n} ranks, victim {victim}");
        // The survivors saw the death long before the 30 s timeouts of the scenario.
        assert!(t.elapsed() < Duration::from_secs(25), "{:?}", t.elapsed());
    }
}

/// The whole suite in one world of processes under each progress policy from the
/// environment, the proxy also handing every transfer of 64 bytes or more to its thread (the random model's
/// are shorter: see `progress.rs`).
#[test]
fn the_suite_under_every_progress_policy() {
    for (policy, min) in [("eager", ""), ("lazy", ""), ("proxy", ""), ("proxy", "64")] {
        let mut vars = vec![(tiers_cluster::env::PROGRESS, policy)];
        if !min.is_empty() {
            vars.push((tiers_cluster::env::PROXY_MIN, min));
        }
        let out = launch_env(3, "spmd-suite", "shm", &vars);
        assert!(
            out.ends.iter().all(|e| *e == End::Exited(0)),
            "{policy} {min}: {:?}",
            out.ends
        );
    }
    // A policy that does not exist: every rank's init fails (the rank panics: 101).
    let out = launch_env(
        2,
        "spmd-suite",
        "shm",
        &[(tiers_cluster::env::PROGRESS, "never")],
    );
    assert!(
        out.ends
            .iter()
            .all(|e| *e == End::Exited(101) || *e == End::Stopped),
        "{:?}",
        out.ends
    );
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
    let jc = engine::JobControl::create(&job, 2).unwrap();
    std::mem::forget(jc); // as if its launcher had been killed with -9
    assert!(engine::list()
        .iter()
        .any(|o| o == &format!("tiers-{job}-ctl")));
    engine::sweep_stale();
    assert!(!engine::list()
        .iter()
        .any(|o| o.starts_with(&format!("tiers-{job}-"))));
}

#[test]
fn a_job_whose_launcher_pid_was_reused_is_swept_and_a_live_one_kept() {
    // A job named after a live process that is not its launcher (the launcher's pid reused):
    // the control block records the start time of its creator (this test), not the sleeper's.
    // Start times count clock ticks (10 ms): let this process's tick pass first.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let reused = format!("{}x2e05ed", sleeper.id());
    std::mem::forget(engine::JobControl::create(&reused, 2).unwrap());
    // A job of this very process: alive, same start time, kept.
    let live = format!("{}x11fe", std::process::id());
    let keep = engine::JobControl::create(&live, 2).unwrap();
    engine::sweep_stale();
    let objs = engine::list();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(
        !objs
            .iter()
            .any(|o| o.starts_with(&format!("tiers-{reused}-"))),
        "{objs:?}"
    );
    assert!(
        objs.iter().any(|o| o == &format!("tiers-{live}-ctl")),
        "{objs:?}"
    );
    drop(keep);
}

fn zombie_or_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn killed_launcher_leaves_nothing() {
    // A launcher (this binary, scenario "launcher") of 2 sleeping ranks, each with a `sleep`
    // of its own, is killed with -9: its ranks die with it (PR_SET_PDEATHSIG), its guardian
    // kills their process groups, and the next launch sweeps the objects it left.
    let dir = std::env::temp_dir().join(format!("tiers-pids-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut launcher = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env(SCENARIO, "launcher")
        .env(PID_DIR, &dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lpid = launcher.id();
    let prefix = format!("tiers-{lpid}x");
    let t = std::time::Instant::now();
    let pids: Vec<u32> = loop {
        // The ranks' pids and those of the processes they started.
        let got: Vec<u32> = ["0", "1", "0.child", "1.child"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(dir.join(f)).ok())
            .filter_map(|s| s.trim().parse().ok())
            .collect();
        if got.len() == 4 {
            break got;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "ranks did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let objs: Vec<String> = engine::list()
        .into_iter()
        .filter(|o| o.starts_with(&prefix))
        .collect();
    assert!(objs.iter().any(|o| o.ends_with("-ctl")), "{objs:?}");
    assert!(objs.iter().any(|o| o.ends_with("-s0-r1")), "{objs:?}");
    launcher.kill().unwrap(); // SIGKILL
    launcher.wait().unwrap();
    let t = std::time::Instant::now();
    while !pids.iter().all(|&p| zombie_or_gone(p)) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "ranks or the processes they started outlived the launcher"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The killed launcher removed nothing; its objects go at the next launch's sweep. (Other
    // tests of this binary launch jobs concurrently and may sweep them first, so their
    // presence here is not asserted; `stale_objects_of_dead_launchers_are_swept` checks
    // the sweep on its own.)
    let out = launch(1, "noop", "shm");
    assert!(out.success());
    let left: Vec<String> = engine::list()
        .into_iter()
        .filter(|o| o.starts_with(&prefix))
        .collect();
    assert!(
        left.is_empty(),
        "stale objects survived the sweep: {left:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

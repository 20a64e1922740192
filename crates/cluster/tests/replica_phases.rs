//! A replica killed in a replicated job's world-level phases: before it joins the world, in
//! the collective registration of the two-sided segment, or at the end, after the program's
//! last collective and before the teardown; and a replica stopped (SIGSTOP) or late before
//! its join or its segment registration, which the others leave behind after one replica
//! timeout. Ranks are processes started by the launcher with
//! 2 replicas per rank, on the `shm` and the `tcp` engine; this test binary plays the ranks
//! (`TIERS_TEST_SCENARIO`). The survivors must run the whole program with the results an
//! unreplicated run computes, and the job must succeed.

use std::time::Duration;
use tiers_cluster::launch::{End, Job};
use tiers_cluster::twosided::Comm;
use tiers_cluster::{Op, SegId, Timeout};

const SCENARIO: &str = "TIERS_TEST_SCENARIO";
const VICTIM: &str = "TIERS_TEST_VICTIM";
const SEG: SegId = SegId(3);

fn stop() {
    // SAFETY: kill has no memory-safety preconditions; this process stops here until
    // continued (the launcher ends it).
    unsafe { libc::kill(std::process::id() as libc::pid_t, libc::SIGSTOP) };
}

fn die() -> ! {
    // SAFETY: kill has no memory-safety preconditions; this process ends here.
    unsafe { libc::kill(std::process::id() as libc::pid_t, libc::SIGKILL) };
    unreachable!("SIGKILL is not ignored");
}

/// The rank side: does nothing in a normal test run.
#[test]
fn child() {
    let Ok(stage) = std::env::var(SCENARIO) else {
        return;
    };
    let victim: Option<usize> = std::env::var(VICTIM).ok().and_then(|v| v.parse().ok());
    let me: Option<usize> = std::env::var("TIERS_RANK")
        .ok()
        .and_then(|v| v.parse().ok());
    let doomed = victim.is_some() && victim == me;
    if doomed && stage == "join" {
        die();
    }
    if doomed && stage == "stop-join" {
        stop();
    }
    if doomed && stage == "late-join" {
        std::thread::sleep(std::time::Duration::from_millis(1500));
    }
    let w = tiers_cluster::init().expect("init");
    if doomed && stage == "segment" {
        die();
    }
    if doomed && stage == "stop-segment" {
        stop();
    }
    if doomed && stage == "late-segment" {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        // The others went on without this replica: its call says so.
        let Err(e) = Comm::new(&w, SEG, Timeout::Block) else {
            panic!("a replica left behind got its Comm");
        };
        assert!(e.to_string().contains("went on without it"), "{e}");
        std::process::exit(3);
    }
    let c = Comm::new(&w, SEG, Timeout::Block).expect("the two-sided segment");
    let (rank, p) = (c.rank(), c.size());
    assert_eq!(p, 2, "logical ranks");
    for round in 0..20u32 {
        let msg: Vec<u8> = (0..100 + rank * 7 + round as usize)
            .map(|k| (k + rank + round as usize) as u8)
            .collect();
        c.send((rank + 1) % p, round, &msg, Timeout::Block)
            .expect("send");
        let from = (rank + p - 1) % p;
        let got = c.recv_vec(from, round, Timeout::Block).expect("recv");
        let want: Vec<u8> = (0..100 + from * 7 + round as usize)
            .map(|k| (k + from + round as usize) as u8)
            .collect();
        assert_eq!(got, want, "round {round}");
        let mut sum = [0u64; 2];
        c.allreduce(
            &[rank as u64, u64::from(round)],
            &mut sum,
            Op::Sum,
            Timeout::Block,
        )
        .expect("allreduce");
        assert_eq!(sum, [1, 2 * u64::from(round)]);
    }
    c.barrier(Timeout::Block).expect("barrier");
    if doomed && stage == "end" {
        die();
    }
}

/// The job of this test binary playing `stage` on 2 ranks x 2 replicas on `engine`, with
/// process `victim` the one the stage picks on.
fn job(engine: &str, stage: &str, victim: Option<usize>) -> Job {
    let exe = std::env::current_exe().unwrap();
    let mut job = Job::new(2, exe)
        .args(["child", "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env(SCENARIO, stage);
    if let Some(v) = victim {
        job = job.env(VICTIM, &v.to_string());
    }
    job.engine = engine.into();
    job.replicas = 2;
    job.timeout = Some(Duration::from_secs(90));
    job.pin = false;
    job.report = false;
    job.discard_stdout = true;
    job
}

/// Runs the program on 2 ranks x 2 replicas on `engine`, killing process `victim` at `stage`.
fn killed_at(engine: &str, stage: &str, victim: usize) {
    let mut job = job(engine, stage, Some(victim)).env("TIERS_INIT_TIMEOUT_MS", "60000");
    job.grace = Duration::from_secs(30);
    let out = job.run().expect("launch");
    assert!(
        out.success(),
        "{engine}: process {victim} killed at {stage}: {:?} {:?}",
        out.ends,
        out.stop
    );
    assert_eq!(
        out.ends[victim],
        End::Signaled(libc::SIGKILL),
        "{engine} {stage}: {:?}",
        out.ends
    );
    for (p, e) in out.ends.iter().enumerate().filter(|&(p, _)| p != victim) {
        assert!(
            matches!(e, End::Exited(0) | End::Stopped),
            "{engine} {stage}: process {p} {e}"
        );
    }
}

/// Every stage, killing process 0 (the first replica of rank 0: the tcp engine's collective
/// root in an unreplicated job) and process 3 (the last replica of the last rank).
fn every_stage(engine: &str) {
    for stage in ["join", "segment", "end"] {
        for victim in [0, 3] {
            killed_at(engine, stage, victim);
        }
    }
}

#[test]
fn a_replica_killed_in_the_world_phases_on_shm() {
    every_stage("shm");
}

#[test]
fn a_replica_killed_in_the_world_phases_on_tcp() {
    every_stage("tcp");
}

/// A replica stopped before its join or its segment registration: the others wait
/// one replica timeout (300 ms here), then go on without it, and the launcher ends it once
/// the job is done; one that only comes late (1.5 s) is refused when it comes (its `init`
/// fails, a panic here, or its `Comm` does).
#[test]
fn a_replica_stopped_in_the_world_phases_is_left_behind_on_shm() {
    left_behind("shm");
}

#[test]
fn a_replica_stopped_in_the_world_phases_is_left_behind_on_tcp() {
    left_behind("tcp");
}

fn left_behind(engine: &str) {
    for stage in ["stop-join", "stop-segment", "late-join", "late-segment"] {
        for victim in [0, 3] {
            let mut job = job(engine, stage, Some(victim)).env("TIERS_REPLICA_TIMEOUT_MS", "300");
            // Long enough for a late replica to come and fail before the launcher ends it.
            job.grace = if stage.starts_with("late") {
                Duration::from_secs(10)
            } else {
                Duration::from_millis(500)
            };
            job.timeout = Some(Duration::from_secs(60));
            let t = std::time::Instant::now();
            let out = job.run().expect("launch");
            assert!(
                out.success(),
                "{engine} {stage} {victim}: {:?} {:?}",
                out.ends,
                out.stop
            );
            // A stopped replica is ended by the launcher; a late one fails when it comes.
            let want = match stage {
                "late-segment" => End::Exited(3),
                "late-join" => End::Exited(101),
                _ => End::Stopped,
            };
            assert_eq!(out.ends[victim], want, "{engine} {stage}: {:?}", out.ends);
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{stage} {victim}: {:?}",
                t.elapsed()
            );
        }
    }
}

#[test]
fn no_replica_killed() {
    for engine in ["shm", "tcp"] {
        killed_at_none(engine);
    }
}

fn killed_at_none(engine: &str) {
    let out = job(engine, "none", None).run().expect("launch");
    assert!(out.success(), "{engine}: {:?} {:?}", out.ends, out.stop);
    assert!(
        out.ends.iter().all(|e| *e == End::Exited(0)),
        "{:?}",
        out.ends
    );
}

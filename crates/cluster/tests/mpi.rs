//! The suite on the `mpi` engine (feature `mpi`). Every behaviour of [`common::suite!`] is a
//! test of its own (`mpi::<behaviour>`), checked under `mpirun -n 2` and `-n 4`, once
//! multi-tier (ranks of this host share memory) and once with every rank talking through MPI,
//! and under `mpirun -n 4` as two emulated hosts of two ranks (`TIERS_MPI_RANKS_PER_HOST=2`:
//! the hierarchical collectives, shared memory inside a host and MPI between hosts).
//!
//! Two more suite jobs run with one-sided operations between hosts as ordered messages
//! (`TIERS_MPI_ONESIDED=messages`): 4 ranks each its own host, and two hosts of two.
//!
//! Starting MPI costs a few tenths of a second per job, so the seven jobs are started once (with
//! the threaded jobs beside them), by whichever of these tests runs first: every rank plays every behaviour in order in one world
//! and records each one's outcome in a file of its own; each test then reads its behaviour's
//! outcome at every rank of every job. A rank whose behaviour fails records the failure and
//! ends at once, which ends its job: the behaviours after it are reported as not reached.
//!
//! Started by hand (as `.ci/multihost` does across namespaced hosts), rank 0 names on stderr
//! every behaviour that took longer than 3 s (seen with `--nocapture`, or when the job fails),
//! and `TIERS_TEST_ONLY=NAME` plays only the behaviours whose names contain NAME.
//!
//! Without `mpirun` on the PATH the launching tests say so and pass (the MPI library is needed
//! to build this feature at all, the launcher to run it: `.ci/mpi` installs both).
#![cfg(feature = "mpi")]

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tiers_cluster::engine::mpi as engine;
use tiers_cluster::{Timeout, World};

const SCENARIO: &str = "TIERS_TEST_SCENARIO";
/// Where the ranks of a suite job record the outcome of each behaviour (one file per rank).
const RESULTS: &str = "TIERS_TEST_RESULTS";
/// Runs only the behaviours whose names contain this (a job started by hand to trace one).
const ONLY: &str = "TIERS_TEST_ONLY";
/// A behaviour of the suite that takes longer than this is named on stderr.
const SLOW_BEHAVIOUR_S: u64 = 3;

/// The rank side: does nothing unless started by an MPI launcher.
#[test]
fn mpi_child() {
    if !engine::launched() {
        return;
    }
    let w = tiers_cluster::init().expect("init");
    assert_eq!(w.engine_name(), "mpi");
    let scenario = std::env::var(SCENARIO).unwrap_or_else(|_| "suite".into());
    match scenario.as_str() {
        "suite" => play_suite(&w),
        "threads" => {
            // Four workers of every rank communicate at once: MPI_THREAD_MULTIPLE when asked
            // for (and provided), else tiers' own serialisation of its MPI calls.
            common::threads::threads(&w, 4, 30);
        }
        "notify_values" => notify_values(&w, 20_000),
        "fences" => fences(&w),
        "panic" => {
            // Rank 1 panics while rank 0 waits for it without a deadline.
            w.barrier(Timeout::Block).expect("barrier");
            if w.rank() == 1 {
                panic!("rank 1 gives up on purpose");
            }
            let _ = w.barrier(Timeout::Block);
        }
        "open-exit" => {
            // Every rank exits with its world open (never dropped), while a thread of it
            // keeps polling the engine: the exit must finalise MPI cleanly (before, such a
            // thread calling MPI while the exit finalised it crashed the process).
            leaked_and_polled(w);
            std::thread::sleep(Duration::from_millis(50));
            std::process::exit(0);
        }
        "finalize-first" => {
            // The program finalises MPI itself while its world is open and a thread of it
            // polls the engine (a GASPI program calling MPI_Finalize before
            // gaspi_proc_term): from then on tiers must not call MPI, which Open MPI answers
            // by aborting the job; the world's end afterwards does nothing MPI would see.
            let w = leaked_and_polled(w);
            std::thread::sleep(Duration::from_millis(20));
            // SAFETY: MPI is initialised, not finalised, and called from the main thread.
            assert_eq!(unsafe { ::mpi::ffi::MPI_Finalize() }, 0);
            std::thread::sleep(Duration::from_millis(50));
            assert!(
                w.barrier(Timeout::Block).is_err(),
                "a barrier after MPI_Finalize"
            );
        }
        "early-exit" | "early-exit-0" => {
            // Rank 1 exits with its world open while rank 0 waits for it without a
            // deadline: with a failure status the exit aborts the job at once; with 0 the
            // exit's barrier times out and aborts it.
            w.barrier(Timeout::Block).expect("barrier");
            if w.rank() == 1 {
                eprintln!("rank 1 gives up on purpose");
                std::mem::forget(w);
                std::process::exit(if scenario == "early-exit" { 1 } else { 0 });
            }
            let _ = w.barrier(Timeout::Block);
        }
        "fail" => {
            // Rank 1 gives up (an error only it saw) and returns normally.
            w.barrier(Timeout::Block).expect("barrier");
            if w.rank() == 1 {
                eprintln!("rank 1 gives up on purpose");
                w.fail();
                return;
            }
            let _ = w.barrier(Timeout::Block);
        }
        other => panic!("unknown scenario {other}"),
    }
}

/// After a barrier, `w` leaked (its world is never dropped) with a thread of the rank
/// polling its engine for good, as the GASPI library's watcher does.
fn leaked_and_polled(w: World) -> &'static World {
    w.barrier(Timeout::Block).expect("barrier");
    let w: &'static World = Box::leak(Box::new(w));
    std::thread::spawn(move || loop {
        let _ = w.progress_now();
    });
    w
}

/// Ranks 0 and 1 take turns: each round one sends the other [`NOTIFY_IDS`] notifications
/// whose value counts the rounds, and the other takes them all before it answers the same way.
/// Every value taken is checked: a notification seen twice (or two merged into one) fails at
/// once, where a program waiting for the next one would hang. Other ranks only meet them at
/// the end.
fn notify_values(w: &World, rounds: u32) {
    use tiers_cluster::{Notification, SegId, Timeout};
    let _seg = w.segment(SegId(0), 4096).expect("segment");
    let q = w.queue(0).expect("queue");
    let me = w.rank();
    if me < 2 {
        let peer = 1 - me;
        let take = |i: u32, v: u32| {
            for _ in 0..NOTIFY_IDS {
                let id = w
                    .notify_waitsome(
                        SegId(0),
                        0..NOTIFY_IDS,
                        Timeout::After(Duration::from_secs(60)),
                    )
                    .unwrap_or_else(|e| panic!("rank {me}, round {i}: no notification ({e})"));
                let got = w.notify_reset(SegId(0), id).expect("reset");
                assert_eq!(
                    got, v,
                    "rank {me}, round {i}: the value of notification {id}"
                );
            }
        };
        for i in 0..rounds {
            let v = i % 65_535 + 1;
            if me == 1 {
                take(i, v);
            }
            for id in 0..NOTIFY_IDS {
                q.notify(peer, SegId(0), Notification { id, value: v })
                    .expect("notify");
            }
            q.wait(Timeout::Block).expect("wait");
            if me == 0 {
                take(i, v);
            }
        }
    }
    w.barrier(Timeout::Block).expect("barrier");
}

/// Two ranks, each its own host, in the messages mode, where a rank answers the other's
/// fence (the remote completion of a full wait) only while it polls. First a full wait whose
/// target computes (does not poll) must end at its timeout, and the wait resumed must then
/// complete with the write applied. Then a full wait whose target has gone on to end its
/// world (whose windows' `MPI_Win_free` does not poll) must still complete: the target
/// answers it before it frees them (this hung before ending a world began with a barrier).
fn fences(w: &World) {
    use tiers_cluster::SegId;
    let seg = w.segment(SegId(0), 4096).expect("segment");
    let q = w.queue(0).expect("queue");
    let me = w.rank();
    let peer = 1 - me;
    seg.write(0, &[me as u8 + 1; 8]).expect("source");
    w.barrier(Timeout::Block).expect("barrier");
    if me == 0 {
        // Computes, answering nobody, while rank 1 waits for its write.
        std::thread::sleep(Duration::from_millis(1500));
    } else {
        q.write(SegId(0).at(0), SegId(0).on(peer, 64), 8)
            .expect("write");
        let t0 = Instant::now();
        let r = q.wait(Timeout::After(Duration::from_millis(200)));
        assert!(
            matches!(r, Err(tiers_cluster::Error::Timeout)),
            "a fence to a rank that does not poll: {r:?}"
        );
        assert!(
            t0.elapsed() < Duration::from_millis(1200),
            "the wait ended {:?} after a timeout of 200 ms",
            t0.elapsed()
        );
        q.wait(Timeout::Block).expect("the wait resumed");
    }
    w.barrier(Timeout::Block).expect("barrier");
    if me == 0 {
        let mut got = [0u8; 8];
        seg.read(64, &mut got).expect("read");
        assert_eq!(got, [2u8; 8], "rank 1's write, complete at its wait");
    }
    // Each writes to the other; rank 1 waits and ends its world while rank 0 still computes.
    q.write(SegId(0).at(0), SegId(0).on(peer, 128), 8)
        .expect("write");
    if me == 0 {
        std::thread::sleep(Duration::from_millis(500));
    }
    q.wait(Timeout::Block).expect("wait");
}

/// Notifications per turn of [`notify_values`].
const NOTIFY_IDS: usize = 64;

/// Plays every behaviour in order, appending `ok NAME` or `failed NAME: MESSAGE` to this rank's
/// file under `TIERS_TEST_RESULTS`. After a failure the rank ends at once (its peers may be
/// waiting for it in a collective that will never complete; its exit ends the job).
///
/// Started by hand (`.ci/multihost` runs the suite across namespaced hosts) there is no results
/// directory: the behaviours run in order and the first failure fails the rank, naming it.
fn play_suite(w: &World) {
    // A behaviour that takes long is named on stderr by rank 0 (a job across hosts that
    // nears its guard shows where its time went).
    let timed = |name: &str, started: Instant| {
        let took = started.elapsed();
        if w.rank() == 0 && took > Duration::from_secs(SLOW_BEHAVIOUR_S) {
            eprintln!("rank 0: behaviour {name} took {:.1} s", took.as_secs_f64());
        }
    };
    let Ok(dir) = std::env::var(RESULTS) else {
        for (name, f) in common::ALL {
            if std::env::var(ONLY).is_ok_and(|o| !name.contains(&o)) {
                continue;
            }
            let started = Instant::now();
            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(w))) {
                eprintln!("rank {}: behaviour {name} failed", w.rank());
                std::panic::resume_unwind(p);
            }
            timed(name, started);
        }
        return;
    };
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(Path::new(&dir).join(w.rank().to_string()))
        .expect("results file");
    for (name, f) in common::ALL {
        let started = Instant::now();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(w))) {
            Ok(()) => {
                timed(name, started);
                writeln!(out, "ok {name}").expect("record")
            }
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| p.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)");
                let msg = msg.replace('\n', " ");
                writeln!(out, "failed {name}: {msg}").expect("record");
                out.sync_all().expect("record");
                // SAFETY: _exit has no preconditions; this process ends here, without running
                // MPI_Finalize (which would wait for peers that wait for us).
                unsafe { libc::_exit(1) };
            }
        }
    }
}

fn mpirun() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("mpirun"))
        .find(|p| p.is_file())
}

/// Runs `n` ranks of `mpi_child` playing `scenario`, with `env` exported to every rank; true
/// when all exited 0.
fn run_scenario(
    mpirun: &Path,
    n: usize,
    host_local: bool,
    scenario: &str,
    env: &[(&str, &str)],
) -> bool {
    let mut child = scenario_command(mpirun, n, host_local, scenario, env)
        .spawn()
        .expect("start mpirun");
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("wait for mpirun") {
            return st.success();
        }
        if t0.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{n} ranks (host_local {host_local}): mpirun did not finish in 300 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The mpirun command that starts `n` ranks of `mpi_child` playing `scenario` (standard
/// output discarded).
fn scenario_command(
    mpirun: &Path,
    n: usize,
    host_local: bool,
    scenario: &str,
    env: &[(&str, &str)],
) -> Command {
    let exe = std::env::current_exe().unwrap();
    let mut c = Command::new(mpirun);
    c.args(["-n", &n.to_string(), "--oversubscribe"])
        .args([
            "-x",
            &format!("TIERS_MPI_HOST_LOCAL={}", u8::from(host_local)),
        ])
        .args(["-x", "TIERS_INIT_TIMEOUT_MS=120000"])
        .args(["-x", &format!("{SCENARIO}={scenario}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--allow-run-as-root")
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
    for (k, v) in env {
        c.args(["-x", &format!("{k}={v}")]);
    }
    c.arg(exe).args([
        "mpi_child",
        "--exact",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ]);
    c
}

/// Where a suite job's segment memory comes from when every rank is its own host.
#[derive(Clone, Copy, Debug)]
enum Windows {
    /// The engine's choice: on one node, memory MPI allocates (Open MPI's sm component).
    Chosen,
    /// Memory of tiers' own exposed with `MPI_Win_create` (`TIERS_MPI_ALLOCATE=0`).
    Created,
    /// Memory MPI allocates because the shared-memory transport's single-copy mechanism is
    /// off (the engine's other reason to let MPI allocate).
    NoSingleCopy,
}

/// One suite job: its shape, whether mpirun succeeded, and what each rank recorded.
struct SuiteJob {
    n: usize,
    host_local: bool,
    /// Hosts of this many ranks emulated on this machine (`TIERS_MPI_RANKS_PER_HOST`).
    per_host: Option<usize>,
    /// `TIERS_MPI_ONESIDED=messages`: one-sided operations between hosts as messages.
    messages: bool,
    /// Where segment memory comes from when every rank is its own host.
    windows: Windows,
    success: bool,
    /// Per rank: behaviour name → `None` (passed) or `Some(message)` (failed).
    outcomes: Vec<HashMap<String, Option<String>>>,
}

impl SuiteJob {
    fn run(
        mpirun: &Path,
        n: usize,
        host_local: bool,
        per_host: Option<usize>,
        messages: bool,
        windows: Windows,
    ) -> SuiteJob {
        let dir = std::env::temp_dir().join(format!(
            "tiers-mpi-suite-{}-{n}-{}-{}-{}-{}",
            std::process::id(),
            u8::from(host_local),
            per_host.unwrap_or(0),
            u8::from(messages),
            windows as u8
        ));
        let per = per_host.map(|k| k.to_string());
        let mut env = vec![(RESULTS, dir.to_str().expect("a UTF-8 temporary directory"))];
        if let Some(k) = &per {
            env.push(("TIERS_MPI_RANKS_PER_HOST", k));
        }
        if messages {
            env.push(("TIERS_MPI_ONESIDED", "messages"));
        }
        match windows {
            Windows::Chosen => {}
            Windows::Created => env.push(("TIERS_MPI_ALLOCATE", "0")),
            Windows::NoSingleCopy => {
                env.push(("OMPI_MCA_btl_vader_single_copy_mechanism", "none"));
                // rdma at its own priority, so that the engine allocates because of the
                // transport's setting alone (not because sm outranks rdma on one node).
                env.push(("OMPI_MCA_osc_rdma_priority", "101"));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("results directory");
        let success = run_scenario(mpirun, n, host_local, "suite", &env);
        let outcomes = (0..n)
            .map(|r| {
                std::fs::read_to_string(dir.join(r.to_string()))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| {
                        if let Some(name) = l.strip_prefix("ok ") {
                            return Some((name.to_string(), None));
                        }
                        let (name, msg) = l.strip_prefix("failed ")?.split_once(": ")?;
                        Some((name.to_string(), Some(msg.to_string())))
                    })
                    .collect()
            })
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        SuiteJob {
            n,
            host_local,
            per_host,
            messages,
            windows,
            success,
            outcomes,
        }
    }

    /// Panics unless `behaviour` passed at every rank.
    fn check(&self, behaviour: &str) {
        let mut job = match self.per_host {
            Some(k) => format!("{} ranks, hosts of {k} emulated", self.n),
            None => format!("{} ranks, host_local {}", self.n, self.host_local),
        };
        if self.messages {
            job += ", one-sided as messages";
        }
        match self.windows {
            Windows::Chosen => {}
            Windows::Created => job += ", segment memory of tiers' own (MPI_Win_create)",
            Windows::NoSingleCopy => job += ", MPI_Win_allocate without vader's single copy",
        }
        let failed = self.failures(behaviour);
        if !failed.is_empty() {
            panic!("{job}: {}", failed.join("; "));
        }
        let missing: Vec<usize> = (0..self.n)
            .filter(|&r| !self.outcomes[r].contains_key(behaviour))
            .collect();
        if !missing.is_empty() {
            // The job ended at the first behaviour (in suite order) that failed somewhere.
            let end = common::ALL
                .iter()
                .map(|(name, _)| self.failures(name))
                .find(|f| !f.is_empty())
                .map_or_else(
                    || {
                        format!(
                            "with no failure recorded (mpirun succeeded: {})",
                            self.success
                        )
                    },
                    |f| format!("after {}", f.join("; ")),
                );
            panic!("{job}: ranks {missing:?} did not reach this behaviour: the job ended {end}");
        }
    }

    /// `rank R: MESSAGE` for each rank at which `behaviour` failed.
    fn failures(&self, behaviour: &str) -> Vec<String> {
        self.outcomes
            .iter()
            .enumerate()
            .filter_map(|(r, o)| match o.get(behaviour) {
                Some(Some(msg)) => Some(format!("{behaviour} failed at rank {r}: {msg}")),
                _ => None,
            })
            .collect()
    }
}

/// Every mpirun job of these tests, run once by the first test that asks; `None` without
/// mpirun.
struct Jobs {
    /// `mpirun -n 2` and `-n 4`, multi-tier and all-MPI, playing the suite.
    suite: Vec<SuiteJob>,
    /// The threaded jobs: what each was, and whether every rank exited 0.
    threads: Vec<(String, bool)>,
}

/// The threaded jobs alongside the suite jobs (as two tests they would run one after the
/// other: the test threads that wait for the suite jobs leave none free to start them).
fn jobs() -> Option<&'static Jobs> {
    static JOBS: OnceLock<Option<Jobs>> = OnceLock::new();
    JOBS.get_or_init(|| {
        let m = mpirun()?;
        std::thread::scope(|s| {
            let threads = s.spawn(|| threaded_jobs(&m));
            let mut suite = Vec::new();
            for n in [2, 4] {
                for host_local in [true, false] {
                    suite.push(SuiteJob::run(
                        &m,
                        n,
                        host_local,
                        None,
                        false,
                        Windows::Chosen,
                    ));
                }
            }
            // Every rank its own host on windows over memory of tiers' own (where the ranks
            // are alone on their hosts the engine lets MPI allocate it by default).
            suite.push(SuiteJob::run(&m, 3, false, None, false, Windows::Created));
            // Two hosts of two ranks on this machine: the hierarchical paths (shared memory
            // inside a host, MPI between the hosts' leaders).
            suite.push(SuiteJob::run(&m, 4, true, Some(2), false, Windows::Chosen));
            // One-sided operations between hosts as ordered messages: every rank its own
            // host, and two hosts of two.
            suite.push(SuiteJob::run(&m, 4, false, None, true, Windows::Chosen));
            suite.push(SuiteJob::run(&m, 4, true, Some(2), true, Windows::Chosen));
            // Every rank its own host with segment memory MPI allocated (where Open MPI's
            // shared-memory transport does not crash on it: see the engine's README).
            suite.push(SuiteJob::run(
                &m,
                3,
                false,
                None,
                false,
                Windows::NoSingleCopy,
            ));
            Some(Jobs {
                suite,
                threads: threads.join().expect("threaded jobs"),
            })
        })
    })
    .as_ref()
}

/// Four workers per rank communicate at once, under `MPI_THREAD_MULTIPLE` (what
/// `TIERS_THREADS=4` asks for) and under tiers' serialisation of its MPI calls (funneled), at
/// 2 and 3 ranks, multi-tier and all-MPI.
fn threaded_jobs(m: &Path) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for level in ["multiple", "funneled"] {
        for (n, host_local) in [(2, true), (2, false), (3, false)] {
            let ok = run_scenario(
                m,
                n,
                host_local,
                "threads",
                &[("TIERS_THREADS", "4"), ("TIERS_MPI_THREADS", level)],
            );
            out.push((format!("{n} ranks, host_local {host_local}, {level}"), ok));
        }
        let ok = run_scenario(
            m,
            3,
            false,
            "threads",
            &[
                ("TIERS_THREADS", "4"),
                ("TIERS_MPI_THREADS", level),
                ("TIERS_MPI_ONESIDED", "messages"),
            ],
        );
        out.push((format!("3 ranks, host_local false, {level}, messages"), ok));
    }
    out
}

/// Checks `behaviour` in every suite job.
fn under_mpirun(behaviour: &str) {
    if engine::launched() {
        return; // the rank side runs `mpi_child` only
    }
    let Some(jobs) = jobs() else {
        eprintln!("mpirun is not installed: {behaviour} was not run on the mpi engine");
        return;
    };
    for job in &jobs.suite {
        job.check(behaviour);
    }
}

macro_rules! on_mpi_engine {
    ($($family:ident :: $name:ident),* $(,)?) => {
        /// The suite, one test per behaviour.
        mod mpi {
            $(
                #[test]
                fn $name() {
                    super::under_mpirun(stringify!($name));
                }
            )*
        }
    };
}
common::suite!(on_mpi_engine);

/// Every suite job ends well: every rank exits 0 after the last behaviour.
#[test]
fn suite_under_mpirun_2_and_4_ranks() {
    if engine::launched() {
        return;
    }
    let Some(jobs) = jobs() else {
        eprintln!(
            "mpirun is not installed: the mpi engine's suite was not run (.ci/mpi installs it)"
        );
        return;
    };
    for job in &jobs.suite {
        assert!(
            job.success,
            "{} ranks, host_local {}: a rank failed",
            job.n, job.host_local
        );
    }
}

/// The suite under the lazy and proxy progress policies, every rank its own host (so every
/// transfer goes through MPI and the policies poll it); the proxy hands every transfer of 64
/// bytes or more to its thread, which calls MPI beside the rank's own thread.
#[test]
fn suite_under_every_progress_policy_under_mpirun() {
    if engine::launched() {
        return;
    }
    let Some(mpirun) = mpirun() else {
        eprintln!("mpirun is not installed: the progress policies under mpi were not run");
        return;
    };
    for policy in ["lazy", "proxy"] {
        let env = [("TIERS_PROGRESS", policy), ("TIERS_PROXY_MIN", "64")];
        assert!(
            run_scenario(&mpirun, 2, false, "suite", &env),
            "{policy}: a rank failed"
        );
    }
}

/// Four workers per rank communicate at once (see [`threaded_jobs`]).
#[test]
fn several_workers_per_rank_under_mpirun() {
    if engine::launched() {
        return;
    }
    let Some(jobs) = jobs() else {
        eprintln!("mpirun is not installed: the threaded mpi test was not run");
        return;
    };
    for (what, ok) in &jobs.threads {
        assert!(ok, "{what}: a rank failed");
    }
}

/// Every notification is taken exactly once: 2.56 million notifications between two ranks
/// that are each their own host, on memory MPI allocates, where Open MPI stores a put's 4
/// bytes twice (before notifications there became accumulates, this failed within a few
/// thousand rounds: a value seen again after its reset).
#[test]
fn notifications_are_taken_once_under_mpirun() {
    two_ranks_play("notify_values", &[("TIERS_MPI_ALLOCATE", "1")]);
}

/// Fences between ranks of the messages mode end at their timeout, and a rank ending its
/// world answers the fences still waiting for it (scenario `fences`).
#[test]
fn fences_end_at_their_timeout_and_at_the_end_of_a_world() {
    two_ranks_play("fences", &[("TIERS_MPI_ONESIDED", "messages")]);
}

/// A rank that panics with its world alive, or gives up with `World::fail`, ends the job
/// (MPI_Abort at its exit), with its message, while its peer waits for it without a
/// deadline: before, its exit's `MPI_Finalize` (or, giving up, the world's collective
/// teardown) waited for the peer, which waited for it, and the job hung.
#[test]
fn a_rank_that_panics_or_fails_ends_the_job() {
    if engine::launched() {
        return;
    }
    let Some(m) = mpirun() else {
        eprintln!("mpirun is not installed: the panic scenario was not run");
        return;
    };
    // After the suite's jobs, not beside them: eleven jobs spinning on 2 cores slowed a
    // 2-rank job past its limit once.
    let _ = jobs();
    let short = ("TIERS_MPI_EXIT_TIMEOUT_MS", "2000");
    for (scenario, host_local, env) in [
        ("panic", false, &[][..]),
        ("panic", false, &[("TIERS_MPI_ONESIDED", "messages")][..]),
        ("panic", true, &[][..]),
        ("fail", false, &[("TIERS_MPI_ONESIDED", "messages")][..]),
        ("fail", true, &[][..]),
        (
            "early-exit",
            false,
            &[("TIERS_MPI_ONESIDED", "messages"), short][..],
        ),
        ("early-exit", true, &[short][..]),
        (
            "early-exit-0",
            false,
            &[("TIERS_MPI_ONESIDED", "messages"), short][..],
        ),
        ("early-exit-0", true, &[short][..]),
    ] {
        let env: &[(&str, &str)] = env;
        let mut child = scenario_command(&m, 2, host_local, scenario, env)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mpirun");
        let mut err = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut s);
            s
        });
        let t0 = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().expect("wait for mpirun") {
                break st;
            }
            if t0.elapsed() > Duration::from_secs(300) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{scenario} {env:?}: the job did not end in 300 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let stderr = reader.join().unwrap();
        assert!(!status.success(), "{scenario} {env:?}: the job succeeded");
        assert!(
            stderr.contains("rank 1 gives up on purpose"),
            "{scenario} {env:?}: the rank's message is missing: {stderr}"
        );
    }
}

/// Every rank exiting with its world open (a GASPI program without `gaspi_proc_term`), a
/// thread still polling the engine, ends its job cleanly: the exit's barrier meets, and no
/// call of tiers reaches MPI once the exit finalises it; nor once the program finalises MPI
/// itself with its world open.
#[test]
fn ranks_that_exit_with_their_worlds_open_end_cleanly() {
    if engine::launched() {
        return;
    }
    // After the suite's jobs, as above.
    let _ = jobs();
    for _ in 0..3 {
        two_ranks_play("open-exit", &[("TIERS_MPI_ONESIDED", "messages")]);
        two_ranks_play("finalize-first", &[("TIERS_MPI_ONESIDED", "messages")]);
    }
}

/// Two ranks, each its own host, play `scenario` with `env` under mpirun; every rank must
/// succeed. Says so and passes where mpirun is not installed (or inside a rank).
fn two_ranks_play(scenario: &str, env: &[(&str, &str)]) {
    if engine::launched() {
        return;
    }
    let Some(m) = mpirun() else {
        eprintln!("mpirun is not installed: scenario {scenario} was not run");
        return;
    };
    assert!(
        run_scenario(&m, 2, false, scenario, env),
        "{scenario}: a rank failed"
    );
}

/// A program built with the feature but started without a launcher is a world of one rank.
#[test]
fn without_a_launcher_one_rank() {
    if engine::launched() {
        return;
    }
    let w = tiers_cluster::init().expect("init");
    assert_eq!((w.rank(), w.size()), (0, 1));
}

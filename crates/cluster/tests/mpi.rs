//! The suite on the `mpi` engine (feature `mpi`). `cargo test --features mpi --test mpi`
//! starts this test binary under `mpirun -n 2` and `-n 4`, once multi-tier (ranks of this
//! host share memory) and once with every rank talking through MPI; every rank runs the same
//! suite as on the `local` and `shm` engines. Without `mpirun` on the PATH the launching test
//! says so and passes (the MPI library is needed to build this feature at all, the launcher
//! to run it: `.ci/mpi` installs both).
#![cfg(feature = "mpi")]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tiers_cluster::engine::mpi;

const SCENARIO: &str = "TIERS_TEST_SCENARIO";

/// The rank side: does nothing unless started by an MPI launcher.
#[test]
fn mpi_child() {
    if !mpi::launched() {
        return;
    }
    let w = tiers_cluster::init().expect("init");
    assert_eq!(w.engine_name(), "mpi");
    match std::env::var(SCENARIO).as_deref().unwrap_or("suite") {
        "suite" => {
            common::suite(&w);
            common::random(&w, 0xfeed);
        }
        "threads" => {
            // Four workers of every rank communicate at once: MPI_THREAD_MULTIPLE when asked
            // for (and provided), else tiers' own serialisation of its MPI calls.
            common::threads(&w, 4, 30);
        }
        other => panic!("unknown scenario {other}"),
    }
}

fn mpirun() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("mpirun"))
        .find(|p| p.is_file())
}

/// Runs `n` ranks of this binary's `mpi_child` under mpirun playing the suite; true when all
/// exited 0.
fn run(mpirun: &std::path::Path, n: usize, host_local: bool) -> bool {
    run_scenario(mpirun, n, host_local, "suite", &[])
}

/// Runs `n` ranks of `mpi_child` playing `scenario`, with `env` exported to every rank.
fn run_scenario(
    mpirun: &std::path::Path,
    n: usize,
    host_local: bool,
    scenario: &str,
    env: &[(&str, &str)],
) -> bool {
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
    let mut child = c.spawn().expect("start mpirun");
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

#[test]
fn suite_under_mpirun_2_and_4_ranks() {
    if mpi::launched() {
        return; // the rank side runs `mpi_child` only
    }
    let Some(m) = mpirun() else {
        eprintln!(
            "mpirun is not installed: the mpi engine's suite was not run (.ci/mpi installs it)"
        );
        return;
    };
    for n in [2, 4] {
        for host_local in [true, false] {
            assert!(
                run(&m, n, host_local),
                "{n} ranks, host_local {host_local}: a rank failed"
            );
        }
    }
}

/// Four workers per rank communicate at once, under `MPI_THREAD_MULTIPLE` (what
/// `TIERS_THREADS=4` asks for) and under tiers' serialisation of its MPI calls (funneled), at
/// 2 and 3 ranks, multi-tier and all-MPI.
#[test]
fn several_workers_per_rank_under_mpirun() {
    if mpi::launched() {
        return;
    }
    let Some(m) = mpirun() else {
        eprintln!("mpirun is not installed: the threaded mpi test was not run");
        return;
    };
    for level in ["multiple", "funneled"] {
        for (n, host_local) in [(2, true), (2, false), (3, false)] {
            assert!(
                run_scenario(
                    &m,
                    n,
                    host_local,
                    "threads",
                    &[("TIERS_THREADS", "4"), ("TIERS_MPI_THREADS", level)]
                ),
                "{n} ranks, host_local {host_local}, {level}: a rank failed"
            );
        }
    }
}

/// A program built with the feature but started without a launcher is a world of one rank.
#[test]
fn without_a_launcher_one_rank() {
    if mpi::launched() {
        return;
    }
    let w = tiers_cluster::init().expect("init");
    assert_eq!((w.rank(), w.size()), (0, 1));
}

//! `tiers run` and the cluster benchmarks, run as a user would run them.

use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

fn tiers(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tiers"))
        .args(args)
        .output()
        .expect("tiers runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn run_passes_the_environment_and_prefixes_output() {
    let (code, out, err) = tiers(&[
        "run",
        "-n",
        "3",
        "--prefix",
        "--",
        "sh",
        "-c",
        "echo rank $TIERS_RANK of $TIERS_SIZE engine $TIERS_ENGINE threads $TIERS_THREADS",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "[0] rank 0 of 3 engine shm threads 1",
            "[1] rank 1 of 3 engine shm threads 1",
            "[2] rank 2 of 3 engine shm threads 1",
        ]
    );
}

/// A rank that fails while the launcher still starts the others (reaped in the start loop)
/// ends the job too: the ranks started after it are ended after the grace. The race is
/// narrow, so the job runs several times; each must end well before the others' sleep.
#[test]
fn run_ends_the_rest_after_a_failure_seen_while_starting() {
    for _ in 0..8 {
        let t = Instant::now();
        let (code, _, err) = tiers(&[
            "run",
            "-n",
            "4",
            "--grace",
            "0.2",
            "--",
            "sh",
            "-c",
            "if [ $TIERS_RANK = 0 ]; then exit 3; fi; exec sleep 60",
        ]);
        assert_eq!(code, Some(3), "{err}");
        assert!(
            err.contains("rank 0 (pid ") && err.contains("exited with code 3"),
            "{err}"
        );
        assert!(err.contains("after a failure"), "{err}");
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "took {:?}",
            t.elapsed()
        );
    }
}

#[test]
fn run_reports_a_rank_killed_by_a_signal_and_ends_the_rest() {
    let t = Instant::now();
    let (code, _, err) = tiers(&[
        "run",
        "-n",
        "2",
        "--grace",
        "0.5",
        "--",
        "sh",
        "-c",
        "if [ $TIERS_RANK = 1 ]; then kill -9 $$; fi; sleep 60",
    ]);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("rank 1 (pid ") && err.contains("was killed by signal 9 (SIGKILL)"),
        "{err}"
    );
    assert!(err.contains("ending rank 0 after a failure"), "{err}");
    assert!(err.contains("rank 0: ended by the launcher"), "{err}");
    // Rank 0 was ended after the grace period, not after its 60 s sleep.
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
}

#[test]
fn run_reports_a_rank_exit_code() {
    let (code, _, err) = tiers(&[
        "run",
        "-n",
        "2",
        "--",
        "sh",
        "-c",
        "exit $((TIERS_RANK * 3))",
    ]);
    // The job's status is the failed rank's own, as mpirun reports it.
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("rank 1 (pid ") && err.contains("exited with code 3"),
        "{err}"
    );
}

#[test]
fn run_exits_with_the_status_of_the_rank_that_failed_first() {
    // Rank 2 fails at once with 7; ranks 0 and 1 fail later with other codes (as a program
    // whose peers see the failure would): the first failure is the job's status.
    let (code, _, err) = tiers(&[
        "run",
        "-n",
        "3",
        "--grace",
        "5",
        "--",
        "sh",
        "-c",
        "if [ $TIERS_RANK = 2 ]; then exit 7; fi; sleep 1; exit $((TIERS_RANK + 1))",
    ]);
    assert_eq!(code, Some(7), "{err}");
    assert!(err.contains("rank 2: exit code 7"), "{err}");
    // A rank killed by a signal: 128 + the signal, as a shell reports it.
    let (code, _, err) = tiers(&[
        "run",
        "-n",
        "2",
        "--",
        "sh",
        "-c",
        "if [ $TIERS_RANK = 1 ]; then kill -9 $$; fi; sleep 30",
    ]);
    assert_eq!(code, Some(128 + 9), "{err}");
    assert!(err.contains("rank 1: signal 9"), "{err}");
}

#[test]
fn cluster_benches_print_json_on_rank_0() {
    let exe = env!("CARGO_BIN_EXE_tiers");
    for (name, ops) in [
        ("latency", &["write", "write_notify", "read"][..]),
        ("ranks", &["barrier", "allreduce", "fetch_add"][..]),
    ] {
        let (code, out, err) = tiers(&[
            "run",
            "-n",
            "2",
            "--",
            exe,
            "bench",
            name,
            "--min-time",
            "0.01",
            "--json",
        ]);
        assert_eq!(code, Some(0), "{name}: {err}");
        let v: Value = serde_json::from_str(&out).expect("one JSON document from rank 0");
        assert_eq!(v["bench"], name);
        let res = v["results"].as_array().expect("results");
        for op in ops {
            assert!(
                res.iter()
                    .any(|r| r["op"] == *op && r["value"].as_f64().is_some_and(|x| x > 0.0)),
                "{name}: no {op} row in {out}"
            );
        }
        // The cache-line round trip between the two ranks, measured in the same run.
        let limit = res
            .iter()
            .find(|r| r["impl"] == "limit")
            .unwrap_or_else(|| panic!("{name}: no limit row in {out}"));
        assert!(limit["value"].as_f64().is_some_and(|x| x > 0.0));
        assert!(
            limit["measured"]
                .as_str()
                .is_some_and(|m| m.contains("round trip") && m.contains("rank 1")),
            "{limit}"
        );
        let bounded = if name == "latency" {
            "write_notify"
        } else {
            "barrier"
        };
        assert!(
            res.iter()
                .any(|r| r["op"] == bounded && r["vs_limit"].as_f64().is_some()),
            "{name}: {bounded} is not read against the limit: {out}"
        );
    }
}

#[test]
fn put_refuses_one_rank_and_reads_two_against_memcpy() {
    let exe = env!("CARGO_BIN_EXE_tiers");
    // One rank would copy a region onto itself, which memmove skips.
    let (code, out, err) = tiers(&["bench", "put", "--min-time", "0.01", "--json"]);
    assert_ne!(code, Some(0), "{out}");
    assert!(err.contains("put needs 2 ranks"), "{err}");
    let (code, out, err) = tiers(&[
        "run",
        "-n",
        "2",
        "--",
        exe,
        "bench",
        "put",
        "--min-time",
        "0.01",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(&out).expect("one JSON document from rank 0");
    let res = v["results"].as_array().expect("results");
    let tiers_rows: Vec<&Value> = res.iter().filter(|r| r["impl"] == "tiers-shm").collect();
    assert_eq!(tiers_rows.len(), 9, "{out}");
    for r in tiers_rows {
        assert!(r["vs_limit"].as_f64().is_some_and(|x| x > 0.0), "{r}");
        let l = res
            .iter()
            .find(|l| l["impl"] == "limit" && l["bytes"] == r["bytes"])
            .expect("a limit per size");
        assert!(l["measured"].as_str().unwrap().contains("memcpy"), "{l}");
    }
}

#[test]
fn kneighbor_runs_every_route_and_says_when_charm_is_absent() {
    let out = Command::new(env!("CARGO_BIN_EXE_tiers"))
        .args([
            "bench",
            "kneighbor",
            "--min-time",
            "0.01",
            "--json",
            "--quiet",
        ])
        .env_remove("CHARM_DIR")
        .output()
        .expect("tiers runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    let v: Value = serde_json::from_str(&stdout).expect("JSON");
    let res = v["results"].as_array().expect("results");
    for imp in [
        "tiers-smp",
        "tiers-smp-nobypass",
        "tiers-process",
        "tiers-smp-block",
    ] {
        for bytes in [16, 256, 4096, 16384] {
            assert!(
                res.iter().any(|r| r["impl"] == imp
                    && r["bytes"] == bytes
                    && r["value"].as_f64().is_some_and(|x| x > 0.0)),
                "no {imp} at {bytes} B in {stdout}"
            );
        }
    }
    // The limit, one cache-line round trip per step, at every size (with two processors).
    if std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2) {
        for bytes in [16, 256, 4096, 16384] {
            assert!(
                res.iter().any(|r| r["impl"] == "limit"
                    && r["bytes"] == bytes
                    && r["value"].as_f64().is_some_and(|x| x > 0.0)),
                "no limit at {bytes} B in {stdout}"
            );
        }
    }
    let notes = v["notes"].to_string();
    assert!(notes.contains("CHARM_DIR is not set"), "{notes}");
    assert!(notes.contains("no progress thread"), "{notes}");
}

#[test]
fn run_ends_a_job_that_outlives_its_time_limit() {
    let t = Instant::now();
    let (code, _, err) = tiers(&["run", "-n", "2", "--timeout", "300ms", "--", "sleep", "30"]);
    assert_eq!(code, Some(124), "{err}");
    assert!(err.contains("rank 0, rank 1 still running"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn run_refuses_jobs_this_host_cannot_hold() {
    for (args, want) in [
        (vec!["-n", "100000000"], "at most"),
        (vec!["-n", "0"], "at least 1"),
        (vec!["--threads", "0"], "--threads"),
        (
            vec!["-n", "2", "--threads", "9223372036854775808"],
            "at most",
        ),
        (
            vec![
                "--engine",
                "tcp",
                "-n",
                "1",
                "--hosts",
                "a:18446744073709551615,b:1",
            ],
            "ranks per host",
        ),
        (vec!["--grace", "1e20"], "from 0 to 86400"),
        (
            vec![
                "--engine", "tcp", "-n", "1", "--hosts", "a:1,b:1", "--port", "0",
            ],
            "--port 0 with --hosts",
        ),
        (
            vec!["--engine", "tcp", "-n", "1", "--hosts", "[::1]:1,b:1"],
            "IPv6 addresses are not supported",
        ),
        // Named whole, not as the host ":" of one rank.
        (
            vec!["--engine", "tcp", "-n", "1", "--hosts", "::1"],
            "\"::1\": IPv6 addresses are not supported",
        ),
        (vec!["--timeout", "soon"], "duration"),
        (vec!["--timeout", "0"], "--timeout must be longer than zero"),
    ] {
        let mut a = vec!["run"];
        a.extend(args.iter().copied());
        a.extend(["--", "true"]);
        let (code, _, err) = tiers(&a);
        assert_ne!(code, Some(0), "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn run_gives_stdin_to_rank_0_and_ends_when_its_output_closes() {
    use std::io::{Read, Write};
    use std::process::Stdio;
    let mut c = Command::new(env!("CARGO_BIN_EXE_tiers"))
        .args(["run", "-n", "2", "--prefix", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let mut out = String::new();
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(c.wait().unwrap().success());
    assert_eq!(out, "[0] hello\n");
    // A reader that goes away ends the job instead of leaving it writing forever.
    let t = Instant::now();
    let mut c = Command::new(env!("CARGO_BIN_EXE_tiers"))
        .args(["run", "--prefix", "--", "yes"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 8];
    c.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
    drop(c.stdout.take());
    let st = c.wait().unwrap();
    assert_eq!(st.code(), Some(141));
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn two_processes_cannot_join_as_one_rank() {
    let exe = env!("CARGO_BIN_EXE_tiers");
    let bench = format!("{exe} bench ranks --min-time 0.01 --quiet");
    // Rank 1 starts a second copy of itself; every process's failure counts.
    let script = format!(
        "if [ $TIERS_RANK = 1 ]; then {bench} & pid=$!; fi; {bench}; s=$?; \
         if [ -n \"$pid\" ]; then wait $pid || s=1; fi; exit $s"
    );
    let t = Instant::now();
    let (code, _, err) = tiers(&[
        "run",
        "-n",
        "2",
        "--timeout",
        "60s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("rank 1 is already taken by process")
            || err.contains("another process tried to join as this rank"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(50), "{:?}", t.elapsed());
}

/// A tcp job across two "hosts" (the loopback addresses 127.0.0.1 and 127.0.0.2), one
/// launcher each as on two machines: the ranks are numbered across the hosts, find each
/// other through the first launcher's rendezvous, and NPB IS verifies; a rank killed on the
/// second host is reported there with its job-wide rank while the first host's ranks see
/// `PeerFailed` instead of hanging.
#[test]
fn tcp_runs_one_launcher_per_host() {
    let port = 20000 + (std::process::id() % 20000) as u16;
    let launch = |host: usize, n: usize, cmd: &[&str]| {
        let list = "127.0.0.1:2,127.0.0.2:2";
        Command::new(env!("CARGO_BIN_EXE_tiers"))
            .args(["run", "--engine", "tcp", "--hosts", list, "--port"])
            .arg(port.to_string())
            .args([
                "--host",
                &host.to_string(),
                "-n",
                &n.to_string(),
                "--prefix",
            ])
            .arg("--")
            .args(cmd)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("tiers run starts")
    };
    let is = [env!("CARGO_BIN_EXE_tiers"), "is", "--class", "S"];
    let a = launch(0, 2, &is);
    let b = launch(1, 2, &is);
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).to_string();
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    assert!(
        text(&a).contains("[0]  VERIFICATION SUCCESSFUL"),
        "{}",
        text(&a)
    );
    assert!(
        text(&a).contains("Total number of processes:  4"),
        "{}",
        text(&a)
    );

    // Rank 2 (the second host's first) is killed mid-run: its launcher names it, and the
    // first host's ranks end with an error instead of waiting for it.
    let isa = [env!("CARGO_BIN_EXE_tiers"), "is", "--class", "A"];
    let t = Instant::now();
    let a = launch(0, 2, &isa);
    let b = launch(1, 2, &isa);
    let victim = loop {
        let child = std::fs::read_to_string(format!("/proc/{}/task/{}/children", b.id(), b.id()))
            .ok()
            .and_then(|s| {
                s.split_whitespace()
                    .next()
                    .and_then(|p| p.parse::<i32>().ok())
            });
        if let Some(pid) = child {
            break pid;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "rank 2 never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill has no memory effects; the pid is the rank this test's launcher started.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let err_b = String::from_utf8_lossy(&b.stderr);
    assert!(!b.status.success());
    assert!(
        err_b.contains(&format!("rank 2 (pid {victim}) was killed by signal 9")),
        "{err_b}"
    );
    assert!(
        !a.status.success(),
        "the first host's ranks cannot finish IS without rank 2"
    );
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
}

/// SIGINT and SIGQUIT to the launcher end the job as interrupted: exit code 128 + the signal,
/// a message that says so (not "after a failure"), and none of the job's shared-memory
/// objects left behind.
#[test]
fn run_interrupted_by_a_signal_says_so_and_leaves_nothing() {
    for (sig, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGQUIT, "SIGQUIT")] {
        let child = Command::new(env!("CARGO_BIN_EXE_tiers"))
            .args(["run", "-n", "2", "--", "sleep", "30"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("tiers run starts");
        let prefix = format!("tiers-{}x", child.id());
        let ours = || -> Vec<String> {
            std::fs::read_dir("/dev/shm")
                .map(|d| {
                    d.flatten()
                        .filter_map(|e| e.file_name().into_string().ok())
                        .filter(|n| n.starts_with(&prefix))
                        .collect()
                })
                .unwrap_or_default()
        };
        let t = Instant::now();
        while ours().is_empty() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the job never started"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: kill has no memory effects; the pid is the launcher this test started.
        unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        let out = child.wait_with_output().expect("the launcher ends");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(128 + sig), "{name}: {err}");
        assert!(err.contains(&format!("interrupted by {name}")), "{err}");
        assert!(!err.contains("after a failure"), "{err}");
        assert!(ours().is_empty(), "{name}: objects left: {:?}", ours());
    }
}

/// `--prefix` writes a line longer than its bound in pieces, each with the prefix, instead of
/// holding it whole; no byte is lost.
#[test]
fn prefix_bounds_a_long_line() {
    let (code, out, err) = tiers(&[
        "run",
        "-n",
        "1",
        "--prefix",
        "--",
        "sh",
        "-c",
        "head -c 200000 /dev/zero | tr '\\0' a; echo",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() >= 4, "{} lines", lines.len());
    assert!(lines.iter().all(|l| l.starts_with("[0] ")));
    assert!(lines.iter().all(|l| l.len() <= 64 * 1024 + 4));
    let total: usize = lines.iter().map(|l| l[4..].matches('a').count()).sum();
    assert_eq!(total, 200_000);
}

/// `tiers gaspi run` reads machine files as GPI-2's `gaspi_run` does (a host per line and
/// rank, the first `-n` of them), refuses hosts other than this one and files too short for
/// `-n`, and, started through a link named `gaspi_run` (what `tiers gaspi install` lays down),
/// is that launcher, with its `-N` and `-p` and its rule that rank 0's exit code decides.
#[test]
fn gaspi_run_reads_machine_files_and_answers_to_its_name() {
    let dir = std::env::temp_dir().join(format!("tiers-gaspi-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .to_string();
    let mf = dir.join("machines");
    std::fs::write(&mf, format!("# three ranks\n{host}\n\n{host}\nlocalhost\n")).expect("mf");
    let mfs = mf.to_str().unwrap();
    let ranks = |out: &str| {
        let mut r: Vec<String> = out.lines().map(String::from).collect();
        r.sort();
        r
    };
    let echo = ["sh", "-c", "echo rank $TIERS_RANK of $TIERS_SIZE"];
    let (code, out, err) = tiers(&[&["gaspi", "run", "-m", mfs][..], &echo].concat());
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(ranks(&out), ["rank 0 of 3", "rank 1 of 3", "rank 2 of 3"]);
    let (code, out, err) = tiers(&[&["gaspi", "run", "-n", "2", "-m", mfs][..], &echo].concat());
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(ranks(&out), ["rank 0 of 2", "rank 1 of 2"]);
    let (code, _, err) = tiers(&["gaspi", "run", "-n", "4", "-m", mfs, "true"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("3 host lines for -n 4"), "{err}");
    let far = dir.join("far");
    std::fs::write(&far, format!("{host}\nnode17.invalid\n")).expect("far");
    let (code, _, err) = tiers(&["gaspi", "run", "-m", far.to_str().unwrap(), "true"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("line 2: node17.invalid is not this host"),
        "{err}"
    );

    let link = dir.join("gaspi_run");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tiers"), &link).expect("link");
    let gaspi_run = |script: &str| {
        Command::new(&link)
            .args(["-N", "-p", "-n", "2", "sh", "-c", script])
            .output()
            .expect("gaspi_run")
    };
    // Rank 0's exit code decides, whatever rank 1's.
    let out = gaspi_run("exit $TIERS_RANK");
    assert_eq!(out.status.code(), Some(0), "{:?}", out);
    let out = gaspi_run("exit $((3 - 3 * TIERS_RANK))");
    assert_eq!(out.status.code(), Some(3), "{:?}", out);
    let _ = std::fs::remove_dir_all(&dir);
}

//! `tiers run` on what a user's environment, shell and input bring: variables of another
//! job, programs left running in the background, input to replicated ranks, replicated
//! ranks that write without newlines, a lost rank's status, a `PATH` with a file that is not
//! a program.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn tiers() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tiers"))
}

fn run(c: &mut Command) -> (Option<i32>, String, String) {
    let out = c.output().expect("tiers runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tiers-launcher-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn replica_variables_of_the_environment_do_not_reach_an_unreplicated_job() {
    let (code, out, err) = run(tiers()
        .args(["run", "-n", "2", "--", "sh", "-c"])
        .arg("echo \"${TIERS_REPLICAS:-none} ${TIERS_REPLICA:-none} $TIERS_SIZE\"")
        .env("TIERS_REPLICAS", "2")
        .env("TIERS_REPLICA", "1"));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "none none 2\nnone none 2\n");
}

#[test]
fn what_a_rank_leaves_in_the_background_ends_with_the_job() {
    let d = scratch("background");
    let pid_file = d.join("pid");
    for prefix in [false, true] {
        let t = Instant::now();
        let mut c = tiers();
        c.args(["run", "-n", "1"]);
        if prefix {
            c.arg("--prefix");
        }
        let (code, out, err) = run(c.args(["--", "sh", "-c"]).arg(format!(
            "sleep 30 & echo $! > {}; echo hi",
            pid_file.display()
        )));
        assert_eq!(code, Some(0), "{err}");
        assert!(out.ends_with("hi\n"), "{out}");
        assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            !running(pid),
            "the background sleep {pid} outlived the job (prefix {prefix})"
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Whether process `pid` runs (not gone, nor a zombie waiting to be reaped by whoever took it
/// over), looking again for up to 2 s.
fn running(pid: u32) -> bool {
    let t = Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the command's closing parenthesis.
        let state = stat.rsplit(')').next().unwrap_or("").trim_start();
        if stat.is_empty() || state.starts_with('Z') {
            return false;
        }
        if t.elapsed() > Duration::from_secs(2) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn every_replica_of_rank_0_reads_the_input() {
    // The input comes late: a replica without it would end at once, and the launcher would
    // end the one that has it as redundant after the grace period.
    let mut c = tiers()
        .args([
            "run",
            "-n",
            "1",
            "--replicas",
            "2",
            "--grace",
            "0.2",
            "--",
            "cat",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = c.stdin.take().unwrap();
    std::thread::sleep(Duration::from_millis(800));
    input.write_all(b"late line\n").unwrap();
    drop(input);
    let mut out = String::new();
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let st = c.wait().unwrap();
    assert!(st.success());
    assert_eq!(out, "late line\n");
}

#[test]
fn a_replicated_line_without_newlines_is_forwarded_in_pieces() {
    // 1 MiB without a newline: merged in pieces, not held whole, and nothing lost.
    let (code, out, err) = run(tiers()
        .args(["run", "-n", "1", "--replicas", "2", "--", "sh", "-c"])
        .arg("head -c 1048576 /dev/zero | tr '\\0' a; echo"));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.bytes().filter(|&b| b == b'a').count(), 1 << 20);
    assert!(out.lines().count() >= 16, "{} lines", out.lines().count());
}

#[test]
fn a_lost_rank_ends_the_job_with_its_status() {
    let (code, _, err) = run(tiers().args([
        "run",
        "-n",
        "2",
        "--replicas",
        "2",
        "--",
        "sh",
        "-c",
        "exit 5",
    ]));
    assert_eq!(code, Some(5), "{err}");
    assert!(err.contains("all 2 of its replicas died"), "{err}");
    let (code, _, err) = run(tiers().args(["run", "-n", "1", "--replicas", "65", "--", "true"]));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("1 to 64 replicas per rank"), "{err}");
}

#[test]
fn a_file_on_path_that_is_not_a_program_is_passed_over() {
    use std::os::unix::fs::PermissionsExt;
    let d = scratch("path");
    let fake = d.join("echo");
    std::fs::write(&fake, "not a program").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = format!(
        "{}:{}",
        d.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (code, out, err) = run(tiers()
        .args(["run", "-n", "1", "--", "echo", "hi"])
        .env("PATH", path));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "hi\n");
    let _ = std::fs::remove_dir_all(&d);
}

/// A port for a test's rendezvous, apart from other tests' (each adds its own offset).
fn port(offset: u16) -> u16 {
    21000 + (std::process::id() % 9000) as u16 * 4 + offset
}

#[test]
fn a_tcp_rank_that_ends_before_joining_fails_the_job_at_once() {
    let exe = env!("CARGO_BIN_EXE_tiers");
    let t = Instant::now();
    let (code, _, err) = run(tiers()
        .args(["run", "-n", "2", "--engine", "tcp", "--", "sh", "-c"])
        .arg(format!(
            "[ $TIERS_RANK = 1 ] && exit 0; exec {exe} bench ranks --min-time 0.01 --quiet"
        ))
        .env("TIERS_INIT_TIMEOUT_MS", "30000"));
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("rank 1 ended before it joined"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
}

#[test]
fn connections_that_say_nothing_do_not_hold_up_the_rendezvous() {
    let exe = env!("CARGO_BIN_EXE_tiers");
    let p = port(0);
    let t = Instant::now();
    let c = tiers()
        .args(["run", "--engine", "tcp", "--hosts", "127.0.0.1:2", "--port"])
        .arg(p.to_string())
        .args(["-n", "2", "--", "sh", "-c"])
        .arg(format!(
            "sleep 0.5; exec {exe} bench ranks --min-time 0.01 --quiet"
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Three connections that never say who they are, held open while the ranks join.
    let mut idle = Vec::new();
    while idle.len() < 3 && t.elapsed() < Duration::from_secs(10) {
        match std::net::TcpStream::connect(("127.0.0.1", p)) {
            Ok(s) => idle.push(s),
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    assert_eq!(idle.len(), 3);
    let out = c.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Each used to hold the rendezvous for 10 s.
    assert!(t.elapsed() < Duration::from_secs(9), "{:?}", t.elapsed());
}

#[test]
fn two_launchers_for_one_host_end_every_host_at_once() {
    let exe = env!("CARGO_BIN_EXE_tiers");
    let p = port(1).to_string();
    let hosts = "127.0.0.1:1,127.0.0.2:1";
    let t = Instant::now();
    let launcher = |host: &str, prog: String| {
        tiers()
            .args([
                "run", "--engine", "tcp", "--hosts", hosts, "--host", host, "--port", &p,
            ])
            .args(["-n", "1", "--", "sh", "-c", &prog])
            .env("TIERS_INIT_TIMEOUT_MS", "40000")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let bench = format!("{exe} bench ranks --min-time 0.01 --quiet");
    // Host 0's rank comes after the clash.
    let h0 = launcher("0", format!("sleep 1; exec {bench}"));
    std::thread::sleep(Duration::from_millis(100));
    let a = launcher("1", bench.clone());
    let b = launcher("1", bench);
    for c in [a, b, h0] {
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("two processes joined the tcp job as rank 1"),
            "{err}"
        );
    }
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
}

#[test]
fn timeouts_of_the_environment_are_read_alike_and_checked_before_the_start() {
    for (var, value) in [
        ("TIERS_INIT_TIMEOUT_MS", "abc"),
        ("TIERS_INIT_TIMEOUT_MS", "-5"),
        ("TIERS_INIT_TIMEOUT_MS", "0"),
        ("TIERS_REPLICA_TIMEOUT_MS", "1.5"),
    ] {
        let (code, out, err) = run(tiers()
            .args(["run", "-n", "2", "--", "echo", "ran"])
            .env(var, value));
        assert_ne!(code, Some(0), "{var}={value}");
        assert!(out.is_empty(), "{var}={value}: a rank ran");
        assert!(
            err.contains(&format!("{var}=\"{value}\": a positive whole number")),
            "{err}"
        );
    }
    // Spaces around a number are the number, for the launcher as for the ranks.
    let (code, out, err) = run(tiers()
        .args(["run", "-n", "1", "--replicas", "2", "--", "echo", "ran"])
        .env("TIERS_REPLICA_TIMEOUT_MS", " 500 "));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "ran\n");
    // Host options without the host list.
    let (code, _, err) = run(tiers().args(["run", "--host", "1", "-n", "1", "--", "true"]));
    assert_ne!(code, Some(0));
    assert!(err.contains("--hosts"), "{err}");
}

#[test]
fn a_stopped_replica_holds_no_input_back_from_the_others() {
    // Replica 1 of rank 0 stops before it reads: its pipe fills after 64 KiB, and replica 0
    // must still get all 1 MiB (the stopped one is then ended as redundant).
    let mut c = tiers()
        .args([
            "run",
            "-n",
            "1",
            "--replicas",
            "2",
            "--grace",
            "0.5",
            "--timeout",
            "60s",
        ])
        .args([
            "--",
            "sh",
            "-c",
            "if [ $TIERS_REPLICA = 1 ]; then kill -STOP $$; fi; wc -c",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = c.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&vec![b'z'; 1 << 20]);
    });
    let mut out = String::new();
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let st = c.wait().unwrap();
    writer.join().unwrap();
    assert!(st.success(), "{st:?}");
    assert_eq!(out.trim(), "1048576");
}

/// `TIERS_INIT_TIMEOUT_MS` bounds how long the commands wait for a rank that never joins
/// (they waited the default 60 s), and the error says what ran out.
#[test]
fn the_init_timeout_of_the_environment_bounds_the_wait_for_a_late_rank() {
    let me = env!("CARGO_BIN_EXE_tiers");
    let t0 = Instant::now();
    let (code, _, err) = run(tiers()
        .args(["run", "-n", "2", "--", "sh", "-c"])
        .arg(format!(
            "if [ \"$TIERS_RANK\" = 1 ]; then sleep 60; else exec {me} is --class S; fi"
        ))
        .env("TIERS_INIT_TIMEOUT_MS", "800"));
    let took = t0.elapsed();
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("not every rank of the job joined within 0.800 s"),
        "{err}"
    );
    assert!(took < Duration::from_secs(30), "{took:?}: {err}");
}

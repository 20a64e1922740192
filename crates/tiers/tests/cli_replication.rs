//! Replicated jobs (`tiers run -n N --replicas R`) under faults, as a user would see them:
//! NPB IS replicated gives the output of an unreplicated run; `kill -9` of a random replica at
//! a random moment, many times, leaves the job running with that output; a stopped replica is
//! skipped after the timeout; killing every replica of one rank ends the job naming the rank.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

const TIERS: &str = env!("CARGO_BIN_EXE_tiers");
/// The replicas' timeout (milliseconds).
const TIMEOUT_VAR: &str = "TIERS_REPLICA_TIMEOUT_MS";

/// The report without the lines that hold a time (which differ from run to run).
fn stable(out: &str) -> String {
    out.lines()
        .filter(|l| !l.contains("Time in seconds") && !l.contains("Mop/s"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn launch(replicas: usize, class: &str, env: &[(&str, &str)]) -> Child {
    launch_on("shm", replicas, class, env, &[])
}

/// [`launch`] on the engine `engine` (`shm` or `tcp`), with more arguments for `tiers is`.
fn launch_on(
    engine: &str,
    replicas: usize,
    class: &str,
    env: &[(&str, &str)],
    more: &[&str],
) -> Child {
    Command::new(TIERS)
        .args(["run", "--engine", engine])
        .args(["-n", "2", "--timeout", "120", "--replicas"])
        .arg(replicas.to_string())
        .args(["--", TIERS, "is", "--class", class])
        .args(more)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tiers run starts")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

/// The reference: the same IS class on 2 unreplicated ranks.
fn reference(class: &str) -> String {
    let o = launch(1, class, &[]).wait_with_output().expect("runs");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("VERIFICATION SUCCESSFUL"), "{out}");
    stable(&out)
}

/// The rank processes of launcher `launcher`: (pid, logical rank, replica), waiting until all
/// `n` have started.
fn replicas(launcher: u32, n: usize) -> Vec<(i32, usize, usize)> {
    let t = Instant::now();
    loop {
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // The parent's pid is the second field after the command's closing parenthesis.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1))
                .and_then(|s| s.parse::<u32>().ok());
            if ppid != Some(launcher) {
                continue;
            }
            let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
                continue;
            };
            let var = |k: &str| {
                env.split(|&b| b == 0).find_map(|kv| {
                    std::str::from_utf8(kv)
                        .ok()?
                        .strip_prefix(k)?
                        .strip_prefix('=')?
                        .parse::<usize>()
                        .ok()
                })
            };
            if let (Some(rank), Some(reps), Some(k)) = (
                var("TIERS_RANK"),
                var("TIERS_REPLICAS"),
                var("TIERS_REPLICA"),
            ) {
                found.push((pid, rank / reps, k));
            }
        }
        if found.len() == n || t.elapsed() > Duration::from_secs(20) {
            found.sort();
            return found;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A small generator for the test's choices, seeded from the clock (the seed is printed).
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let s = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        eprintln!("seed {s}");
        Rng(s)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn signal(pid: i32, sig: i32) -> bool {
    // SAFETY: kill has no memory effects; the pid is a child of the launcher this test started.
    unsafe { libc::kill(pid, sig) == 0 }
}

#[test]
fn replicated_is_prints_the_unreplicated_report_once() {
    let want = reference("S");
    let o = launch(2, "S", &[]).wait_with_output().expect("runs");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert_eq!(stable(&out), want, "{err}");
    assert_eq!(out.matches("VERIFICATION SUCCESSFUL").count(), 1, "{out}");
    assert!(out.contains("Total number of processes:  2"), "{out}");
}

#[test]
fn random_single_replica_kills_leave_the_output_unchanged() {
    random_kills("shm", 20);
}

/// The same over sockets: a killed replica's connections end, its peers mark it dead and
/// pull from its sibling.
#[test]
fn random_single_replica_kills_on_the_tcp_engine() {
    random_kills("tcp", 10);
}

/// `runs` kills (`TIERS_KILLS=N` asks for N instead, for a longer campaign).
fn random_kills(engine: &str, runs: usize) {
    let runs = std::env::var("TIERS_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(runs);
    let want = reference("W");
    // Every run also writes the report to a file (`--report`): it must come out whole and
    // equal to the output, written by a replica of rank 0 that lived to commit it.
    let dir = std::env::temp_dir().join(format!("tiers-kills-{engine}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory for the reports");
    let file = dir.join("report.txt");
    let file_arg = file.to_string_lossy().to_string();
    let launch = |r, c, e| launch_on(engine, r, c, e, &["--report", &file_arg]);
    let mut rng = Rng::new();
    // How long a replicated run takes here, without a kill: the kills land anywhere in its
    // first three quarters (counted from when all four processes are seen), from the
    // processes' start (the world's join, the segment's registration) on. The faster of two
    // runs: the first after a build may pay for loading the binary, and kills timed on it
    // landed after the end of the warm runs (4 of 10 hits once).
    let mut span = u64::MAX;
    for _ in 0..2 {
        let t0 = Instant::now();
        let o = launch(2, "W", &[]).wait_with_output().expect("runs");
        assert!(o.status.success(), "{}", text(&o).1);
        span = span.min(t0.elapsed().as_millis() as u64 * 3 / 4);
    }
    let span = span.max(20);
    let mut hits = 0;
    for i in 0..runs {
        let child = launch(2, "W", &[]);
        let procs = replicas(child.id(), 4);
        assert_eq!(procs.len(), 4, "run {i}: {procs:?}");
        let (pid, rank, k) = procs[rng.below(4) as usize];
        let at = rng.below(span);
        std::thread::sleep(Duration::from_millis(at));
        let killed = signal(pid, libc::SIGKILL);
        let o = child.wait_with_output().expect("runs");
        let (out, err) = text(&o);
        assert!(
            o.status.success(),
            "run {i}: killing replica {k} of rank {rank}: {out}{err}"
        );
        assert_eq!(
            stable(&out),
            want,
            "run {i}: killing replica {k} of rank {rank}: {err}"
        );
        let written = std::fs::read_to_string(&file).expect("the report file");
        assert_eq!(stable(&written), want, "run {i}: the report file");
        let _ = std::fs::remove_file(&file);
        if killed
            && err.contains(&format!(
                "replica {k} of rank {rank} (pid {pid}) was killed"
            ))
        {
            hits += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    // Most kills must land while the job runs, or the test proves nothing.
    assert!(
        hits >= runs / 2,
        "only {hits} of {runs} kills hit a running replica"
    );
}

/// Clock ticks of processor time `pid` has used, and whether it is still running (not a
/// zombie).
fn cpu_ticks(pid: i32) -> Option<(u64, bool)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some((ticks, f.first() != Some(&"Z")))
}

#[test]
fn a_stopped_replica_is_skipped() {
    stopped("shm");
}

/// The same over sockets: the stopped replica's connections stay open, so only the
/// replicated receiver's timeout finds it out.
#[test]
fn a_stopped_replica_is_skipped_on_the_tcp_engine() {
    stopped("tcp");
}

fn stopped(engine: &str) {
    let want = reference("A");
    // Under a loaded machine (the whole test suite at once on 2 cores) the chosen replica can
    // fall a replica timeout behind before it has worked the 300 ms of CPU the test waits for,
    // and be dropped by its peers: then nothing was stopped, the job must still print the
    // reference, and the test tries again (at most 3 times).
    for attempt in 0..3 {
        let t = Instant::now();
        let child = launch_on(engine, 2, "A", &[("TIERS_REPLICA_TIMEOUT_MS", "300")], &[]);
        let procs = replicas(child.id(), 4);
        assert_eq!(procs.len(), 4, "{procs:?}");
        // Replica 0 of rank 1: the one rank 0 asks first. Stopped once it has worked a little,
        // past the setup (which every process of the world joins).
        let (pid, _, _) = procs[2];
        let worked = loop {
            match cpu_ticks(pid) {
                Some((ticks, true)) if ticks >= 30 => break true,
                Some((_, true)) => std::thread::sleep(Duration::from_millis(5)),
                // Ended (or a zombie) before it was stopped.
                _ => break false,
            }
        };
        let stopped = worked && signal(pid, libc::SIGSTOP);
        let o = child.wait_with_output().expect("runs");
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}{err}");
        assert_eq!(stable(&out), want, "{err}");
        // Not a hang ended by the launcher's --timeout.
        assert!(t.elapsed() < Duration::from_secs(100), "{:?}", t.elapsed());
        if stopped {
            return;
        }
        eprintln!("attempt {attempt}: replica 0 of rank 1 ended before it was stopped; again");
    }
    panic!("replica 0 of rank 1 ended before it could be stopped, 3 times");
}

#[test]
fn killing_every_replica_of_a_rank_ends_the_job_naming_it() {
    let child = Command::new(TIERS)
        .args(["run", "-n", "3", "--replicas", "2", "--timeout", "60", "--"])
        .args(["sh", "-c", "sleep 30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tiers run starts");
    let procs = replicas(child.id(), 6);
    assert_eq!(procs.len(), 6, "{procs:?}");
    let t = Instant::now();
    let first = procs
        .iter()
        .find(|p| p.1 == 1 && p.2 == 0)
        .expect("replica 0 of rank 1");
    assert!(signal(first.0, libc::SIGKILL));
    // One replica gone: the job goes on.
    std::thread::sleep(Duration::from_millis(500));
    let second = procs
        .iter()
        .find(|p| p.1 == 1 && p.2 == 1)
        .expect("replica 1 of rank 1");
    assert!(
        signal(second.0, libc::SIGKILL),
        "the job ended after one replica died"
    );
    let o = child.wait_with_output().expect("runs");
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}{err}");
    assert!(
        err.contains("rank 1 lost: all 2 of its replicas failed"),
        "{err}"
    );
    assert!(err.contains("rank 1: all 2 of its replicas died"), "{err}");
    assert!(
        !err.contains("rank 0 lost") && !err.contains("rank 2 lost"),
        "{err}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(25),
        "not ended early: {:?}",
        t.elapsed()
    );
}

/// Host `k`'s launcher of IS class W on 2 ranks × 2 replicas over tcp, spread over the
/// hosts of `list`, the rendezvous on `port`.
fn spread_launcher(list: &str, port: u16, k: usize) -> Child {
    spread_launcher_of(list, port, k, &[TIERS, "is", "--class", "W"], &[])
}

/// Waits for every launcher of `hs`, in order.
fn wait_all(hs: Vec<Child>) -> Vec<Output> {
    hs.into_iter()
        .map(|c| c.wait_with_output().expect("the launcher runs"))
        .collect()
}

/// [`spread_launcher`] of the program `prog`.
fn spread_launcher_of(
    list: &str,
    port: u16,
    k: usize,
    prog: &[&str],
    envs: &[(&str, &str)],
) -> Child {
    Command::new(TIERS)
        .envs(envs.iter().copied())
        .args(["run", "--engine", "tcp", "--hosts", list])
        .args(["--port", &port.to_string(), "--host", &k.to_string()])
        .args(["-n", "2", "--replicas", "2", "--timeout", "120", "--"])
        .args(prog)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tiers run starts")
}

/// Replicas spread over two "hosts" (the loopback addresses 127.0.0.1 and 127.0.0.2, one tcp
/// launcher each, as on two machines): host k runs replica k of every rank. Killing a host's
/// replica of rank 0 (host 0's is also the tcp world's collective root) in the middle of the
/// run leaves the other host's output that of an unreplicated run; the host that lost it says
/// so and fails.
#[test]
fn replicas_spread_over_two_hosts_survive_a_kill_on_either() {
    let want = reference("W");
    let port = 30000 + (std::process::id() % 20000) as u16;
    let host = |k: usize| spread_launcher("127.0.0.1:2,127.0.0.2:2", port, k);
    // Unkilled: both hosts print the report.
    let t0 = Instant::now();
    let (a, b) = (host(0), host(1));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let span = t0.elapsed().as_millis().max(20) as u64;
    for o in [&a, &b] {
        let (out, err) = text(o);
        assert!(o.status.success(), "{out}{err}");
        assert_eq!(stable(&out), want, "{err}");
    }
    for victim_host in [1, 0, 1, 0] {
        let hs = [host(0), host(1)];
        let procs = replicas(hs[victim_host].id(), 2);
        assert_eq!(procs.len(), 2, "{procs:?}");
        // This host's replica of rank 0.
        let (pid, rank, k) = procs[0];
        assert_eq!((rank, k), (0, victim_host));
        std::thread::sleep(Duration::from_millis(span * 3 / 10));
        signal(pid, libc::SIGKILL);
        let [a, b] = hs;
        let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
        let (survivor, victim) = (&outs[1 - victim_host], &outs[victim_host]);
        let (out, err) = text(survivor);
        assert!(
            survivor.status.success(),
            "host {victim_host} killed: {out}{err}"
        );
        assert_eq!(stable(&out), want, "host {victim_host} killed: {err}");
        let (vout, verr) = text(victim);
        if !victim.status.success() {
            assert!(
                verr.contains(&format!(
                    "replica {victim_host} of rank 0 (pid {pid}) was killed"
                )),
                "{vout}{verr}"
            );
        }
    }
}

#[test]
fn replicas_spread_over_more_hosts_than_replicas_survive_a_kill() {
    // 2 ranks × 2 replicas on 4 hosts of one process: in list order replica 0 of ranks 0 and
    // 1, then replica 1 of each, so rank 0 (which prints the report) runs on hosts 0 and 2.
    let want = reference("W");
    let port = 30000 + ((std::process::id() + 7919) % 20000) as u16;
    let list = "127.0.0.1:1,127.0.0.2:1,127.0.0.3:1,127.0.0.4:1";
    let host = |k: usize| spread_launcher(list, port, k);
    let t0 = Instant::now();
    let hs: Vec<Child> = (0..4).map(host).collect();
    let placed: Vec<(usize, usize)> = hs
        .iter()
        .map(|c| {
            let p = replicas(c.id(), 1);
            assert_eq!(p.len(), 1, "{p:?}");
            (p[0].1, p[0].2)
        })
        .collect();
    assert_eq!(placed, vec![(0, 0), (1, 0), (0, 1), (1, 1)]);
    let outs = wait_all(hs);
    let span = t0.elapsed().as_millis().max(20) as u64;
    for (k, o) in outs.iter().enumerate() {
        let (out, err) = text(o);
        assert!(o.status.success(), "host {k}: {out}{err}");
        // Rank 0's replicas print the report; rank 1's print nothing.
        let expect = if k % 2 == 0 {
            want.clone()
        } else {
            String::new()
        };
        assert_eq!(stable(&out), expect, "host {k}: {err}");
    }
    // Kill rank 0's replica 0 (host 0) and, in another run, rank 1's replica 1 (host 3).
    for victim in [0, 3] {
        let hs: Vec<Child> = (0..4).map(host).collect();
        let procs = replicas(hs[victim].id(), 1);
        assert_eq!(procs.len(), 1, "{procs:?}");
        let (pid, rank, k) = procs[0];
        std::thread::sleep(Duration::from_millis(span * 3 / 10));
        signal(pid, libc::SIGKILL);
        let outs = wait_all(hs);
        // Rank 0's surviving replica prints the report.
        let printer = if victim == 0 { 2 } else { 0 };
        let (out, err) = text(&outs[printer]);
        assert!(
            outs[printer].status.success(),
            "host {victim} killed: {out}{err}"
        );
        assert_eq!(stable(&out), want, "host {victim} killed: {err}");
        for (h, o) in outs.iter().enumerate() {
            let (out, err) = text(o);
            if h == victim {
                if !o.status.success() {
                    assert!(
                        err.contains(&format!(
                            "replica {k} of rank {rank} (pid {pid}) was killed"
                        )),
                        "{out}{err}"
                    );
                }
            } else {
                assert!(
                    o.status.success(),
                    "host {victim} killed, host {h}: {out}{err}"
                );
            }
        }
    }
}

/// Spread over 4 hosts of one process, a replica that dies before it joins the job, on a
/// host that does not serve the rendezvous: its launcher reports it, so the job starts
/// without it at once (not after the 10 replica timeouts a lost host would cost), and rank
/// 0's replicas print the unreplicated report. The replica timeout is 4 s here, so that the
/// lost host's cost (40 s) stands well apart from a slow start on a loaded machine.
#[test]
fn a_replica_dead_before_joining_on_another_host_does_not_hold_the_job() {
    let want = reference("W");
    let port = 30000 + ((std::process::id() + 104_729) % 20000) as u16;
    let list = "127.0.0.1:1,127.0.0.2:1,127.0.0.3:1,127.0.0.4:1";
    // (world rank, its host): in list order the hosts run replica 0 of ranks 0 and 1, then
    // replica 1 of each, so world rank 2l + k is on host 2k + l.
    for (victim, vhost) in [(3, 3), (1, 2)] {
        let script = format!(
            "if [ \"$TIERS_RANK\" = {victim} ]; then kill -9 $$; fi; exec {TIERS} is --class W"
        );
        let t0 = Instant::now();
        let hs: Vec<Child> = (0..4)
            .map(|k| {
                let prog = ["sh", "-c", script.as_str()];
                spread_launcher_of(list, port, k, &prog, &[(TIMEOUT_VAR, "4000")])
            })
            .collect();
        let outs = wait_all(hs);
        let took = t0.elapsed();
        for (h, o) in outs.iter().enumerate() {
            let (out, err) = text(o);
            if h == vhost {
                assert!(err.contains("was killed by signal 9"), "{out}{err}");
                // Named in the whole job, not by its index on the host.
                let name = format!("job failed (replica {} of rank {}", victim % 2, victim / 2);
                assert!(err.contains(&name), "{out}{err}");
                continue;
            }
            assert!(o.status.success(), "victim {victim}, host {h}: {out}{err}");
            let expect = if h % 2 == 0 {
                want.clone()
            } else {
                String::new()
            };
            assert_eq!(stable(&out), expect, "victim {victim}, host {h}: {err}");
        }
        assert!(
            took < Duration::from_secs(25),
            "the job waited for the dead replica: {took:?}"
        );
    }
}

/// `tiers bench replication` on the tcp engine: IS and the alltoallv loop, each with R = 1,
/// R = 2 and one replica killed, and a limit row each, and IS as two unreplicated jobs at
/// once; an unknown engine is refused.
#[test]
fn bench_replication_reports_is_and_the_alltoallv_loop() {
    let o = Command::new(TIERS)
        .args([
            "bench",
            "replication",
            "S",
            "--min-time",
            "0.01",
            "--json",
            "--quiet",
        ])
        .args(["--", "2", "tcp"])
        .output()
        .expect("runs");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("a JSON report");
    let rows = doc["results"].as_array().expect("results");
    for class in ["S", "alltoallv"] {
        for imp in [
            "tiers R=1",
            "tiers R=2",
            "tiers R=2, one killed",
            "tiers R=2, one stopped",
            "limit",
        ] {
            let row = rows
                .iter()
                .find(|r| r["class"] == class && r["impl"] == imp)
                .unwrap_or_else(|| panic!("no {class} {imp} row in {out}"));
            assert!(row["value"].as_f64().is_some_and(|v| v > 0.0), "{row}");
            assert_eq!(row["engine"], "tcp");
        }
    }
    // IS also runs as two unreplicated jobs at once: the machine's share, without replication.
    let two = rows
        .iter()
        .find(|r| r["class"] == "S" && r["impl"] == "tiers R=1, two jobs at once")
        .unwrap_or_else(|| panic!("no two-jobs row in {out}"));
    assert!(two["value"].as_f64().is_some_and(|v| v > 0.0), "{two}");
    assert!(!rows
        .iter()
        .any(|r| r["class"] == "alltoallv" && r["impl"] == "tiers R=1, two jobs at once"));
    let o = Command::new(TIERS)
        .args(["bench", "replication", "S", "--", "2", "mpi"])
        .output()
        .expect("runs");
    assert!(!o.status.success());
    assert!(text(&o).1.contains("shm or tcp"), "{}", text(&o).1);
}

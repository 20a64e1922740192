//! `tiers bench hybrid APP`: one application run as every hybrid pattern t×m×n that fits
//! (t threads in each of m ranks per host on n hosts), the comparison of \[Qiu2012\]: pure
//! threading, pure processes, the mixes, and the same across hosts. Each pattern on one host
//! runs the command under `tiers run -n m --threads t` (shm engine); each pattern across hosts
//! under `mpirun` (the mpi engine, multi-tier: shared memory within a host, MPI between).
//! Rounds alternate the patterns; every pattern's output is compared byte for byte with
//! 1×1×1's (the applications promise the same answer whatever the pattern); the runs go
//! through the overhead model (speedup, efficiency, overhead f against 1×1×1 of the same size)
//! and, with `--out FILE`, into a runs file for `tiers model`.
//!
//! Options after `--`:
//! - `--sizes N,N,…` (sequences or points; default 1500; `--size N` is one size), `--rounds R`
//!   (default 3), `--out RUNS.json`;
//! - `--hosts H1,H2,…`: also the patterns with n = 2…(number of hosts) across those hosts,
//!   with t·m ≤ `--host-cores K` (the cores each host gives the job; default this machine's
//!   cores; hosts emulated on one machine share its cores, so say how many each may use);
//!   `--mpirun CMD` (default `mpirun`) and `--mpirun-args "…"` (split at spaces, before the
//!   host list) start them; tiers must be built with the `mpi` feature;
//! - `--dir DIR`: where the data, the outputs and the runs go, in a fresh folder of their own
//!   removed afterwards (default: the temporary directory); across hosts it must be a path
//!   every host sees.
//!
//! The app is the word after `hybrid`: distances, mds, cluster, render.

use super::{Ctx, Outcome};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use tiers_apps::model::{self, Run};
use tiers_bench::{median, progress, Report};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn arg<'a>(args: &'a [String], key: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == key)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// Runs `cmd ARGS`; its standard error on success.
fn run_cmd(cmd: &Path, args: &[String]) -> Res<String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{}: {e}", cmd.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} {}: {}",
            cmd.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The launcher's `--peak-rss` line, in MiB.
fn peak_rss_mib(stderr: &str) -> Option<f64> {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("[tiers run] peak RSS of the largest rank: "))
        .and_then(|r| r.strip_suffix(" MiB"))
        .and_then(|v| v.trim().parse().ok())
}

/// A hybrid pattern: t threads in each of m ranks per host, on n hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Pattern {
    t: usize,
    m: usize,
    n: usize,
}

impl Pattern {
    fn name(&self) -> String {
        format!("{}x{}x{}", self.t, self.m, self.n)
    }
    fn matches(&self, r: &Run) -> bool {
        (r.threads, r.processes, r.nodes) == (self.t, self.m, self.n)
    }
}

/// The patterns: on one host t×m×1 with t·m ≤ `cores`; across n = 2…`hosts` hosts, t×m×n with
/// t·m ≤ `host_cores`; t and m powers of two.
fn patterns(cores: usize, hosts: usize, host_cores: usize) -> Vec<Pattern> {
    let pow2 = |limit: usize| -> Vec<usize> {
        (0..)
            .map(|k| 1usize << k)
            .take_while(|&v| v <= limit)
            .collect()
    };
    let mut v = Vec::new();
    for n in 1..=hosts.max(1) {
        let limit = if n == 1 { cores } else { host_cores };
        for &m in &pow2(limit) {
            for &t in &pow2(limit) {
                if t * m <= limit {
                    v.push(Pattern { t, m, n });
                }
            }
        }
    }
    v
}

/// How the multi-host patterns are started.
struct Hosts {
    names: Vec<String>,
    mpirun: PathBuf,
    mpirun_args: Vec<String>,
}

/// The options.
struct Plan {
    app: String,
    sizes: Vec<usize>,
    rounds: usize,
    cores: usize,
    host_cores: usize,
    hosts: Option<Hosts>,
}

/// The most rounds of a run: each starts every pattern's job, seconds apiece, so more is a
/// typo rather than a plan.
const MAX_ROUNDS: usize = 10_000;

fn parse(args: &[String]) -> Res<Plan> {
    let app = args
        .first()
        .map(String::as_str)
        .unwrap_or("mds")
        .to_string();
    if !matches!(app.as_str(), "distances" | "mds" | "cluster" | "render") {
        return Err(
            format!("hybrid: unknown app {app:?} (distances, mds, cluster, render)").into(),
        );
    }
    let sizes_text = arg(args, "--sizes")
        .or(arg(args, "--size"))
        .unwrap_or("1500");
    let mut sizes = Vec::new();
    for s in sizes_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let v: usize = s
            .parse()
            .map_err(|e| format!("hybrid: --sizes: {s:?} is not a size: {e}"))?;
        if v < 2 {
            return Err(format!("hybrid: --sizes: {v} is below 2").into());
        }
        if !sizes.contains(&v) {
            sizes.push(v);
        }
    }
    if sizes.is_empty() {
        return Err(format!("hybrid: --sizes {sizes_text:?} names no size").into());
    }
    let rounds: usize = match arg(args, "--rounds") {
        Some(r) => r
            .parse()
            .map_err(|e| format!("hybrid: --rounds {r:?}: {e}"))?,
        None => 3,
    };
    if !(1..=MAX_ROUNDS).contains(&rounds) {
        return Err(format!("hybrid: --rounds {rounds}: from 1 to {MAX_ROUNDS}").into());
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let host_cores: usize = match arg(args, "--host-cores") {
        Some(r) => r
            .parse()
            .map_err(|e| format!("hybrid: --host-cores {r:?}: {e}"))?,
        None => cores,
    };
    if host_cores == 0 {
        return Err("hybrid: --host-cores must be at least 1".into());
    }
    let hosts = match arg(args, "--hosts") {
        None => None,
        Some(list) => {
            let names: Vec<String> = list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            if names.len() < 2 {
                return Err(format!("hybrid: --hosts {list:?}: name at least two hosts").into());
            }
            if let Some(bad) = names
                .iter()
                .find(|h| h.contains(':') || h.contains(char::is_whitespace))
            {
                return Err(format!(
                    "hybrid: --hosts: {bad:?} is not a host name (the slots per host come from the pattern)"
                )
                .into());
            }
            if !cfg!(feature = "mpi") {
                return Err("hybrid: --hosts starts ranks on other hosts with mpirun: build tiers with `--features mpi`".into());
            }
            Some(Hosts {
                names,
                mpirun: PathBuf::from(arg(args, "--mpirun").unwrap_or("mpirun")),
                mpirun_args: arg(args, "--mpirun-args")
                    .unwrap_or("")
                    .split_whitespace()
                    .map(String::from)
                    .collect(),
            })
        }
    };
    Ok(Plan {
        app,
        sizes,
        rounds,
        cores,
        host_cores,
        hosts,
    })
}

/// Runs the benchmark.
pub(super) fn run(ctx: &Ctx<'_>) -> Outcome {
    let plan = parse(ctx.args)?;
    let exe = std::env::current_exe()?;
    // A fresh folder of its own (inside `--dir` when given), so that no file of the user's
    // there is overwritten or removed; removed afterwards.
    let base = arg(ctx.args, "--dir").map_or_else(std::env::temp_dir, PathBuf::from);
    let dir = base.join(format!("tiers-hybrid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("hybrid: {}: {e}", dir.display()))?;
    let result = measure(ctx, &plan, &exe, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let (report, runs) = result?;
    if let Some(out) = arg(ctx.args, "--out") {
        crate::runs::write(Path::new(out), runs)?;
    }
    Ok(Some(report))
}

/// The application's command line for one pattern (after the executable).
fn app_args(app: &str, input: &str, output: &str, t: usize, runs: &str) -> Vec<String> {
    let mut a: Vec<String> = match app {
        "distances" => vec!["distances", input, "--metric", "kmer", "--out", output],
        "mds" => vec![
            "mds",
            input,
            "--out",
            output,
            "--max-iter",
            "20",
            "--threshold",
            "0",
        ],
        "cluster" => vec!["cluster", input, "--out", output, "--max-clusters", "4"],
        _ => vec!["render", "--out", output],
    }
    .into_iter()
    .map(String::from)
    .collect();
    a.extend([
        "--threads".into(),
        t.to_string(),
        "--runs".into(),
        runs.into(),
    ]);
    if app != "render" {
        a.push("--quiet".into());
    }
    a
}

fn measure(ctx: &Ctx<'_>, plan: &Plan, exe: &Path, dir: &Path) -> Res<(Report, Vec<Run>)> {
    let app = plan.app.as_str();
    let s = |p: PathBuf| p.display().to_string();
    let nhosts = plan.hosts.as_ref().map_or(1, |h| h.names.len());
    let pats = patterns(plan.cores, nhosts, plan.host_cores);
    let ext = match app {
        "distances" => "bin",
        "mds" => "csv",
        "cluster" => "txt",
        _ => "png",
    };
    let runs_file = dir.join("runs.json");
    let _ = std::fs::remove_file(&runs_file);
    let runs = s(runs_file.clone());
    // The peak RSS of the largest rank, per (size, pattern) on one host (the most over rounds).
    let mut rss: std::collections::HashMap<(usize, Pattern), f64> = Default::default();
    // The image's size does not follow --sizes: render runs once.
    let sizes = if app == "render" {
        &plan.sizes[..1]
    } else {
        &plan.sizes[..]
    };
    for &size in sizes {
        let fa = s(dir.join(format!("s{size}.fa")));
        let d = s(dir.join(format!("d{size}.bin")));
        if app != "render" {
            progress(&ctx.opts, format!("hybrid {app}: data, {size} sequences"));
            run_cmd(
                exe,
                &["data", "alu", "--n", &size.to_string(), "--out", &fa].map(String::from),
            )?;
            if app != "distances" {
                run_cmd(
                    exe,
                    &["distances", &fa, "--metric", "kmer", "--out", &d, "--quiet"]
                        .map(String::from),
                )?;
            }
        }
        let input = if app == "distances" { &fa } else { &d };
        for round in 0..plan.rounds {
            let mut reference: Option<Vec<u8>> = None;
            for pat in &pats {
                let Pattern { t, m, n } = *pat;
                progress(
                    &ctx.opts,
                    format!(
                        "hybrid {app}: size {size}, round {}/{}, {}",
                        round + 1,
                        plan.rounds,
                        pat.name()
                    ),
                );
                let output = s(dir.join(format!("{app}-{size}-{}.{ext}", pat.name())));
                let _ = std::fs::remove_file(&output);
                let tail = app_args(app, input, &output, t, &runs);
                let err = if n == 1 {
                    let mut a: Vec<String> = [
                        "run",
                        "-n",
                        &m.to_string(),
                        "--threads",
                        &t.to_string(),
                        "--peak-rss",
                        "--",
                    ]
                    .map(String::from)
                    .to_vec();
                    a.push(exe.display().to_string());
                    a.extend(tail);
                    run_cmd(exe, &a)?
                } else {
                    let h = plan.hosts.as_ref().ok_or("hybrid: no hosts")?;
                    let mut a = h.mpirun_args.clone();
                    let slots: Vec<String> =
                        h.names[..n].iter().map(|x| format!("{x}:{m}")).collect();
                    a.extend([
                        "--host".into(),
                        slots.join(","),
                        "-n".into(),
                        (m * n).to_string(),
                        "--map-by".into(),
                        "slot".into(),
                        exe.display().to_string(),
                    ]);
                    a.extend(tail);
                    run_cmd(&h.mpirun, &a)?
                };
                if let Some(mib) = peak_rss_mib(&err) {
                    let e = rss.entry((size, *pat)).or_insert(0.0);
                    *e = e.max(mib);
                }
                // Results consumed: every pattern's bytes are 1x1x1's.
                let bytes = std::fs::read(&output).map_err(|e| {
                    format!("hybrid: {app} as {} wrote no {output}: {e}", pat.name())
                })?;
                match &reference {
                    None => reference = Some(bytes),
                    Some(r) if *r != bytes => {
                        return Err(format!(
                            "hybrid: {app} at size {size} as {} wrote other bytes than as {}",
                            pat.name(),
                            pats[0].name()
                        )
                        .into())
                    }
                    Some(_) => {}
                }
            }
        }
    }
    let all = crate::runs::read(&runs_file)?.runs;
    // The median of the rounds, per (size, pattern).
    let mut med = Vec::new();
    for &size in sizes {
        for pat in &pats {
            let of: Vec<&Run> = all
                .iter()
                .filter(|r| pat.matches(r) && (app == "render" || r.size == size))
                .collect();
            let secs: Vec<f64> = of.iter().map(|r| r.seconds).collect();
            match of.first() {
                Some(first) => med.push(Run {
                    seconds: median(&secs),
                    ..(*first).clone()
                }),
                None => {
                    return Err(format!(
                        "hybrid: {app} at size {size} as {} recorded no run (its ranks saw another layout: check the host names and the launcher)",
                        pat.name()
                    )
                    .into())
                }
            }
        }
    }
    let mut report = Report::new("hybrid", "s", true);
    // Seed 000 draws parallel efficiency per pattern (the times stay in `value`).
    report.figure_value = Some("efficiency".into());
    for p in model::analyse(&med) {
        let r = &p.run;
        let params = [
            ("app", json!(r.app)),
            ("size", json!(r.size)),
            ("pattern", json!(r.pattern())),
            ("threads", json!(r.threads)),
            ("ranks", json!(r.processes * r.nodes)),
            ("hosts", json!(r.nodes)),
        ];
        let row = report.push("tiers", &params, r.seconds);
        let round = |v: f64, k: f64| (v * k).round() / k;
        row.extra
            .push(("speedup".into(), json!(round(p.speedup, 1000.0))));
        row.extra
            .push(("efficiency".into(), json!(round(p.efficiency, 1000.0))));
        row.extra
            .push(("overhead".into(), json!(round(p.overhead, 10000.0))));
        let pat = Pattern {
            t: r.threads,
            m: r.processes,
            n: r.nodes,
        };
        if let Some(mib) = rss
            .get(&(r.size, pat))
            .or_else(|| rss.get(&(plan.sizes[0], pat)))
        {
            row.extra
                .push(("peak_rss_mib".into(), json!(round(*mib, 10.0))));
        }
        // The limit of a pattern of p cores: the 1x1x1 run's time (measured in this run)
        // divided by p, perfect speedup with nothing spent on communication.
        let ideal = p.speedup * r.seconds / p.p.max(1) as f64;
        if ideal.is_finite() && ideal > 0.0 {
            // Its speedup is p; its efficiency (1) and overhead (0) the figure knows.
            report
                .push_limit(
                    &params,
                    ideal,
                    "the 1x1x1 time of this run divided by the pattern's cores t*m*n (perfect speedup, no overhead)",
                )
                .extra
                .push(("speedup".into(), json!(p.p as f64)));
        }
    }
    let sizes: Vec<String> = plan.sizes.iter().map(usize::to_string).collect();
    let sizes = if app == "render" {
        // The image is render's default whatever --sizes says (its rows give its pixels).
        vec!["of its default 1024x768 image (--sizes does not apply)".to_string()]
    } else {
        sizes
    };
    report.note(format!(
        "{app} at sizes {} (kmer distances for mds and cluster), every pattern t x m x 1 with t*m <= {} cores{}, median of {} rounds alternating the patterns, every output compared byte for byte with 1x1x1's; seconds as the app records them (per iteration for mds and cluster); efficiency and overhead against 1x1x1 of the same size; peak_rss_mib: the largest rank's peak resident memory on one host (per rank O(N^2/p + N*d) for mds and cluster)",
        sizes.join(","),
        plan.cores,
        match &plan.hosts {
            Some(h) => format!(
                ", and t x m x n across n = 2..{} of the hosts {} with t*m <= {} cores per host (mpirun, the mpi engine: shared memory within a host, MPI between)",
                h.names.len(),
                h.names.join(","),
                plan.host_cores
            ),
            None => String::new(),
        },
        plan.rounds
    ));
    Ok((report, med))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launchers_rss_line_parses() {
        let err = "x\n[tiers run] peak RSS of the largest rank: 12.5 MiB\n";
        assert_eq!(peak_rss_mib(err), Some(12.5));
        assert_eq!(peak_rss_mib("nothing"), None);
    }

    #[test]
    fn patterns_fit_the_cores() {
        let names = |v: Vec<Pattern>| v.iter().map(Pattern::name).collect::<Vec<_>>();
        assert_eq!(names(patterns(1, 1, 1)), ["1x1x1"]);
        assert_eq!(names(patterns(2, 1, 2)), ["1x1x1", "2x1x1", "1x2x1"]);
        assert!(patterns(16, 1, 16).iter().all(|p| p.t * p.m <= 16));
        assert_eq!(patterns(16, 1, 16).len(), 15);
        // Two emulated hosts sharing 2 cores, one core each: 1x1x2 across them.
        assert_eq!(
            names(patterns(2, 2, 1)),
            ["1x1x1", "2x1x1", "1x2x1", "1x1x2"]
        );
        // Three hosts of 2 cores each.
        let p = patterns(2, 3, 2);
        assert_eq!(p.iter().filter(|p| p.n == 3).count(), 3);
        assert!(p.iter().all(|p| p.t * p.m <= 2));
    }

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn options_are_checked() {
        let p = parse(&args("mds -- --sizes 300,200,300 --rounds 2")).unwrap();
        assert_eq!((p.sizes, p.rounds), (vec![300, 200], 2));
        assert_eq!(parse(&args("cluster --size 50")).unwrap().sizes, [50]);
        for bad in [
            "nope",
            "mds --sizes 1",
            "mds --sizes x",
            "mds --sizes ,",
            "mds --rounds 0",
            "mds --rounds 18446744073709551615",
            "mds --host-cores 0",
            "mds --hosts a",
            "mds --hosts a:2,b",
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad}");
        }
        let two = parse(&args("mds --hosts h1,h2 --mpirun-args --oversubscribe"));
        if cfg!(feature = "mpi") {
            let h = two.unwrap().hosts.unwrap();
            assert_eq!(h.names, ["h1", "h2"]);
            assert_eq!(h.mpirun_args, ["--oversubscribe"]);
        } else {
            assert!(two.err().unwrap().to_string().contains("--features mpi"));
        }
    }
}

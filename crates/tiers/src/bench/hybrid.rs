//! `tiers bench hybrid APP`: one application run as every hybrid pattern t×m×1 that fits the
//! machine (t threads in each of m ranks, t·m ≤ cores), the comparison of [Qiu2012]: pure
//! threading, pure processes and the mixes. Each pattern runs the same command under
//! `tiers run -n m --threads t`, alternating patterns round by round; the runs it records go
//! through the overhead model (speedup, efficiency, overhead f against 1×1×1) and, with
//! `--out FILE`, into a runs file for `tiers model`.
//!
//! Options after `--`: `--size N` (sequences or points; default 1500), `--rounds R` (default
//! 3), `--out RUNS.json`. The app is the word after `hybrid`: distances, mds, cluster, render.

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

/// Runs `tiers ARGS`; its standard error on success.
fn tiers(exe: &Path, args: &[String]) -> Res<String> {
    let out = Command::new(exe).args(args).output()?;
    if !out.status.success() {
        return Err(format!(
            "tiers {}: {}",
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

/// The patterns t×m×1 with t·m ≤ `cores`, t and m powers of two.
fn patterns(cores: usize) -> Vec<(usize, usize)> {
    let pow2: Vec<usize> = (0..).map(|k| 1 << k).take_while(|&v| v <= cores).collect();
    let mut v = Vec::new();
    for &m in &pow2 {
        for &t in &pow2 {
            if t * m <= cores {
                v.push((t, m));
            }
        }
    }
    v
}

/// Runs the benchmark.
pub(super) fn run(ctx: &Ctx<'_>) -> Outcome {
    let args = ctx.args;
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
    let size: usize = arg(args, "--size").map_or(Ok(1500), str::parse)?;
    let rounds: usize = arg(args, "--rounds").map_or(Ok(3), str::parse)?;
    if size < 2 || rounds == 0 {
        return Err("hybrid: --size must be at least 2 and --rounds at least 1".into());
    }
    let exe = std::env::current_exe()?;
    let dir = std::env::temp_dir().join(format!("tiers-hybrid-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = measure(ctx, &exe, &dir, &app, size, rounds);
    let _ = std::fs::remove_dir_all(&dir);
    let (report, runs) = result?;
    if let Some(out) = arg(args, "--out") {
        crate::runs::write(Path::new(out), runs)?;
    }
    Ok(Some(report))
}

fn measure(
    ctx: &Ctx<'_>,
    exe: &Path,
    dir: &Path,
    app: &str,
    size: usize,
    rounds: usize,
) -> Res<(Report, Vec<Run>)> {
    let s = |p: PathBuf| p.display().to_string();
    let fa = s(dir.join("s.fa"));
    let d = s(dir.join("d.bin"));
    if app != "render" {
        progress(&ctx.opts, format!("hybrid {app}: data, {size} sequences"));
        tiers(
            exe,
            &["data", "alu", "--n", &size.to_string(), "--out", &fa].map(String::from),
        )?;
        if app != "distances" {
            tiers(
                exe,
                &["distances", &fa, "--metric", "kmer", "--out", &d, "--quiet"].map(String::from),
            )?;
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pats = patterns(cores);
    let runs_file = dir.join("runs.json");
    let runs = s(runs_file.clone());
    // The peak RSS of the largest rank, per pattern (the most over the rounds).
    let mut rss: std::collections::HashMap<(usize, usize), f64> = Default::default();
    for round in 0..rounds {
        for &(t, m) in &pats {
            progress(
                &ctx.opts,
                format!("hybrid {app}: round {}/{rounds}, {t}x{m}x1", round + 1),
            );
            let (ts, ms) = (t.to_string(), m.to_string());
            let mut a: Vec<String> = ["run", "-n", &ms, "--threads", &ts, "--peak-rss", "--"]
                .map(String::from)
                .to_vec();
            a.push(exe.display().to_string());
            let o = |name: &str| s(dir.join(format!("{name}-{t}x{m}")));
            let tail: Vec<String> = match app {
                "distances" => vec![
                    "distances".into(),
                    fa.clone(),
                    "--metric".into(),
                    "kmer".into(),
                    "--out".into(),
                    o("d") + ".bin",
                ],
                "mds" => vec![
                    "mds".into(),
                    d.clone(),
                    "--out".into(),
                    o("p") + ".csv",
                    "--max-iter".into(),
                    "20".into(),
                    "--threshold".into(),
                    "0".into(),
                ],
                "cluster" => vec![
                    "cluster".into(),
                    d.clone(),
                    "--out".into(),
                    o("c") + ".txt",
                    "--max-clusters".into(),
                    "4".into(),
                ],
                _ => vec!["render".into(), "--out".into(), o("r") + ".png"],
            };
            a.extend(tail);
            a.extend([
                "--threads".into(),
                ts.clone(),
                "--quiet".into(),
                "--runs".into(),
                runs.clone(),
            ]);
            if app == "render" {
                a.retain(|x| x != "--quiet");
            }
            let err = tiers(exe, &a)?;
            if let Some(mib) = peak_rss_mib(&err) {
                let e = rss.entry((t, m)).or_insert(0.0);
                *e = e.max(mib);
            }
        }
    }
    let all = crate::runs::read(&runs_file)?.runs;
    // The median of the rounds, per pattern.
    let mut med = Vec::new();
    for &(t, m) in &pats {
        let secs: Vec<f64> = all
            .iter()
            .filter(|r| r.threads == t && r.nodes == m)
            .map(|r| r.seconds)
            .collect();
        if let Some(first) = all.iter().find(|r| r.threads == t && r.nodes == m) {
            med.push(Run {
                seconds: median(&secs),
                ..first.clone()
            });
        }
    }
    let mut report = Report::new("hybrid", "s", true);
    for p in model::analyse(&med) {
        let (t, m) = (p.run.threads, p.run.nodes);
        let row = report.push(
            "tiers",
            &[
                ("app", json!(p.run.app)),
                ("pattern", json!(format!("{t}x{m}x1"))),
                ("threads", json!(t)),
                ("ranks", json!(m)),
            ],
            p.run.seconds,
        );
        row.extra.push((
            "speedup".into(),
            json!((p.speedup * 1000.0).round() / 1000.0),
        ));
        row.extra.push((
            "efficiency".into(),
            json!((p.efficiency * 1000.0).round() / 1000.0),
        ));
        row.extra.push((
            "overhead".into(),
            json!((p.overhead * 10000.0).round() / 10000.0),
        ));
        if let Some(mib) = rss.get(&(t, m)) {
            row.extra
                .push(("peak_rss_mib".into(), json!((mib * 10.0).round() / 10.0)));
        }
        // The limit of a pattern of p cores: the 1x1x1 run's time (measured in this run)
        // divided by p, perfect speedup with nothing spent on communication.
        let ideal = p.speedup * p.run.seconds / p.p.max(1) as f64;
        if ideal.is_finite() && ideal > 0.0 {
            report.push_limit(
                &[
                    ("app", json!(p.run.app)),
                    ("pattern", json!(format!("{t}x{m}x1"))),
                    ("threads", json!(t)),
                    ("ranks", json!(m)),
                ],
                ideal,
                "the 1x1x1 time of this run divided by the pattern's cores t*m (perfect speedup, no overhead)",
            );
        }
    }
    report.note(format!(
        "{app} at size {size} (kmer distances for mds and cluster), every pattern t x m x 1 with t*m <= {cores} cores, median of {rounds} rounds alternating the patterns; seconds as the app records them (per iteration for mds and cluster); efficiency and overhead against 1x1x1; peak_rss_mib: the largest rank's peak resident memory (per rank O(N^2/p + N*d) for mds and cluster)"
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
        assert_eq!(patterns(1), vec![(1, 1)]);
        assert_eq!(patterns(2), vec![(1, 1), (2, 1), (1, 2)]);
        assert!(patterns(16).iter().all(|&(t, m)| t * m <= 16));
        assert_eq!(patterns(16).len(), 15);
    }
}

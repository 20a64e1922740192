//! Benchmarks of the applications, run by `tiers bench NAME`: `mds`, `cluster`, `distances`,
//! `render` and `scaling`. Each measures the kernel that dominates the application (a SMACOF
//! iteration, an EM iteration, a distance matrix, an image) at every thread count and reports the
//! parallel efficiency ε = p_ref·T(p_ref)/(p·T(p)) beside the time.
//!
//! Options after `--`: `--sizes N,N`, `--k K` (clusters), `--metric M` (`swg` measures both
//! alignment engines, rust-bio's and the native kernel, side by side), `--iters I` (for the
//! scikit-learn comparison), `--out RUNS.json` (scaling), `--app APP` (scaling).

use super::{Ctx, Outcome};
use serde_json::json;
use std::time::{Duration, Instant};
use tiers_apps::alu::{generate, AluSpec};
use tiers_apps::clustering::em_step;
use tiers_apps::distance::{pairwise, Metric};
use tiers_apps::matrix::{to_npy, DistMatrix};
use tiers_apps::mds::{random_start, smacof, MdsOptions, Transform};
use tiers_apps::model::{self, Run};
use tiers_apps::render::{render, RenderSpec, TileSchedule};
use tiers_apps::rng::Rng;
use tiers_bench::{compare, limit, progress, Candidate, Opts, Report};
use tiers_node::Pool;

type BenchResult = Result<Report, Box<dyn std::error::Error>>;

/// Runs an application benchmark with its arguments parsed.
pub(super) fn run(f: fn(&Opts, &Rest) -> BenchResult, ctx: &Ctx<'_>) -> Outcome {
    f(&ctx.opts, &Rest::parse(ctx.args)).map(Some)
}

pub(super) struct Rest(Vec<(String, String)>);

impl Rest {
    fn parse(rest: &[String]) -> Rest {
        let mut v = Vec::new();
        let mut it = rest.iter().peekable();
        while let Some(a) = it.next() {
            if let Some(k) = a.strip_prefix("--") {
                if let Some((k, val)) = k.split_once('=') {
                    v.push((k.to_string(), val.to_string()));
                } else {
                    let val = it
                        .next_if(|n| !n.starts_with("--"))
                        .cloned()
                        .unwrap_or_default();
                    v.push((k.to_string(), val));
                }
            } else {
                v.push(("app".to_string(), a.clone())); // a bare word names the app (scaling)
            }
        }
        Rest(v)
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(a, _)| a == k)
            .map(|(_, v)| v.as_str())
    }
    /// Refuses an option this benchmark does not know (a typo would otherwise run the
    /// defaults, and a bare word names the app only for `scaling`).
    fn only(&self, bench: &str, known: &[&str]) -> Result<(), String> {
        match self.0.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            Some((k, v)) if k == "app" => Err(format!(
                "{bench}: unexpected argument {v:?} after -- (options: --{})",
                known.join(", --")
            )),
            Some((k, _)) => Err(format!(
                "{bench}: unknown option --{k} after -- (options: --{})",
                known.join(", --")
            )),
            None => Ok(()),
        }
    }
    /// `--sizes`, each at least `min`.
    fn sizes(&self, default: &[usize], min: usize) -> Result<Vec<usize>, String> {
        let v: Vec<usize> = match self.get("sizes") {
            None => return Ok(default.to_vec()),
            Some(s) => s
                .split(',')
                .map(|x| {
                    x.trim()
                        .parse::<usize>()
                        .map_err(|_| format!("bad --sizes {s:?}"))
                })
                .collect::<Result<_, _>>()?,
        };
        match v.iter().find(|&&n| n < min) {
            Some(n) => Err(format!("--sizes {n}: at least {min}")),
            None => Ok(v),
        }
    }
    /// Option `k`, in `range`.
    fn usize_in(
        &self,
        k: &str,
        default: usize,
        range: std::ops::RangeInclusive<usize>,
    ) -> Result<usize, String> {
        let v = self.get(k).map_or(Ok(default), |v| {
            v.parse().map_err(|_| format!("bad --{k} {v:?}"))
        })?;
        if !range.contains(&v) {
            return Err(match *range.end() {
                usize::MAX => format!("--{k} {v}: at least {}", range.start()),
                end => format!("--{k} {v}: from {} to {end}", range.start()),
            });
        }
        Ok(v)
    }
    fn usize(&self, k: &str, default: usize) -> Result<usize, String> {
        self.usize_in(k, default, 1..=usize::MAX)
    }
}

/// Refuses sizes whose data would not fit in memory before any is made: `count` elements of
/// `elem` bytes, for `what`.
fn fits(what: &str, count: Option<usize>, elem: usize) -> Result<(), String> {
    let count = count.ok_or_else(|| format!("{what}: the size overflows the address space"))?;
    tiers_apps::limits::check_alloc(what, count, elem)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// A distance matrix of `n` points, and the points of `mixture_matrix`.
fn matrix_fits(n: usize) -> Result<(), String> {
    fits(
        &format!("a distance matrix of {n} points"),
        n.checked_mul(n),
        4,
    )?;
    fits(
        &format!("{n} points in 10 dimensions"),
        n.checked_mul(10),
        8,
    )
}

/// Points in a 10-D Gaussian mixture, their Euclidean distance matrix: a stand-in for sequence
/// distances that is quick to make at any N.
fn mixture_matrix(n: usize, seed: u64) -> DistMatrix {
    let mut rng = Rng::new(seed);
    let d = 10;
    let centers: Vec<f64> = (0..8 * d).map(|_| 3.0 * rng.normal()).collect();
    let pts: Vec<f64> = (0..n)
        .flat_map(|i| (0..d).map(move |k| (i, k)))
        .map(|(i, k)| centers[(i % 8) * d + k] + rng.normal())
        .collect();
    DistMatrix::euclidean(&pts, d)
}

fn efficiency(report: &mut Report, imp: &str, times: &[(usize, f64)]) {
    if let Some(&(p0, t0)) = times.first() {
        for &(p, t) in times {
            let eff = p0 as f64 * t0 / (p as f64 * t);
            if let Some(row) = report.rows.iter_mut().rev().find(|r| {
                r.imp == imp
                    && r.params
                        .iter()
                        .any(|(k, v)| k == "threads" && v == &json!(p))
            }) {
                row.extra
                    .push(("efficiency".into(), json!((eff * 1000.0).round() / 1000.0)));
            }
        }
    }
}

fn pools(opts: &Opts) -> Result<Vec<(usize, Pool)>, Box<dyn std::error::Error>> {
    opts.threads
        .iter()
        .map(|&t| Ok((t, Pool::builder().threads(t).build()?)))
        .collect()
}

/// What a candidate of `mds` measures.
#[derive(Clone, Copy, PartialEq)]
enum MdsSlot {
    /// The Guttman transform alone, iteration after iteration (the kernel; efficiency).
    Kernel(usize),
    /// Reading the matrix once (the limit).
    Limit(usize),
    /// N(N − 1)/2 square roots and divisions (the arithmetic floor of a symmetric iteration).
    Divider(usize),
    /// `smacof` calls, marginal cost per iteration.
    Smacof(usize),
    /// scikit-learn's `smacof` calls, marginal cost per iteration.
    Sklearn(usize),
}

/// The scikit-learn peer: one python process per thread setting, loaded once, answering
/// "K" on stdin with the times of a 1-iteration and a K-iteration call.
struct SklearnPeer {
    child: std::process::Child,
    input: Option<std::process::ChildStdin>,
    output: std::io::BufReader<std::process::ChildStdout>,
    version: String,
    blas_threads: u64,
}

/// One answer of the peer.
#[derive(Clone, Copy, Default)]
struct SklearnPair {
    t1: f64,
    tk: f64,
    n1: u64,
    nk: u64,
    stress: f64,
}

impl SklearnPeer {
    /// Starts the peer on the matrix and start in `dir`; `threads == 1` pins BLAS to one
    /// thread, otherwise BLAS keeps its default. `Err` holds why it is skipped.
    fn start(
        dir: &std::path::Path,
        script: &std::path::Path,
        threads: usize,
    ) -> Result<SklearnPeer, String> {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let mut cmd = Command::new("python3");
        let blas = ["OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"];
        for v in blas {
            if threads == 1 {
                cmd.env(v, "1");
            } else {
                cmd.env_remove(v);
            }
        }
        let mut child = cmd
            .arg(script)
            .arg(dir.join("d.npy"))
            .arg(dir.join("x0.npy"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("python3 not runnable: {e}"))?;
        let input = child.stdin.take().expect("piped");
        let mut output = std::io::BufReader::new(child.stdout.take().expect("piped"));
        let mut first = String::new();
        let _ = output.read_line(&mut first);
        let v: serde_json::Value = serde_json::from_str(first.trim()).unwrap_or_default();
        if v["ready"] != true {
            let _ = child.kill();
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            let _ = child.wait();
            let why = v["error"].as_str().map_or_else(
                || {
                    let e = err.trim();
                    format!("the peer did not start: {}", e.lines().last().unwrap_or(""))
                },
                str::to_string,
            );
            return Err(why);
        }
        Ok(SklearnPeer {
            child,
            input: Some(input),
            output,
            version: v["sklearn"].as_str().unwrap_or("?").to_string(),
            blas_threads: v["blas_threads"].as_u64().unwrap_or(0),
        })
    }

    fn pair(&mut self, k: usize) -> SklearnPair {
        use std::io::{BufRead, Write};
        let input = self.input.as_mut().expect("open until drop");
        writeln!(input, "{k}").expect("scikit-learn peer: write");
        input.flush().expect("scikit-learn peer: flush");
        let mut line = String::new();
        self.output
            .read_line(&mut line)
            .expect("scikit-learn peer: read");
        let v: serde_json::Value = serde_json::from_str(line.trim())
            .unwrap_or_else(|e| panic!("scikit-learn peer: bad answer {line:?}: {e}"));
        let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        SklearnPair {
            t1: f("t1"),
            tk: f("tk"),
            n1: v["n1"].as_u64().unwrap_or(0),
            nk: v["nk"].as_u64().unwrap_or(0),
            stress: f("stress"),
        }
    }

    /// Returns once the peer's process has used no processor time for 100 ms (at most 5 s
    /// after the call): OpenBLAS's threads spin after a call before they sleep, and the
    /// candidate measured next must not share the cores with them.
    fn settle(&self) {
        let stat = format!("/proc/{}/stat", self.child.id());
        // utime + stime, in clock ticks: fields 14 and 15, after the parenthesised name.
        let cpu = || -> Option<u64> {
            let s = std::fs::read_to_string(&stat).ok()?;
            let rest = &s[s.rfind(')')? + 1..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        };
        let t0 = Instant::now();
        let mut last = cpu();
        while t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(100));
            let now = cpu();
            if now.is_none() || now == last {
                break;
            }
            last = now;
        }
    }
}

impl Drop for SklearnPeer {
    fn drop(&mut self) {
        // Closing stdin ends the peer's loop.
        drop(self.input.take());
        let _ = self.child.wait();
    }
}

/// What one pair of calls of the `mds` comparison returned.
#[derive(Clone, Copy, Default)]
struct Returned {
    n1: u64,
    nk: u64,
    stress: f64,
    t1: f64,
    tk: f64,
}

/// (T(k) − T(1)) / (k − 1), never below zero.
fn marginal(t1: f64, tk: f64, k: usize) -> f64 {
    ((tk - t1) / (k - 1) as f64).max(0.0)
}

pub(super) fn mds(opts: &Opts, a: &Rest) -> BenchResult {
    let mut report = Report::new("mds", "s/iteration", true);
    a.only("mds", &["sizes", "iters"])?;
    let sizes = a.sizes(&[2000, 4499], 2)?;
    let iters = a.usize_in("iters", 20, 1..=1_000_000)?;
    for &n in &sizes {
        matrix_fits(n)?;
    }
    if iters < 2 {
        return Err(format!(
            "--iters {iters}: the marginal cost (T(k) - T(1)) / (k - 1) needs k >= 2"
        )
        .into());
    }
    // Every thread count asked for, and 1 and all processors for the calls against
    // scikit-learn.
    let all = tiers_node::Topology::get().affinity.len().max(1);
    let mut counts = opts.threads.clone();
    for t in [1, all] {
        if !counts.contains(&t) {
            counts.push(t);
        }
    }
    let pools = pools(&Opts {
        threads: counts.clone(),
        ..opts.clone()
    })?;
    let pool = |t: usize| &pools.iter().find(|(p, _)| *p == t).expect("pool").1;
    let calls: Vec<usize> = if all == 1 { vec![1] } else { vec![1, all] };
    let dir = std::env::temp_dir().join(format!("tiers-bench-mds-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let script = dir.join("smacof_sklearn.py");
    std::fs::write(&script, include_str!("smacof_sklearn.py"))?;
    let result = (|| -> BenchResult {
        for &n in &sizes {
            mds_size(
                opts,
                &mut report,
                n,
                iters,
                &counts,
                &calls,
                &pool,
                &dir,
                &script,
            )?;
        }
        Ok(report)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// `mds` at one size: every candidate in one alternating comparison.
#[allow(clippy::too_many_arguments)]
fn mds_size<'p>(
    opts: &Opts,
    report: &mut Report,
    n: usize,
    iters: usize,
    counts: &[usize],
    calls: &[usize],
    pool: &dyn Fn(usize) -> &'p Pool,
    dir: &std::path::Path,
    script: &std::path::Path,
) -> Result<(), Box<dyn std::error::Error>> {
    use std::cell::{Cell, RefCell};
    progress(opts, format!("mds: building a {n}x{n} matrix"));
    let d = mixture_matrix(n, 7);
    let start = random_start(n, 3, 1);
    std::fs::write(dir.join("d.npy"), to_npy(&d))?;
    std::fs::write(dir.join("x0.npy"), points_npy(&start, 3))?;
    let mut peers: Vec<(usize, RefCell<SklearnPeer>)> = Vec::new();
    for &t in calls {
        progress(
            opts,
            format!("mds: starting scikit-learn, {t} BLAS thread(s)"),
        );
        match SklearnPeer::start(dir, script, t) {
            Ok(p) => peers.push((t, RefCell::new(p))),
            Err(why) => {
                report.note(format!("scikit-learn skipped: {why}"));
                break;
            }
        }
    }
    let mut slots = Vec::new();
    slots.extend(opts.threads.iter().map(|&t| MdsSlot::Kernel(t)));
    slots.extend(counts.iter().map(|&t| MdsSlot::Limit(t)));
    slots.extend(counts.iter().map(|&t| MdsSlot::Divider(t)));
    slots.extend(calls.iter().map(|&t| MdsSlot::Smacof(t)));
    slots.extend(peers.iter().map(|(t, _)| MdsSlot::Sklearn(*t)));
    // What the last pair of calls returned, checked below: iterations of the 1- and k-call,
    // stress after k, and their seconds.
    let returned: Vec<Cell<Returned>> = slots.iter().map(|_| Cell::default()).collect();
    progress(
        opts,
        format!("mds: N = {n}, threads {counts:?}, {iters}-iteration calls, alternating"),
    );
    let mopts = |max_iter| MdsOptions {
        threshold: 0.0,
        max_iter,
        ..Default::default()
    };
    let mut cands: Vec<Candidate<'_>> = slots
        .iter()
        .zip(&returned)
        .map(|(&slot, ret)| {
            let (d, start, peers) = (&d, &start, &peers);
            match slot {
                MdsSlot::Kernel(t) => {
                    let pool = pool(t);
                    let mut x = start.clone();
                    let mut next = vec![0.0; n * 3];
                    let mut rs = vec![0.0; n];
                    let mut transform = Transform::new(pool, d, 3, 64);
                    Candidate::new(format!("tiers-{t}"), move |k| {
                        let t0 = Instant::now();
                        for _ in 0..k {
                            transform.step(pool, &x, &mut next, &mut rs);
                            std::mem::swap(&mut x, &mut next);
                        }
                        t0.elapsed()
                    })
                }
                MdsSlot::Limit(t) => limit::read_once(pool(t), &d.data),
                MdsSlot::Divider(t) => divider_candidate(pool(t), n),
                MdsSlot::Smacof(t) => {
                    let pool = pool(t);
                    let (o1, ok) = (mopts(1), mopts(iters));
                    Candidate::new(format!("tiers-smacof-{t}"), move |reps| {
                        let mut sum = 0.0;
                        for _ in 0..reps {
                            let t0 = Instant::now();
                            let r1 = smacof(pool, d, Some(start.clone()), &o1, |_, _| {});
                            let t1 = t0.elapsed().as_secs_f64();
                            let t0 = Instant::now();
                            let rk = smacof(pool, d, Some(start.clone()), &ok, |_, _| {});
                            let tk = t0.elapsed().as_secs_f64();
                            let last = rk.stress[iters.min(rk.stress.len() - 1)].raw;
                            ret.set(Returned {
                                n1: r1.iterations as u64,
                                nk: rk.iterations as u64,
                                stress: last,
                                t1,
                                tk,
                            });
                            sum += marginal(t1, tk, iters);
                        }
                        Duration::from_secs_f64(sum)
                    })
                }
                MdsSlot::Sklearn(t) => {
                    let peer = &peers.iter().find(|(p, _)| *p == t).expect("peer").1;
                    Candidate::new(format!("scikit-learn-{t}"), move |reps| {
                        let mut sum = 0.0;
                        for _ in 0..reps {
                            let r = peer.borrow_mut().pair(iters);
                            ret.set(Returned {
                                n1: r.n1,
                                nk: r.nk,
                                stress: r.stress,
                                t1: r.t1,
                                tk: r.tk,
                            });
                            sum += marginal(r.t1, r.tk, iters);
                        }
                        // OpenBLAS's threads spin about 0.1 s after a call before they sleep:
                        // let them settle, untimed, so that they do not take the cores from the
                        // candidate measured next (tiers' kernel row ran 1.2-2.6x slower).
                        peer.borrow().settle();
                        Duration::from_secs_f64(sum)
                    })
                }
            }
        })
        .collect();
    let r = compare(opts.min_time, &mut cands);
    drop(cands);
    let mut times = Vec::new();
    let mut stress = Vec::new();
    let mut marg = Vec::new();
    for ((&slot, (v, _)), ret) in slots.iter().zip(&r).zip(&returned) {
        let at = |t: usize| [("threads", json!(t)), ("size", json!(n))];
        match slot {
            MdsSlot::Kernel(t) => {
                report.push("tiers", &at(t), *v);
                times.push((t, *v));
            }
            MdsSlot::Divider(t) => {
                report.push_bound(
                    "divider",
                    &at(t),
                    *v,
                    format!(
                        "N(N-1)/2 f64 square roots and divisions by the pool's {t} thread(s), data in L1 (an iteration's arithmetic floor when delta is symmetric)"
                    ),
                );
            }
            MdsSlot::Limit(t) => {
                report.push_limit(
                    &at(t),
                    *v,
                    limit::read_once_note(&format!("the {n}x{n} f32 matrix"), t),
                );
            }
            MdsSlot::Smacof(t) | MdsSlot::Sklearn(t) => {
                let (name, tag) = match slot {
                    MdsSlot::Smacof(_) => ("tiers-smacof", "tiers"),
                    _ => ("scikit-learn", "scikit-learn"),
                };
                let Returned {
                    n1,
                    nk,
                    stress: st,
                    t1,
                    tk,
                } = ret.get();
                if (n1, nk) != (1, iters as u64) {
                    report.note(format!(
                        "N = {n}: {tag} at {t} thread(s) returned {n1} and {nk} iterations for max_iter 1 and {iters}: row withheld (the marginal cost needs exactly those)"
                    ));
                    continue;
                }
                let row = report.push(name, &at(t), *v);
                row.extra.push(("stress".into(), json!(st)));
                // The last pair of calls, and what dividing the cold k-call by k gives (the
                // earlier way, which counts the call's setup as iterations).
                row.extra.push(("t1_s".into(), json!(t1)));
                row.extra.push((format!("t{iters}_s"), json!(tk)));
                row.extra
                    .push(("cold_call_per_iteration".into(), json!(tk / iters as f64)));
                stress.push((tag, t, st));
                marg.push((tag, t, *v));
            }
        }
    }
    efficiency(report, "tiers", &times);
    let get = |v: &[(&str, usize, f64)], tag: &str, t: usize| {
        v.iter().find(|(g, p, _)| *g == tag && *p == t).map(|x| x.2)
    };
    if let Some((_, p)) = peers.first() {
        let p = p.borrow();
        let mut parts = Vec::new();
        for &t in calls {
            if let (Some(ours), Some(theirs)) =
                (get(&marg, "tiers", t), get(&marg, "scikit-learn", t))
            {
                let blas = if t == 1 {
                    "1 BLAS thread".to_string()
                } else {
                    format!(
                        "default BLAS threads ({})",
                        match peers.iter().find(|(q, _)| *q == t) {
                            Some((_, q)) if q.borrow().blas_threads > 0 =>
                                q.borrow().blas_threads.to_string(),
                            _ => "?".into(),
                        }
                    )
                };
                parts.push(format!(
                    "{t} thread(s): scikit-learn is {:.1}x tiers-smacof ({blas})",
                    theirs / ours
                ));
            }
        }
        let (s1, sk) = (get(&stress, "tiers", 1), get(&stress, "scikit-learn", 1));
        if let (Some(ours), Some(theirs)) = (s1, sk) {
            parts.push(format!(
                "stress after {iters} iterations from the same start: tiers {ours:.12e} vs scikit-learn {theirs:.12e} (relative difference {:.2e})",
                (ours - theirs).abs() / theirs.abs().max(1e-300)
            ));
        }
        report.note(format!(
            "N = {n}: scikit-learn {}; tiers-smacof and scikit-learn rows are marginal costs (T({iters}) - T(1)) / {} of whole calls from the same start, iteration counts checked; {}",
            p.version,
            iters - 1,
            parts.join("; ")
        ));
    }
    Ok(())
}

/// N×d f64 points as `.npy`.
fn points_npy(p: &[f64], d: usize) -> Vec<u8> {
    let n = p.len() / d;
    let mut header = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': ({n}, {d}), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    p.iter()
        .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
    out
}

pub(super) fn cluster(opts: &Opts, a: &Rest) -> BenchResult {
    let mut report = Report::new("cluster", "s/EM iteration", true);
    a.only("cluster", &["sizes", "k"])?;
    let sizes = a.sizes(&[2000], 2)?;
    let k = a.usize("k", 10)?;
    for &n in &sizes {
        matrix_fits(n)?;
        // The responsibilities, three copies (start, current, the step's).
        fits(
            &format!("{n} x {k} responsibilities"),
            n.checked_mul(k).and_then(|c| c.checked_mul(3)),
            8,
        )?;
    }
    let pools = pools(opts)?;
    for &n in &sizes {
        let d = mixture_matrix(n, 3);
        let mut rng = Rng::new(9);
        let m0: Vec<f64> = (0..n)
            .flat_map(|_| {
                let row: Vec<f64> = (0..k).map(|_| rng.f64() + 0.1).collect();
                let z: f64 = row.iter().sum();
                row.into_iter().map(move |v| v / z)
            })
            .collect();
        progress(
            opts,
            format!("cluster: N = {n}, K = {k}, threads {:?}", opts.threads),
        );
        use tiers_apps::clustering::Style;
        const STYLES: [(Style, &str); 2] =
            [(Style::Loop, "tiers"), (Style::Messages, "tiers-messages")];
        let mut cands: Vec<Candidate<'_>> = Vec::new();
        for (style, name) in STYLES {
            for (t, pool) in &pools {
                let (d, m0, mut m) = (&d, &m0, m0.clone());
                let (mut s, mut eps) = (Vec::new(), Vec::new());
                cands.push(Candidate::new(format!("{name} {t}"), move |iters| {
                    let t0 = Instant::now();
                    for _ in 0..iters {
                        // Every step from the same memberships: the work of a step depends on
                        // the state (how many exponentials underflow), and the thread counts
                        // run different numbers of steps, so evolving states would not compare.
                        // The O(N·K) copy is noise beside the O(N²·K) step.
                        m.copy_from_slice(m0);
                        em_step(pool, d, style, &mut m, k, 5.0, &mut s, &mut eps, false);
                    }
                    t0.elapsed()
                }));
            }
        }
        // The limit: reading the matrix once, on the same pools, alternating with the steps.
        cands.extend(
            pools
                .iter()
                .map(|(_, pool)| limit::read_once(pool, &d.data)),
        );
        let r = compare(opts.min_time, &mut cands);
        drop(cands);
        let np = pools.len();
        for (si, (_, name)) in STYLES.iter().enumerate() {
            let mut times = Vec::new();
            for ((t, _), (v, _)) in pools.iter().zip(&r[si * np..(si + 1) * np]) {
                report.push(
                    name,
                    &[("threads", json!(t)), ("size", json!(n)), ("k", json!(k))],
                    *v,
                );
                times.push((*t, *v));
            }
            efficiency(&mut report, name, &times);
        }
        for ((t, _), (v, _)) in pools.iter().zip(&r[2 * np..]) {
            report.push_limit(
                &[("threads", json!(t)), ("size", json!(n)), ("k", json!(k))],
                *v,
                limit::read_once_note(&format!("the {n}x{n} f32 matrix"), *t),
            );
        }
    }
    report.note("tiers: the EM step's loops on the pool (loop style); tiers-messages: the same step by messages between the workers' ports ([Qiu2012]'s CCR style), the same bits".to_string());
    Ok(report)
}

pub(super) fn distances(opts: &Opts, a: &Rest) -> BenchResult {
    let mut report = Report::new("distances", "pairs/s", false);
    a.only("distances", &["sizes", "metric"])?;
    let pools = pools(opts)?;
    // Metrics measured together, alternating in one comparison: the two SWG engines are peers
    // (rust-bio's first, the reference of the ratio).
    let groups: Vec<Vec<Metric>> = match a.get("metric") {
        Some(m) => match Metric::parse(m)? {
            Metric::Swg => vec![vec![Metric::Swg, Metric::SwgNative]],
            m => vec![vec![m]],
        },
        None => vec![
            vec![Metric::Hamming],
            vec![Metric::Kmer(5)],
            vec![Metric::Swg, Metric::SwgNative],
        ],
    };
    for group in groups {
        let first = group[0];
        let n = match first.swg_engine() {
            Some(_) => a.usize_in("sizes", 100, 2..=usize::MAX)?,
            None => a.usize_in("sizes", 2000, 2..=usize::MAX)?,
        };
        fits(
            &format!("a distance matrix of {n} sequences"),
            n.checked_mul(n),
            4,
        )?;
        fits(&format!("{n} sequences"), n.checked_mul(400), 1)?;
        let seqs = generate(&AluSpec {
            n,
            indel: 0.0,
            ..Default::default()
        });
        // Hamming needs equal lengths: cut every sequence to the shortest.
        let len = seqs.iter().map(|s| s.record.seq.len()).min().unwrap_or(0);
        let s: Vec<&[u8]> = seqs
            .iter()
            .map(|x| {
                if first == Metric::Hamming {
                    &x.record.seq[..len]
                } else {
                    x.record.seq.as_slice()
                }
            })
            .collect();
        let pairs = (n * (n - 1) / 2) as f64;
        let names: Vec<String> = group.iter().map(|m| m.name()).collect();
        progress(
            opts,
            format!(
                "distances: {} N = {n}, threads {:?}",
                names.join(" vs "),
                opts.threads
            ),
        );
        let mut cands: Vec<Candidate<'_>> = Vec::new();
        for (t, pool) in &pools {
            for &metric in &group {
                let s = &s;
                cands.push(Candidate::new(
                    format!("{}-{t}", metric.name()),
                    move |iters| {
                        let t0 = Instant::now();
                        for _ in 0..iters {
                            std::hint::black_box(pairwise(pool, s, metric).expect("distances"));
                        }
                        t0.elapsed()
                    },
                ));
            }
        }
        let r = compare(opts.min_time, &mut cands);
        drop(cands);
        for (k, metric) in group.iter().enumerate() {
            let imp = format!("tiers-{}", metric.name());
            let mut times = Vec::new();
            for (p, (t, _)) in pools.iter().enumerate() {
                let v = r[p * group.len() + k].0;
                report.push(
                    &imp,
                    &[("threads", json!(t)), ("size", json!(n))],
                    pairs / v,
                );
                times.push((*t, v));
            }
            efficiency(&mut report, &imp, &times);
        }
    }
    Ok(report)
}

pub(super) fn render_bench(opts: &Opts, a: &Rest) -> BenchResult {
    let mut report = Report::new("render", "s/image", true);
    a.only("render", &["tile", "max-iter"])?;
    let pools = pools(opts)?;
    let spec = RenderSpec {
        tile: a.usize_in("tile", 32, 1..=4096)?,
        max_iter: a.usize_in("max-iter", 1000, 1..=1 << 24)? as u32,
        ..Default::default()
    };
    let name = |sched: TileSchedule| {
        if sched == TileSchedule::Static {
            "tiers-static"
        } else {
            "tiers-dynamic"
        }
    };
    progress(
        opts,
        format!(
            "render: static and dynamic tiles, threads {:?}, alternating",
            opts.threads
        ),
    );
    // Every (schedule, thread count) pair is one candidate, measured in alternating rounds so
    // that the load of a shared machine falls on all of them alike.
    let configs: Vec<(TileSchedule, usize, &Pool)> = [TileSchedule::Static, TileSchedule::Dynamic]
        .into_iter()
        .flat_map(|sched| pools.iter().map(move |(t, pool)| (sched, *t, pool)))
        .collect();
    let sums: Vec<std::cell::Cell<u64>> = configs.iter().map(|_| Default::default()).collect();
    let busy: Vec<std::cell::RefCell<Vec<f64>>> =
        configs.iter().map(|_| Default::default()).collect();
    let mut cands: Vec<Candidate<'_>> = configs
        .iter()
        .zip(sums.iter().zip(&busy))
        .map(|(&(sched, t, pool), (sum, busy))| {
            let spec = &spec;
            Candidate::new(format!("{}-{t}", name(sched)), move |iters| {
                let mut d = Duration::ZERO;
                for _ in 0..iters {
                    let img = render(pool, spec, sched);
                    sum.set(img.checksum());
                    *busy.borrow_mut() = img.busy.clone();
                    d += Duration::from_secs_f64(img.seconds);
                }
                d
            })
        })
        .collect();
    let r = compare(opts.min_time, &mut cands);
    drop(cands);
    for sched in [TileSchedule::Static, TileSchedule::Dynamic] {
        let mut times = Vec::new();
        for (k, &(s, t, _)) in configs.iter().enumerate() {
            if s != sched {
                continue;
            }
            let b = busy[k].borrow();
            let (lo, hi) = b
                .iter()
                .fold((f64::INFINITY, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
            let row = report.push(
                name(sched),
                &[("threads", json!(t)), ("tile", json!(spec.tile))],
                r[k].0,
            );
            // Busy time of the least and most loaded worker in the last image: the imbalance.
            row.extra
                .push(("busy_min_max_s".into(), json!([round4(lo), round4(hi)])));
            times.push((t, r[k].0));
        }
        // Efficiency against the 1-thread run of the same schedule (the same work).
        efficiency(&mut report, name(sched), &times);
    }
    let mut all: Vec<u64> = sums.iter().map(|c| c.get()).collect();
    all.dedup();
    report.note(format!(
        "image checksums over all runs: {:?} ({})",
        all.iter().map(|s| format!("{s:016x}")).collect::<Vec<_>>(),
        if all.len() == 1 {
            "identical"
        } else {
            "DIFFERENT"
        }
    ));
    Ok(report)
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// Data of one size for `scaling`, shared by the thread counts.
enum ScaleData {
    Matrix(DistMatrix),
    Seqs(Vec<Vec<u8>>),
    Image(RenderSpec),
}

pub(super) fn scaling(opts: &Opts, a: &Rest) -> BenchResult {
    a.only("scaling", &["app", "out", "sizes"])?;
    let app = a.get("app").unwrap_or("mds").to_string();
    // By default beside the caller, named after the app (the note at the end names it).
    let out = a
        .get("out")
        .map_or_else(|| format!("tiers-runs-{app}.json"), str::to_string);
    if !matches!(app.as_str(), "mds" | "cluster" | "render" | "distances") {
        return Err(
            format!("scaling: unknown app {app:?}: use mds, cluster, render or distances").into(),
        );
    }
    let sizes = a.sizes(
        match app.as_str() {
            "mds" | "cluster" => &[1000, 2000, 3000],
            "render" => &[256, 512, 1024],
            _ => &[200, 400],
        },
        // A render of width n is n x 3n/4 pixels.
        if app == "render" { 4 } else { 2 },
    )?;
    for &n in &sizes {
        match app.as_str() {
            "render" => fits(&format!("an image {n} pixels wide"), n.checked_mul(n), 4)?,
            "distances" => fits(
                &format!("a distance matrix of {n} sequences"),
                n.checked_mul(n),
                4,
            )?,
            _ => matrix_fits(n)?,
        }
    }
    // The runs file is written at the end: a path that cannot take it is refused first.
    crate::cmd::outputs::check(
        &[],
        &[crate::cmd::outputs::Output {
            path: std::path::Path::new(&out),
            option: "--out",
            extensions: &["json"],
        }],
    )?;
    let pools = pools(opts)?;
    let mut report = Report::new(&format!("scaling-{app}"), "s", true);
    let mut runs = Vec::new();
    for &n in &sizes {
        progress(
            opts,
            format!(
                "scaling {app}: N = {n}, threads {:?}, alternating",
                opts.threads
            ),
        );
        let data = match app.as_str() {
            "mds" => ScaleData::Matrix(mixture_matrix(n, 7)),
            "cluster" => ScaleData::Matrix(mixture_matrix(n, 3)),
            "render" => ScaleData::Image(RenderSpec {
                width: n,
                height: n * 3 / 4,
                ..Default::default()
            }),
            _ => ScaleData::Seqs(
                generate(&AluSpec {
                    n,
                    ..Default::default()
                })
                .into_iter()
                .map(|x| x.record.seq)
                .collect(),
            ),
        };
        // One candidate per thread count, measured in alternating rounds.
        let mut cands: Vec<Candidate<'_>> = pools
            .iter()
            .map(|(_, pool)| scaling_candidate(&app, pool, &data, n))
            .collect();
        let r = compare(opts.min_time, &mut cands);
        drop(cands);
        for ((t, _), (secs, _)) in pools.iter().zip(&r) {
            report.push(&app, &[("threads", json!(t)), ("size", json!(n))], *secs);
            runs.push(Run {
                app: app.clone(),
                threads: *t,
                processes: 1,
                nodes: 1,
                size: n,
                seconds: *secs,
            });
        }
    }
    for p in model::analyse(&runs) {
        if let Some(row) = report.rows.iter_mut().find(|r| {
            r.params
                .iter()
                .any(|(k, v)| k == "threads" && v == &json!(p.run.threads))
                && r.params
                    .iter()
                    .any(|(k, v)| k == "size" && v == &json!(p.run.size))
        }) {
            row.extra.push((
                "efficiency".into(),
                json!((p.efficiency * 1000.0).round() / 1000.0),
            ));
            row.extra.push((
                "overhead".into(),
                json!((p.overhead * 10000.0).round() / 10000.0),
            ));
        }
    }
    crate::runs::write(std::path::Path::new(&out), runs)?;
    report.note(format!(
        "runs written to {out}; analyse them with `tiers model {out}`"
    ));
    Ok(report)
}

/// The arithmetic floor of a SMACOF iteration on `pool`: N(N − 1)/2 square roots and
/// divisions (f64, vectorised as tiers' kernel is), each worker its share, over a block of
/// 4096 entries that stays in L1 (so memory does not count); seconds per iteration.
fn divider_candidate(pool: &Pool, n: usize) -> Candidate<'_> {
    const BLOCK: usize = 4096;
    let dl: Vec<f32> = (0..BLOCK).map(|i| 0.5 + (i % 7) as f32).collect();
    let ss: Vec<f64> = (0..BLOCK).map(|i| 1.0 + (i % 11) as f64).collect();
    let total = n * n.saturating_sub(1) / 2;
    Candidate::new("divider", move |k| {
        let t0 = Instant::now();
        for _ in 0..k {
            pool.spmd(|w| {
                let mine = w.static_range(&(0..total)).len();
                let mut sum = 0.0;
                for done in (0..mine).step_by(BLOCK) {
                    let m = (mine - done).min(BLOCK);
                    sum += tiers_apps::mds::divider_floor(&dl[..m], &ss[..m]);
                }
                std::hint::black_box(sum);
            });
        }
        t0.elapsed()
    })
}

/// The timed kernel of `scaling` for one app, size and pool: a SMACOF iteration, an EM
/// iteration (K = 10), a Mandelbrot image (dynamic tiles) or a k-mer distance matrix.
fn scaling_candidate<'a>(
    app: &str,
    pool: &'a Pool,
    data: &'a ScaleData,
    n: usize,
) -> Candidate<'a> {
    match data {
        ScaleData::Matrix(d) if app == "mds" => {
            let mut x = random_start(n, 3, 1);
            let mut next = vec![0.0; n * 3];
            let mut rs = vec![0.0; n];
            let mut transform = Transform::new(pool, d, 3, 64);
            Candidate::new("mds", move |k| {
                let t0 = Instant::now();
                for _ in 0..k {
                    transform.step(pool, &x, &mut next, &mut rs);
                    std::mem::swap(&mut x, &mut next);
                }
                t0.elapsed()
            })
        }
        ScaleData::Matrix(d) => {
            let k = 10;
            let m0: Vec<f64> = (0..n * k).map(|i| ((i * 7919) % 13) as f64 + 1.0).collect();
            let mut m = m0.clone();
            let (mut s, mut eps) = (Vec::new(), Vec::new());
            Candidate::new("cluster", move |iters| {
                let t0 = Instant::now();
                for _ in 0..iters {
                    // From the same memberships every step (see `cluster`).
                    m.copy_from_slice(&m0);
                    em_step(
                        pool,
                        d,
                        tiers_apps::clustering::Style::Loop,
                        &mut m,
                        k,
                        5.0,
                        &mut s,
                        &mut eps,
                        false,
                    );
                }
                t0.elapsed()
            })
        }
        ScaleData::Image(spec) => Candidate::new("render", move |iters| {
            (0..iters)
                .map(|_| Duration::from_secs_f64(render(pool, spec, TileSchedule::Dynamic).seconds))
                .sum()
        }),
        ScaleData::Seqs(seqs) => {
            let s: Vec<&[u8]> = seqs.iter().map(|x| x.as_slice()).collect();
            Candidate::new("distances", move |iters| {
                let t0 = Instant::now();
                for _ in 0..iters {
                    std::hint::black_box(pairwise(pool, &s, Metric::Kmer(5)).expect("distances"));
                }
                t0.elapsed()
            })
        }
    }
}

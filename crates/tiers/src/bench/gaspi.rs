//! `tiers bench gaspi`: GASPI for C programs, tiers beside GPI-2. One C program
//! (`crates/gaspi/bench/gaspi_bench.c`) is compiled twice, once against tiers' `libtiers_gaspi`
//! and once against GPI-2 (`GPI2_DIR`: the install prefix of a GPI-2 built with its Ethernet
//! device, outside the repository), and run with 2 ranks pinned to the same two processors:
//! tiers' under the cluster tier's launcher (the one `tiers run` uses), GPI-2's started directly
//! with the environment its `gaspi_run` would set (its launcher needs ssh). Each run measures
//! everything (write_notify ping-pong and streamed writes by size, barrier, allreduce,
//! fetch_add, `gaspi_proc_init`); the two alternate for several rounds and each row is the
//! median over the rounds. A run of a whole program cannot be sliced into the iterations
//! `tiers_bench::compare` counts, so the alternation is done here; the limit rows (a
//! cache-line round trip between the two processors, memcpy of the same bytes) go through
//! `compare` in every round, beside the runs.

use super::{Ctx, Outcome};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tiers_bench::{compare, limit, median, progress, Report};
use tiers_cluster::launch::Job;

const SOURCE: &str = include_str!("../../../gaspi/bench/gaspi_bench.c");
/// Where GPI-2 is installed (`include/`, `lib/` or `lib64/`).
pub(super) const GPI2_VAR: &str = "GPI2_DIR";
/// Rounds of (tiers, GPI-2) runs; the rows are medians over them.
const ROUNDS: usize = 3;
/// A run that takes longer than this has hung.
const LIMIT: Duration = Duration::from_secs(300);

/// One run's results: (metric, bytes) -> value as the program wrote it.
type Results = BTreeMap<(String, u64), f64>;

/// The C compiler (`$CC`, else `cc`) if it runs.
pub(super) fn compiler() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let ok = Command::new(&cc)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(cc)
}

fn compile(cc: &str, src: &Path, inc: &Path, lib: &Path, name: &str, out: &Path) -> Outcome {
    let o = Command::new(cc)
        .arg("-O2")
        .arg(format!("-I{}", inc.display()))
        .arg(src)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-l{name}"))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-pthread")
        .arg("-o")
        .arg(out)
        .output()?;
    if !o.status.success() {
        return Err(format!(
            "{cc} {} against {}: {}",
            src.display(),
            lib.display(),
            String::from_utf8_lossy(&o.stderr)
        )
        .into());
    }
    Ok(None)
}

/// GPI-2's include and library directories under `GPI2_DIR`, or why not.
pub(super) fn gpi2() -> Result<(PathBuf, PathBuf), String> {
    let dir = std::env::var_os(GPI2_VAR)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| {
        format!(
            "GPI-2 not run: {GPI2_VAR} is not set or empty (build ../shared/peers/GPI-2 with --with-ethernet \
             under /tmp and point {GPI2_VAR} at its install prefix)"
        )
    })?;
    let inc = dir.join("include");
    let lib = ["lib64", "lib"]
        .iter()
        .map(|l| dir.join(l))
        .find(|l| l.join("libGPI2.so").exists())
        .ok_or_else(|| {
            format!(
                "GPI-2 not run: no libGPI2.so under {GPI2_VAR}={}",
                dir.display()
            )
        })?;
    if !inc.join("GASPI.h").exists() {
        return Err(format!(
            "GPI-2 not run: no include/GASPI.h under {GPI2_VAR}={}",
            dir.display()
        ));
    }
    Ok((inc, lib))
}

fn parse(path: &Path) -> Result<Results, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: {e} (the run wrote no results)", path.display()))?;
    let mut r = Results::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if let [m, b, v] = f[..] {
            r.insert((m.to_string(), b.parse()?), v.parse()?);
        }
    }
    if r.is_empty() {
        return Err(format!("{}: no results", path.display()).into());
    }
    Ok(r)
}

/// tiers: 2 shm ranks under the cluster tier's launcher (pinned to the first two processors).
fn run_tiers(exe: &Path, out: &Path, scale: f64) -> Result<Results, Box<dyn std::error::Error>> {
    let _ = std::fs::remove_file(out);
    let mut job = Job::new(2, exe).args([out.display().to_string(), scale.to_string()]);
    job.timeout = Some(LIMIT);
    job.discard_stdout = true;
    let o = job.run()?;
    if !o.success() {
        return Err(format!("tiers' run failed: {:?} {:?}", o.ends, o.stop).into());
    }
    parse(out)
}

/// GPI-2: 2 processes of `exe ARGS` with the environment `gaspi_run` sets on one host, pinned
/// to `cpus`, rank 0's standard output and error into `rank0_out` when given (else
/// discarded); waits for both, killing them past `LIMIT`. Whether both ended with status 0.
pub(super) fn run_gpi2_pair(
    exe: &Path,
    args: &[String],
    dir: &Path,
    cpus: &[usize],
    rank0_out: Option<&Path>,
) -> Result<bool, Box<dyn std::error::Error>> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    let mfile = dir.join("machines");
    std::fs::write(&mfile, format!("{host}\n{host}\n"))?;
    let mut kids = Vec::new();
    for r in 0..2usize {
        let mut cmd = Command::new(exe);
        cmd.args(args)
            .env("GASPI_MFILE", &mfile)
            .env("GASPI_RANK", r.to_string())
            .env("GASPI_NRANKS", "2")
            .env("GASPI_SOCKET", r.to_string())
            .env("GASPI_MASTER", &host)
            .stdin(Stdio::null());
        match rank0_out.filter(|_| r == 0) {
            Some(out) => {
                let f = std::fs::File::create(out)?;
                cmd.stdout(f.try_clone()?).stderr(f);
            }
            None => {
                cmd.stdout(Stdio::null());
            }
        }
        if let Some(&cpu) = cpus.get(r) {
            super::run_on(&mut cmd, vec![cpu]);
        }
        kids.push(cmd.spawn()?);
    }
    wait_all(&mut kids)
}

/// Waits for `kids` up to `LIMIT` in all, killing any still running then; whether all ended
/// with status 0.
pub(super) fn wait_all(
    kids: &mut [std::process::Child],
) -> Result<bool, Box<dyn std::error::Error>> {
    let start = Instant::now();
    let mut ok = true;
    for k in kids.iter_mut() {
        loop {
            if let Some(st) = k.try_wait()? {
                ok &= st.success();
                break;
            }
            if start.elapsed() > LIMIT {
                let _ = k.kill();
                let _ = k.wait();
                ok = false;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok(ok)
}

/// GPI-2's run of the benchmark program: its results.
fn run_gpi2(
    exe: &Path,
    dir: &Path,
    out: &Path,
    scale: f64,
    cpus: &[usize],
) -> Result<Results, Box<dyn std::error::Error>> {
    let _ = std::fs::remove_file(out);
    let args = [out.display().to_string(), scale.to_string()];
    if !run_gpi2_pair(exe, &args, dir, cpus, None)? {
        return Err("GPI-2's run failed".into());
    }
    parse(out)
}

/// The directory holding `libtiers_gaspi.so` of this build: `deps/` beside the `tiers`
/// binary, where cargo always leaves the newest one (`cargo test` does not copy it up),
/// else beside the binary itself.
pub(super) fn library_dir() -> Result<PathBuf, String> {
    let bin = std::env::current_exe().map_err(|e| format!("the tiers binary's path: {e}"))?;
    let dir = bin.parent().ok_or("no directory of the tiers binary")?;
    [dir.join("deps"), dir.to_path_buf()]
        .into_iter()
        .find(|d| d.join("libtiers_gaspi.so").exists())
        .ok_or_else(|| {
            format!(
                "{} lacks libtiers_gaspi.so: cargo build --release -p tiers-gaspi",
                dir.display()
            )
        })
}

/// How a metric's rows read: the microseconds of one operation (write_bw: per write of `bytes`,
/// so lower is better throughout; init: of gaspi_proc_init).
fn micros(metric: &str, bytes: u64, v: f64) -> f64 {
    match metric {
        "init" => v * 1e6,
        "write_bw" if v > 0.0 => bytes as f64 / (v * 1e9) * 1e6,
        _ => v,
    }
}

pub(super) fn run(c: &Ctx<'_>) -> Outcome {
    let opts = &c.opts;
    let cc = compiler().ok_or("tiers bench gaspi needs a C compiler (set CC or install cc)")?;
    let libdir = &library_dir()?;
    let dir = std::env::temp_dir().join(format!("tiers-bench-gaspi-{}", std::process::id()));
    let inc = dir.join("include");
    std::fs::create_dir_all(&inc)?;
    for (name, text) in crate::cmd::gaspi::HEADERS {
        std::fs::write(inc.join(name), text)?;
    }
    let src = dir.join("gaspi_bench.c");
    std::fs::write(&src, SOURCE)?;
    let tiers_exe = dir.join("bench-tiers");
    compile(&cc, &src, &inc, libdir, "tiers_gaspi", &tiers_exe)?;

    let mut report = Report::new("gaspi", "us", true);
    let gpi2_exe = match gpi2() {
        Ok((ginc, glib)) => {
            let exe = dir.join("bench-gpi2");
            compile(&cc, &src, &ginc, &glib, "GPI2", &exe)?;
            report.note(format!(
                "gpi2: the same program linked against GPI-2 from {}={} (its TCP device), started with gaspi_run's environment",
                GPI2_VAR,
                glib.parent().unwrap_or(&glib).display()
            ));
            Some(exe)
        }
        Err(why) => {
            report.note(why);
            None
        }
    };
    let cpus = tiers_node::affinity::get().unwrap_or_default();
    let pinned = if cpus.len() >= 2 { &cpus[..2] } else { &[][..] };
    // The program's repetition counts are tuned for --min-time 0.5.
    let scale = (opts.min_time / 0.5).clamp(0.02, 20.0);

    // The limits, measured in every round beside the runs (the host may move the two
    // processors closer or apart between rounds): half a cache-line round trip between the
    // two processors (one one-way transfer: what a notification, a barrier of 2 or a
    // reduction of 2 must cross), and memcpy of each size (what a transfer of the bytes must
    // do at least once).
    let (a, b) = limit::pair(&cpus).unwrap_or((0, 0));
    if a == b {
        report.note("no limit rows for latencies: fewer than 2 processors");
    }
    let limit_time = (opts.min_time / 5.0).max(0.01);
    let mut half_rts: Vec<f64> = Vec::new();
    let mut copies: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    let mut runs: BTreeMap<&str, Vec<Results>> = BTreeMap::new();
    for round in 0..ROUNDS {
        if a != b {
            let mut cands = [limit::round_trip(a, b)];
            half_rts.push(compare(limit_time, &mut cands)[0].0 / 2.0 * 1e6);
        }
        let mut order = vec!["tiers"];
        if gpi2_exe.is_some() {
            order.push("gpi2");
        }
        if round % 2 == 1 {
            order.reverse();
        }
        for imp in order {
            progress(
                opts,
                format!("gaspi: round {} of {ROUNDS}, {imp}", round + 1),
            );
            let out = dir.join(format!("{imp}.out"));
            let r = match (imp, &gpi2_exe) {
                ("gpi2", Some(exe)) => run_gpi2(exe, &dir, &out, scale, pinned)?,
                _ => run_tiers(&tiers_exe, &out, scale)?,
            };
            if imp == "tiers" {
                for &(ref m, bytes) in r.keys() {
                    if m == "pingpong" || m == "write_bw" {
                        let mut cands = [limit::memcpy(bytes as usize)];
                        let t = compare(limit_time, &mut cands)[0].0 * 1e6;
                        copies.entry(bytes).or_default().push(t);
                    }
                }
            }
            runs.entry(imp).or_default().push(r);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);

    let half_rt = (!half_rts.is_empty()).then(|| median(&half_rts));
    let keys: Vec<(String, u64)> = runs["tiers"][0].keys().cloned().collect();
    for (metric, bytes) in keys {
        let params = [("op", json!(metric)), ("bytes", json!(bytes))];
        for (imp, rs) in &runs {
            let vals: Vec<f64> = rs
                .iter()
                .filter_map(|r| r.get(&(metric.clone(), bytes)))
                .map(|&v| micros(&metric, bytes, v))
                .collect();
            if vals.is_empty() {
                continue;
            }
            let row = report.push(imp, &params, median(&vals));
            if metric == "write_bw" {
                row.extra
                    .push(("GB/s".into(), json!(bytes as f64 / median(&vals) / 1e3)));
            }
        }
        let copy = || copies.get(&bytes).map_or(0.0, |v| median(v));
        match (metric.as_str(), half_rt) {
            ("pingpong", Some(h)) => {
                let v = h + copy();
                report.push_limit(
                    &params,
                    v,
                    format!(
                        "half a {} plus {}",
                        limit::round_trip_note(a, b),
                        limit::memcpy_note()
                    ),
                );
            }
            ("barrier" | "allreduce", Some(h)) => {
                report.push_limit(
                    &params,
                    h,
                    format!("half a {}", limit::round_trip_note(a, b)),
                );
            }
            ("write_bw", _) => {
                report.push_limit(&params, copy(), limit::memcpy_note());
            }
            _ => {}
        }
    }
    report.note(format!(
        "2 ranks pinned to cpus {pinned:?}; every value is the median of {ROUNDS} runs of the whole program per implementation, alternating, and each limit the median of its measurements beside them; write_bw rows are microseconds per write of `bytes` (GB/s beside), init the seconds of gaspi_proc_init in microseconds"
    ));
    Ok(Some(report))
}

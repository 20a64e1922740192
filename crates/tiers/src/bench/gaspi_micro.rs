//! `tiers bench gaspi-micro`: GPI-2's own micro-benchmarks (`tests/microbenchmarks` of the
//! GPI-2 sources: ping_pong, write/read latency and bandwidth, barrier, allreduce, init time…),
//! their sources unmodified, compiled once against tiers' `libtiers_gaspi` and once against
//! GPI-2 itself (`GPI2_DIR`, built with its Ethernet device), and run side by side with 2 ranks
//! pinned to the same two processors: tiers' under `tiers gaspi run -n 2` (shm engine), GPI-2's
//! started with the environment its `gaspi_run` sets. The two alternate round by round; each
//! row is the median over the rounds of the figure the program itself prints, in microseconds
//! per operation (bandwidth programs: the bytes over the printed MB/s).
//!
//! Options after `--`: `--src DIR` (the micro-benchmarks; default `../shared/peers/GPI-2/tests/
//! microbenchmarks`, or `$TIERS_PEERS/GPI-2/tests/microbenchmarks`), `--rounds R` (default 3),
//! `--only a,b` (programs by name), `--from DIR` (no runs: a report of the outputs that runs
//! made elsewhere left in DIR, as `.ci/multihost` does across hosts with `MULTIHOST_GASPI`).

use super::gaspi::{compiler, gpi2, run_gpi2_pair, wait_all, GPI2_VAR};
use super::{Ctx, Outcome};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tiers_bench::{compare, limit, median, progress, Report};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// What a program prints, and how its figures read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// `bytes  µs` per line.
    Latency,
    /// `bytes  MB/s  Mpps` per line: µs per message = bytes / (MB/s).
    Bandwidth,
    /// `elements  sum  µs usecs` per line.
    Reduce,
    /// One `time: µs usec` line.
    Barrier,
    /// `gaspi_proc_init time for N ranks: seconds` lines.
    Init,
}

fn shape_of(program: &str) -> Shape {
    match program {
        p if p.ends_with("_bw") => Shape::Bandwidth,
        p if p.contains("allreduce") => Shape::Reduce,
        p if p.contains("barrier") => Shape::Barrier,
        p if p.starts_with("init_time") => Shape::Init,
        _ => Shape::Latency,
    }
}

/// The figures of one run: size (bytes, elements, or 0) -> µs per operation. Each size's first
/// line counts (rank 0 prints the table).
fn parse(program: &str, text: &str) -> BTreeMap<u64, f64> {
    let shape = shape_of(program);
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let nums: Vec<f64> = line
            .split(|c: char| c.is_whitespace() || c == ':')
            .filter_map(|t| t.parse::<f64>().ok())
            .collect();
        // A table row holds numbers only (allreduce's ends in "usecs"); any other line that
        // happens to hold two or three numbers (a launcher's "2 x 1, set 1") is not one.
        let table_row = line
            .split_whitespace()
            .all(|t| t.parse::<f64>().is_ok() || t == "usecs");
        if !table_row && matches!(shape, Shape::Latency | Shape::Bandwidth | Shape::Reduce) {
            continue;
        }
        let (size, us) = match shape {
            Shape::Barrier if line.trim_start().starts_with("time") => match nums[..] {
                [v] => (0, v),
                _ => continue,
            },
            // `… time for R ranks: S` per rank R (the program prints its rank there): rank 0's,
            // as GPI-2's runs keep rank 0's output only.
            Shape::Init if line.contains("gaspi_proc_init time") => match nums[..] {
                [0.0, s] => (0, s * 1e6),
                _ => continue,
            },
            Shape::Latency => match nums[..] {
                [b, v] if b >= 1.0 && b.fract() == 0.0 => (b as u64, v),
                _ => continue,
            },
            Shape::Bandwidth => match nums[..] {
                [b, bw, _] if b >= 1.0 && b.fract() == 0.0 && bw > 0.0 => (b as u64, b / bw),
                _ => continue,
            },
            Shape::Reduce => match nums[..] {
                [e, _, v] if e >= 1.0 && e.fract() == 0.0 => (e as u64, v),
                _ => continue,
            },
            _ => continue,
        };
        if us.is_finite() && us >= 0.0 {
            out.entry(size).or_insert(us);
        }
    }
    out
}

/// Figures over rounds or sets: (program, implementation) -> size -> values.
type Figures = BTreeMap<(String, &'static str), BTreeMap<u64, Vec<f64>>>;

/// Pushes the median row of each implementation measured at `size` of program `p` (one size
/// parameter for every program, so that one figure shows them all: bytes for transfers,
/// elements for allreduce, 0 for barrier and init); with `sets`, each row says over how many.
/// The implementations a report's rows name, in their order: tiers (the shm engine on one
/// host, the mpi engine across hosts), the mpi engine with one-sided operations as messages
/// (`TIERS_MPI_ONESIDED=messages`, across hosts, `--from`), tiers' tcp engine (across hosts,
/// `--from`), GPI-2.
const IMPLS: [&str; 4] = ["tiers", "tiers-mpi-msg", "tiers-tcp", "gpi2"];

fn push_medians(report: &mut Report, vals: &Figures, p: &str, size: u64, sets: bool) {
    let params = [("program", json!(p)), ("size", json!(size))];
    for imp in IMPLS {
        if let Some(v) = vals.get(&(p.to_string(), imp)).and_then(|m| m.get(&size)) {
            let row = report.push(imp, &params, median(v));
            if sets {
                row.extra.push(("sets".into(), json!(v.len())));
            }
        }
    }
}

/// The micro-benchmark programs: those GPI-2's `Makefile.am` builds (`bin/NAME.bin`).
fn programs(src: &Path) -> Res<Vec<String>> {
    let make = std::fs::read_to_string(src.join("Makefile.am"))
        .map_err(|e| format!("{}: {e}", src.join("Makefile.am").display()))?;
    let mut v: Vec<String> = Vec::new();
    for tok in make.split_whitespace() {
        if let Some(name) = tok
            .strip_prefix("bin/")
            .and_then(|t| t.strip_suffix(".bin"))
        {
            if src.join(format!("{name}.c")).exists() && !v.iter().any(|x| x == name) {
                v.push(name.to_string());
            }
        }
    }
    if v.is_empty() {
        return Err(format!("{}: names no micro-benchmark", src.display()).into());
    }
    Ok(v)
}

fn compile(
    cc: &str,
    src: &Path,
    prog: &str,
    inc: &Path,
    lib: &Path,
    name: &str,
    out: &Path,
) -> Res<()> {
    let o = Command::new(cc)
        .args(["-O2", "-w"])
        .arg(format!("-I{}", inc.display()))
        .arg(src.join(format!("{prog}.c")))
        .arg(src.join("common.c"))
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-l{name}"))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-pthread")
        .arg("-o")
        .arg(out)
        .output()?;
    if !o.status.success() {
        return Err(format!(
            "{prog} against {}: {}",
            lib.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        )
        .into());
    }
    Ok(())
}

/// tiers: `tiers gaspi run -n 2 PROGRAM` (the launcher pins the ranks); the table (some
/// programs print it on standard error).
fn run_tiers(tiers: &Path, exe: &Path, out: &Path) -> Res<String> {
    let f = std::fs::File::create(out)?;
    let mut kid = Command::new(tiers)
        .args(["gaspi", "run", "-n", "2"])
        .arg(exe)
        .stdin(Stdio::null())
        .stdout(f.try_clone()?)
        .stderr(f)
        .spawn()?;
    if !wait_all(std::slice::from_mut(&mut kid))? {
        return Err(format!("{} failed on tiers", exe.display()).into());
    }
    Ok(std::fs::read_to_string(out)?)
}

/// GPI-2: 2 processes with `gaspi_run`'s environment, pinned to `cpus`; rank 0's table
/// (standard output and error).
fn run_gpi2(exe: &Path, dir: &Path, out: &Path, cpus: &[usize]) -> Res<String> {
    if !run_gpi2_pair(exe, &[], dir, cpus, Some(out))? {
        return Err(format!("{} failed on GPI-2", exe.display()).into());
    }
    Ok(std::fs::read_to_string(out)?)
}

fn arg<'a>(args: &'a [String], key: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == key)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// The micro-benchmarks' folder: `--src`, else GPI-2's under the peers folder.
fn source_dir(args: &[String]) -> Res<PathBuf> {
    if let Some(s) = arg(args, "--src") {
        return Ok(PathBuf::from(s));
    }
    let peers = std::env::var_os("TIERS_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../shared/peers"));
    let d = peers.join("GPI-2/tests/microbenchmarks");
    if d.is_dir() {
        Ok(d)
    } else {
        Err(format!(
            "gaspi-micro: no micro-benchmarks at {} (give --src DIR: GPI-2's tests/microbenchmarks)",
            d.display()
        )
        .into())
    }
}

/// The outputs of runs made elsewhere (`.ci/multihost` with `MULTIHOST_GASPI=DIR`, across
/// hosts): files `PROGRAM-IMPL-SET.txt`, or `PROGRAM-IMPL-SET-RANK.txt` of which rank 0's
/// counts, IMPL `tiers` (the mpi engine), `tiersmsg` (the mpi engine with one-sided operations
/// as messages, rows `tiers-mpi-msg`), `tierstcp` (tiers' tcp engine, rows `tiers-tcp`) or
/// `gpi2`. Each row is the median over the sets.
fn from_dir(dir: &Path) -> Res<Report> {
    let mut vals = Figures::new();
    // `tiers gaspi net-limit` between the same hosts in the same job: size -> (half round
    // trips, streamed times) over the sets.
    let mut net: BTreeMap<u64, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    let mut files = 0;
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("gaspi-micro: --from {}: {e}", dir.display()))?;
    for e in entries {
        let path = e?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(stem) = name.strip_suffix(".txt") else {
            continue;
        };
        // Program names have no '-' (GPI-2's use '_').
        let f: Vec<&str> = stem.split('-').collect();
        let (prog, imp, set, rank) = match f[..] {
            [p, i, s] => (p, i, s, "0"),
            [p, i, s, r] => (p, i, s, r),
            _ => continue,
        };
        if (prog, imp) == ("netlimit", "tcp") && set.parse::<u32>().is_ok() {
            let text = std::fs::read_to_string(&path)?;
            let mut any = false;
            for line in text.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                if let ["net-limit", b, h, t] = f[..] {
                    if let (Ok(b), Ok(h), Ok(t)) = (b.parse(), h.parse(), t.parse()) {
                        let e = net.entry(b).or_default();
                        e.0.push(h);
                        e.1.push(t);
                        any = true;
                    }
                }
            }
            if !any {
                return Err(format!(
                    "gaspi-micro: {} holds no net-limit lines: {}",
                    path.display(),
                    text.trim()
                )
                .into());
            }
            continue;
        }
        let imp = match imp {
            "tiers" => "tiers",
            "tierstcp" => "tiers-tcp",
            "tiersmsg" => "tiers-mpi-msg",
            "gpi2" => "gpi2",
            _ => continue,
        };
        if rank != "0" || set.parse::<u32>().is_err() {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        let figures = parse(prog, &text);
        if figures.is_empty() {
            return Err(format!(
                "gaspi-micro: {} holds no figures of {prog}: {}",
                path.display(),
                text.trim()
            )
            .into());
        }
        files += 1;
        let e = vals.entry((prog.to_string(), imp)).or_default();
        for (size, us) in figures {
            e.entry(size).or_default().push(us);
        }
    }
    if files == 0 {
        return Err(format!(
            "gaspi-micro: {} holds no PROGRAM-IMPL-SET[-RANK].txt outputs",
            dir.display()
        )
        .into());
    }
    let mut report = Report::new("gaspi-micro", "us", true);
    let progs: std::collections::BTreeSet<&String> = vals.keys().map(|(p, _)| p).collect();
    for p in progs {
        let sizes: std::collections::BTreeSet<u64> = IMPLS
            .iter()
            .filter_map(|i| vals.get(&(p.clone(), *i)))
            .flat_map(|m| m.keys().copied())
            .collect();
        for size in sizes {
            push_medians(&mut report, &vals, p, size, true);
            push_net_limit(&mut report, &net, p, size);
        }
    }
    let limits = if net.is_empty() {
        "no limit row: no netlimit-tcp-SET.txt output (tiers gaspi net-limit) was there"
    } else {
        "limit rows from the netlimit-tcp-SET.txt outputs (tiers gaspi net-limit between the same hosts, in the same job): half a TCP round trip of the bytes for latencies, the time per message of a one-way TCP stream for bandwidths, half an 8-byte round trip for barrier and allreduce (2 ranks), medians over the sets"
    };
    report.note(format!(
        "parsed from the outputs in {} (runs made there, e.g. across hosts by .ci/multihost with MULTIHOST_GASPI): each row the median over the sets of the figure rank 0 printed, microseconds per operation as in a local run; {limits}",
        dir.display()
    ));
    Ok(report)
}

/// The network's limit row for program `p` at `size` (see `from_dir`), where `net` has it.
fn push_net_limit(
    report: &mut Report,
    net: &BTreeMap<u64, (Vec<f64>, Vec<f64>)>,
    p: &str,
    size: u64,
) {
    let params = [("program", json!(p)), ("size", json!(size))];
    // Which size of the network's table, which of its two figures, and what it stands for.
    let (at, streamed, note) = match shape_of(p) {
        Shape::Latency => (
            size,
            false,
            "half a TCP round trip of the bytes between the hosts",
        ),
        Shape::Bandwidth => (
            size,
            true,
            "a message of the bytes in a one-way TCP stream between the hosts",
        ),
        Shape::Barrier | Shape::Reduce => {
            (8, false, "half an 8-byte TCP round trip between the hosts")
        }
        Shape::Init => return,
    };
    let Some((halves, streams)) = net.get(&at) else {
        return;
    };
    let v = median(if streamed { streams } else { halves });
    report.push_limit(&params, v, note.to_string());
}

pub(super) fn run(c: &Ctx<'_>) -> Outcome {
    if let Some(d) = arg(c.args, "--from") {
        return Ok(Some(from_dir(Path::new(d))?));
    }
    let cc =
        compiler().ok_or("tiers bench gaspi-micro needs a C compiler (set CC or install cc)")?;
    let tiers = std::env::current_exe()?;
    let libdir = &super::gaspi::library_dir()?;
    let src = source_dir(c.args)?;
    let mut progs = programs(&src)?;
    if let Some(only) = arg(c.args, "--only") {
        let want: Vec<&str> = only.split(',').map(str::trim).collect();
        if let Some(bad) = want.iter().find(|w| !progs.iter().any(|p| p == *w)) {
            return Err(format!(
                "gaspi-micro: no program {bad:?} (there are {})",
                progs.join(", ")
            )
            .into());
        }
        progs.retain(|p| want.contains(&p.as_str()));
    }
    let rounds: usize = match arg(c.args, "--rounds") {
        Some(r) => r
            .parse()
            .map_err(|e| format!("gaspi-micro: --rounds {r:?}: {e}"))?,
        None => 3,
    };
    if rounds == 0 {
        return Err("gaspi-micro: --rounds must be at least 1".into());
    }
    let dir = std::env::temp_dir().join(format!("tiers-bench-gaspi-micro-{}", std::process::id()));
    let inc = dir.join("include");
    std::fs::create_dir_all(&inc)?;
    let result = measure(c, &cc, &src, &progs, rounds, &dir, &inc, &tiers, libdir);
    let _ = std::fs::remove_dir_all(&dir);
    let mut report = result?;
    report.note(format!(
        "GPI-2's micro-benchmarks from {}, unmodified; each row the median over {rounds} alternating rounds of the figure rank 0 prints, as microseconds per operation (bandwidth programs: bytes / printed MB/s; init_time: its seconds, printed with two decimals); size: bytes for transfers, elements for allreduce, 0 for barrier and init_time; tiers under `tiers gaspi run -n 2` (shm engine), both pinned to the same two processors",
        src.display()
    ));
    Ok(Some(report))
}

#[allow(clippy::too_many_arguments)]
fn measure(
    c: &Ctx<'_>,
    cc: &str,
    src: &Path,
    progs: &[String],
    rounds: usize,
    dir: &Path,
    inc: &Path,
    tiers: &Path,
    libdir: &Path,
) -> Res<Report> {
    let opts = &c.opts;
    for (name, text) in crate::cmd::gaspi::HEADERS {
        std::fs::write(inc.join(name), text)?;
    }
    let mut report = Report::new("gaspi-micro", "us", true);
    let gpi = match gpi2() {
        Ok(g) => Some(g),
        Err(why) => {
            report.note(why);
            None
        }
    };
    if let Some((_, glib)) = &gpi {
        report.note(format!(
            "gpi2: the same sources linked against GPI-2 from {GPI2_VAR}={} (its TCP device), started with gaspi_run's environment",
            glib.parent().unwrap_or(glib).display()
        ));
    }
    let mut exes: Vec<(String, PathBuf, Option<PathBuf>)> = Vec::new();
    for p in progs {
        let t = dir.join(format!("{p}-tiers"));
        compile(cc, src, p, inc, libdir, "tiers_gaspi", &t)?;
        let g = match &gpi {
            Some((ginc, glib)) => {
                let g = dir.join(format!("{p}-gpi2"));
                compile(cc, src, p, ginc, glib, "GPI2", &g)?;
                Some(g)
            }
            None => None,
        };
        exes.push((p.clone(), t, g));
    }
    let cpus = tiers_node::affinity::get().unwrap_or_default();
    let pinned = if cpus.len() >= 2 { &cpus[..2] } else { &[][..] };
    // (program, implementation) -> size -> values over the rounds.
    let mut vals = Figures::new();
    for round in 0..rounds {
        for (p, t, g) in &exes {
            let mut order: Vec<&str> = vec!["tiers"];
            if g.is_some() {
                order.push("gpi2");
            }
            if round % 2 == 1 {
                order.reverse();
            }
            for imp in order {
                progress(
                    opts,
                    format!("gaspi-micro: round {}/{rounds}, {p} on {imp}", round + 1),
                );
                let out = dir.join(format!("{p}-{imp}.out"));
                let text = match (imp, g) {
                    ("gpi2", Some(g)) => run_gpi2(g, dir, &out, pinned)?,
                    _ => run_tiers(tiers, t, &out)?,
                };
                let figures = parse(p, &text);
                if figures.is_empty() {
                    return Err(format!("{p} on {imp} printed no figures: {}", text.trim()).into());
                }
                let e = vals.entry((p.clone(), imp)).or_default();
                for (size, us) in figures {
                    e.entry(size).or_default().push(us);
                }
            }
        }
    }
    // Limits: half a cache-line round trip (what a notification, a barrier or a reduction of
    // 2 must cross) and memcpy of the bytes (what a transfer must do once).
    let (a, b) = limit::pair(&cpus).unwrap_or((0, 0));
    let limit_time = (opts.min_time / 5.0).max(0.01);
    let half_rt = (a != b).then(|| {
        let mut cands = [limit::round_trip(a, b)];
        compare(limit_time, &mut cands)[0].0 / 2.0 * 1e6
    });
    for (p, _, _) in &exes {
        let shape = shape_of(p);
        let sizes: Vec<u64> = vals
            .get(&(p.clone(), "tiers"))
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default();
        for size in sizes {
            push_medians(&mut report, &vals, p, size, false);
            let params = [("program", json!(p)), ("size", json!(size))];
            match (shape, half_rt) {
                (Shape::Barrier | Shape::Reduce, Some(h)) => {
                    report.push_limit(
                        &params,
                        h,
                        format!("half a {}", limit::round_trip_note(a, b)),
                    );
                }
                // A ping-pong of writes sends back what it received: each copy reads lines
                // the other side wrote last, which is the cross-core copy's cost, not a
                // private memcpy's (4-byte rows are notifications alone).
                (Shape::Latency, Some(_)) if p == "ping_pong" && size > 4 => {
                    let mut cands = [limit::cross_copy(a, b, size as usize)];
                    let v = compare(limit_time, &mut cands)[0].0 * 1e6;
                    report.push_limit(&params, v, limit::cross_copy_note(a, b));
                }
                (Shape::Latency | Shape::Bandwidth, Some(h)) => {
                    let mut cands = [limit::memcpy(size as usize)];
                    let copy = compare(limit_time, &mut cands)[0].0 * 1e6;
                    let v = if shape == Shape::Latency {
                        h + copy
                    } else {
                        copy
                    };
                    report.push_limit(
                        &params,
                        v,
                        if shape == Shape::Latency {
                            format!(
                                "half a {} plus {}",
                                limit::round_trip_note(a, b),
                                limit::memcpy_note()
                            )
                        } else {
                            limit::memcpy_note()
                        },
                    );
                }
                _ => {}
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_shape_parses() {
        let lat = "           4\t0.13\n           8\t0.46\nnoise 1 2 3\n";
        assert_eq!(
            parse("ping_pong", lat),
            BTreeMap::from([(4, 0.13), (8, 0.46)])
        );
        let bw = "-----\n       Bytes\t   BW\t\tMsgRate(Mpps)\n-----\n           2\t29.02\t\t15.2135\n        4096\t40960.00\t\t10.0\n";
        let p = parse("write_bw", bw);
        assert!((p[&2] - 2.0 / 29.02).abs() < 1e-12 && (p[&4096] - 0.1).abs() < 1e-12);
        let red =
            "CPU freq: 2300.00\n#elems\tsum\tusecs\n1\t2.00\t0.13 usecs\n255\t2.00\t1.11 usecs\n";
        assert_eq!(
            parse("nb_allreduce", red),
            BTreeMap::from([(1, 0.13), (255, 1.11)])
        );
        let bar = "my rank: 0 tnc: 2 (vers: 1.60)\ncpu freq: 2300.00\ntime: 0.260869 usec\n";
        assert_eq!(parse("barrier", bar), BTreeMap::from([(0, 0.260869)]));
        let init =
            "gaspi_proc_init time for 0 ranks: 0.00\ngaspi_proc_init time for 1 ranks: 0.25\n";
        // Rank 0's line only (GPI-2's runs keep rank 0's output).
        assert_eq!(parse("init_time", init), BTreeMap::from([(0, 0.0)]));
        let init = "gaspi_proc_init time for 0 ranks: 1.25\n";
        assert_eq!(parse("init_time", init), BTreeMap::from([(0, 1_250_000.0)]));
        // Rank 1's copy of a line (both ranks printing) does not count twice.
        assert_eq!(
            parse("write_lat", "8 0.5\n8 0.7\n"),
            BTreeMap::from([(8, 0.5)])
        );
        assert!(parse("write_lat", "").is_empty());
        // A launcher's line with numbers in it is not a row.
        assert!(parse(
            "write_lat",
            "multihost: gaspi write_lat on tiers, 2 x 1, set 1\n"
        )
        .is_empty());
        assert!(parse("write_bw", "run 2 of 3 on 4 cores\n").is_empty());
    }

    #[test]
    fn outputs_of_runs_elsewhere_make_a_report() {
        let d = std::env::temp_dir().join(format!("tiers-gm-from-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let lat = |v: f64| format!("-----\n Bytes Lat\n-----\n  4\t{v}\n  8\t{}\n", v * 2.0);
        std::fs::write(d.join("write_lat-tiers-1.txt"), lat(1.0)).unwrap();
        std::fs::write(d.join("write_lat-tiers-2.txt"), lat(3.0)).unwrap();
        std::fs::write(d.join("write_lat-tiers-3.txt"), lat(2.0)).unwrap();
        std::fs::write(d.join("write_lat-gpi2-1-0.txt"), lat(10.0)).unwrap();
        // Rank 1's output and other files do not count.
        std::fs::write(d.join("write_lat-gpi2-1-1.txt"), lat(99.0)).unwrap();
        std::fs::write(d.join("notes.txt"), "nothing").unwrap();
        std::fs::write(d.join("barrier-tiers-1.txt"), "time: 5.5 usec\n").unwrap();
        // tiers' tcp engine: rows of their own.
        std::fs::write(d.join("write_lat-tierstcp-1.txt"), lat(0.25)).unwrap();
        let r = from_dir(&d).unwrap();
        let v = |imp: &str, p: &str, size: u64| {
            r.value(imp, &[("program", json!(p)), ("size", json!(size))])
        };
        assert_eq!(v("tiers", "write_lat", 4), Some(2.0));
        assert_eq!(v("tiers", "write_lat", 8), Some(4.0));
        assert_eq!(v("gpi2", "write_lat", 4), Some(10.0));
        assert_eq!(v("tiers", "barrier", 0), Some(5.5));
        assert_eq!(v("tiers-tcp", "write_lat", 8), Some(0.5));
        assert_eq!(r.rows.len(), 7);
        assert!(
            r.rows.iter().all(|x| !x.is_limit()),
            "no net-limit output: no limit row"
        );
        // The network's limit, measured in the same job: medians over its sets, half a round
        // trip for latencies (at the same size), an 8-byte one for the barrier.
        let net =
            |h4: f64, h8: f64| format!("# net-limit\nnet-limit 4 {h4} 0.1\nnet-limit 8 {h8} 0.2\n");
        std::fs::write(d.join("netlimit-tcp-1.txt"), net(0.5, 0.6)).unwrap();
        std::fs::write(d.join("netlimit-tcp-2.txt"), net(0.7, 0.8)).unwrap();
        std::fs::write(d.join("netlimit-tcp-3.txt"), net(0.9, 1.0)).unwrap();
        let r = from_dir(&d).unwrap();
        let lim = |p: &str, size: u64| {
            r.value(limit::IMPL, &[("program", json!(p)), ("size", json!(size))])
        };
        assert_eq!(lim("write_lat", 4), Some(0.7));
        assert_eq!(lim("write_lat", 8), Some(0.8));
        assert_eq!(lim("barrier", 0), Some(0.8));
        assert_eq!(r.rows.len(), 10);
        std::fs::write(d.join("netlimit-tcp-4.txt"), "connection refused").unwrap();
        let e = from_dir(&d).unwrap_err().to_string();
        assert!(e.contains("netlimit-tcp-4.txt"), "{e}");
        std::fs::remove_file(d.join("netlimit-tcp-4.txt")).unwrap();
        // An output without figures is an error that names the file.
        std::fs::write(d.join("ping_pong-tiers-1.txt"), "GPI Startup failed").unwrap();
        let e = from_dir(&d).unwrap_err().to_string();
        assert!(e.contains("ping_pong-tiers-1.txt"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
        assert!(from_dir(&d).is_err());
    }

    #[test]
    fn the_programs_come_from_the_makefile() {
        let d = std::env::temp_dir().join(format!("tiers-gm-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("Makefile.am"),
            "micro_tests = bin/ping_pong.bin \\\n bin/barrier.bin bin/missing.bin\n",
        )
        .unwrap();
        for f in ["ping_pong.c", "barrier.c"] {
            std::fs::write(d.join(f), "").unwrap();
        }
        assert_eq!(programs(&d).unwrap(), ["ping_pong", "barrier"]);
        std::fs::write(d.join("Makefile.am"), "nothing\n").unwrap();
        assert!(programs(&d).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}

//! `tiers bench fft2d`: the complex N×N 2-D FFT of `tiers fft2d` under
//! `tiers run -n M -- tiers bench fft2d [N]` (or on one rank), in ms per transform:
//!
//! - `tiers-overlap`: the transpose overlapped with the first pass (notified writes of each
//!   finished block of rows while the next is transformed);
//! - `tiers-plain`: every row transformed, then the transpose;
//! - `serial`: the same 1-D plans on the whole array in one process (rank 0, its threads);
//! - `fftw-mpi`: FFTW's MPI 2-D transform (`FFTW_MPI_TRANSPOSED_OUT`, FFTW_ESTIMATE, one
//!   thread per rank) on as many MPI ranks, started by rank 0 with mpirun; built at bench time
//!   with mpicc from `peers/fftw_mpi_2d.c` when fftw3-mpi.h is there, else a note says why not;
//! - `limit`: streaming each rank's share of the array through memory three times (first pass,
//!   transpose, second pass) at the memcpy bandwidth every rank measures at once in this run.
//!
//! The candidates alternate round by round; each row is the median over rounds of the maximum
//! over ranks. The output is left transposed in every candidate but `serial` (as FFTW's
//! `TRANSPOSED_OUT`); `serial` includes its transpose back.

use super::{Ctx, Outcome};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use tiers_apps::fft2d::{self, Dist, Variant};
use tiers_bench::{limit, median, progress, Report};
use tiers_cluster::{Op, Timeout, World};

const ROUNDS: usize = 5;
/// The peer's source, written out and compiled at bench time.
const FFTW_SOURCE: &str = include_str!("../../peers/fftw_mpi_2d.c");

/// Builds the FFTW-MPI peer; `Err` says why it cannot be.
fn build_fftw() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("tiers-fftw-peer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let src = dir.join("fftw_mpi_2d.c");
    let exe = dir.join("fftw_mpi_2d");
    std::fs::write(&src, FFTW_SOURCE).map_err(|e| format!("{}: {e}", src.display()))?;
    let out = Command::new("mpicc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-lfftw3_mpi", "-lfftw3", "-lm"])
        .output()
        .map_err(|e| format!("mpicc: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().next().unwrap_or("").to_string();
        return Err(format!(
            "mpicc could not build it (is libfftw3-mpi-dev installed?): {first}"
        ));
    }
    Ok(exe)
}

/// One run of the peer on `ranks` MPI ranks: seconds per transform.
fn run_fftw(exe: &Path, ranks: usize, n: usize, reps: usize) -> Result<f64, String> {
    let mut cmd = Command::new("mpirun");
    cmd.args(["-n", &ranks.to_string(), "--bind-to", "none"])
        .arg(exe)
        .args([n.to_string(), reps.to_string()]);
    // The ranks of a tiers job may be pinned to one core each; the peer's ranks get the
    // whole machine, as tiers' ranks had between them.
    super::run_on(&mut cmd, (0..libc::CPU_SETSIZE as usize).collect());
    let out = cmd.output().map_err(|e| format!("mpirun: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("seconds_per_transform "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| {
            let err = String::from_utf8_lossy(&out.stderr);
            // mpirun frames its messages in lines of dashes: the first line of text says why.
            let why = err
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.chars().all(|c| c == '-'))
                .unwrap_or("no output");
            format!("mpirun -n {ranks} fftw_mpi_2d failed: {why}")
        })
}

fn one_rank(w: &World, ctx: &Ctx<'_>, n: usize) -> Result<Option<Report>, String> {
    let e = |e: tiers_apps::Error| e.to_string();
    let c = |e: tiers_cluster::Error| e.to_string();
    let (me, size) = (w.rank(), w.size());
    let mut r = Report::new("fft2d", "ms/transform", true);
    let fftw = if me == 0 { Some(build_fftw()) } else { None };
    let mut fftw_note = None;
    let share = tiers_cluster::decomp::split(n, size, me).len() * n * 16;
    let mut copier = limit::memcpy(share);
    for &threads in &ctx.opts.threads {
        let mut d = Dist::new(w, n, threads).map_err(e)?;
        let input = fft2d::generate_rows(1, n, d.rows());
        let whole = (me == 0).then(|| fft2d::generate_rows(1, n, 0..n));
        // This rank's rows of Xᵀ, written by every transform (made once, as FFTW's buffers).
        let mut out = input.clone();
        // Blocks of the overlapped pass: about 8, each at least a few rows.
        let blocks = (d.rows().len() / 4).clamp(1, 8);
        // samples[candidate][round]: overlap, plain, serial, fftw, limit.
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); 5];
        // The peer runs long enough per launch to hide mpirun's start: reps from the first
        // serial time.
        let mut reps = 1;
        for round in 0..ROUNDS {
            if me == 0 {
                progress(
                    &ctx.opts,
                    format!("fft2d n={n} ranks={size} threads={threads} round {round}"),
                );
            }
            for (ci, v) in [Variant::Overlap, Variant::Plain].into_iter().enumerate() {
                let mut rows = input.clone();
                w.barrier(Timeout::Block).map_err(c)?;
                let t = d
                    .transform_into(v, blocks, &mut rows, &mut out)
                    .map_err(e)?;
                let mut tmax = [0.0];
                w.allreduce(&[t.total], &mut tmax, Op::Max, Timeout::Block)
                    .map_err(c)?;
                samples[ci].push(tmax[0] * 1e3);
            }
            // Serial: rank 0 alone.
            w.barrier(Timeout::Block).map_err(c)?;
            if let Some(x) = &whole {
                let mut a = x.clone();
                let t0 = Instant::now();
                fft2d::fft2d(n, &mut a, threads).map_err(e)?;
                let s = t0.elapsed().as_secs_f64();
                samples[2].push(s * 1e3);
                reps = ((0.3 / s.max(1e-6)) as usize).clamp(1, 1000);
            }
            // FFTW-MPI: rank 0 starts it on as many MPI ranks; the others wait.
            if let Some(Ok(exe)) = &fftw {
                match run_fftw(exe, size, n, reps) {
                    Ok(s) => samples[3].push(s * 1e3),
                    Err(msg) => fftw_note = Some(msg),
                }
            }
            w.barrier(Timeout::Block).map_err(c)?;
            // Limit: every rank copies its share at once, three times.
            let t = (copier.run)(3).as_secs_f64();
            let mut tmax = [0.0];
            w.allreduce(&[t], &mut tmax, Op::Max, Timeout::Block)
                .map_err(c)?;
            samples[4].push(tmax[0] * 1e3);
        }
        d.finish().map_err(e)?;
        let params = [
            ("n", n.into()),
            ("ranks", size.into()),
            ("threads", threads.into()),
        ];
        r.push("tiers-overlap", &params, median(&samples[0]));
        r.push("tiers-plain", &params, median(&samples[1]));
        if !samples[2].is_empty() {
            r.push("serial", &params, median(&samples[2]));
        }
        if !samples[3].is_empty() {
            r.push("fftw-mpi", &params, median(&samples[3]));
        }
        r.push_limit(
            &params,
            median(&samples[4]),
            format!(
                "3 copies of each rank's share ({} bytes) at once on every rank; {}",
                share,
                limit::memcpy_note()
            ),
        );
    }
    if let Some(Ok(exe)) = &fftw {
        if let Some(dir) = exe.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    if me != 0 {
        return Ok(None);
    }
    r.note(format!(
        "engine {}; median of {ROUNDS} rounds (candidates alternated), max over ranks; \
         serial = rank 0 alone on its threads; fftw-mpi = one thread per MPI rank, {size} ranks",
        w.engine_name()
    ));
    match (fftw, fftw_note) {
        (Some(Err(why)), _) => r.note(format!("fftw-mpi skipped: {why}")),
        (_, Some(why)) => r.note(format!("fftw-mpi skipped: {why}")),
        _ => {}
    }
    Ok(Some(r))
}

/// Runs the benchmark on every rank of the job.
pub(super) fn run(ctx: &Ctx<'_>) -> Outcome {
    let n = match ctx.args.first() {
        Some(a) => a
            .parse()
            .map_err(|_| format!("tiers bench fft2d: {a}: not a size N"))?,
        None => 1024,
    };
    fft2d::check_n(n, 3)?;
    let results = tiers_cluster::spmd(|w| (w.rank(), one_rank(w, ctx, n)))?;
    let mut report = None;
    for (rank, r) in results {
        match r {
            Ok(Some(rep)) => report = Some(rep),
            Ok(None) => {}
            Err(e) => return Err(format!("tiers bench fft2d: rank {rank}: {e}").into()),
        }
    }
    Ok(report)
}

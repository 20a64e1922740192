//! `tiers bench is [CLASS] [-- RANKS]`: NPB IS (`tiers is`, two-sided messaging on the shm engine)
//! beside NPB's own IS (NPB-MPI, C, under `mpirun`) on the same number of ranks, alternated run
//! by run. Each value is the time NPB's report gives for the ten timed iterations (key
//! generation and process start are outside it, for both), the median over runs.
//!
//! NPB's IS is not part of tiers: build it from NPB's sources outside the repository and name
//! the binary for the class and ranks asked in `TIERS_NPB_IS` (NPB 3.3 fixes the ranks at
//! build time: `is.A.2`; NPB 3.4 does not: `is.A.x`). Without it the row is skipped with a
//! note.
//!
//! `limit`: every iteration reads and writes each of a rank's keys at least three times
//! (bucket placement, the exchange, the count behind the ranking); the row is ten times three
//! copies of one rank's keys at the memory bandwidth a `memcpy` of them reaches in this run.

use super::Outcome;
use crate::bench::Ctx;
use std::process::Command;
use std::time::Duration;
use tiers_apps::is::{Class, ITERATIONS};
use tiers_bench::{compare, limit, progress, Candidate, Report};

/// The environment variable naming NPB's IS binary.
pub const NPB_IS: &str = "TIERS_NPB_IS";

/// The "Time in seconds" of an NPB-style report.
fn seconds(out: &str) -> Option<f64> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Time in seconds"))
        .and_then(|r| r.trim_start_matches([' ', '=']).trim().parse().ok())
}

/// Runs `cmd` and returns the time its report gives; a failed or unverified run is an error.
fn timed(cmd: &mut Command, what: &str) -> Result<f64, String> {
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let ok = text.contains("VERIFICATION SUCCESSFUL")
        || text.contains("Verification    =               SUCCESSFUL");
    if !out.status.success() || !ok {
        return Err(format!(
            "{what} failed or did not verify: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    seconds(&text)
        .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e9)
        .ok_or_else(|| format!("{what}: no time (seconds, finite, not negative) in {text}"))
}

/// Runs the benchmark (it starts the ranks it needs).
pub(super) fn run(ctx: &Ctx<'_>) -> Outcome {
    let class = Class::parse(ctx.args.first().map_or("A", String::as_str))?;
    let ranks: usize = match ctx.args.get(1) {
        Some(a) => a
            .parse()
            .map_err(|_| format!("tiers bench is: {a}: not a rank count"))?,
        None => 2,
    };
    if ranks == 0 || !ranks.is_power_of_two() {
        return Err(format!("tiers bench is: {ranks} ranks: IS needs a power of two").into());
    }
    let exe = std::env::current_exe()?;
    let letter = class.letter().to_string();
    let n = ranks.to_string();
    let mut failure: Option<String> = None;
    let mut r = Report::new("is", "s", true);
    let npb = std::env::var_os(NPB_IS).filter(|p| !p.is_empty());
    let keys = 1usize << class.params().total_keys_log2;
    let rank_bytes = keys / ranks * 4;
    {
        let fail = std::cell::RefCell::new(&mut failure);
        let run_one = |cmd: &mut Command, what: &str, iters: u64| {
            let mut total = 0.0;
            for _ in 0..iters {
                match timed(cmd, what) {
                    Ok(s) => total += s,
                    Err(e) => {
                        fail.borrow_mut().get_or_insert(e);
                        total += 1.0;
                    }
                }
            }
            Duration::from_secs_f64(total)
        };
        let mut cands = vec![Candidate::new("tiers", |iters| {
            progress(&ctx.opts, format!("is class {letter}: tiers on {n} ranks"));
            let mut c = Command::new(&exe);
            c.args([
                "run",
                "-n",
                &n,
                "--",
                &exe.to_string_lossy(),
                "is",
                "--class",
                &letter,
            ]);
            run_one(&mut c, "tiers is", iters)
        })];
        if let Some(bin) = npb.clone() {
            let (letter, n, run_one) = (&letter, &n, &run_one);
            cands.push(Candidate::new("npb-mpi", move |iters| {
                progress(&ctx.opts, format!("is class {letter}: NPB on {n} ranks"));
                // Placed as `tiers run` places its ranks: rank i on core i, where each has
                // one (Open MPI binds to sockets above 2 ranks by default).
                let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
                let fits = n.parse::<usize>().is_ok_and(|k| k <= cores);
                let bind = if fits { "core" } else { "none" };
                let mut c = Command::new("mpirun");
                c.args(["-n", n])
                    .args(["--map-by", "core", "--bind-to", bind])
                    .arg(&bin)
                    .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
                run_one(&mut c, "NPB IS", iters)
            }));
        }
        let mut copy = limit::memcpy(rank_bytes);
        cands.push(Candidate::new(limit::IMPL, move |iters| {
            // 3 copies of a rank's keys per iteration, ITERATIONS iterations per run.
            (copy.run)(iters * 3 * ITERATIONS as u64)
        }));
        let res = compare(ctx.opts.min_time, &mut cands);
        let params = [("class", letter.as_str().into()), ("ranks", ranks.into())];
        for (c, (median, _)) in cands.iter().zip(&res) {
            if c.name == limit::IMPL {
                r.push_limit(
                    &params,
                    *median,
                    format!(
                        "{ITERATIONS} iterations x 3 copies of one rank's keys ({rank_bytes} B): {}",
                        limit::memcpy_note()
                    ),
                );
            } else {
                r.push(&c.name, &params, *median);
            }
        }
    }
    if let Some(e) = failure {
        return Err(e.into());
    }
    if npb.is_none() {
        r.note(format!(
            "npb-mpi skipped: set {NPB_IS} to NPB's IS binary for class {letter} on {ranks} ranks"
        ));
    }
    r.note(format!(
        "seconds of NPB IS's {ITERATIONS} timed iterations as each reports them (max over ranks), median over alternated runs; tiers on the shm engine"
    ));
    Ok(Some(r))
}

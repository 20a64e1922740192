//! `tiers bench md`: Lennard-Jones dynamics of `tiers md` under
//! `tiers run -n M -- tiers bench md [N]` (or on one rank), in steps per second: positions
//! broadcast overlapped with the forces (`tiers-overlap`) against a blocking allgather before
//! them (`allgather`, the MPI-style peer), and `limit`: the same steps with no broadcast after
//! the first, every chunk's forces from stale positions (the computation alone; not a correct
//! answer across ranks). Candidates alternate round by round; each row is the median over
//! rounds of the slowest rank's rate.

use super::{Ctx, Outcome};
use tiers_apps::md::{self, Options, Variant};
use tiers_bench::{median, progress, Report};
use tiers_cluster::{Op, Timeout, World};
use tiers_node::pool::Pool;

const ROUNDS: usize = 5;
const STEPS: usize = 20;

fn one_rank(w: &World, ctx: &Ctx<'_>, n: usize) -> Result<Option<Report>, String> {
    let e = |e: tiers_apps::Error| e.to_string();
    let c = |e: tiers_cluster::Error| e.to_string();
    let mut r = Report::new("md", "steps/s", false);
    let o = Options {
        n,
        steps: STEPS,
        ..Options::default()
    };
    let variants = [
        ("tiers-overlap", Variant::Overlap),
        ("allgather", Variant::Allgather),
        ("limit", Variant::Limit),
    ];
    for &threads in &ctx.opts.threads {
        let pool = Pool::builder()
            .threads(threads)
            .build()
            .map_err(|e| e.to_string())?;
        let mut samples = vec![Vec::new(); variants.len()];
        for round in 0..ROUNDS {
            if w.rank() == 0 {
                progress(
                    &ctx.opts,
                    format!(
                        "md n={n} ranks={} threads={threads} round {round}",
                        w.size()
                    ),
                );
            }
            for (vi, &(_, v)) in variants.iter().enumerate() {
                w.barrier(Timeout::Block).map_err(c)?;
                let out = md::simulate(w, &pool, &o, v, false, |_, _| {}).map_err(e)?;
                let mut t = [0.0];
                w.allreduce(&[out.times.total], &mut t, Op::Max, Timeout::Block)
                    .map_err(c)?;
                samples[vi].push(STEPS as f64 / t[0].max(1e-12));
            }
        }
        let params = [
            ("n", n.into()),
            ("ranks", w.size().into()),
            ("threads", threads.into()),
        ];
        for (vi, &(name, v)) in variants.iter().enumerate() {
            let value = median(&samples[vi]);
            if v == Variant::Limit {
                r.push_limit(
                    &params,
                    value,
                    "the same steps with no broadcast after the first (every chunk from stale positions: the computation alone)",
                );
            } else {
                r.push(name, &params, value);
            }
        }
    }
    r.note(format!(
        "engine {}; {STEPS} steps per sample, median of {ROUNDS} rounds (variants alternated), slowest rank",
        w.engine_name()
    ));
    Ok((w.rank() == 0).then_some(r))
}

/// Runs the benchmark on every rank of the job.
pub(super) fn run(ctx: &Ctx<'_>) -> Outcome {
    let n = match ctx.args.first() {
        Some(a) => a
            .parse()
            .map_err(|_| format!("tiers bench md: {a}: not a particle count"))?,
        None => 2048,
    };
    Options {
        n,
        ..Options::default()
    }
    .validate()?;
    let results = tiers_cluster::spmd(|w| (w.rank(), one_rank(w, ctx, n)))?;
    let mut report = None;
    for (rank, r) in results {
        match r {
            Ok(Some(rep)) => report = Some(rep),
            Ok(None) => {}
            Err(e) => return Err(format!("tiers bench md: rank {rank}: {e}").into()),
        }
    }
    Ok(report)
}

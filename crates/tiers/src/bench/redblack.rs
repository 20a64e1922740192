//! `tiers bench redblack`: RedBlack3D's variants (`tiers redblack`) in one run, alternated
//! round by round, under `tiers run -n N -- tiers bench redblack [N_MESH]` (or on one rank).
//! Each row is the median over rounds of the maximum over ranks, in ms per iteration (a red
//! and a black half-sweep, each after a halo exchange), split into total, wait and comp.
//! `limit` (computation only, no exchange) is the time overlap can at best reach.

use super::{Ctx, Outcome};
use crate::cmd::redblack::{solve, summarize, Params, Variant};
use tiers_bench::{median, progress, Report};
use tiers_cluster::World;

const ROUNDS: usize = 5;
const ITERS: usize = 50;

fn one_rank(w: &World, ctx: &Ctx<'_>, n: usize) -> Result<Option<Report>, String> {
    let e = |e: tiers_cluster::Error| e.to_string();
    let variants = Variant::ALL;
    if !tiers_cluster::decomp::Decomp::new([n; 3], w.size(), 1).is_ok_and(|d| d.ghosts_fit()) {
        return Err(format!("N = {n} is too small for {} ranks", w.size()));
    }
    let mut r = Report::new("redblack", "ms/iter", true);
    for &threads in &ctx.opts.threads {
        // samples[variant][part][round]
        let mut samples = vec![[Vec::new(), Vec::new(), Vec::new()]; variants.len()];
        for round in 0..ROUNDS {
            if w.rank() == 0 {
                progress(
                    &ctx.opts,
                    format!("redblack n={n} threads={threads} round {round}"),
                );
            }
            for (vi, &v) in variants.iter().enumerate() {
                let p = Params {
                    n,
                    iters: ITERS,
                    threads,
                    variant: v,
                    irr: Vec::new(),
                    progress: false,
                };
                let (b, t) = solve(w, &p).map_err(e)?;
                let (tm, _, _) = summarize(w, &b, &t).map_err(e)?;
                for part in 0..3 {
                    samples[vi][part].push(tm[part] * 1e3 / ITERS as f64);
                }
            }
        }
        for (vi, &v) in variants.iter().enumerate() {
            for (part, name) in ["total", "wait", "comp"].iter().enumerate() {
                let params = [
                    ("ranks", w.size().into()),
                    ("threads", threads.into()),
                    ("n", n.into()),
                    ("part", (*name).into()),
                ];
                let value = median(&samples[vi][part]);
                if v == Variant::Limit {
                    r.push_limit(
                        &params,
                        value,
                        "the same sweeps with no halo exchange (computation alone)",
                    );
                } else {
                    r.push(v.name(), &params, value);
                }
            }
        }
    }
    r.note(format!(
        "engine {}; median of {ROUNDS} rounds (variants alternated), max over ranks; \
         variants as [Baden2001]'s Table 1: hand and mt1 on 1 thread, mtp and mtp-olap on `threads`, \
         mtp-olap-xtra and irr (2:1:...:1) on threads - 1 compute threads + the proxy; \
         limit has no exchange (not a correct answer across ranks); hand's halos: {}",
        w.engine_name(),
        crate::cmd::redblack::hand_transport()
    ));
    Ok((w.rank() == 0).then_some(r))
}

/// Runs the benchmark on every rank of the job.
pub(super) fn run(ctx: &Ctx<'_>) -> Outcome {
    let n = match ctx.args.first() {
        Some(a) => a
            .parse()
            .map_err(|_| format!("tiers bench redblack: {a}: not a mesh size"))?,
        None => 64,
    };
    for &t in &ctx.opts.threads {
        crate::cmd::redblack::check_size(n, t).map_err(|e| format!("tiers bench redblack: {e}"))?;
    }
    let results = tiers_cluster::spmd(|w| (w.rank(), one_rank(w, ctx, n)))?;
    let mut report = None;
    for (rank, r) in results {
        match r {
            Ok(Some(rep)) => report = Some(rep),
            Ok(None) => {}
            Err(e) => return Err(format!("tiers bench redblack: rank {rank}: {e}").into()),
        }
    }
    Ok(report)
}

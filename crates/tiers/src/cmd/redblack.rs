//! `tiers redblack`: RedBlack3D (KeLP's benchmark, [Baden2001]) across the ranks of a job,
//! one block per rank (the cluster tier's `Decomp`), node-tier threads on slabs of it, halos
//! exchanged by the cluster tier's `Halo`/`Mover`. Variants, as seed 002's Table 1:
//!
//! - `plain`: exchange, then compute (no overlap);
//! - `caller`: thread 0 starts the exchange, every thread computes the interior, thread 0
//!   waits, then every thread computes the annulus;
//! - `proxy`: as `caller`, but a proxy thread beside the compute threads starts and waits;
//! - `limit`: computation only, no exchange (a wrong answer across ranks; the time overlap
//!   can at best reach).
//!
//! Prints per variant Total / Wait / Comp in seconds over all iterations, the maximum over
//! ranks, and the residual and error of the result.

use clap::Args;
use std::time::Instant;
use tiers_apps::redblack::{Block, Color};
use tiers_cluster::decomp::{thread_split, Box3, Decomp, Face};
use tiers_cluster::mover::{for_each, Halo, Proxy};
use tiers_cluster::{Op, SegId, Timeout, World};
use tiers_node::{AdaptiveBarrier, Barrier};

/// How communication meets computation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Variant {
    /// Exchange, then compute.
    Plain,
    /// The caller's thread 0 starts the exchange, all compute the interior, thread 0 waits.
    Caller,
    /// A proxy thread beside the compute threads runs the exchange.
    Proxy,
    /// Compute only, no exchange (the bound overlap approaches).
    Limit,
}

impl Variant {
    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::Caller => "caller",
            Variant::Proxy => "proxy",
            Variant::Limit => "limit",
        }
    }
}

/// `tiers redblack` arguments.
#[derive(Args, Debug)]
pub struct RedBlackArgs {
    /// Mesh points on each axis (N³ in all).
    #[arg(long, default_value_t = 64)]
    pub n: usize,
    /// Iterations (each a red and a black half-sweep, each after a halo exchange).
    #[arg(long, default_value_t = 20)]
    pub iters: usize,
    /// Compute threads per rank.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Variants to run, in order (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub variant: Vec<Variant>,
    /// Split each rank's block over its threads in this ratio, e.g. `3:1` (IRR(m:n)); default
    /// even.
    #[arg(long)]
    pub irr: Option<String>,
}

/// What one run of a variant is asked.
#[derive(Clone, Debug)]
pub struct Params {
    /// Mesh points per axis.
    pub n: usize,
    /// Iterations.
    pub iters: usize,
    /// Compute threads per rank.
    pub threads: usize,
    /// The variant.
    pub variant: Variant,
    /// Per-thread weights of the split (len = threads).
    pub weights: Vec<usize>,
}

/// One rank's times, in seconds over all iterations (thread 0's view).
#[derive(Clone, Copy, Debug, Default)]
pub struct Times {
    /// From the first exchange to the end of the last half-sweep.
    pub total: f64,
    /// Waiting for the exchange (all of it in `plain`).
    pub wait: f64,
    /// Relaxing.
    pub comp: f64,
}

/// Runs RedBlack3D on this rank's block; returns the block (its owned values are the rank's
/// share of the answer) and the rank's times.
///
/// # Errors
///
/// A failed cluster call.
pub fn solve(w: &World, p: &Params) -> tiers_cluster::Result<(Block, Times)> {
    let d = Decomp::new([p.n; 3], w.size(), 1);
    let me = w.rank();
    let own = d.block(me);
    let mut block = Block::new(p.n, own.lo, own.extent());
    let shared = block.shared();
    let mut halo = Halo::<f64>::new(w, &d, SegId(7), 0, 0)?;
    let interior = d.interior(me, 1);
    let annulus = d.annulus(me, 1);
    let slabs = thread_split(&own, &p.weights);
    let nt = p.threads;
    let barrier = AdaptiveBarrier::new(nt);
    w.barrier(Timeout::Block)?;

    let pack = move |f: &Face, buf: &mut [f64]| {
        // SAFETY: the send box is annulus points, not written while the exchange packs.
        for_each(&f.send, |q, i| buf[i] = unsafe { shared.get(q) });
    };
    let unpack = move |f: &Face, buf: &[f64]| {
        // SAFETY: ghosts, read by nobody until the barrier after the wait.
        for_each(&f.recv, |q, i| unsafe { shared.set(q, buf[i]) });
    };
    let relax = move |b: &Box3, c: Color| {
        // SAFETY: threads relax disjoint slabs of one color; see the variants' ordering.
        unsafe { shared.relax(b.lo, b.hi, c) }
    };

    let barrier = &barrier;
    let (interior, annulus, slabs) = (&interior, &annulus, &slabs);
    let work = |t: usize,
                mut halo: Option<&mut Halo<'_, f64>>,
                proxy: Option<&Proxy>|
     -> tiers_cluster::Result<Times> {
        let mut tm = Times::default();
        let mine = slabs[t];
        let inner = mine.intersect(interior);
        let outer: Vec<Box3> = annulus.iter().map(|a| mine.intersect(a)).collect();
        let lead = t == 0;
        let t0 = Instant::now();
        for _ in 0..p.iters {
            for c in [Color::Red, Color::Black] {
                match p.variant {
                    Variant::Limit => {
                        let c0 = Instant::now();
                        relax(&mine, c);
                        tm.comp += c0.elapsed().as_secs_f64();
                    }
                    Variant::Plain => {
                        if let Some(h) = halo.as_deref_mut() {
                            let w0 = Instant::now();
                            h.start(pack)?;
                            h.wait(Timeout::Block, unpack)?;
                            tm.wait += w0.elapsed().as_secs_f64();
                        }
                        barrier.wait(t);
                        let c0 = Instant::now();
                        relax(&mine, c);
                        tm.comp += c0.elapsed().as_secs_f64();
                    }
                    Variant::Caller | Variant::Proxy => {
                        if lead {
                            match (halo.as_deref_mut(), proxy) {
                                (Some(h), _) => h.start(pack)?,
                                (None, Some(px)) => px.start(),
                                _ => {}
                            }
                        }
                        let c0 = Instant::now();
                        relax(&inner, c);
                        tm.comp += c0.elapsed().as_secs_f64();
                        if lead {
                            let w0 = Instant::now();
                            match (halo.as_deref_mut(), proxy) {
                                (Some(h), _) => h.wait(Timeout::Block, unpack)?,
                                (None, Some(px)) => px.wait()?,
                                _ => {}
                            }
                            tm.wait += w0.elapsed().as_secs_f64();
                        }
                        barrier.wait(t);
                        let c0 = Instant::now();
                        for b in &outer {
                            relax(b, c);
                        }
                        tm.comp += c0.elapsed().as_secs_f64();
                    }
                }
                barrier.wait(t);
            }
        }
        tm.total = t0.elapsed().as_secs_f64();
        Ok(tm)
    };
    let mut times = Times::default();
    let result: tiers_cluster::Result<()> = std::thread::scope(|s| {
        let mut halo = Some(&mut halo);
        let proxy_halo = if p.variant == Variant::Proxy {
            halo.take()
        } else {
            None
        };
        let proxy = proxy_halo.map(|h| {
            Proxy::spawn(s, move || {
                h.start(pack)?;
                h.wait(Timeout::Block, unpack)
            })
        });
        let work = &work;
        let others: Vec<_> = (1..nt)
            .map(|t| s.spawn(move || work(t, None, None)))
            .collect();
        let r0 = work(0, halo, proxy.as_ref());
        for h in others {
            h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))?;
        }
        times = r0?;
        Ok(())
    });
    result?;
    // Final ghosts, for the residual.
    halo.start(pack)?;
    halo.wait(Timeout::Block, unpack)?;
    drop(halo);
    w.segment_delete(SegId(7), Timeout::Block)?;
    Ok((block, times))
}

/// The maxima of `t` over ranks, and the residual (2-norm, scaled by h²) and largest error
/// of `b` over the whole mesh.
///
/// # Errors
///
/// A failed allreduce.
pub fn summarize(w: &World, b: &Block, t: &Times) -> tiers_cluster::Result<([f64; 3], f64, f64)> {
    let mut tmax = [0.0; 3];
    w.allreduce(
        &[t.total, t.wait, t.comp],
        &mut tmax,
        Op::Max,
        Timeout::Block,
    )?;
    let (r2, err) = b.residual_and_error();
    let (mut r, mut e) = ([0.0], [0.0]);
    w.allreduce(&[r2], &mut r, Op::Sum, Timeout::Block)?;
    w.allreduce(&[err], &mut e, Op::Max, Timeout::Block)?;
    Ok((tmax, r[0].sqrt(), e[0]))
}

/// Parses `m:n[:…]` into weights.
pub fn parse_irr(s: &str, threads: usize) -> Result<Vec<usize>, String> {
    let w: Vec<usize> = s
        .split(':')
        .map(|x| {
            x.trim()
                .parse()
                .map_err(|_| format!("--irr {s}: not a ratio like 3:1"))
        })
        .collect::<Result<_, _>>()?;
    if w.len() != threads || w.iter().all(|&x| x == 0) {
        return Err(format!(
            "--irr {s}: needs {threads} weights (one per thread), not all 0"
        ));
    }
    Ok(w)
}

/// Runs `tiers redblack`.
pub fn run(a: RedBlackArgs) -> Result<(), Box<dyn std::error::Error>> {
    if a.n == 0 || a.threads == 0 {
        return Err("tiers redblack: --n and --threads must be at least 1".into());
    }
    let weights = match &a.irr {
        Some(s) => parse_irr(s, a.threads)?,
        None => vec![1; a.threads],
    };
    let variants = if a.variant.is_empty() {
        vec![
            Variant::Plain,
            Variant::Caller,
            Variant::Proxy,
            Variant::Limit,
        ]
    } else {
        a.variant.clone()
    };
    let out = tiers_cluster::spmd(|w| (w.rank(), one_rank(w, &a, &weights, &variants)))?;
    for (r, o) in out {
        o.map_err(|e| format!("tiers redblack: rank {r}: {e}"))?;
    }
    Ok(())
}

fn one_rank(
    w: &World,
    a: &RedBlackArgs,
    weights: &[usize],
    variants: &[Variant],
) -> Result<(), String> {
    let e = |e: tiers_cluster::Error| e.to_string();
    let d = Decomp::new([a.n; 3], w.size(), 1);
    if !d.ghosts_fit() {
        return Err(format!("--n {} is too small for {} ranks", a.n, w.size()));
    }
    if w.rank() == 0 {
        println!(
            "redblack3d n={} iters={} ranks={} ({:?}) threads={} split={:?} engine={}",
            a.n,
            a.iters,
            w.size(),
            d.procs(),
            a.threads,
            weights,
            w.engine_name()
        );
        println!(
            "{:<8} {:>10} {:>10} {:>10} {:>12} {:>12}",
            "variant", "total_s", "wait_s", "comp_s", "residual", "max_error"
        );
    }
    for &v in variants {
        let p = Params {
            n: a.n,
            iters: a.iters,
            threads: a.threads,
            variant: v,
            weights: weights.to_vec(),
        };
        let (b, t) = solve(w, &p).map_err(e)?;
        let (tm, res, err) = summarize(w, &b, &t).map_err(e)?;
        if w.rank() == 0 {
            println!(
                "{:<8} {:>10.4} {:>10.4} {:>10.4} {:>12.4e} {:>12.4e}",
                v.name(),
                tm[0],
                tm[1],
                tm[2],
                res,
                err
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole mesh, assembled from every rank's owned values.
    fn mesh(
        n: usize,
        ranks: usize,
        threads: usize,
        variant: Variant,
        weights: Vec<usize>,
    ) -> Vec<f64> {
        let p = Params {
            n,
            iters: 5,
            threads,
            variant,
            weights,
        };
        let parts = tiers_cluster::run_local(ranks, |w| {
            let (b, _) = solve(w, &p).unwrap();
            (b.lo, b.owned, b.owned_values())
        })
        .unwrap();
        let mut out = vec![f64::NAN; n * n * n];
        for (lo, owned, vals) in parts {
            let mut it = vals.into_iter();
            for i in 0..owned[0] {
                for j in 0..owned[1] {
                    for k in 0..owned[2] {
                        out[((lo[0] + i) * n + lo[1] + j) * n + lo[2] + k] = it.next().unwrap();
                    }
                }
            }
        }
        out
    }

    #[test]
    fn every_variant_rank_and_thread_count_gives_the_same_bits() {
        let n = 12;
        let want = mesh(n, 1, 1, Variant::Plain, vec![1]);
        assert!(want.iter().all(|x| x.is_finite()));
        for ranks in [1, 2, 3, 4, 8] {
            for (threads, weights) in [
                (1, vec![1]),
                (2, vec![1, 1]),
                (3, vec![1, 1, 1]),
                (2, vec![3, 1]),
            ] {
                for v in [Variant::Plain, Variant::Caller, Variant::Proxy] {
                    let got = mesh(n, ranks, threads, v, weights.clone());
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "{v:?} on {ranks} ranks x {threads} threads {weights:?}"
                    );
                }
            }
        }
        // Without an exchange the blocks drift apart: the test can see a wrong answer.
        let limit = mesh(n, 2, 1, Variant::Limit, vec![1]);
        assert!(limit.iter().zip(&want).any(|(a, b)| a != b));
    }

    #[test]
    fn irr_parses() {
        assert_eq!(parse_irr("3:1", 2), Ok(vec![3, 1]));
        assert!(parse_irr("3:1", 3).is_err());
        assert!(parse_irr("a:1", 2).is_err());
    }
}

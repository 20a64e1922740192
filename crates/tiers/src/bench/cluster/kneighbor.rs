//! `tiers bench kneighbor`: [Mei2010]'s kNeighbor with k = 3. Every element sends a message to
//! its 3 neighbours on each side and waits for all 6 replies; then the next step. Three ways on
//! the same elements (placed round-robin on the workers): `tiers-smp` (one process, 2 workers,
//! messages between workers straight into the target inbox), `tiers-smp-nobypass` (the same
//! with every message through the progress engine) and `tiers-process` (2 processes of one
//! worker, messages between them over shm).

use super::BenchResult;
use serde_json::json;
use std::time::Instant;
use tiers_bench::{median, progress, Opts, Report};
use tiers_cluster::endpoint::{self, Ctx, Delivery, Endpoint, EpId};
use tiers_cluster::launch::Job;
use tiers_cluster::{Op, Result, Timeout, World};
use tiers_node::Pool;

const K: usize = 3;
const ELEMENTS: usize = 64;
const SIZES: &[usize] = &[16, 256, 4096, 16384];
const REQ: u8 = 1;
const REP: u8 = 2;
const OUT_ENV: &str = "TIERS_KNEIGHBOR_OUT";

struct Elem {
    size: usize,
    steps: usize,
    step: usize,
    replies: usize,
}

impl Elem {
    fn requests(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        let (me, n) = (ctx.id(), ctx.total());
        for d in 1..=K {
            for to in [(me + d) % n, (me + n - d % n) % n] {
                let mut m = vec![0u8; self.size];
                m[0] = REQ;
                ctx.send(to, m)?;
            }
        }
        Ok(())
    }
}

impl Endpoint for Elem {
    fn start(&mut self, ctx: &mut Ctx<'_>) -> Result<()> {
        if self.steps == 0 {
            return ctx.finish();
        }
        self.requests(ctx)
    }

    fn receive(&mut self, ctx: &mut Ctx<'_>, from: EpId, mut data: Vec<u8>) -> Result<()> {
        if data[0] == REQ {
            data[0] = REP; // the reply travels in the request's buffer
            return ctx.send(from, data);
        }
        self.replies += 1;
        if self.replies == 2 * K {
            self.replies = 0;
            self.step += 1;
            if self.step == self.steps {
                return ctx.finish();
            }
            self.requests(ctx)?;
        }
        Ok(())
    }
}

/// Seconds for `steps` steps (the slowest rank's).
fn time_steps(w: &World, pool: &Pool, d: Delivery, size: usize, steps: usize) -> Result<f64> {
    w.barrier(Timeout::Block)?;
    let t = Instant::now();
    endpoint::run(w, pool, ELEMENTS, d, |_| Elem {
        size,
        steps,
        step: 0,
        replies: 0,
    })?;
    let mut m = [0.0f64];
    w.allreduce(
        &[t.elapsed().as_secs_f64()],
        &mut m,
        Op::Max,
        Timeout::Block,
    )?;
    Ok(m[0])
}

/// Microseconds per step: calibrate, then the median of 5 runs (all ranks agree on counts).
fn measure(w: &World, pool: &Pool, d: Delivery, size: usize, min_time: f64) -> Result<f64> {
    let probe = 20;
    let t = time_steps(w, pool, d, size, probe)?;
    let steps = ((min_time / 5.0) / (t / probe as f64)).clamp(20.0, 1e6) as usize;
    let mut v = Vec::new();
    for _ in 0..5 {
        v.push(time_steps(w, pool, d, size, steps)? / steps as f64 * 1e6);
    }
    Ok(median(&v))
}

/// Rounds of the whole comparison; each value is the median over rounds, so that a noisy
/// phase of a shared machine does not land on one implementation only.
const ROUNDS: usize = 3;

fn process_round(opts: &Opts) -> BenchResult<Vec<f64>> {
    let out = std::env::temp_dir().join(format!(
        "tiers-kneighbor-{}-{}.json",
        std::process::id(),
        tiers_cluster::engine::shm::new_job_id()
    ));
    let exe = std::env::current_exe()?;
    let mut job = Job::new(2, exe).args([
        "bench".to_string(),
        "kneighbor-rank".into(),
        "--quiet".into(),
        "--min-time".into(),
        (opts.min_time / ROUNDS as f64).to_string(),
    ]);
    job.env.push((OUT_ENV.into(), out.display().to_string()));
    let res = job.run()?;
    let text = std::fs::read_to_string(&out);
    let _ = std::fs::remove_file(&out);
    if !res.success() {
        return Err(format!("kneighbor ranks failed: {:?}", res.ends).into());
    }
    Ok(serde_json::from_str(&text?)?)
}

pub(in crate::bench) fn run(opts: &Opts) -> BenchResult {
    let mut report = Report::new("kneighbor", "us/step", true);
    let w = tiers_cluster::Builder::new().local(1)?.remove(0);
    let pool = Pool::builder().threads(2).build()?;
    let imps = ["tiers-smp", "tiers-smp-nobypass", "tiers-process"];
    // samples[imp][size] over rounds
    let mut samples = vec![vec![Vec::new(); SIZES.len()]; imps.len()];
    let t = opts.min_time / ROUNDS as f64;
    for round in 0..ROUNDS {
        progress(opts, format!("kneighbor round {}/{ROUNDS}", round + 1));
        for (j, &size) in SIZES.iter().enumerate() {
            samples[0][j].push(measure(&w, &pool, Delivery::Bypass, size, t)?);
            samples[1][j].push(measure(&w, &pool, Delivery::Engine, size, t)?);
        }
        for (j, v) in process_round(opts)?
            .into_iter()
            .enumerate()
            .take(SIZES.len())
        {
            samples[2][j].push(v);
        }
    }
    for (j, &size) in SIZES.iter().enumerate() {
        for (i, imp) in imps.iter().enumerate() {
            report.push(
                imp,
                &[("bytes", json!(size)), ("elements", json!(ELEMENTS))],
                median(&samples[i][j]),
            );
        }
    }
    report.note(format!(
        "k = {K}, {ELEMENTS} elements round-robin on 2 workers; smp: one process, 2 worker threads; process: 2 processes of one worker, over shm; median of {ROUNDS} rounds"
    ));
    Ok(report)
}

/// One rank of the `tiers-process` variant (started by `run`).
pub(in crate::bench) fn rank_main(opts: &Opts) -> BenchResult<()> {
    let w = tiers_cluster::init()?;
    let pool = Pool::builder().threads(1).build()?;
    let mut per = Vec::new();
    for &size in SIZES {
        per.push(measure(&w, &pool, Delivery::Bypass, size, opts.min_time)?);
    }
    if w.rank() == 0 {
        let path = std::env::var(OUT_ENV)?;
        std::fs::write(path, serde_json::to_string(&per)?)?;
    }
    drop(pool);
    drop(w);
    std::process::exit(0);
}

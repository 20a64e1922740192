//! Molecular dynamics of Lennard-Jones particles in reduced units (σ = ε = m = 1): velocity
//! Verlet, all-pairs forces, a free cluster (no box, no cutoff, so the energy is a smooth
//! function of the positions and the integrator conserves it to O(dt²)).
//!
//! Across the ranks of a `World` ([`simulate`]) the particles are split into chunks of
//! [`CHUNK`] and every rank owns a contiguous run of chunks. Each step every rank broadcasts
//! its new positions with notified writes (into one of two alternating segments) and, in the
//! overlapped variant ([`Variant::Overlap`], [GPI-MCTP] Fig. 7), computes the forces of the
//! chunks already present — its own first — while the others arrive; [`Variant::Allgather`]
//! waits for every chunk first, as a blocking allgather does.
//!
//! The force on particle i is summed chunk by chunk: within a chunk over j in order, then the
//! chunk sums in chunk order. Chunks are fixed by N alone and never split between ranks, so
//! the sums, and the whole trajectory, have the same bits for every split into ranks and
//! threads and every order in which the chunks arrive.

use crate::{limits, Error, Result};
use std::ops::Range;
use std::time::Instant;
use tiers_cluster::decomp::split;
use tiers_cluster::{Notification, Op, SegId, Segment, Timeout, World};
use tiers_node::pool::{Pool, Schedule};

/// Particles per chunk: the unit of ownership and of summation.
pub const CHUNK: usize = 16;
/// The most particles accepted (all pairs: N² interactions per step).
pub const MAX_N: usize = 1 << 18;

/// The two alternating segments of positions (then velocities, for the final gather).
const SEGS: [SegId; 2] = [SegId(24), SegId(25)];

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Options {
    /// Particles.
    pub n: usize,
    /// Number density of the initial simple cubic lattice.
    pub density: f64,
    /// Initial temperature (velocities normal with variance T per component).
    pub temperature: f64,
    /// Time step.
    pub dt: f64,
    /// Steps.
    pub steps: usize,
    /// Seed of the velocities.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            n: 512,
            density: 0.8,
            temperature: 0.5,
            dt: 0.002,
            steps: 100,
            seed: 1,
        }
    }
}

impl Options {
    /// Checks the ranges: 2 ≤ N ≤ [`MAX_N`], 0 < density ≤ 1.2 (closer packing blows up),
    /// 0 ≤ T ≤ 100, 0 < dt ≤ 0.05, steps ≤ 10⁹.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] naming the parameter.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str, v: String, range: &str| {
            Err(Error::Invalid(format!(
                "md: {what} = {v} is out of range {range}"
            )))
        };
        if !(2..=MAX_N).contains(&self.n) {
            return bad("N", self.n.to_string(), &format!("2..={MAX_N}"));
        }
        if !(self.density > 0.0 && self.density <= 1.2) {
            return bad("density", self.density.to_string(), "(0, 1.2]");
        }
        if !(0.0..=100.0).contains(&self.temperature) {
            return bad("temperature", self.temperature.to_string(), "[0, 100]");
        }
        if !(self.dt > 0.0 && self.dt <= 0.05) {
            return bad("dt", self.dt.to_string(), "(0, 0.05]");
        }
        if self.steps > 1_000_000_000 {
            return bad("steps", self.steps.to_string(), "0..=1e9");
        }
        limits::check_alloc("md: positions and velocities", self.n, 6 * 8)?;
        Ok(())
    }

    /// Chunks of N.
    pub fn chunks(&self) -> usize {
        self.n.div_ceil(CHUNK)
    }
}

/// The initial state: positions (3N) on a simple cubic lattice of the given density, filled in
/// index order, and velocities (3N) from the seed with the centre of mass at rest.
///
/// # Errors
///
/// As [`Options::validate`] (a density of 0 or a negative temperature would give positions
/// or velocities that are not numbers).
pub fn initial(o: &Options) -> Result<(Vec<f64>, Vec<f64>)> {
    o.validate()?;
    let side = (1..).find(|s: &usize| s * s * s >= o.n).unwrap_or(1);
    let a = (1.0 / o.density).cbrt();
    let mut x = Vec::with_capacity(3 * o.n);
    for i in 0..o.n {
        let (p, q, r) = (i / (side * side), (i / side) % side, i % side);
        x.extend([p as f64 * a, q as f64 * a, r as f64 * a]);
    }
    let mut rng = crate::rng::Rng::new(o.seed);
    let s = o.temperature.sqrt();
    let mut v: Vec<f64> = (0..3 * o.n).map(|_| rng.normal() * s).collect();
    for d in 0..3 {
        let mean = v.iter().skip(d).step_by(3).sum::<f64>() / o.n as f64;
        v.iter_mut().skip(d).step_by(3).for_each(|c| *c -= mean);
    }
    Ok((x, v))
}

/// Force (3) and half the pair energy (1) on particle `i` at `xi` from the particles `js`
/// whose positions (3 each) are `xs`, summed in order.
#[inline]
fn chunk_sum(i: usize, xi: [f64; 3], js: Range<usize>, xs: &[f64]) -> [f64; 4] {
    let mut acc = [0.0; 4];
    for (k, j) in js.enumerate() {
        if j == i {
            continue;
        }
        let d = [
            xi[0] - xs[3 * k],
            xi[1] - xs[3 * k + 1],
            xi[2] - xs[3 * k + 2],
        ];
        let r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
        let inv2 = 1.0 / r2;
        let inv6 = inv2 * inv2 * inv2;
        let f = 24.0 * inv2 * inv6 * (2.0 * inv6 - 1.0);
        acc[0] += f * d[0];
        acc[1] += f * d[1];
        acc[2] += f * d[2];
        acc[3] += 2.0 * inv6 * (inv6 - 1.0);
    }
    acc
}

/// Energies of one step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Energy {
    /// Σ ½|v|².
    pub kinetic: f64,
    /// Σ_{i<j} 4(r⁻¹² − r⁻⁶).
    pub potential: f64,
}

impl Energy {
    /// Kinetic plus potential.
    pub fn total(&self) -> f64 {
        self.kinetic + self.potential
    }
}

/// How positions meet the force computation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Forces of the chunks present are computed while the others arrive.
    Overlap,
    /// Every chunk is waited for first (a blocking allgather), then the forces.
    Allgather,
    /// One broadcast of the initial positions, then every step's forces from those (a wrong
    /// answer across ranks; the time of the computation alone, for benchmarks).
    Limit,
}

/// One rank's times over the whole run, in seconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Times {
    /// The whole run.
    pub total: f64,
    /// Waiting for positions (and the local completion of this rank's writes).
    pub wait: f64,
    /// Computing forces.
    pub comp: f64,
}

/// The end of a run: the whole final state at rank 0 (positions and velocities, 3N each;
/// empty elsewhere) and this rank's times.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Final positions (rank 0).
    pub x: Vec<f64>,
    /// Final velocities (rank 0).
    pub v: Vec<f64>,
    /// This rank's times.
    pub times: Times,
}

/// A raw pointer that workers write disjoint rows through.
#[derive(Clone, Copy)]
struct Raw(*mut [f64; 4]);
// SAFETY: every user writes rows no other worker touches (see the call site).
unsafe impl Send for Raw {}
// SAFETY: as above.
unsafe impl Sync for Raw {}

impl Raw {
    /// Row-major slot `k`.
    ///
    /// # Safety
    ///
    /// `k` within the allocation.
    unsafe fn slot(self, k: usize) -> *mut [f64; 4] {
        // SAFETY: the caller's.
        unsafe { self.0.add(k) }
    }
}

fn cluster(e: tiers_cluster::Error) -> Error {
    Error::Invalid(format!("md across ranks: {e}"))
}

/// Collective: runs the simulation across the ranks of `w`, each rank's particles on the
/// workers of `pool`; calls `on_step(step, energy)` at rank 0 after every step (and for the
/// initial state, step 0), with the total energy when `energies` is set (it takes a
/// reduction over the ranks) and `None` otherwise (for progress reports).
///
/// # Errors
///
/// [`Error::Invalid`] for options out of range, more ranks than [`NOTIFICATIONS`]/2, or a
/// failed cluster call.
///
/// [`NOTIFICATIONS`]: tiers_cluster::NOTIFICATIONS
pub fn simulate(
    w: &World,
    pool: &Pool,
    o: &Options,
    variant: Variant,
    energies: bool,
    mut on_step: impl FnMut(usize, Option<Energy>),
) -> Result<Outcome> {
    o.validate()?;
    let (me, size) = (w.rank(), w.size());
    if 2 * size > tiers_cluster::NOTIFICATIONS {
        return Err(Error::Invalid(format!(
            "md: {size} ranks, at most {}",
            tiers_cluster::NOTIFICATIONS / 2
        )));
    }
    let (n, nc) = (o.n, o.chunks());
    let chunks_of = |r: usize| split(nc, size, r);
    let parts_of = |r: usize| {
        let c = chunks_of(r);
        (c.start * CHUNK).min(n)..(c.end * CHUNK).min(n)
    };
    let mine = parts_of(me);
    let my_chunks = chunks_of(me);
    let m = mine.len();
    limits::check_alloc("md: chunk sums", limits::mul("md", m, nc)?, 32)?;
    let (x0, v0) = initial(o)?;
    let mut x = x0[3 * mine.start..3 * mine.end].to_vec();
    let mut v = v0[3 * mine.start..3 * mine.end].to_vec();
    drop((x0, v0));
    let mut acc = vec![0.0; 3 * m];
    let mut pe = vec![0.0; m];
    let mut partial = vec![[0.0f64; 4]; m * nc];
    let seg_bytes = 6 * n * 8;
    let segs: [Segment<'_>; 2] = [
        w.segment(SEGS[0], seg_bytes).map_err(cluster)?,
        w.segment(SEGS[1], seg_bytes).map_err(cluster)?,
    ];
    let q = w.queue(0).map_err(cluster)?;
    let mut tm = Times::default();
    let t0 = Instant::now();
    let mut phase = 0usize;
    let dt = o.dt;

    // One force computation at the positions `x`: broadcast, chunk sums as chunks arrive,
    // then per particle the sum of its chunk sums in chunk order.
    let mut forces =
        |x: &[f64], acc: &mut [f64], pe: &mut [f64], tm: &mut Times, phase: usize| -> Result<()> {
            // `Limit` broadcasts once, at phase 0 into segment 0, and then computes every
            // chunk from those stale positions: the full computation, no communication.
            let b = if variant == Variant::Limit {
                0
            } else {
                phase % 2
            };
            let mode = if variant == Variant::Limit && phase == 0 {
                Variant::Allgather
            } else {
                variant
            };
            let (seg, id) = (&segs[b], SEGS[b]);
            let base = seg.as_ptr().cast::<f64>();
            // SAFETY: this rank's own range of the segment, written by nobody else (the other
            // ranks write only their own ranges); no write from it is in flight (waited below
            // in the phase before last, which used this buffer).
            unsafe { std::ptr::copy_nonoverlapping(x.as_ptr(), base.add(3 * mine.start), x.len()) };
            if mode != Variant::Limit && m > 0 {
                for d in (0..size).filter(|&d| d != me && !parts_of(d).is_empty()) {
                    q.write_notify(
                        id.at(3 * mine.start * 8),
                        id.on(d, 3 * mine.start * 8),
                        3 * m * 8,
                        Notification { id: me, value: 1 },
                    )
                    .map_err(cluster)?;
                    if q.posted() + 2 > tiers_cluster::DEFAULT_QUEUE_DEPTH / 2 {
                        q.wait_local(Timeout::Block).map_err(cluster)?;
                    }
                }
            }
            let part = Raw(partial.as_mut_ptr());
            let compute = |src: usize, tm: &mut Times| {
                let c0 = Instant::now();
                let js = parts_of(src);
                // SAFETY: rank `src`'s range: its notification was seen (or it is this rank's
                // own), and no rank writes it again before this rank's next broadcast.
                let xs =
                    unsafe { std::slice::from_raw_parts(base.add(3 * js.start), 3 * js.len()) };
                let cs = chunks_of(src);
                pool.for_each_range(0..m, Schedule::Static, |is| {
                    for li in is {
                        let i = mine.start + li;
                        let xi = [x[3 * li], x[3 * li + 1], x[3 * li + 2]];
                        for c in cs.clone() {
                            let jr = (c * CHUNK).min(n)..((c + 1) * CHUNK).min(n);
                            let off = 3 * (jr.start - js.start);
                            let s = chunk_sum(i, xi, jr.clone(), &xs[off..off + 3 * jr.len()]);
                            // SAFETY: row li of the chunk sums belongs to this worker alone.
                            unsafe { *part.slot(li * nc + c) = s };
                        }
                    }
                });
                tm.comp += c0.elapsed().as_secs_f64();
            };
            // A rank without particles needs no positions and is sent none.
            // A rank without particles needs no positions and is sent none.
            let others: Vec<usize> = (0..size)
                .filter(|&s| m > 0 && s != me && !parts_of(s).is_empty())
                .collect();
            match mode {
                Variant::Limit => {
                    for s in 0..size {
                        if m > 0 && !parts_of(s).is_empty() {
                            compute(s, tm);
                        }
                    }
                }
                Variant::Overlap => {
                    compute(me, tm);
                    for _ in 0..others.len() {
                        let w0 = Instant::now();
                        let src = w
                            .notify_waitsome(id, 0..size, Timeout::Block)
                            .map_err(cluster)?;
                        w.notify_reset(id, src).map_err(cluster)?;
                        tm.wait += w0.elapsed().as_secs_f64();
                        compute(src, tm);
                    }
                }
                Variant::Allgather => {
                    let w0 = Instant::now();
                    for _ in 0..others.len() {
                        let src = w
                            .notify_waitsome(id, 0..size, Timeout::Block)
                            .map_err(cluster)?;
                        w.notify_reset(id, src).map_err(cluster)?;
                    }
                    tm.wait += w0.elapsed().as_secs_f64();
                    for s in 0..size {
                        if m > 0 && !parts_of(s).is_empty() {
                            compute(s, tm);
                        }
                    }
                }
            }
            // Local completion is enough: this rank's positions may be overwritten once its
            // sends are done, and no rank writes a buffer again before it has seen this rank's
            // next broadcast, posted only after this computation has read that buffer. A full
            // wait would pay a round trip that, across hosts, the target answers only at its
            // next call (after the other half of its computation, in the overlapped variant).
            let w0 = Instant::now();
            q.wait_local(Timeout::Block).map_err(cluster)?;
            tm.wait += w0.elapsed().as_secs_f64();
            let c0 = Instant::now();
            for li in 0..m {
                let mut s = [0.0; 4];
                for c in 0..nc {
                    let p = partial[li * nc + c];
                    for k in 0..4 {
                        s[k] += p[k];
                    }
                }
                acc[3 * li..3 * li + 3].copy_from_slice(&s[..3]);
                pe[li] = s[3];
            }
            tm.comp += c0.elapsed().as_secs_f64();
            Ok(())
        };

    // Energies by chunk (each chunk's sum in particle order), gathered exactly (every entry
    // is non-zero at one rank only) and summed in chunk order.
    let energy = |v: &[f64], pe: &[f64]| -> Result<Energy> {
        let mut by_chunk = vec![0.0f64; 2 * nc];
        for c in my_chunks.clone() {
            let r = (c * CHUNK).min(n) - mine.start..((c + 1) * CHUNK).min(n) - mine.start;
            by_chunk[2 * c] = r
                .clone()
                .map(|li| 0.5 * (v[3 * li].powi(2) + v[3 * li + 1].powi(2) + v[3 * li + 2].powi(2)))
                .sum();
            by_chunk[2 * c + 1] = r.map(|li| pe[li]).sum();
        }
        let mut all = vec![0.0f64; 2 * nc];
        w.allreduce(&by_chunk, &mut all, Op::Sum, Timeout::Block)
            .map_err(cluster)?;
        Ok(Energy {
            kinetic: all.iter().step_by(2).sum(),
            potential: all.iter().skip(1).step_by(2).sum(),
        })
    };

    forces(&x, &mut acc, &mut pe, &mut tm, phase)?;
    let e = if energies {
        Some(energy(&v, &pe)?)
    } else {
        None
    };
    if me == 0 {
        on_step(0, e);
    }
    for step in 1..=o.steps {
        for k in 0..3 * m {
            v[k] += 0.5 * dt * acc[k];
            x[k] += dt * v[k];
        }
        phase += 1;
        forces(&x, &mut acc, &mut pe, &mut tm, phase)?;
        for k in 0..3 * m {
            v[k] += 0.5 * dt * acc[k];
        }
        let e = if energies {
            Some(energy(&v, &pe)?)
        } else {
            None
        };
        if me == 0 {
            on_step(step, e);
        }
    }
    tm.total = t0.elapsed().as_secs_f64();

    // The final state at rank 0: velocities (and for `Limit` positions) into its segment of
    // the last phase.
    let b = if variant == Variant::Limit {
        0
    } else {
        phase % 2
    };
    if variant == Variant::Limit {
        // Rank 0 may still read the stale positions the writes below replace.
        w.barrier(Timeout::Block).map_err(cluster)?;
    }
    let (seg, id) = (&segs[b], SEGS[b]);
    let base = seg.as_ptr().cast::<f64>();
    let vo = 3 * n + 3 * mine.start;
    // SAFETY: this rank's own velocity range of its own segment; nobody else writes it.
    unsafe {
        std::ptr::copy_nonoverlapping(x.as_ptr(), base.add(3 * mine.start), x.len());
        std::ptr::copy_nonoverlapping(v.as_ptr(), base.add(vo), v.len());
    }
    if me != 0 && m > 0 {
        // Rank 0 holds every rank's final positions from the last broadcast, but for
        // `Limit`, which broadcasts nothing (and where rank 0 reads only its own range).
        if variant == Variant::Limit {
            q.write(
                id.at(3 * mine.start * 8),
                id.on(0, 3 * mine.start * 8),
                3 * m * 8,
            )
            .map_err(cluster)?;
        }
        q.write_notify(
            id.at(vo * 8),
            id.on(0, vo * 8),
            3 * m * 8,
            Notification {
                id: size + me,
                value: 1,
            },
        )
        .map_err(cluster)?;
        q.wait(Timeout::Block).map_err(cluster)?;
    }
    let mut out = Outcome {
        times: tm,
        ..Outcome::default()
    };
    if me == 0 {
        let others = (1..size).filter(|&r| !parts_of(r).is_empty()).count();
        for _ in 0..others {
            let r = w
                .notify_waitsome(id, size + 1..2 * size, Timeout::Block)
                .map_err(cluster)?;
            w.notify_reset(id, r).map_err(cluster)?;
        }
        // SAFETY: 6N values, every rank's part arrived before its notification.
        let all = unsafe { std::slice::from_raw_parts(base, 6 * n) };
        out.x = all[..3 * n].to_vec();
        out.v = all[3 * n..].to_vec();
    }
    w.barrier(Timeout::Block).map_err(cluster)?;
    drop(segs);
    for s in SEGS {
        w.segment_delete(s, Timeout::Block).map_err(cluster)?;
    }
    Ok(out)
}

/// The `.npy` of an N×3 float64 array (positions or velocities).
pub fn to_npy(values: &[f64]) -> Vec<u8> {
    let mut h = crate::npy::header("<f8", false, &[values.len() / 3, 3]);
    for v in values {
        h.extend_from_slice(&v.to_le_bytes());
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(o: &Options, ranks: usize, threads: usize, variant: Variant) -> (Vec<u64>, Vec<Energy>) {
        let out = tiers_cluster::run_local(ranks, |w| {
            let pool = Pool::builder().threads(threads).build().unwrap();
            let mut es = Vec::new();
            let r = simulate(w, &pool, o, variant, true, |_, e| es.extend(e)).unwrap();
            (r, es)
        })
        .unwrap();
        let (r, es) = out.into_iter().next().unwrap();
        let bits = r.x.iter().chain(&r.v).map(|f| f.to_bits()).collect();
        (bits, es)
    }

    #[test]
    fn energy_is_conserved_over_a_thousand_steps() {
        let o = Options {
            n: 64,
            steps: 1000,
            ..Options::default()
        };
        let (_, es) = run(&o, 1, 1, Variant::Overlap);
        assert_eq!(es.len(), 1001);
        let e0 = es[0].total();
        assert!(e0 < 0.0 && es[0].kinetic > 0.0, "{:?}", es[0]);
        let drift = es
            .iter()
            .map(|e| ((e.total() - e0) / e0).abs())
            .fold(0.0, f64::max);
        assert!(drift < 1e-4, "drift {drift}");
        // The particles moved: kinetic and potential energy exchanged.
        assert!((es[1000].kinetic - es[0].kinetic).abs() > 1e-3);
        // Too large a step does not conserve it: the test can fail.
        let big = Options {
            dt: 0.05,
            steps: 200,
            ..o
        };
        let (_, es) = run(&big, 1, 1, Variant::Overlap);
        let drift = es
            .iter()
            .map(|e| ((e.total() - e0) / e0).abs())
            .fold(0.0, f64::max);
        assert!(drift > 1e-4, "drift {drift} at dt = 0.05");
    }

    #[test]
    fn every_pattern_and_variant_gives_the_same_trajectory() {
        let o = Options {
            n: 100, // 7 chunks, the last short
            steps: 30,
            ..Options::default()
        };
        let (want, ew) = run(&o, 1, 1, Variant::Allgather);
        for (ranks, threads) in [(1, 1), (1, 2), (2, 1), (3, 2), (7, 1), (9, 1)] {
            for v in [Variant::Overlap, Variant::Allgather] {
                let (got, e) = run(&o, ranks, threads, v);
                assert!(got == want, "{ranks} ranks x {threads} threads {v:?}");
                assert!(e == ew, "{ranks} ranks x {threads} threads {v:?}: energies");
            }
        }
        // Without the broadcast the answer differs: the test can see a wrong one.
        let (limit, _) = run(&o, 2, 1, Variant::Limit);
        assert!(limit != want);
    }

    #[test]
    fn options_are_range_checked() {
        let ok = Options::default();
        assert!(ok.validate().is_ok());
        for bad in [
            Options { n: 1, ..ok.clone() },
            Options {
                n: MAX_N + 1,
                ..ok.clone()
            },
            Options {
                dt: 0.0,
                ..ok.clone()
            },
            Options {
                dt: f64::NAN,
                ..ok.clone()
            },
            Options {
                density: 5.0,
                ..ok.clone()
            },
            Options {
                temperature: -1.0,
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}

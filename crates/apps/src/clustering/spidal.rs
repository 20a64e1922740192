//! SPIDAL's DA-PWC annealing procedure ([`Method::Spidal`](super::Method::Spidal)).
//!
//! The state is SPIDAL's: energies ε_i(k), memberships M_i(k) = e^{−ε_i(k)/T} / Σ_l e^{−ε_i(l)/T}
//! (no cluster priors: SPIDAL's ContinuousClustering=false), sizes C(k) = Σ_i M_i(k),
//! B_i(k) = Σ_j δ_ij M_j(k)/C(k), A(k) = −½ Σ_i B_i(k) M_i(k)/C(k) and ε_i(k) = B_i(k) + A(k).
//! One EM iteration goes ε → M → (C, B, A) → ε, and a temperature has converged when, for every
//! cluster, the mean change of ε over the points is at most `epsi_change` (absolute, in units of
//! δ), the ε having been computed at least twice since the last split.
//!
//! The schedule:
//! - start at T = 2·mean(δ_ij, i ≠ j) with one cluster and cool by `cooling` after every
//!   converged temperature, testing for a split each time;
//! - after the first split, cool by `fine_cooling` and test for a split only every
//!   `wait_temperatures + 1` converged temperatures (the split itself happens at the temperature
//!   of the test, and the system re-converges there);
//! - once `max_clusters` exist (or T falls below T₀/10⁵, or two split tests in a row found no
//!   cluster to test), cool by `converging_cooling` until every cluster's freezing measure
//!   Σ_i M_i(k)(1 − M_i(k))/C(k) is at most `freezing`, the Hamiltonian Σ_k −2A(k)C(k) has risen
//!   at five converged temperatures in a row, or `iterations_at_end` temperatures have passed;
//! - clusters smaller than `min_cluster_size` are then dropped, from the best (lowest
//!   Hamiltonian) solution with the same number of clusters, and the final stage runs again;
//! - the best solution with the final number of clusters is returned, labels by least ε.
//!
//! The split test. With one cluster, the cluster is duplicated by halving its memberships. With
//! more, each cluster k with C(k) > `too_small` is in turn duplicated exactly: from the converged
//! ε, the EM runs (at most `duplication_em_limit` iterations) with cluster k counted twice in every
//! point's normalisation, so that both copies hold M_i(k) and C(k) is the size of one copy. The
//! second-derivative matrix of the free energy in the direction that moves the two copies apart
//! is then, with W = diag(M_·(k)) and D̃ the W-weighted double centring of δ,
//!   H = W + W D̃ W / (T·C(k)),
//! so that the test is weighted by the memberships: points that hardly belong to the cluster
//! hardly count. Its largest eigenvalue λ₀ and smallest λ_min = λ₀ − λ_max(λ₀I − H) come from two
//! power iterations started from the fixed vector 1 + i/(2N) (at most `power_limit` iterations,
//! converged after more than ten when the eigenvalue moves by at most `eig_change` relatively
//! and ‖Hx − λx‖² ≤ `eig_vector_change`·λ²). The cluster of least λ_min among those whose
//! iterations converged (with one cluster, λ₀ > 0 suffices) is split when
//! λ_min ≤ `min_eig`·λ₀. A negative λ_min means T < λ_max(−D̃ diag(M/C)), the same critical
//! temperature as in [`Method::Tiers`](super::Method::Tiers). The power iteration finds the
//! eigenvalue of largest magnitude, so a cluster cooled far below its critical temperature,
//! whose H is dominated by a negative eigenvalue, fails the first pass and is not a candidate;
//! two tests in a row without a candidate end the splitting, as in SPIDAL.
//! After the test, ε is left at the duplicated solution of the chosen cluster (at the converged
//! ε when no cluster was tested last), split or not, as SPIDAL leaves it; M and C are those of
//! the last duplicated EM, and they feed the split's size bound, as in SPIDAL.
//!
//! The split moves ε of the two halves apart along the last eigenvector x: ε ± s·x with
//! s = min(0.1‖ε_·(k)‖/‖x‖, |0.05·C(k) / Σ_i ½M_i(k)x_i/T|) (the second bound changes the
//! cluster's size by about 5 %); the new cluster is appended.
//!
//! Where tiers departs: sums run over rows in a fixed order on one node (SPIDAL reduces per
//! thread and MPI rank), so the result does not depend on the thread count; δ is held in f32
//! (SPIDAL multiplies its int16 values by 1/32767 in f64). SPIDAL's optional modes (continuous
//! clustering, intermediate convergence, jiggling, the split list of its other eigenvalue
//! methods) are not reproduced: its fungi configuration uses none of them.

use super::{ClusterOptions, ClusterResult, Delta, Event};
use crate::rows::par_rows;
use std::time::Instant;
use tiers_node::{Pool, Schedule};

/// One clustering solution (SPIDAL's ClusteringSolution, trimmed).
#[derive(Clone)]
struct State {
    k: usize,
    /// ε, N×K.
    eps: Vec<f64>,
    /// M, N×K (from the last EM iteration).
    m: Vec<f64>,
    /// B, N×K.
    b: Vec<f64>,
    c: Vec<f64>,
    a: Vec<f64>,
    /// Σ_i M(1 − M) / C per cluster.
    freeze: Vec<f64>,
    /// Σ_i |Δε_i(k)| of the last iteration, per cluster.
    diff: Vec<f64>,
    /// ε computations since the last split (SPIDAL's oldepsiset).
    eps_count: usize,
    hammy: f64,
    /// How the products δ·M run on the threads.
    style: super::Style,
}

impl State {
    fn new(n: usize, style: super::Style) -> Self {
        State {
            style,
            k: 1,
            eps: vec![0.0; n],
            m: vec![1.0; n],
            b: vec![0.0; n],
            c: vec![n as f64],
            a: vec![0.0],
            freeze: vec![0.0],
            diff: vec![0.0],
            eps_count: 0,
            hammy: 0.0,
        }
    }

    /// One EM iteration at temperature `t`: M from ε (uniform when `uniform`), with cluster
    /// `dup` counted twice in the normalisation, then C, B, A and the new ε.
    fn em<D: Delta + ?Sized>(
        &mut self,
        pool: &Pool,
        delta: &D,
        t: f64,
        dup: Option<usize>,
        uniform: bool,
    ) {
        let (n, k) = (delta.n(), self.k);
        let eps = &self.eps;
        par_rows(pool, &mut self.m, k, Schedule::Static, |rows, block| {
            for (i, mrow) in rows.zip(block.chunks_mut(k)) {
                if uniform {
                    mrow.fill(1.0 / k as f64);
                    continue;
                }
                let erow = &eps[i * k..(i + 1) * k];
                let emin = erow.iter().fold(f64::INFINITY, |a, &b| a.min(b));
                let mut z = 0.0;
                for (cl, (mv, &e)) in mrow.iter_mut().zip(erow).enumerate() {
                    *mv = (-(e - emin) / t).exp();
                    z += if dup == Some(cl) { 2.0 * *mv } else { *mv };
                }
                if z > 0.0 {
                    mrow.iter_mut().for_each(|v| *v /= z);
                } else {
                    mrow.fill(1.0 / k as f64);
                }
            }
        });
        self.c = vec![0.0; k];
        self.freeze = vec![0.0; k];
        for row in self.m.chunks(k) {
            for (cl, &x) in row.iter().enumerate() {
                self.c[cl] += x;
                self.freeze[cl] += x * (1.0 - x);
            }
        }
        for cl in 0..k {
            if self.c[cl] > 0.0 {
                self.freeze[cl] /= self.c[cl];
            }
        }
        self.b.resize(n * k, 0.0);
        delta.times(pool, self.style, &self.m, k, &mut self.b);
        let c = &self.c;
        par_rows(pool, &mut self.b, k, Schedule::Static, |_, block| {
            for row in block.chunks_mut(k) {
                for (v, &cv) in row.iter_mut().zip(c) {
                    *v /= cv;
                }
            }
        });
        self.a = vec![0.0; k];
        for (brow, mrow) in self.b.chunks(k).zip(self.m.chunks(k)) {
            for cl in 0..k {
                self.a[cl] += brow[cl] * mrow[cl];
            }
        }
        for cl in 0..k {
            self.a[cl] *= -0.5 / self.c[cl];
        }
        let measure = self.eps_count > 0;
        self.diff = vec![0.0; k];
        for (erow, brow) in self.eps.chunks_mut(k).zip(self.b.chunks(k)) {
            for (cl, ev) in erow.iter_mut().enumerate() {
                let e = brow[cl] + self.a[cl];
                if measure {
                    self.diff[cl] += (*ev - e).abs();
                }
                *ev = e;
            }
        }
        self.eps_count += 1;
        self.hammy = (0..k).map(|cl| -2.0 * self.a[cl] * self.c[cl]).sum();
    }

    /// SPIDAL's ε convergence test.
    fn converged(&self, n: usize, limit: f64) -> bool {
        self.eps_count > 1 && self.diff.iter().fold(0.0f64, |a, &b| a.max(b)) / n as f64 <= limit
    }

    /// y = H x for cluster `cl` with memberships and size scaled by `fudge` (½ duplicates the
    /// single cluster by halving).
    #[allow(clippy::too_many_arguments)]
    fn hessian<D: Delta + ?Sized>(
        &self,
        pool: &Pool,
        delta: &D,
        cl: usize,
        fudge: f64,
        t: f64,
        x: &[f64],
        y: &mut [f64],
        work: &mut [f64],
    ) {
        let (n, k) = (delta.n(), self.k);
        let mc = |i: usize| fudge * self.m[i * k + cl];
        let cc = fudge * self.c[cl];
        let mut s1 = 0.0;
        let mut s2 = 0.0;
        for i in 0..n {
            let v = mc(i) * x[i];
            work[i] = v;
            s1 += v;
            s2 += self.b[i * k + cl] * v;
        }
        delta.times(pool, self.style, work, 1, y);
        let a2 = 2.0 * self.a[cl];
        for i in 0..n {
            let m = mc(i);
            y[i] = m * x[i] + m / (t * cc) * (y[i] - self.b[i * k + cl] * s1 - s2 - a2 * s1);
        }
    }

    /// SPIDAL's power iteration on `op` (y = op(x)) from `start`: the eigenvalue estimate, its
    /// convergence, and the last (normalised) vector.
    fn power(
        start: &[f64],
        opts: &ClusterOptions,
        mut op: impl FnMut(&[f64], &mut [f64]),
    ) -> (f64, bool, Vec<f64>) {
        let n = start.len();
        let mut x = start.to_vec();
        let mut y = vec![0.0; n];
        let mut previous = 0.0;
        let mut lambda = 0.0;
        for it in 0..opts.power_limit {
            op(&x, &mut y);
            let (mut t0, mut t1, mut t2) = (0.0, 0.0, 0.0);
            for (a, b) in y.iter().zip(&x) {
                t0 += a * b;
                t1 += b * b;
                t2 += a * a;
            }
            lambda = t0 / t1;
            let done = it > 10
                && lambda > 0.0
                && (lambda - previous).abs() <= lambda * opts.eig_change
                && (t2 - 2.0 * t0 * lambda + t1 * lambda * lambda).abs()
                    <= lambda * lambda * opts.eig_vector_change;
            previous = lambda;
            let norm = t2.sqrt().max(1e-300);
            for (a, b) in x.iter_mut().zip(&y) {
                *a = b / norm;
            }
            if done {
                return (lambda, true, x);
            }
        }
        (lambda, false, x)
    }

    /// λ₀ and λ_min of H for cluster `cl`, and λ_min's eigenvector; `None` when SPIDAL would not
    /// consider the cluster.
    fn eigen_test<D: Delta + ?Sized>(
        &self,
        pool: &Pool,
        delta: &D,
        cl: usize,
        t: f64,
        start: &[f64],
        opts: &ClusterOptions,
    ) -> Option<(f64, f64, Vec<f64>)> {
        let n = delta.n();
        let single = self.k == 1;
        let fudge = if single { 0.5 } else { 1.0 };
        let mut work = vec![0.0; n];
        let (l0, ok0, _) = Self::power(start, opts, |x, y| {
            self.hessian(pool, delta, cl, fudge, t, x, y, &mut work)
        });
        if l0 <= 0.0 || (!single && !ok0) {
            return None;
        }
        let (l1, ok1, v) = Self::power(start, opts, |x, y| {
            self.hessian(pool, delta, cl, fudge, t, x, y, &mut work);
            for (a, b) in y.iter_mut().zip(x) {
                *a = l0 * b - *a;
            }
        });
        if !single && !ok1 {
            return None;
        }
        Some((l0, l0 - l1, v))
    }

    /// Splits cluster `cl` along `v` (SPIDAL's perturbation of ε); the new cluster is last.
    fn split(&mut self, cl: usize, v: &[f64], t: f64) {
        let k = self.k;
        let n = v.len();
        let mut shift = 0.0;
        let mut vnorm = 0.0;
        let mut enorm = 0.0;
        for (i, &vi) in v.iter().enumerate() {
            let s = 0.5 * self.m[i * k + cl] * vi / t;
            shift += if k == 1 { s.abs() } else { s };
            vnorm += vi * vi;
            enorm += self.eps[i * k + cl].powi(2);
        }
        let size_bound = (0.05 * self.c[cl] / shift).abs();
        let mut s = 0.1 * (enorm / vnorm.max(1e-300)).sqrt();
        if size_bound < s {
            s = size_bound;
        }
        let k2 = k + 1;
        let mut eps = vec![0.0; n * k2];
        for i in 0..n {
            eps[i * k2..i * k2 + k].copy_from_slice(&self.eps[i * k..(i + 1) * k]);
            let e = self.eps[i * k + cl];
            eps[i * k2 + cl] = e + v[i] * s;
            eps[i * k2 + k] = e - v[i] * s;
        }
        self.eps = eps;
        // M and B keep their old width until the next EM iteration recomputes them.
        let mut m = vec![0.0; n * k2];
        for i in 0..n {
            m[i * k2..i * k2 + k].copy_from_slice(&self.m[i * k..(i + 1) * k]);
        }
        self.m = m;
        self.k = k2;
        self.c.push(0.0);
        self.a.push(0.0);
        self.freeze.push(0.0);
        self.diff.push(0.0);
        self.eps_count = 0;
    }

    /// Drops the clusters marked in `drop`.
    fn remove(&mut self, drop: &[bool]) {
        let (k, n) = (self.k, self.eps.len() / self.k);
        let keep: Vec<usize> = (0..k).filter(|&c| !drop[c]).collect();
        let k2 = keep.len();
        let pick = |v: &[f64]| -> Vec<f64> {
            (0..n)
                .flat_map(|i| keep.iter().map(move |&c| v[i * k + c]))
                .collect()
        };
        self.eps = pick(&self.eps);
        self.m = pick(&self.m);
        self.b = pick(&self.b);
        let pick1 = |v: &[f64]| -> Vec<f64> { keep.iter().map(|&c| v[c]).collect() };
        self.c = pick1(&self.c);
        self.a = pick1(&self.a);
        self.freeze = pick1(&self.freeze);
        self.diff = pick1(&self.diff);
        self.k = k2;
    }
}

/// Runs SPIDAL's DA-PWC procedure (see the module documentation).
pub(super) fn run<D: Delta + ?Sized>(
    pool: &Pool,
    delta: &D,
    opts: &ClusterOptions,
    on_event: &mut dyn FnMut(&Event),
) -> ClusterResult {
    let n = delta.n();
    let t0 = Instant::now();
    // T₀ = twice the mean distance between distinct points.
    let sum: f64 = delta.row_sums().iter().sum::<f64>();
    let pairs = (n * n.saturating_sub(1)).max(1) as f64;
    // Relative to the data's scale (an absolute floor of 1e-12 stopped distances of 1e-20
    // far above their critical temperature, with one cluster).
    let t_initial = match 2.0 * sum / pairs {
        t if t > 0.0 && t.is_finite() => t,
        _ => f64::MIN_POSITIVE,
    };
    let t_min = t_initial / 1e5;
    let start: Vec<f64> = {
        let v: Vec<f64> = (0..n).map(|i| 1.0 + 0.5 * i as f64 / n as f64).collect();
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        v.iter().map(|x| x / norm).collect()
    };

    let mut s = State::new(n, opts.style);
    let mut t = t_initial;
    let mut cooling = opts.cooling;
    let mut max_k = opts.max_clusters.max(1);
    let mut uniform = true;
    let mut on_last_leg = false;
    let mut just_converging = false;
    let mut steps = 0usize; // EM iterations at this temperature
    let mut after_fixing = 0usize;
    let mut between_splits = 0usize;
    let mut violations = 0usize;
    let mut split_failures = 0usize;
    let mut hammy_set = false;
    let mut old_hammy = t_initial * (n * n) as f64;
    let mut best: Option<State> = None;
    let mut t_start = None;
    let mut temperatures = 0usize;
    let mut em_total = 0usize;
    loop {
        s.em(pool, delta, t, None, uniform);
        uniform = false;
        em_total += 1;
        steps += 1;
        // SPIDAL's convergence test: 0 not yet, 1 converged, 2 converged and in the final stage.
        let convergence = if s.eps_count <= 1 {
            0
        } else if s.converged(n, opts.epsi_change) {
            if on_last_leg || just_converging {
                2
            } else if s.k >= max_k || t < t_min || split_failures > 1 {
                on_last_leg = true;
                2
            } else {
                1
            }
        } else if steps > opts.em_limit {
            2
        } else {
            0
        };
        if convergence == 0 {
            continue;
        }
        temperatures += 1;
        on_event(&Event::Temperature {
            t,
            k: s.k,
            em: steps,
            uncertainty: s.freeze.iter().fold(0.0f64, |a, &b| a.max(b)),
            free_energy: super::free_energy(&s.eps, &s.m, n, s.k, t, false),
        });
        steps = 0;
        let mut decreasing = !hammy_set || s.hammy <= old_hammy;
        hammy_set = true;
        if decreasing {
            best = Some(s.clone());
        }
        old_hammy = s.hammy;

        if convergence == 2 || just_converging {
            if after_fixing < opts.iterations_at_end {
                if after_fixing == 0 {
                    violations = 0;
                    cooling = opts.converging_cooling;
                }
                let unfrozen = s.freeze.iter().any(|&f| f > opts.freezing);
                after_fixing += 1;
                if decreasing {
                    violations = 0;
                } else {
                    violations += 1;
                    if violations < 5 {
                        decreasing = true;
                    }
                }
                if unfrozen && decreasing {
                    t *= cooling;
                    continue;
                }
            }
            // Drop clusters that are too small, restarting from the best solution.
            let mut drop: Vec<bool> =
                s.c.iter()
                    .map(|&c| c < opts.min_cluster_size - 0.5)
                    .collect();
            // On a data set smaller than the minimum, every cluster is "too small": keep the
            // largest rather than none.
            if drop.iter().all(|&d| d) {
                if let Some(big) = (0..s.k).max_by(|&a, &b| s.c[a].total_cmp(&s.c[b])) {
                    drop[big] = false;
                }
            }
            let restart = match &best {
                Some(b) if drop.iter().any(|&d| d) && b.k == s.k && s.k > 1 => {
                    let mut r = b.clone();
                    r.remove(&drop);
                    Some(r)
                }
                _ => None,
            };
            if let Some(r) = restart {
                s = r;
                s.eps_count = 1;
                max_k = s.k;
                on_last_leg = true;
                just_converging = true;
                after_fixing = 0;
                between_splits = 0;
                hammy_set = false;
                old_hammy = 0.0;
                best = None;
                continue;
            }
            break;
        }

        // Converged at this temperature with clusters still to find.
        between_splits += 1;
        if between_splits > opts.wait_temperatures {
            between_splits = 0;
        }
        if between_splits > 0 && opts.wait_temperatures > 0 && s.k > 1 {
            t *= cooling;
            continue;
        }
        match split_test(pool, delta, &mut s, t, &start, opts, &mut em_total) {
            Test::Split(cl, lambda_min, v) => {
                on_event(&Event::Split {
                    t,
                    cluster: cl,
                    lambda: lambda_min,
                });
                t_start.get_or_insert(t);
                s.split(cl, &v, t);
                split_failures = 0;
                cooling = opts.fine_cooling;
                between_splits = 0;
            }
            Test::Stable => t *= cooling,
            Test::NoCandidate => {
                split_failures += 1;
                t *= cooling;
            }
        }
    }
    if let Some(b) = best {
        if b.k == s.k && b.hammy < s.hammy {
            s = b;
        }
    }
    let k = s.k;
    let labels = s
        .eps
        .chunks(k)
        .map(|row| (0..k).fold(0, |b, c| if row[c] < row[b] { c } else { b }))
        .collect();
    // Report memberships at the final temperature, as the labels' ε imply.
    let mut memberships = vec![0.0; n * k];
    for (mrow, erow) in memberships.chunks_mut(k).zip(s.eps.chunks(k)) {
        let emin = erow.iter().fold(f64::INFINITY, |a, &b| a.min(b));
        let mut z = 0.0;
        for (mv, &e) in mrow.iter_mut().zip(erow) {
            *mv = (-(e - emin) / t).exp();
            z += *mv;
        }
        mrow.iter_mut().for_each(|v| *v /= z);
    }
    ClusterResult {
        labels,
        memberships,
        k,
        temperatures,
        em_iterations: em_total,
        t_start: t_start.unwrap_or(t_initial),
        t_final: t,
        seconds: t0.elapsed().as_secs_f64(),
    }
}

/// The outcome of a split test.
enum Test {
    /// Split this cluster (least eigenvalue, eigenvector).
    Split(usize, f64, Vec<f64>),
    /// Some cluster was tested and none is unstable enough.
    Stable,
    /// No cluster could be tested (all too small, or no power iteration converged).
    NoCandidate,
}

/// SPIDAL's split test at temperature `t` (see the module documentation). Leaves `s.eps` where
/// SPIDAL leaves it and `s.m`, `s.c` from the last EM iteration run.
fn split_test<D: Delta + ?Sized>(
    pool: &Pool,
    delta: &D,
    s: &mut State,
    t: f64,
    start: &[f64],
    opts: &ClusterOptions,
    em_total: &mut usize,
) -> Test {
    let n = delta.n();
    let k = s.k;
    let mut chosen: Option<(usize, f64, f64, Vec<f64>)> = None;
    if k == 1 {
        if s.c[0] > opts.too_small {
            if let Some((l0, lmin, v)) = s.eigen_test(pool, delta, 0, t, start, opts) {
                chosen = Some((0, l0, lmin, v));
            }
        }
    } else {
        let master = s.eps.clone();
        let sizes = s.c.clone();
        let mut best_eps = master.clone();
        for (cl, &size) in sizes.iter().enumerate() {
            if size <= opts.too_small {
                continue;
            }
            for _ in 0..opts.duplication_em_limit {
                s.em(pool, delta, t, Some(cl), false);
                *em_total += 1;
                if s.converged(n, opts.epsi_change) {
                    break;
                }
            }
            if let Some((l0, lmin, v)) = s.eigen_test(pool, delta, cl, t, start, opts) {
                if chosen.as_ref().is_none_or(|c| lmin < c.2) {
                    chosen = Some((cl, l0, lmin, v));
                    best_eps.clone_from(&s.eps);
                }
            }
            if cl + 1 < k {
                s.eps.clone_from(&master);
            } else {
                s.eps.clone_from(&best_eps);
            }
        }
    }
    match chosen {
        None => Test::NoCandidate,
        Some((cl, l0, lmin, v)) if lmin <= opts.min_eig * l0 => Test::Split(cl, lmin, v),
        Some(_) => Test::Stable,
    }
}

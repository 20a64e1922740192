//! SMACOF multidimensional scaling with unit weights (de Leeuw; \[Qiu2012\] §5.1).
//!
//! Stress σ(X) = Σ_{i<j} (d_ij(X) − δ_ij)². With unit weights the Guttman transform is
//! X⁺ = (1/N) B(X) X, with b_ij = −δ_ij/d_ij(X) off the diagonal and b_ii = −Σ_{j≠i} b_ij, so row i
//! of X⁺ is (1/N) Σ_{j≠i} (δ_ij/d_ij)(x_i − x_j). SMACOF never increases the stress.
//!
//! B is never stored: each b_ij is made from δ_ij and d_ij(X) when needed, and the same pass
//! yields the stress of X, so one iteration reads the distance matrix once. An iteration is
//! bound by the square root and the division per entry, not by reading δ, so for 3-D points
//! (the common case) the product runs by tiles of fixed position (`guttman.rs`): where δ
//! is symmetric, a pair of tiles (r, c) is computed once for both row blocks, half the square
//! roots and divisions. Other dimensions take the blocked product of \[Qiu2012\] Fig. 13: output
//! rows in blocks of b (default 64) claimed by the workers one block at a time (a dynamic
//! schedule, so a worker that loses its core to another process holds no one up), each block
//! walking the columns in panels of up to 8192 columns ([`PANEL`]). Either way a row's sums run
//! in an order fixed by the problem's size alone, and the stress is summed from per-row
//! partials in row order, so the points and stresses depend neither on the thread count nor on
//! how rows are split over ranks.

use crate::matrix::DistMatrix;
use crate::rng::Rng;
use crate::rows::par_rows2;
use std::time::Instant;
use tiers_node::{Pool, Schedule};

/// SMACOF settings.
#[derive(Clone, Debug)]
pub struct MdsOptions {
    /// Target dimension.
    pub dims: usize,
    /// Block size b of the blocked multiply.
    pub block: usize,
    /// Stop when the relative stress decrease of an iteration is below this.
    pub threshold: f64,
    /// Iteration limit.
    pub max_iter: usize,
    /// Seed of the random start (uniform in the unit cube), when no start is given.
    pub seed: u64,
}

/// The most dimensions an embedding may have: far beyond MDS's use (2 or 3, for a look),
/// low enough that the dims × dims eigenproblems of the plot and of the Procrustes fit stay
/// within seconds.
pub const MAX_DIMS: usize = 1024;

impl MdsOptions {
    /// Checks the options for a matrix of `n` points: at least one dimension and block (an
    /// iteration limit of 0 evaluates the start only), at most [`MAX_DIMS`] dimensions, a
    /// finite non-negative threshold, and
    /// points that fit in memory.
    pub fn validate(&self, n: usize) -> crate::Result<()> {
        let bad = |m: String| Err(crate::Error::Invalid(m));
        if self.dims == 0 || self.block == 0 {
            return bad(format!(
                "dims and block must be at least 1 (dims {}, block {})",
                self.dims, self.block
            ));
        }
        if self.dims > MAX_DIMS {
            return bad(format!(
                "dims {} is more than {MAX_DIMS} (the plot's and the reference's principal axes cost dims³)",
                self.dims
            ));
        }
        if !(self.threshold >= 0.0 && self.threshold.is_finite()) {
            return bad(format!(
                "the threshold must be a non-negative number, not {}",
                self.threshold
            ));
        }
        // The configuration, its update and the reduction buffers: a few copies of N x dims.
        let points = crate::limits::mul("points x dims", n, self.dims)?;
        crate::limits::check_alloc(
            "the MDS points",
            crate::limits::mul("points", points, 4)?,
            8,
        )?;
        Ok(())
    }
}

impl Default for MdsOptions {
    fn default() -> Self {
        MdsOptions {
            dims: 3,
            block: 64,
            threshold: 1e-6,
            max_iter: 1000,
            seed: 1,
        }
    }
}

/// Stress of one iteration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IterStress {
    /// σ(X) = Σ_{i<j}(d_ij − δ_ij)².
    pub raw: f64,
    /// σ(X) / Σ_{i<j} δ_ij² (SPIDAL's normalised stress).
    pub normalized: f64,
}

/// Result of a SMACOF run.
#[derive(Clone, Debug)]
pub struct MdsResult {
    /// Final points, N×dims row-major.
    pub points: Vec<f64>,
    /// Stress of X₀, X₁, … (entry k is σ(X_k)); the last entry is the stress of `points`.
    pub stress: Vec<IterStress>,
    /// Guttman transforms performed.
    pub iterations: usize,
    /// Whether the threshold was met before the iteration limit.
    pub converged: bool,
    /// Wall time of the iterations.
    pub seconds: f64,
}

/// The random start: uniform in [0, 1)^dims, seeded.
pub fn random_start(n: usize, dims: usize, seed: u64) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    (0..n * dims).map(|_| rng.f64()).collect()
}

/// Columns per panel of the product: 8192 columns of 3-D coordinates are 192 KiB, within a
/// core's L2. Each row of a b-row block runs over a panel's columns in one stretch: the
/// δ row is read as one sequential stream, which measured 1.5x faster than b×b tiles, whose b
/// interleaved row streams of 256 bytes defeat the hardware prefetcher.
pub const PANEL: usize = 8192;

/// One pass: returns σ(X) and writes the Guttman transform of X into `next`. Plans the
/// transform for this one call (for 3-D points that reads δ once more to find its symmetric
/// tiles); iterations should keep a [`Transform`].
pub fn guttman_step(
    pool: &Pool,
    delta: &DistMatrix,
    x: &[f64],
    next: &mut [f64],
    dims: usize,
    block: usize,
    row_stress: &mut [f64],
) -> f64 {
    Transform::new(pool, delta, dims, block).step(pool, x, next, row_stress);
    // Each pair counted twice over the rows; sum in row order for thread independence.
    row_stress.iter().sum::<f64>() / 2.0
}

/// The Guttman transform of a matrix's rows, planned once and applied every iteration.
///
/// 3-D points (the common case) take the tiled path of `guttman.rs`: tiles of a fixed
/// size, each symmetric pair of tiles computed once, so an iteration costs about half a square
/// root and half a division per entry. Other dimensions take row blocks of `block` rows walked
/// over column panels of max(`block`, [`PANEL`]). Either way a row's sums do not depend on the
/// threads, ranks, block or panel sizes.
pub struct Transform<'a> {
    rows: &'a [f32],
    first: usize,
    n: usize,
    dims: usize,
    block: usize,
    tiles: Option<crate::guttman::Tiles>,
}

impl<'a> Transform<'a> {
    /// The transform of the whole matrix `delta`.
    pub fn new(pool: &Pool, delta: &'a DistMatrix, dims: usize, block: usize) -> Self {
        Transform::of_rows(pool, &delta.data, 0, delta.n, dims, block)
    }

    /// The transform of rows `first..` of an `n`-point problem, `rows` holding them (row-major,
    /// `n` wide).
    pub fn of_rows(
        pool: &Pool,
        rows: &'a [f32],
        first: usize,
        n: usize,
        dims: usize,
        block: usize,
    ) -> Self {
        let tiles = (dims == 3)
            .then(|| crate::guttman::Tiles::plan(pool, rows, first, n, crate::guttman::TILE, true));
        Transform {
            rows,
            first,
            n,
            dims,
            block,
            tiles,
        }
    }

    /// Writes the transform of `x` (the whole N×dims configuration) for these rows into `next`
    /// and each row's Σ_{j≠i} (d_ij − δ_ij)² into `row_stress`.
    pub fn step(&mut self, pool: &Pool, x: &[f64], next: &mut [f64], row_stress: &mut [f64]) {
        match &mut self.tiles {
            Some(t) => t.step(pool, self.rows, x, next, row_stress),
            None => guttman_rows(
                pool,
                self.rows,
                self.first,
                self.n,
                x,
                next,
                self.dims,
                self.block,
                self.block.max(PANEL),
                row_stress,
            ),
        }
    }
}

/// The Guttman transform and the stress of rows `first..first + rows` of an `n`-point
/// problem in any dimension (3-D points take `guttman.rs`): `delta_rows` holds those rows of δ (row-major, `n` wide), `next` and `row_stress`
/// receive theirs; `x` is the whole configuration. Each row's sums depend neither on the block
/// size, the panel width nor on which rows share the call, so a row computed by any rank and
/// thread is the same bits.
#[allow(clippy::too_many_arguments)]
fn guttman_rows(
    pool: &Pool,
    delta_rows: &[f32],
    first: usize,
    n: usize,
    x: &[f64],
    next: &mut [f64],
    dims: usize,
    block: usize,
    panel: usize,
    row_stress: &mut [f64],
) {
    let drow_of = |i: usize| &delta_rows[(i - first) * n..(i - first + 1) * n];
    let b = block.max(1);
    let inv_n = 1.0 / n as f64;
    let cb = panel.max(1);
    par_rows2(
        pool,
        next,
        dims,
        row_stress,
        1,
        Schedule::Dynamic(b),
        |local, out, rs| {
            let rows = local.start + first..local.end + first;
            let len = rows.len();
            let mut acc = vec![0.0f64; len * dims];
            let mut st = vec![0.0f64; len];
            let mut jb = 0;
            while jb < n {
                let je = (jb + cb).min(n);
                for (li, i) in rows.clone().enumerate() {
                    let drow = &drow_of(i)[jb..je];
                    let xi = &x[i * dims..(i + 1) * dims];
                    let a = &mut acc[li * dims..(li + 1) * dims];
                    let mut s = 0.0;
                    for (k, &dl) in drow.iter().enumerate() {
                        let j = jb + k;
                        if j == i {
                            continue;
                        }
                        let xj = &x[j * dims..(j + 1) * dims];
                        let dist = xi
                            .iter()
                            .zip(xj)
                            .map(|(p, q)| (p - q) * (p - q))
                            .sum::<f64>()
                            .sqrt();
                        let dl = f64::from(dl);
                        s += (dist - dl) * (dist - dl);
                        // Coincident points contribute nothing (SMACOF's b_ij = 0). Any
                        // other distance counts, however small the data's scale (an
                        // absolute floor once stopped distances of 1e-20 from moving).
                        let r = dl / dist;
                        if dist > 0.0 && r.is_finite() {
                            for c in 0..dims {
                                a[c] += r * (xi[c] - xj[c]);
                            }
                        }
                    }
                    st[li] += s;
                }
                jb = je;
            }
            for (o, a) in out.iter_mut().zip(&acc) {
                *o = a * inv_n;
            }
            rs.copy_from_slice(&st);
        },
    );
}

/// The arithmetic an iteration cannot avoid, for a benchmark's limit: Σ (δ/√s + √s) over the
/// entries, one square root and one division each (f64, vectorised as the kernels are). A 3-D
/// iteration with a symmetric δ does N(N − 1)/2 of them.
pub fn divider_floor(dl: &[f32], ss: &[f64]) -> f64 {
    crate::kernel::divider(dl, ss)
}

/// Stress σ(X) alone.
pub fn stress(pool: &Pool, delta: &DistMatrix, x: &[f64], dims: usize) -> f64 {
    let mut next = vec![0.0; x.len()];
    let mut rs = vec![0.0; delta.n];
    guttman_step(pool, delta, x, &mut next, dims, 64, &mut rs)
}

/// Σ_{i<j} δ_ij².
pub fn delta_norm(delta: &DistMatrix) -> f64 {
    let n = delta.n;
    (0..n)
        .map(|i| {
            delta.row(i)[i + 1..]
                .iter()
                .map(|&d| f64::from(d) * f64::from(d))
                .sum::<f64>()
        })
        .sum()
}

/// The smallest largest distance [`check_scale`] accepts.
pub const MIN_SCALE: f64 = 1e-9;

/// Refuses distances whose largest is below [`MIN_SCALE`] (but not all zero): the 3-D
/// kernel counts point distances below 10⁻¹² as zero (its ratio δ/d has no branch), so such
/// data would collapse to a point and still report convergence. `largest`: the largest
/// distance of the matrix (of every rank's rows).
pub fn check_scale(largest: f64) -> crate::Result<()> {
    if largest > 0.0 && largest < MIN_SCALE {
        return Err(crate::Error::Invalid(format!(
            "the largest distance is {largest:e}: SMACOF here needs distances of {MIN_SCALE:e} \
             or more (it counts point distances below 1e-12 as zero); scale the matrix up"
        )));
    }
    Ok(())
}

/// The largest of `data` (distances, non-negative).
pub fn largest(data: &[f32]) -> f64 {
    f64::from(data.iter().copied().fold(0.0f32, f32::max))
}

/// SMACOF's stopping rule: the stress `raw` of this iteration is zero, or lower than the
/// last one's by less than `threshold` of it.
fn stress_settled(hist: &[IterStress], raw: f64, threshold: f64) -> bool {
    match hist.last() {
        Some(prev) => prev.raw - raw < threshold * prev.raw || raw == 0.0,
        None => raw == 0.0,
    }
}

/// Runs SMACOF from `start` (or the seeded random start), calling `on_iter(k, stress of X_k)`.
///
/// # Panics
///
/// When `opts.dims` is zero or `start` is not N×dims ([`MdsOptions::validate`] and the
/// commands' reading of start files check both).
pub fn smacof(
    pool: &Pool,
    delta: &DistMatrix,
    start: Option<Vec<f64>>,
    opts: &MdsOptions,
    mut on_iter: impl FnMut(usize, IterStress),
) -> MdsResult {
    let n = delta.n;
    let dims = opts.dims;
    assert!(dims > 0, "dims must be positive");
    let mut x = start.unwrap_or_else(|| random_start(n, dims, opts.seed));
    assert_eq!(x.len(), n * dims, "start has the wrong shape");
    let norm = delta_norm(delta).max(f64::MIN_POSITIVE);
    let mut next = vec![0.0; n * dims];
    let mut rs = vec![0.0; n];
    let mut hist: Vec<IterStress> = Vec::new();
    let t0 = Instant::now();
    let mut transform = Transform::new(pool, delta, dims, opts.block);
    let mut converged = false;
    let mut iterations = 0;
    loop {
        transform.step(pool, &x, &mut next, &mut rs);
        // Each pair counted twice over the rows; summed in row order.
        let raw = rs.iter().sum::<f64>() / 2.0;
        let s = IterStress {
            raw,
            normalized: raw / norm,
        };
        on_iter(hist.len(), s);
        let stop = stress_settled(&hist, raw, opts.threshold);
        hist.push(s);
        if stop {
            converged = true;
            break;
        }
        if iterations >= opts.max_iter {
            break;
        }
        std::mem::swap(&mut x, &mut next);
        iterations += 1;
    }
    MdsResult {
        points: x,
        stress: hist,
        iterations,
        converged,
        seconds: t0.elapsed().as_secs_f64(),
    }
}

/// The segments [`smacof_ranks`] uses: two configurations, used alternately, each with every
/// row's stress after it.
const CONFIG_SEGS: [tiers_cluster::SegId; 2] = [tiers_cluster::SegId(0), tiers_cluster::SegId(1)];

/// SMACOF on every thread of every rank of `world` (\[Qiu2012\] §5.1): each rank holds its rows
/// of δ (`rows`, from [`read_rows`](crate::matrix::read_rows) or
/// [`pairwise_ranks`](crate::distance::pairwise_ranks)), computes the Guttman transform and the
/// stress terms of those rows, and writes them into every rank's copy of the next
/// configuration (an allgather by one-sided writes into two alternating segments, one barrier
/// per iteration). Every rank sums the stress of all rows in row order, so every pattern of
/// ranks and threads gives the bits [`smacof`] gives. Every rank returns the whole result.
/// Collective.
///
/// # Errors
///
/// [`Error::Invalid`](crate::Error::Invalid) for a cluster-tier failure (a rank that died, a
/// segment that cannot be made) or options that do not fit.
pub fn smacof_ranks(
    world: &tiers_cluster::World,
    pool: &Pool,
    rows: &crate::distance::RowBlock,
    opts: &MdsOptions,
    mut on_iter: impl FnMut(usize, IterStress),
) -> crate::Result<MdsResult> {
    use tiers_cluster::Timeout;
    let cluster = |e: tiers_cluster::Error| crate::Error::Invalid(format!("MDS across ranks: {e}"));
    let (n, dims) = (rows.n, opts.dims);
    opts.validate(n)?;
    let (rank, size) = (world.rank(), world.size());
    let first = rows.rows.start;
    let len = rows.rows.len();
    // Where every rank's rows start, from the row counts all ranks hold.
    let mut counts = vec![0u64; size];
    counts[rank] = len as u64;
    let mut all = vec![0u64; size];
    world
        .allreduce(&counts, &mut all, tiers_cluster::Op::Sum, Timeout::Block)
        .map_err(cluster)?;
    let starts: Vec<usize> = all
        .iter()
        .scan(0usize, |s, &c| {
            let at = *s;
            *s += c as usize;
            Some(at)
        })
        .collect();
    if all.iter().sum::<u64>() as usize != n || starts[rank] != first {
        return Err(crate::Error::Invalid(format!(
            "MDS across ranks: the ranks' rows {all:?} do not tile 0..{n} in rank order"
        )));
    }
    // Σ_{i<j} δ², summed by rows in row order like delta_norm.
    let mut norms = vec![0.0f64; n];
    for (k, i) in rows.rows.clone().enumerate() {
        norms[i] = rows.data[k * n + i + 1..(k + 1) * n]
            .iter()
            .map(|&d| f64::from(d) * f64::from(d))
            .sum();
    }
    let mut norms_all = vec![0.0f64; n];
    world
        .allreduce(
            &norms,
            &mut norms_all,
            tiers_cluster::Op::Sum,
            Timeout::Block,
        )
        .map_err(cluster)?;
    let norm = norms_all.iter().sum::<f64>().max(f64::MIN_POSITIVE);
    // Layout of a configuration segment: n x dims coordinates, then n row stresses.
    let seg_bytes = (n * dims + n) * 8;
    let segs = [
        world.segment(CONFIG_SEGS[0], seg_bytes).map_err(cluster)?,
        world.segment(CONFIG_SEGS[1], seg_bytes).map_err(cluster)?,
    ];
    let bytes = |v: &[f64]| -> Vec<u8> { v.iter().flat_map(|x| x.to_ne_bytes()).collect() };
    let floats = |b: &[u8]| -> Vec<f64> {
        b.chunks_exact(8)
            .map(|c| f64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect()
    };
    let mut x = random_start(n, dims, opts.seed);
    let mut next = vec![0.0; len * dims];
    let mut rs = vec![0.0; len];
    let mut hist: Vec<IterStress> = Vec::new();
    let q = world.queue(0).map_err(cluster)?;
    let t0 = Instant::now();
    let mut transform = Transform::of_rows(pool, &rows.data, first, n, dims, opts.block);
    let (mut converged, mut iterations) = (false, 0);
    let mut buf = vec![0u8; seg_bytes];
    for k in 0.. {
        transform.step(pool, &x, &mut next, &mut rs);
        // This rank's rows of X_{k+1} and of σ's terms into every rank's segment k+1 (mod 2).
        let seg = &segs[(k + 1) % 2];
        let id = CONFIG_SEGS[(k + 1) % 2];
        let (xo, so) = (first * dims * 8, (n * dims + first) * 8);
        seg.write(xo, &bytes(&next)).map_err(cluster)?;
        seg.write(so, &bytes(&rs)).map_err(cluster)?;
        for r in (0..size).filter(|&r| r != rank && len > 0) {
            q.write(id.at(xo), id.on(r, xo), len * dims * 8)
                .map_err(cluster)?;
            q.write(id.at(so), id.on(r, so), len * 8).map_err(cluster)?;
            if r % 256 == 255 {
                q.wait(Timeout::Block).map_err(cluster)?;
            }
        }
        q.wait(Timeout::Block).map_err(cluster)?;
        world.barrier(Timeout::Block).map_err(cluster)?;
        seg.read(0, &mut buf).map_err(cluster)?;
        let all = floats(&buf);
        let raw = all[n * dims..].iter().sum::<f64>() / 2.0;
        let s = IterStress {
            raw,
            normalized: raw / norm,
        };
        on_iter(hist.len(), s);
        let stop = stress_settled(&hist, raw, opts.threshold);
        hist.push(s);
        if stop {
            converged = true;
            break;
        }
        if iterations >= opts.max_iter {
            break;
        }
        x.copy_from_slice(&all[..n * dims]);
        iterations += 1;
    }
    let seconds = t0.elapsed().as_secs_f64();
    drop(segs);
    for id in CONFIG_SEGS {
        world.segment_delete(id, Timeout::Block).map_err(cluster)?;
    }
    Ok(MdsResult {
        points: x,
        stress: hist,
        iterations,
        converged,
        seconds,
    })
}

/// Writes points as `index<TAB>x<TAB>y…` lines (SPIDAL's points format without labels) or, for
/// a `.csv` path, comma-separated.
///
/// # Panics
///
/// When `dims` is 0 or the points are not whole (`len % dims != 0`): a fault of the caller
/// (the commands pass points they made), which would otherwise drop coordinates silently.
pub fn format_points(points: &[f64], dims: usize, csv: bool) -> String {
    crate::compare::whole_points(points.len(), dims);
    use std::fmt::Write as _;
    let sep = if csv { ',' } else { '\t' };
    let mut s = String::new();
    for (i, p) in points.chunks(dims).enumerate() {
        let _ = write!(s, "{i}");
        for v in p {
            let _ = write!(s, "{sep}{v}");
        }
        s.push('\n');
    }
    s
}

/// Reads points written by [`format_points`] or SPIDAL (`index x y z [label]`): returns the
/// points (N×dims) and, when a column follows them, the labels.
pub fn parse_points(text: &str, dims: usize, file: &str) -> crate::Result<(Vec<f64>, Vec<usize>)> {
    use crate::Error;
    let mut pts = Vec::new();
    let mut labels = Vec::new();
    for (k, line) in text.lines().enumerate() {
        let toks: Vec<&str> = line
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|t| !t.is_empty())
            .collect();
        if toks.is_empty() {
            continue;
        }
        if toks.len() < dims + 1 || toks.len() > dims + 2 {
            return Err(Error::format(
                file,
                k + 1,
                format!(
                    "{} columns: expected an index, {dims} coordinates (the dimensions asked \
                     for) and an optional whole-number label",
                    toks.len()
                ),
            ));
        }
        // Every line alike: a label on some lines only would be a coordinate on the others.
        let with_label = toks.len() == dims + 2;
        if !pts.is_empty() && with_label == labels.is_empty() {
            return Err(Error::format(
                file,
                k + 1,
                format!(
                    "{} columns where the lines before have {}",
                    toks.len(),
                    dims + 1 + usize::from(!labels.is_empty())
                ),
            ));
        }
        // Points are numbered 0, 1, … in order (SPIDAL's files are): a duplicate or missing
        // index would otherwise pair the wrong points silently.
        let want = pts.len() / dims.max(1);
        if toks[0].parse::<usize>().ok() != Some(want) {
            return Err(Error::format(
                file,
                k + 1,
                format!("point index {:?} where {want} was expected (points are numbered 0, 1, … in order)", toks[0]),
            ));
        }
        for t in &toks[1..=dims] {
            let v = t
                .parse::<f64>()
                .map_err(|_| Error::format(file, k + 1, format!("not a number: {t:?}")))?;
            if !v.is_finite() {
                return Err(Error::format(
                    file,
                    k + 1,
                    format!("coordinate {t:?} is not a finite number"),
                ));
            }
            pts.push(v);
        }
        if let Some(l) = toks.get(dims + 1) {
            labels.push(l.parse::<usize>().map_err(|_| {
                Error::format(
                    file,
                    k + 1,
                    format!(
                        "the last column, {l:?}, is not a whole-number label: has the \
                             file more than {dims} coordinates?"
                    ),
                )
            })?);
        }
    }
    Ok((pts, labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::procrustes;

    fn planted(n: usize, dims: usize, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..n * dims).map(|_| rng.normal()).collect()
    }

    #[test]
    fn recovers_planted_configuration() {
        let n = 60;
        let truth = planted(n, 3, 11);
        let d = DistMatrix::euclidean(&truth, 3);
        let pool = Pool::builder().threads(2).build().unwrap();
        let opts = MdsOptions {
            threshold: 1e-12,
            max_iter: 3000,
            block: 16,
            ..Default::default()
        };
        let r = smacof(&pool, &d, None, &opts, |_, _| {});
        let last = r.stress.last().unwrap();
        assert!(
            last.normalized < 1e-6,
            "normalised stress {}",
            last.normalized
        );
        let p = procrustes(&r.points, &truth, 3);
        assert!(p.disparity < 1e-4, "Procrustes disparity {}", p.disparity);
    }

    #[test]
    fn stress_never_increases() {
        // Non-Euclidean dissimilarities (random), where SMACOF must still descend.
        let n = 40;
        let mut rng = Rng::new(5);
        let mut data = vec![0f32; n * n];
        for i in 0..n {
            for j in 0..i {
                let v = 0.2 + rng.f64() as f32;
                data[i * n + j] = v;
                data[j * n + i] = v;
            }
        }
        let d = DistMatrix::new(n, data);
        let pool = Pool::builder().threads(2).build().unwrap();
        let opts = MdsOptions {
            threshold: 0.0,
            max_iter: 200,
            ..Default::default()
        };
        let r = smacof(&pool, &d, None, &opts, |_, _| {});
        assert!(r.stress.len() > 50);
        for w in r.stress.windows(2) {
            assert!(
                w[1].raw <= w[0].raw * (1.0 + 1e-12),
                "{} then {}",
                w[0].raw,
                w[1].raw
            );
        }
        assert!(r.stress.last().unwrap().raw < 0.5 * r.stress[0].raw);
    }

    #[test]
    fn thread_count_independent() {
        let n = 150;
        let truth = planted(n, 5, 2);
        let d = DistMatrix::euclidean(&truth, 5);
        let opts = MdsOptions {
            max_iter: 30,
            block: 8,
            ..Default::default()
        };
        let runs: Vec<MdsResult> = [1, 2, 3]
            .iter()
            .map(|&t| {
                let pool = Pool::builder().threads(t).build().unwrap();
                smacof(&pool, &d, None, &opts, |_, _| {})
            })
            .collect();
        for r in &runs[1..] {
            assert_eq!(r.points, runs[0].points);
            assert_eq!(r.stress, runs[0].stress);
        }
        // Two dimensions take the generic path.
        let o2 = MdsOptions { dims: 2, ..opts };
        let a = smacof(
            &Pool::builder().threads(1).build().unwrap(),
            &d,
            None,
            &o2,
            |_, _| {},
        );
        let b = smacof(
            &Pool::builder().threads(2).build().unwrap(),
            &d,
            None,
            &o2,
            |_, _| {},
        );
        assert_eq!(a.points, b.points);
    }

    #[test]
    fn three_d_kernel_independent_of_threads_and_block_size() {
        // Above one tile (256), so that pairs of tiles, single tiles and rank boundaries inside
        // tiles all occur.
        let n = 603;
        let truth = planted(n, 3, 9);
        let d = DistMatrix::euclidean(&truth, 3);
        let run = |threads: usize, block: usize| {
            let opts = MdsOptions {
                max_iter: 25,
                threshold: 0.0,
                block,
                ..Default::default()
            };
            let pool = Pool::builder().threads(threads).build().unwrap();
            smacof(&pool, &d, None, &opts, |_, _| {})
        };
        let a = run(1, 64);
        for (t, b) in [(2, 64), (3, 8), (2, 5), (1, 1000)] {
            let r = run(t, b);
            assert_eq!(r.points, a.points, "{t} threads, block {b}");
            assert_eq!(r.stress, a.stress, "{t} threads, block {b}");
        }
        // Across ranks, each holding only its rows of δ: the same bits.
        for (ranks, threads) in [(1, 1), (2, 1), (3, 2), (4, 1)] {
            let results = tiers_cluster::run_local(ranks, |w| {
                let rows = crate::distance::even_rows(n, ranks, w.rank());
                let block = crate::distance::RowBlock {
                    n,
                    data: d.data[rows.start * n..rows.end * n].to_vec(),
                    rows,
                };
                let opts = MdsOptions {
                    max_iter: 25,
                    threshold: 0.0,
                    ..Default::default()
                };
                let pool = Pool::builder().threads(threads).build().unwrap();
                smacof_ranks(w, &pool, &block, &opts, |_, _| {}).unwrap()
            })
            .unwrap();
            for r in results {
                assert_eq!(r.points, a.points, "{ranks} ranks x {threads} threads");
                assert_eq!(r.stress, a.stress, "{ranks} ranks x {threads} threads");
                assert_eq!(r.iterations, a.iterations);
            }
        }
        // One step on its own (planned for the call) is an iteration's step.
        let pool = Pool::builder().threads(2).build().unwrap();
        let x = random_start(n, 3, 4);
        let (mut want, mut got) = (vec![0.0; n * 3], vec![0.0; n * 3]);
        let (mut rs, mut rs2) = (vec![0.0; n], vec![0.0; n]);
        let s0 = guttman_step(&pool, &d, &x, &mut want, 3, 64, &mut rs);
        let mut t = Transform::new(&pool, &d, 3, 8);
        t.step(&pool, &x, &mut got, &mut rs2);
        assert_eq!((s0, &want), (rs2.iter().sum::<f64>() / 2.0, &got));
        // The stress the step reports is σ of its input, counted over pairs once.
        let mut direct = 0.0;
        for i in 0..n {
            for j in i + 1..n {
                let dij: f64 = (0..3)
                    .map(|k| (a.points[i * 3 + k] - a.points[j * 3 + k]).powi(2))
                    .sum::<f64>()
                    .sqrt();
                direct += (dij - f64::from(d.get(i, j))).powi(2);
            }
        }
        let pool = Pool::builder().threads(2).build().unwrap();
        let s = stress(&pool, &d, &a.points, 3);
        assert!(
            (s - direct).abs() <= 1e-9 * direct.max(1e-300),
            "{s} vs {direct}"
        );
    }

    #[test]
    fn points_round_trip() {
        let p = vec![0.5, -1.25, 3.0, 1.0, 2.0, 4.0];
        let (q, l) = parse_points(&format_points(&p, 3, true), 3, "p.csv").unwrap();
        assert_eq!(q, p);
        assert!(l.is_empty());
        let (_, l) = parse_points("0\t1\t2\t3\t7\n", 3, "p").unwrap();
        assert_eq!(l, vec![7]);
        assert!(parse_points("0 1\n", 3, "p")
            .unwrap_err()
            .to_string()
            .contains("p:1"));
        // Indices out of order, repeated, or not numbers; coordinates that are not finite.
        for bad in [
            "1 0 0 0\n",
            "0 0 0 0\n0 1 1 1\n",
            "x 0 0 0\n",
            "0 nan 0 0\n",
            "0 0 inf 0\n",
            // More columns than an index, 3 coordinates and a label; a label on some lines
            // only; a label that is not a whole number (a fourth coordinate).
            "0 1 2 3 4 5\n",
            "0 1 2 3\n1 1 2 3 7\n",
            "0 1 2 3 7\n1 1 2 3\n",
            "0 1 2 3 0.25\n",
        ] {
            assert!(parse_points(bad, 3, "p").is_err(), "{bad:?}");
        }
        let e = parse_points("0 1 2 3 0.5\n", 3, "p")
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than 3 coordinates"), "{e}");
    }
}

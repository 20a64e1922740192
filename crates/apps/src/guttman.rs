//! The 3-D Guttman transform by tiles, each off-diagonal pair of tiles computed once.
//!
//! An iteration of SMACOF is bound by one square root and one division per matrix entry
//! (δ_ij/d_ij), not by reading δ. Both are the same for (i, j) and (j, i) when δ is symmetric,
//! so this path computes them once per pair: the index space is cut into tiles of [`TILE`]
//! rows and columns at fixed positions (multiples of the tile from 0, whatever the ranks and
//! threads), and a tile pair (r, c), r < c, gives both row block r's sums over column tile c and
//! row block c's sums over column tile r ([`crate::kernel::Pair3`]).
//!
//! **Same bits whatever the pattern.** Every row's result is defined tile by tile: the sums of
//! row i over column tile c ("partial (i, c)") are taken in four lanes, lane l taking the columns
//! j ≡ l mod 4 in ascending order, combined as (l0 + l1) + (l2 + l3); the row's transform and
//! stress are its partials added in tile order. A partial is computed either from row i's side
//! (a plain run over the tile) or from the columns' side of a pair, which gives the same bits (the
//! kernel's notes say why). Which of the two a rank uses depends on its rows; the answer does not.
//! A pair is used only where this rank holds both row blocks whole and δ is symmetric between
//! them bit for bit (checked once, when the plan is made); elsewhere each side is computed alone,
//! so asymmetric matrices get what they always got.
//!
//! Memory: besides δ's rows, one set of four partials per owned row and column tile
//! (32 bytes per `TILE` entries of δ, 3 % of δ's f32s at the default tile).

use crate::kernel::{self, Lanes};
use crate::rows::{par_rows, par_rows2, Slots};
use std::ops::Range;
use tiers_node::{Pool, Schedule};

/// Rows and columns per tile. A pair's column sums (16 × `TILE` f64, 32 KiB) stay in L1/L2
/// while its rows stream past; the position of tiles is part of the definition of every row's
/// sums, so this is a constant, not an option.
pub const TILE: usize = 256;

/// Bytes of δ's rows above which a tile asks for the next row's piece ahead (the last-level
/// cache of a common server core complex).
const PREFETCH_ABOVE: usize = 32 << 20;

/// One unit of work of an iteration.
#[derive(Clone, Debug, PartialEq)]
enum Task {
    /// `rows` (global indices, all this rank's) over column tile `c`, from the rows' side.
    Rows { rows: Range<usize>, c: usize },
    /// Row tiles `r` < `c`, both wholly this rank's, δ symmetric between them.
    Pair { r: usize, c: usize },
    /// Tile `d` against itself, wholly this rank's and symmetric: each pair (i, j) of it once.
    Diagonal { d: usize },
}

/// The plan of the tiled transform for one rank's rows of δ: which tile pairs are computed once,
/// and the partials' buffer, reused every iteration.
pub(crate) struct Tiles {
    tile: usize,
    n: usize,
    first: usize,
    len: usize,
    /// Column tiles.
    nt: usize,
    /// Pairs first (twice the work), then single tiles, handed out dynamically.
    tasks: Vec<Task>,
    /// Partial (i, c) at `(i - first) * nt + c`: Σ r·e₀, Σ r·e₁, Σ r·e₂, Σ (d − δ)².
    partials: Vec<[f64; 4]>,
}

impl Tiles {
    /// Plans rows `first..` of an `n`-point problem, `delta_rows` holding them (row-major, `n`
    /// wide), with tiles of `tile` (a positive multiple of 4) and, when `pair`, tile pairs where
    /// δ allows. Checking δ's symmetry reads this rank's diagonal region once.
    pub(crate) fn plan(
        pool: &Pool,
        delta_rows: &[f32],
        first: usize,
        n: usize,
        tile: usize,
        pair: bool,
    ) -> Tiles {
        assert!(
            tile > 0 && tile % 4 == 0,
            "tile {tile} is not a multiple of 4"
        );
        let len = delta_rows.len().checked_div(n).unwrap_or(0);
        let nt = n.div_ceil(tile);
        let span = |t: usize| t * tile..((t + 1) * tile).min(n);
        let whole = |t: &usize| {
            let s = span(*t);
            s.start >= first && s.end <= first + len
        };
        let candidates: Vec<(usize, usize)> = if pair {
            let mine: Vec<usize> = (0..nt).filter(whole).collect();
            mine.iter()
                .flat_map(|&r| mine.iter().filter(move |&&c| c >= r).map(move |&c| (r, c)))
                .collect()
        } else {
            Vec::new()
        };
        let mut symmetric = vec![false; candidates.len()];
        par_rows(
            pool,
            &mut symmetric,
            1,
            Schedule::Dynamic(1),
            |range, out| {
                for (k, o) in range.zip(out) {
                    let (r, c) = candidates[k];
                    *o = is_symmetric(delta_rows, first, n, span(r), span(c));
                }
            },
        );
        let mut paired = vec![false; nt * nt];
        let mut tasks = Vec::new();
        for (&(r, c), _) in candidates.iter().zip(&symmetric).filter(|(_, &s)| s) {
            paired[r * nt + c] = true;
            paired[c * nt + r] = true;
            tasks.push(if r == c {
                Task::Diagonal { d: r }
            } else {
                Task::Pair { r, c }
            });
        }
        for r in first / tile..(first + len).div_ceil(tile) {
            let s = span(r);
            let rows = s.start.max(first)..s.end.min(first + len);
            for c in (0..nt).filter(|&c| !paired[r * nt + c]) {
                tasks.push(Task::Rows {
                    rows: rows.clone(),
                    c,
                });
            }
        }
        Tiles {
            tile,
            n,
            first,
            len,
            nt,
            tasks,
            partials: vec![[0.0; 4]; len * nt],
        }
    }

    /// Pairs of tiles, and diagonal tiles, whose pairs of entries the plan computes once.
    #[cfg(test)]
    pub(crate) fn pairs(&self) -> (usize, usize) {
        let count = |f: fn(&Task) -> bool| self.tasks.iter().filter(|t| f(t)).count();
        (
            count(|t| matches!(t, Task::Pair { .. })),
            count(|t| matches!(t, Task::Diagonal { .. })),
        )
    }

    /// One transform: the owned rows' (1/N) Σ_j (δ_ij/d_ij)(x_i − x_j) into `next` (3 per
    /// row) and Σ_{j≠i} (d_ij − δ_ij)² into `row_stress`; `x` is the whole configuration.
    pub(crate) fn step(
        &mut self,
        pool: &Pool,
        delta_rows: &[f32],
        x: &[f64],
        next: &mut [f64],
        row_stress: &mut [f64],
    ) {
        let (tile, n, first, nt) = (self.tile, self.n, self.first, self.nt);
        assert_eq!(
            delta_rows.len(),
            self.len * n,
            "δ rows do not match the plan"
        );
        assert_eq!(x.len(), n * 3, "the configuration is not n x 3");
        let col = |c: usize| -> Vec<f64> { x.iter().skip(c).step_by(3).copied().collect() };
        let (xs, ys, zs) = (col(0), col(1), col(2));
        let span = |t: usize| t * tile..((t + 1) * tile).min(n);
        let drow = |i: usize| &delta_rows[(i - first) * n..(i - first + 1) * n];
        let point = |i: usize| [xs[i], ys[i], zs[i]];
        let (run3, pair3) = (kernel::pick3(), kernel::pick_pair3());
        // Rows beyond the last-level cache come from memory: ask for the next row's piece
        // while this one is computed (at N = 4499, 10.4 against 12.5 ms per iteration; within
        // the cache the requests only cost, 2.0 against 1.9 ms at N = 2000).
        let far = std::mem::size_of_val(delta_rows) > PREFETCH_ABOVE;
        let tasks = &self.tasks;
        let slots = Slots::new(&mut self.partials);
        pool.for_each(0..tasks.len(), Schedule::Dynamic(1), |k| match &tasks[k] {
            Task::Rows { rows, c } => {
                let cs = span(*c);
                for i in rows.clone() {
                    if far && i + 1 < rows.end {
                        kernel::prefetch(&drow(i + 1)[cs.clone()]);
                    }
                    let mut lanes = Lanes::default();
                    run3(
                        &drow(i)[cs.clone()],
                        &xs[cs.clone()],
                        &ys[cs.clone()],
                        &zs[cs.clone()],
                        point(i),
                        &mut lanes,
                    );
                    // SAFETY: slot (i, c) belongs to this task alone (the plan gives every
                    // owned row and column tile to exactly one task).
                    unsafe { slots.put((i - first) * nt + c, kernel::finish(&lanes)) };
                }
            }
            Task::Pair { r, c } => {
                let (rs, cs) = (span(*r), span(*c));
                let w = cs.len();
                let cols = [&xs[cs.clone()], &ys[cs.clone()], &zs[cs.clone()]];
                // Per lane l = i mod 4: the four terms the columns' rows receive.
                let mut acc = vec![0.0f64; 16 * w];
                for i in rs.clone() {
                    if far && i + 1 < rs.end {
                        kernel::prefetch(&drow(i + 1)[cs.clone()]);
                    }
                    let mut lanes = Lanes::default();
                    let l = i % 4;
                    pair3(
                        &drow(i)[cs.clone()],
                        cols,
                        point(i),
                        &mut lanes,
                        &mut acc[l * 4 * w..(l + 1) * 4 * w],
                        w,
                    );
                    // SAFETY: as above; slot (i, c) is this pair's.
                    unsafe { slots.put((i - first) * nt + c, kernel::finish(&lanes)) };
                }
                put_columns(&slots, &acc, cs, first, nt, *r);
            }
            Task::Diagonal { d } => {
                let ds = span(*d);
                let (s0, w) = (ds.start, ds.len());
                let cols = [&xs[ds.clone()], &ys[ds.clone()], &zs[ds.clone()]];
                let mut acc = vec![0.0f64; 16 * w];
                for i in ds.clone() {
                    if far && i + 1 < ds.end {
                        kernel::prefetch(&drow(i + 1)[i + 1..ds.end]);
                    }
                    // Row i's lanes start with what the rows above gave it (columns j < i, in
                    // ascending order, lane j mod 4), then go on from the diagonal: the order
                    // of a run over the whole tile.
                    let (ii, li) = (i - s0, i % 4);
                    let mut lanes: Lanes = core::array::from_fn(|k| {
                        core::array::from_fn(|l| acc[l * 4 * w + k * w + ii])
                    });
                    let own = &mut acc[li * 4 * w..(li + 1) * 4 * w];
                    // Up to the next multiple of 4 one column at a time (the diagonal itself
                    // adds to row i only), then the pair kernel from an aligned column.
                    let aligned = (ii + 1).next_multiple_of(4).min(w);
                    for jj in ii..aligned {
                        let q = [xs[s0 + jj], ys[s0 + jj], zs[s0 + jj]];
                        let t = kernel::term3(drow(i)[s0 + jj], q, point(i));
                        kernel::lanes_add(&mut lanes, jj % 4, &t);
                        if jj != ii {
                            kernel::col_add(own, w, jj, &t);
                        }
                    }
                    pair3(
                        &drow(i)[s0 + aligned..ds.end],
                        [
                            &cols[0][aligned..],
                            &cols[1][aligned..],
                            &cols[2][aligned..],
                        ],
                        point(i),
                        &mut lanes,
                        &mut own[aligned..],
                        w,
                    );
                    // SAFETY: as above; slot (i, d) is this task's.
                    unsafe { slots.put((i - first) * nt + d, kernel::finish(&lanes)) };
                }
            }
        });
        let partials = &self.partials;
        let inv_n = 1.0 / n as f64;
        par_rows2(
            pool,
            next,
            3,
            row_stress,
            1,
            Schedule::Dynamic(64),
            |local, out, rs| {
                for (li, i) in local.clone().enumerate() {
                    let mut g = [0.0f64; 4];
                    for p in &partials[i * nt..(i + 1) * nt] {
                        for k in 0..4 {
                            g[k] += p[k];
                        }
                    }
                    for k in 0..3 {
                        out[li * 3 + k] = g[k] * inv_n;
                    }
                    // The diagonal's (0 − δ_ii)² was counted; it is not a pair.
                    let dii = f64::from(drow(i + first)[i + first]);
                    rs[li] = g[3] - dii * dii;
                }
            },
        );
    }
}

/// Writes, for each column j of a pair's column tile, the partial (j, `r`) its row received
/// from the pair's rows: `acc`'s four lanes combined as [`kernel::finish`] combines a row's.
fn put_columns(
    slots: &Slots<'_, [f64; 4]>,
    acc: &[f64],
    cols: Range<usize>,
    first: usize,
    nt: usize,
    r: usize,
) {
    let w = cols.len();
    for (jj, j) in cols.enumerate() {
        let lanes: Lanes =
            core::array::from_fn(|k| core::array::from_fn(|l| acc[l * 4 * w + k * w + jj]));
        // SAFETY: slot (j, r) belongs to the calling pair task alone (see `Tiles::step`).
        unsafe { slots.put((j - first) * nt + r, kernel::finish(&lanes)) };
    }
}

/// Whether δ_ij and δ_ji are the same bits for every i in `a`, j in `b` (both rows of this rank).
fn is_symmetric(rows: &[f32], first: usize, n: usize, a: Range<usize>, b: Range<usize>) -> bool {
    a.clone().all(|i| {
        let ri = &rows[(i - first) * n..(i - first + 1) * n];
        b.clone()
            .all(|j| ri[j].to_bits() == rows[(j - first) * n + i].to_bits())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::DistMatrix;
    use crate::rng::Rng;

    fn points(n: usize, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..n * 3).map(|_| rng.normal()).collect()
    }

    /// One step over rows `rows` of `d` with the given tile and pairing, on `threads` threads.
    fn step(
        d: &DistMatrix,
        rows: Range<usize>,
        x: &[f64],
        tile: usize,
        pair: bool,
        threads: usize,
    ) -> (Vec<f64>, Vec<f64>, (usize, usize)) {
        let n = d.n;
        let pool = Pool::builder().threads(threads).build().unwrap();
        let data = &d.data[rows.start * n..rows.end * n];
        let mut t = Tiles::plan(&pool, data, rows.start, n, tile, pair);
        let (mut next, mut rs) = (vec![0.0; rows.len() * 3], vec![0.0; rows.len()]);
        t.step(&pool, data, x, &mut next, &mut rs);
        (next, rs, t.pairs())
    }

    /// The transform and stress terms by the definition, in plain loops.
    fn direct(d: &DistMatrix, x: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let n = d.n;
        let (mut next, mut rs) = (vec![0.0; n * 3], vec![0.0; n]);
        for i in 0..n {
            for j in (0..n).filter(|&j| j != i) {
                let e: Vec<f64> = (0..3).map(|k| x[i * 3 + k] - x[j * 3 + k]).collect();
                let dist = e.iter().map(|v| v * v).sum::<f64>().sqrt();
                let dd = f64::from(d.get(i, j));
                for k in 0..3 {
                    next[i * 3 + k] += dd / dist * e[k] / n as f64;
                }
                rs[i] += (dist - dd) * (dist - dd);
            }
        }
        (next, rs)
    }

    fn close(a: &[f64], b: &[f64]) {
        for (k, (p, q)) in a.iter().zip(b).enumerate() {
            assert!((p - q).abs() <= 1e-11 * (1.0 + q.abs()), "{k}: {p} vs {q}");
        }
    }

    #[test]
    fn pairs_give_the_bits_of_single_tiles_at_any_threads_and_rows() {
        let n = 203;
        let d = DistMatrix::euclidean(&points(n, 3), 3);
        let x = points(n, 8);
        let (dn, dr) = direct(&d, &x);
        for tile in [4, 8, 16, 52, 256] {
            let (want, want_rs, none) = step(&d, 0..n, &x, tile, false, 1);
            assert_eq!(none, (0, 0));
            close(&want, &dn);
            close(&want_rs, &dr);
            for threads in [1, 3] {
                let (got, got_rs, pairs) = step(&d, 0..n, &x, tile, true, threads);
                let tiles = n.div_ceil(tile);
                assert_eq!(pairs, (tiles * (tiles - 1) / 2, tiles), "tile {tile}");
                assert_eq!((&got, &got_rs), (&want, &want_rs), "tile {tile}, {threads}");
            }
            // Rows split as ranks split them (boundaries inside tiles, a rank of one row, one of
            // none): each part gives its rows' bits.
            for cuts in [
                vec![0, 70, 150, n],
                vec![0, 1, 2, 100, 100, n],
                vec![0, 64, n],
            ] {
                let mut got = Vec::new();
                let mut got_rs = Vec::new();
                for w in cuts.windows(2) {
                    let (a, b, _) = step(&d, w[0]..w[1], &x, tile, true, 2);
                    got.extend(a);
                    got_rs.extend(b);
                }
                assert_eq!((&got, &got_rs), (&want, &want_rs), "tile {tile}, {cuts:?}");
            }
        }
    }

    #[test]
    fn asymmetric_tiles_are_computed_from_each_side() {
        let n = 97;
        let mut d = DistMatrix::euclidean(&points(n, 5), 3);
        // One entry off its mirror image, in tile pair (0, 5) at tile 16.
        let k = 3 * n + 90;
        d.data[k] = f32::from_bits(d.data[k].to_bits() + 1);
        let x = points(n, 6);
        let (want, want_rs, _) = step(&d, 0..n, &x, 16, false, 1);
        let (got, got_rs, pairs) = step(&d, 0..n, &x, 16, true, 2);
        let tiles = n.div_ceil(16);
        assert_eq!(pairs, (tiles * (tiles - 1) / 2 - 1, tiles));
        assert_eq!((&got, &got_rs), (&want, &want_rs));
        let (dn, dr) = direct(&d, &x);
        close(&got, &dn);
        close(&got_rs, &dr);
        // And one inside diagonal tile 2 (rows and columns 32..48).
        let k = 40 * n + 35;
        d.data[k] = f32::from_bits(d.data[k].to_bits() + 1);
        let (want, want_rs, _) = step(&d, 0..n, &x, 16, false, 1);
        let (got, got_rs, pairs) = step(&d, 0..n, &x, 16, true, 2);
        assert_eq!(pairs, (tiles * (tiles - 1) / 2 - 1, tiles - 1));
        assert_eq!((&got, &got_rs), (&want, &want_rs));
    }

    #[test]
    fn coincident_points_and_empty_problems() {
        // Points that coincide add nothing to the transform (d = 0), on either side of a pair.
        let n = 40;
        let mut p = points(n, 2);
        p.copy_within(0..3, 30 * 3);
        let d = DistMatrix::euclidean(&p, 3);
        let (want, want_rs, _) = step(&d, 0..n, &p, 8, false, 1);
        let (got, got_rs, _) = step(&d, 0..n, &p, 8, true, 2);
        assert_eq!((&got, &got_rs), (&want, &want_rs));
        assert!(got.iter().chain(&got_rs).all(|v| v.is_finite()));
        let (got, got_rs, pairs) = step(&DistMatrix::new(0, vec![]), 0..0, &[], 8, true, 2);
        assert!(got.is_empty() && got_rs.is_empty() && pairs == (0, 0));
    }
}

//! The SMACOF inner kernel in two forms chosen at run time: a portable one written for the
//! compiler to vectorise, and one fused pass in AVX2 intrinsics that gives the same bits.
//! This module holds the crate's only other `unsafe` (the intrinsics, and calling the AVX2
//! version after checking that the processor has it).
//!
//! For one point i and a run of columns j, it accumulates the Guttman transform's
//! Σ_j (δ_ij/d_ij)(x_i − x_j) and the stress Σ_j (d_ij − δ_ij)². Four independent lanes
//! (j ≡ 0,1,2,3 mod 4) keep the floating-point sums in a fixed order; the lanes are carried from
//! one column block to the next and reduced once per row, so the results depend neither on the
//! thread that ran a row nor on the block size. There are no branches in the loop:
//! the ratio is δ/max(d, 10⁻¹²), and at d = 0 the
//! difference vector is 0, so the diagonal and coincident points add nothing to the transform.

const LANES: usize = 4;
/// Distances below this count as zero for the ratio δ/d.
const TINY: f64 = 1e-12;

/// Per-lane partial sums of one point: `lanes[k][l]` holds term k (r·e₀, r·e₁, r·e₂, (d − δ)²)
/// summed over the columns j ≡ l mod 4 seen so far.
pub type Lanes = [[f64; LANES]; 4];

/// The four sums of a point from its lanes: (Σ r·e₀, Σ r·e₁, Σ r·e₂, Σ (d − δ)²).
#[inline]
pub fn finish(lanes: &Lanes) -> [f64; 4] {
    let mut out = [0.0f64; 4];
    for k in 0..4 {
        let a = lanes[k];
        out[k] = (a[0] + a[1]) + (a[2] + a[3]);
    }
    out
}

/// Adds one point's terms over one column run to its lanes. The run must start at a column
/// that is a multiple of 4, so that lane l always takes the columns j ≡ l mod 4 and a row's
/// sums do not depend on how its columns were cut into runs.
#[inline(always)]
fn run3(dl: &[f32], xs: &[f64], ys: &[f64], zs: &[f64], p: [f64; 3], lanes: &mut Lanes) {
    // Phase 1 maps each column to its four terms (a plain map loop, which LLVM vectorises,
    // sqrt and division included); phase 2 sums the terms in four fixed lanes.
    const CHUNK: usize = 64;
    let mut t0 = [0.0f64; CHUNK];
    let mut t1 = [0.0f64; CHUNK];
    let mut t2 = [0.0f64; CHUNK];
    let mut t3 = [0.0f64; CHUNK];
    let mut start = 0;
    while start < dl.len() {
        let m = (dl.len() - start).min(CHUNK);
        let (d, x, y, z) = (
            &dl[start..start + m],
            &xs[start..start + m],
            &ys[start..start + m],
            &zs[start..start + m],
        );
        let (t0, t1, t2, t3) = (&mut t0[..m], &mut t1[..m], &mut t2[..m], &mut t3[..m]);
        for j in 0..m {
            let e0 = p[0] - x[j];
            let e1 = p[1] - y[j];
            let e2 = p[2] - z[j];
            let dd = f64::from(d[j]);
            let dist = (e0 * e0 + e1 * e1 + e2 * e2).sqrt();
            // Without a branch: at a zero distance e = 0, so r·e = 0 (r stays finite).
            let r = dd / dist.max(TINY);
            t0[j] = r * e0;
            t1[j] = r * e1;
            t2[j] = r * e2;
            t3[j] = (dist - dd) * (dist - dd);
        }
        for (k, t) in [&*t0, &*t1, &*t2, &*t3].into_iter().enumerate() {
            let mut acc = lanes[k];
            let mut c = t.chunks_exact(LANES);
            for q in &mut c {
                for l in 0..LANES {
                    acc[l] += q[l];
                }
            }
            for (l, v) in c.remainder().iter().enumerate() {
                acc[l] += v;
            }
            lanes[k] = acc;
        }
        start += m;
    }
}

/// The same sums as [`run3`] in one fused pass with AVX2 (four f64 lanes, lane l taking the
/// columns j ≡ l mod 4, each operation rounded as in `run3`, so the results are bit for bit
/// those of `run3`), without the temporary arrays.
///
/// # Safety
/// The processor must support AVX2 and FMA (the features this function is compiled for);
/// slice lengths are checked inside.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run3_avx2(
    dl: &[f32],
    xs: &[f64],
    ys: &[f64],
    zs: &[f64],
    p: [f64; 3],
    lanes: &mut Lanes,
) {
    use core::arch::x86_64::*;
    let len = dl.len();
    assert!(xs.len() >= len && ys.len() >= len && zs.len() >= len);
    let full = len - len % LANES;
    let (px, py, pz) = (
        _mm256_set1_pd(p[0]),
        _mm256_set1_pd(p[1]),
        _mm256_set1_pd(p[2]),
    );
    let tiny = _mm256_set1_pd(TINY);
    // SAFETY: each lanes[k] is four f64s, the size of one 256-bit vector.
    let mut a: [__m256d; 4] =
        core::array::from_fn(|k| unsafe { _mm256_loadu_pd(lanes[k].as_ptr()) });
    let mut j = 0;
    while j < full {
        // SAFETY: j + 4 <= full <= len, and every slice holds at least len values (asserted).
        let (d, x, y, z) = unsafe {
            (
                _mm256_cvtps_pd(_mm_loadu_ps(dl.as_ptr().add(j))),
                _mm256_loadu_pd(xs.as_ptr().add(j)),
                _mm256_loadu_pd(ys.as_ptr().add(j)),
                _mm256_loadu_pd(zs.as_ptr().add(j)),
            )
        };
        let e0 = _mm256_sub_pd(px, x);
        let e1 = _mm256_sub_pd(py, y);
        let e2 = _mm256_sub_pd(pz, z);
        let ss = _mm256_add_pd(
            _mm256_add_pd(_mm256_mul_pd(e0, e0), _mm256_mul_pd(e1, e1)),
            _mm256_mul_pd(e2, e2),
        );
        let dist = _mm256_sqrt_pd(ss);
        let r = _mm256_div_pd(d, _mm256_max_pd(dist, tiny));
        a[0] = _mm256_add_pd(a[0], _mm256_mul_pd(r, e0));
        a[1] = _mm256_add_pd(a[1], _mm256_mul_pd(r, e1));
        a[2] = _mm256_add_pd(a[2], _mm256_mul_pd(r, e2));
        let diff = _mm256_sub_pd(dist, d);
        a[3] = _mm256_add_pd(a[3], _mm256_mul_pd(diff, diff));
        j += LANES;
    }
    for k in 0..4 {
        // SAFETY: as for the loads above.
        unsafe { _mm256_storeu_pd(lanes[k].as_mut_ptr(), a[k]) };
    }
    for (l, j) in (full..len).enumerate() {
        lanes_add(lanes, l, &term3(dl[j], [xs[j], ys[j], zs[j]], p));
    }
}

fn run3_base(dl: &[f32], xs: &[f64], ys: &[f64], zs: &[f64], p: [f64; 3], lanes: &mut Lanes) {
    run3(dl, xs, ys, zs, p, lanes)
}

/// The kernel for 3-D points, best for this processor: adds a column run's terms to the lanes.
pub type Run3 = fn(&[f32], &[f64], &[f64], &[f64], [f64; 3], &mut Lanes);

#[cfg(target_arch = "x86_64")]
fn run3_avx2_safe(dl: &[f32], xs: &[f64], ys: &[f64], zs: &[f64], p: [f64; 3], lanes: &mut Lanes) {
    // SAFETY: this function is only handed out by `pick3` after `is_x86_feature_detected!`
    // confirmed AVX2 and FMA, the features `run3_avx2` is compiled for.
    unsafe { run3_avx2(dl, xs, ys, zs, p, lanes) }
}

/// Whether the processor has AVX2 and FMA, the features every vector kernel here is compiled
/// for.
#[cfg(target_arch = "x86_64")]
fn avx2_fma() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

/// Chooses the 3-D kernel once per call site: AVX2+FMA when the processor has them.
pub fn pick3() -> Run3 {
    #[cfg(target_arch = "x86_64")]
    {
        if avx2_fma() {
            return run3_avx2_safe;
        }
    }
    run3_base
}

/// The pair kernel: [`run3`]'s sums for row i over a column run (which must start at a
/// multiple of 4), and at once the terms each column's own row receives from row i, added
/// into `col` (term k of column j at `col[k * stride + j]`, `stride` at least the run's length;
/// the caller keeps one such block per lane l = i mod 4). Row j's terms from column i are row i's terms from column j
/// negated (e_ji = −e_ij exactly in IEEE arithmetic; d and δ/d the same when δ_ji = δ_ij), the
/// stress term the same, so subtracting (adding) here gives row j's sums bit for bit as
/// [`run3`] would over row i's tile, lane i mod 4 taking column i.
pub type Pair3 = fn(&[f32], [&[f64]; 3], [f64; 3], &mut Lanes, &mut [f64], usize);

fn pair3_base(
    dl: &[f32],
    cols: [&[f64]; 3],
    p: [f64; 3],
    lanes: &mut Lanes,
    col: &mut [f64],
    stride: usize,
) {
    let w = dl.len();
    let [xs, ys, zs] = cols;
    assert!(xs.len() >= w && ys.len() >= w && zs.len() >= w);
    assert!(stride >= w && col.len() >= 3 * stride + w);
    for j in 0..w {
        let t = term3(dl[j], [xs[j], ys[j], zs[j]], p);
        lanes_add(lanes, j % LANES, &t);
        col_add(col, stride, j, &t);
    }
}

/// The four terms of point `p` against point `q` at distance δ = `dl`: r·e₀, r·e₁, r·e₂ and
/// (d − δ)², with e = p − q, d = |e| and r = δ / max(d, 10⁻¹²), each operation rounded as the
/// vector kernels round it.
#[inline(always)]
pub fn term3(dl: f32, q: [f64; 3], p: [f64; 3]) -> [f64; 4] {
    let e0 = p[0] - q[0];
    let e1 = p[1] - q[1];
    let e2 = p[2] - q[2];
    let dd = f64::from(dl);
    let dist = (e0 * e0 + e1 * e1 + e2 * e2).sqrt();
    let r = dd / dist.max(TINY);
    [r * e0, r * e1, r * e2, (dist - dd) * (dist - dd)]
}

/// Adds a row's terms to its lane `l`.
#[inline(always)]
pub fn lanes_add(lanes: &mut Lanes, l: usize, t: &[f64; 4]) {
    for k in 0..4 {
        lanes[k][l] += t[k];
    }
}

/// Gives column `j`'s row the terms it receives from a row whose terms against it are `t`:
/// the three transform terms negated, the stress term as it is.
#[inline(always)]
pub fn col_add(col: &mut [f64], stride: usize, j: usize, t: &[f64; 4]) {
    for k in 0..3 {
        col[k * stride + j] -= t[k];
    }
    col[3 * stride + j] += t[3];
}

/// [`pair3_base`] in AVX2, the same bits (each operation rounded as there, lane l taking the
/// columns j ≡ l mod 4).
///
/// # Safety
/// The processor must support AVX2 and FMA; slice lengths are checked inside.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn pair3_avx2(
    dl: &[f32],
    cols: [&[f64]; 3],
    p: [f64; 3],
    lanes: &mut Lanes,
    col: &mut [f64],
    stride: usize,
) {
    use core::arch::x86_64::*;
    let w = dl.len();
    let [xs, ys, zs] = cols;
    assert!(xs.len() >= w && ys.len() >= w && zs.len() >= w);
    assert!(stride >= w && col.len() >= 3 * stride + w);
    let full = w - w % LANES;
    let (px, py, pz) = (
        _mm256_set1_pd(p[0]),
        _mm256_set1_pd(p[1]),
        _mm256_set1_pd(p[2]),
    );
    let tiny = _mm256_set1_pd(TINY);
    // SAFETY: each lanes[k] is four f64s, the size of one 256-bit vector.
    let mut a: [__m256d; 4] =
        core::array::from_fn(|k| unsafe { _mm256_loadu_pd(lanes[k].as_ptr()) });
    let cp = col.as_mut_ptr();
    let mut j = 0;
    while j < full {
        // SAFETY: j + 4 <= full <= w, every input slice holds at least w values and `col` at
        // least 3 * stride + w (asserted), so the loads below and the column loads and stores
        // at k * stride + j (k < 4) stay inside them.
        unsafe {
            let d = _mm256_cvtps_pd(_mm_loadu_ps(dl.as_ptr().add(j)));
            let e0 = _mm256_sub_pd(px, _mm256_loadu_pd(xs.as_ptr().add(j)));
            let e1 = _mm256_sub_pd(py, _mm256_loadu_pd(ys.as_ptr().add(j)));
            let e2 = _mm256_sub_pd(pz, _mm256_loadu_pd(zs.as_ptr().add(j)));
            let ss = _mm256_add_pd(
                _mm256_add_pd(_mm256_mul_pd(e0, e0), _mm256_mul_pd(e1, e1)),
                _mm256_mul_pd(e2, e2),
            );
            let dist = _mm256_sqrt_pd(ss);
            let r = _mm256_div_pd(d, _mm256_max_pd(dist, tiny));
            let diff = _mm256_sub_pd(dist, d);
            let t = [
                _mm256_mul_pd(r, e0),
                _mm256_mul_pd(r, e1),
                _mm256_mul_pd(r, e2),
                _mm256_mul_pd(diff, diff),
            ];
            for k in 0..3 {
                a[k] = _mm256_add_pd(a[k], t[k]);
                let c = cp.add(k * stride + j);
                _mm256_storeu_pd(c, _mm256_sub_pd(_mm256_loadu_pd(c), t[k]));
            }
            a[3] = _mm256_add_pd(a[3], t[3]);
            let c = cp.add(3 * stride + j);
            _mm256_storeu_pd(c, _mm256_add_pd(_mm256_loadu_pd(c), t[3]));
        }
        j += LANES;
    }
    for k in 0..4 {
        // SAFETY: as for the loads above.
        unsafe { _mm256_storeu_pd(lanes[k].as_mut_ptr(), a[k]) };
    }
    // The last columns (fewer than 4) as the portable kernel does them: still lane j mod 4,
    // since `full` is a multiple of 4.
    pair3_base(
        &dl[full..],
        [&xs[full..w], &ys[full..w], &zs[full..w]],
        p,
        lanes,
        &mut col[full..],
        stride,
    );
}

#[cfg(target_arch = "x86_64")]
fn pair3_avx2_safe(
    dl: &[f32],
    cols: [&[f64]; 3],
    p: [f64; 3],
    lanes: &mut Lanes,
    col: &mut [f64],
    stride: usize,
) {
    // SAFETY: only handed out by `pick_pair3` after `is_x86_feature_detected!` confirmed AVX2
    // and FMA, the features `pair3_avx2` is compiled for.
    unsafe { pair3_avx2(dl, cols, p, lanes, col, stride) }
}

/// Chooses the pair kernel: AVX2+FMA when the processor has them.
pub fn pick_pair3() -> Pair3 {
    #[cfg(target_arch = "x86_64")]
    {
        if avx2_fma() {
            return pair3_avx2_safe;
        }
    }
    pair3_base
}

/// The arithmetic floor of an iteration: Σ (δ/√s + √s) over the entries, one square root and
/// one division each, as the kernels do them (four f64 lanes with AVX2 when the processor has
/// it). For the benchmark's limit row; the sum is returned so that nothing is optimised away.
pub fn divider(dl: &[f32], ss: &[f64]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if avx2_fma() {
            // SAFETY: AVX2 and FMA confirmed just above, the features `divider_avx2` needs.
            return unsafe { divider_avx2(dl, ss) };
        }
    }
    divider_base(dl, ss)
}

fn divider_base(dl: &[f32], ss: &[f64]) -> f64 {
    dl.iter()
        .zip(ss)
        .map(|(&d, &s)| f64::from(d) / s.sqrt() + s.sqrt())
        .sum()
}

/// [`divider`] in AVX2.
///
/// # Safety
/// The processor must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn divider_avx2(dl: &[f32], ss: &[f64]) -> f64 {
    use core::arch::x86_64::*;
    let len = dl.len().min(ss.len());
    let full = len - len % LANES;
    let mut acc = _mm256_setzero_pd();
    let mut j = 0;
    while j < full {
        // SAFETY: j + 4 <= full <= len, within both slices.
        let (d, s) = unsafe {
            (
                _mm256_cvtps_pd(_mm_loadu_ps(dl.as_ptr().add(j))),
                _mm256_loadu_pd(ss.as_ptr().add(j)),
            )
        };
        let dist = _mm256_sqrt_pd(s);
        acc = _mm256_add_pd(acc, _mm256_add_pd(_mm256_div_pd(d, dist), dist));
        j += LANES;
    }
    let mut out = [0.0f64; LANES];
    // SAFETY: `out` is four f64s, one 256-bit vector.
    unsafe { _mm256_storeu_pd(out.as_mut_ptr(), acc) };
    out.iter().sum::<f64>() + divider_base(&dl[full..len], &ss[full..len])
}

/// Asks the processor to bring `data` into the cache: the piece of δ's next row that a tile
/// reads after the current one (a tile reads rows in pieces of a few hundred columns, which
/// the hardware prefetcher does not follow from one row to the next).
#[inline]
pub fn prefetch(data: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    for line in data.chunks(16) {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint that never faults nor changes memory, and the address is
        // inside `data`.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(k: Run3, dl: &[f32], xs: &[f64], ys: &[f64], zs: &[f64], p: [f64; 3]) -> [f64; 4] {
        let mut lanes = Lanes::default();
        k(dl, xs, ys, zs, p, &mut lanes);
        finish(&lanes)
    }

    #[test]
    fn divider_sums_what_it_computes() {
        let dl: Vec<f32> = (0..11).map(|i| i as f32 * 0.5).collect();
        let ss: Vec<f64> = (0..11).map(|i| 1.0 + i as f64).collect();
        let want: f64 = (0..11)
            .map(|i| f64::from(dl[i]) / ss[i].sqrt() + ss[i].sqrt())
            .sum();
        assert!((divider(&dl, &ss) - want).abs() < 1e-12 * want);
    }

    #[test]
    fn pair_kernels_agree_and_give_the_columns_rows_sums() {
        let w = 22;
        let xs: Vec<f64> = (0..w).map(|i| (i as f64 * 0.37).sin()).collect();
        let ys: Vec<f64> = (0..w).map(|i| (i as f64 * 0.11).cos()).collect();
        let zs: Vec<f64> = (0..w).map(|i| i as f64 * 0.05).collect();
        // Rows: six points, one of them coinciding with column 7.
        let rows: Vec<[f64; 3]> = (0..6)
            .map(|i| match i {
                2 => [xs[7], ys[7], zs[7]],
                _ => [i as f64 * 0.3, 1.0 - i as f64 * 0.2, (i as f64).sqrt()],
            })
            .collect();
        let dl = |i: usize, j: usize| 0.1 + ((i * 7 + j) % 5) as f32 * 0.2;
        let mut results = Vec::new();
        for k in [pair3_base as Pair3, pick_pair3()] {
            let mut col = vec![0.0; 16 * w];
            let mut row_sums = Vec::new();
            for (i, &p) in rows.iter().enumerate() {
                let d: Vec<f32> = (0..w).map(|j| dl(i, j)).collect();
                let mut lanes = Lanes::default();
                let l = i % 4;
                k(
                    &d,
                    [&xs, &ys, &zs],
                    p,
                    &mut lanes,
                    &mut col[l * 4 * w..(l + 1) * 4 * w],
                    w,
                );
                // Row i's own sums are run3's.
                let mut want = Lanes::default();
                run3_base(&d, &xs, &ys, &zs, p, &mut want);
                assert_eq!(lanes, want);
                row_sums.push(finish(&lanes));
            }
            // Column j's row gets, over the six rows, what run3 gives it over them.
            let rx: Vec<f64> = rows.iter().map(|p| p[0]).collect();
            let ry: Vec<f64> = rows.iter().map(|p| p[1]).collect();
            let rz: Vec<f64> = rows.iter().map(|p| p[2]).collect();
            for j in 0..w {
                let d: Vec<f32> = (0..rows.len()).map(|i| dl(i, j)).collect();
                let mut want = Lanes::default();
                run3_base(&d, &rx, &ry, &rz, [xs[j], ys[j], zs[j]], &mut want);
                let got: Lanes =
                    core::array::from_fn(|t| core::array::from_fn(|l| col[l * 4 * w + t * w + j]));
                assert_eq!(finish(&got), finish(&want), "column {j}");
            }
            results.push((row_sums, col));
        }
        assert_eq!(results[0], results[1], "AVX2 and portable differ");
    }

    #[test]
    fn kernels_agree_with_a_plain_loop() {
        let n = 23;
        let xs: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
        let ys: Vec<f64> = (0..n).map(|i| (i as f64 * 0.11).cos()).collect();
        let zs: Vec<f64> = (0..n).map(|i| i as f64 * 0.05).collect();
        let dl: Vec<f32> = (0..n).map(|i| 0.1 + (i % 5) as f32 * 0.2).collect();
        let p = [xs[4], ys[4], zs[4]]; // coincides with point 4: ratio 0 there
        let mut want = [0.0; 4];
        for j in 0..n {
            let e = [p[0] - xs[j], p[1] - ys[j], p[2] - zs[j]];
            let d = (e[0] * e[0] + e[1] * e[1] + e[2] * e[2]).sqrt();
            let dd = f64::from(dl[j]);
            if d > 0.0 {
                for c in 0..3 {
                    want[c] += dd / d * e[c];
                }
            }
            want[3] += (d - dd) * (d - dd);
        }
        // The picked kernel gives the base kernel's results bit for bit, at every length.
        for len in [0, 1, 3, 4, 5, 8, 13, n] {
            let (d, x, y, z) = (&dl[..len], &xs[..len], &ys[..len], &zs[..len]);
            assert_eq!(
                whole(run3_base, d, x, y, z, p),
                whole(pick3(), d, x, y, z, p),
                "len {len}"
            );
        }
        // Cutting the columns into runs that start at multiples of 4 changes no bit.
        for k in [run3_base as Run3, pick3()] {
            let mut lanes = Lanes::default();
            for (a, b) in [(0, 8), (8, 12), (12, 20), (20, n)] {
                k(&dl[a..b], &xs[a..b], &ys[a..b], &zs[a..b], p, &mut lanes);
            }
            assert_eq!(finish(&lanes), whole(k, &dl, &xs, &ys, &zs, p));
        }
        for got in [
            whole(run3_base, &dl, &xs, &ys, &zs, p),
            whole(pick3(), &dl, &xs, &ys, &zs, p),
        ] {
            for c in 0..4 {
                assert!(
                    (got[c] - want[c]).abs() < 1e-12 * (1.0 + want[c].abs()),
                    "{c}: {} vs {}",
                    got[c],
                    want[c]
                );
            }
        }
    }
}

//! The SMACOF inner kernel, vectorised by hand and compiled twice: once for the baseline target
//! and once with AVX2+FMA, chosen at run time. This module holds the crate's only other
//! `unsafe` (calling the AVX2 version after checking that the processor has it).
//!
//! For one point i and a run of columns j, it accumulates the Guttman transform's
//! Σ_j (δ_ij/d_ij)(x_i − x_j) and the stress Σ_j (d_ij − δ_ij)². Four independent lanes
//! (j ≡ 0,1,2,3 mod 4 within the run) keep the floating-point sums in a fixed order, so results
//! depend on the column run, never on which thread ran it. There are no branches in the loop:
//! the ratio is δ/max(d, 10⁻¹²), and at d = 0 the
//! difference vector is 0, so the diagonal and coincident points add nothing to the transform.

const LANES: usize = 4;
/// Distances below this count as zero for the ratio δ/d.
const TINY: f64 = 1e-12;

/// Sums for one point over one column run: (Σ r·e₀, Σ r·e₁, Σ r·e₂, Σ (d − δ)²).
#[inline(always)]
fn run3(dl: &[f32], xs: &[f64], ys: &[f64], zs: &[f64], p: [f64; 3]) -> [f64; 4] {
    let mut out = [0.0f64; 4];
    // Phase 1 maps each column to its four terms (a plain map loop, which LLVM vectorises,
    // sqrt and division included); phase 2 sums the terms in four fixed lanes.
    const CHUNK: usize = 64;
    let mut t0 = [0.0f64; CHUNK];
    let mut t1 = [0.0f64; CHUNK];
    let mut t2 = [0.0f64; CHUNK];
    let mut t3 = [0.0f64; CHUNK];
    let mut lanes = [[0.0f64; LANES]; 4];
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
    for k in 0..4 {
        let a = lanes[k];
        out[k] = (a[0] + a[1]) + (a[2] + a[3]);
    }
    out
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run3_avx2(dl: &[f32], xs: &[f64], ys: &[f64], zs: &[f64], p: [f64; 3]) -> [f64; 4] {
    run3(dl, xs, ys, zs, p)
}

fn run3_base(dl: &[f32], xs: &[f64], ys: &[f64], zs: &[f64], p: [f64; 3]) -> [f64; 4] {
    run3(dl, xs, ys, zs, p)
}

/// The kernel for 3-D points, best for this processor.
pub type Run3 = fn(&[f32], &[f64], &[f64], &[f64], [f64; 3]) -> [f64; 4];

#[cfg(target_arch = "x86_64")]
fn run3_avx2_safe(dl: &[f32], xs: &[f64], ys: &[f64], zs: &[f64], p: [f64; 3]) -> [f64; 4] {
    // SAFETY: this function is only handed out by `pick3` after `is_x86_feature_detected!`
    // confirmed AVX2 and FMA, the features `run3_avx2` is compiled for.
    unsafe { run3_avx2(dl, xs, ys, zs, p) }
}

/// Chooses the 3-D kernel once per call site: AVX2+FMA when the processor has them.
pub fn pick3() -> Run3 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            return run3_avx2_safe;
        }
    }
    run3_base
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for got in [
            run3_base(&dl, &xs, &ys, &zs, p),
            pick3()(&dl, &xs, &ys, &zs, p),
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

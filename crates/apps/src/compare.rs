//! Comparing results with references: adjusted Rand index for clusterings and Procrustes
//! alignment for point configurations (MDS is only defined up to rotation, reflection,
//! translation and scale, and clustering up to relabelling).

use std::collections::HashMap;

fn choose2(x: f64) -> f64 {
    x * (x - 1.0) / 2.0
}

/// Adjusted Rand index (Hubert & Arabie 1985) of two labellings of the same items:
/// 1 for identical partitions, about 0 for independent ones.
///
/// # Panics
///
/// When the labellings differ in length (the commands check reference files first).
pub fn adjusted_rand_index(a: &[usize], b: &[usize]) -> f64 {
    assert_eq!(a.len(), b.len(), "labellings differ in length");
    if a.len() <= 1 {
        // One point (or none) has one partition: the labellings agree.
        return 1.0;
    }
    let n = a.len() as f64;
    let mut table: HashMap<(usize, usize), f64> = HashMap::new();
    let mut ra: HashMap<usize, f64> = HashMap::new();
    let mut rb: HashMap<usize, f64> = HashMap::new();
    for (&x, &y) in a.iter().zip(b) {
        *table.entry((x, y)).or_default() += 1.0;
        *ra.entry(x).or_default() += 1.0;
        *rb.entry(y).or_default() += 1.0;
    }
    let index: f64 = table.values().map(|&v| choose2(v)).sum();
    let sa: f64 = ra.values().map(|&v| choose2(v)).sum();
    let sb: f64 = rb.values().map(|&v| choose2(v)).sum();
    let expected = sa * sb / choose2(n);
    let max = (sa + sb) / 2.0;
    if (max - expected).abs() < 1e-12 {
        return 1.0; // both trivial partitions
    }
    (index - expected) / (max - expected)
}

/// Eigen-decomposition of a symmetric d×d matrix by cyclic Jacobi rotations: eigenvalues and
/// column eigenvectors (row-major `v[r*d+c]`, column c is vector c). Enough for d ≤ 10.
pub fn sym_eigen(a: &[f64], d: usize) -> (Vec<f64>, Vec<f64>) {
    let mut a = a.to_vec();
    let mut v = vec![0.0; d * d];
    for i in 0..d {
        v[i * d + i] = 1.0;
    }
    for _sweep in 0..100 {
        let off: f64 = (0..d)
            .flat_map(|i| (0..d).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i * d + j].powi(2))
            .sum();
        if off < 1e-30 {
            break;
        }
        for p in 0..d {
            for q in p + 1..d {
                let apq = a[p * d + q];
                if apq.abs() < 1e-300 {
                    continue;
                }
                let theta = (a[q * d + q] - a[p * d + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..d {
                    let akp = a[k * d + p];
                    let akq = a[k * d + q];
                    a[k * d + p] = c * akp - s * akq;
                    a[k * d + q] = s * akp + c * akq;
                }
                for k in 0..d {
                    let apk = a[p * d + k];
                    let aqk = a[q * d + k];
                    a[p * d + k] = c * apk - s * aqk;
                    a[q * d + k] = s * apk + c * aqk;
                }
                for k in 0..d {
                    let vkp = v[k * d + p];
                    let vkq = v[k * d + q];
                    v[k * d + p] = c * vkp - s * vkq;
                    v[k * d + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    ((0..d).map(|i| a[i * d + i]).collect(), v)
}

/// The result of a Procrustes fit of `x` onto `y`.
#[derive(Clone, Debug)]
pub struct Procrustes {
    /// `x` after the fit (centred, rotated/reflected, scaled, moved onto `y`'s centre).
    pub fitted: Vec<f64>,
    /// Residual Σ|fitted − y|² / Σ|y − ȳ|²: 0 for a perfect fit, 1 for no relation (as SciPy's
    /// `procrustes` disparity).
    pub disparity: f64,
    /// Root-mean-square distance between fitted and reference points.
    pub rms: f64,
}

/// Checks that `len` values are whole points of `d` coordinates (see the callers' `# Panics`).
pub(crate) fn whole_points(len: usize, d: usize) {
    assert!(
        d > 0 && len % d == 0,
        "{len} coordinates are not whole points of {d} dimensions"
    );
}

/// Checks that `y` (n×d, row-major) can be a Procrustes reference: at least two distinct
/// points. A reference whose points all coincide has no spread to compare a fit with (its
/// disparity would be 0/0), as SciPy's `procrustes` refuses too.
///
/// # Errors
///
/// A message saying so, for the caller to prefix with the file's name.
pub fn check_reference(y: &[f64], d: usize) -> Result<(), String> {
    let distinct = y.chunks(d.max(1)).any(|p| p != &y[..d.min(y.len())]);
    if !distinct {
        return Err("a Procrustes reference needs at least two distinct points".into());
    }
    Ok(())
}

/// Orthogonal Procrustes with scaling: the rotation (or reflection) R, scale s and shift that
/// minimise Σ|s·x_i·R + t − y_i|², for n×d row-major point sets. The disparity is NaN when
/// every point of `y` is the same (see [`check_reference`]).
///
/// # Panics
///
/// When `d` is 0 or the points are not whole (`len % d != 0`): a fault of the caller
/// (the commands pass points they made), which would otherwise drop coordinates silently.
/// Also when the two sets differ in length.
pub fn procrustes(x: &[f64], y: &[f64], d: usize) -> Procrustes {
    assert_eq!(x.len(), y.len());
    whole_points(x.len(), d);
    let n = x.len() / d;
    let mean = |p: &[f64]| -> Vec<f64> {
        (0..d)
            .map(|k| (0..n).map(|i| p[i * d + k]).sum::<f64>() / n as f64)
            .collect()
    };
    let (mx, my) = (mean(x), mean(y));
    let xc: Vec<f64> = x.iter().enumerate().map(|(i, v)| v - mx[i % d]).collect();
    let yc: Vec<f64> = y.iter().enumerate().map(|(i, v)| v - my[i % d]).collect();
    // M = Xcᵀ Yc (d×d); R = U Vᵀ from its SVD, via the eigenvectors of MᵀM.
    let mut m = vec![0.0; d * d];
    for i in 0..n {
        for a in 0..d {
            for b in 0..d {
                m[a * d + b] += xc[i * d + a] * yc[i * d + b];
            }
        }
    }
    let mut mtm = vec![0.0; d * d];
    for a in 0..d {
        for b in 0..d {
            mtm[a * d + b] = (0..d).map(|k| m[k * d + a] * m[k * d + b]).sum();
        }
    }
    let (vals, v) = sym_eigen(&mtm, d);
    // R = M V S⁻¹ Vᵀ, with S = sqrt(eigenvalues); trace(S) is Σ singular values.
    let mut r = vec![0.0; d * d];
    let mut trace_s = 0.0;
    for c in 0..d {
        let s = vals[c].max(0.0).sqrt();
        trace_s += s;
        if s < 1e-300 {
            continue;
        }
        // column c of U = M v_c / s
        let u: Vec<f64> = (0..d)
            .map(|a| (0..d).map(|k| m[a * d + k] * v[k * d + c]).sum::<f64>() / s)
            .collect();
        for a in 0..d {
            for b in 0..d {
                r[a * d + b] += u[a] * v[b * d + c];
            }
        }
    }
    let xx: f64 = xc.iter().map(|v| v * v).sum();
    let yy: f64 = yc.iter().map(|v| v * v).sum();
    let scale = if xx > 0.0 { trace_s / xx } else { 0.0 };
    let mut fitted = vec![0.0; x.len()];
    let mut res = 0.0;
    for i in 0..n {
        for b in 0..d {
            let v: f64 = (0..d).map(|a| xc[i * d + a] * r[a * d + b]).sum::<f64>() * scale;
            fitted[i * d + b] = v + my[b];
            res += (v - yc[i * d + b]).powi(2);
        }
    }
    Procrustes {
        fitted,
        disparity: if yy > 0.0 { res / yy } else { f64::NAN },
        rms: (res / n as f64).sqrt(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn ari_known_values() {
        assert_eq!(adjusted_rand_index(&[0, 0, 1, 1], &[5, 5, 7, 7]), 1.0);
        // sklearn: adjusted_rand_score([0,0,1,1],[0,0,1,2]) = 0.5714285714
        assert!(
            (adjusted_rand_index(&[0, 0, 1, 1], &[0, 0, 1, 2]) - 0.5714285714285714).abs() < 1e-12
        );
        // sklearn: adjusted_rand_score([0,0,1,2],[0,0,1,1]) is symmetric
        assert!(
            (adjusted_rand_index(&[0, 0, 1, 2], &[0, 0, 1, 1]) - 0.5714285714285714).abs() < 1e-12
        );
        // Independent labellings are near 0.
        let mut rng = Rng::new(3);
        let a: Vec<usize> = (0..4000).map(|_| rng.below(4) as usize).collect();
        let b: Vec<usize> = (0..4000).map(|_| rng.below(4) as usize).collect();
        assert!(adjusted_rand_index(&a, &b).abs() < 0.02);
    }

    #[test]
    fn procrustes_recovers_rotation_reflection_scale() {
        let mut rng = Rng::new(7);
        let n = 50;
        let y: Vec<f64> = (0..n * 3).map(|_| rng.normal()).collect();
        // x = 0.5 * reflect(rotate(y)) + shift
        let (c, s) = (0.3f64.cos(), 0.3f64.sin());
        let mut x = vec![0.0; n * 3];
        for i in 0..n {
            let (a, b, z) = (y[i * 3], y[i * 3 + 1], y[i * 3 + 2]);
            x[i * 3] = 0.5 * (c * a - s * b) + 1.0;
            x[i * 3 + 1] = 0.5 * (s * a + c * b) - 2.0;
            x[i * 3 + 2] = -0.5 * z + 3.0;
        }
        let p = procrustes(&x, &y, 3);
        assert!(p.disparity < 1e-20, "{}", p.disparity);
        for (a, b) in p.fitted.iter().zip(&y) {
            assert!((a - b).abs() < 1e-9);
        }
        let noise: Vec<f64> = (0..n * 3).map(|_| rng.normal()).collect();
        assert!(procrustes(&noise, &y, 3).disparity > 0.5);
        // A reference of one point repeated: no disparity, and refused by the check.
        let same = vec![1.5; y.len()];
        assert!(procrustes(&x, &same, 3).disparity.is_nan());
        assert!(check_reference(&same, 3).is_err());
        assert!(check_reference(&y, 3).is_ok());
    }
}

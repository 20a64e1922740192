//! Principal-axes projection: the 2-D view of N×d points (MDS output) that shows the most
//! spread, for plots.

use crate::compare::sym_eigen;

/// Projects N×d points onto their two principal axes, scaled into [0, 1]².
///
/// # Panics
///
/// When `d` is 0 or the points are not whole (`len % d != 0`): a fault of the caller
/// (the commands pass points they made), which would otherwise drop coordinates silently.
pub fn principal_axes(points: &[f64], d: usize) -> Vec<(f64, f64)> {
    crate::compare::whole_points(points.len(), d);
    let n = points.len() / d;
    if n == 0 {
        return Vec::new();
    }
    let mean: Vec<f64> = (0..d)
        .map(|k| (0..n).map(|i| points[i * d + k]).sum::<f64>() / n as f64)
        .collect();
    let mut cov = vec![0.0; d * d];
    for i in 0..n {
        for a in 0..d {
            for b in 0..d {
                cov[a * d + b] += (points[i * d + a] - mean[a]) * (points[i * d + b] - mean[b]);
            }
        }
    }
    let (vals, vecs) = sym_eigen(&cov, d);
    let mut order: Vec<usize> = (0..d).collect();
    order.sort_by(|&a, &b| vals[b].total_cmp(&vals[a]));
    let axis = |k: usize, i: usize| -> f64 {
        match order.get(k) {
            Some(&c) => (0..d)
                .map(|r| (points[i * d + r] - mean[r]) * vecs[r * d + c])
                .sum(),
            None => 0.0,
        }
    };
    let xy: Vec<(f64, f64)> = (0..n).map(|i| (axis(0, i), axis(1, i))).collect();
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for &(x, y) in &xy {
        lo = lo.min(x.min(y));
        hi = hi.max(x.max(y));
    }
    let span = (hi - lo).max(1e-300);
    xy.into_iter()
        .map(|(x, y)| ((x - lo) / span, (y - lo) / span))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_axis_keeps_the_largest_spread() {
        let pts = vec![0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0, 0.0, 1.0, 1.0, 0.1];
        let xy = principal_axes(&pts, 3);
        assert_eq!(xy.len(), 4);
        let spread = |f: fn(&(f64, f64)) -> f64| {
            xy.iter().map(f).fold(f64::NEG_INFINITY, f64::max)
                - xy.iter().map(f).fold(f64::INFINITY, f64::min)
        };
        assert!(spread(|p| p.0) >= spread(|p| p.1));
        assert!(xy
            .iter()
            .all(|&(x, y)| (0.0..=1.0).contains(&x) && (0.0..=1.0).contains(&y)));
        assert!(principal_axes(&[], 3).is_empty());
    }
}

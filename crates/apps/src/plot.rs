//! Scatter plots of MDS points coloured by cluster, as SVG (written by hand) or PNG.
//!
//! 3-D points are projected onto their two principal axes, which shows the most spread.

use crate::compare::sym_eigen;
use std::fmt::Write as _;

const PALETTE: [[u8; 3]; 12] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
    [188, 189, 34],
    [23, 190, 207],
    [0, 0, 0],
    [255, 215, 0],
];

/// The colour of a cluster label.
pub fn colour(label: usize) -> [u8; 3] {
    PALETTE[label % PALETTE.len()]
}

/// Projects N×d points onto their two principal axes, scaled into [0, 1]².
pub fn project(points: &[f64], d: usize) -> Vec<(f64, f64)> {
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

/// An SVG scatter plot.
pub fn svg(points: &[f64], d: usize, labels: &[usize], title: &str) -> String {
    let size = 800.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{}" viewBox="0 0 {size} {}">"#,
        size + 30.0,
        size + 30.0
    );
    let _ = writeln!(
        s,
        r#"<rect width="100%" height="100%" fill="white"/><text x="10" y="20" font-family="sans-serif" font-size="14">{title}</text>"#
    );
    for (i, (x, y)) in project(points, d).into_iter().enumerate() {
        let c = colour(labels.get(i).copied().unwrap_or(0));
        let _ = writeln!(
            s,
            r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="rgb({},{},{})"/>"#,
            10.0 + x * (size - 20.0),
            40.0 + (1.0 - y) * (size - 20.0),
            c[0],
            c[1],
            c[2]
        );
    }
    s.push_str("</svg>\n");
    s
}

/// A PNG scatter plot (800×800).
pub fn png(
    points: &[f64],
    d: usize,
    labels: &[usize],
) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let size = 800usize;
    let mut rgb = vec![255u8; size * size * 3];
    for (i, (x, y)) in project(points, d).into_iter().enumerate() {
        let c = colour(labels.get(i).copied().unwrap_or(0));
        let cx = 10.0 + x * (size as f64 - 20.0);
        let cy = 10.0 + (1.0 - y) * (size as f64 - 20.0);
        for py in (cy as isize - 3).max(0)..=(cy as isize + 3).min(size as isize - 1) {
            for px in (cx as isize - 3).max(0)..=(cx as isize + 3).min(size as isize - 1) {
                if (px as f64 - cx).powi(2) + (py as f64 - cy).powi(2) <= 6.25 {
                    let at = (py as usize * size + px as usize) * 3;
                    rgb[at..at + 3].copy_from_slice(&c);
                }
            }
        }
    }
    crate::render::encode_png(size, size, &rgb)
}

/// Writes a plot, SVG or PNG by the path's extension.
pub fn write(
    path: &std::path::Path,
    points: &[f64],
    d: usize,
    labels: &[usize],
    title: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let is_svg = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    let bytes = if is_svg {
        svg(points, d, labels, title).into_bytes()
    } else {
        png(points, d, labels)?
    };
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_have_one_mark_per_point() {
        let pts = vec![0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0, 0.0, 1.0, 1.0, 0.1];
        let s = svg(&pts, 3, &[0, 1, 1, 2], "t");
        assert_eq!(s.matches("<circle").count(), 4);
        assert!(s.contains(&format!(
            "rgb({},{},{})",
            colour(2)[0],
            colour(2)[1],
            colour(2)[2]
        )));
        let p = png(&pts, 3, &[0, 1, 1, 2]).unwrap();
        assert_eq!(&p[1..4], b"PNG");
        // The projection keeps the largest spread on the first axis.
        let xy = project(&pts, 3);
        let dx = xy.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max)
            - xy.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let dy = xy.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max)
            - xy.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        assert!(dx >= dy);
    }
}

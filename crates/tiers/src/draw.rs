//! Pictures the commands draw: scatter plots of MDS points coloured by cluster (SVG or PNG),
//! the overhead model's SVG, and PNG encoding of RGB images.
//!
//! 3-D points are projected onto their two principal axes, which shows the most spread.

use std::fmt::Write as _;
use tiers_apps::model::{Fit, Point};
use tiers_apps::projection::principal_axes;

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
    for (i, (x, y)) in principal_axes(points, d).into_iter().enumerate() {
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
    for (i, (x, y)) in principal_axes(points, d).into_iter().enumerate() {
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
    encode_png(size, size, &rgb)
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
    Ok(tiers_apps::files::write_atomic(path, &bytes)?)
}

/// An SVG of measured overhead against p, with each series' points and the best fit's
/// predictions.
pub fn overhead_svg(points: &[Point], fit: Option<&Fit>) -> String {
    let (w, h, m) = (640.0, 420.0, 50.0);
    let pmax = points.iter().map(|p| p.p).max().unwrap_or(1) as f64;
    let mut vals: Vec<f64> = points.iter().map(|p| p.overhead).collect();
    if let Some(f) = fit {
        vals.extend(points.iter().map(|p| f.predict(p)));
    }
    let fmax = vals.iter().cloned().fold(0.0f64, f64::max).max(1e-3);
    let fmin = vals.iter().cloned().fold(0.0f64, f64::min);
    let sx = |p: f64| m + (p / pmax.max(1.0)) * (w - 2.0 * m);
    let sy = |f: f64| h - m - (f - fmin) / (fmax - fmin) * (h - 2.0 * m);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}"><rect width="100%" height="100%" fill="white"/>"#
    );
    let _ = writeln!(
        s,
        r#"<line x1="{m}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{m}" y1="{m}" x2="{m}" y2="{}" stroke="black"/>"#,
        h - m,
        w - m,
        h - m,
        h - m
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" font-family="sans-serif" font-size="12">parallelism p (max {pmax})</text><text x="5" y="20" font-family="sans-serif" font-size="12">overhead f: measured (dots){} , range {fmin:.3}..{fmax:.3}</text>"#,
        w / 2.0 - 60.0,
        h - 10.0,
        if fit.is_some() {
            ", model (crosses)"
        } else {
            ""
        }
    );
    let mut sizes: Vec<(String, usize)> = points
        .iter()
        .map(|p| (p.run.app.clone(), p.run.size))
        .collect();
    sizes.sort();
    sizes.dedup();
    for p in points {
        let si = sizes
            .iter()
            .position(|q| q.0 == p.run.app && q.1 == p.run.size)
            .unwrap_or(0);
        let c = colour(si);
        let _ = writeln!(
            s,
            r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="rgb({},{},{})"><title>{} N={} p={} f={:.4}</title></circle>"#,
            sx(p.p as f64),
            sy(p.overhead),
            c[0],
            c[1],
            c[2],
            p.run.app,
            p.run.size,
            p.p,
            p.overhead
        );
        if let Some(f) = fit {
            let (x, y) = (sx(p.p as f64), sy(f.predict(p)));
            let _ = writeln!(
                s,
                r#"<path d="M{} {}L{} {}M{} {}L{} {}" stroke="rgb({},{},{})"/>"#,
                x - 4.0,
                y - 4.0,
                x + 4.0,
                y + 4.0,
                x - 4.0,
                y + 4.0,
                x + 4.0,
                y - 4.0,
                c[0],
                c[1],
                c[2]
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

/// Encodes RGB8 pixels as PNG.
pub fn encode_png(
    width: usize,
    height: usize,
    rgb: &[u8],
) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, width as u32, height as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header()?;
        w.write_image_data(rgb)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overhead_figure_has_its_points() {
        use tiers_apps::model::{analyse, fit, Factor, Run};
        let runs: Vec<Run> = (1..=4)
            .map(|p| Run {
                app: "x".into(),
                threads: p,
                nodes: 1,
                size: 10,
                seconds: (1.0 + 0.01 * (p - 1) as f64) / p as f64,
            })
            .collect();
        let pts: Vec<Point> = analyse(&runs).into_iter().filter(|p| p.p > 1).collect();
        let s = overhead_svg(&pts, Some(&fit(&pts, &[Factor::P]).unwrap()));
        assert!(s.contains("<circle"));
    }

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
    }
}

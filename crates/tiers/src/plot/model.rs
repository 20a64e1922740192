//! The overhead model's figure (\[Qiu2012\] §4): efficiency ε and overhead f against the
//! inverse grain size p/N (one series per application and size, the one-factor fit in p/N as
//! a line), and, as the seed's Figs. 7, 8 and 10 show them, the measured f of every run beside
//! each fit's f (one- and two-factor alike, a line each, labelled with its coefficients), the
//! runs in order of series and pattern t×m×n. The library computes every number; this draws
//! them.

use super::style::{self, Look, LIMIT};
use super::{axes, frame, on, span, tick, Axes, Error, Figure, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use tiers_apps::model::{Factor, Fit, Point};

/// The model figure.
pub struct ModelFigure {
    points: Vec<Point>,
    fits: Vec<Fit>,
    series: Vec<String>,
    /// Lines under the title: where and when the runs were made.
    pub caption: Vec<String>,
}

fn series_of(p: &Point) -> String {
    format!("{} N={}", p.run.app, p.run.size)
}

impl ModelFigure {
    /// The figure of `points` with their `fits`.
    pub fn new(points: Vec<Point>, fits: Vec<Fit>) -> Result<ModelFigure> {
        let points: Vec<Point> = points
            .into_iter()
            .filter(|p| p.efficiency.is_finite() && p.overhead.is_finite())
            .collect();
        if points.is_empty() {
            return Err(Error("no runs with a finite time to draw".into()));
        }
        let mut points = points;
        // Runs in order of series (first seen), then pattern: the order of the third panel.
        let first: Vec<String> = points.iter().map(series_of).collect();
        let rank_of = |p: &Point| first.iter().position(|s| *s == series_of(p)).unwrap_or(0);
        points.sort_by_key(|p| (rank_of(p), p.p, p.run.nodes, p.run.processes));
        let mut series = Vec::new();
        for p in &points {
            let s = series_of(p);
            if !series.contains(&s) {
                series.push(s);
            }
        }
        Ok(ModelFigure {
            points,
            fits,
            series,
            caption: Vec::new(),
        })
    }
}

/// `f = 1.2e-3·p/N + …`
fn formula(f: &Fit) -> String {
    let terms: Vec<String> = f
        .factors
        .iter()
        .zip(&f.coef)
        .map(|(x, a)| format!("{}·{}", tick(*a), x.name()))
        .collect();
    format!("f = {}, R² = {:.3}", terms.join(" + "), f.r2)
}

fn x_of(p: &Point, factor: Factor) -> f64 {
    match factor {
        Factor::P => p.p as f64,
        Factor::PPerN => p.p as f64 / p.run.size.max(1) as f64,
        Factor::Nodes => p.run.nodes as f64,
        Factor::PSquared => (p.p as f64) * (p.p as f64),
    }
}

/// Fit line colours (dark, apart from the series' palette).
const FIT_COLOURS: [RGBColor; 6] = [
    LIMIT,
    RGBColor(150, 0, 90),
    RGBColor(0, 110, 110),
    RGBColor(190, 90, 0),
    RGBColor(90, 90, 200),
    RGBColor(0, 140, 0),
];

impl Figure for ModelFigure {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()> {
        let n = self.points.len();
        let title = format!(
            "Parallel overhead model: {n} runs, {} series",
            self.series.len()
        );
        let mut caption = vec![
            "ε = S/p, f = 1/ε − 1 against each series' reference run; p = threads × processes × nodes; fits without intercept (f = 0 at the reference)".to_string(),
        ];
        caption.extend(self.caption.iter().cloned());
        let mid = frame(area, &title, &caption)?;
        let cells = mid.split_evenly((2, 2));
        // Series are (application, size) here, not implementations: colours in order.
        let looks: Vec<Look> = (0..self.series.len()).map(Look::of_slot).collect();
        let look_of = |p: &Point| -> Look {
            let s = series_of(p);
            self.series
                .iter()
                .position(|x| *x == s)
                .map_or(looks[0], |i| looks[i])
        };
        let fit_colour = |fi: usize| FIT_COLOURS[fi % FIT_COLOURS.len()];
        let usable = |f: &Fit| f.coef.iter().all(|c| c.is_finite());
        // Panels 1 and 2: efficiency and overhead against p/N.
        for (ci, eff) in [(0usize, true), (1, false)] {
            let cell = &cells[ci];
            let xs: Vec<f64> = self.points.iter().map(|p| x_of(p, Factor::PPerN)).collect();
            let ys: Vec<f64> = self
                .points
                .iter()
                .map(|p| if eff { p.efficiency } else { p.overhead })
                .collect();
            let (x0, x1, xlog) = span(&xs, false);
            let mut yv = ys.clone();
            if eff {
                yv.push(1.0);
                yv.push(0.0);
            }
            let (y0, y1, _) = span(&yv, true);
            let px = axes(
                cell,
                &Axes {
                    x: (x0, x1),
                    y: (y0, y1),
                    xlog,
                    ylog: false,
                    x_desc: format!(
                        "p/N (inverse grain size, 1/points){}",
                        if xlog { ", log scale" } else { "" }
                    ),
                    y_desc: if eff {
                        "efficiency ε (fraction)".into()
                    } else {
                        "overhead f (fraction)".into()
                    },
                    caption: Some(
                        if eff {
                            "efficiency against p/N"
                        } else {
                            "overhead against p/N, with its one-factor fit"
                        }
                        .into(),
                    ),
                    whole: (false, false),
                    x_names: None,
                },
            )?;
            if !eff {
                for (fi, f) in self.fits.iter().enumerate() {
                    if f.factors != [Factor::PPerN] || !usable(f) {
                        continue;
                    }
                    // f = a·x: a straight line (a curve on a log axis), sampled, only where it
                    // is inside the panel (it is one piece).
                    let a = f.coef[0];
                    let line: Vec<(i32, i32)> = (0..=60)
                        .filter_map(|k| {
                            let t = x0 + (x1 - x0) * f64::from(k) / 60.0;
                            let x = if xlog { 10f64.powf(t) } else { t };
                            let y = a * x;
                            (y0..=y1).contains(&y).then(|| px(t, y))
                        })
                        .collect();
                    cell.draw(&PathElement::new(line, fit_colour(fi).stroke_width(2)))
                        .map_err(Error::drawing)?;
                }
            }
            for (p, (x, y)) in self.points.iter().zip(xs.iter().zip(&ys)) {
                style::mark(cell, px(on(xlog, *x), *y), look_of(p), 4).map_err(Error::drawing)?;
            }
        }
        // Panel 3: measured f of every run (marks) and each fit's f (a line per fit, broken
        // between series), the runs in order of series and pattern.
        {
            let cell = &cells[2];
            let measured: Vec<f64> = self.points.iter().map(|p| p.overhead).collect();
            let mut yv = measured.clone();
            for f in self.fits.iter().filter(|f| usable(f)) {
                yv.extend(self.points.iter().map(|p| f.predict(p)));
            }
            let (y0, y1, _) = span(&yv, true);
            // Name every run's pattern where they fit (about 24 across the panel).
            let every = n.div_ceil(24).max(1);
            let names: Vec<String> = self
                .points
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    if i % every == 0 {
                        p.run.pattern()
                    } else {
                        String::new()
                    }
                })
                .collect();
            let px = axes(
                cell,
                &Axes {
                    x: (-0.5, n as f64 - 0.5),
                    y: (y0, y1),
                    xlog: false,
                    ylog: false,
                    x_desc: "run: pattern t×m×n (threads × processes × nodes), by series".into(),
                    y_desc: "overhead f (fraction)".into(),
                    caption: Some("measured f (marks) and each fit's f (lines)".into()),
                    whole: (true, false),
                    x_names: Some(names),
                },
            )?;
            for (fi, f) in self.fits.iter().enumerate() {
                if !usable(f) {
                    continue;
                }
                let colour = fit_colour(fi);
                let style = if f.factors.len() > 1 {
                    colour.stroke_width(2)
                } else {
                    colour.stroke_width(1)
                };
                for s in &self.series {
                    let line: Vec<(i32, i32)> = self
                        .points
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| series_of(p) == *s)
                        .map(|(i, p)| px(i as f64, f.predict(p).clamp(y0, y1)))
                        .collect();
                    cell.draw(&PathElement::new(line, style))
                        .map_err(Error::drawing)?;
                }
            }
            for (i, p) in self.points.iter().enumerate() {
                style::mark(cell, px(i as f64, p.overhead), look_of(p), 4)
                    .map_err(Error::drawing)?;
            }
        }
        // The fourth cell: the legend.
        let legend = &cells[3];
        let mut y = 20;
        for (name, look) in self.series.iter().zip(&looks) {
            style::mark(legend, (20, y), *look, 5).map_err(Error::drawing)?;
            legend
                .draw(&Text::new(name.clone(), (34, y - 8), super::font(14.0)))
                .map_err(Error::drawing)?;
            y += 22;
        }
        y += 8;
        for (fi, f) in self.fits.iter().enumerate() {
            if !usable(f) {
                continue;
            }
            let width = if f.factors.len() > 1 { 2 } else { 1 };
            legend
                .draw(&PathElement::new(
                    vec![(6, y), (32, y)],
                    fit_colour(fi).stroke_width(width),
                ))
                .map_err(Error::drawing)?;
            legend
                .draw(&Text::new(formula(f), (40, y - 8), super::font(13.0)))
                .map_err(Error::drawing)?;
            y += 22;
        }
        if self.fits.is_empty() {
            legend
                .draw(&Text::new(
                    "no fit (too few runs beyond the references)".to_string(),
                    (6, y),
                    super::font(13.0),
                ))
                .map_err(Error::drawing)?;
        }
        Ok(())
    }
}

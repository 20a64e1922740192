//! The overhead model's figure ([Qiu2012] §4): efficiency ε and overhead f against
//! the inverse grain size p/N, and f against the parallelism p (the pattern), one series per
//! application and size, each one-factor fit as a line labelled with its coefficient, and the
//! two-factor fits' predictions as rings. The library computes every number; this draws them.

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
        let caption = vec![
            "ε = S/p, f = 1/ε − 1 against each series' reference run; fits without intercept (f = 0 at the reference)".to_string(),
        ];
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
        // (factor on x, what on y, which panel)
        let panels: [(Factor, bool, &str); 3] = [
            (Factor::PPerN, true, "efficiency against p/N"),
            (Factor::PPerN, false, "overhead against p/N"),
            (
                Factor::P,
                false,
                "overhead against the pattern (p = threads × nodes)",
            ),
        ];
        let mut fit_legend: Vec<(RGBColor, bool, String)> = Vec::new();
        for (ci, (cell, (factor, eff, name))) in cells.iter().zip(panels).enumerate() {
            let xs: Vec<f64> = self.points.iter().map(|p| x_of(p, factor)).collect();
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
                        "{}{}",
                        if factor == Factor::P {
                            "parallelism p (threads × nodes)"
                        } else {
                            "p/N (inverse grain size, 1/points)"
                        },
                        if xlog { ", log scale" } else { "" }
                    ),
                    y_desc: if eff {
                        "efficiency ε (fraction)".into()
                    } else {
                        "overhead f (fraction)".into()
                    },
                    caption: Some(name.to_string()),
                    whole: (factor == Factor::P, false),
                },
            )?;
            if !eff {
                for (fi, f) in self.fits.iter().enumerate() {
                    if !f.coef.iter().all(|c| c.is_finite()) {
                        continue;
                    }
                    let colour = FIT_COLOURS[fi % FIT_COLOURS.len()];
                    if f.factors == [factor] {
                        // f = a·x: a straight line (a curve on a log axis), sampled.
                        let a = f.coef[0];
                        // Only where the line is inside the panel (it is one piece).
                        let line: Vec<(i32, i32)> = (0..=60)
                            .filter_map(|k| {
                                let t = x0 + (x1 - x0) * f64::from(k) / 60.0;
                                let x = if xlog { 10f64.powf(t) } else { t };
                                let y = a * x;
                                (y0..=y1).contains(&y).then(|| px(t, y))
                            })
                            .collect();
                        cell.draw(&PathElement::new(line, colour.stroke_width(2)))
                            .map_err(Error::drawing)?;
                        fit_legend.push((colour, true, formula(f)));
                    } else if f.factors.len() > 1 && ci == 1 {
                        for p in &self.points {
                            let at = px(on(xlog, x_of(p, factor)), f.predict(p).clamp(y0, y1));
                            cell.draw(&Circle::new(at, 6, colour.stroke_width(1)))
                                .map_err(Error::drawing)?;
                        }
                        fit_legend.push((colour, false, format!("{} (rings)", formula(f))));
                    }
                }
            }
            for (p, (x, y)) in self.points.iter().zip(xs.iter().zip(&ys)) {
                style::mark(cell, px(on(xlog, *x), *y), look_of(p), 4).map_err(Error::drawing)?;
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
        for (colour, line, text) in &fit_legend {
            if *line {
                legend
                    .draw(&PathElement::new(
                        vec![(6, y), (32, y)],
                        colour.stroke_width(2),
                    ))
                    .map_err(Error::drawing)?;
            } else {
                legend
                    .draw(&Circle::new((20, y), 6, colour.stroke_width(1)))
                    .map_err(Error::drawing)?;
            }
            legend
                .draw(&Text::new(text.clone(), (40, y - 8), super::font(13.0)))
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

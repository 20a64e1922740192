//! The annealing trace of `tiers cluster --plot`: as the temperature falls (left to right on a
//! log axis), the number of clusters steps up where clusters split, and the memberships'
//! uncertainty falls to the freezing limit, and the free energy the annealing minimises falls
//! with it. One mark per temperature the clustering settled at, one ring per split.

use super::style::{Look, LIMIT};
use super::{axes, frame, span, Axes, Error, Figure, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use tiers_apps::clustering::Event;

/// The annealing trace.
pub struct Anneal {
    title: String,
    /// (temperature, clusters, uncertainty, free energy) per settled temperature.
    temps: Vec<(f64, usize, f64, f64)>,
    /// (temperature, cluster that split).
    splits: Vec<(f64, usize)>,
    /// Lines under the figure's own: the machine and date of the run.
    pub caption: Vec<String>,
}

impl Anneal {
    /// The trace of `events`, or why there is none.
    pub fn new(title: String, events: &[Event]) -> Result<Anneal> {
        let mut temps = Vec::new();
        let mut splits = Vec::new();
        for e in events {
            match *e {
                Event::Temperature {
                    t,
                    k,
                    uncertainty,
                    free_energy,
                    ..
                } if t.is_finite() && t > 0.0 => temps.push((t, k, uncertainty, free_energy)),
                Event::Split { t, cluster, .. } if t.is_finite() && t > 0.0 => {
                    splits.push((t, cluster))
                }
                _ => {}
            }
        }
        if temps.is_empty() {
            return Err(Error(
                "the clustering reported no temperature to draw".into(),
            ));
        }
        Ok(Anneal {
            title,
            temps,
            splits,
            caption: Vec::new(),
        })
    }
}

impl Figure for Anneal {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()> {
        let mut caption = vec![format!(
            "{} temperatures, {} splits (rings); the temperature falls from left to right",
            self.temps.len(),
            self.splits.len()
        )];
        caption.extend(self.caption.iter().cloned());
        let mid = frame(area, &self.title, &caption)?;
        // Clusters across the top; free energy and uncertainty side by side below.
        let (_, h) = mid.dim_in_pixel();
        let (top, bottom) = mid.split_vertically(h / 2);
        let below = bottom.split_evenly((1, 2));
        let cells = [top, below[0].clone(), below[1].clone()];
        let ts: Vec<f64> = self
            .temps
            .iter()
            .map(|x| x.0)
            .chain(self.splits.iter().map(|s| s.0))
            .collect();
        let (a, b, xlog) = span(&ts, false);
        // Falling temperature reads left to right: the axis runs from high to low.
        let x = (b, a);
        let xv = |t: f64| if xlog { t.log10() } else { t };
        let kmax = self.temps.iter().map(|x| x.1).max().unwrap_or(1) as f64;
        let look = Look::of_slot(0);
        // Clusters against temperature: a step line, rings where splits happened.
        let px = axes(
            &cells[0],
            &Axes {
                x,
                y: (0.0, kmax + 1.0),
                xlog,
                ylog: false,
                x_desc: format!("temperature T{}", if xlog { ", log scale" } else { "" }),
                y_desc: "clusters (count)".into(),
                caption: Some("clusters as the temperature falls".into()),
                whole: (false, true),
                x_names: None,
            },
        )?;
        let mut steps = Vec::new();
        for (i, &(t, k, _, _)) in self.temps.iter().enumerate() {
            if i > 0 {
                steps.push(px(xv(t), self.temps[i - 1].1 as f64));
            }
            steps.push(px(xv(t), k as f64));
        }
        cells[0]
            .draw(&PathElement::new(steps, look.rgb().stroke_width(2)))
            .map_err(Error::drawing)?;
        for &(t, k, _, _) in &self.temps {
            super::style::mark(&cells[0], px(xv(t), k as f64), look, 3).map_err(Error::drawing)?;
        }
        for &(t, _) in &self.splits {
            // The count after the split: the first settled temperature at or below it.
            let k = self
                .temps
                .iter()
                .find(|x| x.0 <= t)
                .map_or(kmax, |x| x.1 as f64);
            cells[0]
                .draw(&Circle::new(px(xv(t), k), 7, LIMIT.stroke_width(2)))
                .map_err(Error::drawing)?;
        }
        // Free energy against temperature, where the clustering reported it.
        let fe: Vec<(f64, f64)> = self
            .temps
            .iter()
            .filter(|x| x.3.is_finite())
            .map(|x| (x.0, x.3))
            .collect();
        let fs: Vec<f64> = fe.iter().map(|x| x.1).collect();
        let (f0, f1, _) = span(&fs, false);
        let (f0, f1) = if f1 > f0 {
            let pad = (f1 - f0) * 0.06;
            (f0 - pad, f1 + pad)
        } else {
            (f0 - 1.0, f1 + 1.0)
        };
        let px = axes(
            &cells[1],
            &Axes {
                x,
                y: (f0, f1),
                xlog,
                ylog: false,
                x_desc: format!("temperature T{}", if xlog { ", log scale" } else { "" }),
                y_desc: "free energy F per point (distance units)".into(),
                caption: Some(if fe.is_empty() {
                    "free energy: not reported".into()
                } else {
                    "free energy, rings at the splits".into()
                }),
                whole: (false, false),
                x_names: None,
            },
        )?;
        let line: Vec<(i32, i32)> = fe.iter().map(|&(t, f)| px(xv(t), f)).collect();
        if line.len() > 1 {
            cells[1]
                .draw(&PathElement::new(line.clone(), look.rgb().stroke_width(2)))
                .map_err(Error::drawing)?;
        }
        for p in line {
            super::style::mark(&cells[1], p, look, 3).map_err(Error::drawing)?;
        }
        for &(t, _) in &self.splits {
            if let Some(&(_, f)) = fe.iter().find(|x| x.0 <= t) {
                cells[1]
                    .draw(&Circle::new(px(xv(t), f), 7, LIMIT.stroke_width(2)))
                    .map_err(Error::drawing)?;
            }
        }
        // Uncertainty against temperature.
        let us: Vec<f64> = self.temps.iter().map(|x| x.2).collect();
        let (u0, u1, ulog) = span(&us, true);
        let uv = |u: f64| if ulog { u.log10() } else { u };
        let px = axes(
            &cells[2],
            &Axes {
                x,
                y: (u0, u1),
                xlog,
                ylog: ulog,
                x_desc: format!("temperature T{}", if xlog { ", log scale" } else { "" }),
                y_desc: format!(
                    "membership uncertainty (mean M(1-M)){}",
                    if ulog { ", log scale" } else { "" }
                ),
                caption: Some("how undecided the memberships are".into()),
                whole: (false, false),
                x_names: None,
            },
        )?;
        let line: Vec<(i32, i32)> = self
            .temps
            .iter()
            .filter(|x| !ulog || x.2 > 0.0)
            .map(|&(t, _, u, _)| px(xv(t), uv(u)))
            .collect();
        cells[2]
            .draw(&PathElement::new(line.clone(), look.rgb().stroke_width(2)))
            .map_err(Error::drawing)?;
        for p in line {
            super::style::mark(&cells[2], p, look, 3).map_err(Error::drawing)?;
        }
        Ok(())
    }
}

//! The MDS scatter: points on their two principal axes (the library's projection), one panel
//! per colouring (the clusters found, and the reference's labels where there are some, so
//! that a reader sees the agreement), each with a legend of its clusters and their sizes.

use super::style::{self, Look};
use super::{axes, frame, Axes, Error, Figure, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Most legend entries per panel; the rest are counted in one line.
const LEGEND_MAX: usize = 16;

/// An MDS scatter.
pub struct Scatter {
    /// Title (N, dimensions, stress).
    pub title: String,
    /// The points on their two principal axes, each in [0, 1].
    pub xy: Vec<(f64, f64)>,
    /// Colourings: a name (`clusters found`, `reference`) and one label per point.
    pub colourings: Vec<(String, Vec<usize>)>,
    /// Reference points (`tiers mds --reference`) on the same axes as `xy`: drawn in a panel of
    /// their own beside each colouring's, coloured alike, so that agreement shows as the same
    /// picture twice.
    pub reference: Option<Vec<(f64, f64)>>,
    /// Caption lines.
    pub caption: Vec<String>,
}

impl Scatter {
    /// A scatter of N×d `points` projected on their principal axes.
    pub fn new(points: &[f64], d: usize, title: String) -> Result<Scatter> {
        if d == 0 || points.is_empty() || points.len() % d != 0 {
            return Err(Error(format!(
                "no points to draw ({} numbers in {d} dimensions)",
                points.len()
            )));
        }
        if let Some(i) = points.iter().position(|v| !v.is_finite()) {
            return Err(Error(format!(
                "point {} has a coordinate that is not a finite number ({}); nothing drawn",
                i / d,
                points[i]
            )));
        }
        Ok(Scatter {
            title,
            xy: tiers_apps::projection::principal_axes(points, d),
            colourings: Vec::new(),
            reference: None,
            caption: Vec::new(),
        })
    }

    /// A scatter of `points` beside `reference` (both N×d): ours fitted onto the reference by
    /// Procrustes (rotation, reflection, scale, shift), then both projected on the principal
    /// axes of the two together, so that both panels share one frame.
    pub fn with_reference(
        points: &[f64],
        reference: &[f64],
        d: usize,
        title: String,
    ) -> Result<Scatter> {
        let mut fig = Scatter::new(points, d, title)?;
        if reference.len() != points.len() {
            return Err(Error(format!(
                "the reference has {} points, the configuration {}",
                reference.len() / d.max(1),
                points.len() / d.max(1)
            )));
        }
        if let Some(i) = reference.iter().position(|v| !v.is_finite()) {
            return Err(Error(format!(
                "reference point {} has a coordinate that is not a finite number; nothing drawn",
                i / d
            )));
        }
        tiers_apps::compare::check_reference(reference, d)
            .map_err(|e| Error(format!("{e}; nothing drawn")))?;
        let fit = tiers_apps::compare::procrustes(points, reference, d);
        let mut joint = fit.fitted;
        joint.extend_from_slice(reference);
        let mut xy = tiers_apps::projection::principal_axes(&joint, d);
        let theirs = xy.split_off(xy.len() / 2);
        fig.xy = xy;
        fig.reference = Some(theirs);
        fig.caption.push(format!(
            "right: the --reference points; left: ours after a Procrustes fit onto them (disparity {:.4}), both on the principal axes of the two together",
            fit.disparity
        ));
        Ok(fig)
    }

    /// Adds a colouring (one label per point).
    pub fn colour_by(mut self, name: &str, labels: Vec<usize>) -> Result<Scatter> {
        if labels.len() != self.xy.len() {
            return Err(Error(format!(
                "{name}: {} labels for {} points",
                labels.len(),
                self.xy.len()
            )));
        }
        self.colourings.push((name.to_string(), labels));
        Ok(self)
    }
}

/// One panel: the points on their axes, its title, one label per point.
type Panel<'a> = (&'a [(f64, f64)], String, &'a [usize]);

/// The look of cluster `label`: colours first, then markers.
pub fn cluster_look(label: usize) -> Look {
    Look::of_slot(label)
}

impl Figure for Scatter {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()> {
        let mid = frame(area, &self.title, &self.caption)?;
        let one = [(String::from("one colour"), vec![0; self.xy.len()])];
        let colourings: &[(String, Vec<usize>)] = if self.colourings.is_empty() {
            &one
        } else {
            &self.colourings
        };
        // Each colouring of our points, and of the reference's beside it when there is one.
        let mut panels: Vec<Panel<'_>> = Vec::new();
        for (name, labels) in colourings {
            panels.push((&self.xy, format!("coloured by {name}"), labels));
            if let Some(r) = &self.reference {
                panels.push((r, format!("reference points, by {name}"), labels));
            }
        }
        let cells = mid.split_evenly((1, panels.len()));
        let r = if self.xy.len() > 3000 { 2 } else { 3 };
        for (cell, (xy, name, labels)) in cells.iter().zip(panels) {
            let (w, _) = cell.dim_in_pixel();
            let (plot, legend) = cell.split_horizontally(w.saturating_sub(150));
            let px = axes(
                &plot,
                &Axes {
                    x: (-0.03, 1.03),
                    y: (-0.03, 1.03),
                    xlog: false,
                    ylog: false,
                    x_desc: "principal axis 1 (scaled to 0..1)".into(),
                    y_desc: "principal axis 2 (scaled to 0..1)".into(),
                    caption: Some(name),
                    whole: (false, false),
                    x_names: None,
                },
            )?;
            // Colours by order of first appearance, not by label number: two labellings that
            // agree get the same colours, whatever numbers they use.
            let mut order: Vec<usize> = Vec::new();
            for &l in labels {
                if !order.contains(&l) {
                    order.push(l);
                }
            }
            let look = |l: usize| cluster_look(order.iter().position(|&o| o == l).unwrap_or(0));
            for (&(x, y), &l) in xy.iter().zip(labels) {
                style::mark(&plot, px(x, y), look(l), r).map_err(Error::drawing)?;
            }
            let mut sizes: Vec<(usize, usize)> = Vec::new();
            for &l in labels {
                match sizes.iter_mut().find(|(k, _)| *k == l) {
                    Some((_, n)) => *n += 1,
                    None => sizes.push((l, 1)),
                }
            }
            sizes.sort();
            legend
                .draw(&Text::new(
                    format!("{} clusters", sizes.len()),
                    (6, 34),
                    super::font(14.0),
                ))
                .map_err(Error::drawing)?;
            for (i, &(l, n)) in sizes.iter().take(LEGEND_MAX).enumerate() {
                let y = 62 + 20 * i as i32;
                style::mark(&legend, (14, y), look(l), 5).map_err(Error::drawing)?;
                legend
                    .draw(&Text::new(
                        format!("{l}: {n} points"),
                        (26, y - 7),
                        super::font(13.0),
                    ))
                    .map_err(Error::drawing)?;
            }
            if sizes.len() > LEGEND_MAX {
                legend
                    .draw(&Text::new(
                        format!("… and {} more", sizes.len() - LEGEND_MAX),
                        (6, 62 + 20 * LEGEND_MAX as i32 - 7),
                        super::font(13.0),
                    ))
                    .map_err(Error::drawing)?;
            }
        }
        Ok(())
    }
}

//! A report whose rows split one time into parts (RedBlack3D's `total`, `wait`, `comp`,
//! \[Baden2001\]'s Tables 2–3) drawn as \[Baden2001\] reads it: one group per implementation,
//! its parts stacked (computation at the bottom, waiting on top), the total marked across the
//! bar with its value written above, and the `limit` group's total dashed across the panel.
//!
//! The shape is recognised by its data, not by the benchmark's name: a name parameter whose
//! values are `total` and at least one other part, with no numbers among them.

use super::report::{Param, Row, Table};
use super::style::{self, LIMIT, PALETTE};
use super::{font, frame, tick, tickable, Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

/// The part that is the whole.
const TOTAL: &str = "total";

/// Parts drawn at the bottom of a bar when present (the work itself), in this order.
const BOTTOM_FIRST: &[&str] = &["comp", "compute", "computation"];

/// Most panels one figure holds.
const MAX_PANELS: usize = 9;

/// The stacked layout of a report.
#[derive(Clone, Debug)]
pub struct Stack {
    /// The parameter naming the part.
    pub key: String,
    /// The parts stacked, bottom first (not `total`).
    pub parts: Vec<String>,
    /// The groups, in order of first appearance, `limit` last.
    pub groups: Vec<String>,
    /// Parameters that make panels.
    pub(crate) panel_keys: Vec<String>,
    /// Each panel: its parameter values and its rows.
    pub(crate) panels: Vec<(Vec<Param>, Vec<usize>)>,
    /// Parameters with one value everywhere, for the title.
    pub(crate) fixed: Vec<(String, Param)>,
}

fn distinct_text(vals: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in vals {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

impl Stack {
    /// The stacked layout of `t`, if its rows split a total into parts; `Ok(None)` if they do
    /// not; an error if they do but cannot be drawn so.
    pub fn of(t: &Table) -> Result<Option<Stack>> {
        let mut names: Vec<String> = Vec::new();
        for r in &t.rows {
            for (k, _) in &r.params {
                if !names.contains(k) {
                    names.push(k.clone());
                }
            }
        }
        let values = |k: &str| -> Option<Vec<String>> {
            let mut out = Vec::new();
            for r in &t.rows {
                match r.get(k) {
                    Some(Param::Name(s)) => out.push(s.to_ascii_lowercase()),
                    Some(Param::Num(_)) => return None,
                    None => {}
                }
            }
            Some(distinct_text(out.into_iter()))
        };
        let Some((key, vals)) = names.iter().find_map(|k| {
            values(k)
                .filter(|v| v.len() >= 2 && v.iter().any(|s| s == TOTAL))
                .map(|v| (k.clone(), v))
        }) else {
            return Ok(None);
        };
        let mut parts: Vec<String> = vals.into_iter().filter(|v| v != TOTAL).collect();
        // The work at the bottom, what is waited on top of it.
        parts.sort_by_key(|p| {
            BOTTOM_FIRST
                .iter()
                .position(|b| b == p)
                .unwrap_or(BOTTOM_FIRST.len())
        });
        let mut groups = distinct_text(
            t.rows
                .iter()
                .filter(|r| !r.is_limit())
                .map(|r| r.imp.clone()),
        );
        if groups.is_empty() {
            return Err(Error(format!(
                "the {} report has only limit rows, nothing measured to draw",
                t.bench
            )));
        }
        if t.rows.iter().any(Row::is_limit) {
            groups.push(tiers_bench::limit::IMPL.into());
        }
        let others: Vec<&String> = names.iter().filter(|k| **k != key).collect();
        let vary = |k: &str| {
            let v = distinct_text(t.rows.iter().filter_map(|r| r.get(k).map(|p| p.key())));
            v.len() > 1
        };
        let panel_keys: Vec<String> = others
            .iter()
            .filter(|k| vary(k))
            .map(|k| (*k).clone())
            .collect();
        let fixed = others
            .iter()
            .filter(|k| !vary(k))
            .filter_map(|k| {
                t.rows
                    .iter()
                    .find_map(|r| r.get(k))
                    .map(|v| ((*k).clone(), v.clone()))
            })
            .collect();
        let mut panels: Vec<(Vec<Param>, Vec<usize>)> = Vec::new();
        for (i, r) in t.rows.iter().enumerate() {
            let pk: Vec<Param> = panel_keys
                .iter()
                .map(|k| r.get(k).cloned().unwrap_or(Param::Name("-".into())))
                .collect();
            match panels.iter_mut().find(|(k, _)| *k == pk) {
                Some((_, rows)) => rows.push(i),
                None => panels.push((pk, vec![i])),
            }
        }
        if panels.len() > MAX_PANELS {
            return Err(Error(format!(
                "the {} report needs {} panels (one per value of {}), more than {MAX_PANELS} fit in one figure",
                t.bench,
                panels.len(),
                panel_keys.join(", ")
            )));
        }
        // One value per group and part in each panel, or the bars would mix configurations.
        for (pk, rows) in &panels {
            let mut seen = std::collections::HashSet::new();
            for &i in rows {
                let r = &t.rows[i];
                let part = r.get(&key).map(Param::text).unwrap_or_default();
                if !seen.insert((r.imp.clone(), part.to_ascii_lowercase())) {
                    let wher: Vec<String> = panel_keys
                        .iter()
                        .zip(pk)
                        .map(|(k, v)| format!("{k} = {}", v.text()))
                        .collect();
                    return Err(Error(format!(
                        "the {} report has two {part} rows of {} at {}: they differ in something that is not a parameter this figure can tell apart",
                        t.bench,
                        r.imp,
                        if wher.is_empty() { "the same place".into() } else { wher.join(", ") }
                    )));
                }
            }
        }
        Ok(Some(Stack {
            key,
            parts,
            groups,
            panel_keys,
            panels,
            fixed,
        }))
    }

    /// The colour of a part: the palette from its far end, so that parts never look like the
    /// implementations of the line figures.
    pub fn colour(&self, part: usize) -> RGBColor {
        [PALETTE[0], PALETTE[1], PALETTE[2], PALETTE[4], PALETTE[5]][part % 5]
    }

    /// Draws the figure of `t` laid out as `self`.
    pub fn draw<DB: DrawingBackend>(
        &self,
        t: &Table,
        area: &DrawingArea<DB, Shift>,
        caption: &[String],
    ) -> Result<()> {
        let mut title = format!(
            "{} ({}): {} split into {}",
            t.bench,
            t.unit,
            TOTAL,
            self.parts.join(" + ")
        );
        if !self.fixed.is_empty() {
            let f: Vec<String> = self
                .fixed
                .iter()
                .map(|(k, v)| format!("{k} = {}", v.text()))
                .collect();
            title.push_str(&format!(", {}", f.join(", ")));
        }
        let mut caption = caption.to_vec();
        caption.push(format!(
            "bars: {} stacked; black line: the {TOTAL} with its value (each measured on its own, so a gap above a bar is time in neither part)",
            self.parts.join(" + ")
        ));
        let mid = frame(area, &title, &caption)?;
        let (w, _) = mid.dim_in_pixel();
        let (plots, legend) = mid.split_horizontally(w.saturating_sub(130));
        // Legend: the parts (bottom of the stack last, as the bars read), the total, the limit.
        let mut y = 20;
        for (i, p) in self.parts.iter().enumerate().rev() {
            legend
                .draw(&Rectangle::new(
                    [(8, y - 7), (30, y + 7)],
                    self.colour(i).filled(),
                ))
                .map_err(Error::drawing)?;
            legend
                .draw(&Text::new(p.clone(), (40, y - 8), font(14.0)))
                .map_err(Error::drawing)?;
            y += 22;
        }
        legend
            .draw(&PathElement::new(
                vec![(4, y), (34, y)],
                BLACK.stroke_width(3),
            ))
            .map_err(Error::drawing)?;
        legend
            .draw(&Text::new(TOTAL.to_string(), (40, y - 8), font(14.0)))
            .map_err(Error::drawing)?;
        y += 22;
        if self.groups.iter().any(|g| g == tiers_bench::limit::IMPL) {
            style::dashed(&legend, &[(4, y), (34, y)], LIMIT.stroke_width(2))
                .map_err(Error::drawing)?;
            legend
                .draw(&Text::new(
                    tiers_bench::limit::IMPL.to_string(),
                    (40, y - 8),
                    font(14.0),
                ))
                .map_err(Error::drawing)?;
        }
        let hi = self.top(t);
        let (_, y1) = tickable("y", (0.0, if hi > 0.0 { hi * 1.15 } else { 1.0 }))?;
        let n = self.panels.len().max(1);
        // Each group's name needs ~80 px under its bar: as many columns as leave that room.
        let fit = (plots.dim_in_pixel().0 as usize / (80 * self.groups.len()).max(1)).max(1);
        let cols = n.min(3).min(fit);
        let cells = plots.split_evenly((n.div_ceil(cols), cols));
        let x1 = self.groups.len() as f64 - 0.5;
        let label_of = |v: &f64| -> String {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < self.groups.len() {
                self.groups[i as usize].clone()
            } else {
                String::new()
            }
        };
        for (cell, (pk, rows)) in cells.iter().zip(&self.panels) {
            let mut cb = ChartBuilder::on(cell);
            cb.margin(8).x_label_area_size(44).y_label_area_size(74);
            let cap: Vec<String> = self
                .panel_keys
                .iter()
                .zip(pk)
                .map(|(k, v)| format!("{k} = {}", v.text()))
                .collect();
            if !cap.is_empty() {
                cb.caption(cap.join(", "), font(15.0));
            }
            let mut chart = cb
                .build_cartesian_2d(-0.5..x1, 0.0..y1)
                .map_err(Error::drawing)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_desc("implementation (variant)")
                .y_desc(format!(
                    "time ({}), {} is better",
                    if t.unit.is_empty() {
                        "no unit given"
                    } else {
                        &t.unit
                    },
                    if t.lower_is_better { "lower" } else { "higher" }
                ))
                .x_labels(self.groups.len() + 1)
                .y_labels(8)
                .x_label_formatter(&label_of)
                .y_label_formatter(&|v| tick(*v))
                .label_style(font(12.0))
                .axis_desc_style(font(14.0))
                .light_line_style(RGBColor(235, 235, 235))
                .bold_line_style(RGBColor(215, 215, 215))
                .draw()
                .map_err(Error::drawing)?;
            let base = cell.get_base_pixel();
            let px = |x: f64, y: f64| {
                let p = chart.backend_coord(&(x, y));
                (p.0 - base.0, p.1 - base.1)
            };
            for (gi, g) in self.groups.iter().enumerate() {
                let (stack, total) = self.bar(t, rows, g);
                let x = gi as f64;
                let mut at = 0.0;
                for (pi, v) in stack.iter().enumerate() {
                    if *v > 0.0 {
                        cell.draw(&Rectangle::new(
                            [px(x - 0.32, at + v), px(x + 0.32, at)],
                            self.colour(pi).filled(),
                        ))
                        .map_err(Error::drawing)?;
                    }
                    at += v;
                }
                if let Some(tv) = total {
                    let (l, r) = (px(x - 0.4, tv), px(x + 0.4, tv));
                    if g == tiers_bench::limit::IMPL {
                        let (a, b) = (px(-0.5, tv), px(x1, tv));
                        style::dashed(cell, &[a, b], LIMIT.stroke_width(2))
                            .map_err(Error::drawing)?;
                    }
                    cell.draw(&PathElement::new(vec![l, r], BLACK.stroke_width(3)))
                        .map_err(Error::drawing)?;
                    cell.draw(&Text::new(tick(tv), (l.0 + 4, l.1 - 17), font(12.0)))
                        .map_err(Error::drawing)?;
                }
            }
        }
        Ok(())
    }

    /// The top of the y range: the highest total or stack of any panel (infinite where a
    /// stack's parts add up past `f64`).
    pub fn top(&self, t: &Table) -> f64 {
        let mut hi: f64 = 0.0;
        for (_, rows) in &self.panels {
            for g in &self.groups {
                let (stack, total) = self.bar(t, rows, g);
                hi = hi.max(stack.iter().sum::<f64>()).max(total.unwrap_or(0.0));
            }
        }
        hi
    }

    /// A group's parts (bottom first, missing or non-finite as 0) and total in one panel.
    fn bar(&self, t: &Table, rows: &[usize], group: &str) -> (Vec<f64>, Option<f64>) {
        let val = |part: &str| {
            rows.iter()
                .map(|&i| &t.rows[i])
                .filter(|r| r.imp == group)
                .find(|r| {
                    r.get(&self.key)
                        .is_some_and(|p| p.text().eq_ignore_ascii_case(part))
                })
                .map(|r| r.value)
                .filter(|v| v.is_finite())
        };
        let stack = self
            .parts
            .iter()
            .map(|p| val(p).unwrap_or(0.0).max(0.0))
            .collect();
        (stack, val(TOTAL))
    }
}

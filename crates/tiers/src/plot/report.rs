//! The figure of a benchmark report: the benchmark's own parameter on x (logarithmic where it
//! spans decades, categories where it is a name), the value on y with its unit, one series per
//! implementation, the `limit` row dashed, and one panel per value of any other parameter, so
//! that no series mixes configurations.
//!
//! A report in JSON does not say which fields are parameters and which are measurements, so
//! [`Table::from_json_as`] decides: integers and strings are parameters, fractional numbers
//! (efficiency, stress, …) and lists are measurements, and a few fields that describe a row
//! rather than place it (`samples`, `min`, `max`, `measured`, `algorithm`, `vs_limit`) are
//! neither. Of the parameters that vary, x is the one that determines the most others (the
//! pattern `2x1x1` determines ranks and threads), then a number over a name, then the one with
//! more values; those x determines are left out, the rest make panels.

use super::legend::LegendGrid;
use super::stacked::Stack;
use super::style::{self, LIMIT};
use super::{font, frame, linear_fits, tick, tickable, Error, Figure, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;

/// Fields of a JSON row that are neither a parameter nor the value.
const DESCRIPTIVE: &[&str] = &[
    "impl",
    "value",
    "vs_limit",
    "samples",
    "min",
    "max",
    "measured",
    "algorithm",
];

/// Parameters that are the benchmark's own axis when several could be, best first.
const X_PREFERENCE: &[&str] = &["bytes", "threads", "ranks", "producers", "size"];

/// A row parameter that gives the row's own unit (where one report measures things in
/// different units, as progress calls and microseconds): never the x axis, always a panel of
/// its own, whose y axis it names.
pub const UNIT_PARAM: &str = "unit";

/// Most panels one figure holds.
const MAX_PANELS: usize = 16;

/// A parameter's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    /// A number (counts, bytes).
    Num(f64),
    /// A name (an operation, a pattern).
    Name(String),
}

impl Param {
    fn of(v: &Value) -> Option<Param> {
        match v {
            Value::Number(n) if n.is_i64() || n.is_u64() => n.as_f64().map(Param::Num),
            Value::Number(n) => n.as_f64().map(Param::Num),
            Value::String(s) => Some(Param::Name(s.clone())),
            _ => None,
        }
    }

    /// An exact key (the number's bits), for sets and maps.
    pub(crate) fn key(&self) -> String {
        match self {
            Param::Num(v) => format!("n{:x}", v.to_bits()),
            Param::Name(s) => format!("s{s}"),
        }
    }

    pub(crate) fn text(&self) -> String {
        match self {
            Param::Num(v) => tick(*v),
            Param::Name(s) => s.clone(),
        }
    }
}

/// One row: an implementation, where it was measured, its value.
#[derive(Clone, Debug)]
pub struct Row {
    /// Implementation name (`limit` for the limit row).
    pub imp: String,
    /// Parameters.
    pub params: Vec<(String, Param)>,
    /// The value (may be NaN: drawn as missing).
    pub value: f64,
    /// The row's other numbers (measurements such as `efficiency`, and numeric parameters),
    /// any of which [`Table::with_value`] can put on y instead.
    pub numbers: Vec<(String, f64)>,
}

impl Row {
    pub(crate) fn get(&self, k: &str) -> Option<&Param> {
        self.params.iter().find(|(n, _)| n == k).map(|(_, v)| v)
    }

    pub(crate) fn is_limit(&self) -> bool {
        self.imp == tiers_bench::limit::IMPL
    }
}

/// A benchmark report as the figure needs it.
#[derive(Clone, Debug, Default)]
pub struct Table {
    /// Benchmark name.
    pub bench: String,
    /// Unit of the values.
    pub unit: String,
    /// Whether smaller is better.
    pub lower_is_better: bool,
    /// The rows.
    pub rows: Vec<Row>,
    /// Processor model.
    pub cpu: Option<String>,
    /// Cores.
    pub cores: Option<u64>,
    /// Host name.
    pub host: Option<String>,
    /// A cache-line round trip in ns, where the report measured one.
    pub round_trip_ns: Option<f64>,
    /// When it ran (or the file's date).
    pub date: Option<String>,
}

impl Table {
    /// From a report just measured (its parameters are known); dated today.
    pub fn from_report(r: &tiers_bench::Report) -> Table {
        // The rows come from `r` below; its figure's field is applied once, at the end.
        let mut t = Table::from_json_as(&r.to_json(), Some("value")).unwrap_or_default();
        t.bench.clone_from(&r.bench);
        t.unit.clone_from(&r.unit);
        t.lower_is_better = r.lower_is_better;
        t.rows = r
            .rows
            .iter()
            .map(|row| Row {
                imp: row.imp.clone(),
                params: row
                    .params
                    .iter()
                    .filter_map(|(k, v)| Param::of(v).map(|p| (k.clone(), p)))
                    .collect(),
                value: row.value,
                numbers: row
                    .params
                    .iter()
                    .chain(row.extra.iter())
                    .filter_map(|(k, v)| v.as_f64().map(|x| (k.clone(), x)))
                    .collect(),
            })
            .collect();
        t.date = Some(super::today());
        if let Some(f) = &r.figure_value {
            // A report whose rows lack its own field keeps its values.
            let _ = t.with_value(f);
        }
        t
    }

    /// The same report with the row field `field` on y instead of `value` (`efficiency`,
    /// `speedup`, `peak_rss_mib`, …; `value` itself leaves it as it is): rows without that
    /// number are left out (a limit row that does not state it draws no limit line, except
    /// for efficiency and overhead, whose limits are 1 and 0 by definition), the unit
    /// and direction become the field's. An error names the numeric fields there are when no
    /// measured row has it, and leaves the report as it was.
    pub fn with_value(&mut self, field: &str) -> Result<()> {
        if field == "value" {
            return Ok(());
        }
        let has = |r: &Row| r.numbers.iter().any(|(k, _)| k == field);
        if !self.rows.iter().any(|r| !r.is_limit() && has(r)) {
            let mut fields: Vec<&str> = self
                .rows
                .iter()
                .flat_map(|r| r.numbers.iter().map(|(k, _)| k.as_str()))
                .collect();
            fields.sort_unstable();
            fields.dedup();
            return Err(Error(format!(
                "no measured row has a number {field:?} to draw (numbers there: value{}{})",
                if fields.is_empty() { "" } else { ", " },
                fields.join(", ")
            )));
        }
        // What a limit row means in a field's own terms when it does not say: perfect
        // efficiency, no overhead (true of every report, as both are defined against it).
        let implied = match field {
            "efficiency" => Some(1.0),
            "overhead" => Some(0.0),
            _ => None,
        };
        self.rows
            .retain(|r| has(r) || (r.is_limit() && implied.is_some()));
        for r in &mut self.rows {
            r.value = r
                .numbers
                .iter()
                .find(|(k, _)| k == field)
                .map(|(_, v)| *v)
                .or(implied)
                .unwrap_or(f64::NAN);
            r.params.retain(|(k, _)| k != field);
        }
        let (unit, lower) = match field {
            "efficiency" => ("parallel efficiency", false),
            "speedup" => ("speedup over 1x1x1", false),
            "overhead" => ("overhead f", true),
            f if f.ends_with("_mib") => ("MiB", true),
            f => (f, true),
        };
        self.unit = printable(unit);
        self.lower_is_better = lower;
        Ok(())
    }

    /// From the JSON document that `tiers bench --json` prints, drawing on y `field` when
    /// given (`value` for the raw values), else the field the report names for its figure
    /// (`figure_value`), else `value`.
    pub fn from_json_as(doc: &Value, field: Option<&str>) -> Result<Table> {
        let Some(obj) = doc.as_object() else {
            return Err(Error(
                "not a benchmark report: the document is not a JSON object".into(),
            ));
        };
        let Some(results) = obj.get("results").and_then(Value::as_array) else {
            let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
            return Err(Error(format!(
                "not a benchmark report: it has no \"results\" list (its fields: {})",
                keys.join(", ")
            )));
        };
        let mut t = Table {
            bench: printable(
                obj.get("bench")
                    .and_then(Value::as_str)
                    .unwrap_or("benchmark"),
            ),
            unit: printable(obj.get("unit").and_then(Value::as_str).unwrap_or("")),
            lower_is_better: obj
                .get("lower_is_better")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            ..Table::default()
        };
        if let Some(m) = obj.get("machine") {
            t.cpu = m.get("cpu").and_then(Value::as_str).map(printable);
            t.cores = m.get("cores").and_then(Value::as_u64);
            t.host = m.get("hostname").and_then(Value::as_str).map(printable);
            // The machine's own round trip; a `limit` row that measured one in the run wins.
            t.round_trip_ns = m.get("round_trip_ns").and_then(Value::as_f64);
        }
        t.date = obj.get("date").and_then(Value::as_str).map(printable);
        let mut measured_rt: Option<f64> = None;
        for (i, r) in results.iter().enumerate() {
            let Some(ro) = r.as_object() else {
                return Err(Error(format!(
                    "not a benchmark report: result {i} is not an object"
                )));
            };
            let Some(imp) = ro.get("impl").and_then(Value::as_str) else {
                return Err(Error(format!(
                    "not a benchmark report: result {i} names no \"impl\""
                )));
            };
            // serde_json writes NaN and infinities as null.
            let value = match ro.get("value") {
                Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
                Some(Value::Null) => f64::NAN,
                _ => {
                    return Err(Error(format!(
                        "not a benchmark report: result {i} ({imp}) has no numeric \"value\""
                    )))
                }
            };
            let mut params = Vec::new();
            let numbers: Vec<(String, f64)> = ro
                .iter()
                .filter(|(k, _)| k.as_str() != "value")
                .filter_map(|(k, v)| v.as_f64().map(|x| (k.clone(), x)))
                .collect();
            for (k, v) in ro {
                if DESCRIPTIVE.contains(&k.as_str()) {
                    continue;
                }
                if k == "ns_per_round_trip" {
                    if let Some(rt) = v.as_f64() {
                        measured_rt.get_or_insert(rt);
                    }
                    continue;
                }
                match v {
                    Value::Number(n) if n.is_i64() || n.is_u64() => {
                        params.push((printable(k), Param::Num(n.as_f64().unwrap_or(f64::NAN))))
                    }
                    Value::String(s) => params.push((printable(k), Param::Name(printable(s)))),
                    _ => {}
                }
            }
            if imp == tiers_bench::limit::IMPL
                && measured_rt.is_none()
                && t.unit == "ns"
                && ro
                    .get("measured")
                    .and_then(Value::as_str)
                    .is_some_and(|m| m.starts_with("cache-line round trip"))
            {
                measured_rt = Some(value).filter(|v| v.is_finite());
            }
            t.rows.push(Row {
                imp: printable(imp),
                params,
                value,
                numbers,
            });
        }
        if measured_rt.is_some() {
            t.round_trip_ns = measured_rt;
        }
        if let Some(f) = field.or_else(|| obj.get("figure_value").and_then(Value::as_str)) {
            t.with_value(f)?;
        }
        Ok(t)
    }
}

/// `s` as a figure can show it: XML allows no control characters (but tab and line breaks,
/// which SVG text does not show either), so an SVG with one in a name does not open; each is
/// written as its escape (`\u{1}`) instead, which keeps different names different.
fn printable(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The x axis.
#[derive(Clone, Debug)]
enum Axis {
    /// Numbers (each panel picks its range and whether it is logarithmic).
    Num,
    /// Names, in order of first appearance.
    Names(Vec<String>),
}

/// How the rows are laid out: x, the panels, the rows of each.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The x parameter, if any parameter varies.
    x: Option<String>,
    axis: Axis,
    /// Parameters that make panels.
    panel_keys: Vec<String>,
    /// Each panel: its parameter values and its rows (indices into the table).
    panels: Vec<(Vec<Param>, Vec<usize>)>,
    /// Series names, in order of first appearance (the limit last).
    series: Vec<String>,
    /// Parameters with one value everywhere, for the title.
    fixed: Vec<(String, Param)>,
}

fn distinct(vals: impl Iterator<Item = Param>) -> Vec<Param> {
    let mut seen = std::collections::HashSet::new();
    vals.filter(|v| seen.insert(v.key())).collect()
}

/// Whether `a` determines `b` over the rows that have both.
fn determines(rows: &[&Row], a: &str, b: &str) -> bool {
    let mut seen: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for r in rows {
        if let (Some(x), Some(y)) = (r.get(a), r.get(b)) {
            let y = y.key();
            match seen.get(&x.key()) {
                Some(v) if *v != y => return false,
                Some(_) => {}
                None => {
                    seen.insert(x.key(), y);
                }
            }
        }
    }
    true
}

impl Layout {
    /// Lays out `t`, or says why it cannot be drawn.
    pub fn of(t: &Table) -> Result<Layout> {
        if t.rows.is_empty() {
            return Err(Error(format!(
                "the {} report has no results to draw",
                t.bench
            )));
        }
        let measured: Vec<&Row> = t.rows.iter().filter(|r| !r.is_limit()).collect();
        if measured.is_empty() {
            return Err(Error(format!(
                "the {} report has only limit rows, nothing measured to draw",
                t.bench
            )));
        }
        // Parameter names in order of first appearance, with their values.
        let mut names: Vec<String> = Vec::new();
        for r in &measured {
            for (k, _) in &r.params {
                if !names.contains(k) {
                    names.push(k.clone());
                }
            }
        }
        let values = |k: &str| distinct(measured.iter().filter_map(|r| r.get(k).cloned()));
        let (varying, fixed_names): (Vec<String>, Vec<String>) =
            names.into_iter().partition(|k| values(k).len() > 1);
        let fixed = fixed_names
            .iter()
            .filter(|k| measured.iter().all(|r| r.get(k).is_some()))
            .filter_map(|k| values(k).first().map(|v| (k.clone(), v.clone())))
            .collect();
        let numeric = |k: &str| values(k).iter().all(|v| matches!(v, Param::Num(_)));
        let pref = |k: &str| {
            X_PREFERENCE
                .iter()
                .position(|p| *p == k)
                .unwrap_or(X_PREFERENCE.len())
        };
        let x = varying
            .iter()
            .filter(|k| *k != UNIT_PARAM)
            .max_by_key(|k| {
                let dets = varying
                    .iter()
                    .filter(|o| o != k && determines(&measured, k, o))
                    .count();
                (
                    dets,
                    numeric(k),
                    values(k).len(),
                    std::cmp::Reverse(pref(k)),
                )
            })
            .cloned()
            // Nothing varies: the first parameter still names the axis of the one point.
            .or_else(|| fixed_names.first().cloned());
        let axis = match &x {
            Some(k) if !numeric(k) => Axis::Names(values(k).iter().map(Param::text).collect()),
            // Whether it is drawn on a log scale is each panel's own choice.
            Some(_) => Axis::Num,
            None => Axis::Names(vec![String::new()]),
        };
        let panel_keys: Vec<String> = varying
            .iter()
            .filter(|k| Some(*k) != x.as_ref())
            .filter(|k| {
                *k == UNIT_PARAM || x.as_ref().is_none_or(|xk| !determines(&measured, xk, k))
            })
            .cloned()
            .collect();
        let mut panels: Vec<(Vec<Param>, Vec<usize>)> = Vec::new();
        for (i, r) in t.rows.iter().enumerate() {
            if r.is_limit() {
                continue;
            }
            let key: Vec<Param> = panel_keys
                .iter()
                .map(|k| r.get(k).cloned().unwrap_or(Param::Name("-".into())))
                .collect();
            match panels.iter_mut().find(|(k, _)| *k == key) {
                Some((_, rows)) => rows.push(i),
                None => panels.push((key, vec![i])),
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
        // Limit rows join every panel they bound.
        for (i, r) in t.rows.iter().enumerate() {
            if !r.is_limit() {
                continue;
            }
            for (key, rows) in panels.iter_mut() {
                let fits = panel_keys
                    .iter()
                    .zip(key.iter())
                    .all(|(k, v)| r.get(k).is_none_or(|rv| rv == v));
                if fits {
                    rows.push(i);
                }
            }
        }
        // No series may hold two rows at one x: that would be a parameter this layout missed.
        for (key, rows) in &panels {
            let mut seen = std::collections::HashSet::new();
            for &i in rows {
                let r = &t.rows[i];
                if r.is_limit() && x.as_ref().is_some_and(|xk| r.get(xk).is_none()) {
                    continue;
                }
                let at = (r.imp.as_str(), x.as_ref().and_then(|k| r.get(k)));
                if !seen.insert((at.0, at.1.map(Param::key))) {
                    let wher: Vec<String> = panel_keys
                        .iter()
                        .zip(key)
                        .map(|(k, v)| format!("{k} = {}", v.text()))
                        .chain(
                            at.1.map(|v| format!("{} = {}", x.as_deref().unwrap_or("x"), v.text())),
                        )
                        .collect();
                    return Err(Error(format!(
                        "the {} report has two rows of {} at {}: they differ in something that is not a parameter this figure can tell apart",
                        t.bench,
                        r.imp,
                        if wher.is_empty() { "the same place".into() } else { wher.join(", ") }
                    )));
                }
            }
        }
        let mut series: Vec<String> = Vec::new();
        for r in &t.rows {
            if !r.is_limit() && !series.contains(&r.imp) {
                series.push(r.imp.clone());
            }
        }
        if t.rows.iter().any(Row::is_limit) {
            series.push(tiers_bench::limit::IMPL.into());
        }
        Ok(Layout {
            x,
            axis,
            panel_keys,
            panels,
            series,
            fixed,
        })
    }

    /// The layout of a stacked report: the part on x, one series per group.
    fn of_stack(st: &Stack) -> Layout {
        Layout {
            x: Some(st.key.clone()),
            axis: Axis::Names(st.parts.clone()),
            panel_keys: st.panel_keys.clone(),
            panels: st.panels.clone(),
            series: st.groups.clone(),
            fixed: st.fixed.clone(),
        }
    }

    /// The x parameter, if any.
    pub fn x(&self) -> Option<&str> {
        self.x.as_deref()
    }

    /// The series' names.
    pub fn series(&self) -> &[String] {
        &self.series
    }

    /// Number of panels.
    pub fn panels(&self) -> usize {
        self.panels.len()
    }

    /// The figure's height when nobody asks for one: the default, or more where the panels'
    /// rows would not fit (each row gets [`PANEL_HEIGHT`] pixels), at most the largest side.
    pub fn height(&self) -> u32 {
        let (rows, _) = grid(self.panels.len());
        let need = FRAME_HEIGHT.saturating_add(PANEL_HEIGHT.saturating_mul(rows as u32));
        need.clamp(super::HEIGHT, super::MAX_SIDE)
    }
}

/// The panels' grid for `n` panels: (rows, columns).
fn grid(n: usize) -> (usize, usize) {
    let n = n.max(1);
    let cols = match n {
        1 => 1,
        2..=4 => 2,
        _ => 3,
    };
    (n.div_ceil(cols), cols)
}

/// Height in pixels a panel needs to keep its axis labels, tick labels and title apart.
const PANEL_HEIGHT: u32 = 250;
/// Height of what is not a panel: title, caption, margins.
const FRAME_HEIGHT: u32 = 120;

/// A benchmark report's figure.
pub struct ReportFigure {
    table: Table,
    layout: Layout,
    /// Set where the rows split a total into parts: drawn as stacked bars.
    stack: Option<Stack>,
}

impl ReportFigure {
    /// The figure of `t`, or why there is none.
    pub fn new(table: Table) -> Result<ReportFigure> {
        let stack = Stack::of(&table)?;
        let layout = match &stack {
            Some(st) => Layout::of_stack(st),
            None => Layout::of(&table)?,
        };
        if !table.rows.iter().any(|r| r.value.is_finite()) {
            return Err(Error(format!(
                "the {} report has no finite value to draw ({} rows, all NaN or infinite)",
                table.bench,
                table.rows.len()
            )));
        }
        // Values no axis can show are refused here, before anything is drawn or written;
        // each panel's range lies inside this one.
        let fits = match &stack {
            Some(st) => linear_fits(0.0, st.top(&table)),
            None => {
                let vals: Vec<f64> = table.rows.iter().map(|r| r.value).collect();
                y_range(&vals).map(|_| ())
            }
        };
        fits.map_err(|e| Error(format!("the {} report's {e}", table.bench)))?;
        // A measured row that cannot be placed on x would be left out of its series in
        // silence (its series still in the legend): refused, named.
        if let (Some(k), None) = (&layout.x, &stack) {
            if let Some((i, r)) = table
                .rows
                .iter()
                .enumerate()
                .find(|(_, r)| !r.is_limit() && r.value.is_finite() && r.get(k).is_none())
            {
                return Err(Error(format!(
                    "the {} report's result {i} ({}) has no \"{k}\" the figure's x axis can \
                     place (a whole number or a name; the other results have one)",
                    table.bench, r.imp
                )));
            }
        }
        Ok(ReportFigure {
            table,
            layout,
            stack,
        })
    }

    /// The layout it uses.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// A row's x as measured: the number, or the name's place on the axis.
    fn x_raw(&self, r: &Row) -> Option<f64> {
        let Some(k) = &self.layout.x else {
            return Some(0.0);
        };
        match (&self.layout.axis, r.get(k)?) {
            (Axis::Num, Param::Num(v)) => Some(*v),
            (Axis::Names(n), p) => n.iter().position(|s| *s == p.text()).map(|i| i as f64),
            _ => None,
        }
    }

    fn x_label(&self, log: bool) -> String {
        let Some(k) = &self.layout.x else {
            return "(the report has no parameter)".into();
        };
        let name = match k.as_str() {
            "bytes" => "message size (bytes)".to_string(),
            "threads" => "threads (count)".to_string(),
            "ranks" => "ranks (count)".to_string(),
            "producers" => "producers (threads)".to_string(),
            "size" => "size (as the benchmark counts it)".to_string(),
            other => other.to_string(),
        };
        if log {
            format!("{name}, log scale")
        } else {
            name
        }
    }

    /// The y axis's label, in `unit` (the report's, or a panel's own).
    fn y_label(&self, unit: &str, log: bool) -> String {
        let u = unit;
        let what = if u.contains("/s") {
            "rate"
        } else if ["ns", "us", "µs", "ms", "s"].contains(&u.split(['/', ' ']).next().unwrap_or(""))
        {
            "time"
        } else {
            "value"
        };
        format!(
            "{what} ({}), {} is better{}",
            if u.is_empty() { "no unit given" } else { u },
            if self.table.lower_is_better {
                "lower"
            } else {
                "higher"
            },
            if log { ", log scale" } else { "" }
        )
    }

    fn title(&self) -> String {
        let mut s = format!("{} ({})", self.table.bench, self.table.unit);
        if !self.layout.fixed.is_empty() {
            let f: Vec<String> = self
                .layout
                .fixed
                .iter()
                .map(|(k, v)| format!("{k} = {}", v.text()))
                .collect();
            s.push_str(&format!(": {}", f.join(", ")));
        }
        s
    }

    fn caption(&self) -> Vec<String> {
        let t = &self.table;
        let mut m = Vec::new();
        if let Some(c) = &t.cpu {
            m.push(c.clone());
        }
        if let Some(c) = t.cores {
            m.push(format!("{c} cores"));
        }
        if let Some(h) = &t.host {
            m.push(format!("host {h}"));
        }
        if let Some(r) = t.round_trip_ns {
            m.push(format!("cache-line round trip {} ns", tick(r)));
        }
        m.push(match &t.date {
            Some(d) => d.clone(),
            None => "date not recorded".into(),
        });
        let mut lines = vec![format!("machine: {}", m.join(", "))];
        let bad = t.rows.iter().filter(|r| !r.value.is_finite()).count();
        if bad > 0 {
            lines.push(format!(
                "{bad} of {} rows have no finite value (NaN or infinite) and are not drawn",
                t.rows.len()
            ));
        }
        lines
    }
}

/// The y range over every panel: (low, high, log), or why the values cannot share an axis.
fn y_range(vals: &[f64]) -> Result<(f64, f64, bool)> {
    let Some((lo, hi)) = super::finite_bounds(vals) else {
        return Ok((0.0, 1.0, false));
    };
    // From a factor of 30 on, the small values would be a flat line at the bottom.
    if lo > 0.0 && hi / lo >= 30.0 {
        let (a, b) = (lo.log10(), hi.log10());
        let pad = (b - a) * 0.06;
        return Ok((a - pad, b + pad, true));
    }
    let lo = if lo >= 0.0 { 0.0 } else { lo };
    // Checked before padding: the padded range of values near f64's largest is infinite.
    linear_fits(lo, hi)?;
    let span = hi - lo;
    let pad = if span > 0.0 {
        span * 0.08
    } else {
        hi.abs().max(1.0) * 0.5
    };
    Ok((lo, hi + pad, false))
}

impl Figure for ReportFigure {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()> {
        if let Some(st) = &self.stack {
            return st.draw(&self.table, area, &self.caption());
        }
        let t = &self.table;
        let lay = &self.layout;
        let looks = style::looks(&lay.series);
        let mid = frame(area, &self.title(), &self.caption())?;
        let (w, h) = mid.dim_in_pixel();
        let n = lay.series.len();
        let chars = lay
            .series
            .iter()
            .map(|s| s.chars().count())
            .max()
            .unwrap_or(0);
        let lg = LegendGrid::of(n, chars, w / 3, h);
        let (plots, legend) = mid.split_horizontally(w.saturating_sub(lg.width(n)));
        // Legend: one entry per series, in columns of its own so that it covers no data.
        let (size, r) = if lg.pitch < 22 { (11, 4) } else { (14, 5) };
        let text_at = |(x, y): (i32, i32)| (x + 44, y - size / 2 - 1);
        for (i, (name, look)) in lay.series.iter().zip(&looks).enumerate().take(lg.shown) {
            let (x, y) = lg.at(i);
            if name == tiers_bench::limit::IMPL {
                style::dashed(&legend, &[(x + 8, y), (x + 34, y)], LIMIT.stroke_width(2))
                    .map_err(Error::drawing)?;
            } else {
                // A line sample only where the series are drawn as lines (numbers on x).
                if matches!(lay.axis, Axis::Num) {
                    line(&legend, &[(x + 6, y), (x + 36, y)], look).map_err(Error::drawing)?;
                }
                style::mark(&legend, (x + 21, y), *look, r).map_err(Error::drawing)?;
            }
            legend
                .draw(&Text::new(
                    name.clone(),
                    text_at((x, y)),
                    font(f64::from(size)),
                ))
                .map_err(Error::drawing)?;
        }
        if lg.shown < n {
            // From the column's left edge, where there is no sample: the whole width for it.
            let (x, y) = text_at(lg.at(lg.shown));
            legend
                .draw(&Text::new(
                    format!("+{} more series", n - lg.shown),
                    (x - 38, y),
                    font(f64::from(size)),
                ))
                .map_err(Error::drawing)?;
        }
        let names = match &lay.axis {
            Axis::Names(n) => n.clone(),
            Axis::Num => Vec::new(),
        };
        // Sizes in bytes are powers of two: their log axis is log2, ticked 1K, 4K, 16K.
        let bytes = lay.x.as_deref() == Some("bytes");
        let (rows_n, cols) = grid(lay.panels.len());
        let cells = plots.split_evenly((rows_n, cols));
        // One y range for all panels, so that they compare; panels named by a name (an
        // operation, a part) are different measurements and get their own.
        let own_y = lay
            .panels
            .iter()
            .any(|(k, _)| k.iter().any(|p| matches!(p, Param::Name(_))));
        let finite_of = |rows: &[usize]| -> Vec<f64> {
            rows.iter()
                .map(|&i| t.rows[i].value)
                .filter(|v| v.is_finite())
                .collect()
        };
        let every: Vec<usize> = (0..t.rows.len()).collect();
        let x_whole = t
            .rows
            .iter()
            .filter_map(|r| lay.x.as_ref().and_then(|k| r.get(k)))
            .all(|p| matches!(p, Param::Num(v) if v.fract() == 0.0));
        let measured_series: Vec<&String> = lay
            .series
            .iter()
            .filter(|s| *s != tiers_bench::limit::IMPL)
            .collect();
        let unit_at = lay.panel_keys.iter().position(|k| k == UNIT_PARAM);
        for (cell, (key, rows)) in cells.iter().zip(&lay.panels) {
            let panel_unit = match unit_at.and_then(|i| key.get(i)) {
                Some(u) => u.text(),
                None => t.unit.clone(),
            };
            let (y0, y1, ylog) = y_range(&finite_of(if own_y { rows } else { &every }))?;
            let (y0, y1) = tickable("y", (y0, y1))?;
            // This panel's own x: its range, and log where it spans two decades.
            let raw: Vec<f64> = rows
                .iter()
                .filter_map(|&i| self.x_raw(&t.rows[i]))
                .filter(|v| v.is_finite())
                .collect();
            let lo = raw.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = raw.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let numeric = names.is_empty() && lo.is_finite();
            let single = numeric && hi == lo;
            let xlog = numeric && lo > 0.0 && hi / lo >= 100.0;
            // Drawing-space x of a raw x; a panel measured at one x draws it at 0.
            let xt = |v: f64| -> Option<f64> {
                if single {
                    Some(0.0)
                } else if xlog {
                    (v > 0.0).then(|| if bytes { v.log2() } else { v.log10() })
                } else {
                    Some(v)
                }
            };
            let xinv = |v: f64| {
                if xlog {
                    if bytes {
                        2f64.powf(v)
                    } else {
                        10f64.powf(v)
                    }
                } else {
                    v
                }
            };
            let (x0, x1) = if !names.is_empty() {
                (-0.5, names.len() as f64 - 0.5)
            } else if !numeric {
                (0.0, 1.0)
            } else if single {
                (-1.0, 1.0)
            } else {
                let (a, b) = (xt(lo).unwrap_or(0.0), xt(hi).unwrap_or(1.0));
                let pad = (b - a) * 0.05;
                (a - pad, b + pad)
            };
            let (x0, x1) = tickable("x", (x0, x1))?;
            let x_fmt = |v: &f64| -> String {
                if !names.is_empty() {
                    let i = v.round();
                    if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < names.len() {
                        return names[i as usize].clone();
                    }
                    return String::new();
                }
                let v = if single {
                    // The one value measured, at the middle only.
                    if v.abs() > 1e-6 {
                        return String::new();
                    }
                    lo
                } else {
                    if (xlog || x_whole) && (v - v.round()).abs() > 1e-6 {
                        // Counts and whole powers only: no tick at 1.5 threads or 2^10.5 bytes.
                        return String::new();
                    }
                    xinv(*v)
                };
                if bytes {
                    bytes_tick(v)
                } else {
                    tick(v)
                }
            };
            let y_fmt = |v: &f64| {
                if ylog && (v - v.round()).abs() > 1e-6 {
                    // Decades only: 10^1.5 would read as 31.62.
                    return String::new();
                }
                tick(if ylog { 10f64.powf(*v) } else { *v })
            };
            let x_labels = if !names.is_empty() {
                names.len().saturating_add(1)
            } else if single {
                3
            } else if xlog {
                // No more ticks than fit side by side at ~56 px each ("256K" and a gap).
                let fit = (cell.dim_in_pixel().0 / 56).max(2) as usize;
                ((x1 - x0).ceil() as usize)
                    .saturating_add(1)
                    .clamp(2, 10)
                    .min(fit)
            } else {
                8
            };
            let y_labels = if ylog {
                ((y1 - y0).ceil() as usize).saturating_add(2).clamp(3, 12)
            } else {
                8
            };
            let caption: Vec<String> = lay
                .panel_keys
                .iter()
                .zip(key)
                .map(|(k, v)| format!("{k} = {}", v.text()))
                .collect();
            let mut cb = ChartBuilder::on(cell);
            // Room for the widest y tick (7 px a character) beside the axis title.
            let widest = [y0, y1]
                .iter()
                .map(|&v| tick(if ylog { 10f64.powf(v.round()) } else { v }).len())
                .max()
                .unwrap_or(4) as u32;
            cb.margin(8)
                .x_label_area_size(44)
                .y_label_area_size((widest * 7 + 36).max(if ylog { 62 } else { 74 }));
            if !caption.is_empty() {
                cb.caption(caption.join(", "), font(15.0));
            }
            let mut chart = cb
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(Error::drawing)?;
            chart
                .configure_mesh()
                .x_desc(self.x_label(xlog))
                .y_desc(self.y_label(&panel_unit, ylog))
                .x_labels(x_labels)
                .y_labels(y_labels)
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt)
                .label_style(font(12.0))
                .axis_desc_style(font(14.0))
                .light_line_style(RGBColor(235, 235, 235))
                .bold_line_style(RGBColor(215, 215, 215))
                .draw()
                .map_err(Error::drawing)?;
            let yv = |v: f64| if ylog { v.log10() } else { v };
            let px = |x: f64, y: f64| chart.backend_coord(&(x, y));
            let (cx0, cx1) = (px(x0, y0).0, px(x1, y0).0);
            // The cell's drawing area in the root's coordinates, to draw in pixels.
            let root = cell;
            let origin = root.get_base_pixel();
            let local = |p: (i32, i32)| (p.0 - origin.0, p.1 - origin.1);
            let spread = !names.is_empty() && measured_series.len() > 1;
            for (name, look) in lay.series.iter().zip(&looks) {
                let mut pts: Vec<(f64, f64)> = rows
                    .iter()
                    .map(|&i| &t.rows[i])
                    .filter(|r| r.imp == *name && r.value.is_finite())
                    .filter(|r| !ylog || r.value > 0.0)
                    .filter_map(|r| {
                        if r.is_limit()
                            && (single || lay.x.as_ref().is_some_and(|k| r.get(k).is_none()))
                        {
                            // A limit for the whole panel: a line across it.
                            return Some((f64::NAN, yv(r.value)));
                        }
                        self.x_raw(r).and_then(xt).map(|x| (x, yv(r.value)))
                    })
                    .collect();
                if name == tiers_bench::limit::IMPL {
                    for &(x, y) in &pts {
                        let seg = if x.is_nan() {
                            vec![(cx0, px(x0, y).1), (cx1, px(x1, y).1)]
                        } else if !names.is_empty() {
                            vec![px(x - 0.4, y), px(x + 0.4, y)]
                        } else {
                            continue;
                        };
                        let seg: Vec<(i32, i32)> = seg.into_iter().map(local).collect();
                        style::dashed(root, &seg, LIMIT.stroke_width(2)).map_err(Error::drawing)?;
                    }
                    let mut along: Vec<(f64, f64)> =
                        pts.iter().cloned().filter(|p| !p.0.is_nan()).collect();
                    if names.is_empty() && !along.is_empty() {
                        along.sort_by(|a, b| a.0.total_cmp(&b.0));
                        let seg: Vec<(i32, i32)> =
                            along.iter().map(|&(x, y)| local(px(x, y))).collect();
                        if seg.len() == 1 {
                            // Measured at one x of several: a dashed stub there, wide enough
                            // to read as the limit's dash.
                            let (x, y) = seg[0];
                            style::dashed(root, &[(x - 30, y), (x + 30, y)], LIMIT.stroke_width(2))
                                .map_err(Error::drawing)?;
                        } else {
                            style::dashed(root, &seg, LIMIT.stroke_width(2))
                                .map_err(Error::drawing)?;
                        }
                    }
                    continue;
                }
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                if spread {
                    // Names on x: series side by side around their category, no lines.
                    let si = measured_series.iter().position(|s| *s == name).unwrap_or(0);
                    let off = (si as f64 / (measured_series.len() - 1) as f64 - 0.5) * 0.5;
                    for p in &mut pts {
                        p.0 += off;
                    }
                } else if pts.len() > 1 && names.is_empty() {
                    let seg: Vec<(i32, i32)> = pts.iter().map(|&(x, y)| local(px(x, y))).collect();
                    line(root, &seg, look).map_err(Error::drawing)?;
                }
                let r = if pts.len() > 200 { 2 } else { 4 };
                for &(x, y) in &pts {
                    style::mark(root, local(px(x, y)), *look, r).map_err(Error::drawing)?;
                }
            }
        }
        Ok(())
    }
}

/// A series' line through pixel points: solid, or in its round's dashes (see
/// [`style::Look::dashes`]).
fn line<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    pts: &[(i32, i32)],
    look: &style::Look,
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let st = look.rgb().stroke_width(2);
    match look.dashes() {
        None => area.draw(&PathElement::new(pts.to_vec(), st)),
        Some(d) => style::dashed_as(area, pts, st, d),
    }
}

/// Bytes as a tick: 512, 4K, 1M (powers of 1024 where exact).
fn bytes_tick(v: f64) -> String {
    let r = v.round();
    if (v - r).abs() > 1e-6 * v.abs().max(1.0) || r < 1024.0 {
        return tick(v);
    }
    for (div, suffix) in [(1u64 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")] {
        let d = div as f64;
        if r >= d && (r / d).fract() == 0.0 {
            return format!("{}{suffix}", r / d);
        }
    }
    tick(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn table(rows: Value) -> Table {
        Table::from_json_as(
            &json!({"bench": "b", "unit": "ns", "lower_is_better": true, "results": rows}),
            None,
        )
        .unwrap()
    }

    #[test]
    fn the_benchmark_parameter_is_x_and_others_make_panels() {
        let t = table(json!([
            {"impl": "a", "threads": 1, "size": 10, "samples": 5, "value": 1.0},
            {"impl": "a", "threads": 2, "size": 10, "samples": 7, "value": 2.0},
            {"impl": "a", "threads": 1, "size": 20, "samples": 5, "value": 3.0},
            {"impl": "a", "threads": 2, "size": 20, "efficiency": 0.5, "value": 4.0},
        ]));
        let l = Layout::of(&t).unwrap();
        assert_eq!(l.x(), Some("threads"));
        assert_eq!(l.panels(), 2);
    }

    #[test]
    fn a_pattern_that_determines_ranks_and_threads_is_x() {
        let t = table(json!([
            {"impl": "tiers", "pattern": "1x1x1", "ranks": 1, "threads": 1, "value": 1.0},
            {"impl": "tiers", "pattern": "2x1x1", "ranks": 2, "threads": 1, "value": 0.6},
            {"impl": "tiers", "pattern": "1x2x1", "ranks": 1, "threads": 2, "value": 0.5},
        ]));
        let l = Layout::of(&t).unwrap();
        assert_eq!(l.x(), Some("pattern"));
        assert_eq!(l.panels(), 1);
    }

    #[test]
    fn bytes_read_as_powers_of_two() {
        assert_eq!(bytes_tick(512.0), "512");
        assert_eq!(bytes_tick(4096.0), "4K");
        assert_eq!(bytes_tick(1048576.0), "1M");
    }

    #[test]
    fn repeated_rows_are_refused_not_mixed() {
        let t = table(json!([
            {"impl": "a", "threads": 1, "value": 1.0},
            {"impl": "a", "threads": 1, "value": 2.0},
            {"impl": "a", "threads": 2, "value": 2.0},
        ]));
        let e = Layout::of(&t).unwrap_err().to_string();
        assert!(e.contains("two rows of a at threads = 1"), "{e}");
    }
}

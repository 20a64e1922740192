//! The benchmark harness of tiers.
//!
//! Every benchmark of tiers runs tiers and its peers in the same process (or the same launch),
//! alternating between them and repeating, so that a noisy, shared machine slows all of them
//! alike; it reports medians and prints ratios rather than trusting absolute times. A
//! [`Report`] prints as a readable table or, with `--json`, as one JSON document:
//!
//! ```json
//! {"bench": "barrier", "unit": "ns", "lower_is_better": true, "machine": {...},
//!  "results": [{"impl": "tiers-active", "threads": 2, "value": 41.5}, ...]}
//! ```
//!
//! A row carries the parameters that tell it apart (`threads`, `ranks`, `bytes`, `op`, `size`).
//!
//! The physical limit a benchmark chases is one more row, `"impl": "limit"`, measured in the
//! same comparison, with a `"measured"` field saying how (see [`limit`]); other rows then carry
//! `"vs_limit"`, their value divided by that limit, and the table prints it as a column.

#![deny(missing_docs)]

pub mod limit;

use serde_json::{json, Map, Value};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Options common to every benchmark (`tiers bench NAME [--threads LIST] [--min-time S] [--json]`).
#[derive(Clone, Debug)]
pub struct Opts {
    /// Thread counts to run (default: 1 and 2, or what the benchmark chooses).
    pub threads: Vec<usize>,
    /// Minimum measured time per implementation and configuration, in seconds.
    pub min_time: f64,
    /// Print JSON instead of a table.
    pub json: bool,
    /// Print progress on stderr.
    pub progress: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            threads: vec![1, 2],
            min_time: 0.5,
            json: false,
            progress: true,
        }
    }
}

/// One measured configuration of one implementation.
#[derive(Clone, Debug)]
pub struct Row {
    /// The implementation (`tiers-active`, `openmp`, …).
    pub imp: String,
    /// The parameters that tell this row apart, in order (`threads`, `bytes`, …).
    pub params: Vec<(String, Value)>,
    /// The median.
    pub value: f64,
    /// Extra fields printed in the JSON row (e.g. `min`, `max`, `samples`, `algorithm`).
    pub extra: Vec<(String, Value)>,
}

impl Row {
    /// Whether this is a [`limit`] row.
    pub fn is_limit(&self) -> bool {
        self.imp == limit::IMPL
    }

    /// Whether this row competes: not a limit, nor a bound ([`Report::push_bound`]), so it is
    /// a reference for ratios and may be marked best.
    pub fn is_rival(&self) -> bool {
        !self.is_limit() && !self.extra.iter().any(|(k, _)| k == "bound")
    }
}

/// The result of one benchmark.
#[derive(Clone, Debug)]
pub struct Report {
    /// Benchmark name.
    pub bench: String,
    /// Unit of `value`.
    pub unit: String,
    /// Whether a smaller value is better.
    pub lower_is_better: bool,
    /// The rows, in measurement order.
    pub rows: Vec<Row>,
    /// Free-text notes (skipped peers, warnings), printed under the table and in JSON.
    pub notes: Vec<String>,
    /// The row field its figure draws on y instead of `value`, where the seed's figure of
    /// this measurement shows a derived number (the hybrid study's parallel efficiency).
    pub figure_value: Option<String>,
}

impl Report {
    /// An empty report.
    pub fn new(bench: &str, unit: &str, lower_is_better: bool) -> Self {
        Report {
            bench: bench.into(),
            unit: unit.into(),
            lower_is_better,
            rows: Vec::new(),
            notes: Vec::new(),
            figure_value: None,
        }
    }

    /// Adds a row: `params` such as `[("threads", 2.into())]`, `value` the median.
    pub fn push(&mut self, imp: &str, params: &[(&str, Value)], value: f64) -> &mut Row {
        self.rows.push(Row {
            imp: imp.into(),
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            value,
            extra: Vec::new(),
        });
        self.rows.last_mut().expect("just pushed")
    }

    /// Adds the [`limit`] row of a configuration: `params` are those it bounds (a limit row
    /// bounds every row that has the same values for all of them, whatever else it has);
    /// `measured` says how it was measured.
    pub fn push_limit(
        &mut self,
        params: &[(&str, Value)],
        value: f64,
        measured: impl Into<String>,
    ) -> &mut Row {
        let row = self.push(limit::IMPL, params, value);
        row.extra
            .push(("measured".into(), Value::String(measured.into())));
        row
    }

    /// A second bound beside the limit, named `imp` (e.g. the arithmetic an iteration cannot
    /// avoid, where the `limit` row is a read of its data): printed and kept in the JSON with
    /// how it was `measured`, never a reference for ratios nor marked best.
    pub fn push_bound(
        &mut self,
        imp: &str,
        params: &[(&str, Value)],
        value: f64,
        measured: impl Into<String>,
    ) -> &mut Row {
        let row = self.push(imp, params, value);
        row.extra.push(("bound".into(), Value::Bool(true)));
        row.extra
            .push(("measured".into(), Value::String(measured.into())));
        row
    }

    /// The value of the limit row that bounds `row`, if one was measured and is positive (not
    /// for a limit row).
    pub fn limit_of(&self, row: &Row) -> Option<f64> {
        if row.is_limit() {
            return None;
        }
        self.rows
            .iter()
            .find(|l| {
                l.is_limit()
                    && l.params
                        .iter()
                        .all(|(k, v)| row.params.iter().any(|(rk, rv)| rk == k && rv == v))
            })
            .map(|l| l.value)
            // A limit of nothing (a part with no time) bounds nothing.
            .filter(|l| l.is_finite() && *l > 0.0)
    }

    /// Adds a note.
    pub fn note(&mut self, s: impl Into<String>) {
        self.notes.push(s.into());
    }

    /// The JSON document.
    pub fn to_json(&self) -> Value {
        let results: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                let mut m = Map::new();
                m.insert("impl".into(), Value::String(r.imp.clone()));
                for (k, v) in r.params.iter().chain(r.extra.iter()) {
                    m.insert(k.clone(), v.clone());
                }
                m.insert("value".into(), json!(r.value));
                if let Some(l) = self.limit_of(r) {
                    m.insert("vs_limit".into(), json!(r.value / l));
                }
                Value::Object(m)
            })
            .collect();
        let mut doc = json!({
            "bench": self.bench,
            "unit": self.unit,
            "lower_is_better": self.lower_is_better,
            "machine": machine(),
            "date": today(),
            "results": results,
            "notes": self.notes,
        });
        if let Some(f) = &self.figure_value {
            doc["figure_value"] = json!(f);
        }
        doc
    }

    /// The value of the row of `imp` with exactly these parameter values, if measured.
    pub fn value(&self, imp: &str, params: &[(&str, Value)]) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| {
                r.imp == imp
                    && params
                        .iter()
                        .all(|(k, v)| r.params.iter().any(|(rk, rv)| rk == k && rv == v))
            })
            .map(|r| r.value)
    }

    /// A readable table: rows grouped by their parameters; within a group, each value with its
    /// ratio to the group's first row that is not the limit (the reference, normally tiers'
    /// best or the peer named first) and a mark on the best. With limit rows, a `vs limit`
    /// column (the value over its limit) and a `limit:` line per distinct way of measuring.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} ({}, {} is better)",
            self.bench,
            self.unit,
            if self.lower_is_better {
                "lower"
            } else {
                "higher"
            }
        );
        let param_names: Vec<String> = {
            let mut v: Vec<String> = Vec::new();
            for r in &self.rows {
                for (k, _) in &r.params {
                    if !v.contains(k) {
                        v.push(k.clone());
                    }
                }
            }
            v
        };
        let key = |r: &Row| -> String {
            param_names
                .iter()
                .map(|k| {
                    r.params
                        .iter()
                        .find(|(rk, _)| rk == k)
                        .map_or("-".to_string(), |(_, v)| fmt_value(v))
                })
                .collect::<Vec<_>>()
                .join("\t")
        };
        let mut groups: Vec<(String, Vec<&Row>)> = Vec::new();
        for r in &self.rows {
            let k = key(r);
            match groups.iter_mut().find(|(g, _)| *g == k) {
                Some((_, v)) => v.push(r),
                None => groups.push((k, vec![r])),
            }
        }
        let imp_w = self
            .rows
            .iter()
            .map(|r| r.imp.len())
            .max()
            .unwrap_or(4)
            .max(4);
        // Each parameter column as wide as its name and its widest value, at least 9.
        let widths: Vec<usize> = param_names
            .iter()
            .map(|p| {
                self.rows
                    .iter()
                    .filter_map(|r| r.params.iter().find(|(k, _)| k == p))
                    .map(|(_, v)| fmt_value(v).len())
                    .chain([p.len(), 9])
                    .max()
                    .unwrap_or(9)
            })
            .collect();
        let mut header = String::new();
        for (p, w) in param_names.iter().zip(&widths) {
            let _ = write!(header, "{p:>w$} ");
        }
        let with_limit = self.rows.iter().any(Row::is_limit);
        // Numeric extras (speedup, efficiency, peak memory, …) as trailing columns.
        let mut extra_names: Vec<&str> = Vec::new();
        for r in &self.rows {
            for (k, v) in &r.extra {
                if v.is_number() && !extra_names.contains(&k.as_str()) {
                    extra_names.push(k);
                }
            }
        }
        let extras = |r: &Row| -> String {
            extra_names
                .iter()
                .map(|k| {
                    let v = r
                        .extra
                        .iter()
                        .find(|(rk, v)| rk == k && v.is_number())
                        .map_or("-".into(), |(_, v)| fmt_value(v));
                    format!(" {v:>w$}", w = k.len().max(9))
                })
                .collect()
        };
        let extra_header: String = extra_names
            .iter()
            .map(|k| format!(" {k:>w$}", w = k.len().max(9)))
            .collect();
        let _ = writeln!(
            out,
            "{header}{:<imp_w$} {:>14} {:>9}{}{extra_header}",
            "impl",
            "value",
            "ratio",
            if with_limit { "  vs limit" } else { "" }
        );
        for (_, rows) in &groups {
            let reference = rows.iter().find(|r| r.is_rival()).unwrap_or(&rows[0]).value;
            let rivals = rows.iter().filter(|r| r.is_rival()).count();
            let best = rows.iter().filter(|r| r.is_rival()).map(|r| r.value).fold(
                if self.lower_is_better {
                    f64::INFINITY
                } else {
                    f64::NEG_INFINITY
                },
                |a, b| {
                    if self.lower_is_better {
                        a.min(b)
                    } else {
                        a.max(b)
                    }
                },
            );
            for r in rows {
                let mut line = String::new();
                for (p, w) in param_names.iter().zip(&widths) {
                    let v = r
                        .params
                        .iter()
                        .find(|(k, _)| k == p)
                        .map_or("-".into(), |(_, v)| fmt_value(v));
                    let _ = write!(line, "{v:>w$} ");
                }
                let ratio = if reference != 0.0 {
                    r.value / reference
                } else {
                    f64::NAN
                };
                let vs_limit = match self.limit_of(r) {
                    Some(l) => format!(" {:>8.3}x", r.value / l),
                    None if r.is_limit() => format!(" {:>8.3}x", 1.0),
                    None if with_limit => format!(" {:>9}", "-"),
                    None => String::new(),
                };
                let _ = writeln!(
                    out,
                    "{line}{:<imp_w$} {:>14} {:>8.3}x{vs_limit}{}{}",
                    r.imp,
                    fmt_num(r.value),
                    ratio,
                    extras(r),
                    if r.value == best && rivals > 1 && r.is_rival() {
                        "  *best"
                    } else {
                        ""
                    }
                );
            }
        }
        let mut measured: Vec<&str> = Vec::new();
        for r in self.rows.iter().filter(|r| r.is_limit()) {
            if let Some((_, Value::String(m))) = r.extra.iter().find(|(k, _)| k == "measured") {
                if !measured.contains(&m.as_str()) {
                    measured.push(m);
                }
            }
        }
        for m in measured {
            let _ = writeln!(out, "limit: {m}");
        }
        let mut bounds: Vec<(&str, &str)> = Vec::new();
        for r in self.rows.iter().filter(|r| !r.is_limit() && !r.is_rival()) {
            if let Some((_, Value::String(m))) = r.extra.iter().find(|(k, _)| k == "measured") {
                if !bounds.contains(&(r.imp.as_str(), m.as_str())) {
                    bounds.push((&r.imp, m));
                }
            }
        }
        for (imp, m) in bounds {
            let _ = writeln!(out, "{imp}: {m}");
        }
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
        out
    }

    /// Prints the report on stdout, as JSON or as a table.
    ///
    /// # Errors
    ///
    /// Writing to the standard output failed (a closed pipe, a full disk).
    pub fn print(&self, json: bool) -> std::io::Result<()> {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        if json {
            let text = serde_json::to_string_pretty(&self.to_json())
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            writeln!(out, "{text}")
        } else {
            write!(out, "{}", self.table())
        }
    }
}

fn fmt_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Four significant digits, without scientific notation for everyday magnitudes.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 || !v.is_finite() {
        format!("{v}")
    } else if !(1e-6..1e9).contains(&a) {
        format!("{v:.3e}")
    } else if a >= 1000.0 {
        format!("{v:.0}")
    } else {
        // Digits after the point for four significant ones: 2 from 10 up, 6 at 0.001.
        let decimals = (3 - a.log10().floor() as i32).clamp(1, 9) as usize;
        format!("{v:.decimals$}")
    }
}

/// The median (the mean of the middle two for an even count); NaN for no samples.
pub fn median(samples: &[f64]) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A description of this machine for reports: processor model, topology, OS.
pub fn machine() -> Value {
    let topo = tiers_node::Topology::get();
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    json!({
        "cpu": model,
        "packages": topo.packages,
        "numa_nodes": topo.numa_nodes.len(),
        "cores": topo.cores.len(),
        "hw_threads": topo.hw_threads(),
        "affinity": tiers_node::cpulist::format(&topo.affinity),
        "simd": topo.simd.level,
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
        "hostname": hostname,
        // Measured once per process (a few thousand round trips between the first two cpus
        // it may run on); absent where it may run on one cpu only.
        "round_trip_ns": limit::machine_round_trip_ns(),
    })
}

/// Today's date (UTC) as `YYYY-MM-DD`.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    date_of(secs)
}

/// A Unix time as a civil date `YYYY-MM-DD` (UTC), by the days-from-civil inverse.
pub fn date_of(unix_secs: u64) -> String {
    let z = (unix_secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Progress on stderr (`[bench] …`), when enabled.
pub fn progress(opts: &Opts, msg: impl std::fmt::Display) {
    if opts.progress {
        eprintln!("[tiers bench] {msg}");
    }
}

/// A candidate in a [`compare`]: a name and a closure that runs `iters` iterations and returns
/// the elapsed wall time for them.
pub struct Candidate<'a> {
    /// Name of the implementation.
    pub name: String,
    /// Runs the given number of iterations and returns how long they took.
    pub run: Box<dyn FnMut(u64) -> Duration + 'a>,
}

impl<'a> Candidate<'a> {
    /// A candidate.
    pub fn new(name: impl Into<String>, run: impl FnMut(u64) -> Duration + 'a) -> Self {
        Candidate {
            name: name.into(),
            run: Box::new(run),
        }
    }
}

/// Measures each candidate in turn, round after round (A B C A B C …), until each has run for
/// at least `min_time` seconds and at least 5 rounds; returns each candidate's median time per
/// iteration in seconds, with the samples. The iteration count per sample is calibrated once
/// per candidate so that a sample lasts about `min_time / 10`.
pub fn compare(min_time: f64, candidates: &mut [Candidate<'_>]) -> Vec<(f64, Vec<f64>)> {
    let target = (min_time / 10.0).max(1e-4);
    // Calibrate: grow the count until a sample takes long enough (also warms up).
    let mut iters: Vec<u64> = Vec::with_capacity(candidates.len());
    for c in candidates.iter_mut() {
        let mut n = 1u64;
        loop {
            let t = (c.run)(n).as_secs_f64();
            if t >= target / 4.0 || n >= 1 << 40 {
                let per = t / n as f64;
                iters.push(((target / per.max(1e-12)) as u64).clamp(1, 1 << 40));
                break;
            }
            n *= if t < target / 100.0 { 10 } else { 2 };
        }
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); candidates.len()];
    let mut spent = vec![0.0f64; candidates.len()];
    let start = Instant::now();
    let mut rounds = 0;
    loop {
        for (i, c) in candidates.iter_mut().enumerate() {
            let t = (c.run)(iters[i]).as_secs_f64();
            spent[i] += t;
            samples[i].push(t / iters[i] as f64);
        }
        rounds += 1;
        let enough = rounds >= 5 && spent.iter().all(|&s| s >= min_time);
        // Never more than 20x the asked time in total, whatever a slow candidate does.
        if enough || start.elapsed().as_secs_f64() > 20.0 * min_time * candidates.len() as f64 {
            break;
        }
    }
    samples.into_iter().map(|s| (median(&s), s)).collect()
}

/// Parses a list of counts such as `1,2,4` or `1-16` or `1-16:2`.
pub fn parse_counts(s: &str) -> Result<Vec<usize>, String> {
    let bad = |why: &str| format!("bad count list {s:?} (such as 1,2,4 or 1-16): {why}");
    // The list syntax is a CPU list's, whose limit is the most processors of a machine.
    let v = tiers_node::cpulist::parse(s).map_err(|_| bad("not a list of numbers and ranges"))?;
    if v.is_empty() || v.contains(&0) {
        return Err(bad("counts must be at least 1"));
    }
    if let Some(&big) = v.iter().find(|&&c| c > MAX_COUNT) {
        return Err(bad(&format!("{big} is more than {MAX_COUNT}")));
    }
    // A count twice would run its configuration twice and give two rows for one point.
    let mut seen = [false; MAX_COUNT + 1];
    for &c in &v {
        if std::mem::replace(&mut seen[c], true) {
            return Err(bad(&format!("{c} is named twice")));
        }
    }
    Ok(v)
}

/// The largest count [`parse_counts`] accepts (threads or ranks of a benchmark).
pub const MAX_COUNT: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    /// The table line of implementation `imp` (its second column).
    fn line_of(t: &str, imp: &str) -> String {
        t.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(imp))
            .unwrap_or_else(|| panic!("no {imp} line in {t}"))
            .to_string()
    }

    #[test]
    fn reports_say_when_and_where_with_the_round_trip() {
        let j = Report::new("x", "ns", true).to_json();
        let date = j["date"].as_str().unwrap();
        assert_eq!(date, today());
        assert!(date.len() == 10 && date.as_bytes()[4] == b'-' && date.as_bytes()[7] == b'-');
        let rt = &j["machine"]["round_trip_ns"];
        let cpus = tiers_node::Topology::get().affinity.len();
        if cpus >= 2 {
            let ns = rt.as_f64().expect("a measured round trip");
            assert!(ns > 0.0 && ns < 1e6, "{ns}");
        } else {
            assert!(rt.is_null());
        }
        assert_eq!(date_of(951_782_400), "2000-02-29");
    }

    #[test]
    fn count_lists() {
        assert_eq!(parse_counts("1,2,4").unwrap(), [1, 2, 4]);
        assert_eq!(parse_counts("1-8:2").unwrap(), [1, 3, 5, 7]);
        assert!(parse_counts("1,1")
            .unwrap_err()
            .contains("1 is named twice"));
        assert!(parse_counts("1-4,2")
            .unwrap_err()
            .contains("2 is named twice"));
        assert!(parse_counts("0,1").unwrap_err().contains("at least 1"));
        assert!(parse_counts("2000").unwrap_err().contains("more than 1024"));
        assert!(parse_counts("-1").is_err());
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn report_json_and_table() {
        let mut r = Report::new("barrier", "ns", true);
        r.push("tiers-active", &[("threads", 2.into())], 50.0);
        r.push("openmp", &[("threads", 2.into())], 100.0)
            .extra
            .push(("samples".into(), 5.into()));
        r.note("pthread skipped");
        let j = r.to_json();
        assert_eq!(j["bench"], "barrier");
        assert_eq!(j["results"][1]["impl"], "openmp");
        assert_eq!(j["results"][1]["threads"], 2);
        assert_eq!(j["results"][1]["samples"], 5);
        assert_eq!(j["lower_is_better"], true);
        assert!(j["machine"]["hw_threads"].as_u64().unwrap() >= 1);
        let t = r.table();
        assert!(t.contains("2.000x"), "{t}");
        assert!(t.contains("*best"));
        assert!(t.contains("note: pthread skipped"));
        assert_eq!(r.value("openmp", &[("threads", 2.into())]), Some(100.0));
        assert_eq!(r.value("openmp", &[("threads", 3.into())]), None);
    }

    #[test]
    fn limit_rows_bound_the_rows_that_share_their_parameters() {
        let mut r = Report::new("ranks", "ns", true);
        r.push(
            "tiers-shm",
            &[("op", "barrier".into()), ("ranks", 2.into())],
            300.0,
        );
        r.push(
            "tiers-shm",
            &[("op", "barrier".into()), ("ranks", 3.into())],
            900.0,
        );
        r.push_limit(&[("ranks", 2.into())], 100.0, "a round trip");
        assert_eq!(r.limit_of(&r.rows[0]), Some(100.0));
        assert_eq!(r.limit_of(&r.rows[1]), None, "no limit measured at 3 ranks");
        assert_eq!(r.limit_of(&r.rows[2]), None, "a limit has no limit");
        let j = r.to_json();
        assert_eq!(j["results"][0]["vs_limit"], 3.0);
        assert!(j["results"][1].get("vs_limit").is_none());
        assert_eq!(j["results"][2]["impl"], "limit");
        assert_eq!(j["results"][2]["measured"], "a round trip");
        let t = r.table();
        assert!(t.contains("vs limit") && t.contains("3.000x"), "{t}");
        assert!(t.contains("limit: a round trip"), "{t}");
        // In a group of its own, or with one rival, nothing is marked best.
        assert!(!t.contains("*best"), "{t}");

        // Inside a group: the ratio is against the first row that is not the limit, and the
        // limit is never the best even when it is the smallest.
        let mut r = Report::new("barrier", "ns", true);
        r.push_limit(&[("threads", 2.into())], 50.0, "rt");
        r.push("tiers", &[("threads", 2.into())], 100.0);
        r.push("std", &[("threads", 2.into())], 400.0);
        let t = r.table();
        let line = |imp: &str| line_of(&t, imp);
        assert!(
            line("std").contains("4.000x") && line("std").contains("8.000x"),
            "{t}"
        );
        assert!(line("tiers").contains("*best"), "{t}");
        assert!(
            line("limit").contains("0.500x  ") && line("limit").ends_with("1.000x"),
            "{t}"
        );
        // A bound is printed with its ratio but is neither the reference nor the best.
        r.push_bound("divider", &[("threads", 2.into())], 60.0, "the arithmetic");
        let t = r.table();
        let line = |imp: &str| line_of(&t, imp);
        assert!(line("tiers").contains("*best"), "{t}");
        assert!(line("divider").contains("0.600x") && !line("divider").contains("*best"));
        assert!(t.contains("divider: the arithmetic"), "{t}");
        assert_eq!(r.to_json()["results"][3]["bound"], true);

        // A limit of zero (a part that takes no time) bounds nothing.
        let mut r = Report::new("redblack", "ms", true);
        r.push("plain", &[("part", "wait".into())], 0.3);
        r.push_limit(&[("part", "wait".into())], 0.0, "no exchange");
        assert_eq!(r.limit_of(&r.rows[0]), None);
        assert!(r.to_json()["results"][0].get("vs_limit").is_none());
    }

    #[test]
    fn compare_ranks_a_slow_candidate_slower() {
        let mut c = vec![
            Candidate::new("fast", |n| {
                let t = Instant::now();
                for i in 0..n {
                    std::hint::black_box(i);
                }
                t.elapsed()
            }),
            Candidate::new("slow", |n| {
                let t = Instant::now();
                for _ in 0..n {
                    std::hint::black_box((0..200u64).map(std::hint::black_box).sum::<u64>());
                }
                t.elapsed()
            }),
        ];
        let r = compare(0.02, &mut c);
        assert!(r[0].0 < r[1].0, "{:?} vs {:?}", r[0].0, r[1].0);
        assert!(r[0].1.len() >= 5);
    }

    #[test]
    fn numbers_keep_four_significant_digits() {
        assert_eq!(fmt_num(1234.6), "1235");
        assert_eq!(fmt_num(123.46), "123.5");
        assert_eq!(fmt_num(12.346), "12.35");
        assert_eq!(fmt_num(1.2346), "1.235");
        assert_eq!(fmt_num(0.0011234), "0.001123");
        assert_eq!(fmt_num(0.5), "0.5000");
        assert_eq!(fmt_num(2.5e-9), "2.500e-9");
        assert_eq!(fmt_num(4.25e11), "4.250e11");
        assert_eq!(fmt_num(0.0), "0");
    }

    #[test]
    fn counts() {
        assert_eq!(parse_counts("1-4").unwrap(), vec![1, 2, 3, 4]);
        assert_eq!(parse_counts("1,2,8").unwrap(), vec![1, 2, 8]);
        assert!(parse_counts("0,1").is_err());
    }
}

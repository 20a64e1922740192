//! The parallel overhead model of \[Qiu2012\] §4.
//!
//! From run times T(p) at parallelisms p (and data sizes N): speedup S = p_ref·T(p_ref)/T(p),
//! efficiency ε = S/p, overhead f = 1/ε − 1 = p·T(p)/(p_ref·T(p_ref)) − 1. The overhead is
//! linear in T(p), so additive overheads (synchronisation, communication, imbalance) show as
//! terms in f, and the seed fits f = a₁x₁ or f = a₁x₁ + a₂x₂ (no intercept: f(p_ref) = 0)
//! for factors such as x = p, p/N (the inverse grain size) and the node count.
//!
//! Runs are JSON: `{"runs": [{"app": "mds", "threads": 2, "processes": 1, "nodes": 1,
//! "size": 2000, "seconds": 1.5}, …]}`, one per hybrid pattern t×m×n of \[Qiu2012\] (t threads in
//! each of m processes per node on n nodes); p = t·m·n. `processes` defaults to 1 (runs files
//! written before it existed counted every rank as a node: their p is unchanged). Repeated runs
//! of one pattern are one point, at the median of their times. The reference of each (app,
//! size) series is its run with the smallest p (the fastest when several patterns share it).

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// One timed run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Run {
    /// Application name.
    pub app: String,
    /// Threads per process (t).
    pub threads: usize,
    /// Processes (ranks) per node (m).
    #[serde(default = "one")]
    pub processes: usize,
    /// Nodes (n; 1 on one machine).
    #[serde(default = "one")]
    pub nodes: usize,
    /// Data size N.
    pub size: usize,
    /// Wall seconds of the measured part.
    pub seconds: f64,
}

impl Run {
    /// The total parallelism p = threads × processes × nodes (saturating: [`Run::validate`]
    /// refuses runs where it overflows).
    pub fn p(&self) -> usize {
        self.threads
            .saturating_mul(self.processes)
            .saturating_mul(self.nodes)
    }

    /// The pattern's name, `t×m×n`.
    pub fn pattern(&self) -> String {
        format!("{}x{}x{}", self.threads, self.processes, self.nodes)
    }

    /// Checks that the run can be modelled: at least one thread, process and node, a
    /// parallelism that fits a `usize`, and a time that is a positive number of seconds.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |what: String| {
            Err(crate::Error::Invalid(format!(
                "run of {:?} as {}: {what}",
                self.app,
                self.pattern()
            )))
        };
        let p = self
            .threads
            .checked_mul(self.processes)
            .and_then(|v| v.checked_mul(self.nodes));
        if self.threads == 0 || self.processes == 0 || self.nodes == 0 || p.is_none() {
            return bad(format!(
                "threads, processes and nodes must be at least 1 and their product a count \
                 (threads {}, processes {}, nodes {})",
                self.threads, self.processes, self.nodes
            ));
        }
        // A nanosecond to a year: ratios of such times, and the fits over them, stay finite.
        if !(self.seconds.is_finite() && (1e-9..=3.2e7).contains(&self.seconds)) {
            return bad(format!(
                "seconds must be a number from 1e-9 to 3.2e7 (a year), not {}",
                self.seconds
            ));
        }
        Ok(())
    }
}

fn one() -> usize {
    1
}

/// A runs file.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Runs {
    /// The runs.
    pub runs: Vec<Run>,
    /// Where and when they were made (processor, cores, host, date), when the writer said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}

/// A run with its derived figures.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// The run.
    pub run: Run,
    /// Total parallelism p = threads × processes × nodes.
    pub p: usize,
    /// Speedup relative to the series' reference.
    pub speedup: f64,
    /// Efficiency ε.
    pub efficiency: f64,
    /// Overhead f = 1/ε − 1.
    pub overhead: f64,
}

/// A model factor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Factor {
    /// Total parallelism p.
    P,
    /// p / N, the inverse grain size.
    PPerN,
    /// Node count.
    Nodes,
    /// p², the second factor of \[Qiu2012\]'s Fig. 10 (f = a₁p + a₂p²: overhead that grows with
    /// the square of the parallelism, as contention on one shared resource does).
    PSquared,
}

impl Factor {
    fn value(&self, pt: &Point) -> f64 {
        match self {
            Factor::P => pt.p as f64,
            Factor::PPerN => pt.p as f64 / pt.run.size.max(1) as f64,
            Factor::Nodes => pt.run.nodes as f64,
            Factor::PSquared => (pt.p as f64) * (pt.p as f64),
        }
    }

    /// Name.
    pub fn name(&self) -> &'static str {
        match self {
            Factor::P => "p",
            Factor::PPerN => "p/N",
            Factor::Nodes => "nodes",
            Factor::PSquared => "p^2",
        }
    }
}

/// A least-squares fit f = Σ a_k x_k.
#[derive(Clone, Debug, Serialize)]
pub struct Fit {
    /// The factors.
    pub factors: Vec<Factor>,
    /// The coefficients.
    pub coef: Vec<f64>,
    /// Coefficient of determination 1 − SS_res/SS_tot.
    pub r2: f64,
}

impl Fit {
    /// The model's overhead at a point.
    pub fn predict(&self, pt: &Point) -> f64 {
        self.factors
            .iter()
            .zip(&self.coef)
            .map(|(f, a)| a * f.value(pt))
            .sum()
    }
}

/// Runs of the same app, size and pattern (a runs file that a benchmark appended to several
/// times) as one run each, in the order first seen, with the median of their times: repeats
/// are samples of one point, not points of their own (a second baseline run would otherwise
/// show as an overhead, and pull every fit towards it).
pub fn combine_repeats(runs: &[Run]) -> Vec<Run> {
    let mut groups: Vec<(Run, Vec<f64>)> = Vec::new();
    for r in runs {
        let same = |g: &(Run, Vec<f64>)| {
            let q = &g.0;
            (q.app == r.app && q.size == r.size)
                && (q.threads, q.processes, q.nodes) == (r.threads, r.processes, r.nodes)
        };
        match groups.iter_mut().find(|g| same(g)) {
            Some(g) => g.1.push(r.seconds),
            None => groups.push((r.clone(), vec![r.seconds])),
        }
    }
    groups
        .into_iter()
        .map(|(mut r, mut t)| {
            t.sort_by(f64::total_cmp);
            let m = t.len() / 2;
            r.seconds = if t.len() % 2 == 1 {
                t[m]
            } else {
                (t[m - 1] + t[m]) / 2.0
            };
            r
        })
        .collect()
}

/// Speedup, efficiency and overhead of every run, repeats combined first
/// ([`combine_repeats`]).
pub fn analyse(runs: &[Run]) -> Vec<Point> {
    let runs = &combine_repeats(runs)[..];
    let mut out = Vec::new();
    for r in runs {
        let series: Vec<&Run> = runs
            .iter()
            .filter(|q| q.app == r.app && q.size == r.size)
            .collect();
        let pmin = series.iter().map(|q| q.p()).min().unwrap_or(1);
        let tref = series
            .iter()
            .filter(|q| q.p() == pmin)
            .map(|q| q.seconds)
            .fold(f64::INFINITY, f64::min);
        let p = r.p();
        let speedup = pmin as f64 * tref / r.seconds;
        let efficiency = speedup / p as f64;
        out.push(Point {
            run: r.clone(),
            p,
            speedup,
            efficiency,
            overhead: 1.0 / efficiency - 1.0,
        });
    }
    out
}

/// Least squares without intercept for one or two factors.
pub fn fit(points: &[Point], factors: &[Factor]) -> Option<Fit> {
    let k = factors.len();
    if points.len() < k || k == 0 || k > 2 {
        return None;
    }
    let x: Vec<Vec<f64>> = points
        .iter()
        .map(|p| factors.iter().map(|f| f.value(p)).collect())
        .collect();
    let y: Vec<f64> = points.iter().map(|p| p.overhead).collect();
    let mut xtx = [[0.0f64; 2]; 2];
    let mut xty = [0.0f64; 2];
    for (row, &yy) in x.iter().zip(&y) {
        for a in 0..k {
            xty[a] += row[a] * yy;
            for b in 0..k {
                xtx[a][b] += row[a] * row[b];
            }
        }
    }
    let coef = if k == 1 {
        if xtx[0][0] == 0.0 {
            return None;
        }
        vec![xty[0] / xtx[0][0]]
    } else {
        let det = xtx[0][0] * xtx[1][1] - xtx[0][1] * xtx[1][0];
        if det.abs() < 1e-12 * (xtx[0][0] * xtx[1][1]).abs().max(1e-300) {
            return None; // collinear factors (e.g. nodes constant at 1 with p)
        }
        vec![
            (xty[0] * xtx[1][1] - xty[1] * xtx[0][1]) / det,
            (xty[1] * xtx[0][0] - xty[0] * xtx[1][0]) / det,
        ]
    };
    let mean = y.iter().sum::<f64>() / y.len() as f64;
    let ss_tot: f64 = y.iter().map(|v| (v - mean).powi(2)).sum();
    let ss_res: f64 = x
        .iter()
        .zip(&y)
        .map(|(row, v)| (v - row.iter().zip(&coef).map(|(a, b)| a * b).sum::<f64>()).powi(2))
        .sum();
    let r2 = if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else if ss_res < 1e-24 {
        1.0
    } else {
        f64::NAN
    };
    Some(Fit {
        factors: factors.to_vec(),
        coef,
        r2,
    })
}

/// All the fits the seed uses: each single factor, and each pair that is not collinear.
pub fn all_fits(points: &[Point]) -> Vec<Fit> {
    fits_of(
        points,
        &[Factor::P, Factor::PPerN, Factor::Nodes, Factor::PSquared],
    )
}

/// Parses a comma-separated list of factors: `p`, `p/N` (or `p/n`), `nodes`, `p^2` (or `p2`).
pub fn parse_factors(s: &str) -> crate::Result<Vec<Factor>> {
    let mut out = Vec::new();
    for t in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let f = match t {
            "p" => Factor::P,
            "p/N" | "p/n" => Factor::PPerN,
            "nodes" => Factor::Nodes,
            "p^2" | "p2" => Factor::PSquared,
            _ => {
                return Err(crate::Error::Invalid(format!(
                    "unknown factor {t:?}: use p, p/N, nodes or p^2"
                )))
            }
        };
        if !out.contains(&f) {
            out.push(f);
        }
    }
    if out.is_empty() {
        return Err(crate::Error::Invalid(format!(
            "no factors in {s:?}: use p, p/N, nodes or p^2"
        )));
    }
    Ok(out)
}

/// The fits f = a₁x₁ for each chosen factor and f = a₁x₁ + a₂x₂ for each pair of them that is
/// not collinear in the data.
pub fn fits_of(points: &[Point], fs: &[Factor]) -> Vec<Fit> {
    let mut out: Vec<Fit> = fs.iter().filter_map(|f| fit(points, &[*f])).collect();
    for a in 0..fs.len() {
        for b in a + 1..fs.len() {
            out.extend(fit(points, &[fs[a], fs[b]]));
        }
    }
    out
}

/// A text report of the runs and fits.
pub fn report(points: &[Point], fits: &[Fit]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<10} {:>8} {:>9} {:>11} {:>8} {:>10} {:>9}",
        "app", "size", "t×m×n", "seconds", "speedup", "efficiency", "overhead"
    );
    for p in points {
        let _ = writeln!(
            s,
            "{:<10} {:>8} {:>9} {:>11.4} {:>8.3} {:>10.3} {:>9.4}",
            p.run.app,
            p.run.size,
            p.run.pattern(),
            p.run.seconds,
            p.speedup,
            p.efficiency,
            p.overhead
        );
    }
    let _ = writeln!(s, "\nfits of f (least squares, no intercept):");
    for f in fits {
        let terms: Vec<String> = f
            .factors
            .iter()
            .zip(&f.coef)
            .map(|(x, a)| format!("{a:.4e}·{}", x.name()))
            .collect();
        let _ = writeln!(s, "  f = {:<40} R² = {:.4}", terms.join(" + "), f.r2);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(threads: usize, size: usize, seconds: f64) -> Run {
        Run {
            app: "x".into(),
            threads,
            processes: 1,
            nodes: 1,
            size,
            seconds,
        }
    }

    #[test]
    fn efficiency_and_overhead() {
        let pts = analyse(&[run(1, 100, 10.0), run(2, 100, 5.0), run(4, 100, 3.125)]);
        assert!((pts[1].efficiency - 1.0).abs() < 1e-12);
        assert!((pts[2].speedup - 3.2).abs() < 1e-12);
        assert!((pts[2].efficiency - 0.8).abs() < 1e-12);
        assert!((pts[2].overhead - 0.25).abs() < 1e-12);
    }

    #[test]
    fn repeated_runs_are_one_point_at_their_median() {
        // Two baselines (1 s and 2 s) and three runs on 2 threads (0.5, 0.9, 0.7 s).
        let pts = analyse(&[
            run(1, 100, 1.0),
            run(2, 100, 0.5),
            run(1, 100, 2.0),
            run(2, 100, 0.9),
            run(2, 100, 0.7),
        ]);
        assert_eq!(pts.len(), 2);
        assert_eq!((pts[0].p, pts[0].run.seconds), (1, 1.5));
        assert!(
            pts[0].overhead.abs() < 1e-12,
            "the baseline has no overhead"
        );
        assert_eq!((pts[1].p, pts[1].run.seconds), (2, 0.7));
        assert!((pts[1].speedup - 1.5 / 0.7).abs() < 1e-12);
    }

    #[test]
    fn fits_recover_planted_models() {
        // Synthesise T(p) from f = 0.01 p + 0.002 p/N ... first exactly one factor.
        let mut runs = Vec::new();
        for &n in &[1000usize, 2000, 4000] {
            for p in 1..=8 {
                let f = 0.5 * p as f64 / n as f64 * 100.0 * if p == 1 { 0.0 } else { 1.0 };
                // f = p·T(p)/T(1) − 1 with T(1) = 1  =>  T(p) = (1 + f)/p
                runs.push(run(p, n, (1.0 + f) / p as f64));
            }
        }
        let pts: Vec<Point> = analyse(&runs).into_iter().filter(|p| p.p > 1).collect();
        let f1 = fit(&pts, &[Factor::PPerN]).unwrap();
        assert!((f1.coef[0] - 50.0).abs() < 1e-9, "{:?}", f1.coef);
        assert!((f1.r2 - 1.0).abs() < 1e-12);
        let fp = fit(&pts, &[Factor::P]).unwrap();
        assert!(fp.r2 < f1.r2);
        // Two factors: f = 0.02 p + 0.1 nodes.
        let mut runs = Vec::new();
        for nodes in 1..=4 {
            for t in 1..=4 {
                let p = t * nodes;
                let f = if p == 1 {
                    0.0
                } else {
                    0.02 * p as f64 + 0.1 * nodes as f64
                };
                runs.push(Run {
                    app: "y".into(),
                    threads: t,
                    processes: 1,
                    nodes,
                    size: 10,
                    seconds: (1.0 + f) / p as f64,
                });
            }
        }
        let pts: Vec<Point> = analyse(&runs).into_iter().filter(|p| p.p > 1).collect();
        let two = fit(&pts, &[Factor::P, Factor::Nodes]).unwrap();
        assert!(
            (two.coef[0] - 0.02).abs() < 1e-9 && (two.coef[1] - 0.1).abs() < 1e-9,
            "{:?}",
            two.coef
        );
        assert!(two.r2 > 0.999999);
        // Collinear factors are refused instead of giving nonsense.
        let one_size: Vec<Point> = analyse(&[run(1, 5, 1.0), run(2, 5, 0.6), run(3, 5, 0.4)]);
        assert!(fit(&one_size, &[Factor::P, Factor::PPerN]).is_none());
        // [Qiu2012]'s Fig. 10: f = 0.01 p + 0.003 p² on one node.
        let runs: Vec<Run> = (1..=8)
            .map(|p| {
                let f = if p == 1 {
                    0.0
                } else {
                    0.01 * p as f64 + 0.003 * (p * p) as f64
                };
                run(p, 100, (1.0 + f) / p as f64)
            })
            .collect();
        let pts: Vec<Point> = analyse(&runs).into_iter().filter(|p| p.p > 1).collect();
        let quad = fit(&pts, &[Factor::P, Factor::PSquared]).unwrap();
        assert!(
            (quad.coef[0] - 0.01).abs() < 1e-9 && (quad.coef[1] - 0.003).abs() < 1e-9,
            "{:?}",
            quad.coef
        );
        assert_eq!(
            parse_factors("p, p^2").unwrap(),
            [Factor::P, Factor::PSquared]
        );
    }

    #[test]
    fn hybrid_patterns_count_every_tier() {
        // 2 threads x 2 processes x 2 nodes is p = 8, against 1x1x1.
        let r = |t, m, n, secs| Run {
            app: "z".into(),
            threads: t,
            processes: m,
            nodes: n,
            size: 100,
            seconds: secs,
        };
        let pts = analyse(&[r(1, 1, 1, 8.0), r(2, 2, 2, 1.25), r(1, 2, 1, 4.0)]);
        assert_eq!(pts[1].p, 8);
        assert_eq!(pts[1].run.pattern(), "2x2x2");
        assert!((pts[1].efficiency - 0.8).abs() < 1e-12);
        assert!((pts[2].efficiency - 1.0).abs() < 1e-12);
        // The node factor is the node count, not the rank count.
        assert_eq!(Factor::Nodes.value(&pts[1]), 2.0);
        assert_eq!(Factor::Nodes.value(&pts[2]), 1.0);
        // Zero and overflowing patterns are refused with the pattern named.
        let e = r(1, 0, 1, 1.0).validate().unwrap_err().to_string();
        assert!(e.contains("1x0x1"), "{e}");
        assert!(r(usize::MAX, 2, 1, 1.0).validate().is_err());
        assert!(r(2, 2, 2, 1.0).validate().is_ok());
        // Times whose ratios overflow or vanish are refused.
        for secs in [1e-320, 1e300, 0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(r(1, 1, 1, secs).validate().is_err(), "{secs}");
        }
    }

    #[test]
    fn chosen_factors() {
        assert_eq!(
            parse_factors("p, p/N,p").unwrap(),
            vec![Factor::P, Factor::PPerN]
        );
        assert!(parse_factors("q")
            .unwrap_err()
            .to_string()
            .contains("unknown factor"));
        assert!(parse_factors(",").is_err());
        let mut runs = Vec::new();
        for &n in &[100usize, 200] {
            for p in 1..=4 {
                runs.push(run(p, n, (1.0 + 0.01 * (p - 1) as f64) / p as f64));
            }
        }
        let pts: Vec<Point> = analyse(&runs).into_iter().filter(|p| p.p > 1).collect();
        let fits = fits_of(&pts, &[Factor::P, Factor::PPerN]);
        // p, p/N and the pair (the sizes differ, so they are not collinear).
        assert_eq!(fits.len(), 3);
        assert_eq!(fits[2].factors, vec![Factor::P, Factor::PPerN]);
        assert_eq!(fits_of(&pts, &[Factor::P]).len(), 1);
    }
}

//! Every figure kind drawn from small fixed documents and checked as a reader would: the SVG
//! parses, both axes say what they show and in which unit, each series has its legend entry
//! and one mark per row, the limit is dashed where there is one; PNGs decode at the size asked.

use super::report::{ReportFigure, Table};
use super::style;
use super::{render, Figure, Format, Size};
use serde_json::{json, Value};

/// The figure as SVG text.
pub(crate) fn svg<F: Figure>(f: &F) -> String {
    String::from_utf8(render(f, Format::Svg, Size::default()).unwrap()).unwrap()
}

/// Every text of the SVG (which also checks that it parses as XML).
pub(crate) fn texts(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).expect("the SVG parses");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or("").trim().to_string())
        .collect()
}

/// Filled marks (circle, rect, polygon) of colour `hex`.
pub(crate) fn marks(svg: &str, rgb: plotters::style::RGBColor) -> usize {
    let hex = format!("#{:02X}{:02X}{:02X}", rgb.0, rgb.1, rgb.2);
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| {
            ["circle", "rect", "polygon"]
                .iter()
                .any(|t| n.has_tag_name(*t))
        })
        .filter(|n| {
            n.attribute("fill") == Some(hex.as_str())
                || (n.has_tag_name("circle") && n.attribute("stroke") == Some(hex.as_str()))
        })
        .count()
}

/// Line pieces stroked in `rgb`.
pub(crate) fn strokes(svg: &str, rgb: plotters::style::RGBColor) -> usize {
    let hex = format!("#{:02X}{:02X}{:02X}", rgb.0, rgb.1, rgb.2);
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("polyline") || n.has_tag_name("line"))
        .filter(|n| n.attribute("stroke") == Some(hex.as_str()))
        .count()
}

fn report(unit: &str, rows: Value) -> Value {
    json!({
        "bench": "demo", "unit": unit, "lower_is_better": true,
        "machine": {"cpu": "Test CPU 9000", "cores": 4, "hostname": "h"},
        "notes": [], "results": rows,
    })
}

fn figure(doc: &Value) -> super::Result<ReportFigure> {
    ReportFigure::new(Table::from_json_as(doc, None)?)
}

/// Checks the structure of a report figure: labels, legend, marks per series, the limit.
fn check(doc: &Value, x_word: &str, unit: &str) -> String {
    let fig = figure(doc).unwrap();
    let s = svg(&fig);
    let t = texts(&s);
    assert!(
        t.iter().any(|l| l.contains(x_word)),
        "no x label with {x_word}: {t:?}"
    );
    assert!(
        t.iter()
            .any(|l| l.contains(&format!("({unit})")) && l.contains("better")),
        "no y label with ({unit}): {t:?}"
    );
    let rows = doc["results"].as_array().unwrap();
    let series = fig.layout().series().to_vec();
    let looks = style::looks(&series);
    for (name, look) in series.iter().zip(&looks) {
        assert!(t.iter().any(|l| l == name), "no legend entry {name}: {t:?}");
        if name == "limit" {
            assert!(strokes(&s, style::LIMIT) > 2, "the limit is not dashed");
            continue;
        }
        let n = rows
            .iter()
            .filter(|r| r["impl"] == name.as_str() && r["value"].is_number())
            .count();
        // One mark per row, plus the legend's.
        assert_eq!(marks(&s, look.rgb()), n + 1, "marks of {name}");
    }
    assert!(
        t.iter()
            .any(|l| l.contains("Test CPU 9000") && l.contains("4 cores")),
        "no machine caption: {t:?}"
    );
    s
}

fn threads_doc() -> Value {
    let mut rows = Vec::new();
    for th in [1, 2, 4, 8] {
        rows.push(
            json!({"impl": "tiers-active", "threads": th, "samples": 9, "value": 10.0 * th as f64}),
        );
        rows.push(
            json!({"impl": "openmp", "threads": th, "samples": 9, "value": 30.0 * th as f64}),
        );
        rows.push(json!({"impl": "limit", "threads": th, "measured": "round trip", "value": 5.0 * th as f64}));
    }
    report("ns", json!(rows))
}

#[test]
fn threads_on_x_with_the_limit_dashed() {
    check(&threads_doc(), "threads", "ns");
}

#[test]
fn bytes_on_a_log_axis() {
    let rows: Vec<Value> = (3..=22)
        .step_by(3)
        .flat_map(|p| {
            let b = 1u64 << p;
            [
                json!({"impl": "tiers-shm", "bytes": b, "ranks": 2, "value": (b as f64).sqrt()}),
                json!({"impl": "memcpy", "bytes": b, "ranks": 2, "value": (b as f64).sqrt() * 2.0}),
            ]
        })
        .collect();
    let doc = report("GB/s", json!(rows));
    let s = check(&doc, "bytes", "GB/s");
    assert!(texts(&s).iter().any(|l| l.contains("log scale")));
    assert!(
        texts(&s).iter().any(|l| l.contains("ranks = 2")),
        "the fixed parameter is in the title"
    );
}

#[test]
fn names_on_x_and_a_limit_per_panel() {
    let doc = report(
        "ns",
        json!([
            {"impl": "mpi", "op": "barrier", "ranks": 2, "algorithm": "MPI_Barrier", "value": 2000.0},
            {"impl": "tiers-shm", "op": "barrier", "ranks": 2, "algorithm": "shm", "value": 600.0},
            {"impl": "mpi", "op": "allreduce", "ranks": 2, "algorithm": "MPI_Allreduce", "value": 2100.0},
            {"impl": "tiers-shm", "op": "allreduce", "ranks": 2, "algorithm": "shm", "value": 1200.0},
            {"impl": "limit", "ranks": 2, "measured": "round trip", "value": 100.0},
        ]),
    );
    let s = check(&doc, "op", "ns");
    let t = texts(&s);
    assert!(t.iter().any(|l| l == "barrier") && t.iter().any(|l| l == "allreduce"));
}

#[test]
fn a_second_parameter_makes_panels_not_a_mixed_series() {
    let mut rows = Vec::new();
    for size in [2000, 4499] {
        for th in [1, 2] {
            rows.push(json!({"impl": "tiers", "size": size, "threads": th, "efficiency": 0.9, "value": size as f64 / th as f64}));
        }
        rows.push(json!({"impl": "scikit-learn", "size": size, "threads": 1, "stress": 1.5, "value": size as f64 * 10.0}));
    }
    let doc = report("s/iteration", json!(rows));
    let fig = figure(&doc).unwrap();
    assert_eq!(fig.layout().x(), Some("threads"));
    assert_eq!(fig.layout().panels(), 2);
    let s = check(&doc, "threads", "s/iteration");
    let t = texts(&s);
    assert!(t.iter().any(|l| l == "size = 2000") && t.iter().any(|l| l == "size = 4499"));
}

#[test]
fn many_panels_make_a_taller_figure_a_few_keep_the_default() {
    let doc = |ops: usize| {
        let mut rows = Vec::new();
        for op in 0..ops {
            for th in [1, 2, 4] {
                rows.push(json!({"impl": "tiers", "op": format!("op{op}"), "threads": th, "value": 1.0 + th as f64}));
            }
        }
        report("ns", json!(rows))
    };
    // One panel, and up to two rows of panels, fit the default height.
    for ops in [1, 4, 6] {
        let fig = figure(&doc(ops)).unwrap();
        assert_eq!(fig.layout().height(), super::HEIGHT, "{ops} panels");
    }
    // Sixteen panels are six rows of three: each row keeps room for its labels.
    let fig = figure(&doc(16)).unwrap();
    assert_eq!(fig.layout().panels(), 16);
    let h = fig.layout().height();
    assert!((6 * 240..=super::MAX_SIDE).contains(&h), "height {h}");
    let png = render(&fig, Format::Png, Size::new(super::WIDTH, h).unwrap()).unwrap();
    assert_eq!(png_size(&png), (super::WIDTH, h));
}

#[test]
fn rows_in_their_own_units_get_a_panel_each_with_its_unit_on_y() {
    let mut rows = Vec::new();
    for imp in ["direct", "pull"] {
        rows.push(json!({"impl": imp, "op": "alltoallv", "bytes": 1024, "unit": "progress calls", "value": 14.0}));
        rows.push(
            json!({"impl": imp, "op": "alltoallv", "bytes": 1024, "unit": "µs", "value": 44.0}),
        );
    }
    rows.push(json!({"impl": "limit", "op": "alltoallv", "bytes": 1024, "unit": "µs", "measured": "memcpy", "value": 1.0}));
    let doc = report("per alltoallv", json!(rows));
    let fig = figure(&doc).unwrap();
    assert_eq!(
        fig.layout().panels(),
        2,
        "one panel per unit, never one axis for both"
    );
    assert_ne!(fig.layout().x(), Some("unit"));
    let t = texts(&svg(&fig));
    assert!(
        t.iter().any(|l| l.starts_with("value (progress calls)")),
        "{t:?}"
    );
    assert!(t.iter().any(|l| l.starts_with("time (µs)")), "{t:?}");
}

#[test]
fn one_row_draws_one_mark() {
    let doc = report("ns", json!([{"impl": "tiers", "threads": 1, "value": 3.0}]));
    check(&doc, "threads", "ns");
}

#[test]
fn empty_unknown_and_all_nan_reports_say_why() {
    let e = figure(&report("ns", json!([]))).err().unwrap().to_string();
    assert!(e.contains("no results"), "{e}");
    let e = figure(&json!({"runs": []})).err().unwrap().to_string();
    assert!(e.contains("no \"results\"") && e.contains("runs"), "{e}");
    let e = figure(&json!([1, 2])).err().unwrap().to_string();
    assert!(e.contains("not a JSON object"), "{e}");
    let e = figure(&report("ns", json!([{"impl": "a", "threads": 1}])))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no numeric \"value\""), "{e}");
    let e = figure(&report("ns", json!([{"threads": 1, "value": 1.0}])))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("\"impl\""), "{e}");
    let e = figure(&report(
        "ns",
        json!([{"impl": "a", "threads": 1, "value": null}]),
    ))
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("no finite value"), "{e}");
}

#[test]
fn nan_rows_are_left_out_and_counted() {
    let doc = report(
        "ns",
        json!([
            {"impl": "a", "threads": 1, "value": 1.0},
            {"impl": "a", "threads": 2, "value": null},
            {"impl": "a", "threads": 4, "value": 3.0},
        ]),
    );
    let s = check(&doc, "threads", "ns");
    assert!(texts(&s)
        .iter()
        .any(|l| l.contains("1 of 3 rows have no finite value")));
}

#[test]
fn a_large_report_draws() {
    let rows: Vec<Value> = (1..=10_000)
        .map(|i| json!({"impl": if i % 2 == 0 { "tiers" } else { "std" }, "threads": (i + 1) / 2, "value": (i as f64).sqrt()}))
        .collect();
    let doc = report("ns", json!(rows));
    let fig = figure(&doc).unwrap();
    let png = render(&fig, Format::Png, Size::new(800, 500).unwrap()).unwrap();
    assert_eq!(png_size(&png), (800, 500));
    check(&doc, "threads", "ns");
}

/// Width and height of a PNG, by decoding it.
pub(crate) fn png_size(bytes: &[u8]) -> (u32, u32) {
    let mut r = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .expect("a PNG");
    let mut buf = vec![0; r.output_buffer_size()];
    let info = r.next_frame(&mut buf).expect("a frame");
    (info.width, info.height)
}

#[test]
fn pngs_decode_at_the_size_asked() {
    let fig = figure(&threads_doc()).unwrap();
    for (w, h) in [(640, 400), (1200, 900)] {
        let png = render(&fig, Format::Png, Size::new(w, h).unwrap()).unwrap();
        assert_eq!(png_size(&png), (w, h));
    }
}

#[test]
fn the_scatter_has_its_axes_clusters_and_one_mark_per_point() {
    use super::scatter::{cluster_look, Scatter};
    // Two clusters of 3-D points, the reference labelling them with other numbers.
    let mut pts = Vec::new();
    let mut found = Vec::new();
    for i in 0..30 {
        let c = i % 2;
        pts.extend([
            c as f64 * 10.0 + (i as f64 * 0.37).sin(),
            (i as f64).cos(),
            0.1 * i as f64,
        ]);
        found.push(c);
    }
    let reference: Vec<usize> = found.iter().map(|c| 7 - c).collect();
    let fig = Scatter::new(
        &pts,
        3,
        "MDS of 30 points in 3 dimensions, normalised stress 0.01".into(),
    )
    .unwrap()
    .colour_by("clusters found", found)
    .unwrap()
    .colour_by("reference", reference)
    .unwrap();
    let s = svg(&fig);
    let t = texts(&s);
    assert!(t.iter().filter(|l| l.contains("principal axis 1")).count() == 2);
    assert!(t.iter().filter(|l| l.contains("principal axis 2")).count() == 2);
    assert!(t
        .iter()
        .any(|l| l.contains("30 points") && l.contains("stress")));
    for l in [
        "0: 15 points",
        "1: 15 points",
        "6: 15 points",
        "7: 15 points",
    ] {
        assert!(t.iter().any(|x| x == l), "no legend entry {l}: {t:?}");
    }
    // Agreeing labellings share colours: each colour marks 15 points in each panel, plus a
    // legend entry in each.
    for k in 0..2 {
        assert_eq!(marks(&s, cluster_look(k).rgb()), 2 * (15 + 1));
    }
    assert!(Scatter::new(&[], 3, String::new()).is_err());
    let mut bad = pts.clone();
    bad[4] = f64::NAN;
    let e = Scatter::new(&bad, 3, String::new())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("point 1") && e.contains("NaN"), "{e}");
    assert!(Scatter::new(&pts, 3, String::new())
        .unwrap()
        .colour_by("x", vec![0; 3])
        .is_err());
    let png = render(&fig, Format::Png, Size::new(900, 500).unwrap()).unwrap();
    assert_eq!(png_size(&png), (900, 500));

    // Beside reference points (`tiers mds --reference`): the reference is our points turned,
    // mirrored, scaled and moved; after the Procrustes fit both panels are the same picture.
    let theirs: Vec<f64> = pts
        .chunks(3)
        .flat_map(|p| [5.0 - 2.0 * p[1], 2.0 * p[0] + 1.0, -2.0 * p[2]])
        .collect();
    let fig = Scatter::with_reference(&pts, &theirs, 3, "MDS beside its reference".into())
        .unwrap()
        .colour_by("clusters found", (0..30).map(|i| i % 2).collect())
        .unwrap();
    let ours = fig.xy.clone();
    let refd = fig.reference.clone().unwrap();
    for (a, b) in ours.iter().zip(&refd) {
        assert!(
            (a.0 - b.0).abs() < 1e-9 && (a.1 - b.1).abs() < 1e-9,
            "{a:?} {b:?}"
        );
    }
    let s = svg(&fig);
    let t = texts(&s);
    assert!(t.iter().any(|l| l == "coloured by clusters found"), "{t:?}");
    assert!(
        t.iter().any(|l| l == "reference points, by clusters found"),
        "{t:?}"
    );
    assert!(t
        .iter()
        .any(|l| l.contains("Procrustes") && l.contains("disparity 0.0000")));
    for k in 0..2 {
        assert_eq!(marks(&s, cluster_look(k).rgb()), 2 * (15 + 1));
    }
    assert!(Scatter::with_reference(&pts, &theirs[3..], 3, String::new()).is_err());
}

#[test]
fn the_model_figure_has_its_panels_series_and_fits() {
    use super::model::ModelFigure;
    use tiers_apps::model::{analyse, fits_of, Factor, Run};
    let mut runs = Vec::new();
    for size in [1000, 4000] {
        for p in [1, 2, 4] {
            runs.push(Run {
                app: "mds".into(),
                threads: p,
                processes: 1,
                nodes: 1,
                size,
                seconds: (1.0 + 20.0 * (p - 1) as f64 / size as f64) / p as f64,
            });
        }
    }
    let pts = analyse(&runs);
    let fit_pts: Vec<_> = pts.iter().filter(|p| p.p > 1).cloned().collect();
    let fits = fits_of(&fit_pts, &[Factor::P, Factor::PPerN]);
    let fig = ModelFigure::new(pts.clone(), fits).unwrap();
    let s = svg(&fig);
    let t = texts(&s);
    for want in [
        "efficiency ε (fraction)",
        "overhead f (fraction)",
        "p/N (inverse grain size, 1/points)",
        "run: pattern t×m×n (threads × processes × nodes), by series",
    ] {
        assert!(
            t.iter().any(|l| l.starts_with(want)),
            "no label {want}: {t:?}"
        );
    }
    let series = ["mds N=1000", "mds N=4000"];
    let looks: Vec<style::Look> = (0..2).map(style::Look::of_slot).collect();
    for (name, look) in series.iter().zip(&looks) {
        assert!(t.iter().any(|l| l == name), "no legend entry {name}");
        // Three runs, each in three panels, and the legend's mark.
        assert_eq!(marks(&s, look.rgb()), 3 * 3 + 1, "{name}");
    }
    assert!(t
        .iter()
        .any(|l| l.starts_with("f = ") && l.contains("·p/N") && l.contains("R²")));
    assert!(t.iter().any(|l| l.starts_with("f = ") && l.contains("·p,")));
    // The two-factor fit is a line with its coefficients too (seed 000 Figs. 7, 8, 10).
    assert!(
        t.iter()
            .any(|l| l.starts_with("f = ") && l.contains("·p + ") && l.contains("·p/N,")),
        "{t:?}"
    );
    assert!(!t.iter().any(|l| l.contains("rings")), "{t:?}");
    // The third panel names each run's pattern.
    for want in ["1x1x1", "2x1x1", "4x1x1"] {
        assert_eq!(t.iter().filter(|l| *l == want).count(), 2, "{want}: {t:?}");
    }
    assert!(ModelFigure::new(Vec::new(), Vec::new()).is_err());
}

#[test]
fn the_gantt_has_one_bar_per_tile() {
    use super::gantt::Gantt;
    use tiers_apps::render::TileSpan;
    let spans: Vec<TileSpan> = (0..12)
        .map(|t| TileSpan {
            tile: t,
            worker: t % 3,
            start: (t / 3) as f64 * 0.01,
            end: (t / 3) as f64 * 0.01 + 0.009,
        })
        .collect();
    let fig = Gantt::new("render".into(), spans, 3, 4).unwrap();
    let s = svg(&fig);
    let t = texts(&s);
    assert!(t.iter().any(|l| l == "time since the render started (ms)"));
    assert!(t.iter().any(|l| l == "worker (thread index)"));
    let bars: usize = (0..3).map(|row| marks(&s, style::PALETTE[row])).sum();
    assert_eq!(bars, 12);
    assert!(Gantt::new("x".into(), Vec::new(), 2, 2).is_err());
}

#[test]
fn the_annealing_trace_has_a_mark_per_temperature_and_a_ring_per_split() {
    use super::anneal::Anneal;
    use tiers_apps::clustering::Event;
    let mut ev = Vec::new();
    let mut k = 1;
    for i in 0..8 {
        let t = 0.1 * 0.9f64.powi(i);
        if i % 3 == 2 {
            ev.push(Event::Split {
                t,
                cluster: 0,
                lambda: 1.0,
            });
            k += 1;
        }
        ev.push(Event::Temperature {
            t,
            k,
            em: 5,
            uncertainty: 0.01 * f64::from(i + 1),
            free_energy: -t * f64::from(k as u32),
        });
    }
    let fig = Anneal::new("annealing".into(), &ev).unwrap();
    let s = svg(&fig);
    let t = texts(&s);
    assert_eq!(
        t.iter().filter(|l| l.starts_with("temperature T")).count(),
        3
    );
    assert!(t.iter().any(|l| l == "clusters (count)"));
    assert!(t.iter().any(|l| l.starts_with("free energy F")));
    assert!(t.iter().any(|l| l.starts_with("membership uncertainty")));
    // Eight temperatures in each of the three panels.
    assert_eq!(marks(&s, style::Look::of_slot(0).rgb()), 24);
    let doc = roxmltree::Document::parse(&s).unwrap();
    let rings = doc
        .descendants()
        .filter(|n| n.has_tag_name("circle") && n.attribute("fill") == Some("none"))
        .count();
    // Each split ringed on the clusters and on the free energy.
    assert_eq!(rings, 4);
    assert!(Anneal::new("x".into(), &[]).is_err());
}

/// A report that splits each total into parts, as RedBlack3D's: `n` variants, each with
/// total, wait and comp rows, and a limit.
fn parts_doc(variants: &[&str], threads: &[u64]) -> Value {
    let mut rows = Vec::new();
    for &th in threads {
        for (vi, v) in variants.iter().enumerate() {
            let comp = 8.0 / th as f64;
            let wait = 1.0 + vi as f64;
            for (part, val) in [("total", comp + wait + 0.1), ("wait", wait), ("comp", comp)] {
                rows.push(json!({"impl": v, "ranks": 2, "threads": th, "n": 64, "part": part, "value": val}));
            }
        }
        for (part, val) in [
            ("total", 8.0 / th as f64),
            ("wait", 0.0),
            ("comp", 8.0 / th as f64),
        ] {
            rows.push(json!({"impl": "limit", "ranks": 2, "threads": th, "n": 64, "part": part, "measured": "no exchange", "value": val}));
        }
    }
    report("ms/iter", json!(rows))
}

#[test]
fn a_report_of_parts_is_drawn_as_stacked_bars_with_the_total_marked() {
    let variants = ["hand", "mt1", "mtp", "mtp-olap"];
    let doc = parts_doc(&variants, &[2]);
    let fig = figure(&doc).unwrap();
    assert_eq!(fig.layout().panels(), 1);
    let s = svg(&fig);
    let t = texts(&s);
    // Every variant and the limit name a group; the parts and the total are in the legend.
    for v in variants.iter().chain(&["limit"]) {
        assert!(t.iter().any(|l| l == v), "no group {v}: {t:?}");
    }
    for p in ["comp", "wait", "total"] {
        assert!(t.iter().any(|l| l == p), "no legend entry {p}: {t:?}");
    }
    assert!(t
        .iter()
        .any(|l| l.contains("(ms/iter)") && l.contains("better")));
    assert!(t.iter().any(|l| l.contains("implementation")));
    // One comp bar per group (the limit's too), one wait bar per group that waited, each with
    // its legend swatch.
    let st = super::stacked::Stack::of(&Table::from_json_as(&doc, None).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(st.parts, ["comp", "wait"]);
    assert_eq!(marks(&s, st.colour(0)), variants.len() + 1 + 1);
    assert_eq!(marks(&s, st.colour(1)), variants.len() + 1);
    // The total's value written above each bar; the limit dashed across.
    assert!(t.iter().any(|l| l == "8.1"), "no total label: {t:?}");
    assert!(strokes(&s, style::LIMIT) > 2, "the limit is not dashed");
}

#[test]
fn parts_at_several_thread_counts_make_panels() {
    let doc = parts_doc(&["mtp", "mtp-olap"], &[1, 2, 4]);
    let fig = figure(&doc).unwrap();
    assert_eq!(fig.layout().panels(), 3);
    let t = texts(&svg(&fig));
    for th in ["threads = 1", "threads = 2", "threads = 4"] {
        assert!(t.iter().any(|l| l == th), "no panel {th}: {t:?}");
    }
}

#[test]
fn parts_without_a_total_stay_lines() {
    let rows: Vec<Value> = [("comm", 1.0), ("exposed", 0.5)]
        .iter()
        .flat_map(|&(part, v)| {
            [1024u64, 4096]
                .map(|b| json!({"impl": "tiers", "bytes": b, "part": part, "value": v * b as f64}))
        })
        .collect();
    let doc = report("us", json!(rows));
    let fig = figure(&doc).unwrap();
    assert!(
        super::stacked::Stack::of(&Table::from_json_as(&doc, None).unwrap())
            .unwrap()
            .is_none()
    );
    assert_eq!(fig.layout().x(), Some("bytes"));
}

/// `tiers bench fft2d`'s shape: ms per transform by threads at one N and rank count, tiers'
/// two variants beside the serial plans and FFTW-MPI, the memcpy limit at every thread count.
#[test]
fn an_fft2d_report_has_threads_on_x_and_fftw_as_a_peer() {
    let mut rows = Vec::new();
    for th in [1, 2, 4] {
        for (imp, v) in [
            ("tiers-overlap", 0.2),
            ("tiers-plain", 0.07),
            ("serial", 0.25),
            ("fftw-mpi", 2.4),
        ] {
            rows.push(json!({"impl": imp, "n": 128, "ranks": 2, "threads": th, "value": v / th as f64, "vs_limit": 3.0}));
        }
        rows.push(json!({"impl": "limit", "n": 128, "ranks": 2, "threads": th, "measured": "3 copies", "value": 0.068}));
    }
    let doc = report("ms/transform", json!(rows));
    let s = check(&doc, "threads", "ms/transform");
    assert!(texts(&s)
        .iter()
        .any(|l| l.contains("n = 128") && l.contains("ranks = 2")));
}

/// `tiers bench md`'s shape: steps/s (higher is better) by threads.
#[test]
fn an_md_report_draws_steps_per_second() {
    let mut rows = Vec::new();
    for th in [1, 2] {
        for (imp, v) in [("tiers-overlap", 308.0), ("allgather", 413.0)] {
            rows.push(
                json!({"impl": imp, "n": 256, "ranks": 2, "threads": th, "value": v * th as f64}),
            );
        }
        rows.push(json!({"impl": "limit", "n": 256, "ranks": 2, "threads": th, "measured": "no broadcast", "value": 658.0 * th as f64}));
    }
    let mut doc = report("steps/s", json!(rows));
    doc["lower_is_better"] = json!(false);
    let s = check(&doc, "threads", "steps/s");
    assert!(texts(&s)
        .iter()
        .any(|l| l.starts_with("rate (steps/s), higher is better")));
}

/// `tiers bench is`'s shape: seconds of NPB IS's timed iterations for a class and rank
/// count, tiers beside NPB's own IS; the classes on x, side by side.
#[test]
fn an_is_report_puts_classes_on_x_with_npb_beside() {
    let mut rows = Vec::new();
    for (class, f) in [("S", 1.0), ("W", 8.0), ("A", 64.0)] {
        rows.push(json!({"impl": "tiers", "class": class, "ranks": 2, "value": 0.04 * f}));
        rows.push(json!({"impl": "npb-mpi", "class": class, "ranks": 2, "value": 0.03 * f}));
        rows.push(json!({"impl": "limit", "class": class, "ranks": 2, "measured": "memcpy", "value": 0.0003 * f}));
    }
    let doc = report("s", json!(rows));
    let fig = figure(&doc).unwrap();
    assert_eq!(fig.layout().x(), Some("class"));
    let s = check(&doc, "class", "s");
    let t = texts(&s);
    for c in ["S", "W", "A"] {
        assert!(t.iter().any(|l| l == c), "no class {c}: {t:?}");
    }
}

/// `tiers bench gaspi`'s shape: microseconds per operation, one panel per operation, the
/// sized ones on a log2 bytes axis, GPI-2 as the peer; barrier and init measured at one size.
#[test]
fn a_gaspi_report_has_a_panel_per_operation_and_bytes_in_powers_of_two() {
    let mut rows = Vec::new();
    for (op, b) in [("barrier", 0u64), ("allreduce", 8), ("init", 0)] {
        rows.push(json!({"impl": "gpi2", "op": op, "bytes": b, "value": 150.0}));
        rows.push(json!({"impl": "tiers", "op": op, "bytes": b, "value": 0.1}));
        if op != "init" {
            rows.push(json!({"impl": "limit", "op": op, "bytes": b, "measured": "half a round trip", "value": 0.15}));
        }
    }
    for p in (3..=21).step_by(3) {
        let b = 1u64 << p;
        let us = 0.1 + b as f64 / 4e4;
        rows.push(json!({"impl": "gpi2", "op": "pingpong", "bytes": b, "value": 160.0 + us}));
        rows.push(json!({"impl": "tiers", "op": "pingpong", "bytes": b, "value": us}));
        rows.push(json!({"impl": "limit", "op": "pingpong", "bytes": b, "measured": "memcpy", "value": us / 2.0}));
    }
    let doc = report("us", json!(rows));
    let fig = figure(&doc).unwrap();
    assert_eq!(fig.layout().x(), Some("bytes"));
    assert_eq!(fig.layout().panels(), 4);
    let s = check(&doc, "message size", "us");
    let t = texts(&s);
    for p in ["op = barrier", "op = pingpong", "op = init"] {
        assert!(t.iter().any(|l| l == p), "no panel {p}: {t:?}");
    }
    // Powers of two, not decades.
    for tick in ["1K", "1M"] {
        assert!(t.iter().any(|l| l == tick), "no tick {tick}: {t:?}");
    }
    assert!(!t.iter().any(|l| l == "1000" || l == "100000"), "{t:?}");
}

/// `tiers bench overlap`'s shape: the write's time (`comm`) and its exposed part by size per
/// progress policy: two panels, not stacked (no total), the memcpy limit on `comm` only.
#[test]
fn an_overlap_report_has_comm_and_exposed_panels() {
    let mut rows = Vec::new();
    for p in (10..=22).step_by(2) {
        let b = 1u64 << p;
        for (imp, f) in [
            ("tiers-local-eager", 1.0),
            ("tiers-local-proxy", 1.5),
            ("tiers-shm-eager", 0.8),
        ] {
            let c = f * b as f64 / 1e4;
            rows.push(json!({"impl": imp, "bytes": b, "part": "comm", "value": c}));
            rows.push(json!({"impl": imp, "bytes": b, "part": "exposed", "overlap_pct": 40.0, "value": c * 0.6}));
        }
        rows.push(json!({"impl": "limit", "bytes": b, "part": "comm", "measured": "memcpy", "value": b as f64 / 2e4}));
    }
    let doc = report("us per transfer", json!(rows));
    let fig = figure(&doc).unwrap();
    assert_eq!(fig.layout().panels(), 2);
    let s = check(&doc, "message size", "us per transfer");
    let t = texts(&s);
    assert!(t.iter().any(|l| l == "part = comm") && t.iter().any(|l| l == "part = exposed"));
    assert!(
        t.iter().any(|l| l.starts_with("time (us per transfer)")),
        "{t:?}"
    );
}

/// A hybrid study's report: times in `value`, parallel efficiency beside them, the limit
/// stating both; the report names efficiency as its figure's y.
fn hybrid_doc(figure_value: Option<&str>) -> Value {
    let mut rows = Vec::new();
    for (pat, t, m, p, secs, eff) in [
        ("1x1x1", 1, 1, 1.0, 8.0, 1.0),
        ("2x1x1", 2, 1, 2.0, 4.4, 0.909),
        ("1x2x1", 1, 2, 2.0, 4.2, 0.952),
    ] {
        rows.push(
            json!({"impl": "tiers", "app": "mds", "size": 500, "pattern": pat,
            "threads": t, "ranks": m, "hosts": 1, "value": secs, "efficiency": eff,
            "speedup": 8.0 / secs, "overhead": 1.0 / eff - 1.0}),
        );
        rows.push(
            json!({"impl": "limit", "app": "mds", "size": 500, "pattern": pat,
            "threads": t, "ranks": m, "hosts": 1, "value": 8.0 / p, "efficiency": 1.0,
            "speedup": p, "overhead": 0.0, "measured": "1x1x1 over p"}),
        );
    }
    let mut doc = report("s", json!(rows));
    if let Some(f) = figure_value {
        doc["figure_value"] = json!(f);
    }
    doc
}

#[test]
fn a_report_that_names_its_figure_value_draws_that_field() {
    let s = check(
        &hybrid_doc(Some("efficiency")),
        "pattern",
        "parallel efficiency",
    );
    let t = texts(&s);
    assert!(t.iter().any(|l| l.contains("higher is better")), "{t:?}");
    // The time is still the raw value, and any other number can be asked for.
    let raw = Table::from_json_as(&hybrid_doc(Some("efficiency")), Some("value")).unwrap();
    assert_eq!(raw.unit, "s");
    assert_eq!(raw.rows[0].value, 8.0);
    let rss = Table::from_json_as(&hybrid_doc(None), Some("speedup")).unwrap();
    assert_eq!(rss.unit, "speedup over 1x1x1");
    assert_eq!(rss.rows.len(), 6);
    assert!((rss.rows[2].value - 8.0 / 4.4).abs() < 1e-12);
    // The y field is no longer a parameter.
    assert!(rss.rows.iter().all(|r| r.get("speedup").is_none()));
    // A limit row that does not state its efficiency stands at 1, by definition.
    let mut doc = hybrid_doc(None);
    for r in doc["results"].as_array_mut().unwrap() {
        if r["impl"] == "limit" {
            r.as_object_mut().unwrap().remove("efficiency");
        }
    }
    let eff = Table::from_json_as(&doc, Some("efficiency")).unwrap();
    assert_eq!(eff.rows.len(), 6);
    assert!(eff
        .rows
        .iter()
        .filter(|r| r.is_limit())
        .all(|r| r.value == 1.0));
}

#[test]
fn an_unknown_figure_value_names_the_numbers_there_are() {
    let e = Table::from_json_as(&hybrid_doc(None), Some("gflops"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"gflops\"") && e.contains("efficiency"), "{e}");
    // A limit row alone does not make a figure.
    let mut doc = hybrid_doc(None);
    for r in doc["results"].as_array_mut().unwrap() {
        if r["impl"] == "tiers" {
            r.as_object_mut().unwrap().remove("efficiency");
        }
    }
    assert!(Table::from_json_as(&doc, Some("efficiency")).is_err());
}

#[test]
fn a_report_just_measured_draws_its_figure_value_too() {
    let mut r = tiers_bench::Report::new("hybrid", "s", true);
    r.figure_value = Some("efficiency".into());
    for (pat, secs, eff) in [("1x1x1", 2.0, 1.0), ("2x1x1", 1.1, 0.909)] {
        let params = [("pattern", json!(pat))];
        r.push("tiers", &params, secs)
            .extra
            .push(("efficiency".into(), json!(eff)));
        r.push_limit(
            &params,
            2.0 / if pat == "1x1x1" { 1.0 } else { 2.0 },
            "1x1x1 over p",
        );
    }
    let t = Table::from_report(&r);
    assert_eq!(t.unit, "parallel efficiency");
    assert!(!t.lower_is_better);
    let tiers: Vec<f64> = t
        .rows
        .iter()
        .filter(|r| !r.is_limit())
        .map(|r| r.value)
        .collect();
    assert_eq!(tiers, vec![1.0, 0.909]);
    // The limit rows do not state an efficiency: 1 by definition.
    assert!(t
        .rows
        .iter()
        .filter(|r| r.is_limit())
        .all(|r| r.value == 1.0));
    let s = svg(&ReportFigure::new(t).unwrap());
    assert!(texts(&s).iter().any(|l| l.contains("parallel efficiency")));
}

/// `f()`, or a failure naming `what` if it has not returned after a minute: a figure whose
/// drawing never ends fails its test instead of hanging the run.
pub(crate) fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: drawing did not end within a minute")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: drawing panicked"),
    }
}

/// The figure of `doc` as SVG and PNG at `size`, or the error of either.
fn both(doc: &Value, size: Size) -> super::Result<(String, Vec<u8>)> {
    let fig = figure(doc)?;
    let s = String::from_utf8(render(&fig, Format::Svg, size)?).expect("UTF-8 SVG");
    let p = render(&fig, Format::Png, size)?;
    Ok((s, p))
}

#[test]
fn more_series_than_looks_draw_each_in_the_legend_with_dashed_lines() {
    // One point a series, as in a report of one thread count per implementation.
    let rows: Vec<Value> = (0..100)
        .map(|i| json!({"impl": format!("a{i}"), "threads": i + 1, "value": i + 1}))
        .collect();
    let doc = report("ns", json!(rows));
    let (s, png) = within("100 series", move || both(&doc, Size::default()).unwrap());
    assert_eq!(png_size(&png), (super::WIDTH, super::HEIGHT));
    let t = texts(&s);
    for i in 0..100 {
        let name = format!("a{i}");
        assert!(t.contains(&name), "no legend entry {name}");
    }
    // Lines of two points a series: those after the first 60 are dashed (many pieces each).
    let rows: Vec<Value> = (0..130)
        .flat_map(|i| {
            [1, 2].map(|th| json!({"impl": format!("s{i}"), "threads": th, "value": i + th}))
        })
        .collect();
    let doc = report("ns", json!(rows));
    let fig = figure(&doc).unwrap();
    let series = fig.layout().series().to_vec();
    let s = within("130 series", move || svg(&fig));
    let looks = style::looks(&series);
    let dashed = looks[style::SLOTS];
    assert!(dashed.dashes().is_some());
    let same_colour = looks.iter().filter(|l| l.colour == dashed.colour).count();
    // A solid series is one line in the panel and one in the legend.
    assert!(
        strokes(&s, dashed.rgb()) > 2 * same_colour,
        "no dashed line in {:?}",
        dashed.rgb()
    );
}

#[test]
fn a_legend_too_long_for_the_figure_counts_what_it_leaves_out() {
    let rows: Vec<Value> = (0..400)
        .map(|i| json!({"impl": format!("a-rather-long-implementation-{i}"), "threads": 1, "size": i, "value": 1.0}))
        .collect();
    let doc = report("ns", json!(rows));
    let (s, _) = within("400 series", move || both(&doc, Size::default()).unwrap());
    let t = texts(&s);
    let more = t
        .iter()
        .find(|l| l.ends_with("more series"))
        .expect("a count");
    let shown = t
        .iter()
        .filter(|l| l.starts_with("a-rather-long-implementation-"))
        .count();
    assert_eq!(*more, format!("+{} more series", 400 - shown));
    assert!(shown > 30, "{shown} shown");
}

#[test]
fn values_no_axis_can_show_are_refused_and_the_rest_draw() {
    let below = |v: f64| f64::from_bits(v.to_bits() - 1);
    // (values, refused)
    let cases: Vec<(Vec<f64>, bool)> = vec![
        (vec![1.7e308, 0.0], true),
        (vec![1e308, -1e308], true),
        (vec![f64::MAX], true),
        (vec![-f64::MAX, -1.0], true),
        (vec![2e306, 1e306, 1.5e306], true),
        (vec![1e306, 0.0], false),
        (vec![-1e306, 0.0], false),
        (vec![1.7e308, 1.0], false), // log scale
        (vec![5e-324, 1e-323], false),
        (vec![-1e300, below(-1e300)], false),
        (vec![-1e300, -1e300], false),
        (vec![-5e-324, 0.0], false),
    ];
    for (vals, refused) in cases {
        let rows: Vec<Value> = vals
            .iter()
            .enumerate()
            .map(|(i, v)| json!({"impl": "a", "threads": i + 1, "value": v}))
            .collect();
        let doc = report("ns", json!(rows));
        let what = format!("{vals:?}");
        let got = within(&what, move || both(&doc, Size::default()));
        match got {
            Err(e) if refused => {
                let e = e.to_string();
                assert!(
                    e.contains("cannot be drawn on a linear axis") && e.contains("demo report"),
                    "{what}: {e}"
                );
            }
            Ok((s, png)) if !refused => {
                texts(&s);
                assert_eq!(png_size(&png), (super::WIDTH, super::HEIGHT));
            }
            Err(e) => panic!("{what}: refused: {e}"),
            Ok(_) => panic!("{what}: drawn"),
        }
    }
    // Stacked parts whose sum passes f64's largest.
    let mut doc = parts_doc(&["a"], &[1]);
    for r in doc["results"].as_array_mut().unwrap() {
        if r["impl"] == "a" {
            r["value"] = json!(1.5e308);
        }
    }
    let e = within("stacked", move || both(&doc, Size::default()))
        .expect_err("refused")
        .to_string();
    assert!(e.contains("cannot be drawn on a linear axis"), "{e}");
}

#[test]
fn the_smallest_figures_draw_every_kind_of_report() {
    let many_panels: Vec<Value> = (0..16)
        .flat_map(|p| {
            [1, 2, 4]
                .map(|th| json!({"impl": "a", "threads": th, "op": format!("op{p}"), "value": th}))
        })
        .collect();
    let docs = [
        threads_doc(),
        report("ns", json!(many_panels)),
        parts_doc(&["a", "b", "c"], &[1, 2, 4]),
        report(
            "ns",
            json!([{"impl": "a", "op": "get", "value": 1.0}, {"impl": "b", "op": "put", "value": 2.0}]),
        ),
    ];
    for (k, doc) in docs.into_iter().enumerate() {
        for (w, h) in [(200, 200), (200, 8192), (8192, 200)] {
            let d = doc.clone();
            let got = within(&format!("report {k} at {w}x{h}"), move || {
                both(&d, Size::new(w, h).unwrap())
            });
            let (s, png) = got.unwrap_or_else(|e| panic!("report {k} at {w}x{h}: {e}"));
            texts(&s);
            assert_eq!(png_size(&png), (w, h));
        }
    }
}

#[test]
fn control_characters_in_names_leave_the_svg_readable() {
    let doc = json!({
        "bench": "b\u{1}", "unit": "ns\u{7}", "machine": {"cpu": "c\u{0}", "hostname": "h\u{1b}"},
        "results": [
            {"impl": "a\u{1}", "threads": 1, "op": "x\u{2}", "value": 1.0},
            {"impl": "a\u{2}", "threads": 2, "op": "x\u{2}", "value": 2.0},
        ],
    });
    let fig = figure(&doc).unwrap();
    assert_eq!(fig.layout().series(), ["a\\u{1}", "a\\u{2}"]);
    let t = texts(&svg(&fig));
    assert!(t.iter().any(|l| l == "a\\u{1}"), "{t:?}");
}

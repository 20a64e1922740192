//! `tiers plot` and `tiers bench --plot` as a user runs them: a figure from a report file,
//! PNG at the size asked, and clear errors (no panic) for what cannot be drawn.

mod common;

use common::Dir;

use std::process::Command;

fn tiers(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tiers"))
        .args(args)
        .output()
        .expect("tiers runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

const REPORT: &str = r#"{"bench": "lock", "unit": "ns", "lower_is_better": true,
  "machine": {"cpu": "X", "cores": 2}, "notes": [],
  "results": [
    {"impl": "tiers-mcs", "threads": 1, "value": 10.0},
    {"impl": "tiers-mcs", "threads": 2, "value": 30.0},
    {"impl": "std", "threads": 1, "value": 12.0},
    {"impl": "std", "threads": 2, "value": 50.0},
    {"impl": "limit", "threads": 2, "measured": "round trip", "value": 20.0}
  ]}"#;

fn png_size(path: &str) -> (u32, u32) {
    let f = std::fs::File::open(path).unwrap();
    let r = png::Decoder::new(std::io::BufReader::new(f))
        .read_info()
        .unwrap();
    let i = r.info();
    (i.width, i.height)
}

#[test]
fn a_report_becomes_svg_and_png() {
    let d = Dir::new("ok");
    let json = d.write("r.json", REPORT);
    let svg = d.path("r.svg");
    let (ok, err) = tiers(&["plot", &json, "--out", &svg, "--date", "2026-13-02"]);
    assert!(!ok && err.contains("YYYY-MM-DD"), "{err}");
    let (ok, err) = tiers(&["plot", &json, "--out", &svg, "--date", "2026-01-02"]);
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("<svg") && text.contains("tiers-mcs") && text.contains("threads"));
    assert!(
        text.contains("2026-01-02"),
        "the date given is in the caption"
    );
    let png = d.path("r.png");
    let (ok, err) = tiers(&[
        "plot", &json, "--out", &png, "--width", "700", "--height", "450",
    ]);
    assert!(ok, "{err}");
    assert_eq!(png_size(&png), (700, 450));
}

#[test]
fn what_cannot_be_drawn_is_said() {
    let d = Dir::new("bad");
    let out = d.path("f.svg");
    let cases = [
        ("{\"runs\": []}", "no \"results\""),
        ("not json", "not JSON"),
        ("{\"bench\": \"b\", \"unit\": \"ns\", \"results\": []}", "no results"),
        (
            "{\"bench\": \"b\", \"unit\": \"ns\", \"results\": [{\"impl\": \"a\", \"threads\": 1, \"value\": null}]}",
            "no finite value",
        ),
        // A result whose x (threads) is no whole number, null or missing: not left out in
        // silence.
        (
            "{\"bench\": \"b\", \"unit\": \"ns\", \"results\": [{\"impl\": \"a\", \"threads\": 1, \"value\": 1}, {\"impl\": \"a\", \"threads\": 2.5, \"value\": 2}]}",
            "result 1 (a) has no \"threads\"",
        ),
        (
            "{\"bench\": \"b\", \"unit\": \"ns\", \"results\": [{\"impl\": \"a\", \"threads\": 1, \"value\": 1}, {\"impl\": \"b\", \"value\": 2}]}",
            "result 1 (b) has no \"threads\"",
        ),
    ];
    for (i, (doc, want)) in cases.iter().enumerate() {
        let f = d.write(&format!("{i}.json"), doc);
        let (ok, err) = tiers(&["plot", &f, "--out", &out]);
        assert!(
            !ok && err.contains(want) && !err.contains("panicked"),
            "{doc}: {err}"
        );
    }
    let json = d.write("r.json", REPORT);
    let (ok, err) = tiers(&["plot", &json, "--out", &d.path("f.jpg")]);
    assert!(!ok && err.contains(".svg or .png"), "{err}");
    let (ok, err) = tiers(&["plot", &json, "--out", &out, "--width", "5"]);
    assert!(!ok && err.contains("width"), "{err}");
    let (ok, err) = tiers(&["plot", &d.path("missing.json"), "--out", &out]);
    assert!(!ok && err.contains("missing.json"), "{err}");
}

#[test]
fn bench_draws_the_run_it_made() {
    let d = Dir::new("bench");
    let fig = d.path("alloc.svg");
    let (ok, err) = tiers(&[
        "bench",
        "private",
        "--threads",
        "1",
        "--min-time",
        "0.01",
        "--quiet",
        "--plot",
        &fig,
    ]);
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&fig).unwrap();
    assert!(text.contains("<svg") && text.contains("tiers-local") && text.contains("threads"));
    let (ok, err) = tiers(&["bench", "private", "--plot", &d.path("x.gif")]);
    assert!(!ok && err.contains(".svg or .png"), "{err}");
}

#[test]
fn render_traces_its_tiles_and_model_draws_its_fits() {
    let d = Dir::new("apps");
    let trace = d.path("t.svg");
    let (ok, err) = tiers(&[
        "render",
        "--width",
        "96",
        "--height",
        "64",
        "--tiles",
        "16",
        "--threads",
        "2",
        "--schedule",
        "static",
        "--max-iter",
        "50",
        "--out",
        &d.path("i.png"),
        "--trace",
        &trace,
    ]);
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(text.contains("worker (thread index)") && text.contains("Static"));
    let (ok, err) = tiers(&[
        "render",
        "--out",
        &d.path("i.png"),
        "--trace",
        &d.path("t.txt"),
    ]);
    assert!(!ok && err.contains("--trace"), "{err}");

    // The clustering's annealing trace, from a small matrix of two groups.
    let mut csv = String::new();
    for i in 0..12 {
        let row: Vec<String> = (0..12)
            .map(|j| {
                let same = (i < 6) == (j < 6);
                let v = if i == j {
                    0.0
                } else if same {
                    0.1 + 0.01 * ((i + j) % 3) as f64
                } else {
                    0.9
                };
                format!("{v}")
            })
            .collect();
        csv.push_str(&row.join(","));
        csv.push('\n');
    }
    let m = d.write("d.csv", &csv);
    let trace = d.path("a.svg");
    let (ok, err) = tiers(&[
        "cluster",
        &m,
        "--max-clusters",
        "3",
        "--out",
        &d.path("c.txt"),
        "--quiet",
        "--plot",
        &trace,
    ]);
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(text.contains("clusters (count)") && text.contains("temperature T"));
    assert!(text.contains("free energy F"), "no free energy panel");

    let runs = d.write(
        "runs.json",
        r#"{"runs": [
          {"app": "mds", "threads": 1, "nodes": 1, "size": 1000, "seconds": 2.0},
          {"app": "mds", "threads": 2, "nodes": 1, "size": 1000, "seconds": 1.1},
          {"app": "mds", "threads": 4, "nodes": 1, "size": 1000, "seconds": 0.6}]}"#,
    );
    let fig = d.path("m.png");
    let (ok, err) = tiers(&["model", &runs, "--plot", &fig]);
    assert!(ok, "{err}");
    assert_eq!(png_size(&fig), (1100, 800));
}

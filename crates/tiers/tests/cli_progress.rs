//! `tiers bench progress` as a user runs it: two jobs of tcp ranks (eager, lazy), both
//! variants in each, every row of the report present, with tiny sizes so that it takes a
//! second or two.

use std::process::Command;

const TIERS: &str = env!("CARGO_BIN_EXE_tiers");

#[test]
fn bench_progress_reports_every_variant_under_both_policies() {
    let out = Command::new(TIERS)
        .args([
            "bench",
            "progress",
            "--min-time",
            "0.01",
            "--json",
            "--quiet",
        ])
        .args(["--", "2", "1024"])
        .output()
        .expect("tiers runs");
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{text}{err}");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("one JSON document");
    assert_eq!(doc["bench"], "progress");
    let rows = doc["results"].as_array().expect("results");
    let row = |imp: &str, unit: &str| {
        rows.iter()
            .find(|r| r["impl"] == imp && r["unit"] == unit && r["op"] == "alltoallv")
            .unwrap_or_else(|| panic!("no {imp} {unit} row in {text}"))
    };
    for imp in ["direct-eager", "pull-eager", "direct-lazy", "pull-lazy"] {
        let calls = row(imp, "progress calls");
        assert_eq!(
            (calls["ranks"].as_u64(), calls["bytes"].as_u64()),
            (Some(2), Some(1024))
        );
        // Every alltoallv needs at least one pass per rank to see its peer's data.
        assert!(calls["value"].as_f64().unwrap() >= 2.0, "{calls}");
        for k in [
            "recv_ready",
            "send_ready",
            "recv_us",
            "send_us",
            "world_polls",
        ] {
            assert!(
                calls[k].as_f64().is_some_and(|v| v >= 0.0),
                "{k} in {calls}"
            );
        }
        assert!(row(imp, "µs")["value"].as_f64().unwrap() > 0.0);
    }
    assert!(row("limit", "µs")["value"].as_f64().unwrap() > 0.0);
    let notes = doc["notes"].to_string();
    assert!(notes.contains("direct/pull"), "{notes}");
}

#[test]
fn bench_progress_refuses_bad_arguments() {
    for args in [&["--", "1"][..], &["--", "2", "12"], &["--", "two"]] {
        let out = Command::new(TIERS)
            .args(["bench", "progress", "--min-time", "0.01", "--quiet"])
            .args(args)
            .output()
            .expect("tiers runs");
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("tiers bench progress:"), "{args:?}: {err}");
    }
}

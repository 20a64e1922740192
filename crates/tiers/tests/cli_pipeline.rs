//! The main job, end to end on small synthetic data.

use serde_json::Value;
use std::process::Command;

#[test]
fn pipeline_recovers_planted_families_and_writes_every_output() {
    let out = std::env::temp_dir().join(format!("tiers-pipeline-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let r = Command::new(env!("CARGO_BIN_EXE_tiers"))
        .args([
            "pipeline",
            "--n",
            "160",
            "--max-clusters",
            "4",
            "--threads",
            "2",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    for f in [
        "sequences.fasta",
        "distances.bin",
        "clusters.txt",
        "points.csv",
        "mds.png",
        "summary.json",
    ] {
        let m = std::fs::metadata(out.join(f)).unwrap_or_else(|_| panic!("{f} missing"));
        assert!(m.len() > 0, "{f} is empty");
    }
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["sequences"], 160);
    assert_eq!(s["clusters"], 4);
    let ari = s["ari_vs_planted_families"].as_f64().unwrap();
    assert!(ari >= 0.9, "families recovered with ARI {ari}");
    assert_eq!(
        std::fs::read_to_string(out.join("clusters.txt"))
            .unwrap()
            .lines()
            .count(),
        160
    );
    std::fs::remove_dir_all(&out).unwrap();

    let bad = Command::new(env!("CARGO_BIN_EXE_tiers"))
        .args(["pipeline", "--input", "/nonexistent.fasta", "--out"])
        .arg(std::env::temp_dir().join("tiers-pipeline-bad"))
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("/nonexistent.fasta"));
}

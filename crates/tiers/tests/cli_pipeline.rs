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

/// Runs the pipeline with `launch` (empty: alone) and returns its output directory.
fn pipeline_under(launch: &[&str], tag: &str, extra: &[&str]) -> std::path::PathBuf {
    let out = std::env::temp_dir().join(format!("tiers-pipeline-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let tiers = env!("CARGO_BIN_EXE_tiers");
    let mut cmd = Command::new(tiers);
    if !launch.is_empty() {
        cmd.arg("run").args(launch).arg("--").arg(tiers);
    }
    let r = cmd
        .arg("pipeline")
        .args(extra)
        .args(["--threads", "1", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        r.status.success(),
        "{launch:?}: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    out
}

/// The outputs every pattern must write byte for byte the same.
const SAME: [&str; 3] = ["distances.bin", "clusters.txt", "points.csv"];

fn assert_same_outputs(a: &std::path::Path, b: &std::path::Path) {
    for f in SAME {
        let (x, y) = (
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
        );
        assert!(!x.is_empty(), "{f} is empty");
        assert!(
            x == y,
            "{f} differs between {} and {}",
            a.display(),
            b.display()
        );
    }
}

#[test]
fn pipeline_across_ranks_writes_the_bytes_of_one_process() {
    let args = ["--n", "150", "--max-clusters", "5"];
    let alone = pipeline_under(&[], "alone", &args);
    let procs = pipeline_under(&["-n", "2"], "procs", &args);
    let threads = pipeline_under(&["-n", "3", "--engine", "local"], "local", &args);
    let tcp = pipeline_under(&["-n", "3", "--engine", "tcp", "--no-pin"], "tcp", &args);
    assert_same_outputs(&alone, &procs);
    assert_same_outputs(&alone, &threads);
    assert_same_outputs(&alone, &tcp);
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(procs.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["ranks"], 2);
    for d in [alone, procs, threads, tcp] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// SPIDAL's 2400 fungal sequences (`../shared/data/fungi`, or `$TIERS_DATA/fungi`): the
/// pipeline under `tiers run -n 2` gives the clusters and points of one process.
#[test]
fn fungi_pipeline_under_two_ranks_matches_one_process() {
    let dir = [
        std::env::var_os("TIERS_DATA").map(std::path::PathBuf::from),
        Some(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data").into()),
    ]
    .into_iter()
    .flatten()
    .map(|p| p.join("fungi/2400_gene_seq_testset.fna"))
    .find(|p| p.exists());
    let Some(fasta) = dir else {
        eprintln!("note: fungi data not found (set TIERS_DATA); skipping");
        return;
    };
    let fasta = fasta.to_string_lossy().into_owned();
    let args = ["--input", &fasta, "--max-clusters", "10"];
    let alone = pipeline_under(&[], "fungi-alone", &args);
    let ranks = pipeline_under(&["-n", "2"], "fungi-ranks", &args);
    assert_same_outputs(&alone, &ranks);
    let labels = std::fs::read_to_string(alone.join("clusters.txt")).unwrap();
    assert_eq!(labels.lines().count(), 2400);
    for d in [alone, ranks] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// The pipeline refuses, before any work, an `--out` directory whose outputs would overwrite
/// one of its inputs (the sequences, a reference), and leaves those files as they were.
#[test]
fn outputs_that_would_overwrite_an_input_are_refused_and_nothing_is_lost() {
    let dir = std::env::temp_dir().join(format!("tiers-pipeline-inputs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fasta = ">a\nACGTACGTAC\n>b\nACGTTCGTAC\n>c\nTCGTACGAAC\n";
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tiers"))
            .arg("pipeline")
            .args(extra)
            .arg("--out")
            .arg(&dir)
            .output()
            .unwrap()
    };
    // The sequences named as one of the outputs' names.
    let seqs = dir.join("points.csv");
    std::fs::write(&seqs, fasta).unwrap();
    let r = run(&["--input", seqs.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("is an input"), "{err}");
    assert_eq!(std::fs::read_to_string(&seqs).unwrap(), fasta);
    // A reference inside the output directory under an output's name.
    let seqs = dir.join("in.fasta");
    std::fs::write(&seqs, fasta).unwrap();
    let reference = dir.join("clusters.txt");
    std::fs::write(&reference, "0\n0\n1\n").unwrap();
    let r = run(&[
        "--input",
        seqs.to_str().unwrap(),
        "--reference-clusters",
        reference.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("is an input"), "{err}");
    assert_eq!(std::fs::read_to_string(&reference).unwrap(), "0\n0\n1\n");
    assert!(!dir.join("distances.bin").exists(), "no work was done");
    std::fs::remove_dir_all(&dir).unwrap();
}

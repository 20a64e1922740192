//! `tiers is` (NPB IS) run as a user would run it: one process, under `tiers run -n P` on
//! both engines, and with a corrupted rank that the verification must catch.

use std::process::Command;

const TIERS: &str = env!("CARGO_BIN_EXE_tiers");

fn tiers(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(TIERS).args(args).output().expect("tiers runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// The number after `label` in NPB's report.
fn field(out: &str, label: &str) -> f64 {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(label))
        .and_then(|r| r.trim_start_matches([' ', '=']).trim().parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} in {out}"))
}

fn assert_verified(code: Option<i32>, out: &str, err: &str, ranks: usize) {
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("VERIFICATION SUCCESSFUL"), "{out}");
    assert!(
        out.contains(&format!(
            "Checks passed   =  {:>24}",
            format!("{} of {}", 50 + ranks, 50 + ranks)
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("Total number of processes:  {ranks}")),
        "{out}"
    );
    assert!(field(out, "Mop/s total") > 0.0, "{out}");
}

#[test]
fn class_s_verifies_on_1_2_and_4_ranks() {
    let (code, out, err) = tiers(&["is", "--class", "S"]);
    assert_verified(code, &out, &err, 1);
    for n in ["2", "4"] {
        let (code, out, err) = tiers(&["run", "-n", n, "--", TIERS, "is", "--class", "S"]);
        assert_verified(code, &out, &err, n.parse().unwrap());
    }
}

#[test]
fn class_s_verifies_on_the_local_engine() {
    let (code, out, err) = tiers(&[
        "run", "-n", "2", "--engine", "local", "--", TIERS, "is", "--class", "S",
    ]);
    assert_verified(code, &out, &err, 2);
}

#[test]
fn a_corrupted_rank_fails_the_verification() {
    let (code, out, err) = tiers(&[
        "run",
        "-n",
        "2",
        "--",
        TIERS,
        "is",
        "--class",
        "S",
        "--corrupt-rank",
        "1",
    ]);
    assert_ne!(code, Some(0), "{out}{err}");
    assert!(out.contains("VERIFICATION FAILED"), "{out}");
    assert!(!out.contains("VERIFICATION SUCCESSFUL"), "{out}");
    assert!(
        err.contains("Processor 1:  Full_verify: number of keys out of sort"),
        "{err}"
    );
}

#[test]
fn bad_classes_and_rank_counts_are_refused() {
    let (code, _, err) = tiers(&["is", "--class", "Q"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("IS class"), "{err}");
    let (code, _, err) = tiers(&["run", "-n", "3", "--", TIERS, "is", "--class", "S"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("power of two"), "{err}");
}

#[test]
fn bench_is_runs_tiers_and_its_limit_and_notes_a_missing_npb() {
    let out = Command::new(TIERS)
        .args(["bench", "is", "S", "--min-time", "0.01", "--", "2"])
        .env_remove("TIERS_NPB_IS")
        .output()
        .expect("tiers runs");
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{text}{err}");
    let row = |imp: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(2) == Some(imp))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {imp} row in {text}"))
    };
    assert!(row("tiers") > 0.0 && row("limit") > 0.0, "{text}");
    assert!(text.contains("npb-mpi skipped: set TIERS_NPB_IS"), "{text}");
}

/// `--report FILE` writes the printed report to the file, on every engine; a report that
/// cannot be written is refused before the work starts, naming the file.
#[test]
fn report_goes_to_a_file_too() {
    let dir = std::env::temp_dir().join(format!("tiers-is-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, engine) in ["shm", "tcp"].iter().enumerate() {
        let file = dir.join(format!("r{i}.txt"));
        let f = file.to_str().unwrap();
        let (code, out, err) = tiers(&[
            "run", "--engine", engine, "-n", "2", "--", TIERS, "is", "--class", "S", "--report", f,
        ]);
        assert_verified(code, &out, &err, 2);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), out, "{engine}");
    }
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(left.len(), 2, "temporary files left: {left:?}");
    let (code, _, err) = tiers(&["is", "--report", "/nonexistent-dir/r.txt"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("/nonexistent-dir/"), "{err}");
    assert!(!err.contains("VERIFICATION"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

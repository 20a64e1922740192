//! `tiers redblack` and `tiers bench overlap`, run as a user would run them.

use serde_json::Value;
use std::process::Command;

fn tiers(args: &[&str], vars: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tiers"))
        .args(args)
        .envs(vars.iter().copied())
        .output()
        .expect("tiers runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

const VARIANTS: [&str; 6] = ["hand", "mt1", "mtp", "mtp-olap", "mtp-olap-xtra", "irr"];

/// The rows of the table: variant, then its columns.
fn rows(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .filter(|c| c.len() == 7 && VARIANTS.contains(&c[0].as_str()))
        .collect()
}

/// Every variant of Table 1 prints Total / Wait / Comp per iteration and the same residual
/// and error (they compute the same mesh), alone and across two ranks.
#[test]
fn redblack_variants_print_tables_2_3_and_agree() {
    let exe = env!("CARGO_BIN_EXE_tiers");
    let variants = VARIANTS.join(",");
    let args = [
        "redblack",
        "--n",
        "16",
        "--iters",
        "4",
        "--threads",
        "3",
        "--irr",
        "3:1",
        "--variant",
        &variants,
    ];
    for launch in [vec![], vec!["run", "-n", "2", "--", exe]] {
        let mut all: Vec<&str> = launch.clone();
        all.extend(args);
        let (code, out, err) = tiers(&all, &[]);
        assert_eq!(code, Some(0), "{err}");
        assert!(
            out.contains("ms per iteration, the maximum over ranks"),
            "{out}"
        );
        let rows = rows(&out);
        let names: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
        assert_eq!(names, VARIANTS, "{out}");
        let threads: Vec<&str> = rows.iter().map(|r| r[1].as_str()).collect();
        assert_eq!(threads, ["1", "1", "3", "3", "2+1", "2+1"], "{out}");
        for r in &rows {
            for c in &r[2..5] {
                let t: f64 = c.parse().expect("a time");
                assert!(t >= 0.0 && t.is_finite(), "{out}");
            }
            assert_eq!(r[5..], rows[0][5..], "residual and error: {out}");
        }
    }
}

#[test]
fn redblack_refuses_bad_arguments() {
    let (code, _, err) = tiers(&["redblack", "--threads", "3", "--irr", "3:1:1"], &[]);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("3 weights, but irr has 2 compute threads"),
        "{err}"
    );
    // A split for a variant that does not run.
    let (code, _, err) = tiers(
        &[
            "redblack",
            "--threads",
            "3",
            "--irr",
            "3:1",
            "--variant",
            "mtp",
        ],
        &[],
    );
    assert_ne!(code, Some(0));
    assert!(err.contains("not among the --variant given"), "{err}");
    let (code, _, err) = tiers(
        &["redblack", "--n", "4", "--iters", "18446744073709551615"],
        &[],
    );
    assert_ne!(code, Some(0));
    assert!(
        err.contains("--iters 18446744073709551615 is out of range"),
        "{err}"
    );
    let (code, _, err) = tiers(&["redblack", "--variant", "plain"], &[]);
    assert_ne!(code, Some(0));
    assert!(err.contains("mtp-olap-xtra"), "{err}");
    let (code, _, err) = tiers(&["redblack", "--n", "0"], &[]);
    assert_ne!(code, Some(0));
    assert!(err.contains("at least 1"), "{err}");
    // Sizes that would overflow or exhaust memory, absurd thread counts and weights are
    // errors that name them, before anything is allocated or started (no panic, no abort).
    for (args, want) in [
        (&["--n", "2097152"][..], "overflow"),
        (&["--n", "100000"], "more than this machine"),
        (&["--n", "18446744073709551615"], "overflow"),
        (&["--threads", "18446744073709551615"], "out of range"),
        (&["--threads", "100000"], "out of range"),
        (
            &[
                "--variant",
                "irr",
                "--threads",
                "3",
                "--irr",
                "9223372036854775807:1",
            ],
            "above",
        ),
    ] {
        let mut a = vec!["redblack"];
        a.extend(args);
        let (code, _, err) = tiers(&a, &[]);
        assert!(code.is_some_and(|c| c != 0), "{args:?}: {code:?} {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let (code, _, err) = tiers(&["bench", "redblack", "--", "2097152"], &[]);
    assert!(code.is_some_and(|c| c != 0), "{err}");
    assert!(
        err.contains("overflow") && !err.contains("panicked"),
        "{err}"
    );
    let (code, _, err) = tiers(&["bench", "progress", "--min-time", "1e18"], &[]);
    assert!(code.is_some_and(|c| c != 0), "{err}");
    assert!(
        err.contains("--min-time") && !err.contains("panicked"),
        "{err}"
    );
}

/// `tiers bench overlap` under two ranks with the proxy policy: every candidate, every size,
/// both parts, an overlap percentage in range, a memcpy limit per size, and the counters.
#[test]
fn overlap_bench_reports_every_policy_and_the_launched_world() {
    let exe = env!("CARGO_BIN_EXE_tiers");
    let (code, out, err) = tiers(
        &[
            "run",
            "-n",
            "2",
            "--",
            exe,
            "bench",
            "overlap",
            "--min-time",
            "0.001",
            "--json",
        ],
        &[("TIERS_PROGRESS", "proxy")],
    );
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(&out).expect("one JSON document from rank 0");
    let res = v["results"].as_array().expect("results");
    for imp in [
        "tiers-local-eager",
        "tiers-local-lazy",
        "tiers-local-proxy",
        "tiers-shm-proxy",
    ] {
        let mine: Vec<&Value> = res.iter().filter(|r| r["impl"] == imp).collect();
        assert_eq!(mine.len(), 7 * 2, "{imp}: {out}");
        for r in mine.iter().filter(|r| r["part"] == "exposed") {
            let pct = r["overlap_pct"].as_f64().expect("overlap_pct");
            assert!((0.0..=100.0).contains(&pct), "{r}");
        }
    }
    let limits = res
        .iter()
        .filter(|r| r["impl"] == "limit" && r["part"] == "comm")
        .count();
    assert_eq!(limits, 7, "{out}");
    let text = v.to_string();
    assert!(text.contains("tiers-shm-proxy: "), "{text}");
    assert!(text.contains("handed to the proxy"), "{text}");
}

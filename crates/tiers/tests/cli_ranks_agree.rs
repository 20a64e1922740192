//! Ranks of one job given different options: every command that runs across ranks stops
//! every rank with an error naming the option, instead of waiting for ever in a collective
//! the others never call or writing a mix of two computations.

mod common;

use common::{tiers, Dir};
use std::time::{Duration, Instant};

/// `tiers run -n 2 -- tiers ARGS…`, rank 0 with `zero`, rank 1 with `one` appended; must fail
/// naming `want`, well before the job's time limit.
fn disagree(args: &[&str], zero: &[&str], one: &[&str], want: &str) {
    let exe = env!("CARGO_BIN_EXE_tiers");
    let line = |extra: &[&str]| {
        std::iter::once(exe)
            .chain(args.iter().copied())
            .chain(extra.iter().copied())
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let script = format!(
        "if [ $TIERS_RANK = 0 ]; then exec {}; else exec {}; fi",
        line(zero),
        line(one)
    );
    let t = Instant::now();
    let (ok, _, err) = tiers(&[
        "run",
        "-n",
        "2",
        "--timeout",
        "100s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(!ok, "{args:?} {zero:?} / {one:?} passed");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains(&format!("the ranks were given different {want}")),
        "{args:?}: {want:?} not in:\n{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
}

#[test]
fn the_simulations_refuse_ranks_with_other_options() {
    let d = Dir::new("sims");
    disagree(
        &["md", "--n", "256"],
        &["--steps", "5"],
        &["--steps", "6"],
        "--steps",
    );
    disagree(
        &["md", "--n", "256", "--steps", "2"],
        &[],
        &["--energy", &d.path("e.csv")],
        "--energy",
    );
    disagree(
        &["fft2d", "--n", "64"],
        &["--variant", "plain"],
        &[],
        "--variant",
    );
    disagree(
        &["fft2d", "--n", "64"],
        &["--blocks", "2"],
        &["--blocks", "8"],
        "--blocks",
    );
    disagree(
        &["fft2d", "--n", "64"],
        &["--seed", "1"],
        &["--seed", "2"],
        "--seed",
    );
    disagree(
        &["redblack", "--n", "16"],
        &["--iters", "2"],
        &["--iters", "3"],
        "--iters",
    );
    disagree(
        &[
            "render",
            "--width",
            "64",
            "--height",
            "48",
            "--out",
            &d.path("x.png"),
        ],
        &["--tiles", "8"],
        &["--tiles", "16"],
        "image options",
    );
}

#[test]
fn the_data_applications_refuse_ranks_with_other_options() {
    let d = Dir::new("apps");
    let fa = d.path("s.fa");
    let (ok, _, err) = tiers(&["data", "alu", "--n", "40", "--out", &fa]);
    assert!(ok, "{err}");
    let fb = d.path("t.fa");
    let (ok, _, err) = tiers(&["data", "alu", "--n", "40", "--seed", "5", "--out", &fb]);
    assert!(ok, "{err}");
    let m = d.path("d.npy");
    let (ok, _, err) = tiers(&["distances", &fa, "--out", &m]);
    assert!(ok, "{err}");
    disagree(
        &["distances", "--out", &d.path("e.npy")],
        &[&fa],
        &[&fb],
        "inputs",
    );
    disagree(
        &["distances", &fa, "--out", &d.path("f.npy")],
        &["--metric", "kmer"],
        &["--metric", "kmer:3"],
        "--metric",
    );
    disagree(
        &["mds", &m, "--out", &d.path("p.csv")],
        &["--seed", "1"],
        &["--seed", "2"],
        "SMACOF options",
    );
    disagree(
        &["cluster", &m, "--out", &d.path("l.txt")],
        &["--max-clusters", "3"],
        &["--max-clusters", "5"],
        "clustering options",
    );
    disagree(
        &["cluster", &m, "--out", &d.path("l.txt")],
        &["--power", "1"],
        &["--power", "2"],
        "--power",
    );
}

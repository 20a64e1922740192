//! `tiers fft2d` and `tiers md` run as a user runs them: the same output bytes for one
//! process, two threads and two ranks (`tiers run -n 2`), and their refusals.

mod common;

use common::{tiers, Dir};

use tiers_apps::fft2d;

fn ok(args: &[&str]) -> String {
    let (ok, out, err) = tiers(args);
    assert!(ok, "tiers {args:?} failed:\n{err}");
    out
}

fn fail(args: &[&str]) -> String {
    let (ok, _, err) = tiers(args);
    assert!(!ok, "tiers {args:?} should fail");
    err
}

/// The patterns t x m: (threads, ranks).
const PATTERNS: [(&str, &str); 3] = [("1", "1"), ("2", "1"), ("1", "2")];

/// `tiers ARGS --threads t`, under `tiers run -n m` when m > 1.
fn pattern(t: &str, m: &str, args: &[&str]) -> String {
    let exe = env!("CARGO_BIN_EXE_tiers");
    let mut v: Vec<&str> = Vec::new();
    if m != "1" {
        v.extend(["run", "-n", m, "--no-pin", "--", exe]);
    }
    v.extend(args);
    v.extend(["--threads", t]);
    ok(&v)
}

#[test]
fn fft2d_gives_the_same_bytes_for_every_pattern_and_variant() {
    let dir = Dir::new("fft");
    let n = 48;
    let input = dir.path("in.npy");
    let x = fft2d::generate_rows(9, n, 0..n);
    std::fs::write(&input, fft2d::to_npy(n, &x)).unwrap();
    let mut want = x.clone();
    fft2d::fft2d(n, &mut want, 1).unwrap();
    let want = fft2d::to_npy(n, &want);
    for (t, m) in PATTERNS {
        for v in ["overlap", "plain"] {
            let out = dir.path(&format!("out-{t}-{m}-{v}.npy"));
            let text = pattern(
                t,
                m,
                &[
                    "fft2d",
                    "--input",
                    &input,
                    "--out",
                    &out,
                    "--variant",
                    v,
                    "--blocks",
                    "3",
                ],
            );
            assert!(text.contains(&format!("ranks={m}")), "{text}");
            assert!(std::fs::read(&out).unwrap() == want, "{t} x {m} {v}");
        }
    }
    // Generated input: the check against the serial transform sees identical bits.
    let text = pattern("1", "2", &["fft2d", "--n", "40", "--check"]);
    assert!(text.contains("identical bits"), "{text}");
}

#[test]
fn fft2d_refuses_bad_inputs_and_outputs() {
    let dir = Dir::new("fft-bad");
    let input = dir.path("in.npy");
    std::fs::write(&input, fft2d::to_npy(4, &fft2d::generate_rows(1, 4, 0..4))).unwrap();
    let e = fail(&["fft2d", "--input", &input, "--out", &input]);
    assert!(e.contains("refusing to overwrite"), "{e}");
    let e = fail(&["fft2d", "--n", "0"]);
    assert!(e.contains("out of range"), "{e}");
    let e = fail(&["fft2d", "--n", "1000000"]);
    assert!(e.contains("out of range"), "{e}");
    let e = fail(&["fft2d", "--n", "8", "--threads", "100000"]);
    assert!(e.contains("out of range"), "{e}");
    let e = fail(&["fft2d", "--n", "8", "--out", &dir.path("x.txt")]);
    assert!(e.contains("unknown output format"), "{e}");
    let bad = dir.path("bad.npy");
    std::fs::write(&bad, b"\x93NUMPY\x01\x00hello").unwrap();
    let e = fail(&["fft2d", "--input", &bad]);
    assert!(e.contains("bad.npy"), "{e}");
    assert!(!std::path::Path::new(&dir.path("x.txt")).exists());
}

#[test]
fn md_gives_the_same_trajectory_for_every_pattern_and_variant() {
    let dir = Dir::new("md");
    let mut want: Option<Vec<Vec<u8>>> = None;
    for (t, m) in PATTERNS {
        for v in ["overlap", "allgather"] {
            let files = [
                dir.path(&format!("x-{t}-{m}-{v}.npy")),
                dir.path(&format!("v-{t}-{m}-{v}.npy")),
                dir.path(&format!("e-{t}-{m}-{v}.csv")),
            ];
            let text = pattern(
                t,
                m,
                &[
                    "md",
                    "--n",
                    "70",
                    "--steps",
                    "200",
                    "--variant",
                    v,
                    "--out-x",
                    &files[0],
                    "--out-v",
                    &files[1],
                    "--energy",
                    &files[2],
                ],
            );
            assert!(text.contains(&format!("ranks={m}")), "{text}");
            let drift: f64 = text
                .split("largest relative drift ")
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("no drift in {text}"));
            assert!(drift < 1e-4, "{drift}");
            let got: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
            let energies = String::from_utf8(got[2].clone()).unwrap();
            assert_eq!(energies.lines().count(), 202, "header and steps 0..=200");
            match &want {
                None => want = Some(got),
                Some(w) => assert!(w == &got, "{t} x {m} {v}"),
            }
        }
    }
}

#[test]
fn md_refuses_bad_parameters() {
    let dir = Dir::new("md-bad");
    for (args, says) in [
        (&["md", "--n", "1"][..], "out of range"),
        (&["md", "--dt", "0"][..], "out of range"),
        (&["md", "--density", "9"][..], "out of range"),
        (&["md", "--n", "99999999"][..], "out of range"),
        (&["md", "--threads", "100000"][..], "out of range"),
    ] {
        let e = fail(args);
        assert!(e.contains(says), "{args:?}: {e}");
    }
    let x = dir.path("x.npy");
    let e = fail(&["md", "--n", "8", "--out-x", &x, "--out-v", &x]);
    assert!(e.contains("both name"), "{e}");
    let e = fail(&["md", "--n", "8", "--energy", &dir.path("e.npy")]);
    assert!(e.contains("unknown output format"), "{e}");
    // Within every range, yet too hot and dense for the time step: the energy explodes,
    // and the run says that its trajectory is not physical.
    let e = dir.path("e.csv");
    let (_, _, err) = tiers(&[
        "md",
        "--n",
        "64",
        "--steps",
        "200",
        "--dt",
        "0.05",
        "--temperature",
        "100",
        "--density",
        "1.2",
        "--energy",
        &e,
    ]);
    assert!(
        err.contains("not physical") || err.contains("became unstable"),
        "{err}"
    );
    // A stable run says nothing of the kind.
    let (ok, _, err) = tiers(&["md", "--n", "64", "--steps", "50", "--energy", &e]);
    assert!(ok && !err.contains("not physical"), "{err}");
}

/// The implementations of a benchmark's JSON report, each with a positive value.
fn bench_impls(args: &[&str]) -> Vec<String> {
    let out = ok(args);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("bad JSON: {e}\n{out}"));
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let x = r["value"].as_f64().unwrap_or(f64::NAN);
            assert!(x.is_finite() && x > 0.0, "{r}");
            r["impl"].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn the_benchmarks_run_across_ranks_with_their_limit_rows() {
    let exe = env!("CARGO_BIN_EXE_tiers");
    let fft = bench_impls(&[
        "run",
        "-n",
        "2",
        "--no-pin",
        "--",
        exe,
        "bench",
        "fft2d",
        "--threads",
        "1",
        "--json",
        "--",
        "64",
    ]);
    for want in ["tiers-overlap", "tiers-plain", "serial", "limit"] {
        assert!(fft.iter().any(|i| i == want), "{want} in {fft:?}");
    }
    let md = bench_impls(&[
        "run",
        "-n",
        "2",
        "--no-pin",
        "--",
        exe,
        "bench",
        "md",
        "--threads",
        "1",
        "--json",
        "--",
        "64",
    ]);
    for want in ["tiers-overlap", "allgather", "limit"] {
        assert!(md.iter().any(|i| i == want), "{want} in {md:?}");
    }
}

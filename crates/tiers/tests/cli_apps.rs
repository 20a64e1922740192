//! The application commands run as a user runs them: `tiers data alu`, `distances`, `cluster`,
//! `mds`, `render`, `model` and `bench scaling APP`, their files, progress and error messages.

mod common;

use common::{tiers, Dir};

use serde_json::Value;
use std::path::Path;
use tiers_apps::compare::{adjusted_rand_index, procrustes};
use tiers_apps::{matrix, mds};

fn ok(args: &[&str]) -> (String, String) {
    let (ok, out, err) = tiers(args);
    assert!(ok, "tiers {args:?} failed:\n{err}");
    (out, err)
}

fn fail(args: &[&str]) -> String {
    let (ok, _, err) = tiers(args);
    assert!(!ok, "tiers {args:?} should fail");
    err
}

fn labels_column(path: &str, col: usize) -> Vec<usize> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.split('\t').nth(col).unwrap().parse().unwrap())
        .collect()
}

#[test]
fn sequences_to_clusters_and_points() {
    let dir = Dir::new("pipe");
    let fa = dir.path("alu.fasta");
    let (_, err) = ok(&["data", "alu", "--n", "120", "--out", &fa]);
    assert!(err.contains("wrote 120 sequences"), "{err}");
    let planted = format!("{fa}.labels.txt");
    let subfamilies = labels_column(&planted, 2);
    assert_eq!(subfamilies.len(), 120);
    assert_eq!(
        subfamilies
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        12
    );

    // Distances with the default metric (SWG alignment), in every file format.
    let bin = dir.path("d.bin");
    let (_, err) = ok(&["distances", &fa, "--threads", "2", "--out", &bin]);
    assert!(err.contains("swg distances of 120 sequences"), "{err}");
    assert!(
        err.contains("[distances] 7140 of 7140 pairs (100 %)"),
        "progress: {err}"
    );
    assert_eq!(std::fs::metadata(&bin).unwrap().len(), 120 * 120 * 2);
    let d = matrix::read(Path::new(&bin), false, Some(120)).unwrap();
    for i in 0..120 {
        assert_eq!(d.get(i, i), 0.0);
        for j in 0..i {
            assert_eq!(d.get(i, j), d.get(j, i));
            assert!(d.get(i, j) > 0.0 && d.get(i, j) < 0.5, "{}", d.get(i, j));
        }
    }
    for (name, be) in [("d.npy", false), ("d.csv", false), ("be.bin", true)] {
        let p = dir.path(name);
        let mut args = vec!["distances", &fa, "--threads", "1", "--out", &p];
        if be {
            args.push("--big-endian");
        }
        ok(&args);
        let m = matrix::read(Path::new(&p), be, Some(120)).unwrap();
        for (a, b) in d.data.iter().zip(&m.data) {
            assert!((a - b).abs() <= 0.6 / 32767.0, "{name}: {a} vs {b}");
        }
    }

    // Clustering at the default settings, with as many clusters as planted subfamilies.
    let clusters = dir.path("c.txt");
    let (out, err) = ok(&[
        "cluster",
        &bin,
        "--max-clusters",
        "12",
        "--threads",
        "2",
        "--out",
        &clusters,
        "--reference",
        &planted,
    ]);
    assert!(err.contains("split cluster"), "progress: {err}");
    assert!(out.contains("adjusted Rand index"), "{out}");
    let got = labels_column(&clusters, 1);
    let ari = adjusted_rand_index(&got, &subfamilies);
    assert!(ari >= 0.9, "planted subfamilies recovered with ARI {ari}");
    let one = dir.path("c1.txt");
    ok(&[
        "cluster",
        &bin,
        "--max-clusters",
        "12",
        "--threads",
        "1",
        "--quiet",
        "--out",
        &one,
    ]);
    assert_eq!(
        std::fs::read_to_string(&one).unwrap(),
        std::fs::read_to_string(&clusters).unwrap(),
        "clusters independent of the thread count"
    );
    // SPIDAL's procedure (its split test and schedule): as many clusters as asked for, the
    // same whatever the thread count.
    let spidal: Vec<String> = ["1", "2"]
        .iter()
        .map(|threads| {
            let out = dir.path(&format!("cs{threads}.txt"));
            let (_, err) = ok(&[
                "cluster",
                &bin,
                "--max-clusters",
                "4",
                "--spidal",
                "--min-cluster-size",
                "5",
                "--threads",
                threads,
                "--out",
                &out,
            ]);
            assert!(err.contains("split cluster"), "progress: {err}");
            std::fs::read_to_string(&out).unwrap()
        })
        .collect();
    assert_eq!(
        spidal[0], spidal[1],
        "SPIDAL mode independent of the thread count"
    );
    let found = labels_column(&dir.path("cs1.txt"), 1);
    assert_eq!(
        found
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        4
    );

    // MDS: progress per iteration with both stresses, points file, plot coloured by cluster.
    let pts = dir.path("p.csv");
    let png = dir.path("mds.png");
    let runs = dir.path("runs.json");
    let (_, err) = ok(&[
        "mds",
        &bin,
        "--dims",
        "3",
        "--threads",
        "2",
        "--out",
        &pts,
        "--plot",
        &png,
        "--labels",
        &clusters,
        "--runs",
        &runs,
    ]);
    assert!(
        err.contains("[mds] iteration 1: stress") && err.contains("normalised"),
        "{err}"
    );
    let text = std::fs::read_to_string(&pts).unwrap();
    assert_eq!(text.lines().count(), 120);
    assert!(text.lines().all(|l| l.split(',').count() == 4));
    let (x, _) = mds::parse_points(&text, 3, "p.csv").unwrap();
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    // Comparing with a reference: the same points, rotated, agree perfectly.
    let rotated: String = x
        .chunks(3)
        .enumerate()
        .map(|(i, p)| format!("{i}\t{}\t{}\t{}\n", -p[1], p[0], p[2]))
        .collect();
    let refp = dir.path("ref.txt");
    std::fs::write(&refp, rotated).unwrap();
    let (y, _) = mds::parse_points(&std::fs::read_to_string(&refp).unwrap(), 3, "r").unwrap();
    assert!(procrustes(&x, &y, 3).disparity < 1e-9);
    let (out, _) = ok(&[
        "mds",
        &bin,
        "--threads",
        "1",
        "--quiet",
        "--out",
        &dir.path("q.txt"),
        "--reference",
        &refp,
        "--max-iter",
        "0",
    ]);
    assert!(out.contains("procrustes disparity"), "{out}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&runs).unwrap()).unwrap();
    assert_eq!(r["runs"][0]["app"], "mds");
    assert_eq!(r["runs"][0]["size"], 120);
}

#[test]
fn render_is_the_same_image_whatever_the_schedule() {
    let dir = Dir::new("render");
    let mut sums = Vec::new();
    let mut images = Vec::new();
    for (sched, threads) in [("static", "1"), ("static", "2"), ("dynamic", "2")] {
        let png = dir.path(&format!("{sched}{threads}.png"));
        let (_, err) = ok(&[
            "render",
            "--width",
            "160",
            "--height",
            "120",
            "--tiles",
            "16",
            "--max-iter",
            "200",
            "--schedule",
            sched,
            "--threads",
            threads,
            "--out",
            &png,
        ]);
        let sum = err
            .split("checksum ")
            .nth(1)
            .and_then(|s| s.split(';').next())
            .unwrap_or_else(|| panic!("no checksum in {err}"))
            .to_string();
        sums.push(sum);
        images.push(std::fs::read(&png).unwrap());
    }
    assert!(sums.iter().all(|s| s == &sums[0]), "{sums:?}");
    assert!(images.iter().all(|i| i == &images[0]));
    // Across ranks (processes over shared memory, or threads as ranks), tiles from one global
    // counter at rank 0: the same bytes, written once by rank 0.
    let exe = env!("CARGO_BIN_EXE_tiers");
    for (engine, sched, threads) in [
        ("shm", "dynamic", "1"),
        ("shm", "static", "1"),
        ("local", "dynamic", "1"),
        ("shm", "dynamic", "2"),
        ("tcp", "dynamic", "2"),
    ] {
        let png = dir.path(&format!("ranks-{engine}-{sched}-{threads}.png"));
        let (_, err) = ok(&[
            "run",
            "-n",
            "2",
            "--engine",
            engine,
            "--no-pin",
            "--",
            exe,
            "render",
            "--width",
            "160",
            "--height",
            "120",
            "--tiles",
            "16",
            "--max-iter",
            "200",
            "--schedule",
            sched,
            "--threads",
            threads,
            "--out",
            &png,
        ]);
        assert_eq!(err.matches("wrote").count(), 1, "{err}");
        assert!(err.contains("2 ranks"), "{err}");
        assert!(
            std::fs::read(&png).unwrap() == images[0],
            "{engine} {sched} {threads}"
        );
    }
    let e = fail(&[
        "render",
        "--schedule",
        "guided",
        "--out",
        &dir.path("x.png"),
    ]);
    assert!(e.contains("unknown schedule"), "{e}");
}

#[test]
fn scaling_feeds_the_overhead_model() {
    let dir = Dir::new("model");
    let runs = dir.path("runs.json");
    let (out, _) = ok(&[
        "bench",
        "scaling",
        "render",
        "--threads",
        "1,2",
        "--min-time",
        "0.01",
        "--json",
        "--",
        "--sizes",
        "64,96",
        "--out",
        &runs,
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["bench"], "scaling-render");
    assert_eq!(v["results"].as_array().unwrap().len(), 4);
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&runs).unwrap()).unwrap();
    assert_eq!(r["runs"].as_array().unwrap().len(), 4);

    // A runs file with a known overhead f = 0.1·(p − 1): the model must find it.
    let known = dir.path("known.json");
    let mut rs = Vec::new();
    for n in [1000, 4000] {
        for p in 1..=4 {
            let f = 0.1 * (p - 1) as f64;
            rs.push(serde_json::json!({"app": "x", "threads": p, "size": n, "seconds": 8.0 * (1.0 + f) / p as f64}));
        }
    }
    std::fs::write(&known, serde_json::json!({ "runs": rs }).to_string()).unwrap();
    let svg = dir.path("f.svg");
    let (out, _) = ok(&["model", &known, "--json", "--factors", "p", "--plot", &svg]);
    let m: Value = serde_json::from_str(&out).unwrap();
    let pts = m["points"].as_array().unwrap();
    let p4 = pts.iter().find(|p| p["p"] == 4).expect("a p = 4 point");
    assert!((p4["efficiency"].as_f64().unwrap() - 1.0 / 1.3).abs() < 1e-9);
    assert!((p4["overhead"].as_f64().unwrap() - 0.3).abs() < 1e-9);
    let fits = m["fits"].as_array().unwrap();
    assert_eq!(fits.len(), 1, "only the chosen factor: {fits:?}");
    assert_eq!(fits[0]["factors"][0], "P");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    let (text, _) = ok(&["model", &known]);
    assert!(text.contains("efficiency") && text.contains("R²"), "{text}");
    let e = fail(&["model", &known, "--factors", "q"]);
    assert!(e.contains("unknown factor"), "{e}");
}

#[test]
fn bad_inputs_name_the_file_and_the_problem() {
    let dir = Dir::new("bad");
    let fa = dir.path("bad.fasta");
    std::fs::write(&fa, ">a\nACGT\nACXT\n").unwrap();
    let e = fail(&[
        "distances",
        &fa,
        "--metric",
        "kmer",
        "--out",
        &dir.path("d.bin"),
    ]);
    assert!(e.contains(&format!("{fa}:3:")) && e.contains("'X'"), "{e}");
    let e = fail(&[
        "distances",
        &fa,
        "--metric",
        "blast",
        "--out",
        &dir.path("d.bin"),
    ]);
    assert!(e.contains("unknown metric"), "{e}");

    let good = dir.path("good.fasta");
    std::fs::write(&good, ">a\nACGTACGT\n>b\nACGTTCGT\n>c\nACG\n").unwrap();
    let e = fail(&[
        "distances",
        &good,
        "--metric",
        "hamming",
        "--out",
        &dir.path("h.bin"),
    ]);
    assert!(e.contains("equal-length"), "{e}");
    let d = dir.path("d.bin");
    ok(&["distances", &good, "--metric", "kmer:3", "--out", &d]);
    let bytes = std::fs::read(&d).unwrap();
    assert_eq!(bytes.len(), 3 * 3 * 2);
    let cut = dir.path("cut.bin");
    std::fs::write(&cut, &bytes[..bytes.len() - 1]).unwrap();
    let e = fail(&["mds", &cut, "--out", &dir.path("p.txt")]);
    assert!(e.contains(&cut) && e.contains("truncated"), "{e}");
    let odd = dir.path("odd.bin");
    std::fs::write(&odd, &bytes[..bytes.len() - 2]).unwrap();
    let e = fail(&["cluster", &odd, "--out", &dir.path("c.txt")]);
    assert!(e.contains(&odd) && e.contains("wrong size"), "{e}");
    let csv = dir.path("m.csv");
    std::fs::write(&csv, "0,1\n1,0,2\n").unwrap();
    let e = fail(&["mds", &csv, "--out", &dir.path("p.txt")]);
    assert!(e.contains(&format!("{csv}: line 2: wrong size")), "{e}");
    let e = fail(&["mds", &dir.path("missing.bin"), "--out", &dir.path("p.txt")]);
    assert!(e.contains("missing.bin"), "{e}");
    let e = fail(&["cluster", &d, "--threads", "0", "--out", &dir.path("c.txt")]);
    assert!(e.contains("--threads"), "{e}");
}

#[test]
fn outputs_never_destroy_inputs_or_old_results() {
    let dir = Dir::new("outputs");
    let fa = dir.path("s.fa");
    ok(&["data", "alu", "--n", "30", "--out", &fa]);
    let fasta = std::fs::read(&fa).unwrap();
    // The output is the input, or has a format the command does not write: refused, input kept.
    let e = fail(&["distances", &fa, "--metric", "kmer", "--out", &fa]);
    assert!(e.contains("unknown output format"), "{e}");
    let alias = dir.path("s.FA");
    std::fs::rename(&fa, &alias).unwrap();
    std::fs::rename(&alias, &fa).unwrap();
    let d = dir.path("d.bin");
    ok(&["distances", &fa, "--metric", "kmer", "--out", &d, "--quiet"]);
    let e = fail(&["mds", &d, "--out", &d]);
    assert!(
        e.contains("unknown output format") || e.contains("is an input"),
        "{e}"
    );
    let pts = dir.path("p.csv");
    let e = fail(&["mds", &d, "--out", &pts, "--plot", &pts]);
    assert!(
        e.contains("unknown output format") || e.contains("both name"),
        "{e}"
    );
    let labels = dir.path("l.txt");
    let e = fail(&["cluster", &d, "--out", &labels, "--reference", &labels]);
    assert!(e.contains("is an input"), "{e}");
    assert_eq!(std::fs::read(&fa).unwrap(), fasta);
    // A run that fails after the outputs were checked leaves the previous output whole.
    ok(&[
        "cluster",
        &d,
        "--out",
        &labels,
        "--max-clusters",
        "2",
        "--quiet",
    ]);
    let before = std::fs::read(&labels).unwrap();
    let bad = dir.path("bad.txt");
    std::fs::write(&bad, "0\t0\n").unwrap();
    let e = fail(&[
        "cluster",
        &d,
        "--out",
        &labels,
        "--reference",
        &bad,
        "--quiet",
    ]);
    assert!(e.contains("labels"), "{e}");
    assert_eq!(std::fs::read(&labels).unwrap(), before);
    // Nothing written where the directory is missing, and the work does not start.
    let e = fail(&["render", "--out", &dir.path("no/such/img.png")]);
    assert!(e.contains("cannot write"), "{e}");
}

#[test]
fn matrices_that_are_not_distances_are_refused() {
    let dir = Dir::new("invalid");
    for (name, text, want) in [
        ("nan.csv", "0,NaN\nNaN,0\n", "(0, 1)"),
        ("neg.csv", "0,-1\n-1,0\n", "negative"),
        ("diag.csv", "0.5,1\n1,0\n", "diagonal"),
        ("asym.csv", "0,1\n2,0\n", "not symmetric"),
        ("empty.csv", "", "empty"),
    ] {
        let p = dir.path(name);
        std::fs::write(&p, text).unwrap();
        for cmd in ["mds", "cluster"] {
            let e = fail(&[cmd, &p, "--out", &dir.path("o.txt")]);
            assert!(e.contains(name) && e.contains(want), "{cmd} {name}: {e}");
        }
    }
    let (_, err) = ok(&[
        "cluster",
        &dir.path("asym.csv"),
        "--symmetrize",
        "--out",
        &dir.path("o.txt"),
        "--quiet",
    ]);
    assert!(err.contains("symmetrized 1 pairs"), "{err}");
    // A SPIDAL file read in the wrong byte order says so.
    let be = dir.path("be.bin");
    std::fs::write(&be, [0u8, 0, 0x01, 0x80, 0x01, 0x80, 0, 0]).unwrap();
    let e = fail(&["cluster", &be, "--out", &dir.path("o.txt")]);
    assert!(e.contains("--big-endian"), "{e}");
    // Parameters out of range are errors, not endless loops or aborts.
    let two = dir.path("two.csv");
    std::fs::write(&two, "0,1\n1,0\n").unwrap();
    for (args, want) in [
        (vec!["cluster", &two, "--cooling", "1"], "cooling"),
        (vec!["cluster", &two, "--cooling", "NaN"], "cooling"),
        (vec!["cluster", &two, "--fine-cooling", "2"], "cooling"),
        (
            vec!["cluster", &two, "--cooling", "0.999999999"],
            "temperature steps to cool",
        ),
        (vec!["cluster", &two, "--power", "0"], "--power"),
        (
            vec!["mds", &two, "--dims", "100000000000"],
            "more than 1024",
        ),
        (vec!["mds", &two, "--threshold=-1"], "threshold"),
    ] {
        let mut a = args.clone();
        let o = dir.path("o.txt");
        a.extend(["--out", &o]);
        let e = fail(&a);
        assert!(e.contains(want), "{args:?}: {e}");
    }
    let png = dir.path("i.png");
    for (args, want) in [
        (vec!["render", "--width", "0"], "--width"),
        (vec!["render", "--tiles", "0"], "--tiles"),
        (vec!["render", "--max-iter", "0"], "--max-iter"),
        (
            vec!["render", "--width", "100000000", "--height", "100000000"],
            "memory",
        ),
        (vec!["data", "alu", "--families", "0"], "--families"),
        (vec!["data", "alu", "--n", "0"], "--n"),
        (vec!["data", "alu", "--mutation", "2"], "mutation"),
    ] {
        let mut a = args.clone();
        let out = if args[0] == "render" {
            png.clone()
        } else {
            dir.path("x.fa")
        };
        a.extend(["--out", &out]);
        let e = fail(&a);
        assert!(e.contains(want), "{args:?}: {e}");
    }
}

#[test]
fn distances_across_ranks_are_the_same_bytes() {
    let dir = Dir::new("dist-ranks");
    let fa = dir.path("s.fa");
    ok(&["data", "alu", "--n", "90", "--out", &fa]);
    let exe = env!("CARGO_BIN_EXE_tiers");
    for (metric, ext) in [("kmer", "bin"), ("swg:native", "npy"), ("hamming", "bin")] {
        let one = dir.path(&format!("one-{ext}.{ext}"));
        let (ok1, _, err) = tiers(&[
            "distances",
            &fa,
            "--metric",
            metric,
            "--out",
            &one,
            "--quiet",
        ]);
        if metric == "hamming" {
            // Alu copies differ in length: refused the same way on every pattern.
            assert!(!ok1 && err.contains("equal-length"), "{err}");
            let e = fail(&[
                "run",
                "-n",
                "2",
                "--",
                exe,
                "distances",
                &fa,
                "--metric",
                metric,
                "--out",
                &dir.path("h.bin"),
                "--quiet",
            ]);
            assert!(e.contains("equal-length"), "{e}");
            continue;
        }
        assert!(ok1, "{err}");
        let want = std::fs::read(&one).unwrap();
        // 1x2x1, 1x3x1, 2x2x1 (threads x ranks x hosts) on every engine of one host.
        for (engine, n, threads) in [
            ("shm", "2", "1"),
            ("shm", "3", "1"),
            ("shm", "2", "2"),
            ("local", "2", "2"),
            ("tcp", "2", "1"),
        ] {
            let out = dir.path(&format!("{engine}-{n}-{threads}.{ext}"));
            let (_, err) = ok(&[
                "run",
                "-n",
                n,
                "--engine",
                engine,
                "--no-pin",
                "--",
                exe,
                "distances",
                &fa,
                "--metric",
                metric,
                "--threads",
                threads,
                "--out",
                &out,
                "--quiet",
            ]);
            assert_eq!(err.matches("wrote").count(), 1, "{err}");
            assert!(
                std::fs::read(&out).unwrap() == want,
                "{metric} {engine} -n {n} x {threads}"
            );
        }
        // No temporary file is left beside the output.
        let left: Vec<String> = std::fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}

#[test]
fn mds_across_ranks_gives_the_same_points() {
    let dir = Dir::new("mds-ranks");
    let fa = dir.path("s.fa");
    ok(&["data", "alu", "--n", "120", "--out", &fa]);
    let d = dir.path("d.npy");
    ok(&["distances", &fa, "--metric", "kmer", "--out", &d, "--quiet"]);
    let one = dir.path("one.csv");
    ok(&["mds", &d, "--out", &one, "--max-iter", "40", "--quiet"]);
    let want = std::fs::read(&one).unwrap();
    let exe = env!("CARGO_BIN_EXE_tiers");
    for (engine, n, threads) in [
        ("shm", "2", "1"),
        ("shm", "3", "1"),
        ("shm", "2", "2"),
        ("local", "2", "2"),
        ("tcp", "2", "1"),
    ] {
        let out = dir.path(&format!("{engine}-{n}-{threads}.csv"));
        let plot = dir.path(&format!("{engine}-{n}-{threads}.svg"));
        let (_, err) = ok(&[
            "run",
            "-n",
            n,
            "--engine",
            engine,
            "--no-pin",
            "--",
            exe,
            "mds",
            &d,
            "--out",
            &out,
            "--plot",
            &plot,
            "--max-iter",
            "40",
            "--threads",
            threads,
            "--quiet",
        ]);
        assert!(err.contains(&format!("{n} ranks")), "{err}");
        assert!(
            std::fs::read(&out).unwrap() == want,
            "{engine} -n {n} x {threads}"
        );
        assert!(std::fs::read_to_string(&plot).unwrap().contains("<svg"));
    }
    // Clustering across ranks (each rank holds its rows of δ; the products are gathered):
    // the same labels, both procedures.
    for spidal in [false, true] {
        let mut args = vec!["--max-clusters", "4", "--quiet"];
        if spidal {
            args.extend(["--spidal", "--min-cluster-size", "5"]);
        }
        let one = dir.path(&format!("c1-{spidal}.txt"));
        let mut a1 = vec!["cluster", d.as_str(), "--out", one.as_str()];
        a1.extend(args.iter().copied());
        ok(&a1);
        for (engine, n, style) in [
            ("shm", "2", "loop"),
            ("local", "3", "loop"),
            ("shm", "2", "messages"),
            ("tcp", "2", "loop"),
        ] {
            let outp = dir.path(&format!("c-{engine}-{n}-{spidal}-{style}.txt"));
            let mut ar = vec![
                "run",
                "-n",
                n,
                "--engine",
                engine,
                "--no-pin",
                "--",
                exe,
                "cluster",
                d.as_str(),
                "--out",
                outp.as_str(),
                "--style",
                style,
                "--threads",
                "2",
            ];
            ar.extend(args.iter().copied());
            ok(&ar);
            assert_eq!(
                std::fs::read(&outp).unwrap(),
                std::fs::read(&one).unwrap(),
                "{engine} -n {n}, spidal {spidal}, {style}"
            );
        }
    }
}

#[test]
fn a_rank_killed_mid_run_leaves_no_output() {
    let dir = Dir::new("killed");
    let fa = dir.path("s.fa");
    ok(&["data", "alu", "--n", "4000", "--out", &fa]);
    let out = dir.path("d.bin");
    let exe = env!("CARGO_BIN_EXE_tiers");
    let script = format!(
        "if [ $TIERS_RANK = 1 ]; then (sleep 0.2; kill -9 $$) & fi; \\
         exec {exe} distances {fa} --metric kmer --out {out} --quiet"
    );
    let e = fail(&[
        "run", "-n", "2", "--grace", "0.5", "--", "sh", "-c", &script,
    ]);
    assert!(e.contains("rank 1") && e.contains("SIGKILL"), "{e}");
    let left: Vec<String> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "s.fa" && n != "s.fa.labels.txt")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn hybrid_runs_every_pattern_through_the_model() {
    let dir = Dir::new("hybrid");
    let runs = dir.path("runs.json");
    let (out, _) = ok(&[
        "bench", "hybrid", "mds", "--json", "--quiet", "--", "--rounds", "1", "--sizes", "150,200",
        "--out", &runs,
    ]);
    let j: Value = serde_json::from_str(&out).unwrap();
    let rows: Vec<&Value> = j["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["impl"] == "tiers")
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for size in [150, 200] {
        assert!(
            rows.iter()
                .any(|r| r["pattern"] == "1x1x1" && r["size"] == size && r["efficiency"] == 1.0),
            "{rows:?}"
        );
    }
    for r in &rows {
        let (t, m) = (r["threads"].as_u64().unwrap(), r["ranks"].as_u64().unwrap());
        assert!((t * m) as usize <= cores, "{r}");
        assert_eq!(r["pattern"], format!("{t}x{m}x1"), "{r}");
        assert!(r["value"].as_f64().unwrap() > 0.0, "{r}");
    }
    // The runs it wrote are a runs file for the model, with the pattern each app saw from
    // its launch: m ranks on this host, one host.
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&runs).unwrap()).unwrap();
    let recorded = file["runs"].as_array().unwrap();
    assert_eq!(recorded.len(), rows.len());
    for r in &rows {
        assert!(
            recorded.iter().any(|x| x["threads"] == r["threads"]
                && x["processes"] == r["ranks"]
                && x["nodes"] == 1
                && x["size"] == r["size"]),
            "{r} not in {recorded:?}"
        );
    }
    let (text, _) = ok(&["model", &runs]);
    assert!(text.contains("mds") && text.contains("1x1x1"), "{text}");
    if cores >= 2 {
        assert!(text.contains("1x2x1") && text.contains("2x1x1"), "{text}");
    }
}

//! Bad input as users type it: every command answers with a clear error and a nonzero exit,
//! before any work and before any output is touched, and never with a panic. One test per
//! kind of mistake, across the commands that share it.

mod common;

use common::{tiers, Dir};

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `tiers args`, which must fail with a message containing `want` and no panic.
fn refused(args: &[&str], want: &str) -> String {
    let (ok, _, err) = tiers(args);
    assert!(!ok, "tiers {args:?} should fail");
    assert!(!err.contains("panicked"), "tiers {args:?} panicked:\n{err}");
    assert!(
        err.contains(want),
        "tiers {args:?}: {want:?} not in:\n{err}"
    );
    err
}

/// An N×N `<f4` `.npy` whose header is padded to `pad` bytes or more (version 2 when long).
fn npy_f4(n: usize, data: &[f32], pad: usize) -> Vec<u8> {
    let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({n}, {n}), }}");
    let mut h = dict.into_bytes();
    let long = pad > 60_000;
    let start = if long { 12 } else { 10 };
    let total = (start + h.len() + 1).max(pad).div_ceil(64) * 64;
    h.resize(total - start - 1, b' ');
    h.push(b'\n');
    let mut f = b"\x93NUMPY".to_vec();
    if long {
        f.extend_from_slice(&[2, 0]);
        f.extend_from_slice(&(h.len() as u32).to_le_bytes());
    } else {
        f.extend_from_slice(&[1, 0]);
        f.extend_from_slice(&(h.len() as u16).to_le_bytes());
    }
    f.extend_from_slice(&h);
    for v in data {
        f.extend_from_slice(&v.to_le_bytes());
    }
    f
}

/// A symmetric N×N distance matrix (points on a line).
fn line(n: usize) -> Vec<f32> {
    (0..n * n)
        .map(|k| ((k / n) as f32 - (k % n) as f32).abs())
        .collect()
}

#[test]
fn thread_counts_beyond_the_limits_are_errors_not_aborts() {
    let d = Dir::new("threads");
    let png = d.path("r.png");
    for t in ["70000", "1000000000", "18446744073709551615"] {
        refused(
            &[
                "render",
                "--width",
                "8",
                "--height",
                "8",
                "--out",
                &png,
                "--threads",
                t,
            ],
            "out of range",
        );
        refused(
            &[
                "pipeline",
                "--n",
                "10",
                "--out",
                &d.path("p"),
                "--threads",
                t,
            ],
            "out of range",
        );
    }
    refused(
        &[
            "bench",
            "private",
            "--threads",
            "1-18446744073709551615",
            "--min-time",
            "0.01",
        ],
        "bad count list",
    );
    refused(
        &[
            "bench",
            "private",
            "--threads",
            "2000",
            "--min-time",
            "0.01",
        ],
        "more than 1024",
    );
}

#[test]
fn a_closed_or_full_standard_output_is_not_a_panic() {
    // Full: an error that says so.
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full");
    if let Ok(full) = full {
        for args in [&["topo"][..], &["bench", "list"][..]] {
            let out = Command::new(env!("CARGO_BIN_EXE_tiers"))
                .args(args)
                .stdout(Stdio::from(full.try_clone().unwrap()))
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{args:?}");
            assert!(!err.contains("panicked"), "{args:?}: {err}");
            assert!(
                err.contains("writing to the standard output"),
                "{args:?}: {err}"
            );
        }
    }
    // Closed (a reader that stopped, as `| head` does): a quiet, successful end.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_tiers"))
        .arg("topo")
        .stdout(Stdio::from(writer))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.status.success(), "{:?}: {err}", out.status);
}

#[test]
fn the_pipeline_checks_every_flag_before_it_writes() {
    let d = Dir::new("pipeline");
    let out = d.path("out");
    std::fs::create_dir_all(&out).unwrap();
    let seqs = d.0.join("out/sequences.fasta");
    std::fs::write(&seqs, ">earlier run\nACGT\n").unwrap();
    let refs = d.path("ref.txt");
    std::fs::write(&refs, "0\t1\n1\tx\n").unwrap();
    for (extra, want) in [
        (&["--metric", "bogus"][..], "bogus"),
        (&["--power", "nan"][..], "--power"),
        (&["--max-clusters", "0"][..], "--max-clusters"),
        (&["--n", "0"][..], "at least 1"),
        (&["--n", "18446744073709551615"][..], "overflow"),
        (&["--reference-clusters", &refs][..], "ref.txt"),
        // Generated sequences differ in length: Hamming cannot measure them.
        (&["--metric", "hamming"][..], "equal-length"),
    ] {
        let mut args = vec!["pipeline", "--out", &out];
        if !extra.contains(&"--n") {
            args.extend_from_slice(&["--n", "12"]);
        }
        args.extend_from_slice(extra);
        refused(&args, want);
        assert_eq!(
            std::fs::read_to_string(&seqs).unwrap(),
            ">earlier run\nACGT\n",
            "{extra:?} touched the earlier outputs"
        );
    }
}

/// A failed pipeline run leaves no directory it made itself.
#[test]
fn a_failed_pipeline_leaves_no_directory_behind() {
    let d = Dir::new("pipeline-dir");
    let out = d.path("new");
    refused(
        &[
            "pipeline", "--n", "12", "--metric", "hamming", "--out", &out,
        ],
        "equal-length",
    );
    assert!(
        !std::path::Path::new(&out).exists(),
        "{out} was left behind"
    );
}

/// Data a computation cannot answer for is refused instead of giving a wrong answer with
/// success: an FFT that overflows, sequences without a single k-mer, distances too small for
/// SMACOF's kernel, and a device given as an input file.
#[test]
fn inputs_that_would_give_wrong_results_are_refused() {
    let d = Dir::new("wrong-results");
    // 4 x 4 complex128 near f64's largest: finite input, infinite sums.
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    let mut h = b"{'descr': '<c16', 'fortran_order': False, 'shape': (4, 4), }".to_vec();
    h.resize(117, b' ');
    h.push(b'\n');
    npy.extend_from_slice(&(h.len() as u16).to_le_bytes());
    npy.extend_from_slice(&h);
    for _ in 0..16 {
        npy.extend_from_slice(&1.7e308f64.to_le_bytes());
        npy.extend_from_slice(&0f64.to_le_bytes());
    }
    let big = d.path("big.npy");
    std::fs::write(&big, &npy).unwrap();
    let out = d.path("o.npy");
    refused(
        &["fft2d", "--input", &big, "--out", &out, "--check"],
        "overflowed",
    );
    assert!(!std::path::Path::new(&out).exists());

    let fna = d.write("short.fna", ">a\nAC\n>b\nAC\n>c\nACGTACGT\n");
    refused(
        &[
            "distances",
            "--metric",
            "kmer",
            "--out",
            &d.path("o.csv"),
            &fna,
        ],
        "no 5 unambiguous bases in a row",
    );

    let tiny: Vec<f32> = line(4).iter().map(|v| v * 1e-20).collect();
    let m = d.path("tiny.npy");
    std::fs::write(&m, npy_f4(4, &tiny, 0)).unwrap();
    refused(
        &["mds", "--quiet", "--out", &d.path("p.csv"), &m],
        "scale the matrix up",
    );

    let zero = d.path("zero.npy");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    refused(&["mds", "--out", &d.path("q.csv"), &zero], "not a file");
}

#[test]
fn absurd_sizes_of_generated_data_are_refused_at_once() {
    let d = Dir::new("alu");
    let t = Instant::now();
    for (flag, v) in [
        ("--families", "100000000"),
        ("--subfamilies", "18446744073709551615"),
    ] {
        refused(
            &[
                "data",
                "alu",
                "--n",
                "10",
                flag,
                v,
                "--out",
                &d.path("x.fasta"),
            ],
            "families x subfamilies",
        );
    }
    assert!(t.elapsed() < Duration::from_secs(20));
    assert!(!d.0.join("x.fasta").exists());
}

/// A size that fits the machine but not the process's address-space limit (`ulimit -v`) is
/// refused by name, not an abort in the allocator.
#[test]
fn the_address_space_limit_is_judged_before_allocating() {
    let d = Dir::new("ulimit");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v 3000000 && exec '{}' fft2d --n 16384 --out '{}'",
            env!("CARGO_BIN_EXE_tiers"),
            d.path("y.npy")
        ))
        .output()
        .expect("sh");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("memory allocation"),
        "{err}"
    );
    assert!(err.contains("address-space limit"), "{err}");
    assert!(!d.0.join("y.npy").exists());
}

#[test]
fn reference_points_are_checked_before_the_output_is_written() {
    let d = Dir::new("mdsref");
    let m = d.path("m.npy");
    std::fs::write(&m, npy_f4(4, &line(4), 0)).unwrap();
    let out = d.path("p.txt");
    for (text, want) in [
        (
            "0 nan 0 0\n1 0 0 0\n2 0 0 0\n3 0 0 0\n",
            "not a finite number",
        ),
        ("0 0 0 0\n0 1 0 0\n2 0 0 0\n3 0 0 0\n", "point index"),
        // Every point the same: no spread to compare a fit with.
        (
            "0 1 1 1\n1 1 1 1\n2 1 1 1\n3 1 1 1\n",
            "at least two distinct points",
        ),
    ] {
        let r = d.path("ref.txt");
        std::fs::write(&r, text).unwrap();
        refused(
            &["mds", &m, "--out", &out, "--reference", &r, "--quiet"],
            want,
        );
        assert!(!std::path::Path::new(&out).exists());
    }
    refused(
        &["mds", &m, "--out", &out, "--dims", "1000000"],
        "more than 1024",
    );
}

#[test]
fn npy_headers_longer_than_64_kib_are_read() {
    let d = Dir::new("npyhead");
    let m = d.path("m.npy");
    std::fs::write(&m, npy_f4(5, &line(5), 70_000)).unwrap();
    let out = d.path("p.txt");
    let (ok, _, err) = tiers(&["mds", &m, "--out", &out, "--quiet"]);
    assert!(ok, "{err}");
    // Under ranks too (each rank reads its rows by offset past the header).
    let (ok, _, err) = tiers(&[
        "run",
        "-n",
        "2",
        "--",
        env!("CARGO_BIN_EXE_tiers"),
        "mds",
        &m,
        "--out",
        &d.path("q.txt"),
        "--quiet",
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        std::fs::read_to_string(d.path("q.txt")).unwrap()
    );
}

#[test]
fn matrices_across_ranks_are_judged_as_on_one_process() {
    let d = Dir::new("ranks");
    let tiers_bin = env!("CARGO_BIN_EXE_tiers");
    let n = 6;
    let mut asym = line(n);
    asym[n - 1] += 0.5; // (0, 5) against (5, 0)
    let a = d.path("asym.npy");
    std::fs::write(&a, npy_f4(n, &asym, 0)).unwrap();
    let z = d.path("zero.npy");
    std::fs::write(&z, npy_f4(0, &[], 0)).unwrap();
    for cmd in ["mds", "cluster"] {
        let o = d.path(&format!("{cmd}.txt"));
        refused(
            &[
                "run", "-n", "2", "--", tiers_bin, cmd, &a, "--out", &o, "--quiet",
            ],
            "not symmetric",
        );
        refused(
            &[
                "run", "-n", "2", "--", tiers_bin, cmd, &z, "--out", &o, "--quiet",
            ],
            "empty matrix",
        );
        refused(&[cmd, &z, "--out", &o, "--quiet"], "empty matrix");
        // Symmetrized, the ranks compute what one process computes.
        let one = d.path(&format!("{cmd}-1.txt"));
        let two = d.path(&format!("{cmd}-2.txt"));
        let (ok, _, err) = tiers(&[cmd, &a, "--out", &one, "--quiet", "--symmetrize"]);
        assert!(ok, "{err}");
        let (ok, _, err) = tiers(&[
            "run",
            "-n",
            "2",
            "--",
            tiers_bin,
            cmd,
            &a,
            "--out",
            &two,
            "--quiet",
            "--symmetrize",
        ]);
        assert!(ok, "{err}");
        assert_eq!(
            std::fs::read(&one).unwrap(),
            std::fs::read(&two).unwrap(),
            "{cmd}"
        );
    }
}

#[test]
fn a_power_that_overflows_the_distances_is_an_error() {
    let d = Dir::new("power");
    let m = d.path("m.npy");
    std::fs::write(&m, npy_f4(5, &line(5), 0)).unwrap();
    let o = d.path("c.txt");
    refused(
        &["cluster", &m, "--out", &o, "--power", "200", "--quiet"],
        "--power 200",
    );
    refused(
        &[
            "run",
            "-n",
            "2",
            "--",
            env!("CARGO_BIN_EXE_tiers"),
            "cluster",
            &m,
            "--out",
            &o,
            "--power",
            "1e10",
            "--quiet",
        ],
        "--power",
    );
    assert!(!std::path::Path::new(&o).exists());
}

#[test]
fn outputs_and_runs_files_are_checked_before_the_work() {
    let d = Dir::new("outs");
    let fasta = d.path("s.fasta");
    std::fs::write(&fasta, ">a\nACGTACGT\n>b\nACGTTCGT\n>c\nACGAACGT\n").unwrap();
    let runs = d.path("runs.json");
    std::fs::write(&runs, "garbage").unwrap();
    let out = d.path("d.bin");
    refused(
        &["distances", &fasta, "--out", &out, "--runs", &runs],
        "not a runs file",
    );
    assert!(
        !std::path::Path::new(&out).exists(),
        "the work ran before the runs file was read"
    );
    // A figure into a directory that does not exist: refused before the benchmark runs.
    let t = Instant::now();
    refused(
        &[
            "bench",
            "private",
            "--threads",
            "1",
            "--min-time",
            "60",
            "--plot",
            "/nonexistent-dir/x.svg",
        ],
        "cannot write in its directory",
    );
    assert!(t.elapsed() < Duration::from_secs(30));
    // A report that is a directory.
    refused(
        &["is", "--class", "S", "--report", &d.path("")],
        "is a directory",
    );
}

#[test]
fn install_and_network_mistakes_name_the_path_or_address() {
    let d = Dir::new("install");
    let prefix = d.path("pfx");
    std::fs::create_dir_all(&prefix).unwrap();
    std::fs::File::create(d.0.join("pfx/include"))
        .unwrap()
        .write_all(b"a file, not a directory")
        .unwrap();
    let (ok, _, err) = tiers(&["gaspi", "install", "--prefix", &prefix]);
    if !err.contains("is not built") {
        assert!(!ok);
        assert!(err.contains("include"), "{err}");
        assert!(
            !d.0.join("pfx/bin/tiers").exists(),
            "a partial install was left"
        );
    }
    let t = Instant::now();
    refused(
        &["gaspi", "net-limit", "--to", "garbage"],
        "\"garbage\" is not an address",
    );
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    refused(
        &["run", "-n", "1", "--timeout", "1e300h", "--", "true"],
        "not a duration a job can have",
    );
}

#[test]
fn a_negative_number_is_judged_as_a_value_not_taken_for_an_option() {
    // The value's own check answers (`-0.1` is not an unknown option `-0`).
    refused(&["md", "--dt", "-0.1"], "out of range");
    refused(&["run", "-n", "-2", "--", "true"], "invalid value '-2'");
    // A program's own arguments after `--` still reach it as they are.
    let (ok, out, err) = tiers(&["run", "-n", "1", "--", "echo", "-5", "-x"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "-5 -x");
}

#[test]
fn benchmark_options_after_the_double_dash_are_checked_before_any_work() {
    let t = Instant::now();
    for (args, want) in [
        (
            &[
                "bench",
                "scaling",
                "mds",
                "--threads",
                "1",
                "--quiet",
                "--",
                "--sizes",
                "1099511627776",
            ][..],
            "overflows",
        ),
        (
            &["bench", "mds", "--quiet", "--", "--sizes", "1000000"][..],
            "more than this machine",
        ),
        (
            &["bench", "mds", "--quiet", "--", "--sizes", "0"][..],
            "--sizes 0: at least 2",
        ),
        (
            &[
                "bench", "scaling", "render", "--quiet", "--", "--sizes", "0",
            ][..],
            "--sizes 0: at least 4",
        ),
        (
            &[
                "bench", "cluster", "--quiet", "--", "--k", "0", "--sizes", "50",
            ][..],
            "--k 0: at least 1",
        ),
        (
            &["bench", "render", "--quiet", "--", "--tile", "0"][..],
            "--tile 0",
        ),
        (
            &[
                "bench",
                "render",
                "--quiet",
                "--",
                "--max-iter",
                "99999999999",
            ][..],
            "--max-iter",
        ),
        (
            &["bench", "scaling", "mds", "--quiet", "--", "--bogus"][..],
            "unknown option --bogus",
        ),
        (
            &["bench", "distances", "--quiet", "--", "extra"][..],
            "unexpected argument \"extra\"",
        ),
        (
            &[
                "bench",
                "scaling",
                "mds",
                "--quiet",
                "--",
                "--sizes",
                "10",
                "--out",
                "/nonexistent-dir/x.json",
            ][..],
            "--out",
        ),
        (
            &[
                "bench",
                "hybrid",
                "render",
                "--",
                "--rounds",
                "18446744073709551615",
            ][..],
            "--rounds",
        ),
    ] {
        refused(args, want);
    }
    // Refused before any matrix was made or measured.
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
}

#[test]
fn fft2d_counts_every_array_it_will_hold_before_it_starts() {
    // Under 1.1 GB of address space, N = 4096 with --out holds five 256 MiB arrays at its peak
    // (the rows, the strips sent and received, the gathered result twice): refused up front
    // instead of an abort in the middle.
    let d = Dir::new("fft2d-memory");
    let exe = env!("CARGO_BIN_EXE_tiers");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v 1100000; exec {exe} fft2d --n 4096 --out {}",
            d.path("y.npy")
        ))
        .env_remove("TIERS_RANK")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        !err.contains("panicked") && !err.contains("memory allocation"),
        "{err}"
    );
    assert!(err.contains("5 arrays of 4096 x 4096"), "{err}");
    assert!(!std::path::Path::new(&d.path("y.npy")).exists());
}

#[test]
fn thread_counts_are_bounded_where_they_are_only_accepted() {
    for args in [
        &[
            "data",
            "alu",
            "--threads",
            "100000",
            "--out",
            "/tmp/never-written.fa",
        ][..],
        &["model", "/tmp/never-read.json", "--threads", "100000"][..],
    ] {
        refused(args, "at most 1024 threads");
    }
}

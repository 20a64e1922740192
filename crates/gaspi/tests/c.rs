//! The C side of the library: the C tests of `tests/c/` compiled against `libtiers_gaspi`
//! and run as one process and with 2 and 3 ranks on the cluster tier's launcher (the one
//! `tiers run` uses), and
//! the README's example program built through `tiers gaspi install` + `pkg-config` and run
//! with `tiers run`. Without a C compiler (or, for the example, the `tiers` binary) the test
//! says what it skipped and passes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tiers_cluster::launch::Job;

const CRATE: &str = env!("CARGO_MANIFEST_DIR");
/// Tests of `tests/c/`.
const TESTS: [&str; 18] = [
    "segments",
    "spin",
    "notify",
    "queues",
    "atomics",
    "collectives",
    "passive",
    "errors",
    "threads",
    "statistics",
    "term",
    "contention",
    "dead",
    "noterm",
    "group_dead",
    "init_retry",
    "stopped",
    "print",
];
/// No test of the suite takes more than a few seconds; a hang ends the job here.
const LIMIT: Duration = Duration::from_secs(120);

/// The C compiler (`$CC`, else `cc`) if it runs.
fn compiler() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let ok = Command::new(&cc)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(cc)
}

/// The build's output directory (`target/<profile>`), where cargo puts the library beside
/// the `deps/` directory of this test.
fn out_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// A fresh scratch directory under the build's output directory.
fn scratch(name: &str) -> PathBuf {
    let d = out_dir()
        .join("gaspi-c-tests")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch directory");
    d
}

fn compile(cc: &str, args: &[String]) {
    let out = Command::new(cc)
        .args(args)
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "{cc} {}:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn c_suite_on_one_two_and_three_ranks() {
    let Some(cc) = compiler() else {
        eprintln!("gaspi C tests skipped: no C compiler (set CC or install cc)");
        return;
    };
    // The library this test run built: `cargo test` leaves it in `deps/` beside the test
    // (the copy in `target/<profile>` is only refreshed by `cargo build -p tiers-gaspi`).
    let lib = std::env::current_exe()
        .expect("the test's own path")
        .parent()
        .expect("target/<profile>/deps")
        .to_path_buf();
    assert!(
        lib.join("libtiers_gaspi.so").exists(),
        "{} lacks libtiers_gaspi.so",
        lib.display()
    );
    let dir = scratch("suite");
    for t in TESTS {
        let exe = dir.join(t);
        compile(
            &cc,
            &[
                "-O1".into(),
                "-g".into(),
                "-Wall".into(),
                "-Wextra".into(),
                "-Werror".into(),
                format!("-I{CRATE}/include"),
                format!("{CRATE}/tests/c/{t}.c"),
                format!("-L{}", lib.display()),
                "-ltiers_gaspi".into(),
                format!("-Wl,-rpath,{}", lib.display()),
                "-pthread".into(),
                "-o".into(),
                exe.display().to_string(),
            ],
        );
        // One process started without a launcher (the local engine), where binding the
        // program's memory is not available (it needs the shm engine).
        // `cargo test` puts `target/<profile>` on `LD_LIBRARY_PATH` ahead of the rpath, where
        // an older library from `cargo build -p tiers-gaspi` may lie: each run names `lib`.
        let ld_path = lib.display().to_string();
        if t != "segments" {
            let out = Command::new(&exe)
                .env("LD_LIBRARY_PATH", &ld_path)
                .output()
                .expect("run the test alone");
            assert!(
                out.status.success(),
                "{t} as one process: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The shm engine with 2 and 3 ranks; the tcp engine (writes travel as messages,
        // applied by the library's watcher while a rank spins on its memory) with 2, for
        // every test but the one that binds memory (shm only).
        let tcp = t != "segments";
        for (engine, n) in [("shm", 2), ("shm", 3), ("tcp", 2)] {
            if engine == "tcp" && !tcp {
                continue;
            }
            let mut job = Job::new(n, &exe).env("LD_LIBRARY_PATH", &ld_path);
            job.engine = engine.into();
            job.timeout = Some(LIMIT);
            job.prefix = true;
            let out = job.run().expect("launch");
            assert!(
                out.success(),
                "{t} with {n} ranks on the {engine} engine: {:?} {:?}",
                out.ends,
                out.stop
            );
        }
    }
}

/// `tiers gaspi install --prefix PREFIX`, which must succeed.
fn install(tiers: &Path, prefix: &Path) {
    let st = Command::new(tiers)
        .args(["gaspi", "install", "--prefix"])
        .arg(prefix)
        .status()
        .expect("tiers gaspi install");
    assert!(
        st.success(),
        "tiers gaspi install --prefix {}",
        prefix.display()
    );
}

/// For `what`: the C compiler, the `tiers` binary, a scratch directory `name` and the
/// install made under its `prefix/`; `None`, saying why, without a compiler or the binary.
fn installed(what: &str, name: &str) -> Option<(String, PathBuf, PathBuf, PathBuf)> {
    let Some(cc) = compiler() else {
        eprintln!("{what} skipped: no C compiler (set CC or install cc)");
        return None;
    };
    let tiers = out_dir().join("tiers");
    if !tiers.exists() {
        eprintln!(
            "{what} skipped: {} is not built (cargo build --release -p tiers)",
            tiers.display()
        );
        return None;
    }
    let dir = scratch(name);
    let prefix = dir.join("prefix");
    install(&tiers, &prefix);
    Some((cc, tiers, dir, prefix))
}

/// The first ```c block after the README's "## Example" heading.
fn readme_example() -> String {
    let readme = std::fs::read_to_string(format!("{CRATE}/README.md")).expect("README.md");
    let at = readme.find("## Example").expect("an Example section");
    let rest = &readme[at..];
    let start = rest.find("```c\n").expect("a C block") + 5;
    let len = rest[start..].find("```").expect("the block's end");
    rest[start..start + len].to_string()
}

#[test]
fn readme_example_builds_with_pkg_config_and_runs() {
    let Some((cc, tiers, dir, prefix)) = installed("README example", "readme") else {
        return;
    };
    // Installing again over the first install (its links in place) works too.
    install(&tiers, &prefix);
    // The installed headers are the crate's.
    let installed = std::fs::read_to_string(prefix.join("include/GASPI.h")).expect("GASPI.h");
    let ours = std::fs::read_to_string(format!("{CRATE}/include/GASPI.h")).expect("GASPI.h");
    assert_eq!(installed, ours, "the tiers binary installs stale headers");
    std::fs::write(dir.join("hello.c"), readme_example()).expect("hello.c");
    let pc = Command::new("pkg-config")
        .args(["--cflags", "--libs", "tiers-gaspi"])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output();
    let flags: Vec<String> = match pc {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .map(String::from)
            .collect(),
        _ => {
            eprintln!("pkg-config is absent: the README's flags are spelled out instead");
            let p = prefix.display();
            vec![
                format!("-I{p}/include"),
                format!("-L{p}/lib"),
                "-ltiers_gaspi".into(),
                format!("-Wl,-rpath,{p}/lib"),
            ]
        }
    };
    let exe = dir.join("a.out");
    let mut args = vec![
        dir.join("hello.c").display().to_string(),
        "-o".into(),
        exe.display().to_string(),
    ];
    args.extend(flags);
    compile(&cc, &args);
    for n in ["2", "3"] {
        let out = Command::new(&tiers)
            .args(["run", "-n", n, "--"])
            .arg(&exe)
            .env("LD_LIBRARY_PATH", prefix.join("lib"))
            .output()
            .expect("tiers run");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "tiers run -n {n}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let n: usize = n.parse().unwrap();
        for r in 0..n {
            let left = (r + n - 1) % n;
            assert!(
                text.contains(&format!("rank {r} of {n} got: hello from rank {left}")),
                "rank {r}'s line is missing: {text}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A program linked against the installed `libGPI2.so` by its full path, as CMake links an
/// imported `GPI2::GPI2` target, records the library's SONAME rather than that path: it still
/// runs after the install has moved, found through `LD_LIBRARY_PATH`, started by the
/// install's `bin/gaspi_run`.
#[test]
fn a_program_linked_by_full_path_follows_the_soname() {
    let Some((cc, _, dir, prefix)) = installed("full-path link", "fullpath") else {
        return;
    };
    std::fs::write(dir.join("hello.c"), readme_example()).expect("hello.c");
    let exe = dir.join("a.out");
    compile(
        &cc,
        &[
            dir.join("hello.c").display().to_string(),
            format!("-I{}", prefix.join("include").display()),
            "-o".into(),
            exe.display().to_string(),
            prefix.join("lib/libGPI2.so").display().to_string(),
        ],
    );
    let moved = dir.join("moved");
    std::fs::rename(&prefix, &moved).expect("move the install");
    // Started by the install's own `gaspi_run`, as a GPI-2 user would.
    let out = Command::new(moved.join("bin/gaspi_run"))
        .args(["-n", "2"])
        .arg(&exe)
        .env("LD_LIBRARY_PATH", moved.join("lib"))
        .output()
        .expect("tiers run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("rank 1 of 2 got: hello from rank 0"),
        "the program linked by full path did not run from the moved install: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// An install whose `lib/` is where the library was built is refused before anything is
/// written: the library is still there, whole, and no header was laid down.
#[test]
fn an_install_over_its_own_source_is_refused() {
    let tiers = out_dir().join("tiers");
    if !tiers.exists() {
        eprintln!(
            "self-install check skipped: {} is not built",
            tiers.display()
        );
        return;
    }
    // The library `tiers gaspi install` takes: the newer of the two places cargo leaves it.
    let newest = [out_dir(), out_dir().join("deps")]
        .into_iter()
        .filter_map(|d| {
            let m = std::fs::metadata(d.join("libtiers_gaspi.so")).ok()?;
            Some((m.modified().ok()?, d, m.len()))
        })
        .max_by_key(|(t, _, _)| *t);
    let Some((_, src_dir, len)) = newest else {
        eprintln!("self-install check skipped: libtiers_gaspi.so is not built");
        return;
    };
    let dir = scratch("selfinstall");
    let prefix = dir.join("prefix");
    std::fs::create_dir_all(&prefix).expect("prefix");
    std::os::unix::fs::symlink(&src_dir, prefix.join("lib")).expect("lib link");
    let out = Command::new(&tiers)
        .args(["gaspi", "install", "--prefix"])
        .arg(&prefix)
        .output()
        .expect("tiers gaspi install");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "installing over the source succeeded: {err}"
    );
    assert!(err.contains("is the library being installed"), "{err}");
    let after = std::fs::metadata(src_dir.join("libtiers_gaspi.so")).expect("the library");
    assert_eq!(after.len(), len, "the library changed");
    assert!(!prefix.join("include").exists(), "headers were written");
}

/// GPI-2's own micro-benchmarks (`../shared/peers/GPI-2/tests/microbenchmarks`, test input that
/// is never copied here) through `tiers bench gaspi-micro`: their tables parse into rows of
/// microseconds per operation with a limit beside them. Skipped, saying why, without a C
/// compiler, the `tiers` binary or the peers folder.
#[test]
fn gpi2_micro_benchmarks_run_side_by_side() {
    let Some(_) = compiler() else {
        eprintln!("gaspi-micro skipped: no C compiler");
        return;
    };
    let tiers = out_dir().join("tiers");
    let src = Path::new(CRATE).join("../../../shared/peers/GPI-2/tests/microbenchmarks");
    if !tiers.exists() || !src.is_dir() {
        eprintln!(
            "gaspi-micro skipped: {} or {} is absent",
            tiers.display(),
            src.display()
        );
        return;
    }
    let out = Command::new(&tiers)
        .args([
            "bench",
            "gaspi-micro",
            "--json",
            "--quiet",
            "--min-time",
            "0.05",
            "--",
        ])
        .args([
            "--rounds",
            "1",
            "--only",
            "barrier,allreduce,write_lat",
            "--src",
        ])
        .arg(&src)
        .env_remove("GPI2_DIR")
        .output()
        .expect("tiers bench gaspi-micro");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_str(&text).expect("a JSON report");
    let rows = j["results"].as_array().expect("results");
    let tiers_rows = |p: &str| {
        rows.iter()
            .filter(|r| r["program"] == p && r["impl"] == "tiers")
            .count()
    };
    assert_eq!(tiers_rows("barrier"), 1, "{text}");
    assert!(tiers_rows("allreduce") >= 255, "{text}");
    assert!(tiers_rows("write_lat") >= 10, "{text}");
    for r in rows.iter().filter(|r| r["impl"] == "tiers") {
        let v = r["value"].as_f64().expect("a value");
        assert!(v > 0.0 && v < 1e6, "{r}");
    }
    assert!(rows
        .iter()
        .any(|r| r["impl"] == "limit" && r["program"] == "barrier"));
    let notes = j["notes"].to_string();
    assert!(notes.contains("GPI-2 not run"), "{notes}");
}

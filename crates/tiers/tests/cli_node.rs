//! The `tiers` command's node-tier subcommands, run as a user would run them.

mod common;

use common::tiers;

use serde_json::Value;

fn bench_json(name: &str, threads: &str) -> Value {
    let (ok, out, err) = tiers(&[
        "bench",
        name,
        "--threads",
        threads,
        "--min-time",
        "0.01",
        "--json",
    ]);
    assert!(ok, "tiers bench {name} failed: {err}");
    assert!(
        err.contains("[tiers bench]"),
        "progress goes to stderr: {err}"
    );
    let v: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("bad JSON from {name}: {e}\n{out}"));
    assert_eq!(v["bench"], name);
    assert!(v["unit"].is_string());
    assert!(v["lower_is_better"].is_boolean());
    assert!(v["machine"]["hw_threads"].as_u64().unwrap() >= 1);
    for r in v["results"].as_array().unwrap() {
        let x = r["value"].as_f64().unwrap_or(f64::NAN);
        assert!(
            x.is_finite() && x > 0.0,
            "{name}: row {r} has no positive value"
        );
    }
    v
}

fn impls(v: &Value) -> Vec<String> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["impl"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn topo_text_and_json_agree() {
    let (ok, text, _) = tiers(&["topo"]);
    assert!(ok);
    let (ok, json, _) = tiers(&["topo", "--json"]);
    assert!(ok);
    let v: Value = serde_json::from_str(&json).unwrap();
    let cores = v["cores"].as_array().unwrap().len();
    assert!(text.contains(&format!("{cores} core(s)")), "{text}");
    assert!(!v["affinity"].as_array().unwrap().is_empty());
    assert!(v["simd"]["level"].is_string());
}

#[test]
fn barrier_bench_has_every_tiers_barrier_and_the_rust_peer() {
    let v = bench_json("barrier", "2");
    let names = impls(&v);
    for want in [
        "tiers-active",
        "tiers-passive",
        "tiers-relaxed",
        "tiers-hier",
        "tiers-adaptive",
        "std",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "missing {want} in {names:?}"
        );
    }
    // C peers are there exactly when the build found a compiler; otherwise a note says so.
    let notes = v["notes"].to_string();
    assert!(names.iter().any(|n| n == "pthread") || notes.contains("pthread"));
    assert!(names.iter().any(|n| n == "openmp") || notes.contains("openmp"));
    assert!(v["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["threads"] == 2));
}

#[test]
fn lock_queue_private_alloc_benches_run() {
    let l = impls(&bench_json("lock", "2"));
    for want in [
        "tiers-ticket",
        "tiers-mcs",
        "tiers-ttas",
        "std",
        "parking_lot",
    ] {
        assert!(l.iter().any(|n| n == want), "lock: missing {want}");
    }
    let q = bench_json("queue", "1,2");
    let rows = q["results"].as_array().unwrap();
    let has = |case: &str, imp: &str, p: u64| {
        rows.iter()
            .any(|r| r["case"] == case && r["impl"] == imp && r["producers"] == p)
    };
    for want in [
        "tiers",
        "tiers-batch",
        "std-mpsc",
        "crossbeam-channel",
        "arrayqueue-per-producer",
    ] {
        for p in [1, 2] {
            assert!(has("stream", want, p), "queue: no stream {want} at {p}");
        }
    }
    // The latency case, with one producer: every queue, and the round trip it cannot beat.
    for want in [
        "tiers",
        "std-mpsc",
        "crossbeam-channel",
        "arrayqueue-per-producer",
    ] {
        assert!(has("ping-pong", want, 1), "queue: no ping-pong {want}");
    }
    assert!(!has("ping-pong", "tiers", 2));
    if two_cpus() {
        assert!(has("ping-pong", "limit", 1), "queue: no limit row");
    }
    assert!(q["notes"]
        .to_string()
        .contains("1024 messages per producer"));
    let p = impls(&bench_json("private", "1"));
    assert_eq!(
        p,
        vec![
            "array",
            "tiers-padded",
            "thread-local",
            "tiers-local",
            "limit"
        ]
    );
    // alloc: both allocators and its floor, the loop over a free list of the thread's own,
    // which neither beats.
    let a = bench_json("alloc", "1");
    let rows = a["results"].as_array().unwrap();
    let at = |imp: &str| {
        rows.iter()
            .find(|r| r["impl"] == imp && r["size"] == 16)
            .and_then(|r| r["value"].as_f64())
            .unwrap_or_else(|| panic!("alloc: no {imp} row at 16 B"))
    };
    assert!(at("limit") > 0.0 && at("mimalloc") > 0.0 && at("system") > 0.0);
}

#[test]
fn table_output_and_errors() {
    let (ok, out, _) = tiers(&[
        "bench",
        "private",
        "--threads",
        "1",
        "--min-time",
        "0.01",
        "--quiet",
    ]);
    assert!(ok);
    assert!(
        out.contains("private (ns, lower is better)") && out.contains("ratio"),
        "{out}"
    );
    let (ok, _, err) = tiers(&["bench", "nonesuch"]);
    assert!(!ok);
    assert!(err.contains("unknown benchmark \"nonesuch\""), "{err}");
    let (ok, _, err) = tiers(&["bench", "barrier", "--threads", "0"]);
    assert!(!ok && err.contains("at least 1"), "{err}");
    let (ok, _, err) = tiers(&["bench", "barrier", "--min-time=-1"]);
    assert!(!ok && err.contains("positive"), "{err}");
    let (ok, out, _) = tiers(&["bench", "list"]);
    assert!(ok && out.contains("barrier") && out.contains("alloc"));
}

/// Whether this process may run on two processors or more (the round-trip limit needs two).
fn two_cpus() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2)
}

#[test]
fn node_benches_measure_the_round_trip_limit_beside_the_implementations() {
    // private's limit is one thread on a line of its own: a row at every thread count.
    let v = bench_json("private", "1,2");
    let limits: Vec<&Value> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["impl"] == "limit")
        .collect();
    assert_eq!(limits.len(), 2, "private: {limits:?}");
    assert!(limits.iter().all(|r| r["measured"]
        .as_str()
        .is_some_and(|m| m.contains("one thread alone"))));
    for name in ["barrier", "lock"] {
        let v = bench_json(name, "1,2");
        let rows = v["results"].as_array().unwrap();
        let limits: Vec<&Value> = rows.iter().filter(|r| r["impl"] == "limit").collect();
        // Never at one thread: nothing crosses between cores.
        assert!(
            limits.iter().all(|r| r["threads"] == 2),
            "{name}: {limits:?}"
        );
        assert!(v["notes"].to_string().contains("limit: no row"), "{name}");
        if !two_cpus() {
            continue;
        }
        assert_eq!(limits.len(), 1, "{name}: one limit row at 2 threads");
        assert!(
            limits[0]["measured"]
                .as_str()
                .is_some_and(|m| m.contains("half a cache-line round trip between cpus")),
            "{name}: {}",
            limits[0]
        );
        // Every other row at 2 threads is read against it.
        for r in rows
            .iter()
            .filter(|r| r["threads"] == 2 && r["impl"] != "limit")
        {
            assert!(
                r["vs_limit"].as_f64().is_some_and(|x| x > 0.0),
                "{name}: {r}"
            );
        }
        assert!(rows
            .iter()
            .filter(|r| r["threads"] == 1)
            .all(|r| r.get("vs_limit").is_none()));
    }
    let (ok, out, _) = tiers(&[
        "bench",
        "barrier",
        "--threads",
        "2",
        "--min-time",
        "0.01",
        "--quiet",
    ]);
    assert!(ok);
    if two_cpus() {
        assert!(out.contains("vs limit") && out.contains("limit: half a cache-line round trip"));
    }
}

#[test]
fn mds_bench_has_the_read_limit_and_marginal_costs() {
    let (ok, out, err) = tiers(&[
        "bench",
        "mds",
        "--threads",
        "1",
        "--min-time",
        "0.01",
        "--json",
        "--quiet",
        "--",
        "--sizes",
        "120",
        "--iters",
        "3",
    ]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let rows = v["results"].as_array().unwrap();
    let at1 = |imp: &str| {
        rows.iter()
            .find(|r| r["impl"] == imp && r["threads"] == 1 && r["size"] == 120)
            .unwrap_or_else(|| panic!("no {imp} row at 1 thread in {out}"))
    };
    assert!(at1("limit")["measured"]
        .as_str()
        .unwrap()
        .contains("the 120x120 f32 matrix"));
    assert!(at1("tiers")["vs_limit"].as_f64().unwrap() > 0.0);
    assert!(at1("tiers-smacof")["value"].as_f64().unwrap() > 0.0);
    // The arithmetic floor: a bound, measured, positive.
    let divider = at1("divider");
    assert_eq!(divider["bound"], true);
    assert!(divider["value"].as_f64().unwrap() > 0.0);
    assert!(divider["measured"]
        .as_str()
        .unwrap()
        .contains("square roots and divisions"));
    // scikit-learn: a row when it is installed, else a note saying why not.
    let notes = v["notes"].to_string();
    if rows.iter().any(|r| r["impl"] == "scikit-learn") {
        // A marginal cost: at this tiny size noise can swallow it (it is clamped at zero).
        assert!(at1("scikit-learn")["value"].as_f64().unwrap() >= 0.0);
        assert!(notes.contains("iteration counts checked"), "{notes}");
    } else {
        assert!(notes.contains("scikit-learn skipped"), "{notes}");
    }
    let (ok, _, err) = tiers(&["bench", "mds", "--", "--iters", "1"]);
    assert!(!ok && err.contains("k >= 2"), "{err}");
}

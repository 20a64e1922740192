//! Compiles the C peers of `tiers bench` when a C compiler is there: the pthread peers with
//! any C compiler, the OpenMP peers when it also accepts `-fopenmp`. Without a compiler the
//! build goes on and the benchmarks print a note in place of those rows.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(tiers_peer_pthread)");
    println!("cargo::rustc-check-cfg=cfg(tiers_peer_openmp)");
    println!("cargo::rerun-if-changed=peers/pthread_peers.c");
    println!("cargo::rerun-if-changed=peers/openmp_peers.c");
    println!("cargo::rerun-if-env-changed=TIERS_NO_C_PEERS");
    if std::env::var_os("TIERS_NO_C_PEERS").is_some() {
        return;
    }
    let ok = cc::Build::new()
        .file("peers/pthread_peers.c")
        .opt_level(2)
        .warnings(false)
        .cargo_warnings(false)
        .try_compile("tiers_pthread_peers")
        .is_ok();
    if !ok {
        println!("cargo::warning=no C compiler: the pthread and OpenMP peers of `tiers bench` are skipped");
        return;
    }
    println!("cargo::rustc-link-lib=pthread");
    println!("cargo::rustc-cfg=tiers_peer_pthread");
    let mut omp = cc::Build::new();
    omp.file("peers/openmp_peers.c")
        .opt_level(2)
        .warnings(false)
        .cargo_warnings(false)
        .flag("-fopenmp");
    if omp.try_compile("tiers_openmp_peers").is_ok() {
        println!("cargo::rustc-link-lib=gomp");
        println!("cargo::rustc-cfg=tiers_peer_openmp");
    } else {
        println!("cargo::warning=the C compiler has no OpenMP: the openmp peers of `tiers bench` are skipped");
    }
}

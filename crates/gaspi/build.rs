//! Compiles the variadic printing helpers (`src/printf.c`), which Rust cannot define, and
//! names the shared library (`SONAME`).
//!
//! Without a `SONAME`, a program linked against the library by its full path (as CMake does
//! with an imported `GPI2::GPI2` target) records that path, so the install could not move and
//! `LD_LIBRARY_PATH` could not swap in the mpi engine's build; with it, such a program needs
//! `libtiers_gaspi.so`, found like any other library, whichever name (`libGPI2.so` too) it was
//! linked through.
fn main() {
    println!("cargo:rerun-if-changed=src/printf.c");
    cc::Build::new()
        .file("src/printf.c")
        .compile("tiers_gaspi_printf");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" || os == "freebsd" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtiers_gaspi.so");
    }
}

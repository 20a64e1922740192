//! Compiles the variadic printing helpers (`src/printf.c`), which Rust cannot define.
fn main() {
    println!("cargo:rerun-if-changed=src/printf.c");
    cc::Build::new()
        .file("src/printf.c")
        .compile("tiers_gaspi_printf");
}

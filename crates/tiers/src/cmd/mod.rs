//! The commands of `tiers`, one module per family: `topo` (the machine), `run` (the
//! launcher), `bench` (every benchmark), `apps` (data, distances, mds, cluster, render,
//! model) and `pipeline` (the main job).
//!
//! Where a new command goes: a module here with its clap `Args` and a `run(args)`, and one
//! variant in [`Command`].

mod agree;
pub mod apps;
pub mod bench;
pub mod fft2d;
pub mod gaspi;
pub mod is;
pub mod md;
mod net_limit;
pub(crate) mod outputs;
pub mod pipeline;
pub mod plot;
mod progress;
pub mod redblack;
mod rows_file;
pub mod run;
pub mod topo;

use clap::Subcommand;

/// An error that ends `tiers` with a chosen exit code (124 for a time limit, 128 + N for
/// signal N, as shells and `timeout` do).
#[derive(Debug)]
pub struct Exit {
    /// The process exit code.
    pub code: u8,
    /// What happened.
    pub msg: String,
}

impl Exit {
    /// An exit with `code` and a message.
    pub fn new(code: u8, msg: String) -> Exit {
        Exit { code, msg }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Exit {}

/// Writing to the standard output failed (a closed pipe, a full disk): what [`out!`] and
/// [`outln!`] return instead of panicking.
#[derive(Debug)]
pub struct Stdout(pub std::io::Error);

impl std::fmt::Display for Stdout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "writing to the standard output: {}", self.0)
    }
}

impl std::error::Error for Stdout {}

impl From<Stdout> for std::io::Error {
    fn from(e: Stdout) -> std::io::Error {
        e.0
    }
}

impl From<Stdout> for String {
    fn from(e: Stdout) -> String {
        e.to_string()
    }
}

/// Every command of `tiers`.
#[derive(Subcommand)]
pub enum Command {
    /// Print the machine's topology: packages, NUMA nodes, cores, hardware threads, caches, SIMD, affinity.
    Topo(topo::TopoArgs),
    /// Run a benchmark: tiers beside its peers in one run. `tiers bench list` names them all.
    Bench(bench::BenchArgs),
    /// The main job: sequences → distances → clustering → MDS → plot, on one node's cores.
    Pipeline(pipeline::PipelineArgs),
    /// Start N ranks of a program on this host, watch them and clean up (the cluster tier's launcher); exits with the status of the rank that failed first.
    Run(run::RunArgs),
    /// GASPI for C programs: install tiers' GASPI library and headers, or run a GASPI program like gaspi_run.
    Gaspi(gaspi::GaspiArgs),
    /// RedBlack3D: red-black Gauss-Seidel on an N³ mesh across the job's ranks, halos exchanged with or without overlap; Total/Wait/Comp per variant.
    Redblack(redblack::RedBlackArgs),
    /// Draw the figure of a benchmark report (`tiers bench NAME --json`) as SVG or PNG.
    Plot(plot::PlotArgs),
    /// NPB IS, the NAS integer sort, across the job's ranks in two-sided style: bucket sizes allreduced, keys exchanged by alltoallv, NPB's verification and Mop/s.
    Is(is::IsArgs),
    /// A complex N×N 2-D FFT across the job's ranks and threads, the transpose overlapped with the first pass or not; .npy in and out.
    Fft2d(fft2d::Fft2dArgs),
    /// Lennard-Jones molecular dynamics across the job's ranks and threads, positions broadcast each step overlapped with the forces or by a blocking allgather.
    Md(md::MdArgs),
    #[command(flatten)]
    App(apps::AppCommand),
}

impl Command {
    /// Runs the command.
    pub fn run(self) -> Result<(), Box<dyn std::error::Error>> {
        match self {
            Command::Topo(a) => topo::run(a),
            Command::Bench(a) => bench::run(a),
            Command::Pipeline(a) => pipeline::run(a),
            Command::Run(a) => run::run(a),
            Command::Gaspi(a) => gaspi::run(a),
            Command::Redblack(a) => redblack::run(a),
            Command::Plot(a) => plot::run(a),
            Command::Is(a) => is::run(a),
            Command::Fft2d(a) => fft2d::run(a),
            Command::Md(a) => md::run(a),
            Command::App(c) => apps::run(c),
        }
    }
}

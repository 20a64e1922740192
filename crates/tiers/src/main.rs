//! The `tiers` command: machine topology, benchmarks, the launcher and the applications.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod bench;
mod pipeline;

#[derive(Parser)]
#[command(
    name = "tiers",
    version,
    about = "tiers: a hybrid, multi-tier parallel runtime for multicore clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the machine's topology: packages, NUMA nodes, cores, hardware threads, caches, SIMD, affinity.
    Topo {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Where to read it from: `sysfs` (Linux /sys) or `hwloc` (needs the `hwloc` feature).
        #[arg(long, default_value = "sysfs", value_parser = ["sysfs", "hwloc"])]
        source: String,
    },
    /// Run a benchmark: tiers beside its peers in one run. `tiers bench list` names them all.
    Bench(bench::BenchArgs),
    /// The main job: sequences → distances → clustering → MDS → plot, on one node's cores.
    Pipeline(pipeline::PipelineArgs),
    /// Start N ranks of a program on this host, watch them and clean up (the cluster tier's launcher).
    Run(tiers_cluster::launch::RunArgs),
    #[command(flatten)]
    App(tiers_apps::cli::AppCommand),
}

#[cfg(feature = "hwloc")]
fn topo_hwloc() -> Result<tiers_node::Topology, String> {
    tiers_node::Topology::detect_hwloc()
}

#[cfg(not(feature = "hwloc"))]
fn topo_hwloc() -> Result<tiers_node::Topology, String> {
    Err(
        "built without hwloc: rebuild with `--features hwloc` (needs libhwloc-dev and libudev-dev)"
            .into(),
    )
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: Result<(), Box<dyn std::error::Error>> = match cli.command {
        Command::Topo { json, source } => {
            let t = if source == "hwloc" {
                topo_hwloc()
            } else {
                Ok(tiers_node::Topology::detect())
            };
            match t {
                Err(e) => Err(e.into()),
                Ok(t) if json => {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&t).expect("topology serialises")
                    );
                    Ok(())
                }
                Ok(t) => {
                    print!("{}", t.report());
                    Ok(())
                }
            }
        }
        Command::Bench(args) => bench::run(args),
        Command::Pipeline(args) => pipeline::run(args),
        Command::Run(args) => tiers_cluster::launch::run_cli(args),
        Command::App(cmd) => tiers_apps::cli::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tiers: error: {e}");
            ExitCode::FAILURE
        }
    }
}

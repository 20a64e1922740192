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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: Result<(), Box<dyn std::error::Error>> = match cli.command {
        Command::Topo { json } => {
            let t = tiers_node::Topology::detect();
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&t).expect("topology serialises")
                );
            } else {
                print!("{}", t.report());
            }
            Ok(())
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

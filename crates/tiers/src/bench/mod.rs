//! `tiers bench NAME`: dispatch to the benchmarks of each tier.

use clap::Args;
use tiers_bench::Opts;

/// Arguments of `tiers bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Benchmark name (`list` to see them all).
    pub name: String,
    /// Thread counts, e.g. `1,2` or `1-16`.
    #[arg(long, default_value = "1,2")]
    pub threads: String,
    /// Minimum measured seconds per implementation and configuration.
    #[arg(long, default_value_t = 0.5)]
    pub min_time: f64,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Arguments for the benchmark itself.
    #[arg(last = true)]
    pub rest: Vec<String>,
}

/// The node-tier benchmarks.
pub const NODE: &[(&str, &str)] = &[];

pub fn run(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let opts = Opts {
        threads: tiers_bench::parse_counts(&args.threads)?,
        min_time: args.min_time,
        json: args.json,
        progress: !args.quiet,
    };
    if args.name == "list" {
        for (n, what) in NODE {
            println!("{n:<12} {what}");
        }
        return Ok(());
    }
    let _ = opts;
    Err(format!("unknown benchmark {:?}; `tiers bench list` names them", args.name).into())
}

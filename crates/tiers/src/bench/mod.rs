//! `tiers bench NAME`: dispatch to the benchmarks of each tier.

mod alloc;
mod barrier;
mod lock;
mod peers;
mod private;
mod queue;
mod threads;

use clap::Args;
use tiers_bench::{Opts, Report};

/// Arguments of `tiers bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Benchmark name (`list` to see them all).
    pub name: String,
    /// What the benchmark runs, for those that take one (`tiers bench scaling mds`).
    pub target: Option<String>,
    /// Thread counts, e.g. `1,2` or `1-16` (each benchmark has its own default).
    #[arg(long)]
    pub threads: Option<String>,
    /// Minimum measured seconds per implementation and configuration.
    #[arg(long, default_value_t = 0.5)]
    pub min_time: f64,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Arguments for the benchmark itself (after `--`).
    #[arg(last = true)]
    pub rest: Vec<String>,
}

/// The node-tier benchmarks: name, what it measures.
pub const NODE: &[(&str, &str)] = &[
    (
        "barrier",
        "ns per barrier: tiers barriers vs std, pthread, OpenMP",
    ),
    (
        "lock",
        "ns per contended critical section: tiers locks vs std, parking_lot, pthread, OpenMP",
    ),
    (
        "queue",
        "messages/s, N producers one consumer: tiers PcQueue vs std-mpsc, crossbeam",
    ),
    (
        "private",
        "ns per access: per-thread counters in an array, padded, thread-local",
    ),
    (
        "alloc",
        "us per thread for 100,000 alloc/free pairs: system vs mimalloc",
    ),
];

fn node_bench(name: &str, opts: &Opts) -> Option<Report> {
    Some(match name {
        "barrier" => barrier::run(opts),
        "lock" => lock::run(opts),
        "queue" => queue::run(opts),
        "private" => private::run(opts),
        "alloc" => alloc::run(opts),
        _ => return None,
    })
}

pub fn run(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let explicit = args.threads.is_some();
    let mut opts = Opts {
        threads: match &args.threads {
            Some(s) => tiers_bench::parse_counts(s)?,
            None => vec![1, 2],
        },
        min_time: args.min_time,
        json: args.json,
        progress: !args.quiet,
    };
    if !(args.min_time > 0.0 && args.min_time.is_finite()) {
        return Err(format!(
            "--min-time must be a positive number of seconds, not {}",
            args.min_time
        )
        .into());
    }
    if args.name == "list" {
        for (n, what) in NODE
            .iter()
            .chain(tiers_apps::bench::APPS)
            .chain(tiers_cluster::bench::BENCHES)
        {
            println!("{n:<12} {what}");
        }
        return Ok(());
    }
    if args.name == "queue" && !explicit {
        opts.threads = Vec::new(); // its own default: 1-4 producers
    }
    #[cfg(feature = "mpi")]
    if let Some(r) = tiers_cluster::engine::mpi::bench::wanted()
        .then(|| tiers_cluster::engine::mpi::bench::run(&args.name, &opts))
        .flatten()
    {
        return r.map_err(Into::into);
    }
    let report = match node_bench(&args.name, &opts)
        .map(Ok)
        .or_else(|| {
            let rest: Vec<String> = args.target.iter().chain(&args.rest).cloned().collect();
            tiers_apps::bench::run(&args.name, &opts, &rest)
        })
        .or_else(|| tiers_cluster::bench::run(&args.name, &opts, &args.rest))
    {
        Some(r) => r?,
        None => {
            return Err(format!(
                "unknown benchmark {:?}; `tiers bench list` names them",
                args.name
            )
            .into())
        }
    };
    report.print(opts.json);
    Ok(())
}

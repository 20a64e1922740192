//! `tiers run`: the cluster tier's launcher on one host.

use std::time::Duration;
use tiers_cluster::launch::{self, Job};

/// Arguments of `tiers run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "ranks", default_value_t = 1)]
    pub n: usize,
    /// Engine: `shm` (one process per rank) or `local` (one process, a thread per rank).
    #[arg(long, default_value = "shm", value_parser = ["shm", "local"])]
    pub engine: String,
    /// Node-tier worker threads per rank (passed as TIERS_THREADS; pinning reserves cores).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Prefix every output line with `[rank]`.
    #[arg(long)]
    pub prefix: bool,
    /// Seconds the other ranks get to finish after one has failed.
    #[arg(long, default_value_t = 2.0)]
    pub grace: f64,
    /// Do not pin ranks to cores.
    #[arg(long)]
    pub no_pin: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Launches the job; an error naming every rank that failed.
pub fn run(a: RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    let grace = Duration::try_from_secs_f64(a.grace)
        .map_err(|_| format!("--grace must be a number of seconds, not {}", a.grace))?;
    if a.n == 0 {
        return Err("-n must be at least 1 rank".into());
    }
    if a.threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    launch::catch_termination();
    let mut job =
        Job::new(a.n, launch::resolve(&a.command[0])).args(a.command[1..].iter().cloned());
    job.engine = a.engine;
    job.threads = a.threads;
    job.prefix = a.prefix;
    job.pin = !a.no_pin;
    job.grace = grace;
    let out = job.run()?;
    if out.success() {
        return Ok(());
    }
    let bad: Vec<String> = out
        .ends
        .iter()
        .enumerate()
        .filter(|(_, e)| !e.ok())
        .map(|(r, e)| format!("rank {r}: {e}"))
        .collect();
    Err(format!("job failed ({})", bad.join(", ")).into())
}

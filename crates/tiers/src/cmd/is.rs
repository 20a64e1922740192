//! `tiers is`: NPB IS (the NAS Parallel Benchmarks' integer sort) across the ranks of the job
//! (`tiers_apps::is`), printed as NPB prints it: size, iterations, processes, time, Mop/s and
//! the verification, which says "VERIFICATION SUCCESSFUL" only when all 5 × 10 + P checks pass
//! (otherwise the command fails). Runs as one process, under `tiers run -n P` and under
//! `mpirun`.

use clap::Args;
use tiers_apps::is::{self, Class, Options};

/// `tiers is` arguments.
#[derive(Args, Debug)]
pub struct IsArgs {
    /// NPB class: S (2^16 keys), W (2^20), A (2^23), B (2^25) or C (2^27).
    #[arg(long, default_value = "S")]
    pub class: String,
    /// Corrupt this rank's sorted keys before the full verification (to see it fail).
    #[arg(long, hide = true)]
    pub corrupt_rank: Option<usize>,
}

/// Runs the command.
pub fn run(a: IsArgs) -> Result<(), Box<dyn std::error::Error>> {
    let class = Class::parse(&a.class)?;
    let opts = Options {
        corrupt_rank: a.corrupt_rank,
    };
    // Replicated (`tiers run --replicas R`): every replica of rank 0 prints the report and the
    // launcher forwards each line once.
    let out = tiers_cluster::spmd(|w| {
        let rank = match tiers_cluster::twosided::Placement::from_env(w) {
            Ok(Some(p)) => p.rank,
            _ => w.rank(),
        };
        (rank, is::run(w, class, opts))
    })?;
    let mut verified = true;
    for (r, o) in out {
        let rep = o.map_err(|e| format!("tiers is: rank {r}: {e}"))?;
        for f in &rep.failures {
            eprintln!("{f}");
        }
        verified &= rep.verified();
        if r == 0 {
            print_report(&rep);
        }
    }
    if !verified {
        return Err(super::Exit::new(1, "tiers is: verification failed".into()).into());
    }
    Ok(())
}

fn print_report(r: &is::Report) {
    let p = r.class.params();
    println!();
    println!(" NAS Parallel Benchmarks (tiers) -- IS Benchmark");
    println!();
    println!(
        " Size:  {}  (class {})",
        1u64 << p.total_keys_log2,
        r.class.letter()
    );
    println!(" Iterations:   {}", is::ITERATIONS);
    println!(" Total number of processes:  {}", r.ranks);
    println!();
    // Six decimals where NPB prints two: class S takes milliseconds, which two would round
    // to zero (and the benchmark reads this line).
    println!(" Time in seconds =  {:>24.6}", r.seconds);
    println!(" Mop/s total     =  {:>24.2}", r.mops);
    println!(" Operation type  =  {:>24}", "keys ranked");
    println!(
        " Checks passed   =  {:>24}",
        format!("{} of {}", r.passed, r.needed)
    );
    if r.verified() {
        println!(" Verification    =  {:>24}", "SUCCESSFUL");
        println!(" VERIFICATION SUCCESSFUL");
    } else {
        println!(" Verification    =  {:>24}", "UNSUCCESSFUL");
        println!(" VERIFICATION FAILED");
    }
}

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
    /// Also write the report to this file: whole, once (in a replicated job, by the first
    /// replica of rank 0 to finish; see `tiers_cluster::RankFile`).
    #[arg(long)]
    pub report: Option<std::path::PathBuf>,
    /// Corrupt this rank's sorted keys before the full verification (to see it fail).
    #[arg(long, hide = true)]
    pub corrupt_rank: Option<usize>,
}

/// Runs the command.
pub fn run(a: IsArgs) -> Result<(), Box<dyn std::error::Error>> {
    let class = Class::parse(&a.class)?;
    if let Some(p) = &a.report {
        // Refuse an unwritable report before the work starts.
        if std::fs::metadata(p).is_ok_and(|m| m.is_dir()) {
            return Err(format!("--report {} is a directory", p.display()).into());
        }
        drop(tiers_cluster::RankFile::create(p)?);
    }
    let opts = Options {
        corrupt_rank: a.corrupt_rank,
    };
    // Replicated (`tiers run --replicas R`): every replica of rank 0 prints the report and the
    // launcher forwards each line once. Unreplicated, a rank whose run fails marks itself
    // failed, so that ranks waiting for it hear of it (under mpirun its exit ends the job)
    // instead of waiting out their timeouts; a replica does not: its rank lives on in the
    // other replicas.
    let out = tiers_cluster::spmd(|w| match tiers_cluster::twosided::Placement::from_env(w) {
        // Replicated: no progress lines, which only one replica would write (the launcher
        // merges the replicas' output line by line, and expects the same lines from each).
        Ok(Some(p)) => (p.rank, is::run(w, class, opts)),
        _ => {
            let _beat = super::progress::Heartbeat::start("is", w.rank() == 0);
            (w.rank(), w.fail_if_err(is::run(w, class, opts)))
        }
    })?;
    let mut verified = true;
    for (r, o) in out {
        let rep = o.map_err(|e| format!("tiers is: rank {r}: {e}"))?;
        for f in &rep.failures {
            eprintln!("{f}");
        }
        verified &= rep.verified();
        if r == 0 {
            let text = report_text(&rep);
            out!("{text}")?;
            if let Some(p) = &a.report {
                let mut f = tiers_cluster::RankFile::create(p)?;
                std::io::Write::write_all(&mut f, text.as_bytes())?;
                f.commit()?;
            }
        }
    }
    if !verified {
        return Err(super::Exit::new(1, "tiers is: verification failed".into()).into());
    }
    Ok(())
}

/// The report as NPB prints it.
fn report_text(r: &is::Report) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let p = r.class.params();
    o.push('\n');
    let _ = writeln!(o, " NAS Parallel Benchmarks (tiers) -- IS Benchmark");
    o.push('\n');
    let _ = writeln!(
        o,
        " Size:  {}  (class {})",
        1u64 << p.total_keys_log2,
        r.class.letter()
    );
    let _ = writeln!(o, " Iterations:   {}", is::ITERATIONS);
    let _ = writeln!(o, " Total number of processes:  {}", r.ranks);
    o.push('\n');
    // Six decimals where NPB prints two: class S takes milliseconds, which two would round
    // to zero (and the benchmark reads this line).
    let _ = writeln!(o, " Time in seconds =  {:>24.6}", r.seconds);
    let _ = writeln!(o, " Mop/s total     =  {:>24.2}", r.mops);
    let _ = writeln!(o, " Operation type  =  {:>24}", "keys ranked");
    let _ = writeln!(
        o,
        " Checks passed   =  {:>24}",
        format!("{} of {}", r.passed, r.needed)
    );
    if r.verified() {
        let _ = writeln!(o, " Verification    =  {:>24}", "SUCCESSFUL");
        let _ = writeln!(o, " VERIFICATION SUCCESSFUL");
    } else {
        let _ = writeln!(o, " Verification    =  {:>24}", "UNSUCCESSFUL");
        let _ = writeln!(o, " VERIFICATION FAILED");
    }
    o
}

//! MPI's own numbers beside tiers' under `mpirun` (feature `mpi`): `ranks` and `put` with rows
//! `mpi` (MPI called directly), `tiers-mpi` (every rank its own host) and `tiers-shm`
//! (multi-tier).

use super::Outcome;
use tiers_bench::{Opts, Report};
use tiers_cluster::engine::mpi::bench as mpi_bench;

/// Whether this process was started by an MPI launcher.
pub fn wanted() -> bool {
    mpi_bench::wanted()
}

fn at_root(r: Report) -> Outcome {
    Ok(mpi_bench::is_root().then_some(r))
}

/// `ranks` under mpirun.
pub fn ranks(opts: &Opts) -> Outcome {
    at_root(mpi_bench::ranks(opts)?)
}

/// `put` under mpirun.
pub fn put(opts: &Opts) -> Outcome {
    at_root(mpi_bench::put(opts)?)
}

//! `tiers md`: Lennard-Jones molecular dynamics (velocity Verlet, all-pairs forces) across the
//! ranks of a job (`tiers run -n M`) and the threads of each rank, positions broadcast each
//! step either overlapped with the force computation (`overlap`, [GPI-MCTP] Fig. 7) or by a
//! blocking allgather (`allgather`). Writes the final positions and velocities (`.npy`, N×3
//! float64) and, on request, the energies of every step (`.csv`), from rank 0.

use super::outputs::{self, Output};
use clap::Args;
use std::fmt::Write as _;
use std::path::PathBuf;
use tiers_apps::md::{self, Energy, Options, Variant};
use tiers_cluster::{Op, Timeout, World};
use tiers_node::pool::Pool;

/// How positions meet the force computation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum VariantArg {
    /// Forces of the chunks present are computed while the others arrive.
    Overlap,
    /// Every chunk is waited for first, then the forces (the MPI-style peer).
    Allgather,
}

impl VariantArg {
    /// The library's variant.
    pub fn variant(self) -> Variant {
        match self {
            VariantArg::Overlap => Variant::Overlap,
            VariantArg::Allgather => Variant::Allgather,
        }
    }
}

/// `tiers md` arguments.
#[derive(Args, Debug)]
pub struct MdArgs {
    /// Particles.
    #[arg(long, default_value_t = 512)]
    pub n: usize,
    /// Steps.
    #[arg(long, default_value_t = 100)]
    pub steps: usize,
    /// Time step (reduced units).
    #[arg(long, default_value_t = 0.002)]
    pub dt: f64,
    /// Number density of the initial simple cubic lattice.
    #[arg(long, default_value_t = 0.8)]
    pub density: f64,
    /// Initial temperature.
    #[arg(long, default_value_t = 0.5)]
    pub temperature: f64,
    /// Seed of the initial velocities.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Threads per rank.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// How positions meet the force computation.
    #[arg(long, value_enum, default_value_t = VariantArg::Overlap)]
    pub variant: VariantArg,
    /// Final positions, an N×3 float64 `.npy`.
    #[arg(long)]
    pub out_x: Option<PathBuf>,
    /// Final velocities, an N×3 float64 `.npy`.
    #[arg(long)]
    pub out_v: Option<PathBuf>,
    /// Energies of every step, `.csv` (step,kinetic,potential,total); also prints the drift.
    #[arg(long)]
    pub energy: Option<PathBuf>,
}

/// Runs `tiers md`.
pub fn run(a: MdArgs) -> Result<(), Box<dyn std::error::Error>> {
    if a.threads == 0 || a.threads > super::fft2d::MAX_THREADS {
        return Err(format!(
            "tiers md: --threads {} is out of range 1..={}",
            a.threads,
            super::fft2d::MAX_THREADS
        )
        .into());
    }
    let o = Options {
        n: a.n,
        density: a.density,
        temperature: a.temperature,
        dt: a.dt,
        steps: a.steps,
        seed: a.seed,
    };
    o.validate()?;
    let mut outs = Vec::new();
    for (p, option, extensions) in [
        (&a.out_x, "--out-x", &["npy"][..]),
        (&a.out_v, "--out-v", &["npy"][..]),
        (&a.energy, "--energy", &["csv"][..]),
    ] {
        if let Some(path) = p {
            outs.push(Output {
                path,
                option,
                extensions,
            });
        }
    }
    outputs::check(&[], &outs)?;
    let res = tiers_cluster::spmd(|w| (w.rank(), w.fail_if_err(one_rank(w, &a, &o))))?;
    for (r, x) in res {
        x.map_err(|e| format!("tiers md: rank {r}: {e}"))?;
    }
    Ok(())
}

type Res = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The relative energy drift above which a run is reported as unphysical (a stable run of
/// velocity Verlet stays orders of magnitude below it).
const MAX_SANE_DRIFT: f64 = 0.1;

fn one_rank(w: &World, a: &MdArgs, o: &Options) -> Res {
    use super::agree::{same_options, word};
    same_options(
        w,
        &[
            ("--n", word(a.n)),
            ("--steps", word(a.steps)),
            ("--dt", word(a.dt.to_bits())),
            ("--density", word(a.density.to_bits())),
            ("--temperature", word(a.temperature.to_bits())),
            ("--seed", word(a.seed)),
            ("--variant", word(format!("{:?}", a.variant))),
            ("--energy (given or not)", word(a.energy.is_some())),
            ("--out-x (given or not)", word(a.out_x.is_some())),
            ("--out-v (given or not)", word(a.out_v.is_some())),
        ],
    )?;
    let pool = Pool::builder().threads(a.threads).build()?;
    let mut es: Vec<Energy> = Vec::new();
    let mut progress = super::progress::Progress::new("md", w.rank() == 0);
    let r = md::simulate(
        w,
        &pool,
        o,
        a.variant.variant(),
        a.energy.is_some(),
        |step, e| {
            es.extend(e);
            progress.at(step, a.steps, "steps");
        },
    )?;
    let t = r.times;
    let mut tmax = [0.0; 3];
    w.allreduce(
        &[t.total, t.wait, t.comp],
        &mut tmax,
        Op::Max,
        Timeout::Block,
    )?;
    // Particles thrown out of any meaningful range (overlapping particles and a large time
    // step) leave no finite coordinate: an error, not a result.
    if let Some(i) = r.x.iter().chain(&r.v).position(|c| !c.is_finite()) {
        return Err(format!(
            "the simulation became unstable: particle {} has a non-finite position or velocity \
             after {} steps; lower --dt or --temperature",
            (i % r.x.len()) / 3,
            o.steps
        )
        .into());
    }
    if w.rank() != 0 {
        return Ok(());
    }
    outln!(
        "md n={} steps={} dt={} ranks={} threads={} variant={:?} engine={}",
        o.n,
        o.steps,
        o.dt,
        w.size(),
        a.threads,
        a.variant,
        w.engine_name()
    )?;
    outln!(
        "total_s {:.6} wait_s {:.6} comp_s {:.6} steps_per_s {:.2} (max over ranks)",
        tmax[0],
        tmax[1],
        tmax[2],
        o.steps as f64 / tmax[0].max(1e-12)
    )?;
    if let (Some(path), Some(e0)) = (&a.energy, es.first()) {
        let e0 = e0.total();
        let drift = es
            .iter()
            .map(|e| ((e.total() - e0) / e0).abs())
            .fold(0.0, f64::max);
        outln!("energy: initial {e0:.10} largest relative drift {drift:.3e}")?;
        if drift.is_nan() || drift > MAX_SANE_DRIFT {
            eprintln!(
                "tiers md: warning: the total energy drifted by {drift:.3e} of its initial value \
                 (more than {MAX_SANE_DRIFT}): the time step is too large for this temperature \
                 and density, and the trajectory is not physical; lower --dt"
            );
        }
        let mut s = String::from("step,kinetic,potential,total\n");
        for (k, e) in es.iter().enumerate() {
            let _ = writeln!(s, "{k},{},{},{}", e.kinetic, e.potential, e.total());
        }
        tiers_apps::files::write_atomic(path, s.as_bytes())?;
        eprintln!("wrote {}", path.display());
    }
    for (p, v) in [(&a.out_x, &r.x), (&a.out_v, &r.v)] {
        if let Some(path) = p {
            tiers_apps::files::write_atomic(path, &md::to_npy(v))?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

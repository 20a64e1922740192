//! `tiers fft2d`: a complex N×N 2-D FFT across the ranks of a job (`tiers run -n M`) and the
//! threads of each rank, rows distributed by blocks, the transpose either overlapped with the
//! first pass (`overlap`, [GPI-MCTP] Fig. 6) or after it (`plain`), or by MPI's own
//! `MPI_Alltoallv` after it (`mpi`: under mpirun with the `mpi` feature, the message-passing
//! peer [GPI-MCTP] compares against). Input from a `.npy` (complex128, complex64, float64
//! or float32, either byte order, C or Fortran order) or generated from a seed; the result
//! to a complex128 `.npy` written by rank 0.

use super::outputs::{self, Output};
use clap::Args;
use std::path::PathBuf;
use tiers_apps::fft2d::{self, Dist, Variant};
use tiers_cluster::{Op, Timeout, World};

/// The most threads per rank `tiers fft2d` and `tiers md` start (each is an OS thread).
pub const MAX_THREADS: usize = 1024;

/// How the transpose meets the first pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum VariantArg {
    /// Each finished block of rows is sent (notified writes) while the next is transformed.
    Overlap,
    /// Every row is transformed, then everything is sent.
    Plain,
    /// As `plain`, the transpose by MPI's own `MPI_Alltoallv` (mpirun and the `mpi` feature).
    Mpi,
}

impl VariantArg {
    /// The library's variant.
    pub fn variant(self) -> Variant {
        match self {
            VariantArg::Overlap => Variant::Overlap,
            // The library's pattern of the first pass that `mpi` follows.
            VariantArg::Plain | VariantArg::Mpi => Variant::Plain,
        }
    }
}

/// `tiers fft2d` arguments.
#[derive(Args, Debug)]
pub struct Fft2dArgs {
    /// Input: an N×N `.npy` of complex128, complex64, float64 or float32 values, either byte
    /// order, C or Fortran order (else one is generated from --seed).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// N of the generated input.
    #[arg(long, default_value_t = 1024)]
    pub n: usize,
    /// Seed of the generated input.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output: the transform as an N×N complex128 `.npy` (rank 0 writes it).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Threads per rank.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// How the transpose meets the first pass.
    #[arg(long, value_enum, default_value_t = VariantArg::Overlap)]
    pub variant: VariantArg,
    /// Blocks of rows per rank in the overlapped first pass.
    #[arg(long, default_value_t = 8)]
    pub blocks: usize,
    /// Also transform the whole input serially at rank 0 and print the relative difference.
    #[arg(long)]
    pub check: bool,
}

/// Runs `tiers fft2d`.
pub fn run(a: Fft2dArgs) -> Result<(), Box<dyn std::error::Error>> {
    if a.threads == 0 || a.blocks == 0 {
        return Err("tiers fft2d: --threads and --blocks must be at least 1".into());
    }
    if a.threads > MAX_THREADS {
        return Err(format!(
            "tiers fft2d: --threads {} is out of range 1..={MAX_THREADS}",
            a.threads
        )
        .into());
    }
    if a.variant == VariantArg::Mpi && !mpi_launched() {
        return Err(
            "tiers fft2d: --variant mpi moves the transpose with MPI itself: it needs \
                    the mpi feature and a start by mpirun (mpirun -n 2 tiers fft2d --variant mpi)"
                .into(),
        );
    }
    if a.input.is_none() {
        // Per host, at the peak: every rank's rows, the strips it sends and receives (three
        // arrays of N x N in all), and with --out or --check rank 0's gathered result in its
        // segment and as a vector (two more), and the serial transform for --check (one more).
        let gathered = a.out.is_some() || a.check;
        fft2d::check_n(a.n, 3 + 2 * gathered as usize + a.check as usize)?;
    }
    if let Some(out) = &a.out {
        let ins: Vec<&std::path::Path> = a.input.iter().map(PathBuf::as_path).collect();
        outputs::check(
            &ins,
            &[Output {
                path: out,
                option: "--out",
                extensions: &["npy"],
            }],
        )?;
    }
    let res = tiers_cluster::spmd(|w| (w.rank(), w.fail_if_err(one_rank(w, &a))))?;
    for (r, o) in res {
        o.map_err(|e| format!("tiers fft2d: rank {r}: {e}"))?;
    }
    Ok(())
}

fn one_rank(w: &World, a: &Fft2dArgs) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use super::agree::{same_options, word};
    same_options(
        w,
        &[
            ("--input (given or not)", word(a.input.is_some())),
            ("--n", word(a.n)),
            ("--seed", word(a.seed)),
            ("--variant", word(format!("{:?}", a.variant))),
            ("--blocks", word(a.blocks)),
            ("--check", word(a.check)),
            ("--out (given or not)", word(a.out.is_some())),
        ],
    )?;
    let (me, size) = (w.rank(), w.size());
    // Every rank reads its own rows (the header check fails alike on every rank).
    let (n, mut rows) = match &a.input {
        Some(p) => fft2d::read_rows(p, |n| tiers_cluster::decomp::split(n, size, me))?,
        None => {
            let r = tiers_cluster::decomp::split(a.n, size, me);
            (a.n, fft2d::generate_rows(a.seed, a.n, r))
        }
    };
    let mut d = Dist::new(w, n, a.threads)?;
    let beat = super::progress::Heartbeat::start("fft2d", me == 0);
    let (zt, t) = match a.variant {
        VariantArg::Mpi => d.transform_with(&mut rows, &mut *mpi_alltoallv(w)?)?,
        v => d.transform(v.variant(), a.blocks, &mut rows)?,
    };
    drop(rows);
    drop(beat);
    let mut tmax = [0.0; 4];
    w.allreduce(
        &[t.total, t.first, t.wait, t.second],
        &mut tmax,
        Op::Max,
        Timeout::Block,
    )?;
    let x = if a.out.is_some() || a.check {
        d.gather(&zt)?
    } else {
        None
    };
    d.finish()?;
    if me != 0 {
        return Ok(());
    }
    outln!(
        "fft2d n={n} ranks={size} threads={} variant={:?} blocks={} engine={}",
        a.threads,
        a.variant,
        a.blocks,
        w.engine_name()
    )?;
    outln!(
        "total_s {:.6} first_pass_s {:.6} wait_s {:.6} second_pass_s {:.6} (max over ranks)",
        tmax[0],
        tmax[1],
        tmax[2],
        tmax[3]
    )?;
    if let Some(x) = x {
        // Finite input can still overflow in the sums (values near f64's largest): refused
        // rather than written out or checked as a result.
        if let Some(at) = x
            .iter()
            .position(|v| !(v.re.is_finite() && v.im.is_finite()))
        {
            return Err(format!(
                "fft2d: the transform overflowed: output element ({}, {}) is {}; the input's \
                 values are too large for sums of {n} x {n} terms in f64",
                at / n,
                at % n,
                x[at]
            )
            .into());
        }
        if a.check {
            let (_, mut s) = match &a.input {
                Some(p) => fft2d::read_rows(p, |n| 0..n)?,
                None => (n, fft2d::generate_rows(a.seed, n, 0..n)),
            };
            fft2d::fft2d(n, &mut s, a.threads)?;
            let same = x
                .iter()
                .zip(&s)
                .all(|(p, q)| p.re.to_bits() == q.re.to_bits() && p.im.to_bits() == q.im.to_bits());
            outln!(
                "check: relative difference to the serial transform {:.3e}{}",
                fft2d::relative_error(&x, &s),
                if same { " (identical bits)" } else { "" }
            )?;
        }
        if let Some(out) = &a.out {
            tiers_apps::files::write_atomic_with(out, |f| fft2d::write_npy(f, n, &x))?;
            eprintln!("wrote {}", out.display());
        }
    }
    Ok(())
}

/// Whether `--variant mpi` can run here: built with the `mpi` feature and started by mpirun.
pub fn mpi_launched() -> bool {
    #[cfg(feature = "mpi")]
    {
        tiers_cluster::engine::mpi::launched()
    }
    #[cfg(not(feature = "mpi"))]
    {
        false
    }
}

/// An all-to-all of bytes for [`Dist::transform_with`].
pub type Alltoallv = Box<fft2d::Alltoallv<'static>>;

/// The `mpi` variant's transpose: `MPI_Alltoallv` on MPI's own communicator, whose ranks must
/// be the world's.
///
/// # Errors
///
/// Without the `mpi` feature; when MPI cannot start or its ranks are not the world's.
pub fn mpi_alltoallv(w: &World) -> Result<Alltoallv, Box<dyn std::error::Error + Send + Sync>> {
    #[cfg(feature = "mpi")]
    {
        let mpi = tiers_cluster::engine::mpi::baseline::Mpi::init()?;
        if (mpi.rank(), mpi.size()) != (w.rank(), w.size()) {
            return Err(format!(
                "MPI's rank {} of {} is not the world's rank {} of {} (start the job with mpirun)",
                mpi.rank(),
                mpi.size(),
                w.rank(),
                w.size()
            )
            .into());
        }
        Ok(Box::new(move |s, sc, r, rc| {
            mpi.alltoallv_bytes(s, sc, r, rc)
                .map_err(|e| tiers_apps::Error::Invalid(format!("fft2d transpose: {e}")))
        }))
    }
    #[cfg(not(feature = "mpi"))]
    {
        let _ = w;
        Err("the mpi variant needs tiers built with the mpi feature".into())
    }
}

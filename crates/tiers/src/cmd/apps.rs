//! The application commands: `tiers data`, `distances`, `mds`, `cluster`, `render`, `model`.

use super::outputs::{self, Output};
use crate::plot;
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tiers_apps::alu::{generate, AluSpec};
use tiers_apps::clustering::{da_pwc, ClusterOptions, Event, Method};
use tiers_apps::compare::{adjusted_rand_index, procrustes};
use tiers_apps::distance::{pairwise_ranks, pairwise_with_progress, Metric};
use tiers_apps::mds::{smacof, MdsOptions};
use tiers_apps::model::Run;
use tiers_apps::render::{render_ranks, RenderSpec, TileSchedule};
use tiers_apps::{fasta, matrix, model};
use tiers_node::Pool;

type Res = Result<(), Box<dyn std::error::Error>>;

/// The application commands.
#[derive(Subcommand, Debug)]
pub enum AppCommand {
    /// Generate data sets (`tiers data alu --n N --out FILE.fasta`).
    Data(DataArgs),
    /// Pairwise sequence distances of a FASTA file, in parallel by row blocks.
    Distances(DistancesArgs),
    /// SMACOF multidimensional scaling of a distance matrix.
    Mds(MdsArgs),
    /// Deterministic-annealing pairwise clustering (DA-PWC) of a distance matrix.
    Cluster(ClusterArgs),
    /// Render a Mandelbrot image by tiles, statically or dynamically scheduled.
    Render(RenderArgs),
    /// The overhead model: speedup, efficiency, overhead and its 1-/2-factor fits from runs.
    Model(ModelArgs),
}

/// `tiers data`.
#[derive(Args, Debug)]
pub struct DataArgs {
    #[command(subcommand)]
    kind: DataKind,
}

#[derive(Subcommand, Debug)]
enum DataKind {
    /// Synthetic Alu-like sequences with planted family/subfamily labels (written to
    /// OUT.labels.txt as `index<TAB>family<TAB>subfamily`).
    Alu(AluArgs),
}

#[derive(Args, Debug)]
struct AluArgs {
    /// Number of sequences.
    #[arg(long, default_value_t = 3000, value_parser = at_least_one)]
    n: usize,
    /// Output FASTA file.
    #[arg(long)]
    out: PathBuf,
    /// Families.
    #[arg(long, default_value_t = 4, value_parser = at_least_one)]
    families: usize,
    /// Subfamilies per family.
    #[arg(long, default_value_t = 3, value_parser = at_least_one)]
    subfamilies: usize,
    /// Per-copy point mutation rate.
    #[arg(long, default_value_t = 0.02)]
    mutation: f64,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Accepted for uniformity; generation is serial.
    #[arg(long, default_value_t = 1, value_parser = thread_count)]
    threads: usize,
}

/// `tiers distances`.
#[derive(Args, Debug)]
pub struct DistancesArgs {
    /// Input FASTA.
    input: PathBuf,
    /// hamming, kmer (k = 5), kmer:K, swg (Smith-Waterman-Gotoh with rust-bio) or swg:native
    /// (tiers' own kernel: the same optimal scores, about 3x faster).
    #[arg(long, default_value = "swg")]
    metric: String,
    /// Output matrix (.bin SPIDAL int16, .npy, .csv).
    #[arg(long)]
    out: PathBuf,
    /// Write SPIDAL's format big-endian.
    #[arg(long)]
    big_endian: bool,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Append this run's time to a runs file for `tiers model`.
    #[arg(long)]
    runs: Option<PathBuf>,
    /// No progress on stderr.
    #[arg(long)]
    quiet: bool,
}

/// `tiers mds`.
#[derive(Args, Debug)]
pub struct MdsArgs {
    /// Distance matrix (.bin SPIDAL int16, .npy, .csv).
    input: PathBuf,
    /// Target dimension.
    #[arg(long, default_value_t = 3)]
    dims: usize,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Output points (`index,x,y,z` for .csv, tab-separated otherwise).
    #[arg(long)]
    out: PathBuf,
    /// Also plot the points (.svg or .png), coloured by --labels when given.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Cluster file (`index<TAB>cluster`) colouring the plot.
    #[arg(long)]
    labels: Option<PathBuf>,
    /// Block size of the blocked matrix multiply.
    #[arg(long, default_value_t = 64)]
    block: usize,
    /// Stop when an iteration lowers the stress by less than this fraction.
    #[arg(long, default_value_t = 1e-6)]
    threshold: f64,
    /// Iteration limit.
    #[arg(long, default_value_t = 1000)]
    max_iter: usize,
    /// Seed of the random start.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The matrix is SPIDAL big-endian.
    #[arg(long)]
    big_endian: bool,
    /// Accept an asymmetric matrix, averaging d(i, j) and d(j, i) (the count is reported).
    #[arg(long)]
    symmetrize: bool,
    /// Reference points (`index x y z …`, e.g. SPIDAL's) to compare with after a Procrustes fit.
    #[arg(long)]
    reference: Option<PathBuf>,
    /// Append this run's time to a runs file for `tiers model`.
    #[arg(long)]
    runs: Option<PathBuf>,
    /// Report the stress every K iterations (1: every iteration; the first ten always).
    #[arg(long, default_value_t = 10)]
    progress_every: usize,
    /// No per-iteration progress on stderr.
    #[arg(long)]
    quiet: bool,
}

/// `tiers cluster`.
#[derive(Args, Debug)]
pub struct ClusterArgs {
    /// Distance matrix (.bin SPIDAL int16, .npy, .csv).
    input: PathBuf,
    /// Most clusters.
    #[arg(long, default_value_t = 10)]
    max_clusters: usize,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Output `index<TAB>cluster` file.
    #[arg(long)]
    out: PathBuf,
    /// Cooling factor while splitting.
    #[arg(long, default_value_t = 0.9)]
    cooling: f64,
    /// Cooling factor once all clusters exist.
    #[arg(long, default_value_t = 0.99)]
    fine_cooling: f64,
    /// Freezing limit on the mean membership uncertainty (with --spidal: on every cluster's
    /// freezing measure).
    #[arg(long, default_value_t = 0.002)]
    freezing: f64,
    /// Most cluster splits at one temperature (0: no limit; not used with --spidal).
    #[arg(long, default_value_t = 1)]
    splits_per_temperature: usize,
    /// Follow SPIDAL's DA-PWC procedure (its split test, schedule and freezing stage) instead
    /// of tiers' own.
    #[arg(long)]
    spidal: bool,
    /// With --spidal: clusters smaller than this are dropped at the end (SPIDAL's
    /// minimumclustercount).
    #[arg(long, default_value_t = 25.0)]
    min_cluster_size: f64,
    /// Cluster on δ^P instead of δ (P = 2 makes pairwise clustering of Euclidean data the
    /// same as central clustering, which splits diffuse regions instead of peeling off tight
    /// clusters first).
    #[arg(long, default_value_t = 1.0)]
    power: f64,
    /// The matrix is SPIDAL big-endian.
    #[arg(long)]
    big_endian: bool,
    /// Accept an asymmetric matrix, averaging d(i, j) and d(j, i) (the count is reported).
    #[arg(long)]
    symmetrize: bool,
    /// Reference clustering (`index<TAB>cluster`) to score by adjusted Rand index.
    #[arg(long)]
    reference: Option<PathBuf>,
    /// Append this run's time to a runs file for `tiers model`.
    #[arg(long)]
    runs: Option<PathBuf>,
    /// How the inner loops run on the threads: `loop` (pool loops) or `messages` (blocks of
    /// rows posted to the workers' ports and gathered by messages, as \[Qiu2012\]'s CCR); the
    /// same labels either way.
    #[arg(long, default_value = "loop", value_parser = ["loop", "messages"])]
    style: String,
    /// No progress on stderr.
    #[arg(long)]
    quiet: bool,
    /// Also draw the annealing trace: clusters and membership uncertainty against the
    /// temperature, splits marked (.svg or .png).
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// `tiers render`.
#[derive(Args, Debug)]
pub struct RenderArgs {
    /// Width in pixels.
    #[arg(long, default_value_t = 1024, value_parser = at_least_one)]
    width: usize,
    /// Height in pixels.
    #[arg(long, default_value_t = 768, value_parser = at_least_one)]
    height: usize,
    /// Tile edge in pixels.
    #[arg(long, default_value_t = 32, value_parser = at_least_one)]
    tiles: usize,
    /// static or dynamic.
    #[arg(long, default_value = "dynamic")]
    schedule: String,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Iteration limit per pixel.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    max_iter: u32,
    /// Output PNG.
    #[arg(long)]
    out: PathBuf,
    /// Append this run's time to a runs file for `tiers model`.
    #[arg(long)]
    runs: Option<PathBuf>,
    /// Also draw which worker rendered which tile when, as a Gantt chart (.svg or .png).
    #[arg(long)]
    trace: Option<PathBuf>,
}

/// `tiers model`.
#[derive(Args, Debug)]
pub struct ModelArgs {
    /// Runs file (`{"runs": [{"app", "threads", "nodes", "size", "seconds"}]}`).
    runs: PathBuf,
    /// Plot efficiency and overhead against p/N and p with the fits (.svg or .png).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Factors to fit, comma-separated: p, p/N, nodes, p^2 (each alone and each pair:
    /// \[Qiu2012\]'s Figs. 7-8 fit p/N with nodes, its Fig. 10 p with p^2).
    #[arg(long, default_value = "p,p/N,nodes,p^2")]
    factors: String,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Accepted for uniformity; the model is serial.
    #[arg(long, default_value_t = 1, value_parser = thread_count)]
    threads: usize,
}

fn pool(threads: usize) -> Result<Pool, Box<dyn std::error::Error>> {
    if threads == 0 || threads > super::fft2d::MAX_THREADS {
        return Err(format!(
            "--threads {threads} is out of range 1..={}",
            super::fft2d::MAX_THREADS
        )
        .into());
    }
    Ok(Pool::builder().threads(threads).build()?)
}

pub(super) fn write_text(path: &Path, text: &str) -> Res {
    Ok(tiers_apps::files::write_atomic(path, text.as_bytes())?)
}

/// `tiers mds` as one process: the whole matrix, checked, on this process's threads.
/// The reference points of `--reference` (`dims` coordinates each): as many as the matrix
/// has points (`n`), and at least two of them distinct.
fn read_reference(
    refp: &Path,
    dims: usize,
    n: usize,
) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    let (y, _) =
        tiers_apps::mds::parse_points(&read_text(refp)?, dims, &refp.display().to_string())?;
    if y.len() != n * dims {
        return Err(format!(
            "{}: {} points, the matrix has {n}",
            refp.display(),
            y.len() / dims
        )
        .into());
    }
    tiers_apps::compare::check_reference(&y, dims)
        .map_err(|e| format!("{}: {e}", refp.display()))?;
    Ok(y)
}

fn mds_alone(a: &MdsArgs, opts: &MdsOptions) -> Res {
    let d = read_matrix(&a.input, a.big_endian, a.symmetrize)?;
    opts.validate(d.n)?;
    tiers_apps::mds::check_scale(tiers_apps::mds::largest(&d.data))?;
    // Every input is read and checked before the work starts.
    let reference = match &a.reference {
        Some(refp) => Some(read_reference(refp, a.dims, d.n)?),
        None => None,
    };
    let labels = match &a.labels {
        Some(l) => Some(read_labels(l, d.n)?),
        None => None,
    };
    let p = pool(a.threads)?;
    let (quiet, every) = (a.quiet, a.progress_every.max(1));
    let r = smacof(&p, &d, None, opts, |k, s| {
        if !quiet && (k < 10 || k % every == 0) {
            eprintln!(
                "[mds] iteration {k}: stress {:.6e}, normalised {:.6e}",
                s.raw, s.normalized
            );
        }
    });
    let Some(last) = r.stress.last().copied() else {
        return Err("MDS ran no iteration".into());
    };
    eprintln!(
        "[mds] {} iterations ({}), stress {:.6e}, normalised {:.6e}, {:.3} s ({:.4} s/iteration, {} threads)",
        r.iterations,
        if r.converged { "converged" } else { "iteration limit" },
        last.raw,
        last.normalized,
        r.seconds,
        r.seconds / r.stress.len() as f64,
        a.threads
    );
    let csv = a
        .out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    write_text(
        &a.out,
        &tiers_apps::mds::format_points(&r.points, a.dims, csv),
    )?;
    if let Some(y) = &reference {
        let pr = procrustes(&r.points, y, a.dims);
        let mut ys = tiers_apps::mds::stress(&p, &d, y, a.dims);
        ys /= tiers_apps::mds::delta_norm(&d);
        outln!("procrustes disparity {:.4} (1 - disparity = {:.4}), rms {:.4e}; reference normalised stress on this matrix {:.6e}", pr.disparity, 1.0 - pr.disparity, pr.rms, ys)?;
    }
    if let Some(pp) = &a.plot {
        plot_points(
            pp,
            &r.points,
            a.dims,
            labels,
            reference.as_deref(),
            last.normalized,
        )?;
    }
    record(
        &a.runs,
        "mds",
        a.threads,
        d.n,
        r.seconds / r.stress.len() as f64,
    )
}

/// `tiers mds` as one rank of a job: this rank's rows of the matrix (read by offset), the
/// configuration gathered every iteration; rank 0 writes the points and the plot.
fn mds_ranks(w: &tiers_cluster::World, a: &MdsArgs, opts: &MdsOptions) -> Res {
    use super::agree::{same_options, word};
    same_options(
        w,
        &[
            (
                "SMACOF options (--dims, --block, --threshold, --max-iter, --seed)",
                word(format!("{opts:?}")),
            ),
            ("--big-endian", word(a.big_endian)),
            ("--symmetrize", word(a.symmetrize)),
            ("--reference (given or not)", word(a.reference.is_some())),
            ("--labels (given or not)", word(a.labels.is_some())),
            ("--plot (given or not)", word(a.plot.is_some())),
        ],
    )?;
    let n = matrix::read_rows(&a.input, a.big_endian, 0..0)?.n;
    opts.validate(n)?;
    let block = rows_of(w, &a.input, a.big_endian, a.symmetrize)?;
    let mut largest = [0.0f64];
    w.allreduce(
        &[tiers_apps::mds::largest(&block.data)],
        &mut largest,
        tiers_cluster::Op::Max,
        tiers_cluster::Timeout::Block,
    )?;
    tiers_apps::mds::check_scale(largest[0])?;
    let root = w.rank() == 0;
    // Every rank reads the reference, so that a bad one stops them all alike.
    let reference = match &a.reference {
        Some(refp) => Some(read_reference(refp, a.dims, n)?),
        None => None,
    };
    let labels = match &a.labels {
        Some(l) => Some(read_labels(l, n)?),
        None => None,
    };
    let p = pool(a.threads)?;
    let (quiet, every) = (a.quiet, a.progress_every.max(1));
    let r = tiers_apps::mds::smacof_ranks(w, &p, &block, opts, |k, s| {
        if root && !quiet && (k < 10 || k % every == 0) {
            eprintln!(
                "[mds] iteration {k}: stress {:.6e}, normalised {:.6e}",
                s.raw, s.normalized
            );
        }
    })?;
    if !root {
        return Ok(());
    }
    let Some(last) = r.stress.last().copied() else {
        return Err("MDS ran no iteration".into());
    };
    eprintln!(
        "[mds] {} iterations ({}), stress {:.6e}, normalised {:.6e}, {:.3} s ({:.4} s/iteration, {} ranks x {} threads)",
        r.iterations,
        if r.converged { "converged" } else { "iteration limit" },
        last.raw,
        last.normalized,
        r.seconds,
        r.seconds / r.stress.len() as f64,
        w.size(),
        a.threads
    );
    let csv = a
        .out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    write_text(
        &a.out,
        &tiers_apps::mds::format_points(&r.points, a.dims, csv),
    )?;
    if let Some(y) = &reference {
        let pr = procrustes(&r.points, y, a.dims);
        outln!(
            "procrustes disparity {:.4} (1 - disparity = {:.4}), rms {:.4e}",
            pr.disparity,
            1.0 - pr.disparity,
            pr.rms
        )?;
    }
    if let Some(pp) = &a.plot {
        plot_points(
            pp,
            &r.points,
            a.dims,
            labels,
            reference.as_deref(),
            last.normalized,
        )?;
    }
    record_pattern(
        &a.runs,
        "mds",
        a.threads,
        layout(w.size(), w.local_size()),
        n,
        r.seconds / r.stress.len() as f64,
    )
}

/// The progress lines of `tiers cluster`.
fn cluster_event(quiet: bool) -> impl FnMut(&Event) {
    move |e| {
        if quiet {
            return;
        }
        match e {
            Event::Split { t, cluster, lambda } => eprintln!("[cluster] T {t:.5e}: split cluster {cluster} (eigenvalue {lambda:.5e})"),
            Event::Temperature { t, k, em, uncertainty, .. } => eprintln!("[cluster] T {t:.5e}: {k} clusters, {em} EM iterations, uncertainty {uncertainty:.4e}"),
        }
    }
}

/// What `tiers cluster` reports and writes once the clustering is done (rank 0).
fn cluster_report(
    a: &ClusterArgs,
    r: &tiers_apps::clustering::ClusterResult,
    reference: Option<&[usize]>,
    (ranks, local): (usize, usize),
    n: usize,
) -> Res {
    eprintln!(
        "[cluster] {} clusters, {} temperatures, {} EM iterations, {:.3} s ({:.4} s/EM iteration, {ranks} ranks x {} threads)",
        r.k,
        r.temperatures,
        r.em_iterations,
        r.seconds,
        r.seconds / r.em_iterations.max(1) as f64,
        a.threads
    );
    let mut sizes = vec![0usize; r.k];
    r.labels.iter().for_each(|&l| sizes[l] += 1);
    eprintln!("[cluster] sizes {sizes:?}");
    write_text(&a.out, &tiers_apps::clustering::format_labels(&r.labels))?;
    if let (Some(refl), Some(refp)) = (reference, &a.reference) {
        outln!(
            "adjusted Rand index vs {}: {:.4}",
            refp.display(),
            adjusted_rand_index(&r.labels, refl)
        )?;
    }
    record_pattern(
        &a.runs,
        "cluster",
        a.threads,
        layout(ranks, local),
        n,
        r.seconds / r.em_iterations.max(1) as f64,
    )
}

/// At most as many clusters as points, said when the request is larger.
fn fit_clusters(opts: &mut ClusterOptions, n: usize, say: bool) {
    if opts.max_clusters > n {
        if say {
            eprintln!(
                "[cluster] {n} points: at most {n} clusters (--max-clusters {})",
                opts.max_clusters
            );
        }
        opts.max_clusters = n;
    }
}

/// This rank's even rows of the matrix at `path`, checked across the ranks for symmetry (or
/// symmetrized, as one process would: the same bits).
fn rows_of(
    w: &tiers_cluster::World,
    path: &Path,
    big_endian: bool,
    symmetrize: bool,
) -> Result<tiers_apps::distance::RowBlock, Box<dyn std::error::Error>> {
    let n = matrix::read_rows(path, big_endian, 0..0)?.n;
    let rows = tiers_apps::distance::even_rows(n, w.size(), w.rank());
    let mut block = matrix::read_rows(path, big_endian, rows)?;
    let file = path.display().to_string();
    let changed = tiers_apps::distance::symmetric_rows(w, &mut block, &file, symmetrize)?;
    if changed > 0 && w.rank() == 0 {
        eprintln!("{file}: symmetrized {changed} pairs whose two entries differed");
    }
    Ok(block)
}

/// Raises every distance to `power` (clustering on δ^P); the first distance that becomes
/// infinite or not a number, if any (the clustering would then go on silently wrong).
pub(super) fn raise(data: &mut [f32], power: f64) -> Option<f32> {
    if power == 1.0 {
        return None;
    }
    let mut bad = None;
    for v in data.iter_mut() {
        let p = v.powf(power as f32);
        if !p.is_finite() && bad.is_none() {
            bad = Some(*v);
        }
        *v = p;
    }
    bad
}

/// [`raise`] on every rank's rows; every rank fails alike when the power sends a distance
/// of any rank to infinity.
pub(super) fn raise_rows(w: &tiers_cluster::World, data: &mut [f32], power: f64) -> Res {
    let worst = raise(data, power).map_or(0.0, f64::from);
    let mut any = [0.0f64];
    w.allreduce(
        &[worst],
        &mut any,
        tiers_cluster::Op::Max,
        tiers_cluster::Timeout::Block,
    )?;
    if any[0] > 0.0 {
        return Err(power_overflow(power, any[0] as f32));
    }
    Ok(())
}

pub(super) fn power_overflow(power: f64, v: f32) -> Box<dyn std::error::Error> {
    format!(
        "--power {power} sends the distance {v} beyond what a 32-bit float holds: use a smaller power or rescale the distances"
    )
    .into()
}

/// `tiers cluster` as one process: the whole matrix, checked, on this process's threads.
fn cluster_alone(a: &ClusterArgs, mut opts: ClusterOptions) -> Res {
    let mut d = read_matrix(&a.input, a.big_endian, a.symmetrize)?;
    let reference = match &a.reference {
        Some(refp) => Some(read_labels(refp, d.n)?),
        None => None,
    };
    fit_clusters(&mut opts, d.n, !a.quiet);
    opts.validate(d.n)?;
    if let Some(v) = raise(&mut d.data, a.power) {
        return Err(power_overflow(a.power, v));
    }
    let p = pool(a.threads)?;
    let (mut log, mut trace) = (cluster_event(a.quiet), Vec::new());
    let r = da_pwc(&p, &d, &opts, |e| {
        log(e);
        trace.push(e.clone());
    })?;
    cluster_report(a, &r, reference.as_deref(), (1, 1), d.n)?;
    plot_anneal(a, &trace, d.n)
}

/// `tiers cluster` as one rank of a job: this rank's rows of the matrix (read by offset), the
/// products δ·M gathered from every rank; rank 0 writes the labels.
fn cluster_ranks(w: &tiers_cluster::World, a: &ClusterArgs, mut opts: ClusterOptions) -> Res {
    use super::agree::{same_options, word};
    same_options(
        w,
        &[
            (
                "clustering options (--max-clusters, --cooling, --fine-cooling, --freezing, \
                 --splits-per-temperature, --spidal, --min-cluster-size, --style)",
                word(format!("{opts:?}")),
            ),
            ("--power", word(a.power.to_bits())),
            ("--big-endian", word(a.big_endian)),
            ("--symmetrize", word(a.symmetrize)),
            ("--reference (given or not)", word(a.reference.is_some())),
            ("--plot (given or not)", word(a.plot.is_some())),
        ],
    )?;
    let n = matrix::read_rows(&a.input, a.big_endian, 0..0)?.n;
    // One rank says it: lines of several processes on one terminal interleave.
    fit_clusters(&mut opts, n, !a.quiet && w.rank() == 0);
    opts.validate(n)?;
    let mut block = rows_of(w, &a.input, a.big_endian, a.symmetrize)?;
    raise_rows(w, &mut block.data, a.power)?;
    let root = w.rank() == 0;
    let reference = match &a.reference {
        Some(refp) => Some(read_labels(refp, n)?),
        None => None,
    };
    let delta = tiers_apps::clustering::RankRows::new(w, block, opts.max_clusters + 2)?;
    let p = pool(a.threads)?;
    let (mut log, mut trace) = (cluster_event(a.quiet || !root), Vec::new());
    let r = da_pwc(&p, &delta, &opts, |e| {
        log(e);
        trace.push(e.clone());
    })?;
    delta.finish()?;
    if !root {
        return Ok(());
    }
    cluster_report(a, &r, reference.as_deref(), (w.size(), w.local_size()), n)?;
    plot_anneal(a, &trace, n)
}

/// Reads and validates a distance matrix, averaging asymmetric pairs when asked.
fn read_matrix(
    path: &Path,
    big_endian: bool,
    symmetrize: bool,
) -> Result<tiers_apps::matrix::DistMatrix, Box<dyn std::error::Error>> {
    if !symmetrize {
        return Ok(matrix::read(path, big_endian, None)?);
    }
    let (d, changed) = matrix::read_symmetrized(path, big_endian, None)?;
    if changed > 0 {
        eprintln!(
            "{}: symmetrized {changed} pairs whose two entries differed",
            path.display()
        );
    }
    Ok(d)
}

/// `tiers cluster --plot`: the annealing trace.
fn plot_anneal(a: &ClusterArgs, trace: &[Event], n: usize) -> Res {
    let Some(pp) = &a.plot else {
        return Ok(());
    };
    let mut fig = plot::anneal::Anneal::new(
        format!(
            "Deterministic annealing of {n} points (max {} clusters{})",
            a.max_clusters,
            if a.spidal { ", SPIDAL's procedure" } else { "" }
        ),
        trace,
    )?;
    fig.caption.push(plot::run_caption());
    plot::write(pp, &fig, plot::Size::default())
}

/// Reads a cluster file of exactly `n` points.
fn read_labels(path: &Path, n: usize) -> Result<Vec<usize>, Box<dyn std::error::Error>> {
    let l = tiers_apps::clustering::parse_labels(&read_text(path)?, &path.display().to_string())?;
    if l.len() != n {
        return Err(format!(
            "{}: {} labels, the matrix has {n} points",
            path.display(),
            l.len()
        )
        .into());
    }
    Ok(l)
}

/// The MDS scatter of `tiers mds --plot`: N, dimensions and stress in the title, coloured by
/// the `--labels` clusters when given.
fn plot_points(
    path: &Path,
    points: &[f64],
    dims: usize,
    labels: Option<Vec<usize>>,
    reference: Option<&[f64]>,
    stress: f64,
) -> Res {
    let n = points.len() / dims.max(1);
    let title =
        format!("SMACOF MDS of {n} points in {dims} dimensions, normalised stress {stress:.4}");
    let mut fig = match reference {
        Some(y) => plot::scatter::Scatter::with_reference(points, y, dims, title)?,
        None => plot::scatter::Scatter::new(points, dims, title)?,
    };
    if let Some(l) = labels {
        fig = fig.colour_by("the --labels clusters", l)?;
    }
    fig.caption.push(format!(
        "the {dims}-D points seen along their two principal axes"
    ));
    fig.caption.push(plot::run_caption());
    plot::write(path, &fig, plot::Size::new(1000, 760)?)
}

pub(super) fn read_text(path: &Path) -> Result<String, Box<dyn std::error::Error>> {
    Ok(tiers_apps::files::read_input_text(path)?)
}

const MATRIX: &[&str] = &["bin", "npy", "csv", "txt"];
const POINTS: &[&str] = &["csv", "txt", "tsv"];
const LABELS: &[&str] = &["txt", "tsv"];
const PLOT: &[&str] = &["svg", "png"];

fn out<'a>(
    path: &'a Path,
    option: &'static str,
    extensions: &'static [&'static str],
) -> Output<'a> {
    Output {
        path,
        option,
        extensions,
    }
}

/// An existing `--runs` file is read before the work, so that one this command cannot add
/// to fails at once rather than after the run.
fn check_runs(runs: &Option<PathBuf>) -> Res {
    if let Some(p) = runs {
        if p.exists() {
            crate::runs::read(p)?;
        }
    }
    Ok(())
}

/// The `--runs` file as an output (it is rewritten), when given.
fn runs_out(runs: &Option<PathBuf>) -> Option<Output<'_>> {
    runs.as_deref().map(|p| out(p, "--runs", &["json"]))
}

fn record(runs: &Option<PathBuf>, app: &str, threads: usize, size: usize, seconds: f64) -> Res {
    record_pattern(runs, app, threads, (1, 1), size, seconds)
}

/// The (processes per node, nodes) of a world: its ranks on this host, and how many hosts of
/// that many make up the job. A job whose hosts hold different numbers of ranks is recorded as
/// all its ranks on one node (p = threads x ranks stays right; the node factor does not).
pub(crate) fn layout(ranks: usize, local: usize) -> (usize, usize) {
    if local >= 1 && ranks % local == 0 {
        (local, ranks / local)
    } else {
        (ranks.max(1), 1)
    }
}

/// Appends a run of pattern `threads` x `processes` x `nodes` (seed 000's t x m x n).
fn record_pattern(
    runs: &Option<PathBuf>,
    app: &str,
    threads: usize,
    (processes, nodes): (usize, usize),
    size: usize,
    seconds: f64,
) -> Res {
    if let Some(p) = runs {
        crate::runs::append(
            p,
            Run {
                app: app.into(),
                threads,
                processes,
                nodes,
                size,
                seconds,
            },
        )?;
    }
    Ok(())
}

/// Runs one application command.
pub fn run(cmd: AppCommand) -> Res {
    match cmd {
        AppCommand::Data(DataArgs {
            kind: DataKind::Alu(a),
        }) => {
            let spec = AluSpec {
                n: a.n,
                families: a.families,
                subfamilies: a.subfamilies,
                mutation: a.mutation,
                seed: a.seed,
                ..Default::default()
            };
            spec.validate()?;
            let lp = labels_path(&a.out);
            outputs::check(
                &[],
                &[
                    out(&a.out, "--out", &["fasta", "fa", "fna"]),
                    out(&lp, "labels", &["txt"]),
                ],
            )?;
            let seqs = generate(&spec);
            let recs: Vec<fasta::Record> = seqs.iter().map(|s| s.record.clone()).collect();
            write_text(&a.out, &fasta::format(&recs))?;
            let labels: String = seqs
                .iter()
                .enumerate()
                .map(|(i, s)| format!("{i}\t{}\t{}\n", s.family, s.subfamily))
                .collect();
            write_text(&lp, &labels)?;
            eprintln!(
                "wrote {} sequences to {} and labels to {}",
                seqs.len(),
                a.out.display(),
                lp.display()
            );
            Ok(())
        }
        AppCommand::Distances(a) => {
            let metric = Metric::parse(&a.metric)?;
            let outs: Vec<Output<'_>> = std::iter::once(out(&a.out, "--out", MATRIX))
                .chain(runs_out(&a.runs))
                .collect();
            outputs::check(&[&a.input], &outs)?;
            check_runs(&a.runs)?;
            let recs = fasta::read(&a.input)?;
            tiers_apps::limits::check_alloc(
                "the distance matrix",
                tiers_apps::limits::mul("sequences squared", recs.len(), recs.len())?,
                4,
            )?;
            let seqs: Vec<&[u8]> = recs.iter().map(|r| r.seq.as_slice()).collect();
            let n = seqs.len();
            let (quiet, threads, be) = (a.quiet, a.threads, a.big_endian);
            // Every rank of the job (one when started alone) computes its rows with its
            // threads and writes them into the one output file at their offset.
            let results = tiers_cluster::spmd(|w| {
                w.fail_if_err((|| -> Result<Option<(usize, usize, f64)>, String> {
                    use super::agree::{same_options, word};
                    same_options(
                        w,
                        &[
                            ("inputs (their sequences)", word(&seqs)),
                            ("--metric", word(format!("{metric:?}"))),
                            ("--big-endian", word(be)),
                        ],
                    )?;
                    let p = pool(threads).map_err(|e| e.to_string())?;
                    let t0 = Instant::now();
                    let report = |done: usize, total: usize| {
                        if !quiet && w.rank() == 0 {
                            let s = t0.elapsed().as_secs_f64();
                            eprintln!(
                            "[distances] {done} of {total} pairs ({:.0} %), {s:.1} s, about {:.0} s to go",
                            100.0 * done as f64 / total as f64,
                            s * (total - done) as f64 / done.max(1) as f64
                        );
                        }
                    };
                    if w.size() == 1 {
                        let d = pairwise_with_progress(&p, &seqs, metric, report)
                            .map_err(|e| e.to_string())?;
                        let secs = t0.elapsed().as_secs_f64();
                        matrix::write(&a.out, &d, be).map_err(|e| e.to_string())?;
                        return Ok(Some((1, 1, secs)));
                    }
                    let format =
                        matrix::Format::from_path(&a.out, be).map_err(|e| e.to_string())?;
                    if format == matrix::Format::Csv {
                        return Err("across ranks the matrix is written as .bin or .npy (each rank writes its rows in place), not .csv".into());
                    }
                    let block =
                        pairwise_ranks(w, &p, &seqs, metric, report).map_err(|e| e.to_string())?;
                    let secs = t0.elapsed().as_secs_f64();
                    super::rows_file::write(w, &a.out, format, &block)
                        .map_err(|e| e.to_string())?;
                    Ok((w.rank() == 0).then_some((w.size(), w.local_size(), secs)))
                })())
            })?;
            let mut done = None;
            for r in results {
                if let Some(x) = r? {
                    done = Some(x);
                }
            }
            let Some((ranks, local, secs)) = done else {
                return Ok(());
            };
            let pairs = (n * n.saturating_sub(1) / 2) as f64;
            eprintln!(
                "{} distances of {} sequences: {:.3} s, {:.3e} pairs/s, {ranks} ranks x {} threads; wrote {}",
                metric.name(),
                n,
                secs,
                pairs / secs,
                a.threads,
                a.out.display()
            );
            record_pattern(
                &a.runs,
                &format!("distances-{}", metric.name()),
                a.threads,
                layout(ranks, local),
                n,
                secs,
            )
        }
        AppCommand::Mds(a) => {
            let opts = MdsOptions {
                dims: a.dims,
                block: a.block,
                threshold: a.threshold,
                max_iter: a.max_iter,
                seed: a.seed,
            };
            opts.validate(1)?;
            let mut ins = vec![a.input.as_path()];
            ins.extend(a.labels.as_deref());
            ins.extend(a.reference.as_deref());
            let outs: Vec<Output<'_>> = std::iter::once(out(&a.out, "--out", POINTS))
                .chain(a.plot.as_deref().map(|p| out(p, "--plot", PLOT)))
                .chain(runs_out(&a.runs))
                .collect();
            outputs::check(&ins, &outs)?;
            check_runs(&a.runs)?;
            let results = tiers_cluster::spmd(|w| -> Result<(), String> {
                if w.size() == 1 {
                    mds_alone(&a, &opts).map_err(|e| e.to_string())
                } else {
                    w.fail_if_err(mds_ranks(w, &a, &opts).map_err(|e| e.to_string()))
                }
            })?;
            for r in results {
                r?;
            }
            Ok(())
        }
        AppCommand::Cluster(a) => {
            if !(a.power > 0.0 && a.power.is_finite()) {
                return Err(format!("--power must be a positive number, not {}", a.power).into());
            }
            let opts = ClusterOptions {
                method: if a.spidal {
                    Method::Spidal
                } else {
                    Method::Tiers
                },
                max_clusters: a.max_clusters,
                cooling: a.cooling,
                fine_cooling: a.fine_cooling,
                freezing: a.freezing,
                splits_per_temperature: a.splits_per_temperature,
                min_cluster_size: a.min_cluster_size,
                style: tiers_apps::clustering::Style::parse(&a.style)?,
                ..Default::default()
            };
            opts.check()?;
            let mut ins = vec![a.input.as_path()];
            ins.extend(a.reference.as_deref());
            let outs: Vec<Output<'_>> = std::iter::once(out(&a.out, "--out", LABELS))
                .chain(a.plot.as_ref().map(|p| out(p, "--plot", PLOT)))
                .chain(runs_out(&a.runs))
                .collect();
            outputs::check(&ins, &outs)?;
            check_runs(&a.runs)?;
            let results = tiers_cluster::spmd(|w| -> Result<(), String> {
                if w.size() == 1 {
                    cluster_alone(&a, opts.clone()).map_err(|e| e.to_string())
                } else {
                    w.fail_if_err(cluster_ranks(w, &a, opts.clone()).map_err(|e| e.to_string()))
                }
            })?;
            for r in results {
                r?;
            }
            Ok(())
        }
        AppCommand::Render(a) => {
            let schedule = TileSchedule::parse(&a.schedule)?;
            let spec = RenderSpec {
                width: a.width,
                height: a.height,
                tile: a.tiles,
                max_iter: a.max_iter,
                ..Default::default()
            };
            spec.validate()?;
            let outs: Vec<Output<'_>> = std::iter::once(out(&a.out, "--out", &["png"]))
                .chain(a.trace.as_ref().map(|t| out(t, "--trace", PLOT)))
                .chain(runs_out(&a.runs))
                .collect();
            outputs::check(&[], &outs)?;
            check_runs(&a.runs)?;
            // Every thread of every rank of the job (one rank when started alone) takes tiles;
            // rank 0 assembles the image.
            let threads = a.threads;
            let results = tiers_cluster::spmd(|w| {
                use super::agree::{same_options, word};
                w.fail_if_err(same_options(
                    w,
                    &[
                        (
                            "image options (--width, --height, --tiles, --max-iter)",
                            word(format!("{spec:?}")),
                        ),
                        ("--schedule", word(format!("{schedule:?}"))),
                    ],
                ))?;
                let p = pool(threads).map_err(|e| e.to_string())?;
                let beat = super::progress::Heartbeat::start("render", w.rank() == 0);
                let img =
                    w.fail_if_err(render_ranks(w, &p, &spec, schedule).map_err(|e| e.to_string()))?;
                drop(beat);
                Ok::<_, String>(((w.size(), w.local_size()), img))
            })?;
            let mut assembled = None;
            for r in results {
                if let (shape, Some(img)) = r? {
                    assembled = Some((shape, img));
                }
            }
            let Some(((ranks, local), img)) = assembled else {
                return Ok(()); // a rank other than 0: rank 0 writes the image
            };
            tiers_apps::files::write_atomic(
                &a.out,
                &plot::encode_png(img.width, img.height, &img.rgb)?,
            )?;
            if let Some(tp) = &a.trace {
                let mut fig = plot::gantt::Gantt::new(
                    format!(
                        "render {}x{}, {:?} schedule: tiles by worker and time{}",
                        a.width,
                        a.height,
                        schedule,
                        if ranks > 1 { " (rank 0's workers)" } else { "" }
                    ),
                    img.tiles.clone(),
                    a.threads,
                    a.width.div_ceil(a.tiles),
                )?;
                fig.caption.push(plot::run_caption());
                plot::write(tp, &fig, plot::Size::default())?;
            }
            let busy: Vec<String> = img.busy.iter().map(|b| format!("{b:.3}")).collect();
            eprintln!("rendered {}x{} in {:.3} s ({:?}, {ranks} ranks x {} threads, busy per worker of rank 0 [{}] s), checksum {:016x}; wrote {}", a.width, a.height, img.seconds, schedule, a.threads, busy.join(", "), img.checksum(), a.out.display());
            record_pattern(
                &a.runs,
                &format!("render-{}", a.schedule),
                a.threads,
                layout(ranks, local),
                a.width * a.height,
                img.seconds,
            )
        }
        AppCommand::Model(a) => {
            let factors = model::parse_factors(&a.factors)?;
            if let Some(pp) = &a.plot {
                outputs::check(&[&a.runs], &[out(pp, "--plot", PLOT)])?;
            }
            let runs = crate::runs::read(&a.runs)?;
            let pts = model::analyse(&runs.runs);
            // Reference runs have f = 0 by definition; the no-intercept fits use the others.
            let fit_pts: Vec<model::Point> = pts
                .iter()
                .filter(|p| p.overhead.abs() > 0.0 || p.p > 1)
                .cloned()
                .collect();
            let fits = model::fits_of(&fit_pts, &factors);
            if a.json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({ "points": pts, "fits": fits })
                    )?
                )?;
            } else {
                out!("{}", model::report(&pts, &fits))?;
            }
            if let Some(pp) = &a.plot {
                let mut fig = plot::model::ModelFigure::new(pts, fits)?;
                fig.caption.push(match &runs.machine {
                    Some(m) => format!("runs made on {m}"),
                    None => "the runs file does not say where the runs were made".into(),
                });
                plot::write(pp, &fig, plot::Size::new(1100, 800)?)?;
            }
            Ok(())
        }
    }
}

/// Where `tiers data alu` writes the labels of `out`.
pub fn labels_path(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".labels.txt");
    PathBuf::from(s)
}

/// A count that must be at least 1 (clap names the flag in its error).
/// A thread count the commands take: 1 to [`MAX_THREADS`](super::fft2d::MAX_THREADS).
fn thread_count(s: &str) -> Result<usize, String> {
    match at_least_one(s)? {
        t if t > super::fft2d::MAX_THREADS => {
            Err(format!("at most {} threads", super::fft2d::MAX_THREADS))
        }
        t => Ok(t),
    }
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(v) => Ok(v),
        Err(e) => Err(format!("not a count: {e}")),
    }
}

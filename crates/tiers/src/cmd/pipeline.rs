//! `tiers pipeline`: the main job. Sequences → pairwise distances → deterministic-annealing
//! clustering → SMACOF MDS → a plot coloured by cluster, as \[Qiu2012\]'s bioinformaticians run
//! it: on one process's threads, or under `tiers run -n M` (or `mpirun`) on every rank's
//! threads, each rank holding only its rows of the matrix, with the same output bytes.
//! Without `--input` it makes its own Alu-like sequences with planted families and checks the
//! clusters against them; with real data (e.g. the 2400 fungal sequences) and SPIDAL's outputs
//! it reports the agreement with those.

use super::apps::{read_text, write_text};
use super::outputs::Output;
use crate::plot;
use clap::Args;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tiers_apps::{alu, clustering, compare, distance, fasta, matrix, mds};

/// Arguments of `tiers pipeline`.
#[derive(Args, Debug)]
pub struct PipelineArgs {
    /// Where to write the outputs (created if missing).
    #[arg(long, default_value = "tiers-pipeline-out")]
    pub out: PathBuf,
    /// A FASTA file to analyse (default: synthetic Alu-like sequences).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Number of synthetic sequences (without --input).
    #[arg(long, default_value_t = 800)]
    pub n: usize,
    /// Distance metric: swg, `kmer[:K]`, hamming.
    #[arg(long, default_value = "kmer")]
    pub metric: String,
    /// Worker threads (default: every processor of the affinity mask).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Most clusters (the synthetic data plant 4 families of 3 subfamilies).
    #[arg(long, default_value_t = 12)]
    pub max_clusters: usize,
    /// Cluster on δ^P instead of δ (as `tiers cluster --power`).
    #[arg(long, default_value_t = 1.0)]
    pub power: f64,
    /// Reference clusters (`index<TAB>cluster`, e.g. SPIDAL's DA-PWC output) to compare with.
    #[arg(long)]
    pub reference_clusters: Option<PathBuf>,
    /// Reference 3-D points (`index x y z [label]`, e.g. SPIDAL's DA-MDS output) to compare with.
    #[arg(long)]
    pub reference_points: Option<PathBuf>,
}

/// What the stages leave for the outputs (rank 0's copy).
struct Stages {
    labels: Vec<usize>,
    k: usize,
    points: Vec<f64>,
    stress: f64,
    iterations: usize,
    seconds: [f64; 3],
}

impl Stages {
    /// What the outputs need of a clustering and an MDS result.
    fn of(c: clustering::ClusterResult, m: mds::MdsResult, seconds: [f64; 3]) -> Stages {
        Stages {
            labels: c.labels,
            k: c.k,
            stress: m.stress.last().map_or(f64::NAN, |s| s.normalized),
            iterations: m.iterations,
            points: m.points,
            seconds,
        }
    }
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

pub fn run(a: PipelineArgs) -> Res<()> {
    // A directory this run makes and then leaves empty (it failed first) is removed again.
    let made = !a.out.exists();
    // Every rank of the job (one when started alone) runs the stages; rank 0 writes.
    let res = tiers_cluster::spmd(|w| w.fail_if_err(run_rank(w, &a).map_err(|e| e.to_string())))
        .map_err(|e| -> Box<dyn std::error::Error> { e.into() })
        .and_then(|results| results.into_iter().try_for_each(|r| r.map_err(Into::into)));
    if res.is_err() && made {
        let _ = std::fs::remove_dir(&a.out);
    }
    res
}

fn run_rank(w: &tiers_cluster::World, a: &PipelineArgs) -> Res<()> {
    let t_all = Instant::now();
    let root = w.rank() == 0;
    let say = |msg: String| {
        if root {
            eprintln!("[pipeline] {msg}");
        }
    };
    // Every flag and input is checked before anything is written under --out, so that a
    // mistyped option cannot leave an earlier run's outputs half replaced.
    let metric = distance::Metric::parse(&a.metric)?;
    if !(a.power.is_finite() && a.power > 0.0) {
        return Err(format!("--power {}: must be a positive number", a.power).into());
    }
    if a.max_clusters == 0 {
        return Err("--max-clusters must be at least 1".into());
    }
    let spec = a.input.is_none().then(|| alu::AluSpec {
        n: a.n,
        ..Default::default()
    });
    if let Some(spec) = &spec {
        spec.validate()?;
    }
    let mut builder = tiers_node::Pool::builder();
    if let Some(t) = a.threads {
        if t == 0 || t > super::fft2d::MAX_THREADS {
            return Err(format!(
                "--threads {t} is out of range 1..={}",
                super::fft2d::MAX_THREADS
            )
            .into());
        }
        builder = builder.threads(t);
    }
    // No output may be an input (checked before any input is read).
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    check_outputs(a)?;
    let reference_clusters = match &a.reference_clusters {
        Some(p) => Some(clustering::parse_labels(
            &read_text(p)?,
            &p.display().to_string(),
        )?),
        None => None,
    };
    let reference_points = match &a.reference_points {
        Some(p) => {
            let y = mds::parse_points(&read_text(p)?, 3, &p.display().to_string())?.0;
            compare::check_reference(&y, 3).map_err(|e| format!("{}: {e}", p.display()))?;
            Some(y)
        }
        None => None,
    };
    // 1. Sequences (every rank makes or reads the same ones).
    let (records, planted) = match (&a.input, &spec) {
        (Some(p), _) => (fasta::read(p)?, None),
        (None, Some(spec)) => {
            let seqs = alu::generate(spec);
            let fams: Vec<(usize, usize)> = seqs.iter().map(|s| (s.family, s.subfamily)).collect();
            let recs: Vec<_> = seqs.into_iter().map(|s| s.record).collect();
            (recs, Some(fams))
        }
        (None, None) => unreachable!("a spec is made whenever there is no --input"),
    };
    let n = records.len();
    if n < 2 {
        return Err("the pipeline needs at least 2 sequences".into());
    }
    let seqs: Vec<&[u8]> = records.iter().map(|r| r.seq.as_slice()).collect();
    distance::check_metric(&seqs, metric)?;
    drop(seqs);
    // The distance matrix: N² f32 on one process, N²/p per rank of a job.
    tiers_apps::limits::check_alloc(
        "the distance matrix",
        tiers_apps::limits::mul("sequences squared", n, n)? / w.size().max(1),
        4,
    )?;
    let mut copts = clustering::ClusterOptions {
        max_clusters: a.max_clusters,
        ..Default::default()
    };
    if copts.max_clusters > n {
        say(format!("{n} sequences: at most {n} clusters"));
        copts.max_clusters = n;
    }
    copts.validate(n)?;
    let mopts = mds::MdsOptions {
        dims: 3,
        max_iter: 300,
        ..Default::default()
    };
    mopts.validate(n)?;
    if let (Some(p), Some(r)) = (&a.reference_clusters, &reference_clusters) {
        if r.len() != n {
            return Err(format!("{}: {} labels for {n} sequences", p.display(), r.len()).into());
        }
    }
    if let (Some(p), Some(r)) = (&a.reference_points, &reference_points) {
        if r.len() != 3 * n {
            return Err(
                format!("{}: {} points for {n} sequences", p.display(), r.len() / 3).into(),
            );
        }
    }

    let pool = builder.build()?;
    say(format!(
        "{} rank(s) x {} worker thread(s) (rank 0 on cpus {:?})",
        w.size(),
        pool.threads(),
        pool.cpus()
    ));
    if root && planted.is_some() {
        write_text(&a.out.join("sequences.fasta"), &fasta::format(&records))?;
    }
    say(format!("{n} sequences"));
    let seqs: Vec<&[u8]> = records.iter().map(|r| r.seq.as_slice()).collect();
    let on_split = |e: &clustering::Event| {
        if let clustering::Event::Split { t, cluster, .. } = e {
            say(format!("cluster {cluster} splits at temperature {t:.4}"));
        }
    };
    let on_iter = |k: usize, s: mds::IterStress| {
        if k % 50 == 0 {
            say(format!(
                "mds iteration {k}: normalised stress {:.6}",
                s.normalized
            ));
        }
    };
    let stages = if w.size() == 1 {
        alone(&pool, a, &seqs, metric, &copts, &mopts, on_split, on_iter)?
    } else {
        ranks(
            w, &pool, a, &seqs, metric, &copts, &mopts, on_split, on_iter,
        )?
    };
    let [t_dist, t_clu, t_mds] = stages.seconds;
    say(format!("{} distances in {t_dist:.2} s", metric.name()));
    say(format!("{} clusters in {t_clu:.2} s", stages.k));
    say(format!(
        "mds: {} iterations, normalised stress {:.6}, {t_mds:.2} s",
        stages.iterations, stages.stress
    ));
    if !root {
        return Ok(());
    }
    let Stages {
        labels,
        k,
        points,
        stress,
        ..
    } = stages;
    write_text(
        &a.out.join("clusters.txt"),
        &clustering::format_labels(&labels),
    )?;
    write_text(
        &a.out.join("points.csv"),
        &mds::format_points(&points, 3, true),
    )?;
    // 5. Agreement.
    let mut summary = json!({
        "sequences": records.len(),
        "ranks": w.size(),
        "threads": pool.threads(),
        "metric": metric.name(),
        "clusters": k,
        "mds_normalised_stress": stress,
        "seconds": {"distances": t_dist, "cluster": t_clu, "mds": t_mds, "total": t_all.elapsed().as_secs_f64()},
    });
    // The labels a reader compares the clusters with: the reference's, else the planted ones.
    let mut reference: Option<(String, Vec<usize>)> = None;
    if let Some(planted) = planted {
        let fam: Vec<usize> = planted.iter().map(|p| p.0).collect();
        let sub: Vec<usize> = planted.iter().map(|p| p.1).collect();
        let (af, asub) = (
            compare::adjusted_rand_index(&labels, &fam),
            compare::adjusted_rand_index(&labels, &sub),
        );
        summary["ari_vs_planted_families"] = json!(af);
        summary["ari_vs_planted_subfamilies"] = json!(asub);
        // Subfamilies numbered apart across families: (family, subfamily) as one label.
        let nsub = sub.iter().max().map_or(1, |m| m + 1);
        let planted_labels = fam.iter().zip(&sub).map(|(f, s)| f * nsub + s).collect();
        reference = Some((
            format!("the planted subfamilies (ARI {asub:.3})"),
            planted_labels,
        ));
        outln!(
            "adjusted Rand index against the planted families: {af:.3}, subfamilies: {asub:.3}"
        )?;
    }
    if let (Some(p), Some(r)) = (&a.reference_clusters, reference_clusters) {
        let ari = compare::adjusted_rand_index(&labels, &r);
        summary["ari_vs_reference"] = json!(ari);
        outln!("adjusted Rand index against {}: {ari:.3}", p.display())?;
        reference = Some((format!("the reference clusters (ARI {ari:.3})"), r));
    }
    if let (Some(p), Some(r)) = (&a.reference_points, &reference_points) {
        let fit = compare::procrustes(&points, r, 3);
        summary["procrustes_disparity_vs_reference"] = json!(fit.disparity);
        outln!(
            "Procrustes disparity against {}: {:.4}",
            p.display(),
            fit.disparity
        )?;
    }
    // 6. Plot: the clusters found beside the labels they are compared with.
    let mut fig = plot::scatter::Scatter::new(
        &points,
        3,
        format!(
            "tiers pipeline: MDS of {} sequences in 3 dimensions, normalised stress {stress:.4}",
            records.len()
        ),
    )?
    .colour_by(&format!("the {} clusters found", k), labels.clone())?;
    if let Some((name, labels)) = reference {
        fig = fig.colour_by(&name, labels)?;
    }
    fig.caption.push(format!(
        "{} distances, deterministic-annealing clustering, SMACOF MDS; the 3-D points seen along their two principal axes",
        metric.name()
    ));
    fig.caption.push(plot::run_caption());
    plot::write(&a.out.join("mds.png"), &fig, plot::Size::new(1400, 720)?)?;

    write_text(
        &a.out.join("summary.json"),
        &serde_json::to_string_pretty(&summary)?,
    )?;
    outln!(
        "{} sequences, {} clusters, MDS stress {stress:.4}; outputs in {} (clusters.txt, points.csv, mds.png, summary.json); {:.1} s",
        records.len(),
        k,
        a.out.display(),
        t_all.elapsed().as_secs_f64()
    )?;
    Ok(())
}

/// The files the pipeline writes under `--out`, checked before any work: none of them is an
/// input (`--input`, `--reference-clusters`, `--reference-points`), and the directory takes a
/// new file.
fn check_outputs(a: &PipelineArgs) -> Res<()> {
    let mut inputs: Vec<&Path> = Vec::new();
    inputs.extend(a.input.as_deref());
    inputs.extend(a.reference_clusters.as_deref());
    inputs.extend(a.reference_points.as_deref());
    let names: Vec<(PathBuf, &'static [&'static str])> = [
        ("sequences.fasta", &["fasta"][..]),
        ("distances.bin", &["bin"][..]),
        ("clusters.txt", &["txt"][..]),
        ("points.csv", &["csv"][..]),
        ("mds.png", &["png"][..]),
        ("summary.json", &["json"][..]),
    ]
    .into_iter()
    .filter(|(n, _)| a.input.is_none() || *n != "sequences.fasta")
    .map(|(n, e)| (a.out.join(n), e))
    .collect();
    let outs: Vec<Output<'_>> = names
        .iter()
        .map(|(path, extensions)| Output {
            path,
            option: "--out",
            extensions,
        })
        .collect();
    super::outputs::check(&inputs, &outs)
}

/// The stages on one process: the whole matrix in memory.
#[allow(clippy::too_many_arguments)]
fn alone(
    pool: &tiers_node::Pool,
    a: &PipelineArgs,
    seqs: &[&[u8]],
    metric: distance::Metric,
    copts: &clustering::ClusterOptions,
    mopts: &mds::MdsOptions,
    on_split: impl FnMut(&clustering::Event),
    on_iter: impl FnMut(usize, mds::IterStress),
) -> Res<Stages> {
    let t = Instant::now();
    let d = distance::pairwise(pool, seqs, metric)?;
    matrix::write(&a.out.join("distances.bin"), &d, false)?;
    let t_dist = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let c = if a.power == 1.0 {
        clustering::da_pwc(pool, &d, copts, on_split)?
    } else {
        let mut p = d.clone();
        if let Some(v) = super::apps::raise(&mut p.data, a.power) {
            return Err(super::apps::power_overflow(a.power, v));
        }
        clustering::da_pwc(pool, &p, copts, on_split)?
    };
    let t_clu = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let m = mds::smacof(pool, &d, None, mopts, on_iter);
    Ok(Stages::of(c, m, [t_dist, t_clu, t.elapsed().as_secs_f64()]))
}

/// The stages as one rank of a job: this rank's rows of the matrix only (O(N²/p) memory),
/// written into the one `distances.bin` at their offset; the clustering gathers δ·M and the
/// MDS the configuration from every rank. The bits are those of [`alone`].
#[allow(clippy::too_many_arguments)]
fn ranks(
    w: &tiers_cluster::World,
    pool: &tiers_node::Pool,
    a: &PipelineArgs,
    seqs: &[&[u8]],
    metric: distance::Metric,
    copts: &clustering::ClusterOptions,
    mopts: &mds::MdsOptions,
    on_split: impl FnMut(&clustering::Event),
    on_iter: impl FnMut(usize, mds::IterStress),
) -> Res<Stages> {
    let t = Instant::now();
    let block = distance::pairwise_ranks(w, pool, seqs, metric, |_, _| {})?;
    super::rows_file::write(
        w,
        &a.out.join("distances.bin"),
        matrix::Format::SpidalLe,
        &block,
    )?;
    // Clustering and MDS cost the same per row: cut the rows evenly for them.
    let block = distance::even_blocks(w, block)?;
    let t_dist = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut powered = block.clone();
    super::apps::raise_rows(w, &mut powered.data, a.power)?;
    let delta = clustering::RankRows::new(w, powered, copts.max_clusters + 2)?;
    let c = clustering::da_pwc(pool, &delta, copts, on_split)?;
    delta.finish()?;
    let t_clu = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let m = mds::smacof_ranks(w, pool, &block, mopts, on_iter)?;
    Ok(Stages::of(c, m, [t_dist, t_clu, t.elapsed().as_secs_f64()]))
}

//! Pairwise sequence distances, computed in parallel by row blocks.
//!
//! Row `i` computes its pairs `j > i` (the upper triangle), the rows are claimed dynamically in
//! small chunks because the triangle makes early rows longer, and the lower triangle is mirrored
//! afterwards, also by row blocks in parallel. Every pair is computed by the same code whatever
//! thread ran it, so the matrix does not depend on the thread count.

pub mod hamming;
pub mod kmer;
pub mod swg;

use crate::matrix::DistMatrix;
use crate::rows::{mirror_upper, par_rows};
use std::sync::atomic::{AtomicUsize, Ordering};
use tiers_node::{Pool, Schedule};

/// A distance between sequences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Fraction of differing positions (equal lengths only).
    Hamming,
    /// Alignment-free k-mer distance with word length k.
    Kmer(usize),
    /// Smith-Waterman-Gotoh alignment distance (SPIDAL's), aligned by rust-bio.
    Swg,
    /// The same distance aligned by tiers' own, faster kernel ([`swg::Engine::Native`]): the
    /// same scores, and the same distances wherever the optimal alignment is unique.
    SwgNative,
}

impl Metric {
    /// Parses `hamming`, `kmer` (k = 5), `kmer:K`, `swg` (also `swg:bio`) or `swg:native`.
    pub fn parse(s: &str) -> crate::Result<Metric> {
        match s {
            "hamming" => Ok(Metric::Hamming),
            "kmer" => Ok(Metric::Kmer(5)),
            "swg" | "swg:bio" => Ok(Metric::Swg),
            "swg:native" => Ok(Metric::SwgNative),
            _ => match s
                .strip_prefix("kmer:")
                .and_then(|k| k.parse::<usize>().ok())
            {
                Some(k) if (1..=8).contains(&k) => Ok(Metric::Kmer(k)),
                _ => Err(crate::Error::Invalid(format!(
                    "unknown metric {s:?}: use hamming, kmer, kmer:K (1-8), swg or swg:native"
                ))),
            },
        }
    }

    /// A short name.
    pub fn name(&self) -> String {
        match self {
            Metric::Hamming => "hamming".into(),
            Metric::Kmer(k) => format!("kmer:{k}"),
            Metric::Swg => "swg".into(),
            Metric::SwgNative => "swg:native".into(),
        }
    }

    /// The alignment engine of an alignment metric.
    pub fn swg_engine(&self) -> Option<swg::Engine> {
        match self {
            Metric::Swg => Some(swg::Engine::Bio),
            Metric::SwgNative => Some(swg::Engine::Native),
            _ => None,
        }
    }
}

/// Rows per block claimed by a worker.
const ROWS: usize = 8;
/// Columns per tile within a block of rows (k = 5 profiles: 2 KiB each, 64 KiB a tile).
const COLS: usize = 32;

/// The full symmetric distance matrix of `seqs`, zero diagonal.
///
/// # Errors
///
/// [`Error::Invalid`](crate::Error::Invalid) when the metric is `hamming` and the sequences
/// differ in length.
pub fn pairwise(pool: &Pool, seqs: &[&[u8]], metric: Metric) -> crate::Result<DistMatrix> {
    pairwise_with_progress(pool, seqs, metric, |_, _| {})
}

/// [`pairwise`], calling `progress(done, total)` (in pairs) from the worker that completes each
/// further tenth of the pairs.
pub fn pairwise_with_progress(
    pool: &Pool,
    seqs: &[&[u8]],
    metric: Metric,
    progress: impl Fn(usize, usize) + Sync,
) -> crate::Result<DistMatrix> {
    let n = seqs.len();
    let total = n * n.saturating_sub(1) / 2;
    let done = AtomicUsize::new(0);
    let profiles = prepare(pool, seqs, metric)?;
    let mut data = vec![0f32; n * n];
    if n == 0 {
        return Ok(DistMatrix { n, data });
    }
    let counter = Progress {
        done: &done,
        total,
        report: &progress,
    };
    upper_rows(pool, seqs, &profiles, metric, 0..n, &mut data, &counter);
    mirror_upper(pool, &mut data, n);
    Ok(DistMatrix { n, data })
}

/// Checks that `metric` can measure `seqs` as far as that is cheap to tell: equal lengths for
/// Hamming, a k-mer length of 1 to 8 (sequences with no k-mer at all are found when their
/// profiles are counted).
pub fn check_metric(seqs: &[&[u8]], metric: Metric) -> crate::Result<()> {
    if metric == Metric::Hamming {
        if let Some((i, s)) = seqs
            .iter()
            .enumerate()
            .find(|(_, s)| s.len() != seqs[0].len())
        {
            return Err(crate::Error::Invalid(format!(
                "hamming distance needs equal-length sequences: sequence 0 has {} bases, sequence {} has {}",
                seqs[0].len(),
                i,
                s.len()
            )));
        }
    }
    if let Metric::Kmer(k) = metric {
        if !(1..=8).contains(&k) {
            return Err(crate::Error::Invalid(format!(
                "k-mer length {k}: it must be 1 to 8"
            )));
        }
    }
    Ok(())
}

/// Checks the input for the metric and computes what every pair needs (k-mer profiles).
fn prepare(pool: &Pool, seqs: &[&[u8]], metric: Metric) -> crate::Result<Vec<kmer::Profile>> {
    let n = seqs.len();
    check_metric(seqs, metric)?;
    if matches!(metric, Metric::Swg | Metric::SwgNative) {
        // Each worker keeps the whole traceback of the pair it aligns: the two longest
        // sequences' (la + 1)(lb + 1) cells, 2 bytes each for rust-bio and 1 for the native
        // kernel. Refused here, with the need named, rather than aborting in an allocation.
        let mut lens: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
        lens.sort_unstable_by(|a, b| b.cmp(a));
        if let [la, lb, ..] = lens[..] {
            let cells = (la + 1).saturating_mul(lb + 1);
            let per_cell = if metric == Metric::Swg { 2 } else { 1 };
            crate::limits::check_alloc(
                &format!(
                    "aligning the two longest sequences ({la} and {lb} bases) on {} threads",
                    pool.threads()
                ),
                cells.saturating_mul(pool.threads()),
                per_cell,
            )?;
        }
    }
    let mut profiles: Vec<kmer::Profile> = Vec::new();
    if let Metric::Kmer(k) = metric {
        profiles.resize(n, kmer::Profile::default());
        par_rows(
            pool,
            &mut profiles,
            1,
            Schedule::Dynamic(16),
            |rows, block| {
                for (i, p) in rows.zip(block) {
                    *p = kmer::profile(seqs[i], k);
                }
            },
        );
        // Such a sequence would be at distance 1 from every other, its own copies included.
        if let Some(i) = profiles.iter().position(|p| p.words() == 0) {
            return Err(crate::Error::Invalid(format!(
                "sequence {i} ({} bases) has no {k} unambiguous bases in a row: the {k}-mer \
                 distance is not defined for it (a smaller k, or another metric)",
                seqs[i].len()
            )));
        }
    }
    Ok(profiles)
}

/// The rows of an `n`-point matrix that rank `rank` of `ranks` owns: contiguous blocks in
/// rank order, cut so that each holds about the same number of upper-triangle pairs (the
/// first rows have the most).
pub fn owned_rows(n: usize, ranks: usize, rank: usize) -> std::ops::Range<usize> {
    let pairs_before = |r: usize| -> u128 {
        let (r, n) = (r as u128, n as u128);
        r * n - r * (r + 1) / 2
    };
    let total = pairs_before(n);
    let boundary = |k: usize| -> usize {
        if k == 0 || n == 0 {
            return 0;
        }
        if k >= ranks {
            return n;
        }
        let want = total * k as u128 / ranks as u128;
        // The first row whose preceding pairs reach `want`.
        let (mut lo, mut hi) = (0usize, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pairs_before(mid) >= want {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    };
    boundary(rank)..boundary(rank + 1)
}

/// The rows of an `n`-point matrix that rank `rank` of `ranks` holds for work that costs the
/// same on every row (a product with the whole row: MDS's Guttman transform, the clustering's
/// δ·M): contiguous blocks in rank order of ⌊n/ranks⌋ or ⌈n/ranks⌉ rows. [`owned_rows`]
/// balances upper-triangle pairs instead, which suits computing distances but leaves the last
/// rank with most of the rows (71 % of them of two ranks) for row-uniform work.
pub fn even_rows(n: usize, ranks: usize, rank: usize) -> std::ops::Range<usize> {
    let ranks = ranks.max(1) as u128;
    let at = |r: usize| -> usize { (n as u128 * (r as u128).min(ranks) / ranks) as usize };
    at(rank)..at(rank + 1)
}

/// This rank's rows of a distance matrix: full rows (both halves), `rows` of `n`.
#[derive(Clone, Debug, PartialEq)]
pub struct RowBlock {
    /// Number of points (the matrix is `n`×`n`).
    pub n: usize,
    /// The rows held.
    pub rows: std::ops::Range<usize>,
    /// Row-major `rows.len()`×`n` distances.
    pub data: Vec<f32>,
}

/// The segments [`pairwise_ranks`] uses: the part of every rank's rows right of its block,
/// which it sends ...
const OUT_SEG: tiers_cluster::SegId = tiers_cluster::SegId(0);
/// ... and the part left of its block, which it receives (by source row).
const IN_SEG: tiers_cluster::SegId = tiers_cluster::SegId(1);

/// The distance matrix computed by every thread of every rank of `world`, each rank owning the
/// rows [`owned_rows`] gives it: a rank computes the upper part of its rows (each pair once in
/// the whole job), then writes the columns it computed below other ranks' diagonals into their
/// rows (one write per row and later rank, of the piece over that rank's rows; the receiver
/// transposes them into place). The entries are the bytes [`pairwise`] computes, whatever the
/// pattern. Memory per rank: its rows, and the parts of them it sends and receives, O(N²/p).
/// Collective.
///
/// # Errors
///
/// As [`pairwise`], and a cluster-tier error (a failed rank, a segment that cannot be made)
/// as [`Error::Invalid`](crate::Error::Invalid).
pub fn pairwise_ranks(
    world: &tiers_cluster::World,
    pool: &Pool,
    seqs: &[&[u8]],
    metric: Metric,
    progress: impl Fn(usize, usize) + Sync,
) -> crate::Result<RowBlock> {
    use tiers_cluster::Timeout;
    let cluster =
        |e: tiers_cluster::Error| crate::Error::Invalid(format!("distances across ranks: {e}"));
    let n = seqs.len();
    let (rank, size) = (world.rank(), world.size());
    let rows = owned_rows(n, size, rank);
    let len = rows.len();
    let profiles = prepare(pool, seqs, metric)?;
    let mut data = vec![0f32; len * n];
    let total: usize = rows.clone().map(|i| n - i - 1).sum();
    let done = AtomicUsize::new(0);
    let counter = Progress {
        done: &done,
        total,
        report: &progress,
    };
    upper_rows(
        pool,
        seqs,
        &profiles,
        metric,
        rows.clone(),
        &mut data,
        &counter,
    );
    // The lower part of this block's own rows.
    for i in rows.clone() {
        for j in i + 1..rows.end {
            data[(j - rows.start) * n + i] = data[(i - rows.start) * n + j];
        }
    }
    // The lower part left of this block (columns 0..rows.start) was computed by the ranks
    // before this one, as the upper part of their rows. Each rank puts the part of its rows
    // right of its block (columns rows.end..n) into its OUT segment, and writes, for each of
    // its rows j and each later rank r, the piece of row j over r's rows (contiguous) into r's
    // IN segment at source row j. Only those parts travel and are copied, not whole rows.
    let below = n - rows.end;
    let out = world
        .segment(OUT_SEG, (len * below * 4).max(4))
        .map_err(cluster)?;
    let inn = world
        .segment(IN_SEG, (rows.start * len * 4).max(4))
        .map_err(cluster)?;
    for k in 0..len {
        let right = &data[k * n + rows.end..(k + 1) * n];
        out.write(k * below * 4, &f32_bytes(right))
            .map_err(cluster)?;
    }
    // Every rank's IN segment exists before any piece lands in it (segment creation is
    // collective, so it does).
    if len > 0 && below > 0 {
        let q = world.queue(0).map_err(cluster)?;
        let mut posted = 0usize;
        for r in rank + 1..size {
            let theirs = owned_rows(n, size, r);
            if theirs.is_empty() {
                continue;
            }
            let (from, width) = (theirs.start - rows.end, theirs.len());
            for (k, j) in rows.clone().enumerate() {
                q.write(
                    OUT_SEG.at((k * below + from) * 4),
                    IN_SEG.on(r, j * width * 4),
                    width * 4,
                )
                .map_err(cluster)?;
                posted += 1;
                if posted % 256 == 0 {
                    q.wait(Timeout::Block).map_err(cluster)?;
                }
            }
        }
        q.wait(Timeout::Block).map_err(cluster)?;
    }
    world.barrier(Timeout::Block).map_err(cluster)?;
    // IN holds d(j, i) for j < rows.start by source row j: transpose it into the rows, a
    // band of source rows at a time.
    const BAND: usize = 64;
    let mut band = vec![0u8; BAND * len * 4];
    for j0 in (0..rows.start).step_by(BAND) {
        let j1 = (j0 + BAND).min(rows.start);
        let bytes = &mut band[..(j1 - j0) * len * 4];
        inn.read(j0 * len * 4, bytes).map_err(cluster)?;
        let vals = f32s(bytes);
        for k in 0..len {
            let row = &mut data[k * n + j0..k * n + j1];
            for (dj, d) in row.iter_mut().enumerate() {
                *d = vals[dj * len + k];
            }
        }
    }
    drop((out, inn));
    delete_segments(world).map_err(cluster)?;
    Ok(RowBlock { n, rows, data })
}

/// This rank's rows of the matrix moved from the blocks [`pairwise_ranks`] gives (balanced
/// pairs, [`owned_rows`]) to the blocks of [`even_rows`], for the stages after the distances
/// whose work is the same on every row (clustering, MDS). Each rank writes the overlap of its
/// rows with every rank's new rows into that rank's segment, so every row travels once at most.
/// Collective.
///
/// # Errors
///
/// A cluster-tier error (a failed rank, a segment that cannot be made) as
/// [`Error::Invalid`](crate::Error::Invalid), or blocks that do not tile the matrix in rank
/// order.
pub fn even_blocks(world: &tiers_cluster::World, block: RowBlock) -> crate::Result<RowBlock> {
    use tiers_cluster::Timeout;
    let cluster =
        |e: tiers_cluster::Error| crate::Error::Invalid(format!("rows across ranks: {e}"));
    let (n, rank, size) = (block.n, world.rank(), world.size());
    let want = even_rows(n, size, rank);
    if block.rows != owned_rows(n, size, rank) {
        return Err(crate::Error::Invalid(format!(
            "rows across ranks: rank {rank} holds rows {:?}, not the distances' block {:?}",
            block.rows,
            owned_rows(n, size, rank)
        )));
    }
    if want == block.rows {
        // Nothing moves for anyone (one rank); the others agree, as every rank computes both.
        if (0..size).all(|r| even_rows(n, size, r) == owned_rows(n, size, r)) {
            return Ok(block);
        }
    }
    let row = n * 4;
    let from = world
        .segment(OUT_SEG, (block.rows.len() * row).max(4))
        .map_err(cluster)?;
    let to = world
        .segment(IN_SEG, (want.len() * row).max(4))
        .map_err(cluster)?;
    from.write(0, &f32_bytes(&block.data)).map_err(cluster)?;
    let q = world.queue(0).map_err(cluster)?;
    for r in 0..size {
        let theirs = even_rows(n, size, r);
        let (lo, hi) = (
            theirs.start.max(block.rows.start),
            theirs.end.min(block.rows.end),
        );
        if lo >= hi {
            continue;
        }
        q.write(
            OUT_SEG.at((lo - block.rows.start) * row),
            IN_SEG.on(r, (lo - theirs.start) * row),
            (hi - lo) * row,
        )
        .map_err(cluster)?;
    }
    q.wait(Timeout::Block).map_err(cluster)?;
    world.barrier(Timeout::Block).map_err(cluster)?;
    drop(block);
    let mut bytes = vec![0u8; want.len() * row];
    to.read(0, &mut bytes).map_err(cluster)?;
    let data = f32s(&bytes);
    drop((from, to));
    delete_segments(world).map_err(cluster)?;
    Ok(RowBlock {
        n,
        rows: want,
        data,
    })
}

/// Checks, across the ranks of `world`, that the matrix whose rows [`even_rows`] gives each
/// rank (`block`, this rank's) is symmetric as [`crate::matrix::DistMatrix::asymmetry`] judges
/// it (to a relative 1e-6), or with `symmetrize` replaces each pair by its mean as
/// [`crate::matrix::DistMatrix::symmetrize`] does (the same bits). A rank reads from each
/// other rank in turn, one-sided, the block of that rank's rows over its own columns: N²/p²
/// floats at a time, never the matrix. Every rank gets the same answer; `file` names the
/// input in the error, which gives the first asymmetric pair.
///
/// # Errors
///
/// [`Error::Format`](crate::Error) for an asymmetric matrix, [`Error::Invalid`](crate::Error)
/// for a block that is not this rank's even rows, or a failure of the ranks' one-sided calls.
pub fn symmetric_rows(
    world: &tiers_cluster::World,
    block: &mut RowBlock,
    file: &str,
    symmetrize: bool,
) -> crate::Result<usize> {
    use tiers_cluster::{Op, Timeout};
    let cluster =
        |e: tiers_cluster::Error| crate::Error::Invalid(format!("symmetry across ranks: {e}"));
    let (n, rank, size) = (block.n, world.rank(), world.size());
    let mine = even_rows(n, size, rank);
    if block.rows != mine || block.data.len() != mine.len() * n {
        return Err(crate::Error::Invalid(format!(
            "symmetry across ranks: rank {rank} holds rows {:?}, not its even block {mine:?}",
            block.rows
        )));
    }
    let differ = |a: f32, b: f32| (a - b).abs() > 1e-6 * a.abs().max(b.abs()).max(1.0);
    // The first asymmetric pair (i < j) as i * n + j, u64::MAX for none; and the pairs changed.
    let mut first = u64::MAX;
    let mut changed = 0u64;
    let mut judge = |data: &mut [f32], i: usize, j: usize, theirs: f32| {
        // `data` holds row i (global); `theirs` is d(j, i).
        let at = (i - mine.start) * n + j;
        let ours = data[at];
        if symmetrize {
            if ours != theirs {
                data[at] = 0.5 * (ours + theirs);
                if i < j {
                    changed += 1;
                }
            }
        } else if differ(ours, theirs) {
            first = first.min((i.min(j) * n + i.max(j)) as u64);
        }
    };
    // The diagonal block: both entries are here.
    for i in mine.clone() {
        for j in i + 1..mine.end {
            let (a, b) = (
                block.data[(i - mine.start) * n + j],
                block.data[(j - mine.start) * n + i],
            );
            judge(&mut block.data, i, j, b);
            judge(&mut block.data, j, i, a);
        }
    }
    if size > 1 {
        let row = n * 4;
        let widest = (0..size)
            .map(|r| even_rows(n, size, r).len())
            .max()
            .unwrap_or(0);
        let from = world
            .segment(OUT_SEG, (mine.len() * row).max(4))
            .map_err(cluster)?;
        let to = world
            .segment(IN_SEG, (widest * mine.len() * 4).max(4))
            .map_err(cluster)?;
        from.write(0, &f32_bytes(&block.data)).map_err(cluster)?;
        // Every rank's rows are in place before anyone reads them.
        world.barrier(Timeout::Block).map_err(cluster)?;
        let q = world.queue(0).map_err(cluster)?;
        let width = mine.len() * 4;
        let mut buf = vec![0u8; widest * width];
        for step in 1..size {
            let peer = (rank + step) % size;
            let theirs = even_rows(n, size, peer);
            for (k, j) in theirs.clone().enumerate() {
                // Row j of `peer`, columns `mine`.
                q.read(
                    IN_SEG.at(k * width),
                    OUT_SEG.on(peer, ((j - theirs.start) * n + mine.start) * 4),
                    width,
                )
                .map_err(cluster)?;
                if k % 256 == 255 {
                    q.wait(Timeout::Block).map_err(cluster)?;
                }
            }
            q.wait(Timeout::Block).map_err(cluster)?;
            let got = &mut buf[..theirs.len() * width];
            to.read(0, got).map_err(cluster)?;
            let got = f32s(got);
            for (k, j) in theirs.enumerate() {
                for (c, i) in mine.clone().enumerate() {
                    judge(&mut block.data, i, j, got[k * mine.len() + c]);
                }
            }
        }
        // Nobody deletes a segment another rank may still read.
        world.barrier(Timeout::Block).map_err(cluster)?;
        drop((from, to));
        delete_segments(world).map_err(cluster)?;
    }
    let mut out = [0u64; 2];
    world
        .allreduce(&[first], &mut out[..1], Op::Min, Timeout::Block)
        .map_err(cluster)?;
    world
        .allreduce(&[changed], &mut out[1..], Op::Sum, Timeout::Block)
        .map_err(cluster)?;
    if out[0] != u64::MAX {
        let (i, j) = ((out[0] / n as u64) as usize, (out[0] % n as u64) as usize);
        return Err(crate::Error::format(
            file,
            0,
            format!("not symmetric: entries ({i}, {j}) and ({j}, {i}) differ (--symmetrize averages the two)"),
        ));
    }
    Ok(out[1] as usize)
}

/// Floats as the bytes a segment holds.
fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// A segment's bytes as floats.
fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Deletes the two segments of the row exchanges (collective).
fn delete_segments(world: &tiers_cluster::World) -> tiers_cluster::Result<()> {
    use tiers_cluster::Timeout;
    world.segment_delete(IN_SEG, Timeout::Block)?;
    world.segment_delete(OUT_SEG, Timeout::Block)
}

/// Counts finished pairs and reports each further tenth.
struct Progress<'a, P: Fn(usize, usize) + Sync> {
    done: &'a AtomicUsize,
    total: usize,
    report: &'a P,
}

/// Fills the upper part (columns `i + 1..n`) of rows `rows` of the distance matrix into `out`
/// (`rows.len()` rows of `n`), by blocks of rows on the pool; other entries are left as they
/// are.
fn upper_rows<P: Fn(usize, usize) + Sync>(
    pool: &Pool,
    seqs: &[&[u8]],
    profiles: &[kmer::Profile],
    metric: Metric,
    rows: std::ops::Range<usize>,
    out: &mut [f32],
    progress: &Progress<'_, P>,
) {
    let n = seqs.len();
    let base = rows.start;
    par_rows(pool, out, n, Schedule::Dynamic(ROWS), |local, block| {
        let rows = local.start + base..local.end + base;
        let mut aligner = metric
            .swg_engine()
            .map(|e| swg::Aligner::with_engine(swg::Scoring::default(), e));
        let first = rows.start;
        // Columns in tiles of COLS: each column's sequence (or k-mer profile) is read once
        // per block of rows from the shared cache and then reused from the core's own, so two
        // workers do not compete for the last-level cache's bandwidth.
        for j0 in (first + 1..n).step_by(COLS) {
            let j1 = (j0 + COLS).min(n);
            for (i, row) in rows.clone().zip(block.chunks_mut(n)) {
                for j in j0.max(i + 1)..j1 {
                    let d = match metric {
                        Metric::Hamming => hamming::hamming(seqs[i], seqs[j]).unwrap_or(1.0),
                        Metric::Kmer(_) => kmer::distance(&profiles[i], &profiles[j]),
                        Metric::Swg | Metric::SwgNative => match aligner.as_mut() {
                            Some(a) => a.align(seqs[i], seqs[j]).distance(),
                            None => 1.0,
                        },
                    };
                    row[j] = d as f32;
                }
            }
        }
        for i in rows {
            let row_pairs = n - i - 1;
            let before = progress.done.fetch_add(row_pairs, Ordering::Relaxed);
            let after = before + row_pairs;
            let total = progress.total;
            if total > 0 && after * 10 / total > before * 10 / total {
                (progress.report)(after, total);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alu::{generate, AluSpec};

    /// Metrics that cannot run on their input are errors before any work: a k-mer length
    /// outside 1..=8 given directly, and alignments whose tracebacks no memory holds.
    #[test]
    fn impossible_metrics_are_errors() {
        let pool = Pool::builder().threads(1).build().unwrap();
        let seqs: [&[u8]; 2] = [b"ACGTACGT", b"ACGTTCGT"];
        for k in [0, 9] {
            let e = pairwise(&pool, &seqs, Metric::Kmer(k)).unwrap_err();
            assert!(e.to_string().contains("1 to 8"), "{e}");
        }
        let long = vec![b'A'; 3_000_000];
        let seqs: [&[u8]; 2] = [&long, &long];
        for m in [Metric::Swg, Metric::SwgNative] {
            let e = pairwise(&pool, &seqs, m).unwrap_err();
            assert!(e.to_string().contains("two longest sequences"), "{e}");
        }
    }

    #[test]
    fn owned_rows_cover_every_row_once_with_balanced_pairs() {
        for n in [0, 1, 2, 7, 100, 4499] {
            for ranks in 1..=6 {
                let mut next = 0;
                let mut pairs = Vec::new();
                for r in 0..ranks {
                    let rows = owned_rows(n, ranks, r);
                    assert_eq!(rows.start, next, "n {n} ranks {ranks}");
                    next = rows.end;
                    pairs.push(rows.map(|i| n - i - 1).sum::<usize>());
                }
                assert_eq!(next, n);
                if n >= 100 {
                    let (lo, hi) = (pairs.iter().min().unwrap(), pairs.iter().max().unwrap());
                    assert!(hi - lo <= 2 * n, "n {n} ranks {ranks}: {pairs:?}");
                }
            }
        }
    }

    #[test]
    fn even_rows_cover_every_row_once_in_equal_blocks() {
        for n in [0, 1, 2, 7, 100, 4499] {
            for ranks in 1..=6 {
                let mut next = 0;
                for r in 0..ranks {
                    let rows = even_rows(n, ranks, r);
                    assert_eq!(rows.start, next, "n {n} ranks {ranks}");
                    assert!(
                        rows.len() == n / ranks || rows.len() == n.div_ceil(ranks),
                        "n {n} ranks {ranks}: {rows:?}"
                    );
                    next = rows.end;
                }
                assert_eq!(next, n);
            }
        }
        assert_eq!(even_rows(10, 2, 5), 10..10);
    }

    #[test]
    fn symmetry_is_judged_and_mended_across_ranks_as_on_one_process() {
        use crate::matrix::DistMatrix;
        // A symmetric matrix, then one with a single asymmetric pair far from the diagonal,
        // then one with many (symmetrized, it must give one process's bits).
        let n = 11;
        let mut sym = DistMatrix::new(n, vec![0.0; n * n]);
        for i in 0..n {
            for j in 0..n {
                if i != j {
                    sym.data[i * n + j] = (i + j) as f32 * 0.5;
                }
            }
        }
        let mut one = sym.clone();
        one.data[n - 1] += 1.0; // (0, n - 1) only
        let mut many = sym.clone();
        for (k, v) in many.data.iter_mut().enumerate() {
            if k % 7 == 3 && k / n != k % n {
                *v += 0.25 * (k % 5) as f32;
            }
        }
        let mut mended = many.clone();
        let want_changed = mended.symmetrize();
        assert!(want_changed > 0);
        for ranks in [1, 2, 3, 4] {
            let rows_of = |m: &DistMatrix, r: usize| {
                let rows = even_rows(n, ranks, r);
                RowBlock {
                    n,
                    data: m.data[rows.start * n..rows.end * n].to_vec(),
                    rows,
                }
            };
            let ok = tiers_cluster::run_local(ranks, |w| {
                let mut b = rows_of(&sym, w.rank());
                symmetric_rows(w, &mut b, "m", false).map_err(|e| e.to_string())
            })
            .unwrap();
            assert!(ok.iter().all(|r| r == &Ok(0)), "{ok:?} on {ranks} ranks");
            let bad = tiers_cluster::run_local(ranks, |w| {
                let mut b = rows_of(&one, w.rank());
                symmetric_rows(w, &mut b, "m", false).map_err(|e| e.to_string())
            })
            .unwrap();
            for r in &bad {
                let e = r.as_ref().unwrap_err();
                assert!(e.contains("(0, 10) and (10, 0)"), "{e} on {ranks} ranks");
            }
            let fixed = tiers_cluster::run_local(ranks, |w| {
                let mut b = rows_of(&many, w.rank());
                let changed = symmetric_rows(w, &mut b, "m", true).unwrap();
                (changed, b.data)
            })
            .unwrap();
            let joined: Vec<f32> = fixed.iter().flat_map(|(_, d)| d.clone()).collect();
            assert_eq!(joined, mended.data, "{ranks} ranks");
            assert!(fixed.iter().all(|(c, _)| *c == want_changed));
        }
    }

    #[test]
    fn symmetric_zero_diagonal_thread_independent() {
        let seqs = generate(&AluSpec {
            n: 24,
            ..Default::default()
        });
        let s: Vec<&[u8]> = seqs.iter().map(|a| a.record.seq.as_slice()).collect();
        let p1 = Pool::builder().threads(1).build().unwrap();
        let p2 = Pool::builder().threads(2).build().unwrap();
        for metric in [Metric::Kmer(5), Metric::Swg, Metric::SwgNative] {
            let a = pairwise(&p1, &s, metric).unwrap();
            let b = pairwise(&p2, &s, metric).unwrap();
            assert_eq!(a.data, b.data, "{metric:?}");
            // Across ranks: every rank's rows are the same bytes.
            for ranks in [1, 2, 3, 5] {
                let blocks = tiers_cluster::run_local(ranks, |w| {
                    let p = Pool::builder().threads(1).build().unwrap();
                    pairwise_ranks(w, &p, &s, metric, |_, _| {}).unwrap()
                })
                .unwrap();
                let mut joined = Vec::new();
                for (r, b) in blocks.iter().enumerate() {
                    assert_eq!(b.rows, owned_rows(a.n, ranks, r));
                    joined.extend_from_slice(&b.data);
                }
                assert_eq!(joined, a.data, "{metric:?} on {ranks} ranks");
                // Moved to even blocks: the same matrix, cut evenly.
                let even = tiers_cluster::run_local(ranks, |w| {
                    let p = Pool::builder().threads(1).build().unwrap();
                    let b = pairwise_ranks(w, &p, &s, metric, |_, _| {}).unwrap();
                    even_blocks(w, b).unwrap()
                })
                .unwrap();
                let mut joined = Vec::new();
                for (r, b) in even.iter().enumerate() {
                    assert_eq!(b.rows, even_rows(a.n, ranks, r));
                    joined.extend_from_slice(&b.data);
                }
                assert_eq!(
                    joined, a.data,
                    "{metric:?} moved to even blocks on {ranks} ranks"
                );
            }
            for i in 0..a.n {
                assert_eq!(a.get(i, i), 0.0);
                for j in 0..a.n {
                    assert_eq!(a.get(i, j), a.get(j, i));
                    assert!((0.0..=1.0).contains(&a.get(i, j)));
                }
            }
            // Same subfamily is closer on average than different families.
            let (mut same, mut ns, mut diff, mut nd) = (0.0, 0, 0.0, 0);
            for i in 0..a.n {
                for j in 0..i {
                    if seqs[i].subfamily == seqs[j].subfamily {
                        same += a.get(i, j);
                        ns += 1;
                    } else if seqs[i].family != seqs[j].family {
                        diff += a.get(i, j);
                        nd += 1;
                    }
                }
            }
            assert!(same / (ns as f32) < 0.5 * diff / (nd as f32), "{metric:?}");
        }
    }

    #[test]
    fn progress_in_tenths() {
        let seqs = generate(&AluSpec {
            n: 50,
            ..Default::default()
        });
        let s: Vec<&[u8]> = seqs.iter().map(|a| a.record.seq.as_slice()).collect();
        let pool = Pool::builder().threads(2).build().unwrap();
        let seen = std::sync::Mutex::new(Vec::new());
        let d = pairwise_with_progress(&pool, &s, Metric::Kmer(4), |done, total| {
            seen.lock().unwrap().push((done, total))
        })
        .unwrap();
        assert_eq!(d, pairwise(&pool, &s, Metric::Kmer(4)).unwrap());
        let mut seen = seen.into_inner().unwrap();
        seen.sort_unstable();
        assert!((5..=10).contains(&seen.len()), "{seen:?}");
        assert!(seen.iter().all(|&(_, t)| t == 50 * 49 / 2));
        assert_eq!(seen.last().unwrap().0, 50 * 49 / 2);
    }

    #[test]
    fn hamming_needs_equal_lengths() {
        let p = Pool::builder().threads(1).build().unwrap();
        let s: Vec<&[u8]> = vec![b"ACGT", b"ACGA", b"TTTT"];
        let d = pairwise(&p, &s, Metric::Hamming).unwrap();
        assert_eq!(d.get(0, 1), 0.25);
        assert_eq!(d.get(2, 0), 0.75);
        let s: Vec<&[u8]> = vec![b"ACGT", b"ACG"];
        let e = pairwise(&p, &s, Metric::Hamming).unwrap_err().to_string();
        assert!(e.contains("sequence 1 has 3"), "{e}");
        assert!(Metric::parse("kmer:9").is_err());
        assert_eq!(Metric::parse("kmer:3").unwrap(), Metric::Kmer(3));
        assert_eq!(Metric::parse("swg").unwrap(), Metric::Swg);
        assert_eq!(Metric::parse("swg:bio").unwrap(), Metric::Swg);
        assert_eq!(Metric::parse("swg:native").unwrap(), Metric::SwgNative);
        assert_eq!(Metric::SwgNative.name(), "swg:native");
        assert!(Metric::parse("swg:other").is_err());
    }
}

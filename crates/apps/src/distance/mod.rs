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
    }
    let profiles = profiles;
    let mut data = vec![0f32; n * n];
    if n == 0 {
        return Ok(DistMatrix { n, data });
    }
    par_rows(
        pool,
        &mut data,
        n,
        Schedule::Dynamic(ROWS),
        |rows, block| {
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
                            Metric::Swg | Metric::SwgNative => aligner
                                .as_mut()
                                .expect("an aligner for an alignment metric")
                                .align(seqs[i], seqs[j])
                                .distance(),
                        };
                        row[j] = d as f32;
                    }
                }
            }
            for i in rows {
                let row_pairs = n - i - 1;
                let before = done.fetch_add(row_pairs, Ordering::Relaxed);
                let after = before + row_pairs;
                if total > 0 && after * 10 / total > before * 10 / total {
                    progress(after, total);
                }
            }
        },
    );
    mirror_upper(pool, &mut data, n);
    Ok(DistMatrix { n, data })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alu::{generate, AluSpec};

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

//! Clustering across the ranks of a job: each rank holds its rows of δ, and the products
//! δ·M are computed by rows and gathered from every rank ([`RankRows`]).

use super::{row_sum, times_rows, Delta, Style};
use tiers_node::Pool;

/// A rank's rows of δ, for clustering across the ranks of a job: [`Delta::times`] computes
/// this rank's rows of δ·M and gathers the others' by one-sided writes into every rank's copy
/// (two segments used alternately, one barrier per product). Build it on every rank with the
/// same `max_k` (the most columns a product will have). Should a peer fail, the products
/// become NaN (the annealing then runs out quickly) and [`RankRows::failure`] says why.
pub struct RankRows<'w> {
    world: &'w tiers_cluster::World,
    rows: crate::distance::RowBlock,
    row_sums: Vec<f64>,
    round: std::sync::atomic::AtomicUsize,
    failed: std::sync::OnceLock<tiers_cluster::Error>,
    max_k: usize,
}

/// The segments [`RankRows`] gathers products in.
const PRODUCT_SEGS: [tiers_cluster::SegId; 2] = [tiers_cluster::SegId(0), tiers_cluster::SegId(1)];

impl<'w> RankRows<'w> {
    /// This rank's rows (every rank's rows must tile `0..n` in rank order). Collective.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`](crate::Error::Invalid) when the rows do not tile the matrix or a
    /// segment cannot be made.
    pub fn new(
        world: &'w tiers_cluster::World,
        rows: crate::distance::RowBlock,
        max_k: usize,
    ) -> crate::Result<RankRows<'w>> {
        use tiers_cluster::{Op, Timeout};
        let cluster = |e: tiers_cluster::Error| {
            crate::Error::Invalid(format!("clustering across ranks: {e}"))
        };
        let (n, size) = (rows.n, world.size());
        let mut counts = vec![0u64; size];
        counts[world.rank()] = rows.rows.len() as u64;
        let mut all = vec![0u64; size];
        world
            .allreduce(&counts, &mut all, Op::Sum, Timeout::Block)
            .map_err(cluster)?;
        let starts: Vec<usize> = all
            .iter()
            .scan(0usize, |s, &c| {
                let at = *s;
                *s += c as usize;
                Some(at)
            })
            .collect();
        if all.iter().sum::<u64>() as usize != n || starts[world.rank()] != rows.rows.start {
            return Err(crate::Error::Invalid(format!(
                "clustering across ranks: the ranks' rows {all:?} do not tile 0..{n} in rank order"
            )));
        }
        let mut sums = vec![0.0f64; n];
        for (k, i) in rows.rows.clone().enumerate() {
            sums[i] = row_sum(&rows.data[k * n..(k + 1) * n], i);
        }
        let mut row_sums = vec![0.0f64; n];
        world
            .allreduce(&sums, &mut row_sums, Op::Sum, Timeout::Block)
            .map_err(cluster)?;
        let bytes = crate::limits::mul("points x clusters", n, max_k.max(1))?
            .checked_mul(8)
            .ok_or_else(|| crate::Error::Invalid("clustering across ranks: too large".into()))?;
        for id in PRODUCT_SEGS {
            world.segment(id, bytes).map_err(cluster)?;
        }
        Ok(RankRows {
            world,
            rows,
            row_sums,
            round: std::sync::atomic::AtomicUsize::new(0),
            failed: std::sync::OnceLock::new(),
            max_k: max_k.max(1),
        })
    }

    /// The first failure of the job seen while gathering, if any.
    pub fn failure(&self) -> Option<&tiers_cluster::Error> {
        self.failed.get()
    }

    /// Releases the segments (collective).
    ///
    /// # Errors
    ///
    /// A cluster-tier failure.
    pub fn finish(self) -> tiers_cluster::Result<()> {
        for id in PRODUCT_SEGS {
            self.world
                .segment_delete(id, tiers_cluster::Timeout::Block)?;
        }
        match self.failed.into_inner() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn gather(&self, out: &mut [f64], k: usize) -> tiers_cluster::Result<()> {
        use tiers_cluster::Timeout;
        if k > self.max_k {
            return Err(tiers_cluster::Error::Setup(format!(
                "clustering across ranks: {k} clusters, more than the {} planned",
                self.max_k
            )));
        }
        let w = self.world;
        let r = self
            .round
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = PRODUCT_SEGS[r % 2];
        let seg = w.local(id)?;
        let (first, len) = (self.rows.rows.start, self.rows.rows.len());
        let at = first * k * 8;
        let mine: Vec<u8> = out[first * k..(first + len) * k]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        seg.write(at, &mine)?;
        if len > 0 {
            let q = w.queue(0)?;
            for peer in (0..w.size()).filter(|&p| p != w.rank()) {
                q.write(id.at(at), id.on(peer, at), len * k * 8)?;
            }
            q.wait(Timeout::Block)?;
        }
        w.barrier(Timeout::Block)?;
        let mut all = vec![0u8; self.rows.n * k * 8];
        seg.read(0, &mut all)?;
        for (o, c) in out.iter_mut().zip(all.chunks_exact(8)) {
            *o = f64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        }
        Ok(())
    }
}

impl Delta for RankRows<'_> {
    fn n(&self) -> usize {
        self.rows.n
    }
    fn times(&self, pool: &Pool, style: Style, m: &[f64], k: usize, out: &mut [f64]) {
        if self.failed.get().is_some() {
            out.fill(f64::NAN);
            return;
        }
        let (first, len, n) = (self.rows.rows.start, self.rows.rows.len(), self.rows.n);
        times_rows(
            pool,
            style,
            &self.rows.data,
            n,
            m,
            k,
            &mut out[first * k..(first + len) * k],
        );
        if let Err(e) = self.gather(out, k) {
            let _ = self.failed.set(e);
            out.fill(f64::NAN);
        }
    }
    fn row_sums(&self) -> Vec<f64> {
        self.row_sums.clone()
    }
}

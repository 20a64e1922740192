//! Block decompositions of a 2-D or 3-D index space: over ranks, then over the threads of a
//! rank, with ghost regions, the interior/annulus split of a block (KeLP's Fig. 1b,
//! \[Baden2001\]) and irregular splits in a given ratio (`IRR(m:n)`).
//!
//! Boxes are half-open (`lo..hi` on each axis) in global indices; axis 0 is the slowest in
//! memory, axis 2 the fastest. A 2-D space is a 3-D one with extent 1 on axis 2.
//!
//! ```
//! use tiers_cluster::decomp::Decomp;
//! // 16×16×16 points over 4 ranks with ghost regions one point wide.
//! let d = Decomp::new([16, 16, 16], 4, 1)?;
//! assert_eq!(d.procs(), [2, 2, 1]);
//! let b = d.block(3);
//! assert_eq!((b.lo, b.hi), ([8, 8, 0], [16, 16, 16]));
//! // Rank 3 has a neighbour below it on axes 0 and 1, none above (the edge of the space).
//! assert_eq!(d.neighbour(3, 0, -1), Some(1));
//! assert_eq!(d.neighbour(3, 0, 1), None);
//! # Ok::<(), tiers_cluster::Error>(())
//! ```

use crate::error::{Error, Rank, Result};

/// The most ranks a decomposition is made for (its grid is found among the divisors).
pub const MAX_RANKS: usize = 1 << 32;

/// A half-open box of global indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Box3 {
    /// First index on each axis.
    pub lo: [usize; 3],
    /// One past the last index on each axis.
    pub hi: [usize; 3],
}

impl Box3 {
    /// The box `lo..hi`.
    pub const fn new(lo: [usize; 3], hi: [usize; 3]) -> Box3 {
        Box3 { lo, hi }
    }

    /// Its extent on each axis.
    pub fn extent(&self) -> [usize; 3] {
        [0, 1, 2].map(|a| self.hi[a].saturating_sub(self.lo[a]))
    }

    /// Points in it (`usize::MAX` when they are more: see [`Box3::checked_len`]).
    pub fn len(&self) -> usize {
        self.checked_len().unwrap_or(usize::MAX)
    }

    /// Points in it, `None` when they are more than `usize` holds.
    pub fn checked_len(&self) -> Option<usize> {
        self.extent()
            .iter()
            .try_fold(1usize, |n, &e| n.checked_mul(e))
    }

    /// Whether it holds no point.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether it holds point `p`.
    pub fn contains(&self, p: [usize; 3]) -> bool {
        (0..3).all(|a| self.lo[a] <= p[a] && p[a] < self.hi[a])
    }

    /// The points of both (empty when they do not meet).
    pub fn intersect(&self, o: &Box3) -> Box3 {
        let lo = [0, 1, 2].map(|a| self.lo[a].max(o.lo[a]));
        let hi = [0, 1, 2].map(|a| self.hi[a].min(o.hi[a]).max(lo[a]));
        Box3 { lo, hi }
    }

    /// The box shrunk by `w` on each side of the axes in `axes` (never below empty).
    pub fn shrink(&self, w: usize, axes: [bool; 3]) -> Box3 {
        let lo = [0, 1, 2].map(|a| {
            if axes[a] {
                self.lo[a].saturating_add(w)
            } else {
                self.lo[a]
            }
        });
        let hi = [0, 1, 2].map(|a| {
            if axes[a] {
                self.hi[a].saturating_sub(w).max(lo[a])
            } else {
                self.hi[a]
            }
        });
        Box3 { lo, hi }
    }

    /// Splits it into at most 7 disjoint boxes: `inner` (which must lie inside it) and the
    /// slabs around it, slowest axis first. Empty slabs are left out.
    pub fn around(&self, inner: &Box3) -> Vec<Box3> {
        let mut out = Vec::new();
        let mut rest = *self;
        for a in 0..3 {
            let mut below = rest;
            below.hi[a] = inner.lo[a].max(rest.lo[a]);
            let mut above = rest;
            above.lo[a] = inner.hi[a].min(rest.hi[a]);
            for b in [below, above] {
                if !b.is_empty() {
                    out.push(b);
                }
            }
            rest.lo[a] = below.hi[a];
            rest.hi[a] = above.lo[a];
        }
        out
    }
}

/// Part `i` of `0..n` split into `parts` nearly equal pieces (the first `n % parts` one
/// longer); an empty range at `n` for a part that is not one (`i >= parts`).
pub fn split(n: usize, parts: usize, i: usize) -> std::ops::Range<usize> {
    if i >= parts {
        return n..n;
    }
    let (q, r) = (n / parts, n % parts);
    let lo = i * q + i.min(r);
    lo..lo + q + usize::from(i < r)
}

/// `0..n` split into pieces in the ratio of `weights` (`IRR(m:n)` is `&[m, n]`), each as
/// close to its share as whole points allow (largest remainders first); every point is in
/// exactly one piece. Weights of zero get empty pieces; all zero weights split evenly.
pub fn split_ratio(n: usize, weights: &[usize]) -> Vec<std::ops::Range<usize>> {
    // In u128: n × weight and the weights' sum cannot overflow, whatever the caller gives.
    let total: u128 = weights.iter().map(|&w| w as u128).sum();
    if total == 0 {
        return (0..weights.len())
            .map(|i| split(n, weights.len(), i))
            .collect();
    }
    let share = |w: usize| n as u128 * w as u128;
    let mut len: Vec<usize> = weights
        .iter()
        .map(|&w| (share(w) / total) as usize)
        .collect();
    let mut left = n - len.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(share(weights[i]) % total));
    for &i in order.iter().filter(|&&i| weights[i] > 0) {
        if left == 0 {
            break;
        }
        len[i] += 1;
        left -= 1;
    }
    let mut lo = 0;
    len.iter()
        .map(|&l| {
            let r = lo..lo + l;
            lo += l;
            r
        })
        .collect()
}

/// Factors `p` into a grid of 3 factors for a space of `extent`: the one whose blocks have
/// the least surface (ties: more parts on slower axes). Axes of extent 1 get 1 part. When no
/// grid fits the space (more ranks than points on the axes), `[p, 1, 1]`.
pub fn proc_grid(p: usize, extent: [usize; 3]) -> [usize; 3] {
    let mut best = [p, 1, 1];
    let mut best_cost = f64::INFINITY;
    // The divisors of p, largest first (trial division up to √p).
    let mut divs = Vec::new();
    let mut d = 1usize;
    while d.checked_mul(d).is_some_and(|dd| dd <= p) {
        if p % d == 0 {
            divs.push(d);
            if d != p / d {
                divs.push(p / d);
            }
        }
        d += 1;
    }
    divs.sort_unstable_by(|x, y| y.cmp(x));
    for &a in &divs {
        for &b in divs.iter().filter(|&&b| b <= p / a) {
            if (p / a) % b != 0 {
                continue;
            }
            let g = [a, b, p / a / b];
            if (0..3).any(|i| g[i] > extent[i].max(1)) {
                continue;
            }
            let e = [0, 1, 2].map(|i| extent[i] as f64 / g[i] as f64);
            let cost = e[0] * e[1] + e[1] * e[2] + e[0] * e[2];
            if cost < best_cost - 1e-9 {
                best_cost = cost;
                best = g;
            }
        }
    }
    best
}

/// One face of a block: the slab of its own points a neighbour needs (`send`), the slab of
/// ghost points the neighbour fills (`recv`), and who the neighbour is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Face {
    /// 0, 1 or 2.
    pub axis: usize,
    /// -1 (towards lower indices) or +1.
    pub dir: i32,
    /// The neighbour's rank.
    pub peer: Rank,
    /// Owned points the neighbour's ghosts copy.
    pub send: Box3,
    /// Ghost points copied from the neighbour's owned points.
    pub recv: Box3,
}

impl Face {
    /// The face's index in `0..6`: `2 * axis + (dir > 0)`. The neighbour's matching face has
    /// index `opposite()`.
    pub fn index(&self) -> usize {
        2 * self.axis + usize::from(self.dir > 0)
    }

    /// The index of the face the neighbour sends back through.
    pub fn opposite(&self) -> usize {
        self.index() ^ 1
    }
}

/// A block decomposition of a `global` index space over `ranks`, each block with ghost
/// regions `ghost` points wide towards its neighbours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decomp {
    global: [usize; 3],
    procs: [usize; 3],
    ghost: usize,
}

impl Decomp {
    /// `global` over `ranks` (a grid of them chosen by [`proc_grid`]), ghosts `ghost` wide.
    ///
    /// # Errors
    ///
    /// [`Error::Setup`] when `ranks` is 0 or above [`MAX_RANKS`], or as
    /// [`Decomp::with_grid`] (no grid of `ranks` gives every rank a point).
    pub fn new(global: [usize; 3], ranks: usize, ghost: usize) -> Result<Decomp> {
        if ranks == 0 || ranks > MAX_RANKS {
            return Err(Error::Setup(format!(
                "a decomposition over {ranks} ranks (1 to {MAX_RANKS})"
            )));
        }
        Decomp::with_grid(global, proc_grid(ranks, global), ghost)
    }

    /// `global` over a given grid of ranks (rank = `(c0 * p1 + c1) * p2 + c2`).
    ///
    /// # Errors
    ///
    /// [`Error::Setup`] when an axis has no rank or more ranks than points (a rank would
    /// own nothing), when the ranks are more than [`MAX_RANKS`], or when the space's points
    /// with their ghosts do not fit in `usize`.
    pub fn with_grid(global: [usize; 3], procs: [usize; 3], ghost: usize) -> Result<Decomp> {
        let bad = |why: String| {
            Err(Error::Setup(format!(
                "decomposition of {global:?} points over a {procs:?} grid of ranks: {why}"
            )))
        };
        if let Some(a) = (0..3).find(|&a| procs[a] == 0) {
            return bad(format!("no rank on axis {a}"));
        }
        if let Some(a) = (0..3).find(|&a| procs[a] > global[a].max(1)) {
            return bad(format!(
                "{} ranks on axis {a} of {} points: a rank would own nothing",
                procs[a], global[a]
            ));
        }
        let ranks = procs.iter().try_fold(1usize, |n, &p| n.checked_mul(p));
        if ranks.is_none_or(|r| r > MAX_RANKS) {
            return bad(format!("more than {MAX_RANKS} ranks"));
        }
        let padded = global.map(|g| ghost.checked_mul(2).and_then(|w| g.checked_add(w)));
        let fits = padded
            .iter()
            .try_fold(1usize, |n, &e| n.checked_mul(e?))
            .is_some();
        if !fits {
            return bad(format!(
                "with ghosts {ghost} wide, more points than memory can index"
            ));
        }
        Ok(Decomp {
            global,
            procs,
            ghost,
        })
    }

    /// The whole space.
    pub fn global(&self) -> Box3 {
        Box3::new([0; 3], self.global)
    }

    /// Ranks on each axis.
    pub fn procs(&self) -> [usize; 3] {
        self.procs
    }

    /// Ranks in all.
    pub fn ranks(&self) -> usize {
        self.procs.iter().product()
    }

    /// Ghost width.
    pub fn ghost(&self) -> usize {
        self.ghost
    }

    /// The grid coordinates of `rank`.
    ///
    /// # Panics
    ///
    /// When `rank` is not one of the decomposition's (`rank >= ranks()`): like an index
    /// out of a slice, a fault of the caller, whose blocks would otherwise lie outside the
    /// space. ([`Halo::new`](crate::mover::Halo::new) checks the decomposition against its
    /// world.)
    pub fn coords(&self, rank: Rank) -> [usize; 3] {
        assert!(
            rank < self.ranks(),
            "rank {rank} of a decomposition over {} ranks",
            self.ranks()
        );
        let p = self.procs;
        [rank / (p[1] * p[2]), (rank / p[2]) % p[1], rank % p[2]]
    }

    /// The rank at grid coordinates `c`; `None` outside the grid of ranks.
    pub fn rank_of(&self, c: [usize; 3]) -> Option<Rank> {
        let p = self.procs;
        (0..3)
            .all(|a| c[a] < p[a])
            .then(|| (c[0] * p[1] + c[1]) * p[2] + c[2])
    }

    /// [`Error::NoSuchRank`](crate::Error::NoSuchRank) unless `rank` is one of the
    /// decomposition's: for callers that take a rank from their input, since the methods that
    /// take a rank panic on one beyond [`Decomp::ranks`] (see [`Decomp::coords`]).
    pub fn check_rank(&self, rank: Rank) -> crate::Result<()> {
        if rank < self.ranks() {
            Ok(())
        } else {
            Err(crate::Error::NoSuchRank {
                rank,
                size: self.ranks(),
            })
        }
    }

    /// The points `rank` owns.
    pub fn block(&self, rank: Rank) -> Box3 {
        let c = self.coords(rank);
        let r = [0, 1, 2].map(|a| split(self.global[a], self.procs[a], c[a]));
        Box3::new(r.clone().map(|r| r.start), r.map(|r| r.end))
    }

    /// The neighbour of `rank` along `axis` in direction `dir` (±1), `None` at the edge
    /// (and for an axis beyond 2).
    pub fn neighbour(&self, rank: Rank, axis: usize, dir: i32) -> Option<Rank> {
        if axis >= 3 {
            return None;
        }
        let mut c = self.coords(rank);
        if dir < 0 {
            c[axis] = c[axis].checked_sub(1)?;
        } else {
            c[axis] += 1;
            if c[axis] >= self.procs[axis] {
                return None;
            }
        }
        self.rank_of(c)
    }

    /// The extent of `rank`'s block with its ghost regions (grown by the ghost width on every
    /// side, also at the edge of the space, where the ghosts hold boundary values): how a
    /// rank stores its block. Global point `p` is at `p - block.lo + ghost` of it.
    pub fn padded_extent(&self, rank: Rank) -> [usize; 3] {
        self.block(rank).extent().map(|e| e + 2 * self.ghost)
    }

    /// Whether every block is at least as wide as the ghost regions on every axis that is
    /// split (else a ghost region would reach past the neighbour's block, which
    /// [`Decomp::faces`] does not describe).
    pub fn ghosts_fit(&self) -> bool {
        (0..3).all(|a| self.procs[a] == 1 || self.global[a] / self.procs[a] >= self.ghost)
    }

    /// The faces of `rank` that have a neighbour, in index order (see [`Face::index`]). Boxes
    /// are in global indices; ghost boxes lie outside the block.
    pub fn faces(&self, rank: Rank) -> Vec<Face> {
        let b = self.block(rank);
        let g = self.ghost;
        let mut out = Vec::new();
        for axis in 0..3 {
            for dir in [-1, 1] {
                let Some(peer) = self.neighbour(rank, axis, dir) else {
                    continue;
                };
                let (mut send, mut recv) = (b, b);
                if dir < 0 {
                    send.hi[axis] = (b.lo[axis] + g).min(b.hi[axis]);
                    // Ghosts below lo: the box holds lo - g .. lo (lo >= g as a neighbour
                    // exists below and owns at least g points; checked below).
                    recv.lo[axis] = b.lo[axis].saturating_sub(g);
                    recv.hi[axis] = b.lo[axis];
                } else {
                    send.lo[axis] = b.hi[axis].saturating_sub(g).max(b.lo[axis]);
                    recv.lo[axis] = b.hi[axis];
                    recv.hi[axis] = b.hi[axis] + g;
                }
                out.push(Face {
                    axis,
                    dir,
                    peer,
                    send,
                    recv,
                });
            }
        }
        out
    }

    /// The interior of `rank`'s block: its points at least `width` away from every face that
    /// has a neighbour (what can be computed before the ghosts arrive).
    pub fn interior(&self, rank: Rank, width: usize) -> Box3 {
        let b = self.block(rank);
        let mut lo = b.lo;
        let mut hi = b.hi;
        for a in 0..3 {
            if self.neighbour(rank, a, -1).is_some() {
                lo[a] = lo[a].saturating_add(width).min(b.hi[a]);
            }
            if self.neighbour(rank, a, 1).is_some() {
                hi[a] = hi[a].saturating_sub(width).max(lo[a]);
            }
        }
        Box3::new(lo, hi)
    }

    /// The annulus of `rank`'s block: its points not in [`Decomp::interior`], as disjoint
    /// boxes.
    pub fn annulus(&self, rank: Rank, width: usize) -> Vec<Box3> {
        self.block(rank).around(&self.interior(rank, width))
    }
}

/// A block split over `weights.len()` threads along its slowest axis with more than one
/// point, in the ratio of `weights` (all 1: an even split; `[m, n]`: `IRR(m:n)`).
pub fn thread_split(block: &Box3, weights: &[usize]) -> Vec<Box3> {
    let e = block.extent();
    let axis = (0..3).find(|&a| e[a] >= weights.len()).unwrap_or(0);
    split_ratio(e[axis], weights)
        .into_iter()
        .map(|r| {
            let mut b = *block;
            b.lo[axis] = block.lo[axis] + r.start;
            b.hi[axis] = block.lo[axis] + r.end;
            b
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Widths and coordinates from the caller never overflow: an empty interior, an empty
    /// box, `None` off the grid, a typed error for a rank beyond it.
    #[test]
    fn extreme_arguments_are_answered() {
        let d = Decomp::new([4, 1, 1], 2, 0).unwrap();
        assert_eq!(
            d.interior(1, usize::MAX).extent().iter().product::<usize>(),
            0
        );
        let whole: usize = d
            .annulus(1, usize::MAX)
            .iter()
            .map(|b| b.extent().iter().product::<usize>())
            .sum();
        assert_eq!(whole, d.block(1).extent().iter().product::<usize>());
        let b = Box3::new([1; 3], [2; 3]).shrink(usize::MAX, [true; 3]);
        assert_eq!(b.extent(), [0; 3]);
        assert_eq!(d.rank_of([usize::MAX, 1, 1]), None);
        assert_eq!(d.rank_of([5, 0, 0]), None);
        assert_eq!(d.rank_of([1, 0, 0]), Some(1));
        assert!(d.check_rank(1).is_ok());
        assert!(matches!(
            d.check_rank(2),
            Err(crate::Error::NoSuchRank { rank: 2, size: 2 })
        ));
    }

    fn points(b: &Box3) -> impl Iterator<Item = [usize; 3]> + '_ {
        (b.lo[0]..b.hi[0]).flat_map(move |i| {
            (b.lo[1]..b.hi[1]).flat_map(move |j| (b.lo[2]..b.hi[2]).map(move |k| [i, j, k]))
        })
    }

    #[test]
    fn every_point_is_owned_once() {
        for global in [[7, 5, 3], [16, 16, 16], [9, 4, 1], [1, 1, 1], [13, 11, 1]] {
            for ranks in 1..=8 {
                let Ok(d) = Decomp::new(global, ranks, 1) else {
                    // Only where a rank would own nothing.
                    assert!(ranks > global.iter().product(), "{global:?} over {ranks}");
                    continue;
                };
                assert_eq!(d.ranks(), ranks, "{global:?} over {ranks}");
                let mut seen = vec![0u8; global.iter().product()];
                for r in 0..ranks {
                    assert_eq!(d.rank_of(d.coords(r)), Some(r));
                    let b = d.block(r);
                    for p in points(&b) {
                        seen[(p[0] * global[1] + p[1]) * global[2] + p[2]] += 1;
                    }
                    // interior + annulus = block, disjoint
                    let mut n = d.interior(r, 1).len();
                    for a in d.annulus(r, 1) {
                        assert!(a.intersect(&d.interior(r, 1)).is_empty());
                        n += a.len();
                    }
                    assert_eq!(n, b.len());
                }
                assert!(seen.iter().all(|&s| s == 1), "{global:?} over {ranks}");
            }
        }
    }

    #[test]
    fn two_d_spaces_are_not_split_on_the_third_axis() {
        assert_eq!(Decomp::new([64, 64, 1], 4, 1).unwrap().procs(), [2, 2, 1]);
        assert_eq!(Decomp::new([64, 64, 64], 8, 1).unwrap().procs(), [2, 2, 2]);
        assert_eq!(Decomp::new([64, 64, 64], 2, 1).unwrap().procs(), [2, 1, 1]);
    }

    #[test]
    fn ghosts_are_the_neighbours_boundary() {
        let global = [10, 9, 8];
        for ranks in 1..=8 {
            for g in 1..=2 {
                let d = Decomp::new(global, ranks, g).unwrap();
                if !d.ghosts_fit() {
                    continue;
                }
                for r in 0..ranks {
                    let faces = d.faces(r);
                    for f in &faces {
                        // The peer's matching face sends exactly what this one receives.
                        let back = d
                            .faces(f.peer)
                            .into_iter()
                            .find(|o| o.index() == f.opposite())
                            .expect("the neighbour faces back");
                        assert_eq!(back.peer, r);
                        assert_eq!(back.send, f.recv, "rank {r} face {}", f.index());
                        assert!(d.block(f.peer).contains(f.recv.lo));
                        assert!(f.recv.intersect(&d.block(r)).is_empty());
                        assert_eq!(f.send.extent()[f.axis], g);
                    }
                    // Faces only where there is a neighbour: none at the edge of the space.
                    let b = d.block(r);
                    for (a, &n) in global.iter().enumerate() {
                        assert_eq!(faces.iter().any(|f| f.axis == a && f.dir < 0), b.lo[a] > 0);
                        assert_eq!(faces.iter().any(|f| f.axis == a && f.dir > 0), b.hi[a] < n);
                    }
                }
            }
        }
    }

    #[test]
    fn ratios_are_honoured() {
        let r = split_ratio(30, &[2, 1]);
        assert_eq!(r, vec![0..20, 20..30]);
        let r = split_ratio(10, &[1, 1, 1]);
        assert_eq!(r.iter().map(|r| r.len()).collect::<Vec<_>>(), vec![4, 3, 3]);
        for n in 0..50 {
            for w in [&[3, 1][..], &[1, 2, 3], &[0, 5], &[0, 0]] {
                let r = split_ratio(n, w);
                assert_eq!(r.first().map_or(0, |r| r.start), 0);
                assert_eq!(r.last().map_or(0, |r| r.end), n);
                let total: usize = w.iter().sum();
                for (i, p) in r.iter().enumerate() {
                    if i > 0 {
                        assert_eq!(r[i - 1].end, p.start);
                    }
                    if total > 0 {
                        let share = n as f64 * w[i] as f64 / total as f64;
                        assert!((p.len() as f64 - share).abs() < 1.0, "{n} {w:?} {r:?}");
                    }
                }
            }
        }
        // Weights whose products and sum overflow usize still split in their ratio.
        let r = split_ratio(64, &[usize::MAX, usize::MAX]);
        assert_eq!(r, vec![0..32, 32..64]);
        let r = split_ratio(64, &[usize::MAX / 3 * 2, usize::MAX / 3]);
        assert_eq!(r, vec![0..43, 43..64]);
        let b = Box3::new([0, 0, 0], [12, 4, 4]);
        let t = thread_split(&b, &[2, 1]);
        assert_eq!(t[0].extent(), [8, 4, 4]);
        assert_eq!(t[1], Box3::new([8, 0, 0], [12, 4, 4]));
    }

    #[test]
    fn interior_and_annulus_follow_the_neighbours() {
        // One rank: no neighbour, everything is interior.
        let d = Decomp::new([8, 8, 8], 1, 1).unwrap();
        assert_eq!(d.interior(0, 1), d.block(0));
        assert!(d.annulus(0, 1).is_empty());
        // Two ranks on axis 0: rank 0's interior stops one short of its upper face.
        let d = Decomp::new([8, 8, 8], 2, 1).unwrap();
        assert_eq!(d.interior(0, 1), Box3::new([0, 0, 0], [3, 8, 8]));
        assert_eq!(d.annulus(0, 1), vec![Box3::new([3, 0, 0], [4, 8, 8])]);
    }

    #[test]
    fn bad_decompositions_are_errors() {
        let msg = |r: Result<Decomp>| r.unwrap_err().to_string();
        assert!(msg(Decomp::new([4, 4, 4], 0, 1)).contains("over 0 ranks"));
        assert!(msg(Decomp::new([2, 2, 1], 8, 1)).contains("would own nothing"));
        assert!(msg(Decomp::new([16; 3], MAX_RANKS + 1, 1)).contains("over 4294967297 ranks"));
        assert!(msg(Decomp::with_grid([4, 4, 4], [2, 0, 1], 1)).contains("no rank on axis 1"));
        assert!(
            msg(Decomp::with_grid([1 << 40; 3], [1 << 32, 1 << 32, 2], 1)).contains("more than")
        );
        assert!(msg(Decomp::with_grid([2, 1 << 61, 1], [2, 1, 1], 1)).contains("memory"));
        assert!(msg(Decomp::with_grid([8, usize::MAX, 1], [2, 1, 1], 1)).contains("memory"));
        // A prime count of ranks well beyond a linear search's reach: found at once.
        let d = Decomp::new([1 << 40, 1, 1], 4_294_967_291, 1).unwrap();
        assert_eq!(d.procs(), [4_294_967_291, 1, 1]);
        // Out-of-range parts and axes are empty or absent, not panics.
        assert_eq!(split(10, 0, 0), 10..10);
        assert_eq!(split(10, 3, 7), 10..10);
        let d = Decomp::new([16; 3], 4, 1).unwrap();
        assert_eq!(d.neighbour(0, 3, 1), None);
        assert_eq!(Box3::new([0; 3], [usize::MAX, 4, 1]).checked_len(), None);
        assert_eq!(Box3::new([0; 3], [usize::MAX, 4, 1]).len(), usize::MAX);
    }

    #[test]
    #[should_panic(expected = "rank 4 of a decomposition over 4 ranks")]
    fn a_rank_outside_the_decomposition_is_a_fault_of_the_caller() {
        let _ = Decomp::new([16; 3], 4, 1).unwrap().block(4);
    }
}

//! RedBlack3D (KeLP's benchmark, \[Baden2001\]): Poisson's equation −Δu = f on the unit cube
//! with u = 0 on its boundary, an N³ mesh of interior points, the 7-point stencil, and
//! Gauss-Seidel relaxation in red-black order.
//!
//! This module is the computation on one block of the mesh, stored with a ghost layer one
//! point wide; who owns which block, and how ghosts are filled, is the caller's (the
//! `tiers redblack` command exchanges them with the cluster tier's Mover). A red point
//! (`i + j + k` even, in global indices) reads only black points and the reverse, so a
//! half-sweep gives the same bits whatever the order of its points, the split into blocks
//! or the number of threads.
//!
//! The manufactured problem: f = 3π² sin πx sin πy sin πz, whose solution is
//! u = sin πx sin πy sin πz; point `i` of an axis is at x = (i + 1) h, h = 1 / (N + 1).

use std::f64::consts::PI;

/// Red (`i + j + k` even) or black.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    /// `i + j + k` even.
    Red,
    /// `i + j + k` odd.
    Black,
}

/// A block of the mesh with its ghost layer: the solution `u` and `h² f`, both stored over
/// the padded extent (axis 2 fastest).
#[derive(Clone, Debug)]
pub struct Block {
    /// Mesh points on each axis of the whole problem.
    pub n: usize,
    /// Global index of the first owned point.
    pub lo: [usize; 3],
    /// Owned points on each axis.
    pub owned: [usize; 3],
    /// The solution, over `owned + 2` on each axis.
    pub u: Vec<f64>,
    /// `h² f`, over the same extent.
    pub h2f: Vec<f64>,
}

/// The exact solution at global point `p` of an `n`³ mesh.
pub fn exact(n: usize, p: [usize; 3]) -> f64 {
    let h = 1.0 / (n + 1) as f64;
    p.iter().map(|&i| (PI * (i + 1) as f64 * h).sin()).product()
}

impl Block {
    /// The block of global points `lo .. lo + owned` of an `n`³ mesh, u = 0.
    pub fn new(n: usize, lo: [usize; 3], owned: [usize; 3]) -> Block {
        let ext = owned.map(|o| o + 2);
        let len = ext.iter().product();
        let h = 1.0 / (n + 1) as f64;
        let mut b = Block {
            n,
            lo,
            owned,
            u: vec![0.0; len],
            h2f: vec![0.0; len],
        };
        for i in 0..owned[0] {
            for j in 0..owned[1] {
                for k in 0..owned[2] {
                    let g = [lo[0] + i, lo[1] + j, lo[2] + k];
                    let at = b.index(g);
                    b.h2f[at] = h * h * 3.0 * PI * PI * exact(n, g);
                }
            }
        }
        b
    }

    /// The padded extent.
    pub fn extent(&self) -> [usize; 3] {
        self.owned.map(|o| o + 2)
    }

    /// Where global point `p` (owned or ghost) is stored.
    #[inline]
    pub fn index(&self, p: [usize; 3]) -> usize {
        let e = self.extent();
        (((p[0] + 1 - self.lo[0]) * e[1]) + (p[1] + 1 - self.lo[1])) * e[2]
            + (p[2] + 1 - self.lo[2])
    }

    /// The view threads share while they relax disjoint boxes.
    pub fn shared(&mut self) -> Shared {
        Shared {
            u: self.u.as_mut_ptr(),
            h2f: self.h2f.as_ptr(),
            lo: self.lo,
            ext: self.extent(),
        }
    }

    /// The owned points' values in memory order.
    pub fn owned_values(&self) -> Vec<f64> {
        let mut out = Vec::with_capacity(self.owned.iter().product());
        for i in 0..self.owned[0] {
            for j in 0..self.owned[1] {
                for k in 0..self.owned[2] {
                    out.push(self.u[self.index([self.lo[0] + i, self.lo[1] + j, self.lo[2] + k])]);
                }
            }
        }
        out
    }

    /// Over the owned points: the sum of squared residuals `h²f + Σ neighbours − 6u` (scaled
    /// by h²) and the largest error against the exact solution. Needs current ghosts.
    pub fn residual_and_error(&self) -> (f64, f64) {
        let e = self.extent();
        let (s1, s2) = (e[2], e[1] * e[2]);
        let (mut r2, mut err) = (0.0f64, 0.0f64);
        for i in 0..self.owned[0] {
            for j in 0..self.owned[1] {
                for k in 0..self.owned[2] {
                    let g = [self.lo[0] + i, self.lo[1] + j, self.lo[2] + k];
                    let c = self.index(g);
                    let u = &self.u;
                    let r = self.h2f[c]
                        + u[c - 1]
                        + u[c + 1]
                        + u[c - s1]
                        + u[c + s1]
                        + u[c - s2]
                        + u[c + s2]
                        - 6.0 * u[c];
                    r2 += r * r;
                    err = err.max((u[c] - exact(self.n, g)).abs());
                }
            }
        }
        (r2, err)
    }
}

/// A block's arrays as raw pointers, for threads relaxing disjoint boxes of one color at once.
#[derive(Clone, Copy, Debug)]
pub struct Shared {
    u: *mut f64,
    h2f: *const f64,
    lo: [usize; 3],
    ext: [usize; 3],
}

// SAFETY: threads write disjoint points of one color and read only the other color's (see
// `relax`); the block outlives the threads that hold this view.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Shared {
    #[inline]
    fn index(&self, p: [usize; 3]) -> usize {
        (((p[0] + 1 - self.lo[0]) * self.ext[1]) + (p[1] + 1 - self.lo[1])) * self.ext[2]
            + (p[2] + 1 - self.lo[2])
    }

    /// Relaxes the points of `color` in the box `lo..hi` (global indices, owned points):
    /// u = (Σ six neighbours + h²f) / 6.
    ///
    /// # Safety
    ///
    /// The box lies in the block; while this runs nobody else writes these points or reads
    /// them, and nobody writes the other color's points or the ghosts it reads.
    pub unsafe fn relax(&self, lo: [usize; 3], hi: [usize; 3], color: Color) {
        let (s1, s2) = (self.ext[2] as isize, (self.ext[1] * self.ext[2]) as isize);
        let want = usize::from(color == Color::Black);
        for i in lo[0]..hi[0] {
            for j in lo[1]..hi[1] {
                if lo[2] >= hi[2] {
                    continue;
                }
                let k0 = lo[2] + ((i + j + lo[2] + want) & 1);
                let mut c = self.index([i, j, k0]) as isize;
                let end = self.index([i, j, hi[2] - 1]) as isize;
                let u = self.u;
                while c <= end {
                    // SAFETY: in the padded block (the box is owned; neighbours are ghosts at
                    // worst).
                    unsafe {
                        let s = *u.offset(c - 1)
                            + *u.offset(c + 1)
                            + *u.offset(c - s1)
                            + *u.offset(c + s1)
                            + *u.offset(c - s2)
                            + *u.offset(c + s2)
                            + *self.h2f.offset(c);
                        *u.offset(c) = s / 6.0;
                    }
                    c += 2;
                }
            }
        }
    }

    /// Reads point `p` (owned or ghost).
    ///
    /// # Safety
    ///
    /// `p` is in the padded block and nobody writes it meanwhile.
    pub unsafe fn get(&self, p: [usize; 3]) -> f64 {
        // SAFETY: the caller's.
        unsafe { *self.u.add(self.index(p)) }
    }

    /// Writes point `p` (a ghost, when filling the halo).
    ///
    /// # Safety
    ///
    /// `p` is in the padded block and nobody reads or writes it meanwhile.
    pub unsafe fn set(&self, p: [usize; 3], v: f64) {
        // SAFETY: the caller's.
        unsafe { *self.u.add(self.index(p)) = v }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn solve(n: usize, iters: usize) -> Block {
        let mut b = Block::new(n, [0; 3], [n; 3]);
        let s = b.shared();
        for _ in 0..iters {
            for c in [Color::Red, Color::Black] {
                // SAFETY: one thread.
                unsafe { s.relax([0; 3], [n; 3], c) };
            }
        }
        b
    }

    #[test]
    fn the_residual_falls_and_the_order_does_not_matter() {
        let n = 10;
        let (r0, _) = solve(n, 1).residual_and_error();
        let (r1, _) = solve(n, 20).residual_and_error();
        assert!(r1 < r0 * 0.1, "{r0} -> {r1}");
        // Relaxing the red points box by box gives the same bits as all at once.
        let mut a = solve(n, 3);
        let mut b = a.clone();
        let (sa, sb) = (a.shared(), b.shared());
        // SAFETY: one thread.
        unsafe {
            sa.relax([0; 3], [n; 3], Color::Red);
            sb.relax([5, 0, 0], [10, 10, 10], Color::Red);
            sb.relax([0, 0, 3], [5, 10, 10], Color::Red);
            sb.relax([0, 0, 0], [5, 10, 3], Color::Red);
        }
        assert_eq!(a.u, b.u);
    }

    #[test]
    fn converges_at_second_order() {
        // Run to convergence; the error against the analytic solution falls ~4× as h halves.
        let e = |n: usize| solve(n, 3 * n * n).residual_and_error().1;
        let (e1, e2) = (e(7), e(15));
        assert!(e1 / e2 > 3.5 && e1 / e2 < 4.5, "{e1} {e2}");
    }
}

//! A complex N×N two-dimensional FFT, on one process and across the ranks of a `World`.
//!
//! `X[k1][k2] = Σ_{i,j} x[i][j] e^{−2πi(k1·i + k2·j)/N}`, unnormalized, as numpy's `fft2`.
//! It is computed as 1-D FFTs of the rows (rustfft), a transpose, 1-D FFTs of the rows again:
//! that leaves Xᵀ, which one more (local) transpose turns into X.
//!
//! Across ranks ([`Dist`]) each rank owns a contiguous block of rows, so the transpose is an
//! all-to-all: rank r sends to rank d the columns d owns of every row r owns. The overlapped
//! variant ([`Variant::Overlap`], [GPI-MCTP] Fig. 6) splits the first pass into blocks of
//! rows and writes each finished block to its destinations with a notified write while the
//! next block is transformed; [`Variant::Plain`] transforms every row first and then sends.
//! A rank ends holding its rows of Xᵀ, i.e. its columns of X; [`Dist::gather`] assembles X
//! at rank 0.
//!
//! Every 1-D transform is the same rustfft plan on the same data whatever the split, and the
//! transposes only move numbers, so every pattern of ranks and threads gives the same bits as
//! [`fft2d`] on one thread.

use crate::npy::{self, ComplexElem};
use crate::{limits, Error, Result};
use num_complex::Complex64;
use rustfft::{Fft, FftPlanner};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tiers_cluster::decomp::split;
use tiers_cluster::{Notification, SegId, Segment, Timeout, World};

/// An all-to-all of bytes (`send`, `send_counts`, `recv`, `recv_counts`, packed in rank
/// order) for [`Dist::transform_with`].
pub type Alltoallv<'a> = dyn FnMut(&[u8], &[usize], &mut [u8], &[usize]) -> Result<()> + 'a;

/// The bytes of complex128 values (for an all-to-all of bytes).
fn as_bytes(v: &[Complex64]) -> &[u8] {
    // SAFETY: Complex64 is `#[repr(C)]` of two f64s (16 bytes, no padding); the bytes live
    // and are borrowed as long as `v`.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// The bytes of complex128 values, writable: every bit pattern is a valid f64.
fn as_bytes_mut(v: &mut [Complex64]) -> &mut [u8] {
    // SAFETY: as `as_bytes`, borrowed mutably as long as `v`; any bytes written make valid
    // f64s.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// The largest N accepted: 2^15 (an N×N complex128 array of 16 GiB); the memory of the
/// machine is checked as well.
pub const MAX_N: usize = 1 << 15;

/// Bytes of one complex128.
const C16: usize = 16;

/// Values transformed between two progress polls of the overlapped first pass (16 rows of
/// 1024): about 0.1 ms of work, against a poll's microsecond.
const POLL_VALUES: usize = 16 * 1024;

/// The segment each rank packs its outgoing blocks into.
const SEND_SEG: SegId = SegId(20);
/// The segment each rank receives its strip of columns into.
const RECV_SEG: SegId = SegId(21);
/// The segment rank 0 gathers the result into.
const OUT_SEG: SegId = SegId(22);

/// Checks N: 1 ..= [`MAX_N`], and an N×N complex128 array (`copies` of it) fits in memory.
/// Returns the bytes of one array.
///
/// # Errors
///
/// [`Error::Invalid`] naming N.
pub fn check_n(n: usize, copies: usize) -> Result<usize> {
    if n == 0 || n > MAX_N {
        return Err(Error::Invalid(format!(
            "fft2d: N = {n} is out of range 1..={MAX_N}"
        )));
    }
    let elems = limits::mul("fft2d: N x N", n, n)?;
    limits::check_alloc(
        &format!("fft2d: {copies} arrays of {n} x {n} complex128"),
        limits::mul("fft2d: arrays", elems, copies)?,
        C16,
    )?;
    Ok(elems * C16)
}

/// A 1-D plan of length `n` (rustfft picks the algorithm once per length).
pub fn plan(n: usize) -> Arc<dyn Fft<f64>> {
    FftPlanner::new().plan_fft_forward(n)
}

/// Rows `rows` of the input generated from `seed`: real and imaginary parts uniform in
/// [−1, 1), each row from its own stream, so any block of rows is the same numbers whoever
/// generates it.
pub fn generate_rows(seed: u64, n: usize, rows: Range<usize>) -> Vec<Complex64> {
    let mut out = Vec::with_capacity(rows.len() * n);
    for i in rows {
        let mut rng = crate::rng::Rng::new(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        for _ in 0..n {
            let re = rng.f64() * 2.0 - 1.0;
            let im = rng.f64() * 2.0 - 1.0;
            out.push(Complex64::new(re, im));
        }
    }
    out
}

/// Runs `f(first_row, rows)` on `threads` contiguous parts of the rows of `data` (rows of
/// `n`), thread 0 on the caller.
fn par_rows<T: Send>(data: &mut [T], n: usize, threads: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let rows = data.len().checked_div(n).unwrap_or(0);
    let threads = threads.clamp(1, rows.max(1));
    if threads == 1 {
        f(0, data);
        return;
    }
    let f = &f;
    std::thread::scope(|s| {
        let mut rest = data;
        let mut mine = None;
        for t in 0..threads {
            let r = split(rows, threads, t);
            let (part, tail) = std::mem::take(&mut rest).split_at_mut(r.len() * n);
            rest = tail;
            if t == 0 {
                mine = Some((r.start, part));
            } else {
                s.spawn(move || f(r.start, part));
            }
        }
        if let Some((first, part)) = mine {
            f(first, part);
        }
    });
}

/// 1-D FFTs of every row of `data` (rows of `n`), in place, on `threads` threads.
fn row_ffts(fft: &Arc<dyn Fft<f64>>, data: &mut [Complex64], n: usize, threads: usize) {
    par_rows(data, n, threads, |_, rows| {
        if rows.is_empty() {
            return;
        }
        let mut scratch = vec![Complex64::default(); fft.get_inplace_scratch_len()];
        fft.process_with_scratch(rows, &mut scratch);
    });
}

/// The side of the tiles of a blocked transpose (a 32×32 tile of complex128 is 16 KiB).
const TILE: usize = 32;

/// `dst[j][i] = src[i][j]` for `src` of `rows` × `cols`, on `threads` threads (split over the
/// rows of `dst`).
fn transpose(src: &[Complex64], rows: usize, cols: usize, dst: &mut [Complex64], threads: usize) {
    par_rows(dst, rows, threads, |first, part| {
        let my_cols = part.len().checked_div(rows).unwrap_or(0);
        for j0 in (0..my_cols).step_by(TILE) {
            for i0 in (0..rows).step_by(TILE) {
                for j in j0..(j0 + TILE).min(my_cols) {
                    for i in i0..(i0 + TILE).min(rows) {
                        part[j * rows + i] = src[i * cols + first + j];
                    }
                }
            }
        }
    });
}

/// The 2-D FFT of the `n`×`n` row-major `data`, in place, on `threads` threads.
///
/// # Errors
///
/// [`Error::Invalid`] when `data` is not `n`×`n` or N is out of range.
pub fn fft2d(n: usize, data: &mut [Complex64], threads: usize) -> Result<()> {
    check_n(n, 2)?;
    if data.len() != n * n {
        return Err(Error::Invalid(format!(
            "fft2d: {} values are not {n} x {n}",
            data.len()
        )));
    }
    let fft = plan(n);
    row_ffts(&fft, data, n, threads);
    transpose_square(data, n, threads);
    row_ffts(&fft, data, n, threads);
    transpose_square(data, n, threads);
    Ok(())
}

/// Transposes the `n`×`n` row-major `data` in place, on `threads` threads: tile (I, J) is
/// swapped, transposed, with tile (J, I), and a diagonal tile transposed within itself. No
/// second matrix: a fresh one of N² values would cost a page fault per 4 KiB on first touch,
/// as much as the transpose itself at N = 1024.
fn transpose_square(data: &mut [Complex64], n: usize, threads: usize) {
    debug_assert_eq!(data.len(), n * n);
    let tiles = n.div_ceil(TILE);
    let threads = threads.clamp(1, tiles.max(1));
    let base = Raw(data.as_mut_ptr());
    // Tile row I owns the pairs (I, J) for J ≥ I; rows go to threads round-robin, which
    // evens out their shrinking lengths.
    let work = move |t: usize| {
        let p = base;
        for ti in (t..tiles).step_by(threads) {
            let i0 = ti * TILE;
            let i1 = (i0 + TILE).min(n);
            for tj in ti..tiles {
                let j0 = tj * TILE;
                let j1 = (j0 + TILE).min(n);
                for i in i0..i1 {
                    let from = if ti == tj { i + 1 } else { j0 };
                    for j in from..j1 {
                        // SAFETY: i, j < n, so both indices lie in the n² values; the pair
                        // of tiles (ti, tj) with ti ≤ tj is this thread's alone (tile row ti
                        // is), and every element belongs to exactly one such pair.
                        unsafe { std::ptr::swap(p.0.add(i * n + j), p.0.add(j * n + i)) };
                    }
                }
            }
        }
    };
    if threads == 1 {
        work(0);
        return;
    }
    std::thread::scope(|s| {
        for t in 1..threads {
            s.spawn(move || work(t));
        }
        work(0);
    });
}

/// The 2-D DFT by its definition, O(N⁴): the reference of the tests.
pub fn naive_dft2d(n: usize, x: &[Complex64]) -> Vec<Complex64> {
    let w = |k: usize| {
        let a = -2.0 * std::f64::consts::PI * (k % n) as f64 / n as f64;
        Complex64::new(a.cos(), a.sin())
    };
    let mut out = vec![Complex64::default(); n * n];
    for k1 in 0..n {
        for k2 in 0..n {
            let mut s = Complex64::default();
            for i in 0..n {
                for j in 0..n {
                    s += x[i * n + j] * w(k1 * i + k2 * j);
                }
            }
            out[k1 * n + k2] = s;
        }
    }
    out
}

/// How the transpose meets the first pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Each finished block of rows is sent while the next is transformed.
    Overlap,
    /// Every row is transformed, then everything is sent.
    Plain,
}

/// One rank's times of one transform, in seconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Times {
    /// The whole transform.
    pub total: f64,
    /// First pass: row FFTs, packing and posting the writes.
    pub first: f64,
    /// Waiting for the other ranks' blocks.
    pub wait: f64,
    /// Second pass: the local transpose and the row FFTs.
    pub second: f64,
}

/// A raw pointer that threads write disjoint parts through.
#[derive(Clone, Copy)]
struct Raw(*mut Complex64);
// SAFETY: every user writes a range no other thread touches (see the call sites).
unsafe impl Send for Raw {}
// SAFETY: as above.
unsafe impl Sync for Raw {}

/// A 2-D FFT of a fixed N across the ranks of a world, its segments made once and reused by
/// every [`Dist::transform`]. Rank r owns rows `split(N, ranks, r)` of the input and, after a
/// transform, the same rows of Xᵀ.
pub struct Dist<'w> {
    w: &'w World,
    n: usize,
    threads: usize,
    fft: Arc<dyn Fft<f64>>,
    send: Segment<'w>,
    recv: Segment<'w>,
    epoch: u32,
}

fn cluster(e: tiers_cluster::Error) -> Error {
    Error::Invalid(format!("fft2d across ranks: {e}"))
}

impl<'w> Dist<'w> {
    /// Collective: the segments for an `n`×`n` transform on `threads` threads per rank.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for N out of range or too large for memory, or a failed cluster call.
    pub fn new(w: &'w World, n: usize, threads: usize) -> Result<Dist<'w>> {
        check_n(n, 1)?;
        let m = split(n, w.size(), w.rank()).len();
        let bytes = limits::mul("fft2d: rows", m, n * C16)?;
        let send = w.segment(SEND_SEG, bytes.max(C16)).map_err(cluster)?;
        let recv = w.segment(RECV_SEG, bytes.max(C16)).map_err(cluster)?;
        Ok(Dist {
            w,
            n,
            threads: threads.max(1),
            fft: plan(n),
            send,
            recv,
            epoch: 0,
        })
    }

    /// The rows this rank owns.
    pub fn rows(&self) -> Range<usize> {
        split(self.n, self.w.size(), self.w.rank())
    }

    /// Collective: the 2-D FFT of the rows `rows` this rank owns (row-major, [`Dist::rows`]
    /// of them), transformed in place in the first pass; returns this rank's rows of Xᵀ and its
    /// times. `blocks` is the number of blocks of the overlapped first pass (clamped so that
    /// every block of every rank has a notification of its own).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for rows of the wrong length or a failed cluster call.
    pub fn transform(
        &mut self,
        variant: Variant,
        blocks: usize,
        rows: &mut [Complex64],
    ) -> Result<(Vec<Complex64>, Times)> {
        let mut z = vec![Complex64::default(); self.rows().len() * self.n];
        let tm = self.transform_into(variant, blocks, rows, &mut z)?;
        Ok((z, tm))
    }

    /// [`Dist::transform`] into `out`, this rank's rows of Xᵀ ([`Dist::rows`] of them, N
    /// values each), which the caller keeps from one transform to the next: a fresh output
    /// of this size costs a page fault per 4 KiB on first touch, about a fifth of a
    /// transform's time at N = 1024 (FFTW's plans, too, run on buffers made once).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for `rows` or `out` of the wrong length or a failed cluster call.
    pub fn transform_into(
        &mut self,
        variant: Variant,
        blocks: usize,
        rows: &mut [Complex64],
        out: &mut [Complex64],
    ) -> Result<Times> {
        let (w, n, nt) = (self.w, self.n, self.threads);
        let (me, size) = (w.rank(), w.size());
        let mine = self.rows();
        let m = mine.len();
        if rows.len() != m * n || out.len() != m * n {
            return Err(Error::Invalid(format!(
                "fft2d across ranks: rank {me} holds {} values and has room for {}, not its \
                 {m} rows of {n}",
                rows.len(),
                out.len()
            )));
        }
        let k = match variant {
            Variant::Plain => 1,
            Variant::Overlap => blocks.clamp(1, (tiers_cluster::NOTIFICATIONS / size).max(1)),
        };
        self.epoch = self.epoch.wrapping_add(1).max(1);
        let note_value = self.epoch;
        let part = |r: usize| split(n, size, r);
        let q = w.queue(0).map_err(cluster)?;
        let send = Raw(self.send.as_ptr().cast::<Complex64>());
        let strip = Raw(self.recv.as_ptr().cast::<Complex64>());
        let mut tm = Times::default();
        let t0 = Instant::now();

        // First pass, block by block: FFT the rows, pack each destination's columns.
        for b in 0..k {
            let lb = split(m, k, b);
            if lb.is_empty() {
                continue;
            }
            let bs = lb.len();
            let c0 = Instant::now();
            let block = &mut rows[lb.start * n..lb.end * n];
            let fft = &self.fft;
            // While a block is transformed the blocks before it are on their way; across
            // hosts they move only while this rank calls into the engine (MPI over TCP
            // progresses inside MPI calls), so the thread that posts them also lets the
            // engine progress every `poll_rows` rows. Elsewhere `progress_now` does nothing.
            let poll_rows = if k > 1 && w.engine().needs_progress() {
                (POLL_VALUES / n).max(1)
            } else {
                usize::MAX
            };
            par_rows(block, n, nt, |first, part_rows| {
                if part_rows.is_empty() {
                    return;
                }
                let mut scratch = vec![Complex64::default(); fft.get_inplace_scratch_len()];
                let group = if first == 0 { poll_rows } else { usize::MAX };
                for (g, rows_g) in part_rows.chunks_mut(group.saturating_mul(n)).enumerate() {
                    if g > 0 {
                        w.progress_now();
                    }
                    fft.process_with_scratch(rows_g, &mut scratch);
                }
                for (li, y) in part_rows.chunks_exact(n).enumerate() {
                    let li = first + li; // row within the block
                    for d in 0..size {
                        let cols = part(d);
                        let src = &y[cols.clone()];
                        let at = if d == me {
                            // Straight into this rank's own strip, at its global row.
                            let gi = mine.start + lb.start + li;
                            (strip, gi * m)
                        } else {
                            (send, lb.start * n + bs * cols.start + li * cols.len())
                        };
                        // SAFETY: each (row, destination) pair has its own range in the send
                        // segment (rows × n values in all) or in the strip (n × m values);
                        // only this thread has this row, and no write of this transform has
                        // been posted from it yet; the strip is not read before the barrier
                        // below and the other ranks stopped writing it in the last transform.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                src.as_ptr(),
                                at.0 .0.add(at.1),
                                src.len(),
                            );
                        }
                    }
                }
            });
            for d in (0..size).filter(|&d| d != me) {
                let cols = part(d);
                if cols.is_empty() {
                    continue;
                }
                if q.posted() + 2 > tiers_cluster::DEFAULT_QUEUE_DEPTH / 2 {
                    q.wait_local(Timeout::Block).map_err(cluster)?;
                }
                let from = (lb.start * n + bs * cols.start) * C16;
                let to = (mine.start + lb.start) * cols.len() * C16;
                q.write_notify(
                    SEND_SEG.at(from),
                    RECV_SEG.on(d, to),
                    bs * cols.len() * C16,
                    Notification {
                        id: me * k + b,
                        value: note_value,
                    },
                )
                .map_err(cluster)?;
            }
            tm.first += c0.elapsed().as_secs_f64();
        }

        // Wait for every other rank's blocks of this rank's columns.
        let w0 = Instant::now();
        let expected: usize = if m == 0 {
            0
        } else {
            (0..size)
                .filter(|&s| s != me)
                .map(|s| {
                    (0..k)
                        .filter(|&b| !split(part(s).len(), k, b).is_empty())
                        .count()
                })
                .sum()
        };
        for _ in 0..expected {
            let id = w
                .notify_waitsome(RECV_SEG, 0..size * k, Timeout::Block)
                .map_err(cluster)?;
            w.notify_reset(RECV_SEG, id).map_err(cluster)?;
        }
        // Local completion: the send segment is rewritten only in the next transform, after
        // the barrier below (which also lands every write still on its way). A full wait
        // would pay a round trip that, across hosts, the target answers only at its next call.
        q.wait_local(Timeout::Block).map_err(cluster)?;
        tm.wait += w0.elapsed().as_secs_f64();

        // Second pass: the strip (n × m) transposed to this rank's rows of Xᵀ, then their FFTs.
        let s0 = Instant::now();
        let z = out;
        // SAFETY: the strip holds n × m values, all written (own rows above, every other
        // rank's before its notification, seen above); nobody writes it until the barrier.
        let strip_vals = unsafe { std::slice::from_raw_parts(strip.0, n * m) };
        transpose(strip_vals, n, m, z, nt);
        tm.second += s0.elapsed().as_secs_f64();
        // Nobody may write the next transform's blocks into a strip not yet read.
        let w1 = Instant::now();
        w.barrier(Timeout::Block).map_err(cluster)?;
        tm.wait += w1.elapsed().as_secs_f64();
        let s1 = Instant::now();
        row_ffts(&self.fft, z, n, nt);
        tm.second += s1.elapsed().as_secs_f64();
        tm.total = t0.elapsed().as_secs_f64();
        Ok(tm)
    }

    /// Collective: the 2-D FFT as [`Dist::transform`], the transpose done by `alltoallv`, an
    /// all-to-all of bytes the caller provides (MPI's own `MPI_Alltoallv` in `tiers fft2d
    /// --variant mpi`: the message-passing peer [GPI-MCTP] compares against). Every row is
    /// transformed first (as [`Variant::Plain`]), packed per destination in rank order, then
    /// `alltoallv(send, send_counts, recv, recv_counts)` must deliver `send_counts[d]` bytes
    /// to rank `d` and land `recv_counts[s]` bytes from rank `s` in `recv`, both packed in rank
    /// order. The same plans on the same numbers: the same bits as [`Dist::transform`].
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for rows of the wrong length; the error of `alltoallv`.
    pub fn transform_with(
        &mut self,
        rows: &mut [Complex64],
        alltoallv: &mut Alltoallv<'_>,
    ) -> Result<(Vec<Complex64>, Times)> {
        let (w, n, nt) = (self.w, self.n, self.threads);
        let (me, size) = (w.rank(), w.size());
        let m = self.rows().len();
        if rows.len() != m * n {
            return Err(Error::Invalid(format!(
                "fft2d across ranks: rank {me} holds {} values, not its {m} rows of {n}",
                rows.len()
            )));
        }
        let part = |r: usize| split(n, size, r);
        let mut tm = Times::default();
        let t0 = Instant::now();
        // First pass: the row FFTs, then each destination's columns of every row, packed in
        // rank order (destination d's block of m × cols(d) values at m · cols(d).start).
        let c0 = Instant::now();
        row_ffts(&self.fft, rows, n, nt);
        let mut send = vec![Complex64::default(); m * n];
        for (li, y) in rows.chunks_exact(n).enumerate() {
            for d in 0..size {
                let cols = part(d);
                let at = m * cols.start + li * cols.len();
                send[at..at + cols.len()].copy_from_slice(&y[cols]);
            }
        }
        tm.first = c0.elapsed().as_secs_f64();
        // The transpose: from rank s, its rows of this rank's m columns, landing at its global
        // rows of the n × m strip.
        let w0 = Instant::now();
        let mut strip = vec![Complex64::default(); n * m];
        let send_counts: Vec<usize> = (0..size).map(|d| m * part(d).len() * C16).collect();
        let recv_counts: Vec<usize> = (0..size).map(|s| part(s).len() * m * C16).collect();
        alltoallv(
            as_bytes(&send),
            &send_counts,
            as_bytes_mut(&mut strip),
            &recv_counts,
        )?;
        tm.wait = w0.elapsed().as_secs_f64();
        // Second pass, as in `transform`.
        let s0 = Instant::now();
        let mut z = vec![Complex64::default(); m * n];
        transpose(&strip, n, m, &mut z, nt);
        row_ffts(&self.fft, &mut z, n, nt);
        tm.second = s0.elapsed().as_secs_f64();
        tm.total = t0.elapsed().as_secs_f64();
        Ok((z, tm))
    }

    /// Collective: the whole X at rank 0 (`None` elsewhere) from every rank's rows of Xᵀ.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for too little memory at rank 0 or a failed cluster call.
    pub fn gather(&self, zt: &[Complex64]) -> Result<Option<Vec<Complex64>>> {
        let (w, n) = (self.w, self.n);
        let (me, size) = (w.rank(), w.size());
        let mine = self.rows();
        if zt.len() != mine.len() * n {
            return Err(Error::Invalid(format!(
                "fft2d gather: rank {me} holds {} values, not its {} rows of {n}",
                zt.len(),
                mine.len()
            )));
        }
        let bytes = if me == 0 { check_n(n, 3)? } else { C16 };
        let out = w.segment(OUT_SEG, bytes).map_err(cluster)?;
        let q = w.queue(0).map_err(cluster)?;
        if me != 0 && !zt.is_empty() {
            // SAFETY: the send segment holds m × n values and no write from it is in flight
            // (transform waited for its queue); the copy is local.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    zt.as_ptr(),
                    self.send.as_ptr().cast::<Complex64>(),
                    zt.len(),
                );
            }
            q.write_notify(
                SEND_SEG.at(0),
                OUT_SEG.on(0, mine.start * n * C16),
                zt.len() * C16,
                Notification { id: me, value: 1 },
            )
            .map_err(cluster)?;
            q.wait(Timeout::Block).map_err(cluster)?;
        }
        let result = if me == 0 {
            let others = (1..size).filter(|&r| !split(n, size, r).is_empty()).count();
            for _ in 0..others {
                let id = w
                    .notify_waitsome(OUT_SEG, 1..size.max(2), Timeout::Block)
                    .map_err(cluster)?;
                w.notify_reset(OUT_SEG, id).map_err(cluster)?;
            }
            // SAFETY: n × n values: rank 0's rows are copied in here, every other rank's
            // arrived before its notification.
            let all = unsafe {
                let p = out.as_ptr().cast::<Complex64>();
                std::ptr::copy_nonoverlapping(zt.as_ptr(), p, zt.len());
                std::slice::from_raw_parts(p, n * n)
            };
            let mut x = vec![Complex64::default(); n * n];
            transpose(all, n, n, &mut x, self.threads);
            Some(x)
        } else {
            None
        };
        drop(out);
        w.segment_delete(OUT_SEG, Timeout::Block).map_err(cluster)?;
        Ok(result)
    }

    /// Collective: deletes the segments.
    ///
    /// # Errors
    ///
    /// A failed cluster call.
    pub fn finish(self) -> Result<()> {
        let w = self.w;
        drop(self.send);
        drop(self.recv);
        w.segment_delete(SEND_SEG, Timeout::Block)
            .map_err(cluster)?;
        w.segment_delete(RECV_SEG, Timeout::Block)
            .map_err(cluster)?;
        Ok(())
    }
}

/// The `.npy` header of an `n`×`n` complex128 array (version 1, padded to 64 bytes).
pub fn npy_header(n: usize) -> Vec<u8> {
    npy::header("<c16", false, &[n, n])
}

/// Writes the `.npy` of [`to_npy`] to `out` without holding it whole.
///
/// # Errors
///
/// What writing to `out` returns.
pub fn write_npy(
    out: &mut dyn std::io::Write,
    n: usize,
    data: &[Complex64],
) -> std::io::Result<()> {
    out.write_all(&npy_header(n))?;
    let mut buf = Vec::with_capacity(4096 * C16);
    for chunk in data.chunks(4096) {
        buf.clear();
        for c in chunk {
            buf.extend_from_slice(&c.re.to_le_bytes());
            buf.extend_from_slice(&c.im.to_le_bytes());
        }
        out.write_all(&buf)?;
    }
    Ok(())
}

/// The `.npy` file of an `n`×`n` complex128 array.
pub fn to_npy(n: usize, data: &[Complex64]) -> Vec<u8> {
    let mut out = npy_header(n);
    out.reserve(data.len() * C16);
    for c in data {
        out.extend_from_slice(&c.re.to_le_bytes());
        out.extend_from_slice(&c.im.to_le_bytes());
    }
    out
}

/// Where the data of a square `.npy` starts, its N, its element and whether it is
/// column-major (Fortran order), from its leading bytes (`path` names the file in errors).
///
/// # Errors
///
/// [`Error::Format`] for anything but a square 2-D `.npy` of complex128, complex64, float64
/// or float32 values (either byte order).
pub fn npy_layout(bytes: &[u8], path: &Path) -> Result<(usize, usize, ComplexElem, bool)> {
    let bad = |msg: String| Error::format(path.display(), 0, msg);
    let h = npy::parse(bytes).map_err(bad)?;
    let elem = ComplexElem::from_descr(&h.descr).ok_or_else(|| {
        bad(format!(
            "dtype {}: fft2d reads complex128, complex64, float64 or float32 (<c16, <c8, <f8, \
             <f4, or big-endian)",
            h.descr
        ))
    })?;
    let shape = h.shape;
    if shape.len() != 2 || shape[0] != shape[1] {
        return Err(bad(format!("an N x N array is needed, shape is {shape:?}")));
    }
    Ok((h.data, shape[0], elem, h.fortran))
}

/// Reads N of a square `.npy` (complex128, complex64, float64 or float32, either byte order,
/// C or Fortran order) and its rows `rows(N)` (the range a caller owns, a function of N):
/// `(N, values)`. A Fortran-order file holds the matrix by columns: each column's part in
/// `rows(N)` is read in place.
///
/// # Errors
///
/// [`Error::Io`] for an unreadable file, [`Error::Format`] for a malformed one (wrong dtype,
/// shape, size), [`Error::Invalid`] for N out of range.
pub fn read_rows(
    path: &Path,
    rows: impl FnOnce(usize) -> Range<usize>,
) -> Result<(usize, Vec<Complex64>)> {
    use std::os::unix::fs::FileExt;
    let io = |e| Error::io(path, "reading", e);
    let mut f = std::fs::File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    let head = crate::npy::read_head(&mut f).map_err(io)?;
    let (start, n, elem, fortran) = npy_layout(&head, path)?;
    check_n(n, 1)?;
    let eb = elem.bytes();
    let want = (n as u64)
        .checked_mul(n as u64)
        .and_then(|x| x.checked_mul(eb as u64))
        .and_then(|x| x.checked_add(start as u64));
    if want != Some(len) {
        let needs = want.map_or("more bytes than a file can hold".to_string(), |w| {
            format!("{w} bytes")
        });
        return Err(Error::format(
            path.display(),
            0,
            format!("{len} bytes, but a {n} x {n} {elem} .npy needs {needs}"),
        ));
    }
    let r = rows(n);
    if r.end > n || r.start > r.end {
        return Err(Error::Invalid(format!("fft2d: rows {r:?} beyond N = {n}")));
    }
    // A value that is not finite would spread through its whole row and column and be
    // written out as a result: refused, named by its place in the matrix.
    let finite = |vals: Vec<Complex64>| -> Result<(usize, Vec<Complex64>)> {
        match vals
            .iter()
            .position(|v| !(v.re.is_finite() && v.im.is_finite()))
        {
            None => Ok((n, vals)),
            Some(at) => Err(Error::format(
                path.display(),
                0,
                format!(
                    "element ({}, {}) = {} is not a finite number",
                    r.start + at / n,
                    at % n,
                    vals[at]
                ),
            )),
        }
    };
    if !fortran {
        let mut raw = vec![0u8; r.len() * n * eb];
        f.read_exact_at(&mut raw, (start + r.start * n * eb) as u64)
            .map_err(io)?;
        return finite(raw.chunks_exact(eb).map(|c| elem.decode(c)).collect());
    }
    // Column j holds element (i, j) at index j·N + i: the rows' part of each column is one
    // read, scattered into the rows.
    let mut vals = vec![Complex64::default(); r.len() * n];
    let mut raw = vec![0u8; r.len() * eb];
    for j in 0..n {
        f.read_exact_at(&mut raw, (start + (j * n + r.start) * eb) as u64)
            .map_err(io)?;
        for (k, c) in raw.chunks_exact(eb).enumerate() {
            vals[k * n + j] = elem.decode(c);
        }
    }
    finite(vals)
}

/// The largest |a − b| over the largest |b|: the relative error of `a` against `b`. NaN
/// where a value of either is NaN or the two differ in length (a check must not pass
/// them).
pub fn relative_error(a: &[Complex64], b: &[Complex64]) -> f64 {
    if a.len() != b.len() {
        return f64::NAN;
    }
    // `f64::max` drops a NaN; these folds keep it.
    let worst = |m: f64, x: f64| {
        if x.is_nan() || m.is_nan() {
            f64::NAN
        } else {
            m.max(x)
        }
    };
    let scale = b.iter().map(|x| x.norm()).fold(0.0, worst);
    let diff = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).norm())
        .fold(0.0, worst);
    if scale == 0.0 {
        diff
    } else {
        diff / scale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(v: &[Complex64]) -> Vec<u64> {
        v.iter()
            .flat_map(|c| [c.re.to_bits(), c.im.to_bits()])
            .collect()
    }

    #[test]
    fn the_square_transpose_in_place_matches_the_copying_one() {
        for n in [1, 2, 31, 32, 33, 64, 100] {
            let x = generate_rows(5, n, 0..n);
            let mut want = vec![Complex64::default(); n * n];
            transpose(&x, n, n, &mut want, 1);
            for threads in [1, 2, 5] {
                let mut got = x.clone();
                transpose_square(&mut got, n, threads);
                assert_eq!(bits(&got), bits(&want), "n={n} threads={threads}");
            }
        }
    }

    #[test]
    fn matches_the_naive_dft() {
        for n in [1, 2, 3, 4, 5, 8, 12, 16] {
            let x = generate_rows(7, n, 0..n);
            let want = naive_dft2d(n, &x);
            for threads in [1, 3] {
                let mut got = x.clone();
                fft2d(n, &mut got, threads).unwrap();
                let e = relative_error(&got, &want);
                assert!(e < 1e-10, "n={n} threads={threads}: {e}");
            }
        }
    }

    #[test]
    fn a_delta_transforms_to_a_plane_wave() {
        let n = 8;
        let mut x = vec![Complex64::default(); n * n];
        x[n + 2] = Complex64::new(1.0, 0.0); // at (1, 2)
        fft2d(n, &mut x, 1).unwrap();
        let a = -2.0 * std::f64::consts::PI / n as f64;
        for k1 in 0..n {
            for k2 in 0..n {
                let ph = a * (k1 + 2 * k2) as f64;
                let want = Complex64::new(ph.cos(), ph.sin());
                assert!((x[k1 * n + k2] - want).norm() < 1e-12);
            }
        }
    }

    fn across(n: usize, ranks: usize, threads: usize, variant: Variant, blocks: usize) -> Vec<u64> {
        let out = tiers_cluster::run_local(ranks, |w| {
            let mut d = Dist::new(w, n, threads).unwrap();
            let mut rows = generate_rows(3, n, d.rows());
            // Twice, so that the reuse of the segments is exercised: the second time into a
            // caller's buffer full of NaNs, which must be overwritten entirely.
            let mut res = None;
            for round in 0..2 {
                let mut r = rows.clone();
                let zt = if round == 0 {
                    d.transform(variant, blocks, &mut r).unwrap().0
                } else {
                    let mut short = vec![Complex64::default(); r.len().saturating_sub(1)];
                    if !r.is_empty() {
                        let e = d.transform_into(variant, blocks, &mut r, &mut short);
                        assert!(matches!(e, Err(Error::Invalid(_))), "{e:?}");
                    }
                    let mut out = vec![Complex64::new(f64::NAN, f64::NAN); r.len()];
                    d.transform_into(variant, blocks, &mut r, &mut out).unwrap();
                    out
                };
                res = d.gather(&zt).unwrap();
            }
            rows.clear();
            d.finish().unwrap();
            res
        })
        .unwrap();
        bits(out.into_iter().next().flatten().as_deref().unwrap())
    }

    /// `transform_with` with an all-to-all of bytes between the ranks (threads of this
    /// process): each rank leaves its packed blocks on a shared board, a barrier, then each
    /// collects its own, as MPI_Alltoallv would deliver them.
    fn across_exchanged(n: usize, ranks: usize, threads: usize) -> Vec<u64> {
        use std::collections::HashMap;
        use std::sync::Mutex;
        let board: Mutex<HashMap<(usize, usize), Vec<u8>>> = Mutex::new(HashMap::new());
        let out = tiers_cluster::run_local(ranks, |w| {
            let mut d = Dist::new(w, n, threads).unwrap();
            let mut rows = generate_rows(3, n, d.rows());
            let me = w.rank();
            let mut exchange = |s: &[u8], sc: &[usize], r: &mut [u8], rc: &[usize]| {
                let mut at = 0;
                for (dst, &c) in sc.iter().enumerate() {
                    board
                        .lock()
                        .unwrap()
                        .insert((me, dst), s[at..at + c].to_vec());
                    at += c;
                }
                assert_eq!(at, s.len());
                w.barrier(Timeout::Block).unwrap();
                let mut at = 0;
                for (src, &c) in rc.iter().enumerate() {
                    let b = board.lock().unwrap().remove(&(src, me)).unwrap();
                    assert_eq!(b.len(), c);
                    r[at..at + c].copy_from_slice(&b);
                    at += c;
                }
                assert_eq!(at, r.len());
                w.barrier(Timeout::Block).unwrap();
                Ok(())
            };
            let (zt, _) = d.transform_with(&mut rows, &mut exchange).unwrap();
            let res = d.gather(&zt).unwrap();
            d.finish().unwrap();
            res
        })
        .unwrap();
        bits(out.into_iter().next().flatten().as_deref().unwrap())
    }

    #[test]
    fn an_external_all_to_all_gives_the_serial_bits() {
        for n in [1, 5, 16] {
            let mut serial = generate_rows(3, n, 0..n);
            fft2d(n, &mut serial, 1).unwrap();
            let want = bits(&serial);
            for ranks in [1, 2, 3] {
                for threads in [1, 2] {
                    assert!(
                        across_exchanged(n, ranks, threads) == want,
                        "n={n} {ranks} ranks x {threads} threads"
                    );
                }
            }
        }
    }

    #[test]
    fn every_rank_thread_and_variant_gives_the_serial_bits() {
        for n in [1, 5, 16, 30] {
            let mut serial = generate_rows(3, n, 0..n);
            fft2d(n, &mut serial, 1).unwrap();
            let want = bits(&serial);
            for ranks in [1, 2, 3, 4] {
                for threads in [1, 2] {
                    for (v, b) in [
                        (Variant::Plain, 1),
                        (Variant::Overlap, 4),
                        (Variant::Overlap, 64),
                    ] {
                        assert!(
                            across(n, ranks, threads, v, b) == want,
                            "n={n} {ranks} ranks x {threads} threads {v:?} blocks={b}"
                        );
                    }
                }
            }
        }
    }

    /// A square `.npy` of `x` as `descr` (`>c16`, `<f4`, …), by rows or by columns.
    fn npy_as(n: usize, x: &[Complex64], descr: &str, fortran: bool) -> Vec<u8> {
        let mut out = npy::header(descr, fortran, &[n, n]);
        let (big, wide) = (
            descr.starts_with('>'),
            descr.ends_with("16") || descr.ends_with("f8"),
        );
        for k in 0..n * n {
            let (i, j) = if fortran {
                (k % n, k / n)
            } else {
                (k / n, k % n)
            };
            let c = x[i * n + j];
            let parts = if descr.contains('c') {
                vec![c.re, c.im]
            } else {
                vec![c.re]
            };
            for v in parts {
                match (wide, big) {
                    (true, false) => out.extend_from_slice(&v.to_le_bytes()),
                    (true, true) => out.extend_from_slice(&v.to_be_bytes()),
                    (false, false) => out.extend_from_slice(&(v as f32).to_le_bytes()),
                    (false, true) => out.extend_from_slice(&(v as f32).to_be_bytes()),
                }
            }
        }
        out
    }

    #[test]
    fn npy_of_other_dtypes_and_fortran_order_read_as_the_same_matrix() {
        let dir = std::env::temp_dir().join(format!("tiers-fft2d-dt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x.npy");
        let n = 5;
        // Values exact in f32, so that every dtype holds them alike.
        let x: Vec<Complex64> = (0..n * n)
            .map(|k| Complex64::new(k as f64 * 0.5 - 3.0, 7.0 - k as f64 * 0.25))
            .collect();
        let real: Vec<Complex64> = x.iter().map(|c| Complex64::new(c.re, 0.0)).collect();
        for descr in ["<c16", ">c16", "<c8", ">c8", "<f8", ">f8", "<f4", ">f4"] {
            let want = if descr.contains('c') { &x } else { &real };
            for fortran in [false, true] {
                std::fs::write(&p, npy_as(n, &x, descr, fortran)).unwrap();
                let (m, all) = read_rows(&p, |n| 0..n).unwrap();
                assert_eq!(
                    (m, bits(&all)),
                    (n, bits(want)),
                    "{descr} fortran={fortran}"
                );
                let (_, some) = read_rows(&p, |_| 1..4).unwrap();
                assert_eq!(bits(&some), bits(&want[n..4 * n]), "{descr} {fortran}");
                let (_, none) = read_rows(&p, |_| 2..2).unwrap();
                assert!(none.is_empty());
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn npy_round_trips_and_rejects_bad_files() {
        let dir = std::env::temp_dir().join(format!("tiers-fft2d-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x.npy");
        let n = 6;
        let x = generate_rows(1, n, 0..n);
        std::fs::write(&p, to_npy(n, &x)).unwrap();
        // Streamed, the same bytes.
        let mut streamed = Vec::new();
        write_npy(&mut streamed, n, &x).unwrap();
        assert_eq!(streamed, to_npy(n, &x));
        assert_eq!(npy_header(n).len() % 64, 0);
        let (m, all) = read_rows(&p, |n| 0..n).unwrap();
        assert_eq!((m, bits(&all)), (n, bits(&x)));
        let (_, some) = read_rows(&p, |_| 2..4).unwrap();
        assert_eq!(bits(&some), bits(&x[2 * n..4 * n]));
        // Truncated, wrong dtype, not square.
        let bytes = to_npy(n, &x);
        std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        assert!(read_rows(&p, |n| 0..n).is_err());
        let mut f8 = bytes.clone();
        let at = f8.windows(4).position(|w| w == b"<c16").unwrap();
        f8[at..at + 4].copy_from_slice(b"<f8 ");
        std::fs::write(&p, &f8).unwrap();
        assert!(read_rows(&p, |n| 0..n)
            .unwrap_err()
            .to_string()
            .contains("<f8"));
        std::fs::write(&p, b"hello").unwrap();
        assert!(read_rows(&p, |n| 0..n).is_err());
        // A value that is not finite is refused, named by its place (also when only the rows
        // that hold it are read, and in Fortran order).
        let mut bad = x.clone();
        bad[3 * n + 4] = Complex64::new(f64::INFINITY, 0.0);
        std::fs::write(&p, to_npy(n, &bad)).unwrap();
        for rows in [0..n, 3..4] {
            let e = read_rows(&p, |_| rows.clone()).unwrap_err().to_string();
            assert!(
                e.contains("element (3, 4)") && e.contains("not a finite"),
                "{e}"
            );
        }
        assert!(read_rows(&p, |_| 0..3).is_ok());
        // A check compares like with like: NaN and unequal lengths are never a pass.
        let mut nan = x.clone();
        nan[5] = Complex64::new(f64::NAN, 0.0);
        assert!(relative_error(&nan, &x).is_nan());
        assert!(relative_error(&x, &nan).is_nan());
        assert!(relative_error(&x[1..], &x).is_nan());
        assert_eq!(relative_error(&x, &x), 0.0);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(check_n(0, 1).is_err());
        assert!(check_n(MAX_N + 1, 1).is_err());
        assert!(check_n(MAX_N, 1 << 20).is_err());
    }
}

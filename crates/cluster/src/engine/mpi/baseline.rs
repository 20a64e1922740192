//! MPI's own operations, called directly: the baseline that tiers' MPI engine is measured
//! against (`tiers bench ranks|put|latency` under mpirun print MPI's rows beside tiers', and
//! the `mpi` variants of `tiers fft2d` and `tiers redblack` move their data with MPI's own
//! two-sided calls). Nothing of tiers sits between these calls and MPI.

use super::raw::{self, Comm, Req, Threading, Win};
use crate::collective::Op;
use crate::error::Result;
use std::marker::PhantomData;
use std::os::raw::c_int;

/// MPI itself, on a duplicate of `MPI_COMM_WORLD`.
#[derive(Debug)]
pub struct Mpi {
    comm: Comm,
}

impl Mpi {
    /// Initialises MPI (funneled, unless a tiers world initialised it already) and duplicates
    /// its world communicator.
    ///
    /// # Errors
    ///
    /// [`Error::Mpi`](crate::Error::Mpi) when MPI cannot start.
    pub fn init() -> Result<Mpi> {
        raw::init(Threading::Funneled)?;
        Ok(Mpi {
            comm: raw::dup(raw::world())?,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        raw::rank_size(self.comm).0
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        raw::rank_size(self.comm).1
    }

    /// `MPI_Barrier`.
    pub fn barrier(&self) {
        raw::barrier_blocking(self.comm);
    }

    /// `MPI_Allreduce` of `f64`s.
    pub fn allreduce_f64(&self, x: &[f64], out: &mut [f64], op: Op) {
        raw::allreduce_f64_blocking(x, out, op, self.comm);
    }

    /// The thread level MPI provided (`MPI_THREAD_*` as a number).
    pub fn thread_level(&self) -> i32 {
        raw::provided()
    }

    /// `MPI_Send` of `buf` to `dest` with `tag` (blocking: returns once `buf` may be reused).
    ///
    /// # Errors
    ///
    /// [`Error::MessageTooLarge`](crate::Error::MessageTooLarge) beyond `i32::MAX` bytes,
    /// [`Error::NoSuchRank`](crate::Error::NoSuchRank), [`Error::Mpi`](crate::Error::Mpi).
    pub fn send(&self, buf: &[u8], dest: usize, tag: i32) -> Result<()> {
        self.check(buf.len(), dest)?;
        raw::send_blocking(buf, dest, tag, self.comm)
    }

    /// `MPI_Recv` of exactly the next message from `src` with `tag` into `buf` (blocking).
    ///
    /// # Errors
    ///
    /// As [`Mpi::send`]; MPI's truncation error when the message is longer than `buf`.
    pub fn recv(&self, buf: &mut [u8], src: usize, tag: i32) -> Result<()> {
        self.check(buf.len(), src)?;
        raw::recv_blocking(buf, src, tag, self.comm)
    }

    /// `MPI_Isend` of `buf` to `dest` with `tag`, completed by [`PendingSend::wait`] (or when
    /// dropped): for a benchmark that posts in one place and completes in another, as OSU's
    /// overlap benchmarks do.
    ///
    /// # Errors
    ///
    /// As [`Mpi::send`].
    pub fn isend<'a>(&self, buf: &'a [u8], dest: usize, tag: i32) -> Result<PendingSend<'a>> {
        self.check(buf.len(), dest)?;
        // SAFETY: buf is borrowed for 'a by the PendingSend, which completes the request
        // before it goes (wait, or drop).
        let req = unsafe { raw::isend(buf, dest, tag, self.comm, false)? };
        Ok(PendingSend {
            req: Some(req),
            _buf: PhantomData,
        })
    }

    /// `MPI_Recv` of the next message from `src` with any tag into `buf` (blocking): its tag
    /// and length.
    ///
    /// # Errors
    ///
    /// As [`Mpi::send`]; MPI's truncation error when the message is longer than `buf`.
    pub fn recv_any_tag(&self, buf: &mut [u8], src: usize) -> Result<(i32, usize)> {
        self.check(buf.len(), src)?;
        // SAFETY: buf is borrowed mutably for this whole call, which completes the request.
        let mut req = unsafe { raw::irecv(buf.as_mut_ptr(), buf.len(), src, None, self.comm)? };
        loop {
            if let Some(st) = req.test_status()? {
                return Ok((st.tag(), st.bytes()?));
            }
        }
    }

    /// Runs `f` with a set of non-blocking requests (`MPI_Isend`/`MPI_Irecv` posted through
    /// [`Requests`]), then completes them all (`MPI_Waitall`) before returning, so that the
    /// buffers the requests borrow are never released or read early. Computation placed in
    /// `f` after the posts overlaps the transfers as far as MPI progresses them on its own.
    ///
    /// ```no_run
    /// # fn main() -> tiers_cluster::Result<()> {
    /// use tiers_cluster::engine::mpi::baseline::Mpi;
    /// let mpi = Mpi::init()?;
    /// let (me, n) = (mpi.rank(), mpi.size());
    /// let out = vec![me as u8; 64];
    /// let mut inc = vec![0u8; 64];
    /// mpi.exchange(|r| {
    ///     r.irecv(&mut inc, (me + n - 1) % n, 7)?;
    ///     r.isend(&out, (me + 1) % n, 7)
    /// })?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// The first error of `f` or of the wait; requests already posted are completed first.
    pub fn exchange<'a, R>(&'a self, f: impl FnOnce(&mut Requests<'a>) -> Result<R>) -> Result<R> {
        let mut reqs = Requests {
            mpi: self,
            reqs: Vec::new(),
            _bufs: PhantomData,
        };
        let r = f(&mut reqs);
        let w = reqs.waitall();
        let r = r?;
        w?;
        Ok(r)
    }

    /// `MPI_Alltoallv` of bytes: `send_counts[j]` bytes from `send` (packed in rank order) go
    /// to rank `j`, and `recv_counts[i]` bytes from rank `i` land in `recv` (packed in rank
    /// order). The counts must agree pairwise across ranks, as MPI requires.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) when a count array is not one
    /// per rank or the counts do not add up to the buffer's length,
    /// [`Error::MessageTooLarge`](crate::Error::MessageTooLarge) beyond `i32::MAX` bytes,
    /// [`Error::Mpi`](crate::Error::Mpi).
    pub fn alltoallv_bytes(
        &self,
        send: &[u8],
        send_counts: &[usize],
        recv: &mut [u8],
        recv_counts: &[usize],
    ) -> Result<()> {
        let n = self.size();
        let (sc, sd) = counts_displs(send_counts, send.len(), n)?;
        let (rc, rd) = counts_displs(recv_counts, recv.len(), n)?;
        raw::alltoallv_bytes_blocking(send, &sc, &sd, recv, &rc, &rd, self.comm)
    }

    /// Checks a message length (MPI counts are `int`) and a peer rank.
    fn check(&self, len: usize, peer: usize) -> Result<()> {
        let n = self.size();
        if peer >= n {
            return Err(crate::Error::NoSuchRank {
                rank: peer,
                size: n,
            });
        }
        if len > i32::MAX as usize {
            return Err(crate::Error::MessageTooLarge {
                len,
                max: i32::MAX as usize,
            });
        }
        Ok(())
    }

    /// `MPI_Win_allocate` of `bytes` at every rank (collective).
    ///
    /// # Errors
    ///
    /// [`Error::Mpi`](crate::Error::Mpi) when MPI refuses.
    pub fn window(&self, bytes: usize) -> Result<Window> {
        let (win, _base) = Win::allocate(bytes, self.comm)?;
        Ok(Window { win, bytes })
    }
}

/// MPI's `int` counts and displacements for [`Mpi::alltoallv_bytes`], checked against the
/// buffer's length and the number of ranks.
fn counts_displs(counts: &[usize], len: usize, n: usize) -> Result<(Vec<c_int>, Vec<c_int>)> {
    let mismatch = || crate::Error::LengthMismatch {
        input: counts.iter().fold(0usize, |a, &c| a.saturating_add(c)),
        output: len,
    };
    if counts.len() != n {
        return Err(crate::Error::LengthMismatch {
            input: counts.len(),
            output: n,
        });
    }
    let too_large = |l: usize| crate::Error::MessageTooLarge {
        len: l,
        max: i32::MAX as usize,
    };
    let (mut c, mut d) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut at = 0usize;
    for &k in counts {
        d.push(c_int::try_from(at).map_err(|_| too_large(at))?);
        c.push(c_int::try_from(k).map_err(|_| too_large(k))?);
        at = at.checked_add(k).ok_or_else(mismatch)?;
    }
    if at != len {
        return Err(mismatch());
    }
    Ok((c, d))
}

/// The non-blocking requests of one [`Mpi::exchange`]: each borrows its buffer for `'a`, which
/// outlives the exchange, and the exchange completes every request before it returns (also
/// when its closure fails), so no buffer is freed or read while MPI may still use it.
pub struct Requests<'a> {
    mpi: &'a Mpi,
    reqs: Vec<Req>,
    _bufs: PhantomData<&'a mut [u8]>,
}

impl std::fmt::Debug for Requests<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Requests")
            .field("pending", &self.reqs.len())
            .finish()
    }
}

impl<'a> Requests<'a> {
    /// `MPI_Isend` of `buf` to `dest` with `tag`.
    ///
    /// # Errors
    ///
    /// As [`Mpi::send`].
    pub fn isend(&mut self, buf: &'a [u8], dest: usize, tag: i32) -> Result<()> {
        self.mpi.check(buf.len(), dest)?;
        // SAFETY: buf is borrowed for 'a, beyond the exchange, which waits for the request.
        let r = unsafe { raw::isend(buf, dest, tag, self.mpi.comm, false)? };
        self.reqs.push(r);
        Ok(())
    }

    /// `MPI_Irecv` into `buf` of the next message from `src` with `tag` (at most `buf.len()`
    /// bytes).
    ///
    /// # Errors
    ///
    /// As [`Mpi::send`].
    pub fn irecv(&mut self, buf: &'a mut [u8], src: usize, tag: i32) -> Result<()> {
        self.mpi.check(buf.len(), src)?;
        // SAFETY: buf is borrowed mutably for 'a, beyond the exchange, which waits for the
        // request; nobody else can read or write it meanwhile.
        let r = unsafe { raw::irecv(buf.as_mut_ptr(), buf.len(), src, Some(tag), self.mpi.comm)? };
        self.reqs.push(r);
        Ok(())
    }

    /// `MPI_Waitall` on every request posted so far (the exchange also does this at its end;
    /// calling it earlier ends the overlap there).
    ///
    /// # Errors
    ///
    /// [`Error::Mpi`](crate::Error::Mpi).
    pub fn waitall(&mut self) -> Result<()> {
        let r = raw::waitall_blocking(&mut self.reqs);
        self.reqs.clear();
        r
    }
}

/// One `MPI_Isend` in flight ([`Mpi::isend`]); its buffer stays borrowed until it completes.
pub struct PendingSend<'a> {
    req: Option<Req>,
    _buf: PhantomData<&'a [u8]>,
}

impl std::fmt::Debug for PendingSend<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingSend")
            .field("done", &self.req.is_none())
            .finish()
    }
}

impl PendingSend<'_> {
    /// Completes the send (`MPI_Wait`): the buffer may be reused.
    ///
    /// # Errors
    ///
    /// [`Error::Mpi`](crate::Error::Mpi).
    pub fn wait(mut self) -> Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        match self.req.take() {
            Some(r) => raw::waitall_blocking(&mut [r]),
            None => Ok(()),
        }
    }
}

impl Drop for PendingSend<'_> {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// An MPI window with every target locked (`MPI_Win_lock_all`).
pub struct Window {
    win: Win,
    bytes: usize,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl Window {
    /// `MPI_Put` of `src` to `target` at `disp`; complete once [`Window::flush`] returns.
    ///
    /// # Safety
    ///
    /// `src` must stay unchanged and alive until the next flush of `target`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) when it would pass the window's end,
    /// [`Error::Mpi`](crate::Error::Mpi) when MPI fails.
    pub unsafe fn put(&self, src: &[u8], target: usize, disp: usize) -> Result<()> {
        if disp
            .checked_add(src.len())
            .is_none_or(|end| end > self.bytes)
        {
            return Err(crate::Error::OutOfBounds {
                rank: target,
                seg: u32::MAX,
                offset: disp,
                len: src.len(),
                size: self.bytes,
            });
        }
        // SAFETY: in bounds (checked); the caller keeps src until the flush.
        unsafe { self.win.put(src.as_ptr(), src.len(), target, disp) }
    }

    /// `MPI_Win_flush` of `target`: every put to it is complete.
    ///
    /// # Errors
    ///
    /// [`Error::Mpi`](crate::Error::Mpi) when MPI fails.
    pub fn flush(&self, target: usize) -> Result<()> {
        self.win.flush(target)
    }

    /// `MPI_Fetch_and_op` (sum) of a `u64` at `target`'s `disp`, then a flush.
    ///
    /// # Errors
    ///
    /// [`Error::Mpi`](crate::Error::Mpi) when MPI fails.
    pub fn fetch_add(&self, target: usize, disp: usize, v: u64) -> Result<u64> {
        self.win.fetch_add(target, disp, v)
    }

    /// `MPI_Win_unlock_all` and `MPI_Win_free` (collective).
    ///
    /// # Errors
    ///
    /// [`Error::Mpi`](crate::Error::Mpi) when MPI fails.
    pub fn free(self) -> Result<()> {
        self.win.free()
    }
}

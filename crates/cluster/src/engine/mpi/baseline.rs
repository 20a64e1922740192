//! MPI's own operations, called directly: the baseline that tiers' MPI engine is measured
//! against (`tiers bench ranks|put` under mpirun print MPI's rows beside tiers'). Nothing of
//! tiers sits between these calls and MPI.

use super::raw::{self, Comm, Threading, Win};
use crate::collective::Op;
use crate::error::Result;

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

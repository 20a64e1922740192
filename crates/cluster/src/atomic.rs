//! Global atomic counters: 8-byte words of any segment at any rank.

use crate::error::{Rank, Result};
use crate::timeout::Timeout;
use crate::world::{SegId, World};

impl World {
    /// Atomically adds `value` (wrapping) to the word at `seg[offset]` of `rank`; returns the old
    /// value. `offset` must be a multiple of 8.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchRank`](crate::Error::NoSuchRank), [`Error::NoSuchSegment`](crate::Error::NoSuchSegment), [`Error::OutOfBounds`](crate::Error::OutOfBounds) or
    /// [`Error::Misaligned`](crate::Error::Misaligned) for a bad word, [`Error::PeerFailed`](crate::Error::PeerFailed) when `rank` has failed,
    /// [`Error::Mpi`](crate::Error::Mpi) when MPI fails.
    pub fn atomic_fetch_add(
        &self,
        seg: SegId,
        offset: usize,
        rank: Rank,
        value: u64,
    ) -> Result<u64> {
        self.atomic_fetch_add_timeout(seg, offset, rank, value, Timeout::Block)
    }

    /// Atomically sets the word at `seg[offset]` of `rank` to `new` if it equals `expected`;
    /// returns the old value either way (success when it equals `expected`).
    ///
    /// # Errors
    ///
    /// As [`World::atomic_fetch_add`].
    pub fn atomic_compare_swap(
        &self,
        seg: SegId,
        offset: usize,
        rank: Rank,
        expected: u64,
        new: u64,
    ) -> Result<u64> {
        self.atomic_compare_swap_timeout(seg, offset, rank, expected, new, Timeout::Block)
    }

    /// [`World::atomic_fetch_add`] that waits for the answer until `timeout` at most. On the
    /// memory engines an atomic completes at once; on the `tcp` engine the wait for the
    /// target's answer ends at the timeout; on the `mpi` engine the call waits in MPI as the
    /// untimed one does.
    ///
    /// # Errors
    ///
    /// As [`World::atomic_fetch_add`], and [`Error::Timeout`](crate::Error::Timeout) when
    /// no answer came in time. The request has gone out: the same call from the same thread
    /// resumes it (the addition is applied once, and that call gets the old value); another
    /// call leaves it to be applied without its answer.
    pub fn atomic_fetch_add_timeout(
        &self,
        seg: SegId,
        offset: usize,
        rank: Rank,
        value: u64,
        timeout: Timeout,
    ) -> Result<u64> {
        self.check_rank(rank)?;
        self.engine
            .atomic_fetch_add_timeout(rank, seg.0, offset, value, timeout)
    }

    /// [`World::atomic_compare_swap`] that waits until `timeout` at most, as
    /// [`World::atomic_fetch_add_timeout`].
    ///
    /// # Errors
    ///
    /// As [`World::atomic_fetch_add_timeout`].
    pub fn atomic_compare_swap_timeout(
        &self,
        seg: SegId,
        offset: usize,
        rank: Rank,
        expected: u64,
        new: u64,
        timeout: Timeout,
    ) -> Result<u64> {
        self.check_rank(rank)?;
        self.engine
            .atomic_compare_swap_timeout(rank, seg.0, offset, expected, new, timeout)
    }
}

//! Queues: where one-sided requests are posted and waited for.
//!
//! Requests on a queue complete locally in any order; [`Queue::wait`] returns when all of them
//! have. A queue holds at most its depth of requests between two waits: a post beyond that is
//! refused with [`Error::QueueFull`] (nothing is posted), never silently blocked on.

use crate::config::QUEUES;
use crate::engine::Transfer;
use crate::error::{Error, Rank, Result};
use crate::timeout::Timeout;
use crate::world::{SegId, World};
use std::sync::atomic::Ordering;

/// A handle on one of the world's queues.
#[derive(Clone, Copy)]
pub struct Queue<'w> {
    world: &'w World,
    q: usize,
}

impl Transfer {
    /// `len` bytes between `local[local_off..]` and `remote[remote_off..]` of `rank`.
    pub fn new(
        local: SegId,
        local_off: usize,
        rank: Rank,
        remote: SegId,
        remote_off: usize,
        len: usize,
    ) -> Transfer {
        Transfer {
            local_seg: local.0,
            local_off,
            rank,
            remote_seg: remote.0,
            remote_off,
            len,
        }
    }
}

impl World {
    /// Queue `q` (`0..QUEUES`).
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchQueue`] when `q` is not below [`QUEUES`].
    pub fn queue(&self, q: usize) -> Result<Queue<'_>> {
        if q >= QUEUES {
            return Err(Error::NoSuchQueue {
                queue: q,
                count: QUEUES,
            });
        }
        Ok(Queue { world: self, q })
    }
}

impl<'w> Queue<'w> {
    /// The queue's index.
    pub fn index(&self) -> usize {
        self.q
    }

    /// Requests posted since the last wait.
    pub fn posted(&self) -> usize {
        self.world.posted[self.q].load(Ordering::Relaxed)
    }

    #[inline]
    fn reserve(&self, k: usize) -> Result<()> {
        let c = &self.world.posted[self.q];
        let old = c.fetch_add(k, Ordering::Relaxed);
        if old + k > self.world.depth {
            c.fetch_sub(k, Ordering::Relaxed);
            return Err(Error::QueueFull {
                queue: self.q,
                depth: self.world.depth,
            });
        }
        Ok(())
    }

    #[inline]
    fn post(&self, k: usize, f: impl FnOnce() -> Result<()>) -> Result<()> {
        self.reserve(k)?;
        // Success returns a fresh `Ok(())` rather than moving the engine's `Result` on: the
        // error type is 40 bytes, returned through memory, and copying it whole after the
        // callee wrote only its tag costs a store-forwarding stall on every request.
        match f() {
            Ok(()) => Ok(()),
            Err(e) => {
                self.world.posted[self.q].fetch_sub(k, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    fn check(&self, t: &Transfer) -> Result<()> {
        self.world.check_rank(t.rank)
    }

    fn check_notify(&self, id: usize, value: u32) -> Result<()> {
        self.world.check_notification(id)?;
        if value == 0 {
            return Err(Error::ZeroNotification { id });
        }
        Ok(())
    }

    /// Posts a write of `len` bytes from `local[local_off..]` to `remote[remote_off..]` at `rank`.
    ///
    /// # Errors
    ///
    /// Nothing is posted when it fails: [`Error::NoSuchRank`], [`Error::QueueFull`],
    /// [`Error::NoSuchSegment`] or [`Error::OutOfBounds`] for a bad argument or a full queue,
    /// [`Error::PeerFailed`] when `rank` has failed, [`Error::Mpi`] when MPI fails.
    #[inline]
    pub fn write(
        &self,
        local: SegId,
        local_off: usize,
        rank: Rank,
        remote: SegId,
        remote_off: usize,
        len: usize,
    ) -> Result<()> {
        self.write_t(&Transfer::new(
            local, local_off, rank, remote, remote_off, len,
        ))
    }

    /// Posts a write described by `t`.
    ///
    /// # Errors
    ///
    /// As [`Queue::write`].
    #[inline]
    pub fn write_t(&self, t: &Transfer) -> Result<()> {
        self.check(t)?;
        self.post(1, || self.world.engine.write(self.q, t))
    }

    /// Posts a read of `len` bytes from `remote[remote_off..]` at `rank` to `local[local_off..]`.
    ///
    /// # Errors
    ///
    /// As [`Queue::write`].
    #[inline]
    pub fn read(
        &self,
        local: SegId,
        local_off: usize,
        rank: Rank,
        remote: SegId,
        remote_off: usize,
        len: usize,
    ) -> Result<()> {
        self.read_t(&Transfer::new(
            local, local_off, rank, remote, remote_off, len,
        ))
    }

    /// Posts a read described by `t`.
    ///
    /// # Errors
    ///
    /// As [`Queue::write`].
    #[inline]
    pub fn read_t(&self, t: &Transfer) -> Result<()> {
        self.check(t)?;
        self.post(1, || self.world.engine.read(self.q, t))
    }

    /// Posts a write, then notification `id` = `value` (non-zero) at the target's segment
    /// `remote`; the notification becomes visible only after the data.
    ///
    /// # Errors
    ///
    /// As [`Queue::write`], and [`Error::NoSuchNotification`] or [`Error::ZeroNotification`] for
    /// a bad notification.
    #[allow(clippy::too_many_arguments)]
    pub fn write_notify(
        &self,
        local: SegId,
        local_off: usize,
        rank: Rank,
        remote: SegId,
        remote_off: usize,
        len: usize,
        id: usize,
        value: u32,
    ) -> Result<()> {
        let t = Transfer::new(local, local_off, rank, remote, remote_off, len);
        self.check(&t)?;
        self.check_notify(id, value)?;
        self.post(2, || self.world.engine.write_notify(self.q, &t, id, value))
    }

    /// Posts notification `id` = `value` (non-zero) at segment `seg` of `rank`.
    ///
    /// # Errors
    ///
    /// As [`Queue::write_notify`].
    pub fn notify(&self, rank: Rank, seg: SegId, id: usize, value: u32) -> Result<()> {
        self.world.check_rank(rank)?;
        self.check_notify(id, value)?;
        self.post(1, || {
            self.world.engine.notify(self.q, rank, seg.0, id, value)
        })
    }

    /// Posts many writes in one call. Either all fit in the queue or none is posted; a bad
    /// transfer stops the list there (the ones before it are posted) and is reported.
    ///
    /// # Errors
    ///
    /// [`Error::QueueFull`] when the list does not fit (nothing is posted), else the error of
    /// the first bad transfer (as [`Queue::write`]).
    pub fn write_list(&self, list: &[Transfer]) -> Result<()> {
        self.list(list, true)
    }

    /// Posts many reads in one call (as [`Queue::write_list`]).
    ///
    /// # Errors
    ///
    /// As [`Queue::write_list`].
    pub fn read_list(&self, list: &[Transfer]) -> Result<()> {
        self.list(list, false)
    }

    /// Posts many writes, then notification `id` = `value` at `(rank, seg)`, visible only after
    /// all of the data.
    ///
    /// # Errors
    ///
    /// As [`Queue::write_list`], and the notification's as [`Queue::notify`].
    pub fn write_list_notify(
        &self,
        list: &[Transfer],
        rank: Rank,
        seg: SegId,
        id: usize,
        value: u32,
    ) -> Result<()> {
        self.world.check_rank(rank)?;
        self.check_notify(id, value)?;
        self.reserve(list.len() + 1)?;
        let mut done = 0;
        let r = (|| {
            for t in list {
                self.check(t)?;
                self.world.engine.write(self.q, t)?;
                done += 1;
            }
            self.world.engine.notify(self.q, rank, seg.0, id, value)?;
            done += 1;
            Ok(())
        })();
        self.world.posted[self.q].fetch_sub(list.len() + 1 - done, Ordering::Relaxed);
        r
    }

    fn list(&self, list: &[Transfer], write: bool) -> Result<()> {
        self.reserve(list.len())?;
        let mut done = 0;
        let r = (|| {
            for t in list {
                self.check(t)?;
                if write {
                    self.world.engine.write(self.q, t)?;
                } else {
                    self.world.engine.read(self.q, t)?;
                }
                done += 1;
            }
            Ok(())
        })();
        self.world.posted[self.q].fetch_sub(list.len() - done, Ordering::Relaxed);
        r
    }

    /// Waits until everything posted on this queue is locally complete (sources reusable, read
    /// data present), and empties it.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when not everything completed in time (the requests stay posted: wait
    /// again), [`Error::Mpi`] when MPI fails.
    pub fn wait(&self, timeout: Timeout) -> Result<()> {
        self.world.engine.wait(self.q, timeout)?;
        self.world.posted[self.q].store(0, Ordering::Relaxed);
        Ok(())
    }
}

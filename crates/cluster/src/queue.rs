//! Queues: where one-sided requests are posted and waited for.
//!
//! Requests on a queue complete locally in any order; [`Queue::wait`] returns when all of them
//! have. A queue holds at most its depth of requests between two waits: a post beyond that is
//! refused with [`Error::QueueFull`] (nothing is posted), never silently blocked on.

use crate::addr::{Local, Notification, Remote, SegId};
use crate::config::QUEUES;
use crate::engine::Transfer;
use crate::error::{Error, Rank, Result};
use crate::timeout::Timeout;
use crate::world::World;
use std::sync::atomic::Ordering;

/// A handle on one of the world's queues.
#[derive(Clone, Copy)]
pub struct Queue<'w> {
    world: &'w World,
    q: usize,
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
        self.world.check_rank(t.remote.rank)
    }

    fn check_notify(&self, note: Notification) -> Result<()> {
        self.world.check_notification(note.id)?;
        if note.value == 0 {
            return Err(Error::ZeroNotification { id: note.id });
        }
        Ok(())
    }

    /// Posts a write of `len` bytes from this rank's `src` to `dst`.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchRank`], [`Error::NoSuchSegment`] or [`Error::OutOfBounds`] for a bad
    /// place, [`Error::QueueFull`] when the queue holds its depth of requests (nothing is
    /// posted), [`Error::PeerFailed`] when the target is gone, [`Error::Mpi`] when MPI fails.
    #[inline]
    pub fn write(&self, src: Local, dst: Remote, len: usize) -> Result<()> {
        let t = Transfer::new(src, dst, len);
        self.check(&t)?;
        self.post(1, || self.world.engine.write(self.q, &t))
    }

    /// Posts a read of `len` bytes from `src` into this rank's `dst`.
    ///
    /// # Errors
    ///
    /// As [`Queue::write`].
    #[inline]
    pub fn read(&self, dst: Local, src: Remote, len: usize) -> Result<()> {
        let t = Transfer::new(dst, src, len);
        self.check(&t)?;
        self.post(1, || self.world.engine.read(self.q, &t))
    }

    /// Posts a write, then `note` at the target's segment `dst.seg`; the notification becomes
    /// visible only after the data.
    ///
    /// # Errors
    ///
    /// As [`Queue::write`], and [`Error::NoSuchNotification`] or [`Error::ZeroNotification`] for
    /// a bad notification.
    pub fn write_notify(
        &self,
        src: Local,
        dst: Remote,
        len: usize,
        note: Notification,
    ) -> Result<()> {
        let t = Transfer::new(src, dst, len);
        self.check(&t)?;
        self.check_notify(note)?;
        self.post(2, || {
            self.world
                .engine
                .write_notify(self.q, &t, note.id, note.value)
        })
    }

    /// Posts `note` at segment `seg` of `rank`.
    ///
    /// # Errors
    ///
    /// As [`Queue::write_notify`].
    pub fn notify(&self, rank: Rank, seg: SegId, note: Notification) -> Result<()> {
        self.world.check_rank(rank)?;
        self.check_notify(note)?;
        self.post(1, || {
            self.world
                .engine
                .notify(self.q, rank, seg.0, note.id, note.value)
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

    /// Posts many writes, then `note` at segment `seg` of `rank`, visible only after all of
    /// the data.
    ///
    /// # Errors
    ///
    /// As [`Queue::write_list`], and the notification's as [`Queue::notify`].
    pub fn write_list_notify(
        &self,
        list: &[Transfer],
        rank: Rank,
        seg: SegId,
        note: Notification,
    ) -> Result<()> {
        self.world.check_rank(rank)?;
        self.check_notify(note)?;
        self.reserve(list.len() + 1)?;
        let mut done = 0;
        let r = (|| {
            for t in list {
                self.check(t)?;
                self.world.engine.write(self.q, t)?;
                done += 1;
            }
            self.world
                .engine
                .notify(self.q, rank, seg.0, note.id, note.value)?;
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

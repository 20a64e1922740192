//! Queues: where one-sided requests are posted and waited for.
//!
//! Requests on a queue complete locally in any order; [`Queue::wait`] returns when all of them
//! have. A queue holds at most its depth of requests between two waits: a post beyond that is
//! refused with [`Error::QueueFull`] (nothing is posted), never silently blocked on.

use crate::addr::{Local, Notification, Remote, SegId};
use crate::config::LAZY_POLL_EVERY;
use crate::config::QUEUES;
use crate::engine::Transfer;
use crate::error::{Error, Rank, Result};
use crate::progress::Job;
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

impl World {
    /// Performs `job` on queue `q`, or hands it to the proxy as the progress policy says.
    #[inline]
    pub(crate) fn submit(&self, q: usize, job: Job) -> Result<()> {
        if let Some(p) = &self.proxy {
            let large =
                !matches!(job, Job::Notify(..) | Job::Store(..)) && job.len() >= self.proxy_min;
            if large || p.behind(q) {
                // Errors the engine would give at once are still given at once; only what
                // can go wrong during the transfer (a peer that fails) waits for the wait.
                self.check_job(&job)?;
                p.hand_off(q, job);
                return Ok(());
            }
        }
        job.run(&*self.engine, q)?;
        if self.polls {
            self.poll_after_post(q)?;
        }
        Ok(())
    }

    /// Segments, bounds and the target's health of a request handed to the proxy, checked in
    /// the engines' order, so that it is refused when posted as it would be inline.
    fn check_job(&self, job: &Job) -> Result<()> {
        let within = |rank: Rank, seg: u32, size: usize, offset: usize, len: usize| match offset
            .checked_add(len)
        {
            Some(end) if end <= size => Ok(()),
            _ => Err(Error::OutOfBounds {
                rank,
                seg,
                offset,
                len,
                size,
            }),
        };
        let alive = |rank: Rank| match self.engine.health(rank) {
            crate::Health::Failed | crate::Health::Exited => Err(Error::PeerFailed(rank)),
            _ => Ok(()),
        };
        match *job {
            Job::Write(t) | Job::Read(t) | Job::WriteNotify(t, ..) => {
                let (me, l, r) = (self.rank(), t.local, t.remote);
                let ls = self.engine.segment_size(l.seg.0, me)?;
                let rs = self.engine.segment_size(r.seg.0, r.rank)?;
                within(me, l.seg.0, ls, l.offset, t.len)?;
                within(r.rank, r.seg.0, rs, r.offset, t.len)?;
                alive(r.rank)
            }
            Job::Notify(rank, seg, ..) => {
                self.engine.segment_size(seg, rank)?;
                alive(rank)
            }
            Job::Store(rank, seg, offset, _) => {
                let size = self.engine.segment_size(seg, rank)?;
                within(rank, seg, size, offset, 8)?;
                if offset % 8 != 0 {
                    return Err(Error::Misaligned { offset, align: 8 });
                }
                alive(rank)
            }
        }
    }

    /// Eager: a poll after every post. Lazy: one every [`LAZY_POLL_EVERY`] posts, and only
    /// while earlier requests of the queue are in flight.
    fn poll_after_post(&self, q: usize) -> Result<()> {
        match self.policy {
            crate::Progress::Lazy => {
                if self.posted[q].load(Ordering::Relaxed) <= 1 {
                    return Ok(());
                }
                let k = self.ticks.fetch_add(1, Ordering::Relaxed);
                if (k + 1) % LAZY_POLL_EVERY != 0 {
                    return Ok(());
                }
                self.counters.poll(&*self.engine)
            }
            _ => self.counters.poll(&*self.engine),
        }
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
        self.post(1, || self.world.submit(self.q, Job::Write(t)))
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
        self.post(1, || self.world.submit(self.q, Job::Read(t)))
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
                .submit(self.q, Job::WriteNotify(t, note.id, note.value))
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
                .submit(self.q, Job::Notify(rank, seg.0, note.id, note.value))
        })
    }

    /// Posts an atomic store of `value` into the 8-byte word at `dst` (`dst.offset` a
    /// multiple of 8), applied after every request posted on this queue before it: the
    /// target sees the word change only once those writes are in place, as with a
    /// notification, but into any word of a segment (a flag, a sequence number, a library's
    /// own notification words). On the tcp engine it travels behind them and is complete when
    /// posted; elsewhere the call waits for the queue and swaps the value in.
    ///
    /// # Errors
    ///
    /// As [`Queue::write`], and [`Error::Misaligned`] for an offset that is not a multiple
    /// of 8.
    pub fn atomic_store(&self, dst: Remote, value: u64) -> Result<()> {
        self.world.check_rank(dst.rank)?;
        self.post(1, || {
            self.world
                .submit(self.q, Job::Store(dst.rank, dst.seg.0, dst.offset, value))
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
                self.world.submit(self.q, Job::Write(*t))?;
                done += 1;
            }
            self.world
                .submit(self.q, Job::Notify(rank, seg.0, note.id, note.value))?;
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
                let job = if write { Job::Write(*t) } else { Job::Read(*t) };
                self.world.submit(self.q, job)?;
                done += 1;
            }
            Ok(())
        })();
        self.world.posted[self.q].fetch_sub(list.len() - done, Ordering::Relaxed);
        r
    }

    /// Waits until everything posted on this queue is locally complete (sources reusable, read
    /// data present), and empties it. On the `mpi` engine the writes to other hosts have then
    /// also landed at their targets ([`Queue::wait_local`] skips that round trip).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when not everything completed in time (the requests stay posted: wait
    /// again), [`Error::Mpi`] when MPI fails. Under the proxy policy, the first error of a
    /// request the proxy performed ([`Error::PeerFailed`] when its target failed meanwhile).
    pub fn wait(&self, timeout: Timeout) -> Result<()> {
        self.wait_with(timeout, false)
    }

    /// [`Queue::wait`] for local completion only, GASPI's `gaspi_wait`: sources reusable and
    /// read data present, but writes to other hosts over MPI may still be on their way. They
    /// land before any later barrier, collective, notification, atomic or passive message of
    /// this rank, and before its later reads from the same target; a target that only
    /// watches its memory sees them when its MPI next progresses. Saves the round trip to
    /// each target that `wait` pays on the `mpi` engine between hosts; the same as `wait` on
    /// every other engine.
    ///
    /// # Errors
    ///
    /// As [`Queue::wait`].
    pub fn wait_local(&self, timeout: Timeout) -> Result<()> {
        self.wait_with(timeout, true)
    }

    fn wait_with(&self, timeout: Timeout, local: bool) -> Result<()> {
        let w = self.world;
        if let Some(p) = &w.proxy {
            // Requests handed over first (performing those not yet started): the engine's
            // wait then finds them posted.
            match p.drain(self.q, timeout) {
                Ok(()) => {}
                Err(Error::Timeout) => return Err(Error::Timeout),
                Err(e) => {
                    // The failed request is done with; the others completed: the queue is
                    // empty again, as after an error of a request performed inline.
                    let _ = w.engine.wait(self.q, timeout);
                    w.posted[self.q].store(0, Ordering::Relaxed);
                    return Err(e);
                }
            }
        } else if w.polls {
            w.counters.poll(&*w.engine)?;
        }
        if local {
            w.engine.wait_local(self.q, timeout)?;
        } else {
            w.engine.wait(self.q, timeout)?;
        }
        self.world.posted[self.q].store(0, Ordering::Relaxed);
        Ok(())
    }
}

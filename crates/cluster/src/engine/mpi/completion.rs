//! A queue's requests to other hosts and how a wait completes them: fully (`MPI_Win_flush`,
//! the writes have landed) or locally (`MPI_Win_flush_local`, GASPI's `gaspi_wait`), with the
//! targets of locally completed puts remembered until something must see them there (see the
//! engine README, "Local waits").

use super::raw::Req;
use super::MpiEngine;
use crate::error::{Rank, Result};
use crate::timeout::{Deadline, Timeout};
use std::collections::HashSet;
use std::sync::atomic::Ordering;

/// What one queue has posted to other hosts since its last wait.
#[derive(Default)]
pub(super) struct QState {
    pub(super) reqs: Vec<Req>,
    pub(super) touched: HashSet<(u32, Rank)>,
    /// The last entry put into `touched` (most writes in a row go to one target).
    pub(super) last: Option<(u32, Rank)>,
    /// A write of `RPUT_MIN` bytes or more was posted: MPI may deliver it after later small
    /// puts to the same target (rendezvous), so even a local wait flushes it to its target.
    pub(super) large: bool,
    /// Notification values in flight (their puts read them until flushed).
    // Boxed: the puts read them by address, so they must not move when the Vec grows.
    #[allow(clippy::vec_box)]
    pub(super) values: Vec<Box<u32>>,
    /// Messages in flight (the messages mode: their sends read them until complete).
    pub(super) bufs: Vec<Vec<u8>>,
}

impl MpiEngine {
    /// A queue's wait: tests its requests (real timeouts), then completes what it posted to
    /// other hosts. `local` (GASPI's `gaspi_wait`, [`super::Engine::wait_local`]) asks only
    /// for local completion: small puts are pushed out (`MPI_Win_flush_local`) and their targets
    /// remembered in `deferred`, which saves the round trip to a target that may be busy
    /// computing (over TCP it answers a flush only when it next calls MPI); everything else
    /// (a full wait, barrier, collective, notification, atomic, passive message, segment
    /// call, or a read from that target) flushes them first. Writes of `RPUT_MIN` bytes and
    /// more are flushed at once even so: MPI may deliver them after later small puts.
    pub(super) fn wait_queue(&self, queue: usize, timeout: Timeout, local: bool) -> Result<()> {
        if !local {
            self.flush_deferred_until(None, timeout.deadline())?;
        }
        let mut q = self.queues[queue].lock().unwrap_or_else(|e| e.into_inner());
        if q.touched.is_empty() {
            return Ok(());
        }
        // Large writes are flushed even so where MPI may deliver them late; in the messages
        // mode the target applies each source's operations in order, whatever their size.
        let local = local && (self.am.is_some() || !q.large);
        let reqs = &mut q.reqs;
        let deadline = timeout.deadline();
        // A wait that outlasts the target's catch-up after a ring: MPI had queued the messages
        // (a connection being made, a full socket), and the target, rung before they could
        // come, may have gone back to sleep.
        let started = std::time::Instant::now();
        self.am_until(deadline, || {
            let mut i = 0;
            while i < reqs.len() {
                if reqs[i].test()? {
                    reqs.swap_remove(i);
                } else {
                    i += 1;
                }
            }
            Ok(reqs.is_empty())
        })?;
        let queued = started.elapsed() > super::doorbell::CATCH_UP;
        q.last = None;
        let large = std::mem::take(&mut q.large);
        let touched: Vec<_> = q.touched.drain().collect();
        if let Some(bell) = self.am.as_ref().and_then(|a| a.bell.as_ref()) {
            if large || queued {
                // The payloads (or messages MPI had queued) are out: their targets, asleep
                // until a ring, read the rest.
                for &(_, r) in &touched {
                    bell.nudge(r);
                }
            }
        }
        if self.am.is_some() {
            q.bufs.clear();
            drop(q);
            if local {
                let mut d = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
                d.extend(touched);
                self.any_deferred.store(true, Ordering::Release);
                return Ok(());
            }
            // Remote completion: a fence to every target of this queue and of earlier
            // local waits.
            let mut due = touched;
            let mut d = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
            due.extend(d.drain());
            self.any_deferred.store(false, Ordering::Release);
            drop(d);
            return self.fence_due(due, deadline);
        }
        for &(seg, rank) in &touched {
            if let Ok(s) = self.seg(seg, rank) {
                if local {
                    s.win.flush_local(rank)?;
                } else {
                    s.win.flush(rank)?;
                }
            }
        }
        q.values.clear();
        drop(q);
        if local {
            let mut d = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
            d.extend(touched);
            self.any_deferred.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Flushes the puts that `wait_local` left in flight (to `rank` only, or to every
    /// target): after this they are complete at their targets. Cheap when there are none.
    pub(super) fn flush_deferred(&self, rank: Option<Rank>) -> Result<()> {
        self.flush_deferred_until(rank, Deadline::Never)
    }

    /// [`MpiEngine::flush_deferred`] within `deadline`: in the messages mode a target answers
    /// the fence only while it polls. After `Err(Timeout)` the targets are still due.
    pub(super) fn flush_deferred_until(
        &self,
        rank: Option<Rank>,
        deadline: Deadline,
    ) -> Result<()> {
        if !self.any_deferred.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut d = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
        let due: Vec<_> = d
            .iter()
            .copied()
            .filter(|&(_, r)| rank.is_none_or(|x| x == r))
            .collect();
        if self.am.is_some() {
            for k in &due {
                d.remove(k);
            }
            self.any_deferred.store(!d.is_empty(), Ordering::Release);
            drop(d);
            return self.fence_due(due, deadline);
        }
        for &(seg, r) in &due {
            if let Ok(s) = self.seg(seg, r) {
                s.win.flush(r)?;
            }
            d.remove(&(seg, r));
        }
        self.any_deferred.store(!d.is_empty(), Ordering::Release);
        Ok(())
    }

    /// In the messages mode, a fence to the ranks of `due` (segment, rank): on a timeout
    /// they stay due, so that the next full wait, resumed, fences them again.
    fn fence_due(&self, due: Vec<(u32, Rank)>, deadline: Deadline) -> Result<()> {
        let ranks: HashSet<Rank> = due.iter().map(|&(_, r)| r).collect();
        let r = self.am_fence(&ranks, deadline);
        if r.is_err() {
            let mut d = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
            d.extend(due);
            self.any_deferred.store(true, Ordering::Release);
        }
        r
    }

    /// Records what a messages-mode operation to `rank` left to complete.
    pub(super) fn post_am(&self, queue: usize, seg: u32, rank: Rank, p: super::am::Posted) {
        let mut q = self.queues[queue].lock().unwrap_or_else(|e| e.into_inner());
        q.reqs.extend(p.reqs);
        q.bufs.extend(p.bufs);
        if q.last != Some((seg, rank)) {
            q.touched.insert((seg, rank));
            q.last = Some((seg, rank));
        }
    }

    pub(super) fn post(
        &self,
        queue: usize,
        seg: u32,
        rank: Rank,
        req: Option<Req>,
        value: Option<Box<u32>>,
        large: bool,
    ) {
        let mut q = self.queues[queue].lock().unwrap_or_else(|e| e.into_inner());
        q.large |= large;
        q.reqs.extend(req);
        q.values.extend(value);
        if q.last != Some((seg, rank)) {
            q.touched.insert((seg, rank));
            q.last = Some((seg, rank));
        }
    }
}

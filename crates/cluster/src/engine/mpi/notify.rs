//! Notifications between hosts on the mpi engine: how one is stored into another rank's
//! segment (a put, or an accumulate on memory MPI allocated), how this rank waits for its own
//! and resets them.

use super::ctl::{self, SegHeader, SEG_HEADER};
use super::{raw, MpiEngine, MpiSeg};
use crate::config;
use crate::engine::{Engine, KeepAlive};
use crate::error::{Error, Rank, Result};
use crate::sys;
use crate::timeout::Timeout;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

impl MpiSeg {
    /// The operation that stores a notification into this segment, where its memory is
    /// MPI's: `MPI_REPLACE` (an accumulate), so that the owner's reset, an `MPI_Fetch_and_op`,
    /// is atomic with it. On memory MPI allocated Open MPI applies a put from the origin with
    /// `memcpy`, which stores a 4-byte value twice (glibc copies 4 to 7 bytes as two
    /// overlapping words): an owner's reset between the two stores saw the notification,
    /// zeroed it, and then saw it again (a ping-pong desynchronised about once in 50,000
    /// round trips, and hung). `None`: a put, the owner's reset a processor swap.
    pub(super) fn notify_op(&self) -> Option<raw::MpiOp> {
        if self.pads.is_empty() {
            None
        } else {
            raw::op_replace()
        }
    }
}

impl MpiEngine {
    pub(super) fn notify_remote(
        &self,
        queue: usize,
        rank: Rank,
        seg: u32,
        id: usize,
        value: u32,
    ) -> Result<()> {
        if self.am.is_some() {
            // Behind the writes before it in this rank's stream to `rank`: nothing to flush.
            self.seg(seg, rank)?;
            let p = self.am_notify(rank, seg, id, value)?;
            self.post_am(queue, seg, rank, p);
            return Ok(());
        }
        // Puts a local wait left in flight land before the notification that may announce them.
        self.flush_deferred(Some(rank))?;
        let s = self.seg(seg, rank)?;
        let v = Box::new(value);
        let disp = s.disp(rank, std::mem::offset_of!(SegHeader, notif) + id * 4);
        // SAFETY: the value lives in the queue until the queue's wait has flushed this target;
        // the displacement lies in the target's header (id < NOTIFICATIONS, checked by World).
        let req = unsafe {
            match s.notify_op() {
                Some(op) => s.win.raccumulate_u32(&*v, rank, disp, op)?,
                None => s.win.rput(&*v as *const u32 as *const u8, 4, rank, disp)?,
            }
        };
        self.post(queue, seg, rank, Some(req), Some(v), false);
        // A notification must arrive without a queue wait at the origin (the target may be
        // waiting for it while the origin waits for something else): push it out now.
        s.win.flush_local(rank)
    }

    /// This rank's segment `seg` and the operation its notifications are stored with, where
    /// they travel through MPI into memory MPI allocated ([`MpiSeg::notify_op`]): then this
    /// rank's own notifications and resets of that segment go through MPI too. Only where
    /// every rank is alone on its host (the one case in which MPI allocates), so the host's
    /// other ranks never store into it directly.
    pub(super) fn notified_through_mpi(&self, seg: u32) -> Option<(Arc<MpiSeg>, raw::MpiOp)> {
        if !self.allocate || self.hosts == 1 || self.am.is_some() {
            return None;
        }
        let s = self.seg(seg, self.rank).ok()?;
        let op = s.notify_op()?;
        Some((s, op))
    }

    /// The notification header of this rank's segment `seg` (valid while the keep-alive lives).
    pub(super) fn header(&self, seg: u32) -> Result<(*const SegHeader, KeepAlive)> {
        let (p, _, keep) = self.host.segment_local(seg).map_err(|e| self.lift(e))?;
        // SAFETY: the host mapping starts SEG_HEADER bytes before the data (same mapping).
        Ok((unsafe { p.sub(SEG_HEADER) } as *const SegHeader, keep))
    }

    /// Sleeps on `word` (woken by host-local peers) for at most `nap`, then lets MPI progress.
    pub(super) fn nap(&self, word: &ctl::Line, seen: u32, nap: Duration) {
        word.waiters.fetch_add(1, Ordering::SeqCst);
        sys::futex_wait(&word.v, seen, nap);
        word.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// `notify_waitsome` with other hosts in the job: polls the header, lets MPI progress
    /// between polls, and sleeps on `seq` (which host-local notifiers ring) when idle.
    pub(super) fn notify_waitsome_hosts(
        &self,
        seg: u32,
        first: usize,
        count: usize,
        timeout: Timeout,
    ) -> Result<usize> {
        let (h, _keep) = self.header(seg)?;
        // SAFETY: the mapping starts with a SegHeader and `_keep` keeps it mapped for the
        // whole of this call.
        let h = unsafe { &*h };
        let end = (first + count).min(config::NOTIFICATIONS);
        let deadline = timeout.deadline();
        let mut pace = self.pace();
        loop {
            let seen = h.seq.v.load(Ordering::SeqCst);
            if let Some(id) = (first..end).find(|&i| h.notif[i].load(Ordering::Acquire) != 0) {
                return Ok(id);
            }
            if let Some(r) = self.host_gone() {
                return Err(Error::PeerFailed(r));
            }
            if deadline.expired() {
                return Err(Error::Timeout);
            }
            self.poll_mpi();
            if !pace.busy() {
                let nap = pace.nap(deadline).ok_or(Error::Timeout)?;
                self.nap(&h.seq, seen, nap);
            }
        }
    }

    /// `notify_reset`: through MPI where notifications arrive through MPI into memory MPI
    /// allocated ([`MpiEngine::notified_through_mpi`]), else the host's processor swap.
    pub(super) fn notify_reset_here(&self, seg: u32, id: usize) -> Result<u32> {
        if let Some((s, op)) = self.notified_through_mpi(seg) {
            let disp = s.disp(self.rank, std::mem::offset_of!(SegHeader, notif) + id * 4);
            return s.win.fetch_op_u32(self.rank, disp, 0, op);
        }
        self.host.notify_reset(seg, id).map_err(|e| self.lift(e))
    }
}

//! Segment creation and deletion between hosts: the host-local segment, the agreement on the
//! call, the allgather of the sizes and the MPI window over the host's memory (resumable after
//! a timeout), and the reverse.

use super::{raw, MpiEngine, MpiSeg, Slot, SEG_HEADER};
use crate::collective::Collective;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::timeout::Timeout;
use raw::Win;
use std::sync::Arc;

impl MpiEngine {
    /// `segment_create` between hosts (resumable): the host-local creation, the agreement on
    /// the call (undoing the host's creation when some rank called something else), the
    /// allgather of the sizes, the window.
    pub(super) fn segment_create_hosts(
        &self,
        seg: u32,
        size: usize,
        timeout: Timeout,
    ) -> Result<()> {
        let deadline = timeout.deadline();
        let resuming = {
            let s = self.segs.read().unwrap_or_else(|e| e.into_inner());
            match s[seg as usize] {
                Slot::Ready(_) => return Err(Error::SegmentExists { seg }),
                Slot::Gathering { .. } => true,
                Slot::Empty => false,
            }
        };
        if !resuming {
            let call = Collective::SegmentCreate { seg }.word();
            let mut c = self.coll.lock().unwrap_or_else(|e| e.into_inner());
            let host = if c.agreeing() {
                None
            } else {
                // Resumable by itself after a timeout.
                match self.host_wait(deadline, |t| self.host.segment_create(seg, size, t)) {
                    r @ (Ok(()) | Err(Error::CollectiveMismatch(_))) => Some(r),
                    Err(e) => return Err(e),
                }
            };
            if let Err(e) = self.agree_locked(&mut c, call, host, deadline) {
                if matches!(e, Error::CollectiveMismatch(_)) && self.host.segment_local(seg).is_ok()
                {
                    // This host created it, another did not: the host's ranks (all of which
                    // get this error) delete it together.
                    self.host_wait(deadline, |t| self.host.segment_delete(seg, t))?;
                }
                return Err(e);
            }
        }
        let mut s = self.segs.write().unwrap_or_else(|e| e.into_inner());
        if matches!(s[seg as usize], Slot::Empty) {
            let send = Box::new(size as u64);
            let mut recv = vec![0u64; self.size];
            // SAFETY: both buffers move into the slot (heap memory, never moved or freed
            // before the request completes: the slot is only replaced after completion).
            let req = unsafe { raw::iallgather_u64(&*send, recv.as_mut_ptr(), self.comm)? };
            s[seg as usize] = Slot::Gathering {
                req,
                _send: send,
                sizes: recv,
            };
        }
        let Slot::Gathering { req, .. } = &mut s[seg as usize] else {
            return Err(Error::SegmentExists { seg });
        };
        self.am_until(timeout.deadline(), || req.test())?;
        let Slot::Gathering { sizes, .. } = std::mem::replace(&mut s[seg as usize], Slot::Empty)
        else {
            unreachable!("matched above")
        };
        let (data, len, keep) = self.host.segment_local(seg).map_err(|e| self.lift(e))?;
        // SAFETY: the host mapping is SEG_HEADER + len bytes from data - SEG_HEADER; `keep`
        // (stored with the window) keeps it mapped until the window is freed. MPI has no
        // non-blocking window creation; every rank reaches it right after the allgather.
        let win = unsafe { Win::create(data.sub(SEG_HEADER), SEG_HEADER + len, self.comm)? };
        s[seg as usize] = Slot::Ready(Arc::new(MpiSeg {
            data,
            size: len,
            _keep: keep,
            sizes: sizes.into_iter().map(|x| x as usize).collect(),
            win,
        }));
        Ok(())
    }

    pub(super) fn segment_delete_hosts(&self, seg: u32, timeout: Timeout) -> Result<()> {
        self.seg(seg, self.rank)?;
        {
            let mut c = self.coll.lock().unwrap_or_else(|e| e.into_inner());
            let call = Collective::SegmentDelete { seg }.word();
            self.barrier_locked(&mut c, call, timeout)?;
        }
        let slot = {
            let mut s = self.segs.write().unwrap_or_else(|e| e.into_inner());
            std::mem::replace(&mut s[seg as usize], Slot::Empty)
        };
        if let Slot::Ready(mut m) = slot {
            // Wait for threads still inside a transfer on this segment.
            let mut backoff = tiers_node::Backoff::new().never_sleep();
            let m = loop {
                match Arc::try_unwrap(m) {
                    Ok(x) => break x,
                    Err(a) => {
                        m = a;
                        backoff.snooze();
                    }
                }
            };
            m.win.free()?;
        }
        self.host_wait(timeout.deadline(), |t| self.host.segment_delete(seg, t))
    }
}

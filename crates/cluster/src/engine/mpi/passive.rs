//! Passive messages on the `mpi` engine: to ranks of this host through the host's memory
//! engine, to other hosts as MPI messages on their own tag (a message too long for the
//! receiver's buffer stays first in line).

use super::raw::{self, Req};
use super::{MpiEngine, TAG_PASSIVE};
use crate::config::PASSIVE_MAX;
use crate::engine::Engine;
use crate::error::{Error, Rank, Result};
use crate::timeout::Timeout;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

/// A passive message from another host, matched: its bytes, and the receive still bringing
/// them in (`None` once complete).
struct Incoming {
    src: Rank,
    buf: Vec<u8>,
    recv: Option<Req>,
}

/// Passive messages between hosts.
#[derive(Default)]
pub(super) struct Passive {
    /// Messages from other hosts taken off MPI, in the order they were matched. A message is
    /// delivered once complete and after every earlier one from its sender; one the last
    /// receive had no room for stays first in line.
    inbox: VecDeque<Incoming>,
    /// Bytes in `inbox`.
    inbox_bytes: usize,
    /// Sends not yet completed when their timeout ran out (buffers live here until done).
    sends: Vec<(Req, Vec<u8>)>,
}

/// Bytes of passive messages a rank takes off MPI before its program receives them. Beyond
/// it, later messages wait in MPI, and their senders may wait for this rank's receive.
const INBOX_MAX: usize = 16 << 20;

impl MpiEngine {
    /// [`Engine::passive_send`] on this engine. A message to another host is complete once
    /// MPI has it: the target takes it off MPI in its waits and progress passes (a large one
    /// needs the target's side of MPI), and its doorbell is rung for it.
    pub(super) fn passive_send_to(&self, rank: Rank, data: &[u8], timeout: Timeout) -> Result<()> {
        if let Some(i) = self.local(rank) {
            return self
                .host
                .passive_send(i, data, timeout)
                .map_err(|e| self.lift(e));
        }
        if data.len() > PASSIVE_MAX {
            return Err(Error::MessageTooLarge {
                len: data.len(),
                max: PASSIVE_MAX,
            });
        }
        self.flush_deferred(None)?;
        let buf = data.to_vec();
        // SAFETY: buf stays alive until the request completes: here, or in the pending list.
        let mut req = unsafe { raw::isend(&buf, rank, TAG_PASSIVE, self.comm, false)? };
        if let Some(b) = self.am.as_ref().and_then(|a| a.bell.as_ref()) {
            b.ring(rank);
        }
        // No lock held while waiting: in the messages mode the wait's polls take this rank's
        // own passive messages in (`passive_take`), which a peer sending to this rank may be
        // waiting for.
        let r = self.am_until(timeout.deadline(), || req.test());
        let mut p = self.passive.lock().unwrap_or_else(|e| e.into_inner());
        p.sends.retain_mut(|(r, _)| !r.test().unwrap_or(true));
        if r.is_err() {
            // The message is on its way; it will be delivered (keep its buffer).
            p.sends.push((req, buf));
        }
        r
    }

    /// Takes passive messages that other hosts sent this rank off MPI, so that their senders
    /// complete while this rank's program does not receive (a large message is complete at
    /// its sender only once its target matched it): from every wait and progress pass. It
    /// never waits: a large message's receive is started here and completes in later passes.
    /// Whether it took or completed any. One thread at a time (the others return at once).
    pub(super) fn passive_take(&self) -> Result<bool> {
        if self.hosts == 1 {
            return Ok(false);
        }
        let Ok(mut p) = self.passive.try_lock() else {
            return Ok(false);
        };
        let mut found = false;
        for m in p.inbox.iter_mut() {
            if let Some(r) = &mut m.recv {
                if r.test()? {
                    m.recv = None;
                    found = true;
                }
            }
        }
        while p.inbox_bytes < INBOX_MAX {
            let Some(m) = raw::improbe(None, TAG_PASSIVE, self.comm)? else {
                break;
            };
            let src = m.source;
            // SAFETY: the buffer stays in the inbox entry, untouched, until the receive has
            // completed (entries are delivered or dropped only then; see `Drop`).
            let (buf, mut recv) = unsafe { m.start_recv()? };
            let recv = (!recv.test()?).then_some(recv);
            if let Some(b) = self.am.as_ref().and_then(|a| a.bell.as_ref()) {
                b.took(src);
            }
            p.inbox_bytes += buf.len();
            p.inbox.push_back(Incoming { src, buf, recv });
            found = true;
        }
        Ok(found)
    }

    /// [`Engine::passive_receive`] on this engine.
    pub(super) fn passive_receive_any(
        &self,
        buf: &mut [u8],
        timeout: Timeout,
    ) -> Result<(Rank, usize)> {
        if self.hosts == 1 {
            return self
                .host
                .passive_receive(buf, timeout)
                .map(|(r, n)| (self.members[r], n))
                .map_err(|e| self.lift(e));
        }
        let deadline = timeout.deadline();
        let bell = &self.host_ctl.rank(self.host.local_rank()).mailbox.bell;
        let mut pace = self.pace();
        loop {
            let seen = bell.v.load(Ordering::SeqCst);
            self.am_poll()?;
            self.passive_take()?;
            {
                let mut p = self.passive.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(i) = deliverable(&p.inbox) {
                    let need = p.inbox[i].buf.len();
                    if need > buf.len() {
                        return Err(Error::BufferTooSmall {
                            need,
                            have: buf.len(),
                        });
                    }
                    let m = p.inbox.remove(i).expect("an index of the inbox");
                    p.inbox_bytes -= need;
                    buf[..need].copy_from_slice(&m.buf);
                    return Ok((m.src, need));
                }
            }
            match self.host.passive_receive(buf, Timeout::Test) {
                Ok((r, n)) => return Ok((self.members[r], n)),
                Err(Error::Timeout) => {}
                Err(e) => return Err(self.lift(e)),
            }
            if deadline.expired() {
                return Err(Error::Timeout);
            }
            if !pace.busy() {
                let nap = pace.nap(deadline).ok_or(Error::Timeout)?;
                self.nap(bell, seen, nap);
            }
        }
    }
}

/// The first message of `inbox` that is complete and has no incomplete one of its sender's
/// before it (a sender's messages are delivered in order).
fn deliverable(inbox: &VecDeque<Incoming>) -> Option<usize> {
    let mut waiting: Vec<Rank> = Vec::new();
    for (i, m) in inbox.iter().enumerate() {
        if waiting.contains(&m.src) {
            continue;
        }
        if m.recv.is_none() {
            return Some(i);
        }
        waiting.push(m.src);
    }
    None
}

impl Drop for Passive {
    /// A receive still bringing a message in keeps its buffer: MPI may write into it until
    /// it is finalised.
    fn drop(&mut self) {
        for m in self.inbox.drain(..) {
            if m.recv.is_some() {
                std::mem::forget(m.buf);
            }
        }
    }
}

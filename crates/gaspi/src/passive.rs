//! GASPI's passive messages over the cluster tier's mailboxes, which carry at most
//! [`World::passive_max`](tiers_cluster::World::passive_max) bytes (32 KiB on the shared-memory
//! engines) where GASPI programs expect 64 KiB and more (`passive_transfer_size_max`).
//!
//! A message goes as frames, each with an 8-byte header (the message's length and this frame's
//! offset, `u32` each) and up to `passive_max - 8` bytes of it. The frames of one message leave
//! one after another (a lock per process, taken within the call's timeout, keeps two threads'
//! messages apart) and a sender's frames arrive in the order sent (the mailbox is first in,
//! first out), so the receiver gathers them per sender. A send that times out between frames leaves a truncated message at
//! the receiver; the next message from that sender starts at offset 0 and replaces it.

use crate::ctx::{time_left as left, Ctx, R};
use crate::types::*;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

const HDR: usize = 8;

#[derive(Default)]
pub struct Passive {
    send: Mutex<()>,
    recv: Mutex<Recv>,
}

#[derive(Default)]
struct Recv {
    /// Messages being gathered: sender -> (bytes so far, full length).
    partial: HashMap<usize, (Vec<u8>, usize)>,
    /// Complete messages not yet handed out, in arrival order.
    done: VecDeque<(usize, Vec<u8>)>,
    /// A frame as received.
    frame: Vec<u8>,
}

impl Ctx {
    /// The largest passive message (`gaspi_passive_transfer_size_max`).
    pub fn passive_max(&self) -> u64 {
        self.cfg.passive_transfer_size_max as u64
    }

    /// Sends `data` (1 to `passive_max` bytes) to `rank`.
    pub fn passive_send(&self, rank: usize, data: &[u8], timeout: gaspi_timeout_t) -> R<()> {
        self.guarded(timeout, || self.passive_send_counted(rank, data, timeout))
    }

    fn passive_send_counted(&self, rank: usize, data: &[u8], timeout: gaspi_timeout_t) -> R<()> {
        let len = u32::try_from(data.len()).map_err(|_| GASPI_ERR_INV_COMMSIZE)?;
        let room = self.w.passive_max().saturating_sub(HDR);
        if room == 0 {
            return Err(GASPI_ERROR);
        }
        let start = Instant::now();
        // Another thread's send may hold the lock for as long as its own timeout (a full
        // mailbox): this one waits for it only within its own.
        let _one = self.lock_counted(&self.passive.send, timeout)?;
        let mut frame = Vec::with_capacity(HDR + room.min(data.len()));
        for (k, chunk) in data.chunks(room).enumerate() {
            frame.clear();
            frame.extend_from_slice(&len.to_le_bytes());
            frame.extend_from_slice(&((k * room) as u32).to_le_bytes());
            frame.extend_from_slice(chunk);
            self.sliced(left(timeout, start), |t| {
                self.w.passive_send(rank, &frame, t)
            })?;
        }
        Ok(())
    }

    /// Receives the next complete message into `buf`; returns its sender and length. A message
    /// longer than `buf` stays first in line (`GASPI_ERR_INV_COMMSIZE`).
    pub fn passive_receive(&self, buf: &mut [u8], timeout: gaspi_timeout_t) -> R<(usize, usize)> {
        self.guarded(timeout, || self.passive_receive_counted(buf, timeout))
    }

    fn passive_receive_counted(
        &self,
        buf: &mut [u8],
        timeout: gaspi_timeout_t,
    ) -> R<(usize, usize)> {
        let start = Instant::now();
        // Another thread may hold the lock in a receive that blocks until a message comes:
        // this one waits for it only within its own timeout.
        let mut st = self.lock_counted(&self.passive.recv, timeout)?;
        let st = &mut *st;
        loop {
            if let Some((from, m)) = st.done.front() {
                if m.len() > buf.len() {
                    return Err(GASPI_ERR_INV_COMMSIZE);
                }
                let (from, n) = (*from, m.len());
                buf[..n].copy_from_slice(m);
                st.done.pop_front();
                return Ok((from, n));
            }
            st.frame.resize(self.w.passive_max(), 0);
            let frame = &mut st.frame;
            let (from, n) =
                self.sliced(left(timeout, start), |t| self.w.passive_receive(frame, t))?;
            if n < HDR {
                return Err(GASPI_ERROR);
            }
            let word = |i: usize| {
                u32::from_le_bytes([
                    st.frame[i],
                    st.frame[i + 1],
                    st.frame[i + 2],
                    st.frame[i + 3],
                ]) as usize
            };
            let (len, off) = (word(0), word(4));
            if len as u64 > self.passive_max() {
                // Larger than this rank's configuration allows: refused, not gathered.
                st.partial.remove(&from);
                return Err(GASPI_ERR_INV_COMMSIZE);
            }
            let body = &st.frame[HDR..n];
            if off == 0 {
                st.partial.insert(from, (Vec::with_capacity(len), len));
            }
            // A frame of a message whose start was lost (its send timed out) is dropped.
            let Some((m, want)) = st.partial.get_mut(&from) else {
                continue;
            };
            if m.len() != off || *want != len || off + body.len() > len {
                st.partial.remove(&from);
                continue;
            }
            m.extend_from_slice(body);
            if m.len() == len {
                if let Some((m, _)) = st.partial.remove(&from) {
                    st.done.push_back((from, m));
                }
            }
            // A test takes every frame that has arrived (each further look is one try, a
            // timeout when the mailbox is empty), so a message of several frames that is all
            // there is received at the first test.
        }
    }
}

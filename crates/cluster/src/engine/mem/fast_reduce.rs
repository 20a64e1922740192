//! The small allreduce of the shared-memory engines (at most `FAST_REDUCE_MAX` bytes and
//! `FAST_REDUCE_RANKS` ranks; also the barrier of such worlds): one exchange on a cache line
//! per rank, flag and values together. See the engine README, "The allreduce", small path.

use super::{ring, Backing, Coll, MemEngine};
use crate::collective::{fold_in_order, Collective, DataType, Op};
use crate::error::{Error, Result};
use crate::timeout::Timeout;
use std::sync::atomic::Ordering;

/// The 32-bit form of a small allreduce's [`Collective::word`] that its `FastSlot` carries:
/// kind, type and operation (bits 52–63) above the element count (at most 14).
#[inline]
fn fast_sig(w: u64) -> u32 {
    ((w >> 52) as u32) << 16 | (w & 0xffff) as u32
}

fn from_fast_sig(f: u32) -> Collective {
    Collective::from_word(((f >> 16) as u64) << 52 | (f & 0xffff) as u64)
}

impl<B: Backing> MemEngine<B> {
    /// A small allreduce (at most [`FAST_REDUCE_MAX`](crate::config::FAST_REDUCE_MAX) bytes, at most [`FAST_REDUCE_RANKS`](crate::config::FAST_REDUCE_RANKS)
    /// ranks) in one exchange: every rank writes its input and then the allreduce's sequence
    /// number into its own cache line, and waits until every other rank's line shows that
    /// number; the values arrive with the flags, so it costs about one barrier where the general
    /// path (slot, barrier, then the slots) costs a barrier and a second round of transfers.
    /// The inputs are combined in rank order, as on the general path (same bits).
    ///
    /// Reuse: each rank has two lines, used alternately. A rank writes line `s % 2` for
    /// allreduce `s` only after finishing `s − 1`, which needed every rank's input to `s − 1`,
    /// which each rank publishes only after finishing `s − 2`, that is after reading line
    /// `s % 2` of its previous use. So no line is overwritten while someone may still read it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn allreduce_line(
        &self,
        c: &mut Coll,
        call: u64,
        input: &[u8],
        output: &mut [u8],
        ty: DataType,
        op: Op,
        timeout: Timeout,
    ) -> Result<()> {
        if c.joined {
            return self.rejoin(c, call, timeout);
        }
        let h = self.ctl.header();
        // The flag of allreduce s: never 0 (the zeroed lines' value), and distinct for the two
        // allreduces that may be in flight on one line's alternation.
        let flag = |s: u64| (s & 0x7fff_ffff) as u32 | 0x8000_0000;
        let sig = fast_sig(call);
        let tag = |s: u64| flag(s) as u64 | (sig as u64) << 32;
        if !c.fast_pending {
            c.fast_seq += 1;
            let line = &self.ctl.rank(self.rank).fast[(c.fast_seq % 2) as usize];
            // SAFETY: this rank's own line; no reader looks at its data before the store of
            // `tag` below (Release), and no reader of its previous use is left (see above).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    input.as_ptr(),
                    line.data.get() as *mut u8,
                    input.len(),
                )
            };
            // SeqCst pairs with the sleeper's waiter count: either it sees the sequence number
            // or we see it waiting and ring.
            line.tag.store(tag(c.fast_seq), Ordering::SeqCst);
            if h.fast_bell.waiters.load(Ordering::SeqCst) != 0 {
                ring(&h.fast_bell);
            }
        }
        let (want, parity) = (tag(c.fast_seq), (c.fast_seq % 2) as usize);
        // The flag and the call in one comparison: the fast path checks the call for free.
        let all_in = || {
            (0..self.size)
                .all(|r| self.ctl.rank(r).fast[parity].tag.load(Ordering::Acquire) == want)
        };
        if !all_in() {
            self.fast_wait(c, call, want, parity, timeout)?;
        }
        c.fast_pending = false;
        let lines = (0..self.size).map(|r| {
            let line = &self.ctl.rank(r).fast[parity];
            // SAFETY: rank r published these bytes before its sequence number, which we saw
            // (Acquire); it will not write this line again before we finish (see above).
            unsafe { std::slice::from_raw_parts(line.data.get() as *const u8, input.len()) }
        });
        fold_in_order(ty, op, output, lines);
        Ok(())
    }

    /// The slow part of `allreduce_line` (kept out of line so that the fast path stays small):
    /// waits until every rank's line shows `want`, or finds why it never will.
    #[inline(never)]
    fn fast_wait(
        &self,
        c: &mut Coll,
        call: u64,
        want: u64,
        parity: usize,
        timeout: Timeout,
    ) -> Result<()> {
        let h = self.ctl.header();
        let all_in = || {
            (0..self.size)
                .all(|r| self.ctl.rank(r).fast[parity].tag.load(Ordering::Acquire) == want)
        };
        // Checked only once the wait has gone to sleep: every flag in but some call differs
        // (every rank sees the same lines, so every rank reports it, and every rank used the
        // same number: the next small allreduce is in step) ...
        let line_mismatch = || {
            let mut other = None;
            for r in 0..self.size {
                let w = self.ctl.rank(r).fast[parity].tag.load(Ordering::Acquire);
                if w as u32 != want as u32 {
                    return None;
                }
                if w != want && other.is_none() {
                    other = Some((r, (w >> 32) as u32));
                }
            }
            other.map(|(r, f)| Error::mismatch(Collective::from_word(call), from_fast_sig(f), r))
        };
        // ... or a rank announced this call's index: it is in a barrier-based collective
        // (small allreduces announce nothing), so this one can never complete.
        let k = c.calls;
        let joining = std::cell::Cell::new(false);
        let in_barrier = || {
            let r = (0..self.size).find(|&r| {
                r != self.rank && self.ctl.rank(r).calls.seq.load(Ordering::Acquire) == k
            })?;
            joining.set(true);
            Some(Error::mismatch(
                Collective::from_word(call),
                Collective::Unknown,
                r,
            ))
        };
        let r = self.wait_until(&h.fast_bell, timeout.deadline(), all_in, || {
            self.gone(true)
                .map(Error::PeerFailed)
                .or_else(line_mismatch)
                .or_else(in_barrier)
        });
        match r {
            Ok(()) => {}
            Err(_) if joining.get() => {
                // Withdraw the input (the next small allreduce reuses this number and line:
                // nobody may see this flag then), and complete the others' barrier as a
                // mismatch.
                let line = &self.ctl.rank(self.rank).fast[parity];
                line.tag.store(0, Ordering::SeqCst);
                c.fast_seq -= 1;
                c.fast_pending = false;
                self.announce(c, call);
                c.joined = true;
                return self.rejoin(c, call, timeout);
            }
            Err(e @ Error::CollectiveMismatch(_)) => {
                c.fast_pending = false;
                return Err(e);
            }
            Err(e) => {
                c.fast_pending = true;
                return Err(e);
            }
        }
        Ok(())
    }

    /// The arrival of a small allreduce at the barrier of a mismatched call (see
    /// `allreduce_line`), or the resumption of its wait.
    #[cold]
    fn rejoin(&self, c: &mut Coll, call: u64, timeout: Timeout) -> Result<()> {
        // In a replicated job the barrier it joins may be the tolerant one: arrive there (the
        // call words then differ, and both sides report the mismatch).
        let k = c.calls;
        let theirs = (0..self.size).filter(|&q| q != self.rank).find_map(|q| {
            let rc = &self.ctl.rank(q).calls;
            let s = rc.seq.load(Ordering::Acquire);
            (s == k || s == k + 1).then(|| rc.call[(k % 2) as usize].load(Ordering::Relaxed))
        });
        let arrived = if theirs.is_some_and(|w| self.tolerant(w)) {
            self.arrive_tolerant(c, call, timeout)
        } else {
            self.arrive(c, call, timeout)
        };
        match arrived {
            Err(e @ (Error::Timeout | Error::PeerFailed(_))) => Err(e),
            // Digests that happened to sum right: the call is a mismatch all the same.
            Ok(()) => {
                c.joined = false;
                Err(self.mismatch(c, call))
            }
            Err(e) => {
                c.joined = false;
                Err(e)
            }
        }
    }
}

//! The barrier-based collectives of a replicated job on the shared-memory engines: a dead
//! process that another replica of its logical rank covers counts as arrived (see
//! `engine/replicas.rs`), so a replica killed during the world's join or its segment
//! registration does not end the job.
//!
//! The counting barrier cannot tell a process that died before its arrival from one that died
//! after it, so this one counts nothing: each process's announcement of call `k`
//! (`RankCtl.calls`, written before it waits) is its arrival, and the call completes for a
//! process once every other has announced `k` (or a later call) or is dead and covered. The
//! announced call words then give the agreement check directly. Arrivals ring the fast
//! allreduces' bell (`fast_bell`), never the counting barrier's generation, whose steps the
//! counting barrier reads as completions and mismatches; a dead process rings nothing, and its
//! waiters see it at the launcher's wake-up or their next health probe.
//!
//! A replica that is alive but does not arrive (stopped with SIGSTOP, or far behind) while
//! another replica of its rank has arrived is waited for one replica timeout, then *left
//! behind*: marked failed, as VolpexMPI skips a replica that does not answer, so that it holds
//! the job no longer. Should it come later, its own call fails with a `Setup` error naming
//! that (its process ends as a failed replica; its rank goes on with the others).

use super::{ctl, ring, Backing, Coll, MemEngine};
use crate::collective::Collective;
use crate::engine::replicas;
use crate::error::{Error, Rank, Result};
use crate::timeout::Timeout;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl<B: Backing> MemEngine<B> {
    /// Whether process `q` is dead (failed or gone) and covered by a live replica of its rank.
    pub(super) fn covered(&self, q: Rank) -> bool {
        replicas::covered(q, self.replicas, self.size, |r| {
            matches!(self.state(r), ctl::ST_FAILED | ctl::ST_EXITED)
        })
    }

    /// Marks process `q` failed for lagging behind (see the module notes), unless it has
    /// arrived or died meanwhile, and wakes every waiter of the job.
    fn leave_behind(&self, q: Rank) {
        let st = &self.ctl.rank(q).state.v;
        for from in [ctl::ST_STARTING, ctl::ST_HEALTHY] {
            if st
                .compare_exchange(from, ctl::ST_FAILED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                super::wake_job(&self.ctl);
                return;
            }
        }
    }

    /// Whether the barrier-based collective `call` runs tolerantly here.
    pub(super) fn tolerant(&self, call: u64) -> bool {
        self.replicas > 1 && replicas::tolerant(call)
    }

    /// Arrives at barrier-based collective `call`, number `c.calls`, already announced (or
    /// resumes the wait of an arrival that timed out); see the module notes.
    pub(super) fn arrive_tolerant(&self, c: &mut Coll, call: u64, timeout: Timeout) -> Result<()> {
        let h = self.ctl.header();
        let k = c.calls;
        if c.barrier_pending.take().is_none() {
            ring(&h.fast_bell);
        }
        let arrived =
            |q: Rank| q == self.rank || self.ctl.rank(q).calls.seq.load(Ordering::Acquire) >= k;
        // Since when every process still missing is alive and lags a replica of its rank that
        // has arrived (see the module notes).
        let mut lagging_since: Option<Instant> = None;
        let r = self.wait_until(
            &h.fast_bell,
            timeout.deadline(),
            || {
                let missing: Vec<Rank> = (0..self.size)
                    .filter(|&q| !arrived(q) && !self.covered(q))
                    .collect();
                if missing.is_empty() {
                    return true;
                }
                let lagging = missing.iter().all(|&q| {
                    self.state(q) != ctl::ST_FAILED
                        && self.state(q) != ctl::ST_EXITED
                        && replicas::siblings(q, self.replicas, self.size).any(arrived)
                });
                if !lagging {
                    lagging_since = None;
                    return false;
                }
                let since = *lagging_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= self.left_behind_after {
                    for &q in &missing {
                        self.leave_behind(q);
                    }
                    return (0..self.size).all(|q| arrived(q) || self.covered(q));
                }
                false
            },
            || {
                (0..self.size)
                    .find(|&q| {
                        q != self.rank
                            && !arrived(q)
                            && matches!(self.state(q), ctl::ST_FAILED | ctl::ST_EXITED)
                            && !self.covered(q)
                    })
                    .map(Error::PeerFailed)
            },
        );
        if let Err(e) = r {
            c.barrier_pending = Some(0);
            return Err(e);
        }
        if self.state(self.rank) == ctl::ST_FAILED {
            return Err(Error::Setup(format!(
                "replica {} of rank {} came more than {:?} after another replica of its rank to a collective of the world, which went on without it",
                self.rank % self.replicas,
                self.rank / self.replicas,
                self.left_behind_after
            )));
        }
        // Slot k % 2 of a process is rewritten only at its call k + 2, which needs this one.
        for q in (0..self.size).filter(|&q| q != self.rank) {
            let rc = &self.ctl.rank(q).calls;
            let s = rc.seq.load(Ordering::Acquire);
            if s == k || s == k + 1 {
                let w = rc.call[(k % 2) as usize].load(Ordering::Relaxed);
                if w != call {
                    return Err(Error::mismatch(
                        Collective::from_word(call),
                        Collective::from_word(w),
                        q,
                    ));
                }
            }
        }
        Ok(())
    }
}

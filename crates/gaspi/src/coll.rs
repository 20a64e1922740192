//! Groups, and the collectives over them: a barrier and an allreduce built from the cluster
//! tier's remote fetch-and-add and writes (the group of all ranks uses the cluster tier's own
//! barrier and allreduce where it can).
//!
//! Barrier on group `g`: each member adds one to its counter `bar[g][me]` at every other
//! member (off the memory engines, a store of the new count: only `me` writes that word),
//! then waits until its own `bar[g][m]` reached the number of barriers it has entered
//! with `m`. The counts only grow, so nothing is reset and a timed-out barrier resumes.
//! Allreduce: each member writes its contribution into slot `[g][k % 2][me]` at every member,
//! then adds one to `rcnt[g][me]` there; all combine the slots in member order (the same bits
//! everywhere). Two slots alternate: a member writes slot `k % 2` again only for reduction
//! `k + 2`, after every member has finished `k` (each waited for all contributions to `k + 1`).
//! `k` counts the reductions since the group on the id was committed, not since the id was
//! first used: a group id can be deleted and reused by other members, whose earlier counts
//! differ. (The source of a contribution is free again when its count has been raised: the
//! memory and tcp engines copy it at the post, and the mpi engine's counter store waits for
//! the queue first, so no engine reads a slot after the next round may overwrite it.)
//!
//! A group's collectives, `GASPI_GROUP_ALL`'s on the cluster tier's included, hold the group's
//! collective state while they wait, taken within the call's timeout ([`Ctx::collective`]):
//! another thread's collective of the group times out rather than waiting past its timeout.

use crate::ctx::{err, time_left, Coll, CollSlot, Ctx, GroupSlot, HEAP, R};
use crate::types::*;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;
use std::time::Instant;
use tiers_cluster::QUEUES;

impl Ctx {
    /// Group `g`'s slot, locked; `GASPI_ERR_INV_GROUP` for an id out of range or with no group.
    pub fn group(&self, g: gaspi_group_t) -> R<MutexGuard<'_, GroupSlot>> {
        let slot = self
            .groups
            .get(g as usize)
            .ok_or(GASPI_ERR_INV_GROUP)?
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if slot.group.is_none() {
            return Err(GASPI_ERR_INV_GROUP);
        }
        Ok(slot)
    }

    /// Group `g`'s members, if this rank is one of them (and, with `need_commit`, the group
    /// is committed).
    fn members(&self, g: gaspi_group_t, need_commit: bool) -> R<Vec<usize>> {
        let s = self.group(g)?;
        let grp = s.group.as_ref().ok_or(GASPI_ERR_INV_GROUP)?;
        if (need_commit && !grp.committed) || !grp.members.contains(&self.rank) {
            return Err(GASPI_ERR_INV_GROUP);
        }
        Ok(grp.members.clone())
    }

    /// Runs `f`, collective `kind` of group `g`, holding the group's collective state, which
    /// another thread's collective of the group may hold for as long as it waits: taken within
    /// `timeout` (`GASPI_TIMEOUT` otherwise), and `f` gets what is left of it. A collective of
    /// another kind that did not complete (it timed out) must be resumed first:
    /// `GASPI_ERR_ACTIVE_COLL`, as GPI-2 returns.
    pub fn collective<T>(
        &self,
        g: gaspi_group_t,
        kind: Coll,
        timeout: gaspi_timeout_t,
        f: impl FnOnce(&mut CollSlot, gaspi_timeout_t) -> R<T>,
    ) -> R<T> {
        let start = Instant::now();
        // A member that is gone can take part in no collective of the group any more: every
        // one fails at once, a pending one (left by the failure) included.
        let gone = self.group(g)?.group.as_ref().is_some_and(|grp| {
            grp.members
                .iter()
                .any(|&m| m != self.rank && self.health(m).is_gone())
        });
        if gone {
            return Err(GASPI_ERROR);
        }
        let slot = &self.colls[g as usize];
        let mut s = self.lock_within(slot, timeout)?;
        if s.active.is_some_and(|a| a != kind) {
            return Err(GASPI_ERR_ACTIVE_COLL);
        }
        let r = f(&mut s, time_left(timeout, start));
        // Pending: a group's own barrier or reduction that has begun and not ended (timed
        // out, or failed waiting), or a call of the cluster tier's that timed out (resumable,
        // and the cluster tier refuses any other collective meanwhile).
        let pending = s.bar_pending || s.red_pending.is_some() || matches!(r, Err(GASPI_TIMEOUT));
        s.active = pending.then_some(kind);
        r
    }

    /// Whether member `m`, whose part of a collective has not arrived (`short`), never will:
    /// it is gone, failed or exited (a killed rank and one that ended without
    /// `gaspi_proc_term` exit), and its part is still missing when looked at again after its
    /// health, so that a member that did its part and then left does not fail the call.
    fn left_short(&self, m: usize, short: impl Fn() -> bool) -> bool {
        self.health(m).is_gone() && short()
    }

    /// Raises counter word `off` at `rank`, which only this rank writes, by one, to `count`,
    /// after the writes this rank posted on the reduction queue: a processor atomic on the
    /// memory engines; elsewhere a store of the new count behind the data (on the tcp engine
    /// it travels with the writes and costs no round trip, as an atomic add would).
    fn raise(&self, rank: usize, off: usize, count: u64) -> R<()> {
        if self.mem_engine || rank == self.rank {
            return self.bump(rank, off);
        }
        self.w
            .queue(QUEUES - 1)
            .map_err(err)?
            .atomic_store(HEAP.on(rank, off), count)
            .map_err(err)
    }

    /// The barrier over group `g` (committed or being committed).
    pub fn group_barrier(&self, g: gaspi_group_t, timeout: u64, commit: bool) -> R<()> {
        self.collective(g, Coll::Barrier, timeout, |s, timeout| {
            self.group_barrier_held(s, g, timeout, commit)
        })
    }

    fn group_barrier_held(
        &self,
        s: &mut CollSlot,
        g: gaspi_group_t,
        timeout: u64,
        commit: bool,
    ) -> R<()> {
        let members = self.members(g, !commit)?;
        let gi = g as usize;
        if !s.bar_pending {
            for &m in &members {
                if m != self.rank {
                    s.bexp[m] += 1;
                    self.raise(m, self.bar(gi, self.rank), s.bexp[m])?;
                }
            }
            s.bar_pending = true;
        }
        let bexp = s.bexp.clone();
        self.poll(timeout, || {
            for &m in &members {
                let short = || self.word(self.bar(gi, m)).load(Ordering::Acquire) < bexp[m];
                if m != self.rank && short() {
                    if self.left_short(m, short) {
                        return Err(GASPI_ERROR);
                    }
                    return Ok(false);
                }
            }
            Ok(true)
        })?;
        s.bar_pending = false;
        if commit {
            if let Some(grp) = self.group(g)?.group.as_mut() {
                grp.committed = true;
            }
            s.rbase = s.rdone;
        }
        Ok(())
    }

    /// Gathers `input` from every member of `g` and combines the contributions in member
    /// order with `combine(acc, next)`; `kind` is the GASPI call. Input longer than a slot
    /// (`REDUCE_SLOT` bytes) goes in rounds of whole elements of `elem` bytes, each combined
    /// on its own (element-wise reductions); a timed-out call resumes at its round.
    #[allow(clippy::too_many_arguments)]
    pub fn group_reduce(
        &self,
        g: gaspi_group_t,
        kind: Coll,
        input: &[u8],
        output: &mut [u8],
        elem: usize,
        timeout: u64,
        mut combine: impl FnMut(&mut [u8], &[u8]) -> R<()>,
    ) -> R<()> {
        if elem == 0 || elem > REDUCE_SLOT || output.len() != input.len() {
            return Err(GASPI_ERR_INV_SIZE);
        }
        let per = REDUCE_SLOT / elem * elem;
        let rounds = input.len().div_ceil(per).max(1);
        self.collective(g, kind, timeout, |s, timeout| {
            let start = Instant::now();
            while s.red_round < rounds {
                let lo = s.red_round * per;
                let hi = (lo + per).min(input.len());
                let left = time_left(timeout, start);
                let r = self.group_reduce_held(
                    s,
                    g,
                    &input[lo..hi],
                    &mut output[lo..hi],
                    left,
                    &mut combine,
                );
                match r {
                    Ok(()) => s.red_round += 1,
                    Err(GASPI_TIMEOUT) => return r,
                    Err(_) => {
                        s.red_round = 0;
                        return r;
                    }
                }
            }
            s.red_round = 0;
            Ok(())
        })
    }

    fn group_reduce_held(
        &self,
        s: &mut CollSlot,
        g: gaspi_group_t,
        input: &[u8],
        output: &mut [u8],
        timeout: u64,
        combine: &mut impl FnMut(&mut [u8], &[u8]) -> R<()>,
    ) -> R<()> {
        let members = self.members(g, true)?;
        let gi = g as usize;
        let parity = match s.red_pending {
            Some(p) => p,
            None => {
                let p = (s.rdone.wrapping_sub(s.rbase) % 2) as usize;
                let mine = self.slot(gi, p, self.rank);
                // SAFETY: the slot is this rank's, inside the heap, REDUCE_SLOT bytes long.
                unsafe {
                    std::ptr::copy_nonoverlapping(input.as_ptr(), self.base.add(mine), input.len())
                };
                let q = self.w.queue(QUEUES - 1).map_err(err)?;
                for &m in &members {
                    if m != self.rank && !input.is_empty() {
                        q.write(HEAP.at(mine), HEAP.on(m, mine), input.len())
                            .map_err(err)?;
                    }
                }
                for &m in &members {
                    if m != self.rank {
                        s.rexp[m] += 1;
                        self.raise(m, self.rcnt(gi, self.rank), s.rexp[m])?;
                    }
                }
                s.red_pending = Some(p);
                p
            }
        };
        let rexp = s.rexp.clone();
        self.poll(timeout, || {
            for &m in &members {
                let short = || self.word(self.rcnt(gi, m)).load(Ordering::Acquire) < rexp[m];
                if m != self.rank && short() {
                    if self.left_short(m, short) {
                        return Err(GASPI_ERROR);
                    }
                    return Ok(false);
                }
            }
            Ok(true)
        })?;
        let at = |m: usize| {
            // SAFETY: slot m of this rank's heap, written completely before m's count arrived.
            unsafe {
                std::slice::from_raw_parts(self.base.add(self.slot(gi, parity, m)), input.len())
            }
        };
        output.copy_from_slice(at(members[0]));
        // Every contribution has arrived: the round is over even when the program's
        // reduction fails, so the next reduction starts afresh.
        let r = members[1..]
            .iter()
            .try_for_each(|&m| combine(output, at(m)));
        s.red_pending = None;
        s.rdone += 1;
        r
    }
}

macro_rules! fold {
    ($acc:expr, $x:expr, $t:ty, $op:expr, $sum:path) => {{
        let n = $acc.len() / std::mem::size_of::<$t>();
        for i in 0..n {
            let o = i * std::mem::size_of::<$t>();
            let a = <$t>::from_ne_bytes($acc[o..o + std::mem::size_of::<$t>()].try_into().unwrap());
            let b = <$t>::from_ne_bytes($x[o..o + std::mem::size_of::<$t>()].try_into().unwrap());
            let r: $t = match $op {
                0 => {
                    if b < a {
                        b
                    } else {
                        a
                    }
                }
                1 => {
                    if b > a {
                        b
                    } else {
                        a
                    }
                }
                _ => $sum(a, b),
            };
            $acc[o..o + std::mem::size_of::<$t>()].copy_from_slice(&r.to_ne_bytes());
        }
    }};
}

/// `acc = acc op x` for a GASPI type and operation (integers wrap).
pub fn combine(ty: i32, op: i32, acc: &mut [u8], x: &[u8]) {
    match ty {
        0 => fold!(acc, x, i32, op, i32::wrapping_add),
        1 => fold!(acc, x, u32, op, u32::wrapping_add),
        2 => fold!(acc, x, f32, op, std::ops::Add::add),
        3 => fold!(acc, x, f64, op, std::ops::Add::add),
        4 => fold!(acc, x, i64, op, i64::wrapping_add),
        _ => fold!(acc, x, u64, op, u64::wrapping_add),
    }
}

/// Bytes of a GASPI type.
pub fn type_size(ty: i32) -> Option<usize> {
    match ty {
        0..=2 => Some(4),
        3..=5 => Some(8),
        _ => None,
    }
}

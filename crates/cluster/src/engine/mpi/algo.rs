//! Collective algorithms of the `mpi` engine over point-to-point messages, for the hosts'
//! leaders: a dissemination barrier and Bruck's allgather. Both are resumable state machines
//! (a [`step`](Dissemination::step) never blocks) and build no schedule per call, which makes
//! them cheaper than `MPI_Ibarrier` and `MPI_Iallgather` for small messages.

use super::raw::{irecv, isend, rank_size, Comm, Req};
use crate::error::Result;

/// A dissemination barrier over `comm` from zero-byte point-to-point messages:
/// ceil(log2 n) rounds; in the round of distance d, rank r sends to r + d and receives from
/// r - d. Cheaper per call than `MPI_Ibarrier` (no schedule is built), and resumable.
pub(super) struct Dissemination {
    comm: Comm,
    me: usize,
    n: usize,
    dist: usize,
    round: i32,
    reqs: Option<(Req, Req)>,
}

impl Dissemination {
    /// Tags of the rounds (tag + round); point-to-point traffic of its own on `comm`.
    const TAG: i32 = 0x7500;

    pub(super) fn new(comm: Comm) -> Dissemination {
        let (me, n) = rank_size(comm);
        Dissemination {
            comm,
            me,
            n,
            dist: 1,
            round: 0,
            reqs: None,
        }
    }

    /// Drives the barrier without blocking; `true` once every rank has arrived.
    pub(super) fn step(&mut self) -> Result<bool> {
        loop {
            if self.dist >= self.n {
                return Ok(true);
            }
            match &mut self.reqs {
                None => {
                    let (to, from) = (
                        (self.me + self.dist) % self.n,
                        (self.me + self.n - self.dist) % self.n,
                    );
                    let tag = Self::TAG + self.round;
                    // SAFETY: zero-byte messages: no buffer is read or written.
                    let r = unsafe {
                        irecv(
                            std::ptr::NonNull::dangling().as_ptr(),
                            0,
                            from,
                            tag,
                            self.comm,
                        )?
                    };
                    // SAFETY: as above.
                    let s = unsafe { isend(&[], to, tag, self.comm, false)? };
                    self.reqs = Some((s, r));
                }
                Some((s, r)) => {
                    // A completed request is null; testing it again says complete.
                    let sent = s.test()?;
                    if !(r.test()? && sent) {
                        return Ok(false);
                    }
                    self.reqs = None;
                    self.dist *= 2;
                    self.round += 1;
                }
            }
        }
    }
}

/// An allgather of `len` bytes per rank over `comm` from point-to-point messages (Bruck's
/// algorithm: ceil(log2 n) rounds, any n), resumable, with no schedule built per call as
/// `MPI_Iallgather` does.
pub(super) struct Bruck {
    comm: Comm,
    me: usize,
    n: usize,
    len: usize,
    dist: usize,
    round: i32,
    /// Block i holds the input of rank me + i (mod n) once received. Heap memory that stays
    /// put while requests are in flight (the Vec is never resized).
    tmp: Vec<u8>,
    reqs: Option<(Req, Req)>,
}

impl Bruck {
    const TAG: i32 = 0x7600;

    pub(super) fn new(input: &[u8], comm: Comm) -> Bruck {
        let (me, n) = rank_size(comm);
        let mut tmp = vec![0u8; input.len() * n];
        tmp[..input.len()].copy_from_slice(input);
        Bruck {
            comm,
            me,
            n,
            len: input.len(),
            dist: 1,
            round: 0,
            tmp,
            reqs: None,
        }
    }

    /// Drives the exchange without blocking; `true` when every rank's input is here.
    pub(super) fn step(&mut self) -> Result<bool> {
        loop {
            if self.dist >= self.n {
                return Ok(true);
            }
            match &mut self.reqs {
                None => {
                    let d = self.dist;
                    let cnt = d.min(self.n - d) * self.len;
                    let to = (self.me + self.n - d) % self.n;
                    let from = (self.me + d) % self.n;
                    let tag = Self::TAG + self.round;
                    let base = self.tmp.as_mut_ptr();
                    // SAFETY: receives into blocks d..d+cnt, sends blocks 0..cnt (cnt <= d: no
                    // overlap), both inside tmp, which is not touched or moved until the two
                    // requests complete (`reqs` is cleared only then; dropping a pending
                    // Bruck is not done: the engine keeps it until complete).
                    let r = unsafe { irecv(base.add(d * self.len), cnt, from, tag, self.comm)? };
                    // SAFETY: as above.
                    let s = unsafe {
                        isend(
                            std::slice::from_raw_parts(base, cnt),
                            to,
                            tag,
                            self.comm,
                            false,
                        )?
                    };
                    self.reqs = Some((s, r));
                }
                Some((s, r)) => {
                    let sent = s.test()?;
                    if !(r.test()? && sent) {
                        return Ok(false);
                    }
                    self.reqs = None;
                    self.dist *= 2;
                    self.round += 1;
                }
            }
        }
    }

    /// Every rank's input in rank order (after `step` said `true`).
    pub(super) fn result(&self) -> Vec<u8> {
        let mut all = vec![0u8; self.tmp.len()];
        for i in 0..self.n {
            let r = (self.me + i) % self.n;
            all[r * self.len..(r + 1) * self.len]
                .copy_from_slice(&self.tmp[i * self.len..(i + 1) * self.len]);
        }
        all
    }
}

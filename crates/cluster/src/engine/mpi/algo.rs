//! The point-to-point exchange of the `mpi` engine's collectives between hosts: Bruck's
//! allgather, which also finds out whether every rank called the same collective with the
//! same arguments. A barrier between hosts is this exchange with no data. The exchange is a
//! resumable state machine (a [`step`](Exchange::step) never blocks) and builds no schedule
//! per call, which makes it cheaper than `MPI_Ibarrier` and `MPI_Iallgather` for small
//! messages.
//!
//! The check costs no bytes: each message's *tag* carries its sender's call, in a compact form
//! that is exact for every call with at most 2^20 elements or segment id ([`code`]; larger
//! calls put their whole word in front of the data), and one bit saying whether the sender
//! has already seen a call other than its own. (A byte of payload would cost more: Open MPI
//! sends a message without data on a shorter path, about 200 ns less per round on shared
//! memory.) After the ceil(log2 n) rounds every rank has heard, directly or not, from every
//! other, so if any two calls differed every rank has seen a difference on the way. Only
//! then, and at every rank alike, a second exchange of full records ([`Calls`]) finds which
//! calls differ and who made them, for the error.

use super::raw::{irecv, isend, Comm, Req};
use crate::collective::Collective;
use crate::config::BRUCK_MAX;
use crate::error::{Error, Rank, Result};

/// What a rank knows of the calls of the ranks it has heard from: the smallest and the
/// largest call word ([`Collective::word`]), each with the lowest rank that made it. Both are
/// idempotent to combine, so they travel through any exchange in which every rank hears from
/// every other one, directly or not; once every rank is heard, the smallest and the largest
/// differ exactly when some ranks called something else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Calls {
    lo: u64,
    lo_rank: u64,
    hi: u64,
    hi_rank: u64,
}

impl Calls {
    /// Bytes of a record on the wire (four native-endian words: the ranks of one job share a
    /// byte order).
    pub(super) const BYTES: usize = 32;

    /// What `rank`, which called `word`, knows before it hears from anyone.
    pub(super) fn new(word: u64, rank: Rank) -> Calls {
        Calls {
            lo: word,
            lo_rank: rank as u64,
            hi: word,
            hi_rank: rank as u64,
        }
    }

    /// Adds that `rank` called `word`.
    pub(super) fn add(&mut self, word: u64, rank: u64) {
        if (word, rank) < (self.lo, self.lo_rank) {
            (self.lo, self.lo_rank) = (word, rank);
        }
        if word > self.hi || (word == self.hi && rank < self.hi_rank) {
            (self.hi, self.hi_rank) = (word, rank);
        }
    }

    /// Adds what another rank knew.
    pub(super) fn merge(&mut self, o: Calls) {
        self.add(o.lo, o.lo_rank);
        self.add(o.hi, o.hi_rank);
    }

    /// Adds what an error of a host-local step says another rank called.
    pub(super) fn add_error(&mut self, e: &Error) {
        if let Error::CollectiveMismatch(m) = e {
            self.add(m.theirs.word(), m.rank as u64);
        }
    }

    /// Every call heard of is the same one.
    pub(super) fn agree(&self) -> bool {
        self.lo == self.hi
    }

    /// `Ok` when every call heard of is `mine`; otherwise the mismatch of `mine` with another
    /// call and the lowest rank that made it.
    pub(super) fn verdict(&self, mine: u64) -> Result<()> {
        let (w, r) = if self.lo != mine {
            (self.lo, self.lo_rank)
        } else if self.hi != mine {
            (self.hi, self.hi_rank)
        } else {
            return Ok(());
        };
        Err(Error::mismatch(
            Collective::from_word(mine),
            Collective::from_word(w),
            r as Rank,
        ))
    }

    /// The record on the wire.
    pub(super) fn to_bytes(self) -> [u8; Calls::BYTES] {
        let mut b = [0u8; Calls::BYTES];
        for (i, w) in [self.lo, self.lo_rank, self.hi, self.hi_rank]
            .into_iter()
            .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
        }
        b
    }

    /// A record read back from the first [`Calls::BYTES`] of `b`; `None` when `b` is shorter
    /// or holds no call (a word of zero is never a call).
    pub(super) fn from_bytes(b: &[u8]) -> Option<Calls> {
        let w = |i: usize| -> Option<u64> {
            Some(u64::from_ne_bytes(
                b.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        let c = Calls {
            lo: w(0)?,
            lo_rank: w(1)?,
            hi: w(2)?,
            hi_rank: w(3)?,
        };
        (c.lo != 0 && c.hi != 0).then_some(c)
    }
}

/// Bits of a tag: every tag of the exchange has [`TAG_MARK`] set, then the "seen another
/// call" bit, then a 28-bit code. MPI's tag bound must allow them ([`TAG_BITS_NEEDED`]).
const TAG_MARK: i32 = 1 << 29;
const TAG_SEEN: i32 = 1 << 28;
/// The largest tag the exchange uses; MPI's `MPI_TAG_UB` must be at least this.
pub(super) const TAG_BITS_NEEDED: i32 = (1 << 30) - 1;
/// The code of a call too large for a compact code: its word travels in the message.
const ESCAPE: u32 = 7 << 25;
/// The code of the second exchange's messages (full records).
const RECORD: u32 = 6 << 25;

/// A call word in 28 bits, exactly (distinct calls, distinct codes), or [`ESCAPE`]: the kind
/// in bits 25–27; for an allreduce the type (22–24), the operation (20–21) and the element
/// count (0–19, below 2^20); for a segment call its id (below 2^20).
pub(super) fn code(word: u64) -> u32 {
    let kind = (word >> 60) as u32;
    let low = word & ((1 << 52) - 1);
    match kind {
        1 if low == 0 => 1 << 25,
        2 if low < 1 << 20 => {
            let ty = ((word >> 56) & 15) as u32;
            let op = ((word >> 52) & 15) as u32;
            if ty < 8 && op < 4 {
                2 << 25 | ty << 22 | op << 20 | low as u32
            } else {
                ESCAPE
            }
        }
        3 | 4 if low < 1 << 20 => kind << 25 | low as u32,
        _ => ESCAPE,
    }
}

/// The buffers of an exchange, kept by the engine from one collective to the next so that a
/// collective allocates nothing.
#[derive(Default)]
pub(super) struct Buffers {
    tmp: Vec<u8>,
    out: Vec<u8>,
    inbox: Vec<u8>,
}

/// A group of ranks that exchange: its communicator (which carries no other point-to-point
/// traffic: the exchange receives any tag), this rank's place in it and its size.
#[derive(Clone, Copy, Debug)]
pub(super) struct Group {
    pub(super) comm: Comm,
    pub(super) me: usize,
    pub(super) n: usize,
}

/// Bruck's allgather of `len` bytes per rank over a [`Group`] (ceil(log2 n) rounds, any n): in
/// the round of distance d, rank r sends the blocks it holds (its own and those of r + 1, ...)
/// to r − d and receives those of r + d, ... With `len` zero it is a dissemination barrier.
/// The calls are checked as the module says; each round's receive has room for the longest
/// message any exchange sends ([`Exchange::INBOX`]), so a message of another length, sent by a
/// rank that called another collective, is received whole: every round still runs (every rank
/// learns of the mismatch), and the blocks are not used.
pub(super) struct Exchange {
    g: Group,
    len: usize,
    dist: usize,
    /// This rank's call, and its code.
    word: u64,
    code: u32,
    /// A call other than this rank's has been seen (by this rank or by one it heard from).
    seen: bool,
    /// The second exchange (full records) is running.
    records: bool,
    calls: Calls,
    /// A message of another length was received: the blocks are not every rank's input.
    garbled: bool,
    /// `tmp`: block i holds the input of rank me + i (mod n) once received. `out`: this
    /// round's message, not touched (nor reallocated) while the send is in flight. `inbox`:
    /// where this round's message arrives, [`Exchange::INBOX`] bytes of capacity, never
    /// reallocated.
    b: Buffers,
    send: Option<Req>,
    recv: Option<Req>,
    /// This round's message is here.
    received: bool,
}

impl Drop for Exchange {
    fn drop(&mut self) {
        // A pending request still points into `out` or `inbox`. The engine drops an exchange
        // only once it completed (a timed-out one stays in its phase to be resumed), or with
        // the engine at the end of the process: the buffers are then leaked rather than freed
        // under MPI.
        if self.send.is_some() || self.recv.is_some() {
            std::mem::forget(std::mem::take(&mut self.b));
        }
    }
}

impl Exchange {
    /// The longest message of any exchange: a word and at most [`BRUCK_MAX`] bytes of blocks
    /// (every exchange with data holds at most that much in all), or a record.
    const INBOX: usize = 8 + BRUCK_MAX;

    /// The exchange of `input` (every rank the same length, unless the calls disagree) by a
    /// rank that called `calls` (with what its host told it), in buffers `b`.
    pub(super) fn new(input: &[u8], g: Group, calls: Calls, word: u64, mut b: Buffers) -> Exchange {
        b.tmp.clear();
        b.tmp.resize(input.len() * g.n, 0);
        b.tmp[..input.len()].copy_from_slice(input);
        if g.n > 1 && b.inbox.capacity() < Self::INBOX {
            b.inbox = Vec::with_capacity(Self::INBOX);
        }
        Exchange {
            g,
            len: input.len(),
            dist: 1,
            word,
            code: code(word),
            seen: !calls.agree(),
            records: false,
            calls,
            garbled: false,
            b,
            send: None,
            recv: None,
            received: false,
        }
    }

    /// Drives the exchange without blocking; `true` when every rank has been heard from.
    pub(super) fn step(&mut self) -> Result<bool> {
        loop {
            if self.dist >= self.g.n {
                if self.seen && !self.records {
                    // Some calls differ: every rank learns which in a second exchange.
                    self.records = true;
                    self.dist = 1;
                    continue;
                }
                return Ok(true);
            }
            let (me, n, d) = (self.g.me, self.g.n, self.dist);
            let cnt = d.min(n - d) * self.len;
            if self.send.is_none() && !self.received {
                // The round starts: post the receive, then send what this rank holds.
                // SAFETY: `inbox` has INBOX bytes of capacity and is neither touched nor
                // reallocated until the receive completes (or ever, if it never does: see
                // Drop); MPI writes at most INBOX bytes.
                self.recv = Some(unsafe {
                    irecv(
                        self.b.inbox.as_mut_ptr(),
                        Self::INBOX,
                        (me + d) % n,
                        None,
                        self.g.comm,
                    )?
                });
                self.b.out.clear();
                let tag = if self.records {
                    self.b.out.extend_from_slice(&self.calls.to_bytes());
                    TAG_MARK | RECORD as i32
                } else {
                    if self.code == ESCAPE {
                        self.b.out.extend_from_slice(&self.word.to_ne_bytes());
                    }
                    self.b.out.extend_from_slice(&self.b.tmp[..cnt]);
                    self.tag()
                };
                // SAFETY: `out` is not touched (nor reallocated) until the send completes;
                // the round ends only then.
                self.send =
                    Some(unsafe { isend(&self.b.out, (me + n - d) % n, tag, self.g.comm, false)? });
            }
            if let Some(r) = &mut self.recv {
                let Some(st) = r.test_status()? else {
                    return Ok(false);
                };
                self.recv = None;
                self.received = true;
                let tag = st.tag();
                // A message of this rank's own call is as long as its own (the pattern
                // depends on the group and the length only): only others are measured.
                let own = (tag & !TAG_SEEN) == (self.tag() & !TAG_SEEN);
                let got = if !self.records && own && self.code != ESCAPE {
                    cnt
                } else {
                    st.bytes()?
                };
                // SAFETY: the completed receive wrote `got` (at most INBOX) bytes at the start
                // of `inbox`'s capacity.
                let msg = unsafe { std::slice::from_raw_parts(self.b.inbox.as_ptr(), got) };
                let from = ((me + d) % n) as u64;
                self.take(msg, tag, cnt, from);
            }
            if let Some(s) = &mut self.send {
                if !s.test()? {
                    return Ok(false);
                }
            }
            self.send = None;
            self.received = false;
            self.dist *= 2;
        }
    }

    /// The tag of this rank's messages in the first exchange.
    fn tag(&self) -> i32 {
        TAG_MARK | if self.seen { TAG_SEEN } else { 0 } | self.code as i32
    }

    /// Takes in the message `msg` with tag `tag` from `from`, in a round that moves `cnt`
    /// bytes of blocks.
    fn take(&mut self, msg: &[u8], tag: i32, cnt: usize, from: u64) {
        if self.records {
            match Calls::from_bytes(msg).filter(|_| tag == TAG_MARK | RECORD as i32) {
                Some(c) => self.calls.merge(c),
                None => self.calls.add(Collective::Unknown.word(), from),
            }
            return;
        }
        let their = (tag & ((1 << 28) - 1)) as u32;
        let seen = tag & TAG_SEEN != 0 || tag & TAG_MARK == 0;
        let (word, blocks) = if their == ESCAPE && msg.len() >= 8 {
            let w = u64::from_ne_bytes(msg[..8].try_into().expect("8 bytes"));
            (Some(w), &msg[8..])
        } else {
            (None, msg)
        };
        let same = their == self.code && (their != ESCAPE || word == Some(self.word));
        self.seen |= seen || !same;
        if blocks.len() == cnt && same {
            let d = self.dist;
            self.b.tmp[d * self.len..d * self.len + cnt].copy_from_slice(blocks);
        } else {
            self.garbled = true;
        }
    }

    /// What this rank knows of the calls once `step` said `true`: every rank's when some
    /// differ (the calls this rank was given, when all agree).
    pub(super) fn calls(&self) -> Calls {
        self.calls
    }

    /// Whether every rank called what this rank did (once `step` said `true`).
    pub(super) fn agree(&self) -> bool {
        !self.seen
    }

    /// Every rank's input in rank order (once `step` said `true`); `None` when the calls
    /// disagree.
    pub(super) fn result(&self, all: &mut [u8]) -> Option<()> {
        if self.garbled || self.seen {
            return None;
        }
        let (me, n, len) = (self.g.me, self.g.n, self.len);
        for i in 0..n {
            let r = (me + i) % n;
            all[r * len..(r + 1) * len].copy_from_slice(&self.b.tmp[i * len..(i + 1) * len]);
        }
        Some(())
    }

    /// The buffers back, for the next exchange (once `step` said `true`).
    pub(super) fn into_buffers(mut self) -> Buffers {
        std::mem::take(&mut self.b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{DataType, Op};

    fn ar(len: usize) -> u64 {
        Collective::Allreduce {
            len,
            ty: DataType::F64,
            op: Op::Sum,
        }
        .word()
    }

    #[test]
    fn calls_that_agree_give_no_error() {
        let mut c = Calls::new(ar(4), 2);
        c.merge(Calls::new(ar(4), 0));
        c.merge(Calls::new(ar(4), 5));
        assert!(c.agree());
        assert_eq!(c.verdict(ar(4)), Ok(()));
        assert_eq!(Calls::from_bytes(&c.to_bytes()), Some(c));
    }

    #[test]
    fn a_mismatch_names_the_other_call_and_its_lowest_rank() {
        // Rank 0 calls a barrier, ranks 1..4 an allreduce: heard in any order.
        let barrier = Collective::Barrier.word();
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]] {
            let mut c = Calls::new(if order[0] == 0 { barrier } else { ar(4) }, order[0]);
            for &r in &order[1..] {
                c.merge(Calls::new(if r == 0 { barrier } else { ar(4) }, r));
            }
            assert!(!c.agree());
            assert_eq!(
                c.verdict(barrier),
                Err(Error::mismatch(
                    Collective::Barrier,
                    Collective::from_word(ar(4)),
                    1
                ))
            );
            assert_eq!(
                c.verdict(ar(4)),
                Err(Error::mismatch(
                    Collective::from_word(ar(4)),
                    Collective::Barrier,
                    0
                ))
            );
        }
    }

    #[test]
    fn short_or_empty_records_are_refused() {
        assert_eq!(Calls::from_bytes(&[1u8; 31]), None);
        assert_eq!(Calls::from_bytes(&[0u8; 32]), None);
    }

    #[test]
    fn codes_are_exact_below_the_escape_and_fit_the_tag() {
        let mut words = vec![Collective::Barrier.word()];
        for ty in crate::collective::TYPES {
            for op in crate::collective::OPS {
                for len in [0, 1, 2, 3, 1000, (1 << 20) - 1] {
                    words.push(Collective::Allreduce { len, ty, op }.word());
                }
            }
        }
        for seg in [0, 1, 255, (1 << 20) - 1] {
            words.push(Collective::SegmentCreate { seg }.word());
            words.push(Collective::SegmentDelete { seg }.word());
        }
        let codes: std::collections::HashSet<u32> = words.iter().map(|&w| code(w)).collect();
        assert_eq!(codes.len(), words.len(), "distinct calls, distinct codes");
        assert!(!codes.contains(&ESCAPE) && !codes.contains(&RECORD));
        assert!(codes.iter().all(|&c| c < 1 << 28));
        let largest = [TAG_MARK, TAG_SEEN, ESCAPE as i32, (1 << 25) - 1]
            .into_iter()
            .fold(0, |a, b| a | b);
        assert!(largest <= TAG_BITS_NEEDED);
        let big = Collective::Allreduce {
            len: 1 << 20,
            ty: DataType::F64,
            op: Op::Sum,
        };
        assert_eq!(code(big.word()), ESCAPE);
        assert_eq!(
            code(Collective::SegmentCreate { seg: 1 << 20 }.word()),
            ESCAPE
        );
        assert_eq!(code(Collective::Unknown.word()), ESCAPE);
    }
}

//! Replicated two-sided messaging (VolpexMPI's scheme): every logical rank runs as `R`
//! replicas, processes `l·R .. l·R + R` of the world underneath, and a program written for the
//! logical ranks runs unchanged on a [`Comm`] in this mode ([`Comm::new`] enters it when the
//! launcher set `TIERS_REPLICAS`; [`Comm::replicated`] asks for it explicitly).
//!
//! # Protocol
//!
//! - **Send logs.** `send(dest, tag, data)` gives the message the next logical timestamp of
//!   (channel, tag, this rank, `dest`) and keeps it in this replica's send log; nothing moves.
//!   Every replica of a rank computes the same messages with the same timestamps.
//! - **Receive pulls.** `recv(src, tag)` asks one replica of `src` for the message with the
//!   timestamp it expects (a request on the physical [`Comm`] underneath) and takes the first
//!   answer from any replica of `src`. It asks first the replica that answered it last (the
//!   fastest one, as far as it knows). A replica that has not answered within the timeout
//!   (`TIERS_REPLICA_TIMEOUT_MS`, default [`REPLICA_TIMEOUT`](crate::config::REPLICA_TIMEOUT)) is marked
//!   [`ReplicaState::Suspect`] and the next replica is asked too; one that the world reports
//!   failed or exited (`PeerFailed`) is [`ReplicaState::Dead`] and never asked again. An answer
//!   makes a suspect replica alive again. A replica asked for a message it has not sent yet
//!   answers when it sends it. When every replica of `src` is dead, `recv` fails with
//!   `PeerFailed(src)` (the logical rank).
//! - **Serving.** Every call into the `Comm` (and every wait inside one) answers the requests
//!   that have arrived, so a replica serves its peers whenever it communicates.
//! - **The log's bound.** A logged message is dropped once every replica of its receiver that
//!   is not dead has been sent it. Besides, a log keeps at most [`REPLICA_LOG_MESSAGES`]
//!   messages per destination rank and [`REPLICA_LOG_BYTES`] bytes in all, dropping the oldest
//!   beyond that, so a stopped or very slow receiver replica cannot grow it without bound. A
//!   replica that lags so far that a message it asks for has been dropped is told so; it then
//!   asks the sender's other replicas, and when none of them still logs it, its `recv` fails
//!   with [`Error::ReplicaLagged`] naming the lag: that replica is lost (its rank goes on with the
//!   others) rather than given wrong data.
//! - **Leaving.** Dropping the `Comm` tells every process it is done and goes on answering
//!   requests until every other process is done or gone, or none has asked anything for two
//!   timeouts (a stopped replica does not hold it longer; one timeout is what a receiver may
//!   spend on a replica that died unnoticed before it asks this one).
//! - **Collectives** (barrier, allreduce, alltoall, alltoallv) are built on these sends and
//!   receives by logical rank, folding in rank order, so every replica of every rank computes
//!   the same bytes. After `Err(Timeout)` a replicated collective cannot be resumed.
//! - **Start and end.** What the world does collectively around this layer (its join, the
//!   registration of the `Comm`'s segment) counts a dead process as arrived while a live
//!   replica covers its rank (`engine/replicas.rs`; on the tcp engine a rendezvous that does
//!   not wait for a dead replica, and collectives every rank settles itself), so a replica may
//!   die at any moment, from its start to its exit. A replica stopped there (or far behind) is
//!   left behind after one replica timeout: the others go on, and its own call fails when it
//!   comes.
//!
//! The transport is the physical [`Comm`] (rings of notified one-sided writes), which names
//! processes only through the world: a socket engine under the world would carry it
//! unchanged.

use super::{Comm, ALLREDUCE, ALLTOALL, BARRIER, USER};
use crate::collective::{as_bytes, as_bytes_mut, combine, DataType, Op, Pod, Reducible};
use crate::config::{env, REPLICA_LOG_BYTES, REPLICA_LOG_MESSAGES};
use crate::error::{Error, Rank, Result};
use crate::timeout::{Deadline, Timeout};
use crate::world::World;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// Channels of the physical `Comm` the replicated layer uses (apart from the program's).
const REQ: u32 = 16;
const REP: u32 = 17;
const DONE: u32 = 18;

/// Answer statuses.
const DATA: u32 = 0;
const DROPPED: u32 = 1;

/// What a process knows of one replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaState {
    /// It answered, or has not been found wanting yet.
    Alive,
    /// It did not answer within the timeout (stopped, or far behind); asked last.
    Suspect,
    /// The world reports it failed or exited; never asked again.
    Dead,
}

/// Where a process sits in a replicated job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Its logical rank.
    pub rank: Rank,
    /// Its replica index, `0..replicas`.
    pub replica: usize,
    /// Replicas per logical rank.
    pub replicas: usize,
    /// Logical ranks.
    pub ranks: usize,
}

impl Placement {
    /// The placement of `world`'s rank with `replicas` replicas per logical rank.
    ///
    /// # Errors
    ///
    /// [`Error::Setup`] when `replicas` is not in 1..=64 (a log entry keeps a bit per replica)
    /// or does not divide the world's size.
    pub fn of(world: &World, replicas: usize) -> Result<Placement> {
        if replicas == 0 || replicas > 64 || world.size() % replicas != 0 {
            return Err(Error::Setup(format!(
                "{replicas} replicas per rank (1 to 64) do not divide a world of {} processes",
                world.size()
            )));
        }
        Ok(Placement {
            rank: world.rank() / replicas,
            replica: world.rank() % replicas,
            replicas,
            ranks: world.size() / replicas,
        })
    }

    /// The placement the launcher gave this process (`TIERS_REPLICAS`), if it is replicated.
    ///
    /// # Errors
    ///
    /// [`Error::Setup`] for a `TIERS_REPLICAS` that is not a number dividing the world's size,
    /// or a `TIERS_REPLICA` that disagrees with the rank.
    pub fn from_env(world: &World) -> Result<Option<Placement>> {
        let Ok(v) = std::env::var(env::REPLICAS) else {
            return Ok(None);
        };
        let r: usize = v
            .trim()
            .parse()
            .map_err(|_| Error::Setup(format!("{}={v:?} is not a number", env::REPLICAS)))?;
        if r <= 1 {
            return Ok(None);
        }
        let p = Placement::of(world, r)?;
        if let Ok(k) = std::env::var(env::REPLICA) {
            if k.trim().parse::<usize>().ok() != Some(p.replica) {
                return Err(Error::Setup(format!(
                    "{}={k:?} disagrees with rank {} of {r} replicas",
                    env::REPLICA,
                    world.rank()
                )));
            }
        }
        Ok(Some(p))
    }
}

/// A message's identity: (rank, channel, tag, timestamp).
type Stamped = (Rank, u32, u32, u64);

/// A logged message: what, and which replicas of its receiver have been sent it (a bit each).
struct Logged {
    key: (u32, u32, u64),
    data: Vec<u8>,
    served: u64,
}

pub(super) struct Replicas {
    place: Placement,
    timeout: Duration,
    st: RefCell<State>,
}

struct State {
    /// Per logical destination: the next timestamp of each (channel, tag).
    next_stamp: HashMap<(Rank, u32, u32), u64>,
    /// Per logical destination: the log, oldest first.
    log: Vec<VecDeque<Logged>>,
    log_bytes: usize,
    /// Requests for messages not sent yet: (requesting process, channel, tag, timestamp).
    waiting: Vec<(Rank, u32, u32, u64)>,
    /// Per logical source: the timestamp the next message of each (channel, tag) carries.
    expect: HashMap<(Rank, u32, u32), u64>,
    /// Answers not yet delivered: (logical source, channel, tag, timestamp) → (process, data).
    got: HashMap<Stamped, (Rank, Vec<u8>)>,
    /// Processes that answered that they dropped a message: (process, channel, tag, stamp).
    dropped: HashSet<Stamped>,
    /// Per process.
    health: Vec<ReplicaState>,
    done: Vec<bool>,
    /// Per logical rank: the replica to ask first.
    preferred: Vec<usize>,
    /// When a request last arrived.
    last_request: Instant,
}

impl Replicas {
    pub(super) fn new(place: Placement, timeout: Duration) -> Replicas {
        let procs = place.ranks * place.replicas;
        Replicas {
            place,
            timeout,
            st: RefCell::new(State {
                next_stamp: HashMap::new(),
                log: (0..place.ranks).map(|_| VecDeque::new()).collect(),
                log_bytes: 0,
                waiting: Vec::new(),
                expect: HashMap::new(),
                got: HashMap::new(),
                dropped: HashSet::new(),
                health: vec![ReplicaState::Alive; procs],
                done: vec![false; procs],
                preferred: vec![0; place.ranks],
                last_request: Instant::now(),
            }),
        }
    }

    pub(super) fn placement(&self) -> Placement {
        self.place
    }

    pub(super) fn state(&self) -> Vec<Vec<ReplicaState>> {
        let st = self.st.borrow();
        st.health
            .chunks(self.place.replicas)
            .map(<[ReplicaState]>::to_vec)
            .collect()
    }

    fn proc(&self, rank: Rank, replica: usize) -> Rank {
        rank * self.place.replicas + replica
    }

    fn check(&self, rank: Rank) -> Result<()> {
        if rank >= self.place.ranks {
            return Err(Error::NoSuchRank {
                rank,
                size: self.place.ranks,
            });
        }
        Ok(())
    }

    /// Logs a message for `dest` and answers requests that waited for it.
    fn log(&self, c: &Comm<'_>, dest: Rank, channel: u32, tag: u32, data: Vec<u8>) -> Result<()> {
        {
            let mut st = self.st.borrow_mut();
            let st = &mut *st;
            let n = st.next_stamp.entry((dest, channel, tag)).or_insert(0);
            let stamp = *n;
            *n += 1;
            st.log_bytes += data.len();
            st.log[dest].push_back(Logged {
                key: (channel, tag, stamp),
                data,
                served: 0,
            });
            // The bound: the oldest go first.
            while st.log[dest].len() > REPLICA_LOG_MESSAGES {
                if let Some(m) = st.log[dest].pop_front() {
                    st.log_bytes -= m.data.len();
                }
            }
            while st.log_bytes > REPLICA_LOG_BYTES {
                let Some(d) = (0..st.log.len())
                    .filter(|&d| !st.log[d].is_empty())
                    .max_by_key(|&d| st.log[d].len())
                else {
                    break;
                };
                if let Some(m) = st.log[d].pop_front() {
                    st.log_bytes -= m.data.len();
                }
            }
        }
        let waiting = std::mem::take(&mut self.st.borrow_mut().waiting);
        for (from, ch, t, s) in waiting {
            self.serve(c, from, ch, t, s)?;
        }
        Ok(())
    }

    /// Answers process `from`'s request for (channel, tag, stamp) of its logical rank.
    fn serve(&self, c: &Comm<'_>, from: Rank, channel: u32, tag: u32, stamp: u64) -> Result<()> {
        let (dest, replica) = (from / self.place.replicas, from % self.place.replicas);
        let answer = {
            let mut st = self.st.borrow_mut();
            let st = &mut *st;
            let next = *st.next_stamp.get(&(dest, channel, tag)).unwrap_or(&0);
            if stamp >= next {
                st.waiting.push((from, channel, tag, stamp));
                return Ok(());
            }
            let health = &st.health;
            let reps = self.place.replicas;
            let log = &mut st.log[dest];
            match log.iter().position(|m| m.key == (channel, tag, stamp)) {
                Some(i) => {
                    let mut msg = head(channel, tag, stamp, DATA);
                    msg.extend_from_slice(&log[i].data);
                    log[i].served |= 1 << replica;
                    // Dropped once every replica of the receiver that is not dead has it.
                    let all = (0..reps)
                        .filter(|&k| health[dest * reps + k] != ReplicaState::Dead)
                        .all(|k| log[i].served & (1 << k) != 0);
                    if all {
                        if let Some(m) = log.remove(i) {
                            st.log_bytes -= m.data.len();
                        }
                    }
                    msg
                }
                None => head(channel, tag, stamp, DROPPED),
            }
        };
        self.post(c, from, REP, answer)
    }

    /// Posts to process `to` on the physical `Comm`; a process that is gone is marked dead.
    fn post(&self, c: &Comm<'_>, to: Rank, channel: u32, data: Vec<u8>) -> Result<()> {
        match c.post(to, channel, 0, data) {
            Err(Error::PeerFailed(r)) => {
                self.mark_dead(c, r);
                Ok(())
            }
            r => r,
        }
    }

    fn mark_dead(&self, c: &Comm<'_>, p: Rank) {
        if let Some(h) = self.st.borrow_mut().health.get_mut(p) {
            *h = ReplicaState::Dead;
        }
        c.state.borrow_mut().outbox[p].clear();
    }

    /// One round: the physical progress (writes to dead processes dropped), then the requests,
    /// answers and farewells that came in.
    fn pump(&self, c: &Comm<'_>) -> Result<()> {
        for p in 0..c.size {
            if p != c.me
                && self.st.borrow().health[p] != ReplicaState::Dead
                && c.world.health(p)?.is_gone()
            {
                self.mark_dead(c, p);
            }
        }
        // A process may die between the check and the write.
        for _ in 0..=c.size {
            // Rounds that wait for their writes as long as they take.
            match c.progress(Deadline::Never) {
                Err(Error::PeerFailed(r)) => self.mark_dead(c, r),
                r => {
                    r?;
                    break;
                }
            }
        }
        let mut incoming = Vec::new();
        {
            let mut cs = c.state.borrow_mut();
            cs.arrived.retain(|&(src, ch, _), q| {
                if ch == REQ || ch == REP || ch == DONE {
                    incoming.extend(std::mem::take(q).into_values().map(|m| (src, ch, m)));
                    false
                } else {
                    true
                }
            });
        }
        for (src, ch, m) in incoming {
            let Some((channel, tag, stamp, status)) = parse(&m) else {
                continue;
            };
            match ch {
                REQ => {
                    self.st.borrow_mut().last_request = Instant::now();
                    self.serve(c, src, channel, tag, stamp)?;
                }
                REP => {
                    let mut st = self.st.borrow_mut();
                    let l = src / self.place.replicas;
                    if st.health[src] == ReplicaState::Suspect {
                        st.health[src] = ReplicaState::Alive;
                    }
                    let want = *st.expect.get(&(l, channel, tag)).unwrap_or(&0);
                    if stamp < want {
                        continue;
                    }
                    if status == DROPPED {
                        st.dropped.insert((src, channel, tag, stamp));
                    } else {
                        st.got
                            .entry((l, channel, tag, stamp))
                            .or_insert_with(|| (src, m[HEAD..].to_vec()));
                    }
                }
                _ => self.st.borrow_mut().done[src] = true,
            }
        }
        Ok(())
    }

    /// The next message of (`src`, `channel`, `tag`), pulled from the first replica of `src`
    /// to answer.
    fn receive<R>(
        &self,
        c: &Comm<'_>,
        src: Rank,
        channel: u32,
        tag: u32,
        deadline: Deadline,
        take: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<R> {
        let reps = self.place.replicas;
        let stamp = *self
            .st
            .borrow()
            .expect
            .get(&(src, channel, tag))
            .unwrap_or(&0);
        // This rank's own message: this replica logged it.
        if src == self.place.rank {
            let st = self.st.borrow();
            let m = st.log[src]
                .iter()
                .find(|m| m.key == (channel, tag, stamp))
                .ok_or_else(|| Error::Protocol {
                    from: Some(src),
                    what: format!(
                        "a receive from itself (channel {channel}, tag {tag}) of what it did not send"
                    )
                    .into(),
                })?;
            let r = take(&m.data)?;
            drop(st);
            let mut st = self.st.borrow_mut();
            if let Some(i) = st.log[src]
                .iter()
                .position(|m| m.key == (channel, tag, stamp))
            {
                if let Some(m) = st.log[src].remove(i) {
                    st.log_bytes -= m.data.len();
                }
            }
            st.expect.insert((src, channel, tag), stamp + 1);
            return Ok(r);
        }
        let key = (src, channel, tag, stamp);
        // Replicas asked, and when the last was asked.
        let mut asked: Vec<usize> = Vec::new();
        let mut last_ask: Option<Instant> = None;
        loop {
            self.pump(c)?;
            let got = self.st.borrow_mut().got.remove(&key);
            if let Some((from, data)) = got {
                let r = take(&data)?;
                let mut st = self.st.borrow_mut();
                st.expect.insert((src, channel, tag), stamp + 1);
                st.preferred[src] = from % reps;
                st.health[from] = ReplicaState::Alive;
                st.dropped
                    .retain(|d| (d.1, d.2) != (channel, tag) || d.3 > stamp);
                return Ok(r);
            }
            let due = last_ask.is_none_or(|t| t.elapsed() >= self.timeout);
            if due {
                let next = {
                    let mut st = self.st.borrow_mut();
                    if last_ask.is_some() {
                        // Those asked have not answered in time.
                        for &k in &asked {
                            let h = &mut st.health[self.proc(src, k)];
                            if *h == ReplicaState::Alive {
                                *h = ReplicaState::Suspect;
                            }
                        }
                    }
                    let usable = |k: usize| {
                        let p = self.proc(src, k);
                        st.health[p] != ReplicaState::Dead
                            && !st.dropped.contains(&(p, channel, tag, stamp))
                    };
                    let first = st.preferred[src];
                    let order: Vec<usize> = (0..reps).map(|i| (first + i) % reps).collect();
                    if !order.iter().any(|&k| usable(k)) {
                        let all_dead =
                            (0..reps).all(|k| st.health[self.proc(src, k)] == ReplicaState::Dead);
                        return Err(if all_dead {
                            Error::PeerFailed(src)
                        } else {
                            Error::ReplicaLagged {
                                replica: self.place.replica as u32,
                                rank: self.place.rank,
                                from: src,
                                tag,
                                stamp,
                            }
                        });
                    }
                    // Alive ones first, then suspects; each once per round.
                    let pick = order
                        .iter()
                        .copied()
                        .filter(|&k| usable(k) && !asked.contains(&k))
                        .min_by_key(|&k| st.health[self.proc(src, k)] != ReplicaState::Alive);
                    if pick.is_none() {
                        asked.clear();
                    }
                    pick.or_else(|| {
                        order
                            .iter()
                            .copied()
                            .filter(|&k| usable(k))
                            .min_by_key(|&k| st.health[self.proc(src, k)] != ReplicaState::Alive)
                    })
                };
                if let Some(k) = next {
                    asked.push(k);
                    self.post(c, self.proc(src, k), REQ, head(channel, tag, stamp, DATA))?;
                    last_ask = Some(Instant::now());
                    continue;
                }
            }
            let Some(t) = deadline.slice(Duration::from_millis(20)) else {
                return Err(Error::Timeout);
            };
            c.wait(Timeout::After(t).deadline())?;
        }
    }

    pub(super) fn send(&self, c: &Comm<'_>, dest: Rank, tag: u32, data: &[u8]) -> Result<()> {
        self.check(dest)?;
        self.log(c, dest, USER, tag, data.to_vec())?;
        self.pump(c)
    }

    pub(super) fn recv<R>(
        &self,
        c: &Comm<'_>,
        src: Rank,
        tag: u32,
        timeout: Timeout,
        take: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<R> {
        self.check(src)?;
        self.receive(c, src, USER, tag, timeout.deadline(), take)
    }

    pub(super) fn flush(&self, c: &Comm<'_>) -> Result<()> {
        self.pump(c)
    }

    pub(super) fn barrier(&self, c: &Comm<'_>, timeout: Timeout) -> Result<()> {
        let deadline = timeout.deadline();
        let (me, p) = (self.place.rank, self.place.ranks);
        let rounds = (usize::BITS - (p - 1).leading_zeros()) as usize;
        for s in 0..rounds {
            let dist = 1usize << s;
            self.log(c, (me + dist) % p, BARRIER, s as u32, Vec::new())?;
            self.receive(c, (me + p - dist) % p, BARRIER, s as u32, deadline, |_| {
                Ok(())
            })?;
        }
        self.pump(c)
    }

    pub(super) fn allreduce<T: Reducible>(
        &self,
        c: &Comm<'_>,
        input: &[T],
        output: &mut [T],
        op: Op,
        timeout: Timeout,
    ) -> Result<()> {
        let deadline = timeout.deadline();
        let (me, p) = (self.place.rank, self.place.ranks);
        let ty: DataType = T::TYPE;
        let bytes = as_bytes(input);
        let out = as_bytes_mut(output);
        for d in (0..p).filter(|&d| d != me) {
            self.log(c, d, ALLREDUCE, 0, bytes.to_vec())?;
        }
        for src in 0..p {
            let fold = |m: &[u8], out: &mut [u8]| {
                if m.len() != out.len() {
                    return Err(Error::LengthMismatch {
                        input: m.len() / ty.size(),
                        output: out.len() / ty.size(),
                    });
                }
                if src == 0 {
                    out.copy_from_slice(m);
                } else {
                    combine(ty, op, out, m);
                }
                Ok(())
            };
            if src == me {
                fold(bytes, out)?;
            } else {
                self.receive(c, src, ALLREDUCE, 0, deadline, |m| fold(m, out))?;
            }
        }
        self.pump(c)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn alltoallv<T: Pod>(
        &self,
        c: &Comm<'_>,
        send: &[T],
        soff: &[usize],
        send_counts: &[usize],
        recv: &mut [T],
        roff: &[usize],
        recv_counts: &[usize],
        timeout: Timeout,
    ) -> Result<()> {
        let deadline = timeout.deadline();
        let (me, p) = (self.place.rank, self.place.ranks);
        let elem = std::mem::size_of::<T>();
        let sbytes = as_bytes(send);
        let rbytes = as_bytes_mut(recv);
        for i in 1..p {
            let d = (me + i) % p;
            let (a, n) = (soff[d], send_counts[d] * elem);
            self.log(c, d, ALLTOALL, 0, sbytes[a..a + n].to_vec())?;
        }
        let (a, n) = (soff[me], send_counts[me] * elem);
        let (b, m) = (roff[me], recv_counts[me] * elem);
        if n != m {
            return Err(Error::LengthMismatch {
                input: n / elem.max(1),
                output: m / elem.max(1),
            });
        }
        rbytes[b..b + m].copy_from_slice(&sbytes[a..a + n]);
        for s in 1..p {
            let src = (me + p - s) % p;
            let (b, m) = (roff[src], recv_counts[src] * elem);
            self.receive(c, src, ALLTOALL, 0, deadline, |msg| {
                if msg.len() != m {
                    return Err(Error::LengthMismatch {
                        input: msg.len() / elem.max(1),
                        output: m / elem.max(1),
                    });
                }
                rbytes[b..b + m].copy_from_slice(msg);
                Ok(())
            })?;
        }
        self.pump(c)
    }

    /// Says farewell and serves until every other process is done or gone, or none has asked
    /// anything for one timeout.
    pub(super) fn leave(&self, c: &Comm<'_>) {
        for p in (0..c.size).filter(|&p| p != c.me) {
            let _ = self.post(c, p, DONE, head(0, 0, 0, DATA));
        }
        self.st.borrow_mut().last_request = Instant::now();
        loop {
            if self.pump(c).is_err() {
                return;
            }
            let st = self.st.borrow();
            let finished = (0..c.size)
                .filter(|&p| p != c.me)
                .all(|p| st.done[p] || st.health[p] == ReplicaState::Dead);
            // Idle for two replica timeouts, not one: a receiver that waited one timeout on a
            // replica that had died unnoticed asks this one next, and must find it here.
            if finished || st.last_request.elapsed() >= 2 * self.timeout {
                return;
            }
            drop(st);
            if c.wait(Timeout::After(Duration::from_millis(20)).deadline())
                .is_err()
            {
                return;
            }
        }
    }
}

/// Bytes of a request's or answer's head.
const HEAD: usize = 20;

fn head(channel: u32, tag: u32, stamp: u64, status: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEAD);
    h.extend_from_slice(&channel.to_le_bytes());
    h.extend_from_slice(&tag.to_le_bytes());
    h.extend_from_slice(&stamp.to_le_bytes());
    h.extend_from_slice(&status.to_le_bytes());
    h
}

fn parse(m: &[u8]) -> Option<(u32, u32, u64, u32)> {
    let u32at = |i: usize| Some(u32::from_le_bytes(m.get(i..i + 4)?.try_into().ok()?));
    let stamp = u64::from_le_bytes(m.get(8..16)?.try_into().ok()?);
    Some((u32at(0)?, u32at(4)?, stamp, u32at(16)?))
}

/// The replica timeout: `TIERS_REPLICA_TIMEOUT_MS` or [`REPLICA_TIMEOUT`](crate::config::REPLICA_TIMEOUT).
pub(super) fn timeout_from_env() -> Result<Duration> {
    crate::config::replica_timeout()
}

//! Message-driven endpoints (Charm++ chares, CCR ports): objects that receive messages and
//! run a handler on a worker of the node tier.
//!
//! Endpoints are spread round-robin over the workers of all ranks. A message to an endpoint on
//! a worker of the *same process* goes straight into that worker's [`Inbox`], by
//! pointer (the `Vec` moves, nothing is copied), and never touches the progress engine: the
//! lesson of the Charm++ SMP port, whose first version sent every message through the network
//! progress engine. A message to another process goes through the engine (a passive message
//! into the target rank's mailbox); the rank's progress thread (Charm++'s communication thread)
//! sleeps on that mailbox and forwards each message to the target worker's inbox. Idle workers
//! sleep on their inbox, so an oversubscribed machine runs whoever has work. [`Delivery::Engine`] sends every
//! message that way, to measure what the bypass saves.

use crate::config::{self, ENDPOINT_SLEEP, MAX_SEGMENTS};
use crate::error::{Error, Rank, Result};
use crate::timeout::Timeout;
use crate::wait::{Naps, Pace};
use crate::world::{SegId, World};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tiers_node::{Backoff, Full, Inbox, InboxSender, Pool};

/// An endpoint's global id.
pub type EpId = usize;

/// How messages between workers of one process travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Straight into the target worker's inbox (the default).
    Bypass,
    /// Through the progress engine, like messages to other processes.
    Engine,
}

/// An object that receives messages.
pub trait Endpoint: Send {
    /// Called once on its worker before any message.
    fn start(&mut self, ctx: &mut Ctx<'_>) -> Result<()>;
    /// Handles a message from `from`; `data` is owned and may be sent on without a copy.
    fn receive(&mut self, ctx: &mut Ctx<'_>, from: EpId, data: Vec<u8>) -> Result<()>;
}

struct Msg {
    to: u32,
    from: u32,
    data: Vec<u8>,
}

/// Where endpoints live: endpoint `e` on slot `e % (ranks * workers)`.
#[derive(Clone, Copy, Debug)]
struct Layout {
    workers: usize,
    slots: usize,
}

impl Layout {
    fn home(&self, e: EpId) -> (Rank, usize) {
        let s = e % self.slots;
        (s / self.workers, s % self.workers)
    }
}

/// The segment holding the global count of finished endpoints (at rank 0).
const DONE_SEG: SegId = SegId(MAX_SEGMENTS - 1);
const HEADER: usize = 8;
/// A message that only wakes its worker.
const WAKE: u32 = u32::MAX;

struct Shared<'w> {
    world: &'w World,
    layout: Layout,
    delivery: Delivery,
    total: usize,
    /// Per worker of this rank: its loop has returned, so its inbox is no longer drained.
    stopped: Vec<AtomicBool>,
}

impl Shared<'_> {
    fn finished(&self) -> Result<bool> {
        Ok(self.world.atomic_fetch_add(DONE_SEG, 0, 0, 0)? >= self.total as u64)
    }
}

/// What a handler can do: send messages, declare itself finished.
pub struct Ctx<'a> {
    sh: &'a Shared<'a>,
    worker: usize,
    senders: &'a mut [InboxSender<Msg>],
    me: EpId,
}

/// Pushes into an inbox and wakes its worker if it sleeps. A full inbox is retried while its
/// worker runs; once the worker has stopped (`stopped`) nobody will drain it, and the message
/// comes back as `Err` instead of being retried forever.
fn push(
    s: &mut InboxSender<Msg>,
    mut m: Msg,
    stopped: &AtomicBool,
) -> std::result::Result<(), Msg> {
    // The consumer drains its inbox between messages it handles: spin a little, then yield
    // to it (never sleep: a full inbox empties within a handler's time).
    let mut backoff = Backoff::new().never_sleep();
    loop {
        match s.push_notify(m) {
            Ok(()) => return Ok(()),
            Err(Full(back)) => {
                if stopped.load(Ordering::Acquire) {
                    return Err(back);
                }
                m = back;
                backoff.snooze();
            }
        }
    }
}

impl Ctx<'_> {
    /// This endpoint.
    pub fn id(&self) -> EpId {
        self.me
    }

    /// Number of endpoints.
    pub fn total(&self) -> usize {
        self.sh.total
    }

    /// The worker (of this rank) running the handler.
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// Sends `data` to endpoint `to`: by pointer into the target worker's inbox when it is in
    /// this process, through the engine otherwise.
    pub fn send(&mut self, to: EpId, data: Vec<u8>) -> Result<()> {
        if to >= self.sh.total {
            return Err(Error::NoSuchRank {
                rank: to,
                size: self.sh.total,
            });
        }
        let (rank, worker) = self.sh.layout.home(to);
        if rank == self.sh.world.rank() && self.sh.delivery == Delivery::Bypass {
            let msg = Msg {
                to: to as u32,
                from: self.me as u32,
                data,
            };
            return push(&mut self.senders[worker], msg, &self.sh.stopped[worker])
                .map_err(|_| Error::EndpointStopped { endpoint: to });
        }
        let mut out = Vec::with_capacity(HEADER + data.len());
        out.extend_from_slice(&(to as u32).to_le_bytes());
        out.extend_from_slice(&(self.me as u32).to_le_bytes());
        out.extend_from_slice(&data);
        // The target rank's progress thread always drains its mailbox, so waiting is safe.
        self.sh.world.passive_send(rank, &out, Timeout::Block)
    }

    /// Declares this endpoint finished; the run ends when all are.
    pub fn finish(&mut self) -> Result<()> {
        let before = self.sh.world.atomic_fetch_add(DONE_SEG, 0, 0, 1)?;
        if before + 1 == self.sh.total as u64 {
            // Wake the sleeping workers of this rank; the others notice within a sleep slice.
            for (s, stopped) in self.senders.iter_mut().zip(&self.sh.stopped) {
                // A stopped worker needs no wake-up.
                let _ = push(
                    s,
                    Msg {
                        to: WAKE,
                        from: 0,
                        data: Vec::new(),
                    },
                    stopped,
                );
            }
        }
        Ok(())
    }
}

/// The progress engine of a rank: sleeps on the rank's mailbox (woken by senders) and moves
/// every message into the inbox of its target's worker, until `stop`.
fn progress_thread(
    sh: &Shared<'_>,
    mut senders: Vec<InboxSender<Msg>>,
    stop: &AtomicBool,
) -> Result<()> {
    let mut buf = vec![0u8; sh.world.passive_max()];
    while !stop.load(Ordering::Acquire) {
        match sh
            .world
            .passive_receive(&mut buf, Timeout::After(ENDPOINT_SLEEP))
        {
            Ok((_, len)) if len >= HEADER => {
                let to = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
                let from = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
                let (_, worker) = sh.layout.home(to as usize);
                let data = buf[HEADER..len].to_vec();
                let m = Msg { to, from, data };
                // A stopped worker with a full inbox: an error, unless the run is over (a
                // message still in flight then has no one left to read it anyway).
                if push(&mut senders[worker], m, &sh.stopped[worker]).is_err() && !sh.finished()? {
                    return Err(Error::EndpointStopped {
                        endpoint: to as usize,
                    });
                }
            }
            Ok(_) | Err(Error::Timeout) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

type Parts = (Inbox<Msg>, Vec<InboxSender<Msg>>);

/// Runs `total` endpoints made by `make` over the workers of `pool` on every rank of `world`
/// (collective), until every endpoint has called [`Ctx::finish`].
pub fn run<E: Endpoint>(
    world: &World,
    pool: &Pool,
    total: usize,
    delivery: Delivery,
    make: impl Fn(EpId) -> E + Sync,
) -> Result<()> {
    let workers = pool.threads();
    let layout = Layout {
        workers,
        slots: world.size() * workers,
    };
    let _done = world.segment(DONE_SEG, 8)?;
    let sh = Shared {
        world,
        layout,
        delivery,
        total,
        stopped: (0..workers).map(|_| AtomicBool::new(false)).collect(),
    };
    let inboxes: Vec<Inbox<Msg>> = (0..workers)
        .map(|_| Inbox::with_max_producers(4096, workers + 1))
        .collect();
    let progress_senders: Vec<InboxSender<Msg>> = inboxes.iter().map(|q| q.sender()).collect();
    let senders: Vec<Vec<InboxSender<Msg>>> = (0..workers)
        .map(|_| inboxes.iter().map(|q| q.sender()).collect())
        .collect();
    let parts: Vec<Mutex<Option<Parts>>> = inboxes
        .into_iter()
        .zip(senders)
        .map(|p| Mutex::new(Some(p)))
        .collect();
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    let fail = |e: Error| {
        let mut f = failure.lock().unwrap_or_else(|e| e.into_inner());
        f.get_or_insert(e);
        // Let everyone stop: count the rest as finished.
        let _ = world.atomic_fetch_add(DONE_SEG, 0, 0, total as u64);
    };
    let stop = AtomicBool::new(false);
    // The progress thread is only needed when messages may come through the engine.
    let engine_used = world.size() > 1 || delivery == Delivery::Engine;
    std::thread::scope(|s| {
        if engine_used {
            let (sh, stop, fail) = (&sh, &stop, &fail);
            s.spawn(move || {
                if let Err(e) = progress_thread(sh, progress_senders, stop) {
                    fail(e);
                }
            });
        }
        pool.spmd(|w| {
            let i = w.index();
            let (mut q, mut senders) = parts[i]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .expect("one worker per part");
            let r = worker_loop(&sh, i, &mut q, &mut senders, &make);
            sh.stopped[i].store(true, Ordering::Release);
            if let Err(e) = r {
                fail(e);
            }
        });
        stop.store(true, Ordering::Release);
    });
    if let Some(e) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    world.segment_delete(DONE_SEG, Timeout::Block)
}

fn worker_loop<E: Endpoint>(
    sh: &Shared<'_>,
    worker: usize,
    q: &mut Inbox<Msg>,
    senders: &mut [InboxSender<Msg>],
    make: &(impl Fn(EpId) -> E + Sync),
) -> Result<()> {
    let rank = sh.world.rank();
    let slot = rank * sh.layout.workers + worker;
    let ids: Vec<EpId> = (slot..sh.total).step_by(sh.layout.slots).collect();
    let mut eps: Vec<E> = ids.iter().map(|&e| make(e)).collect();
    for (k, ep) in eps.iter_mut().enumerate() {
        let mut ctx = Ctx {
            sh,
            worker,
            senders,
            me: ids[k],
        };
        ep.start(&mut ctx)?;
    }
    let mut batch: Vec<Msg> = Vec::with_capacity(64);
    loop {
        q.drain(64, |m| batch.push(m));
        if batch.is_empty() {
            if sh.finished()? {
                return Ok(());
            }
            // Poll the inbox a little, then sleep on it.
            let mut pace = Pace::new(config::SPIN, Duration::ZERO, Naps::fixed(ENDPOINT_SLEEP));
            while q.is_empty() && pace.busy() {}
            if q.is_empty() {
                if let Some(m) = q.pop_timeout(ENDPOINT_SLEEP) {
                    batch.push(m);
                }
            }
        }
        for m in batch.drain(..) {
            if m.to == WAKE {
                continue;
            }
            let k = m.to as usize / sh.layout.slots;
            let mut ctx = Ctx {
                sh,
                worker,
                senders,
                me: m.to as usize,
            };
            eps[k].receive(&mut ctx, m.from as usize, m.data)?;
        }
    }
}

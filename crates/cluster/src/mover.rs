//! The Mover: a persistent, reusable set of transfers between regions of segments (KeLP's
//! Mover, \[Baden2001\]), built once, then [`start`](Mover::start) and [`wait`](Mover::wait)
//! each iteration. [`Halo`] builds the pair of Movers of a halo exchange from a
//! [`Decomp`]; [`Proxy`] runs any exchange on a thread of its own while
//! the caller's threads compute.
//!
//! A Mover uses only the public API (`write_notify`, `notify_waitsome`, `notify_reset`,
//! `Queue::wait`), so it works on every engine.
//!
//! ```
//! use tiers_cluster::mover::Mover;
//! use tiers_cluster::{SegId, Timeout};
//!
//! let out = tiers_cluster::run_local(2, |w| {
//!     let seg = w.segment(SegId(0), 16).unwrap();
//!     let peer = 1 - w.rank();
//!     // Every iteration: my bytes 0..8 to the peer's 8..16, with notification 0.
//!     let mut m = Mover::new(w, 0);
//!     m.send(SegId(0).at(0), SegId(0).on(peer, 8), 8, 0).expect(SegId(0), 0);
//!     let mut got = Vec::new();
//!     for it in 0..3u64 {
//!         seg.set::<u64>(0, 10 * it + w.rank() as u64).unwrap();
//!         m.start().unwrap();
//!         m.wait(Timeout::Block).unwrap();
//!         got.push(seg.get::<u64>(1).unwrap());
//!         w.barrier(Timeout::Block).unwrap(); // the peer has read before I write again
//!     }
//!     got
//! }).unwrap();
//! assert_eq!(out, vec![vec![1, 11, 21], vec![0, 10, 20]]);
//! ```

use crate::addr::{Local, Notification, Remote, SegId};
use crate::collective::Pod;
use crate::decomp::{Box3, Decomp, Face};
use crate::error::{Error, Result};
use crate::segment::Segment;
use crate::timeout::Timeout;
use crate::world::World;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

/// One transfer of a Mover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    /// From this rank.
    pub src: Local,
    /// To a region of a peer's segment.
    pub dst: Remote,
    /// Bytes.
    pub len: usize,
    /// The notification set at the target's segment `dst.seg` after the data.
    pub note: usize,
}

/// A persistent set of notified writes this rank posts, and of notifications it expects, per
/// iteration.
#[derive(Debug)]
pub struct Mover<'w> {
    world: &'w World,
    queue: usize,
    sends: Vec<Message>,
    expects: Vec<(SegId, usize)>,
    /// The expected notifications of the exchange under way have all come (and were reset):
    /// a `wait` that timed out after them waits only for the writes' completion when called
    /// again.
    noted: AtomicBool,
}

impl<'w> Mover<'w> {
    /// An empty Mover posting on queue `queue`.
    pub fn new(world: &'w World, queue: usize) -> Mover<'w> {
        Mover {
            world,
            queue,
            sends: Vec::new(),
            expects: Vec::new(),
            noted: AtomicBool::new(false),
        }
    }

    /// Adds a write of `len` bytes from `src` to `dst`, then notification `note` there.
    pub fn send(&mut self, src: Local, dst: Remote, len: usize, note: usize) -> &mut Self {
        self.sends.push(Message {
            src,
            dst,
            len,
            note,
        });
        self
    }

    /// Adds a notification `note` of this rank's segment `seg` that [`Mover::wait`] waits for.
    pub fn expect(&mut self, seg: SegId, note: usize) -> &mut Self {
        self.expects.push((seg, note));
        self
    }

    /// The writes it posts.
    pub fn sends(&self) -> &[Message] {
        &self.sends
    }

    /// The notifications it waits for.
    pub fn expects(&self) -> &[(SegId, usize)] {
        &self.expects
    }

    /// Posts every write (each with its notification, value 1).
    ///
    /// # Errors
    ///
    /// As [`Queue::write_notify`](crate::Queue::write_notify); a post that fails leaves the
    /// ones before it posted.
    pub fn start(&self) -> Result<()> {
        self.noted.store(false, Ordering::Relaxed);
        let q = self.world.queue(self.queue)?;
        let note = |id| Notification { id, value: 1 };
        for m in &self.sends {
            if m.len == 0 {
                q.notify(m.dst.rank, m.dst.seg, note(m.note))?;
            } else {
                q.write_notify(m.src, m.dst, m.len, note(m.note))?;
            }
        }
        Ok(())
    }

    /// Waits for every expected notification (then resets it: the data it announces is
    /// here) and for this rank's writes to complete locally (their sources may be reused):
    /// [`Queue::wait_local`](crate::Queue::wait_local). Remote completion is what the
    /// notifications already tell each target; asking for it at the origin as well would
    /// cost, across hosts over MPI, a round trip that a target answers only at its next call
    /// into tiers (after its interior, in an overlapped sweep).
    ///
    /// # Errors
    ///
    /// As [`World::notify_waitsome`] and [`Queue::wait_local`](crate::Queue::wait_local).
    ///
    /// The timeout bounds the whole call. A call that timed out can be called again: the
    /// notifications are reset only once all of them are here, so a repeat waits for the
    /// same ones (and, when only the writes' completion was left, for that alone).
    pub fn wait(&self, timeout: Timeout) -> Result<()> {
        let deadline = timeout.deadline();
        if !self.noted.load(Ordering::Relaxed) {
            for &(seg, id) in &self.expects {
                let end = id.checked_add(1).ok_or(Error::NoSuchNotification {
                    id,
                    count: crate::NOTIFICATIONS,
                })?;
                self.world.notify_waitsome(seg, id..end, deadline.left())?;
            }
            for &(seg, id) in &self.expects {
                self.world.notify_reset(seg, id)?;
            }
            self.noted.store(true, Ordering::Relaxed);
        }
        self.world.queue(self.queue)?.wait_local(deadline.left())?;
        self.noted.store(false, Ordering::Relaxed);
        Ok(())
    }
}

const ALIGN: usize = 64;

fn align(n: usize) -> Option<usize> {
    n.div_ceil(ALIGN).checked_mul(ALIGN)
}

/// Where a rank's halo buffers lie in its segment: one send buffer per face, and two receive
/// buffers per face (exchanges alternate between them, so that a neighbour one exchange ahead
/// never overwrites data not yet unpacked).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Layout {
    send: [usize; 6],
    recv: [[usize; 6]; 2],
    bytes: usize,
}

/// The layout of `rank`'s buffers; `None` when they would be more bytes than `usize` holds.
fn layout_of(d: &Decomp, rank: usize, elem: usize) -> Option<Layout> {
    let faces = d.faces(rank);
    let mut l = Layout {
        send: [0; 6],
        recv: [[0; 6]; 2],
        bytes: 0,
    };
    let bytes = |b: &Box3| align(b.checked_len()?.checked_mul(elem)?);
    let mut off = 0usize;
    for f in &faces {
        l.send[f.index()] = off;
        off = off.checked_add(bytes(&f.send)?)?;
    }
    for p in 0..2 {
        for f in &faces {
            l.recv[p][f.index()] = off;
            off = off.checked_add(bytes(&f.recv)?)?;
        }
    }
    l.bytes = off.max(ALIGN);
    Some(l)
}

/// A halo exchange of a block decomposition: for every face with a neighbour, this rank's
/// boundary slab is packed into a send buffer of segment `seg`, written with a notification
/// into the neighbour's receive buffer, and unpacked there into its ghost region. The packing
/// and unpacking are the caller's (closures given a face and its buffer), so any grid layout
/// and element type fits.
///
/// Notifications `note_base .. note_base + 12` of `seg` are its own.
pub struct Halo<'w, T: Pod> {
    seg: Segment<'w>,
    faces: Vec<Face>,
    layout: Layout,
    movers: [Mover<'w>; 2],
    parity: usize,
    _t: std::marker::PhantomData<T>,
}

impl<'w, T: Pod> Halo<'w, T> {
    /// Collective: creates segment `seg` for the buffers of `decomp`'s faces at every rank,
    /// and the two Movers (queue `queue`) that alternate between its receive buffers.
    ///
    /// # Errors
    ///
    /// [`Error::Setup`] when `decomp` is not over the world's ranks, when its ghost regions
    /// are wider than a neighbour's block ([`Decomp::ghosts_fit`]), when the buffers would
    /// be more bytes than memory can index, when the ranks disagree on the decomposition,
    /// the element size, `seg`, `queue` or `note_base`, or when another rank refused its
    /// arguments; [`Error::NoSuchNotification`] when the notifications `note_base ..
    /// note_base + 12` are not all ids of a segment; and as [`World::segment`]. Every check
    /// is made, and its verdict shared by one allreduce, before the segment is made, so
    /// every rank returns.
    pub fn new(
        world: &'w World,
        decomp: &Decomp,
        seg: SegId,
        queue: usize,
        note_base: usize,
    ) -> Result<Halo<'w, T>> {
        let me = world.rank();
        let elem = std::mem::size_of::<T>();
        // Every check first, then one allreduce that tells every rank whether every rank
        // passed them and was given the same halo: a rank that returned alone would leave
        // the others waiting in the collectives that follow.
        let local = check_halo(world, decomp, elem, note_base);
        agree(world, decomp, elem, seg, queue, note_base, local.is_err())?;
        let (layout, peers) = local?;
        let segment = world.segment(seg, layout.bytes)?;
        let faces = decomp.faces(me);
        let mut movers = [Mover::new(world, queue), Mover::new(world, queue)];
        for (p, m) in movers.iter_mut().enumerate() {
            for (f, theirs) in faces.iter().zip(&peers) {
                m.send(
                    seg.at(layout.send[f.index()]),
                    seg.on(f.peer, theirs.recv[p][f.opposite()]),
                    f.send.len() * elem,
                    note_base + 6 * p + f.opposite(),
                );
                m.expect(seg, note_base + 6 * p + f.index());
            }
        }
        Ok(Halo {
            seg: segment,
            faces,
            layout,
            movers,
            parity: 0,
            _t: std::marker::PhantomData,
        })
    }

    /// The faces this rank exchanges.
    pub fn faces(&self) -> &[Face] {
        &self.faces
    }

    /// The Mover of the next exchange.
    pub fn mover(&self) -> &Mover<'w> {
        &self.movers[self.parity]
    }

    fn buf(&self, off: usize, n: usize) -> *mut T {
        debug_assert!(off + n * std::mem::size_of::<T>() <= self.seg.len());
        // SAFETY: in bounds (the layout), aligned (64-byte offsets of a page-aligned mapping).
        unsafe { self.seg.as_ptr().add(off).cast::<T>() }
    }

    /// Packs every face (`pack(face, buffer)` fills the buffer with the face's `send` box,
    /// in the order of [`for_each`]) and posts the writes.
    ///
    /// # Errors
    ///
    /// As [`Mover::start`].
    pub fn start(&self, mut pack: impl FnMut(&Face, &mut [T])) -> Result<()> {
        for f in &self.faces {
            let n = f.send.len();
            // SAFETY: the send buffers are written by this rank only, and not while a write
            // from them is in flight (wait completes them before the next start).
            let b = unsafe {
                std::slice::from_raw_parts_mut(self.buf(self.layout.send[f.index()], n), n)
            };
            pack(f, b);
        }
        self.movers[self.parity].start()
    }

    /// Waits for the exchange and unpacks every face (`unpack(face, buffer)` copies the buffer
    /// into the face's `recv` box), then turns to the other receive buffers.
    ///
    /// # Errors
    ///
    /// As [`Mover::wait`].
    pub fn wait(&mut self, timeout: Timeout, mut unpack: impl FnMut(&Face, &[T])) -> Result<()> {
        self.movers[self.parity].wait(timeout)?;
        for f in &self.faces {
            let n = f.recv.len();
            // SAFETY: the notification said the data is here; the neighbour writes this
            // buffer again only after this rank's next start.
            let b = unsafe {
                std::slice::from_raw_parts(self.buf(self.layout.recv[self.parity][f.index()], n), n)
            };
            unpack(f, b);
        }
        self.parity ^= 1;
        Ok(())
    }
}

/// This rank's checks of a halo's arguments; its buffers' layout and its neighbours' (in
/// the order of its faces).
fn check_halo(
    world: &World,
    decomp: &Decomp,
    elem: usize,
    note_base: usize,
) -> Result<(Layout, Vec<Layout>)> {
    if decomp.ranks() != world.size() {
        return Err(Error::Setup(format!(
            "a halo of a decomposition over {} ranks in a world of {}",
            decomp.ranks(),
            world.size()
        )));
    }
    if !decomp.ghosts_fit() {
        return Err(Error::Setup(format!(
            "a halo whose ghost regions ({} wide) reach past a neighbour's block ({:?} points over {:?} ranks)",
            decomp.ghost(),
            decomp.global().hi,
            decomp.procs()
        )));
    }
    if note_base
        .checked_add(12)
        .is_none_or(|end| end > crate::NOTIFICATIONS)
    {
        return Err(Error::NoSuchNotification {
            id: note_base.saturating_add(11),
            count: crate::NOTIFICATIONS,
        });
    }
    let too_big = || {
        Error::Setup(format!(
            "a halo of {:?} points with ghosts {} wide: its buffers would be more bytes than memory can index",
            decomp.global().hi,
            decomp.ghost()
        ))
    };
    let me = world.rank();
    let layout = layout_of(decomp, me, elem).ok_or_else(too_big)?;
    let peers = decomp
        .faces(me)
        .iter()
        .map(|f| layout_of(decomp, f.peer, elem).ok_or_else(too_big))
        .collect::<Result<Vec<_>>>()?;
    Ok((layout, peers))
}

/// Checks that every rank passed its checks (`failed`: this one did not) and builds the
/// same halo: one allreduce of a fingerprint of the arguments, its complement (the maximum
/// of both is a fingerprint and its complement only when every rank has the same) and the
/// failures.
fn agree(
    world: &World,
    decomp: &Decomp,
    elem: usize,
    seg: SegId,
    queue: usize,
    note_base: usize,
    failed: bool,
) -> Result<()> {
    // A fingerprint of the arguments' words.
    let words = decomp.global().hi.into_iter().chain(decomp.procs()).chain([
        decomp.ghost(),
        elem,
        seg.0 as usize,
        queue,
        note_base,
    ]);
    let mut f = crate::Fingerprint::new();
    for w in words {
        std::hash::Hasher::write(&mut f, &(w as u64).to_le_bytes());
    }
    let h = std::hash::Hasher::finish(&f);
    let mut out = [0u64; 3];
    world.allreduce(
        &[h, !h, u64::from(failed)],
        &mut out,
        crate::Op::Max,
        Timeout::Block,
    )?;
    if out[2] != 0 && !failed {
        return Err(Error::Setup(
            "another rank refused the halo's arguments (its error names why)".into(),
        ));
    }
    if failed {
        // This rank's own error says why (the caller returns it).
        return Ok(());
    }
    if out[0] != !out[1] {
        return Err(Error::Setup(format!(
            "the ranks build different halos (decomposition, element size, segment, queue or notifications differ): this rank's is {:?} points over {:?} ranks, ghosts {}, {elem}-byte elements, segment {}, queue {queue}, notifications from {note_base}",
            decomp.global().hi,
            decomp.procs(),
            decomp.ghost(),
            seg.0
        )));
    }
    Ok(())
}

/// Calls `f(point, index)` for every point of `b` in memory order (axis 2 fastest), where
/// `index` counts from 0: the order of a packed buffer.
pub fn for_each(b: &Box3, mut f: impl FnMut([usize; 3], usize)) {
    let mut n = 0;
    for i in b.lo[0]..b.hi[0] {
        for j in b.lo[1]..b.hi[1] {
            for k in b.lo[2]..b.hi[2] {
                f([i, j, k], n);
                n += 1;
            }
        }
    }
}

/// A thread of its own that runs an exchange (or anything) on request, so that the threads
/// that asked can compute meanwhile: KeLP's proxy, which displaces one compute thread.
///
/// ```
/// use tiers_cluster::mover::Proxy;
/// let mut n = 0;
/// std::thread::scope(|s| {
///     let p = Proxy::spawn(s, || {
///         n += 1;
///         Ok(())
///     });
///     for _ in 0..3 {
///         p.start();
///         // ... compute here ...
///         p.wait().unwrap();
///     }
/// });
/// assert_eq!(n, 3);
/// ```
pub struct Proxy {
    go: mpsc::Sender<()>,
    done: mpsc::Receiver<Result<()>>,
    /// Jobs started and not yet waited for.
    started: std::cell::Cell<usize>,
}

impl Proxy {
    /// Spawns the thread on scope `s`; it runs `job` once per [`Proxy::start`] and ends when
    /// the Proxy is dropped.
    pub fn spawn<'scope, 'env>(
        s: &'scope std::thread::Scope<'scope, 'env>,
        mut job: impl FnMut() -> Result<()> + Send + 'scope,
    ) -> Proxy {
        let (go, go_rx) = mpsc::channel::<()>();
        let (done_tx, done) = mpsc::channel();
        s.spawn(move || {
            while go_rx.recv().is_ok() {
                if done_tx.send(job()).is_err() {
                    break;
                }
            }
        });
        Proxy {
            go,
            done,
            started: std::cell::Cell::new(0),
        }
    }

    /// Asks the thread to run the job once.
    pub fn start(&self) {
        // The thread lives as long as the Proxy, unless the job panicked; wait reports that.
        let _ = self.go.send(());
        self.started.set(self.started.get() + 1);
    }

    /// Waits for the oldest job started and not yet waited for, and returns its result.
    ///
    /// # Errors
    ///
    /// [`Error::Setup`] when no job was started since the last wait (it would wait forever).
    ///
    /// # Panics
    ///
    /// When the job panicked (the scope re-raises its panic).
    pub fn wait(&self) -> Result<()> {
        let n = self.started.get();
        if n == 0 {
            return Err(Error::Setup(
                "a proxy's wait without a start: no job to wait for".into(),
            ));
        }
        self.started.set(n - 1);
        self.done.recv().expect("the proxy's job panicked")
    }
}

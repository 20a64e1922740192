//! `tiers redblack`: RedBlack3D (KeLP's benchmark, \[Baden2001\]) across the ranks of a job,
//! one block per rank (the cluster tier's `Decomp`), node-tier threads on slabs of it, halos
//! exchanged by the cluster tier's `Halo`/`Mover`. Variants, named as \[Baden2001\]'s Table 1
//! (`p` = `--threads`):
//!
//! - `hand`: one thread per rank, halos by plain notified writes (`write_notify` of each
//!   packed face, `notify_waitsome` for each expected one), no Mover: hand-coded message
//!   passing; under mpirun with the `mpi` feature, MPI's own `MPI_Isend`/`MPI_Irecv` of each
//!   face and `MPI_Waitall` (\[Baden2001\]'s hand-coded MPI);
//! - `mt1`: one thread per rank through the Mover, exchange then compute;
//! - `mtp`: `p` threads, exchange then compute (no overlap);
//! - `mtp-olap`: `p` threads; thread 0 starts the exchange, every thread computes the
//!   interior, thread 0 waits, then every thread computes the annulus;
//! - `mtp-olap-xtra`: `p − 1` compute threads (at least 1) plus a proxy thread that starts
//!   and waits for the exchange while they compute the interior (KeLP's extra thread);
//! - `irr`: `mtp-olap-xtra` with the compute threads' slabs in the ratio `--irr` (IRR(m:n),
//!   default 2:1:…:1) for threads that see different memory bandwidth;
//! - `limit`: computation only, no exchange (a wrong answer across ranks; the time overlap
//!   can at best reach).
//!
//! Prints per variant Total / Wait / Comp in ms per iteration, the maximum over ranks (the
//! layout of Tables 2–3), and the residual and error of the result.

use clap::Args;
use std::time::Instant;
use tiers_apps::redblack::{Block, Color};
use tiers_cluster::decomp::{thread_split, Box3, Decomp, Face};
use tiers_cluster::mover::{for_each, Halo, Proxy};
use tiers_cluster::{Notification, Op, SegId, Segment, Timeout, World};
use tiers_node::{AdaptiveBarrier, Barrier};

/// How communication meets computation (\[Baden2001\]'s Table 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Variant {
    /// One thread, halos by plain notified writes, no Mover.
    Hand,
    /// One thread, exchange through the Mover, then compute.
    Mt1,
    /// `p` threads, exchange then compute.
    Mtp,
    /// `p` threads, thread 0 overlaps the exchange with the interior.
    MtpOlap,
    /// `p − 1` compute threads plus a proxy thread that runs the exchange.
    MtpOlapXtra,
    /// As `mtp-olap-xtra` with an irregular split of the block over the compute threads.
    Irr,
    /// Compute only, no exchange (the bound overlap approaches).
    Limit,
}

/// What a variant does at each half-sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Exchange, then compute.
    Plain,
    /// Thread 0 starts the exchange, all compute the interior, thread 0 waits.
    Caller,
    /// A proxy thread beside the compute threads runs the exchange.
    Proxy,
    /// No exchange.
    Limit,
}

impl Variant {
    /// Every variant, in Table 1's order.
    pub const ALL: [Variant; 7] = [
        Variant::Hand,
        Variant::Mt1,
        Variant::Mtp,
        Variant::MtpOlap,
        Variant::MtpOlapXtra,
        Variant::Irr,
        Variant::Limit,
    ];

    /// Its name in tables (as on the command line).
    pub fn name(self) -> &'static str {
        match self {
            Variant::Hand => "hand",
            Variant::Mt1 => "mt1",
            Variant::Mtp => "mtp",
            Variant::MtpOlap => "mtp-olap",
            Variant::MtpOlapXtra => "mtp-olap-xtra",
            Variant::Irr => "irr",
            Variant::Limit => "limit",
        }
    }

    fn mode(self) -> Mode {
        match self {
            Variant::Hand | Variant::Mt1 | Variant::Mtp => Mode::Plain,
            Variant::MtpOlap => Mode::Caller,
            Variant::MtpOlapXtra | Variant::Irr => Mode::Proxy,
            Variant::Limit => Mode::Limit,
        }
    }

    /// The compute threads of the variant when the rank has `threads` threads: one for the
    /// single-tier variants, one less for the proxy's (at least one).
    pub fn compute_threads(self, threads: usize) -> usize {
        match self {
            Variant::Hand | Variant::Mt1 => 1,
            Variant::MtpOlapXtra | Variant::Irr => threads.saturating_sub(1).max(1),
            _ => threads.max(1),
        }
    }

    /// The split of the block over the compute threads: `irr`'s ratio for `irr` (default
    /// 2:1:…:1), even otherwise.
    fn weights(self, threads: usize, irr: &[usize]) -> Vec<usize> {
        let nt = self.compute_threads(threads);
        match self {
            Variant::Irr if irr.len() == nt => irr.to_vec(),
            Variant::Irr => (0..nt).map(|t| if t == 0 { 2 } else { 1 }).collect(),
            _ => vec![1; nt],
        }
    }
}

/// `tiers redblack` arguments.
#[derive(Args, Debug)]
pub struct RedBlackArgs {
    /// Mesh points on each axis (N³ in all).
    #[arg(long, default_value_t = 64)]
    pub n: usize,
    /// Iterations (each a red and a black half-sweep, each after a halo exchange).
    #[arg(long, default_value_t = 20)]
    pub iters: usize,
    /// Threads per rank (`p`): `hand` and `mt1` use one, `mtp` and `mtp-olap` all, and
    /// `mtp-olap-xtra` and `irr` `p − 1` for computing plus the proxy.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Variants to run, in order (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub variant: Vec<Variant>,
    /// `irr`'s split of each rank's block over its compute threads (`p − 1` weights), e.g.
    /// `3:1` with `--threads 3` (IRR(m:n)); default 2:1:…:1.
    #[arg(long)]
    pub irr: Option<String>,
    /// Also print, per variant, a digest (FNV-1a) of the whole mesh's bits after the last
    /// iteration: equal digests, equal meshes (comparable between variants and thread counts
    /// at the same number of ranks).
    #[arg(long)]
    pub digest: bool,
}

/// FNV-1a over the bits of `vals`, continuing from `h`.
fn fnv(mut h: u64, vals: impl IntoIterator<Item = u64>) -> u64 {
    for v in vals {
        for b in v.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Collective: a digest of the whole mesh, each rank's owned values hashed in place, the
/// ranks' hashes gathered in rank order (an allreduce of one slot per rank) and hashed again.
fn mesh_digest(w: &World, b: &Block) -> tiers_cluster::Result<u64> {
    const BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mine = vec![0u64; w.size()];
    mine[w.rank()] = fnv(BASIS, b.owned_values().iter().map(|v| v.to_bits()));
    let mut all = vec![0u64; w.size()];
    w.allreduce(&mine, &mut all, Op::Sum, Timeout::Block)?;
    Ok(fnv(BASIS, all))
}

/// What one run of a variant is asked.
#[derive(Clone, Debug)]
pub struct Params {
    /// Mesh points per axis.
    pub n: usize,
    /// Iterations.
    pub iters: usize,
    /// Compute threads per rank.
    pub threads: usize,
    /// The variant.
    pub variant: Variant,
    /// `irr`'s split of the block over its compute threads (`threads − 1` weights; another
    /// count means the default 2:1:…:1). The other variants split evenly.
    pub irr: Vec<usize>,
    /// Report progress on standard error (rank 0's first thread; long runs only).
    pub progress: bool,
}

/// The `hand` variant's exchange: each packed face goes out as one `write_notify` into the
/// neighbour's receive slot for that face, and each expected face is waited for with
/// `notify_waitsome`; no Mover. Receive slots alternate between two parities (as the Mover's
/// do): a neighbour writes parity `p` again only after it has received this rank's next
/// exchange, which this rank sends only after it has unpacked parity `p`.
struct HandHalo<'w> {
    w: &'w World,
    id: SegId,
    seg: Segment<'w>,
    faces: Vec<Face>,
    /// Bytes of one face slot: the largest face of any rank, in cache lines.
    slot: usize,
    parity: usize,
}

impl<'w> HandHalo<'w> {
    /// Collective: the segment of 6 send and 2 × 6 receive slots.
    fn new(w: &'w World, d: &Decomp, id: SegId) -> tiers_cluster::Result<HandHalo<'w>> {
        let elem = std::mem::size_of::<f64>();
        let largest = (0..d.ranks())
            .flat_map(|r| d.faces(r))
            .map(|f| f.send.len().max(f.recv.len()) * elem)
            .max()
            .unwrap_or(0);
        let slot = largest.div_ceil(64).max(1) * 64;
        let seg = w.segment(id, 18 * slot)?;
        Ok(HandHalo {
            w,
            id,
            seg,
            faces: d.faces(w.rank()),
            slot,
            parity: 0,
        })
    }

    fn send_at(&self, face: usize) -> usize {
        face * self.slot
    }

    fn recv_at(&self, parity: usize, face: usize) -> usize {
        (6 + 6 * parity + face) * self.slot
    }

    fn start(&self, mut pack: impl FnMut(&Face, &mut [f64])) -> tiers_cluster::Result<()> {
        let q = self.w.queue(0)?;
        for f in &self.faces {
            let n = f.send.len();
            let off = self.send_at(f.index());
            // SAFETY: the slot holds `n` values (sized for the largest face), is 64-byte
            // aligned in a page-aligned mapping, and only this rank writes it, never while a
            // write from it is in flight (`wait` completes the queue before the next start).
            let b = unsafe {
                std::slice::from_raw_parts_mut(self.seg.as_ptr().add(off).cast::<f64>(), n)
            };
            pack(f, b);
            let note = Notification {
                id: 6 * self.parity + f.opposite(),
                value: 1,
            };
            let dst = self.id.on(f.peer, self.recv_at(self.parity, f.opposite()));
            q.write_notify(self.id.at(off), dst, n * 8, note)?;
        }
        Ok(())
    }

    fn wait(
        &mut self,
        timeout: Timeout,
        mut unpack: impl FnMut(&Face, &[f64]),
    ) -> tiers_cluster::Result<()> {
        self.w.queue(0)?.wait(timeout)?;
        for f in &self.faces {
            let id = 6 * self.parity + f.index();
            self.w.notify_waitsome(self.id, id..id + 1, timeout)?;
            self.w.notify_reset(self.id, id)?;
            let n = f.recv.len();
            let off = self.recv_at(self.parity, f.index());
            // SAFETY: in bounds and aligned as above; the notification says the neighbour's
            // data is here, and it writes this slot again only after this rank's next start.
            let b =
                unsafe { std::slice::from_raw_parts(self.seg.as_ptr().add(off).cast::<f64>(), n) };
            unpack(f, b);
        }
        self.parity ^= 1;
        Ok(())
    }
}

/// The `hand` variant's exchange under mpirun: each face packed into a buffer of its own,
/// then `MPI_Irecv` of every expected face (tag: this rank's face index), `MPI_Isend` of every
/// packed one (tag: the neighbour's face index) and `MPI_Waitall`, all in `wait`: \[Baden2001\]'s
/// hand-coded MPI, with no tiers between the program and MPI.
#[cfg(feature = "mpi")]
struct MpiHalo {
    mpi: tiers_cluster::engine::mpi::baseline::Mpi,
    faces: Vec<Face>,
    /// Packed faces, one per face (a lock only because `start` takes `&self`).
    send: std::sync::Mutex<Vec<Vec<f64>>>,
    recv: Vec<Vec<f64>>,
}

#[cfg(feature = "mpi")]
impl MpiHalo {
    fn new(w: &World, d: &Decomp) -> tiers_cluster::Result<MpiHalo> {
        let mpi = tiers_cluster::engine::mpi::baseline::Mpi::init()?;
        if (mpi.rank(), mpi.size()) != (w.rank(), w.size()) {
            return Err(tiers_cluster::Error::Setup(format!(
                "MPI's rank {} of {} is not the world's rank {} of {}",
                mpi.rank(),
                mpi.size(),
                w.rank(),
                w.size()
            )));
        }
        let faces = d.faces(w.rank());
        let send = faces.iter().map(|f| vec![0.0; f.send.len()]).collect();
        let recv = faces.iter().map(|f| vec![0.0; f.recv.len()]).collect();
        Ok(MpiHalo {
            mpi,
            faces,
            send: std::sync::Mutex::new(send),
            recv,
        })
    }

    fn start(&self, mut pack: impl FnMut(&Face, &mut [f64])) -> tiers_cluster::Result<()> {
        let mut send = self.send.lock().unwrap_or_else(|e| e.into_inner());
        for (f, b) in self.faces.iter().zip(send.iter_mut()) {
            pack(f, b);
        }
        Ok(())
    }

    /// Blocking (MPI_Waitall): the timeout does not apply.
    fn wait(&mut self, mut unpack: impl FnMut(&Face, &[f64])) -> tiers_cluster::Result<()> {
        let send = self.send.get_mut().unwrap_or_else(|e| e.into_inner());
        let (faces, recv) = (&self.faces, &mut self.recv);
        self.mpi.exchange(|r| {
            for (f, b) in faces.iter().zip(recv.iter_mut()) {
                r.irecv(f64_bytes_mut(b), f.peer, f.index() as i32)?;
            }
            for (f, b) in faces.iter().zip(send.iter()) {
                r.isend(f64_bytes(b), f.peer, f.opposite() as i32)?;
            }
            Ok(())
        })?;
        for (f, b) in faces.iter().zip(recv.iter()) {
            unpack(f, b);
        }
        Ok(())
    }
}

/// The bytes of `f64`s.
#[cfg(feature = "mpi")]
fn f64_bytes(v: &[f64]) -> &[u8] {
    // SAFETY: f64s have no padding; the bytes are borrowed as long as `v`.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// The bytes of `f64`s, writable (every bit pattern is a valid f64).
#[cfg(feature = "mpi")]
fn f64_bytes_mut(v: &mut [f64]) -> &mut [u8] {
    // SAFETY: as `f64_bytes`, borrowed mutably as long as `v`.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// Whether `hand` runs on MPI's own calls: the `mpi` feature and a start by mpirun.
fn hand_on_mpi() -> bool {
    #[cfg(feature = "mpi")]
    {
        tiers_cluster::engine::mpi::launched()
    }
    #[cfg(not(feature = "mpi"))]
    {
        false
    }
}

/// What `hand` moves its halos with in this process, for the benchmark's note.
pub fn hand_transport() -> &'static str {
    if hand_on_mpi() {
        "MPI_Isend/MPI_Irecv/MPI_Waitall (MPI's own, under mpirun)"
    } else {
        "tiers write_notify per face"
    }
}

/// A halo exchange: through the Mover, or by hand.
enum Exchange<'w> {
    Mover(Box<Halo<'w, f64>>),
    Hand(HandHalo<'w>),
    #[cfg(feature = "mpi")]
    Mpi(MpiHalo),
}

impl Exchange<'_> {
    /// Whether this exchange registered segment 7.
    fn has_segment(&self) -> bool {
        match self {
            Exchange::Mover(_) | Exchange::Hand(_) => true,
            #[cfg(feature = "mpi")]
            Exchange::Mpi(_) => false,
        }
    }

    fn start(&self, pack: impl FnMut(&Face, &mut [f64])) -> tiers_cluster::Result<()> {
        match self {
            Exchange::Mover(h) => h.start(pack),
            Exchange::Hand(h) => h.start(pack),
            #[cfg(feature = "mpi")]
            Exchange::Mpi(h) => h.start(pack),
        }
    }

    fn wait(
        &mut self,
        timeout: Timeout,
        unpack: impl FnMut(&Face, &[f64]),
    ) -> tiers_cluster::Result<()> {
        match self {
            Exchange::Mover(h) => h.wait(timeout, unpack),
            Exchange::Hand(h) => h.wait(timeout, unpack),
            #[cfg(feature = "mpi")]
            Exchange::Mpi(h) => h.wait(unpack),
        }
    }
}

/// One rank's times, in seconds over all iterations (thread 0's view).
#[derive(Clone, Copy, Debug, Default)]
pub struct Times {
    /// From the first exchange to the end of the last half-sweep.
    pub total: f64,
    /// Waiting for the exchange (all of it in `plain`).
    pub wait: f64,
    /// Relaxing.
    pub comp: f64,
}

/// Runs RedBlack3D on this rank's block; returns the block (its owned values are the rank's
/// share of the answer) and the rank's times.
///
/// # Errors
///
/// A failed cluster call.
pub fn solve(w: &World, p: &Params) -> tiers_cluster::Result<(Block, Times)> {
    let d = Decomp::new([p.n; 3], w.size(), 1)?;
    let me = w.rank();
    let own = d.block(me);
    let mut block = Block::new(p.n, own.lo, own.extent());
    let shared = block.shared();
    let mut halo = if p.variant == Variant::Hand && hand_on_mpi() {
        #[cfg(feature = "mpi")]
        {
            Exchange::Mpi(MpiHalo::new(w, &d)?)
        }
        #[cfg(not(feature = "mpi"))]
        unreachable!("hand_on_mpi is false without the mpi feature")
    } else if p.variant == Variant::Hand {
        Exchange::Hand(HandHalo::new(w, &d, SegId(7))?)
    } else {
        Exchange::Mover(Box::new(Halo::<f64>::new(w, &d, SegId(7), 0, 0)?))
    };
    let interior = d.interior(me, 1);
    let annulus = d.annulus(me, 1);
    let weights = p.variant.weights(p.threads, &p.irr);
    let slabs = thread_split(&own, &weights);
    let nt = weights.len();
    let mode = p.variant.mode();
    let barrier = AdaptiveBarrier::new(nt);
    w.barrier(Timeout::Block)?;

    let pack = move |f: &Face, buf: &mut [f64]| {
        // SAFETY: the send box is annulus points, not written while the exchange packs.
        for_each(&f.send, |q, i| buf[i] = unsafe { shared.get(q) });
    };
    let unpack = move |f: &Face, buf: &[f64]| {
        // SAFETY: ghosts, read by nobody until the barrier after the wait.
        for_each(&f.recv, |q, i| unsafe { shared.set(q, buf[i]) });
    };
    let relax = move |b: &Box3, c: Color| {
        // SAFETY: threads relax disjoint slabs of one color; see the variants' ordering.
        unsafe { shared.relax(b.lo, b.hi, c) }
    };

    let barrier = &barrier;
    let (interior, annulus, slabs) = (&interior, &annulus, &slabs);
    let work = |t: usize,
                mut halo: Option<&mut Exchange<'_>>,
                proxy: Option<&Proxy>|
     -> tiers_cluster::Result<Times> {
        let mut tm = Times::default();
        let mine = slabs[t];
        let inner = mine.intersect(interior);
        let outer: Vec<Box3> = annulus.iter().map(|a| mine.intersect(a)).collect();
        let lead = t == 0;
        let t0 = Instant::now();
        let mut progress = super::progress::Progress::new(
            format!("redblack {}", p.variant.name()),
            p.progress && lead && w.rank() == 0,
        );
        for it in 0..p.iters {
            progress.at(it, p.iters, "iterations");
            for c in [Color::Red, Color::Black] {
                match mode {
                    Mode::Limit => {
                        let c0 = Instant::now();
                        relax(&mine, c);
                        tm.comp += c0.elapsed().as_secs_f64();
                    }
                    Mode::Plain => {
                        if let Some(h) = halo.as_deref_mut() {
                            let w0 = Instant::now();
                            h.start(pack)?;
                            h.wait(Timeout::Block, unpack)?;
                            tm.wait += w0.elapsed().as_secs_f64();
                        }
                        barrier.wait(t);
                        let c0 = Instant::now();
                        relax(&mine, c);
                        tm.comp += c0.elapsed().as_secs_f64();
                    }
                    Mode::Caller | Mode::Proxy => {
                        if lead {
                            match (halo.as_deref_mut(), proxy) {
                                (Some(h), _) => h.start(pack)?,
                                (None, Some(px)) => px.start(),
                                _ => {}
                            }
                        }
                        let c0 = Instant::now();
                        relax(&inner, c);
                        tm.comp += c0.elapsed().as_secs_f64();
                        if lead {
                            let w0 = Instant::now();
                            match (halo.as_deref_mut(), proxy) {
                                (Some(h), _) => h.wait(Timeout::Block, unpack)?,
                                (None, Some(px)) => px.wait()?,
                                _ => {}
                            }
                            tm.wait += w0.elapsed().as_secs_f64();
                        }
                        barrier.wait(t);
                        let c0 = Instant::now();
                        for b in &outer {
                            relax(b, c);
                        }
                        tm.comp += c0.elapsed().as_secs_f64();
                    }
                }
                barrier.wait(t);
            }
        }
        tm.total = t0.elapsed().as_secs_f64();
        Ok(tm)
    };
    let mut times = Times::default();
    let result: tiers_cluster::Result<()> = std::thread::scope(|s| {
        let mut halo = Some(&mut halo);
        let proxy_halo = if mode == Mode::Proxy {
            halo.take()
        } else {
            None
        };
        let proxy = proxy_halo.map(|h| {
            Proxy::spawn(s, move || {
                h.start(pack)?;
                h.wait(Timeout::Block, unpack)
            })
        });
        let work = &work;
        let others: Vec<_> = (1..nt)
            .map(|t| s.spawn(move || work(t, None, None)))
            .collect();
        let r0 = work(0, halo, proxy.as_ref());
        for h in others {
            h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))?;
        }
        times = r0?;
        Ok(())
    });
    result?;
    // Final ghosts, for the residual.
    halo.start(pack)?;
    halo.wait(Timeout::Block, unpack)?;
    // The MPI exchange registers no segment.
    let segment = halo.has_segment();
    drop(halo);
    if segment {
        w.segment_delete(SegId(7), Timeout::Block)?;
    }
    Ok((block, times))
}

/// The maxima of `t` over ranks, and the residual (2-norm, scaled by h²) and largest error
/// of `b` over the whole mesh.
///
/// # Errors
///
/// A failed allreduce.
pub fn summarize(w: &World, b: &Block, t: &Times) -> tiers_cluster::Result<([f64; 3], f64, f64)> {
    let mut tmax = [0.0; 3];
    w.allreduce(
        &[t.total, t.wait, t.comp],
        &mut tmax,
        Op::Max,
        Timeout::Block,
    )?;
    let (r2, err) = b.residual_and_error();
    let (mut r, mut e) = ([0.0], [0.0]);
    w.allreduce(&[r2], &mut r, Op::Sum, Timeout::Block)?;
    w.allreduce(&[err], &mut e, Op::Max, Timeout::Block)?;
    Ok((tmax, r[0].sqrt(), e[0]))
}

/// The most iterations a run may ask for (as `md`'s steps: a count no run could finish is a
/// typing error, refused before anything starts).
const MAX_ITERS: usize = 1_000_000_000;

/// The largest weight of `--irr` (a ratio, not a size: a million to one is already no split).
const IRR_MAX: usize = 1_000_000;

/// Checks a mesh size and a thread count before anything is allocated or started: at least
/// one of each, at most [`MAX_THREADS`](super::fft2d::MAX_THREADS) threads, and the N³ mesh
/// (two arrays of f64 with their ghost planes) within the machine's memory.
pub fn check_size(n: usize, threads: usize) -> Result<(), String> {
    if n == 0 || threads == 0 {
        return Err("--n and --threads must be at least 1".into());
    }
    if threads > super::fft2d::MAX_THREADS {
        return Err(format!(
            "--threads {threads} is out of range 1..={}",
            super::fft2d::MAX_THREADS
        ));
    }
    let side = n.checked_add(2).ok_or("--n overflows")?;
    let points = tiers_apps::limits::mul("mesh", side, side)
        .and_then(|p| tiers_apps::limits::mul("mesh", p, side))
        .map_err(|e| format!("--n {n}: {e}"))?;
    tiers_apps::limits::check_alloc("the mesh (u and f)", points, 16)
        .map_err(|e| format!("--n {n}: {e}"))?;
    Ok(())
}

/// Parses `m:n[:…]` into `count` weights (`irr`'s compute threads).
pub fn parse_irr(s: &str, count: usize) -> Result<Vec<usize>, String> {
    let w: Vec<usize> = s
        .split(':')
        .map(|x| {
            x.trim()
                .parse()
                .map_err(|_| format!("--irr {s}: not a ratio like 3:1"))
        })
        .collect::<Result<_, _>>()?;
    if let Some(x) = w.iter().find(|&&x| x > IRR_MAX) {
        return Err(format!("--irr {s}: weight {x} above {IRR_MAX}"));
    }
    if w.len() != count {
        return Err(format!(
            "--irr {s}: {} weights, but irr has {count} compute threads (--threads - 1): give one weight each",
            w.len()
        ));
    }
    if w.iter().all(|&x| x == 0) {
        return Err(format!("--irr {s}: the weights are all 0"));
    }
    Ok(w)
}

/// Runs `tiers redblack`.
pub fn run(a: RedBlackArgs) -> Result<(), Box<dyn std::error::Error>> {
    check_size(a.n, a.threads).map_err(|e| format!("tiers redblack: {e}"))?;
    if a.iters > MAX_ITERS {
        return Err(format!(
            "tiers redblack: --iters {} is out of range 0..={MAX_ITERS}",
            a.iters
        )
        .into());
    }
    let irr = match &a.irr {
        Some(s) => parse_irr(s, Variant::Irr.compute_threads(a.threads))?,
        None => Vec::new(),
    };
    let variants = if a.variant.is_empty() {
        Variant::ALL.to_vec()
    } else {
        a.variant.clone()
    };
    if a.irr.is_some() && !variants.contains(&Variant::Irr) {
        return Err("tiers redblack: --irr sets the split of the irr variant, which is not among the --variant given".into());
    }
    let out = tiers_cluster::spmd(|w| (w.rank(), w.fail_if_err(one_rank(w, &a, &irr, &variants))))?;
    for (r, o) in out {
        o.map_err(|e| format!("tiers redblack: rank {r}: {e}"))?;
    }
    Ok(())
}

fn one_rank(
    w: &World,
    a: &RedBlackArgs,
    irr: &[usize],
    variants: &[Variant],
) -> Result<(), String> {
    use super::agree::{same_options, word};
    same_options(
        w,
        &[
            ("--n", word(a.n)),
            ("--iters", word(a.iters)),
            ("--variant", word(format!("{variants:?}"))),
            ("--irr", word(irr)),
            ("--digest", word(a.digest)),
        ],
    )?;
    let e = |e: tiers_cluster::Error| e.to_string();
    let d = Decomp::new([a.n; 3], w.size(), 1)
        .map_err(|_| format!("--n {} is too small for {} ranks", a.n, w.size()))?;
    if !d.ghosts_fit() {
        return Err(format!("--n {} is too small for {} ranks", a.n, w.size()));
    }
    if w.rank() == 0 {
        outln!(
            "redblack3d n={} iters={} ranks={} ({:?}) threads={} engine={}",
            a.n,
            a.iters,
            w.size(),
            d.procs(),
            a.threads,
            w.engine_name()
        )?;
        outln!("ms per iteration, the maximum over ranks")?;
        outln!(
            "{:<14} {:>7} {:>10} {:>10} {:>10} {:>12} {:>12}",
            "variant",
            "threads",
            "total",
            "wait",
            "comp",
            "residual",
            "max_error"
        )?;
    }
    let per = |x: f64| x * 1e3 / a.iters.max(1) as f64;
    for &v in variants {
        let p = Params {
            n: a.n,
            iters: a.iters,
            threads: a.threads,
            variant: v,
            irr: irr.to_vec(),
            progress: true,
        };
        let (b, t) = solve(w, &p).map_err(e)?;
        let (tm, res, err) = summarize(w, &b, &t).map_err(e)?;
        let digest = if a.digest {
            Some(mesh_digest(w, &b).map_err(e)?)
        } else {
            None
        };
        if w.rank() == 0 {
            let split = v.weights(a.threads, irr);
            let threads = if matches!(v, Variant::MtpOlapXtra | Variant::Irr) {
                format!("{}+1", split.len())
            } else {
                split.len().to_string()
            };
            outln!(
                "{:<14} {:>7} {:>10.3} {:>10.3} {:>10.3} {:>12.4e} {:>12.4e}",
                v.name(),
                threads,
                per(tm[0]),
                per(tm[1]),
                per(tm[2]),
                res,
                err
            )?;
            if let Some(h) = digest {
                outln!("digest {} {h:016x}", v.name())?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole mesh, assembled from every rank's owned values.
    fn mesh(n: usize, ranks: usize, threads: usize, variant: Variant, irr: Vec<usize>) -> Vec<f64> {
        let p = Params {
            n,
            iters: 5,
            threads,
            variant,
            irr,
            progress: false,
        };
        let parts = tiers_cluster::run_local(ranks, |w| {
            let (b, _) = solve(w, &p).unwrap();
            (b.lo, b.owned, b.owned_values())
        })
        .unwrap();
        let mut out = vec![f64::NAN; n * n * n];
        for (lo, owned, vals) in parts {
            let mut it = vals.into_iter();
            for i in 0..owned[0] {
                for j in 0..owned[1] {
                    for k in 0..owned[2] {
                        out[((lo[0] + i) * n + lo[1] + j) * n + lo[2] + k] = it.next().unwrap();
                    }
                }
            }
        }
        out
    }

    #[test]
    fn every_variant_rank_and_thread_count_gives_the_same_bits() {
        let n = 12;
        let want = mesh(n, 1, 1, Variant::Mt1, vec![]);
        assert!(want.iter().all(|x| x.is_finite()));
        for ranks in [1, 2, 3, 4, 8] {
            for (threads, weights) in [(1, vec![]), (2, vec![]), (3, vec![3, 1]), (4, vec![])] {
                for v in Variant::ALL.into_iter().filter(|&v| v != Variant::Limit) {
                    let got = mesh(n, ranks, threads, v, weights.clone());
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "{v:?} on {ranks} ranks x {threads} threads {weights:?}"
                    );
                }
            }
        }
        // Without an exchange the blocks drift apart: the test can see a wrong answer.
        let limit = mesh(n, 2, 1, Variant::Limit, vec![]);
        assert!(limit.iter().zip(&want).any(|(a, b)| a != b));
    }

    #[test]
    fn irr_parses() {
        assert_eq!(parse_irr("3:1", 2), Ok(vec![3, 1]));
        assert!(parse_irr("3:1", 3).is_err());
        assert!(parse_irr("a:1", 2).is_err());
        assert!(parse_irr("0:0", 2).is_err());
    }

    #[test]
    fn variants_have_table_1_names_and_threads() {
        use clap::ValueEnum;
        for v in Variant::ALL {
            let pv = v.to_possible_value().unwrap();
            assert_eq!(pv.get_name(), v.name());
        }
        assert_eq!(Variant::Hand.compute_threads(4), 1);
        assert_eq!(Variant::Mt1.compute_threads(4), 1);
        assert_eq!(Variant::Mtp.compute_threads(4), 4);
        assert_eq!(Variant::MtpOlapXtra.compute_threads(4), 3);
        assert_eq!(Variant::MtpOlapXtra.compute_threads(1), 1);
        assert_eq!(Variant::Irr.weights(3, &[]), vec![2, 1]);
        assert_eq!(Variant::Irr.weights(3, &[5, 1]), vec![5, 1]);
        assert_eq!(Variant::Mtp.weights(3, &[5, 1]), vec![1, 1, 1]);
    }
}

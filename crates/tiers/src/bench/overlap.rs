//! `tiers bench overlap`: how much of a one-sided write hides behind computation, OSU-style,
//! by size and progress policy.
//!
//! For each transfer (rank 0 writes `size` bytes into rank 1's segment, then waits for the
//! queue):
//!
//! - `T_comm`: post and wait with nothing between them (the pure communication time);
//! - `T_total`: post, compute for `T_comm` (a calibrated loop), wait; `T_post` is the post
//!   alone inside it, `T_compute` the same loop timed alone;
//! - overlap % = max(0, 100 − 100·(T_total − (T_compute − T_post))/T_comm), at most 100
//!   (noise can make the exposed time negative).
//!
//! Candidates, all in the same run: a `local` world of two ranks (threads of this process)
//! under each policy (`tiers-local-eager|lazy|proxy`); the world of the launch (`tiers run -n
//! 2`: shm, or mpirun: mpi) under `TIERS_PROGRESS`'s policy; under mpirun with the `mpi`
//! feature, MPI's own `MPI_Put` + `MPI_Win_flush` and `MPI_Isend` + `MPI_Wait` (rank 1
//! receiving each message in a blocking receive loop, as OSU's overlap benchmarks do). The
//! table gives `T_comm` and the exposed
//! time `T_total − (T_compute − T_post)` in µs; the `limit` row of `comm` is a memcpy of the
//! same bytes in this run (the copy the shared-memory engines make). The overlap percentages
//! and every world's progress counters are in the notes.

use super::{Ctx, Outcome};
use serde_json::json;
use std::cell::Cell;
use std::hint::black_box;
use std::time::{Duration, Instant};
use tiers_bench::limit;
use tiers_bench::{compare, progress, Candidate, Report};
use tiers_cluster::{Builder, Progress, SegId, Timeout, World};

/// Transfer sizes: 1 KiB to 4 MiB, by 4.
const SIZES: [usize; 7] = [
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
];
const MAX: usize = 4 << 20;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Computation the overlap must hide: `units` rounds of dependent integer arithmetic.
#[inline(never)]
fn compute(units: u64) -> u64 {
    let mut x = black_box(0x9E37_79B9_7F4A_7C15u64);
    for i in 0..units {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(i) ^ (x >> 29);
    }
    black_box(x)
}

/// Seconds per unit of [`compute`].
fn unit_time() -> f64 {
    let n = 1u64 << 22;
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        compute(n);
        best = best.min(t.elapsed().as_secs_f64());
    }
    best / n as f64
}

/// One way to post a transfer and wait for it.
trait Xfer {
    fn name(&self) -> String;
    fn post(&self, bytes: usize) -> Res<()>;
    fn wait(&self) -> Res<()>;
    fn stats(&self) -> Option<String> {
        None
    }
}

/// Rank 0 of a world writing into rank 1's segment 0.
struct Tiers<'w> {
    name: String,
    w: &'w World,
}

impl Xfer for Tiers<'_> {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn post(&self, bytes: usize) -> Res<()> {
        let q = self.w.queue(0)?;
        q.write(SegId(0).at(0), SegId(0).on(1, 0), bytes)?;
        Ok(())
    }
    fn wait(&self) -> Res<()> {
        self.w.queue(0)?.wait(Timeout::Block)?;
        Ok(())
    }
    fn stats(&self) -> Option<String> {
        let s = self.w.progress_stats();
        Some(format!(
            "{}: {} progress calls, {} found work, {:.3} ms in progress, {} handed to the proxy ({} B), {} B moved by the proxy thread, proxy {}",
            self.name,
            s.calls,
            s.found_work,
            s.time.as_secs_f64() * 1e3,
            s.handed_off,
            s.handed_off_bytes,
            s.proxy_bytes,
            match (s.proxy_running, s.proxy_cpu) {
                (false, _) => "none".to_string(),
                (true, Some(c)) => format!("pinned to cpu {c}"),
                (true, None) => "unpinned (no free core)".to_string(),
            }
        ))
    }
}

/// MPI's own `MPI_Put` into rank 1's window, completed by `MPI_Win_flush`.
#[cfg(feature = "mpi")]
struct MpiPut<'a> {
    win: tiers_cluster::engine::mpi::baseline::Window,
    src: &'a [u8],
}

#[cfg(feature = "mpi")]
impl Xfer for MpiPut<'_> {
    fn name(&self) -> String {
        "mpi-put".into()
    }
    fn post(&self, bytes: usize) -> Res<()> {
        // SAFETY: `src` is not changed and outlives `self`, so past the flush in `wait`, which
        // every measured iteration calls before the next post.
        unsafe { self.win.put(&self.src[..bytes], 1, 0) }?;
        Ok(())
    }
    fn wait(&self) -> Res<()> {
        self.win.flush(1)?;
        Ok(())
    }
}

/// MPI's own `MPI_Isend` to rank 1, completed by `MPI_Wait`; rank 1 receives each message in
/// a loop ([`receive_until_stop`]).
#[cfg(feature = "mpi")]
struct MpiIsend<'a> {
    mpi: &'a tiers_cluster::engine::mpi::baseline::Mpi,
    src: &'a [u8],
    pending: std::cell::RefCell<Option<tiers_cluster::engine::mpi::baseline::PendingSend<'a>>>,
}

/// Tag of the messages of the `mpi-isend` row, and of the one that ends rank 1's loop.
#[cfg(feature = "mpi")]
const DATA_TAG: i32 = 71;
#[cfg(feature = "mpi")]
const STOP_TAG: i32 = 72;

#[cfg(feature = "mpi")]
impl Xfer for MpiIsend<'_> {
    fn name(&self) -> String {
        "mpi-isend".into()
    }
    fn post(&self, bytes: usize) -> Res<()> {
        let p = self.mpi.isend(&self.src[..bytes], 1, DATA_TAG)?;
        *self.pending.borrow_mut() = Some(p);
        Ok(())
    }
    fn wait(&self) -> Res<()> {
        if let Some(p) = self.pending.borrow_mut().take() {
            p.wait()?;
        }
        Ok(())
    }
}

/// Rank 1's side of the `mpi-isend` row: receives rank 0's messages until the stop message
/// (which rank 0 sends after its measurements, whatever their outcome).
#[cfg(feature = "mpi")]
fn receive_until_stop(m: &tiers_cluster::engine::mpi::baseline::Mpi) -> Res<()> {
    let mut buf = vec![0u8; MAX];
    loop {
        let (tag, _) = m.recv_any_tag(&mut buf, 0)?;
        if tag == STOP_TAG {
            return Ok(());
        }
    }
}

/// What a timed loop returns once a transfer has failed: long enough that the comparison
/// ends at once (the failure, kept in [`Failure`], is then reported).
const FAILED: Duration = Duration::from_secs(3600);

/// The first failure of a transfer inside the timed loops, which can only return times.
#[derive(Default)]
struct Failure(std::cell::RefCell<Option<Box<dyn std::error::Error>>>);

impl Failure {
    /// `r`'s error kept (the first one); whether `r` failed.
    fn failed(&self, r: Res<()>) -> bool {
        match r {
            Ok(()) => false,
            Err(e) => {
                self.0.borrow_mut().get_or_insert(e);
                true
            }
        }
    }

    /// The failure, if a timed loop met one.
    fn check(&self) -> Res<()> {
        match self.0.borrow_mut().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Measures every transfer at every size on this thread (rank 0 of every world). A transfer
/// that fails (a peer gone, MPI's error) ends the benchmark with that error.
fn measure(ctx: &Ctx<'_>, xs: &[&dyn Xfer], note: &str) -> Res<Report> {
    let opts = &ctx.opts;
    let failure = Failure::default();
    let failure = &failure;
    let unit = unit_time();
    let mut r = Report::new("overlap", "us per transfer", true);
    let mut table = String::from("overlap % (size:");
    for x in xs {
        table.push_str(&format!(" {}", x.name()));
    }
    table.push(')');
    for &bytes in &SIZES {
        progress(opts, format!("overlap {bytes} B"));
        // Pure communication, and the memcpy of the same bytes.
        let mut cands: Vec<Candidate<'_>> = xs
            .iter()
            .map(|x| {
                let x = *x;
                Candidate::new(x.name(), move |n| {
                    let t = Instant::now();
                    for _ in 0..n {
                        if failure.failed(x.post(bytes).and_then(|()| x.wait())) {
                            return FAILED;
                        }
                    }
                    t.elapsed()
                })
            })
            .collect();
        cands.push(limit::memcpy(bytes));
        let comm: Vec<f64> = compare(opts.min_time, &mut cands)
            .into_iter()
            .map(|(m, _)| m)
            .collect();
        drop(cands);
        failure.check()?;
        // Post, compute for T_comm, wait; and the computation alone.
        let units: Vec<u64> = comm.iter().map(|c| (c / unit).ceil() as u64).collect();
        let posts: Vec<(Cell<Duration>, Cell<u64>)> = xs
            .iter()
            .map(|_| (Cell::new(Duration::ZERO), Cell::new(0)))
            .collect();
        let mut cands: Vec<Candidate<'_>> = Vec::new();
        for (i, x) in xs.iter().enumerate() {
            let (x, k, p) = (*x, units[i], &posts[i]);
            cands.push(Candidate::new(format!("{}+compute", x.name()), move |n| {
                let t = Instant::now();
                for _ in 0..n {
                    let t0 = Instant::now();
                    if failure.failed(x.post(bytes)) {
                        return FAILED;
                    }
                    p.0.set(p.0.get() + t0.elapsed());
                    p.1.set(p.1.get() + 1);
                    compute(k);
                    if failure.failed(x.wait()) {
                        return FAILED;
                    }
                }
                t.elapsed()
            }));
            cands.push(Candidate::new("compute", move |n| {
                let t = Instant::now();
                for _ in 0..n {
                    compute(k);
                }
                t.elapsed()
            }));
        }
        let res: Vec<f64> = compare(opts.min_time, &mut cands)
            .into_iter()
            .map(|(m, _)| m)
            .collect();
        drop(cands);
        failure.check()?;
        let params = |part: &str| [("bytes", json!(bytes)), ("part", json!(part))];
        table.push_str(&format!("\n  {bytes}:"));
        for (i, x) in xs.iter().enumerate() {
            let (total, comp) = (res[2 * i], res[2 * i + 1]);
            let post = posts[i].0.get().as_secs_f64() / posts[i].1.get().max(1) as f64;
            let exposed = total - (comp - post);
            // Noise can make the computation alone slower than with the transfer (exposed
            // below 0): the share hidden is then all of it, not more.
            let pct = (100.0 - 100.0 * exposed / comm[i]).clamp(0.0, 100.0);
            r.push(&x.name(), &params("comm"), comm[i] * 1e6);
            r.push(&x.name(), &params("exposed"), exposed.max(0.0) * 1e6)
                .extra
                .push(("overlap_pct".into(), json!(pct)));
            table.push_str(&format!(" {pct:.0}"));
        }
        r.push_limit(&params("comm"), comm[xs.len()] * 1e6, limit::memcpy_note());
    }
    r.note(table);
    for x in xs {
        if let Some(s) = x.stats() {
            r.note(s);
        }
    }
    r.note(note.to_string());
    Ok(r)
}

/// A `local` world of two ranks under policy `p`: rank 0 is returned, rank 1 lives on a
/// thread of `s` that takes part in the segment's creation, then sleeps in a barrier until
/// rank 0's world calls it too.
fn local_pair<'s>(s: &'s std::thread::Scope<'s, '_>, p: Progress) -> Res<World> {
    let mut ws = Builder::new().progress(p).local(2)?;
    let w1 = ws.pop().ok_or("no rank 1")?;
    let w0 = ws.pop().ok_or("no rank 0")?;
    s.spawn(move || {
        // A failure here ends rank 1 (its world dropped), which rank 0 then meets as the
        // peer's failure in its own calls: reported there.
        let r = w1
            .segment(SegId(0), MAX)
            .and_then(|_seg| w1.barrier(Timeout::Block));
        if let Err(e) = r {
            eprintln!("tiers bench overlap: local rank 1: {e}");
        }
    });
    Ok(w0)
}

/// Every rank of the launch: rank 0 measures, the others lend their segments.
fn one_rank(ctx: &Ctx<'_>, w: &World) -> Res<Option<Report>> {
    let launched = w.size() >= 2;
    let _seg = if launched {
        Some(w.segment(SegId(0), MAX)?)
    } else {
        None
    };
    #[cfg(feature = "mpi")]
    let base = if launched && w.engine_name() == "mpi" {
        Some(tiers_cluster::engine::mpi::baseline::Mpi::init()?)
    } else {
        None
    };
    // What MPI's own rows send (both read it, neither writes it).
    #[cfg(feature = "mpi")]
    let src = vec![7u8; if base.is_some() { MAX } else { 0 }];
    #[cfg(feature = "mpi")]
    let mpi = match &base {
        Some(m) => Some(MpiPut {
            win: m.window(MAX)?,
            src: &src,
        }),
        None => None,
    };
    #[cfg(feature = "mpi")]
    let isend = base.as_ref().map(|m| MpiIsend {
        mpi: m,
        src: &src,
        pending: std::cell::RefCell::new(None),
    });
    #[cfg(feature = "mpi")]
    if w.rank() == 1 {
        if let Some(m) = &base {
            receive_until_stop(m)?;
        }
    }
    let mut report = None;
    if w.rank() == 0 {
        let measured = std::thread::scope(|s| -> Res<Report> {
            let locals: Vec<World> = Progress::ALL
                .into_iter()
                .map(|p| local_pair(s, p))
                .collect::<Res<_>>()?;
            for l in &locals {
                let _ = l.segment(SegId(0), MAX)?;
            }
            let tiers: Vec<Tiers<'_>> = locals
                .iter()
                .map(|l| Tiers {
                    name: format!("tiers-local-{}", l.progress()),
                    w: l,
                })
                .chain(launched.then(|| Tiers {
                    name: format!("tiers-{}-{}", w.engine_name(), w.progress()),
                    w,
                }))
                .collect();
            let xs: Vec<&dyn Xfer> = tiers.iter().map(|t| t as &dyn Xfer).collect();
            #[cfg(feature = "mpi")]
            let xs: Vec<&dyn Xfer> = xs
                .into_iter()
                .chain(mpi.as_ref().map(|m| m as &dyn Xfer))
                .chain(isend.as_ref().map(|m| m as &dyn Xfer))
                .collect();
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            let note = format!(
                "rank 0 writes into rank 1's segment 0 and waits; compute = T_comm of the same candidate; \
                 overlap % = max(0, 100 - 100 (T_total - (T_compute - T_post)) / T_comm); {cpus} cores; \
                 local worlds: 2 ranks as threads of this process{}",
                if launched {
                    format!("; launched world: {} ranks on the {} engine", w.size(), w.engine_name())
                } else {
                    String::new()
                }
            );
            // The local ranks 1 wait in a barrier: released whatever the outcome.
            let r = measure(ctx, &xs, &note);
            for l in &locals {
                l.barrier(Timeout::Block)?;
            }
            r
        });
        // Rank 1 receives until told to stop, whatever became of the measurements.
        #[cfg(feature = "mpi")]
        if let Some(m) = &base {
            m.send(&[], 1, STOP_TAG)?;
        }
        report = Some(measured?);
    }
    if launched {
        w.barrier(Timeout::Block)?;
    }
    #[cfg(feature = "mpi")]
    if let Some(m) = mpi {
        m.win.free()?;
    }
    Ok(report)
}

/// Runs the benchmark on every rank of the launch (or alone: the local worlds only).
pub(super) fn run(ctx: &Ctx<'_>) -> Outcome {
    let results = tiers_cluster::spmd(|w| (w.rank(), one_rank(ctx, w).map_err(|e| e.to_string())))?;
    let mut report = None;
    for (rank, r) in results {
        match r {
            Ok(Some(rep)) => report = Some(rep),
            Ok(None) => {}
            Err(e) => return Err(format!("tiers bench overlap: rank {rank}: {e}").into()),
        }
    }
    Ok(report)
}

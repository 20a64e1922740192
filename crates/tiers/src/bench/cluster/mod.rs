//! The cluster-tier benchmarks of `tiers bench`: `put`, `latency` and `ranks` run under
//! `tiers run -n N -- tiers bench NAME` (rank 0 prints, the other ranks take part silently);
//! `kneighbor` starts the processes it needs itself.
//!
//! The `limit` rows: `put` copies the same bytes with memcpy; `latency` and `ranks` bounce a
//! cache line between rank 0 and rank 1 on their own cores, in a mapping both share
//! ([`RankLine`]).

pub(super) mod kneighbor;
pub(super) mod ranks;

use super::{Ctx, Outcome};
use serde_json::json;
use std::error::Error;
use std::time::Instant;
use tiers_bench::{compare, limit, progress, Candidate, Opts, Report};
use tiers_cluster::{Notification, Op, SegId, Timeout, World};

type BenchResult<T = Report> = Result<T, Box<dyn Error>>;

/// Runs `f` as every rank of the job this process belongs to (one process per rank under
/// `tiers run`, or all ranks as threads of this process on the local engine); rank 0's report
/// comes back, the other ranks take part and report nothing.
pub(super) fn on_ranks(name: &str, ctx: &Ctx<'_>, f: fn(&World, &Opts) -> BenchResult) -> Outcome {
    let results = tiers_cluster::spmd(|w| (w.rank(), f(w, &ctx.opts).map_err(|e| e.to_string())))?;
    let mut report = None;
    for (rank, r) in results {
        match r {
            Ok(rep) if rank == 0 => report = Some(rep),
            Ok(_) => {}
            Err(e) => return Err(format!("tiers bench {name}: rank {rank}: {e}").into()),
        }
    }
    Ok(report)
}

fn imp(w: &World) -> String {
    format!("tiers-{}", w.engine_name())
}

/// Two cache lines that ranks 0 and 1 share (a file in `/dev/shm` both map; removed once
/// mapped), for the cache-line round trip between the ranks' own processors: `line` is the
/// bounced word, `word` a second line for a count. Collective.
pub(super) struct RankLine {
    ptr: *mut u8,
    /// The processors ranks 0 and 1 are pinned to, when each is pinned to one.
    pub cpus: [Option<usize>; 2],
}

const RANK_LINE_BYTES: usize = 4096;

impl RankLine {
    /// Maps the shared lines on every rank (`None` with one rank).
    pub fn new(w: &World) -> BenchResult<Option<RankLine>> {
        if w.size() < 2 {
            return Ok(None);
        }
        // Rank 0 names the file; the name and each rank's processor travel by allreduce.
        let aff = tiers_node::affinity::get().unwrap_or_default();
        let mut mine = [0u64; 3];
        if w.rank() == 0 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            mine[0] = (u64::from(std::process::id()) << 32) | u64::from(nanos);
        }
        if w.rank() < 2 && aff.len() == 1 {
            mine[1 + w.rank()] = aff[0] as u64 + 1;
        }
        let mut all = [0u64; 3];
        w.allreduce(&mine, &mut all, Op::Sum, Timeout::Block)?;
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            std::path::PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let path = dir.join(format!("tiers-bench-line-{:x}", all[0]));
        if w.rank() == 0 {
            let f = std::fs::File::create_new(&path)?;
            f.set_len(RANK_LINE_BYTES as u64)?;
        }
        w.barrier(Timeout::Block)?;
        let mapped = Self::map(&path);
        w.barrier(Timeout::Block)?;
        if w.rank() == 0 {
            let _ = std::fs::remove_file(&path);
        }
        let ptr = mapped?;
        let cpu = |v: u64| v.checked_sub(1).map(|c| c as usize);
        Ok(Some(RankLine {
            ptr,
            cpus: [cpu(all[1]), cpu(all[2])],
        }))
    }

    fn map(path: &std::path::Path) -> std::io::Result<*mut u8> {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        // SAFETY: a fresh shared mapping of a file of RANK_LINE_BYTES bytes; the file
        // descriptor may close afterwards, the mapping stays until `drop`.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                RANK_LINE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(p.cast())
    }

    fn word(&self, line: usize) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: the mapping is page-aligned, RANK_LINE_BYTES long and lives as long as
        // `self`; every access to it is atomic.
        unsafe {
            &*self
                .ptr
                .add(line * 128)
                .cast::<std::sync::atomic::AtomicU64>()
        }
    }

    /// The bounced word.
    pub fn line(&self) -> &std::sync::atomic::AtomicU64 {
        self.word(0)
    }

    /// A word in another line, for a count.
    pub fn count(&self) -> &std::sync::atomic::AtomicU64 {
        self.word(1)
    }

    /// How the round trip was measured, for the limit row.
    pub fn note(&self, what: &str) -> String {
        let cpu = |c: Option<usize>| c.map_or("unpinned".to_string(), |c| format!("cpu {c}"));
        format!(
            "{what} between rank 0 ({}) and rank 1 ({}): the ranks bounce one line of a mapping they share; {}",
            cpu(self.cpus[0]),
            cpu(self.cpus[1]),
            limit::FLOOR
        )
    }
}

impl Drop for RankLine {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped; no reference into it outlives `self`.
        unsafe { libc::munmap(self.ptr.cast(), RANK_LINE_BYTES) };
    }
}

const SIZES: &[usize] = &[
    8,
    64,
    512,
    4096,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
];

pub(super) fn put(w: &World, opts: &Opts) -> BenchResult {
    if w.size() < 2 {
        // With one rank the write would copy rank 0's segment onto itself (offset 0 to 0),
        // which memmove skips: no bandwidth to measure.
        return Err(
            "put needs 2 ranks (rank 0 writes into rank 1's segment): tiers run -n 2 -- tiers bench put"
                .into(),
        );
    }
    let max = *SIZES.last().expect("sizes");
    let _seg = w.segment(SegId(0), max)?;
    let mut report = Report::new("put", "GB/s", false);
    if w.rank() == 0 {
        let peer = 1;
        let q = w.queue(0)?;
        for &bytes in SIZES {
            progress(opts, format!("put {bytes} B"));
            let batch = 512;
            let res = compare(
                opts.min_time,
                &mut [
                    Candidate::new(imp(w), |iters| {
                        let t = Instant::now();
                        for i in 0..iters {
                            q.write(SegId(0).at(0), SegId(0).on(peer, 0), bytes)
                                .expect("write");
                            if i % batch == batch - 1 {
                                q.wait(Timeout::Block).expect("wait");
                            }
                        }
                        q.wait(Timeout::Block).expect("wait");
                        t.elapsed()
                    }),
                    limit::memcpy(bytes),
                ],
            );
            let params = [("bytes", json!(bytes)), ("ranks", json!(w.size()))];
            report.push(&imp(w), &params, bytes as f64 / res[0].0 / 1e9);
            report.push_limit(&params, bytes as f64 / res[1].0 / 1e9, limit::memcpy_note());
        }
        report.note(format!(
            "rank 0 writes into rank {peer}'s segment (one copy into its mapping), waiting for completion every 512 writes"
        ));
    }
    w.barrier(Timeout::Block)?;
    Ok(report)
}

pub(super) fn latency(w: &World, opts: &Opts) -> BenchResult {
    let seg = w.segment(SegId(0), 4096)?;
    let q = w.queue(0)?;
    let peer = (w.rank() + 1) % w.size();
    let line = RankLine::new(w)?;
    let mut report = Report::new("latency", "ns", true);
    const PING: usize = 0;
    const STOP: usize = 1;
    /// Rank 1: bounce the shared line as many times as its count says (plus one to start).
    const LIMIT: usize = 2;
    if w.rank() == 0 {
        progress(opts, "latency: write, read, write_notify");
        let mut cands = vec![
            Candidate::new("write", |iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    q.write(SegId(0).at(0), SegId(0).on(peer, 64), 8)
                        .expect("write");
                    q.wait(Timeout::Block).expect("wait");
                }
                t.elapsed()
            }),
            Candidate::new("read", |iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    q.read(SegId(0).at(128), SegId(0).on(peer, 64), 8)
                        .expect("read");
                    q.wait(Timeout::Block).expect("wait");
                }
                t.elapsed()
            }),
            Candidate::new("write_notify", |iters| {
                let t = Instant::now();
                for i in 0..iters {
                    seg.set::<u64>(0, i).expect("set");
                    q.write_notify(
                        SegId(0).at(0),
                        SegId(0).on(peer, 256),
                        8,
                        Notification { id: PING, value: 1 },
                    )
                    .expect("ping");
                    q.wait(Timeout::Block).expect("wait");
                    w.notify_waitsome(SegId(0), PING..PING + 1, Timeout::Block)
                        .expect("pong");
                    w.notify_reset(SegId(0), PING).expect("reset");
                }
                // Half a round trip per iteration.
                t.elapsed() / 2
            }),
        ];
        if let Some(l) = &line {
            cands.push(Candidate::new(limit::IMPL, move |iters| {
                l.count().store(iters, std::sync::atomic::Ordering::Relaxed);
                q.notify(
                    peer,
                    SegId(0),
                    Notification {
                        id: LIMIT,
                        value: 1,
                    },
                )
                .expect("notify");
                q.wait(Timeout::Block).expect("wait");
                // One exchange to meet (rank 1 wakes up), then the timed ones.
                limit::ping_pong(l.line(), 0, 1);
                // Half a round trip, as write_notify.
                limit::ping_pong_floor(l.line(), iters) / 2
            }));
        }
        let res = compare(opts.min_time, &mut cands);
        drop(cands);
        for (op, (secs, _)) in ["write", "read", "write_notify"].iter().zip(&res) {
            report.push(
                &imp(w),
                &[
                    ("op", json!(op)),
                    ("bytes", json!(8)),
                    ("ranks", json!(w.size())),
                ],
                secs * 1e9,
            );
        }
        match &line {
            Some(l) => {
                report.push_limit(
                    &[
                        ("op", json!("write_notify")),
                        ("bytes", json!(8)),
                        ("ranks", json!(w.size())),
                    ],
                    res[3].0 * 1e9,
                    l.note("half of the cache-line round trip (one way, as write_notify)"),
                );
            }
            None => report.note("limit: none with one rank (nothing crosses between cores)"),
        }
        report.note("write/read: post 8 bytes and wait for local completion; write_notify: half of a ping-pong round trip (data + notification, the peer answers the same way)");
        q.notify(peer, SegId(0), Notification { id: STOP, value: 1 })?;
        q.wait(Timeout::Block)?;
    } else if w.rank() == 1 {
        let back = 0;
        loop {
            let id = w.notify_waitsome(SegId(0), PING..LIMIT + 1, Timeout::Block)?;
            w.notify_reset(SegId(0), id)?;
            match id {
                STOP => break,
                LIMIT => {
                    let l = line.as_ref().expect("two ranks map the line");
                    let n = l.count().load(std::sync::atomic::Ordering::Relaxed);
                    limit::ping_pong(l.line(), 1, n + 1);
                }
                _ => {
                    q.write_notify(
                        SegId(0).at(256),
                        SegId(0).on(back, 256),
                        8,
                        Notification { id: PING, value: 1 },
                    )?;
                    q.wait(Timeout::Block)?;
                }
            }
        }
    }
    if w.size() == 1 {
        // The ping went to this rank itself; clear the stop flag.
        w.notify_reset(SegId(0), STOP)?;
    }
    w.barrier(Timeout::Block)?;
    Ok(report)
}

/// The most samples [`sync_measure`] takes (when each is far shorter than the barrier around
/// it, `min_time` would otherwise take long to fill).
const MAX_SAMPLES: usize = 200;

/// Runs `f(iters)` on every rank with iteration counts all ranks agree on; returns the median
/// of the slowest rank's seconds per iteration.
pub(super) fn sync_measure(
    w: &World,
    min_time: f64,
    mut f: impl FnMut(u64),
) -> tiers_cluster::Result<f64> {
    let target = (min_time / 10.0).max(1e-4);
    let time = |n: u64, f: &mut dyn FnMut(u64)| -> tiers_cluster::Result<f64> {
        w.barrier(Timeout::Block)?;
        let t = Instant::now();
        f(n);
        let mut m = [0.0f64];
        w.allreduce(
            &[t.elapsed().as_secs_f64()],
            &mut m,
            tiers_cluster::Op::Max,
            Timeout::Block,
        )?;
        Ok(m[0])
    };
    let mut n = 1u64;
    loop {
        let t = time(n, &mut f)?;
        if t >= target / 4.0 || n >= 1 << 32 {
            n = ((target / (t / n as f64).max(1e-12)) as u64).clamp(1, 1 << 32);
            break;
        }
        n *= if t < target / 100.0 { 10 } else { 2 };
    }
    // Every rank must make the same number of calls: the loop ends on what the allreduce made
    // common (the slowest rank's times, and their count), never on a rank's own clock.
    let mut samples = Vec::new();
    let mut spent = 0.0;
    while samples.len() < 5 || (spent < min_time && samples.len() < MAX_SAMPLES) {
        let t = time(n, &mut f)?;
        spent += t;
        samples.push(t / n as f64);
    }
    Ok(tiers_bench::median(&samples))
}

//! The cluster-tier benchmarks of `tiers bench`: `put`, `latency` and `ranks` run under
//! `tiers run -n N -- tiers bench NAME` (rank 0 prints, the other ranks take part silently);
//! `kneighbor` starts the processes it needs itself.

pub(super) mod kneighbor;
pub(super) mod ranks;

use super::{Ctx, Outcome};
use serde_json::json;
use std::error::Error;
use std::hint::black_box;
use std::time::{Duration, Instant};
use tiers_bench::{compare, progress, Candidate, Opts, Report};
use tiers_cluster::{Notification, SegId, Timeout, World};

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
    let max = *SIZES.last().expect("sizes");
    let _seg = w.segment(SegId(0), max)?;
    let mut report = Report::new("put", "GB/s", false);
    if w.rank() == 0 {
        let peer = (w.rank() + 1) % w.size();
        let q = w.queue(0)?;
        let mut a = vec![1u8; max];
        let mut b = vec![2u8; max];
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
                    Candidate::new("memcpy", |iters| {
                        let t = Instant::now();
                        for _ in 0..iters {
                            b[..bytes].copy_from_slice(black_box(&a[..bytes]));
                            black_box(&mut b);
                        }
                        t.elapsed()
                    }),
                ],
            );
            for ((name, (secs, _)), _) in [imp(w), "memcpy".to_string()].iter().zip(res).zip(0..) {
                report.push(
                    name,
                    &[("bytes", json!(bytes)), ("ranks", json!(w.size()))],
                    bytes as f64 / secs / 1e9,
                );
            }
            a[0] = a[0].wrapping_add(1);
        }
        report.note(format!(
            "rank 0 writes into rank {peer}'s segment (one copy into its mapping); memcpy copies between two private buffers of the same size in the same run"
        ));
    }
    w.barrier(Timeout::Block)?;
    Ok(report)
}

pub(super) fn latency(w: &World, opts: &Opts) -> BenchResult {
    let seg = w.segment(SegId(0), 4096)?;
    let q = w.queue(0)?;
    let peer = (w.rank() + 1) % w.size();
    let mut report = Report::new("latency", "ns", true);
    const PING: usize = 0;
    const STOP: usize = 1;
    if w.rank() == 0 {
        progress(opts, "latency: write, read, write_notify");
        let res = compare(
            opts.min_time,
            &mut [
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
            ],
        );
        for (op, (secs, _)) in ["write", "read", "write_notify"].iter().zip(res) {
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
        report.note("write/read: post 8 bytes and wait for local completion; write_notify: half of a ping-pong round trip (data + notification, the peer answers the same way)");
        q.notify(peer, SegId(0), Notification { id: STOP, value: 1 })?;
        q.wait(Timeout::Block)?;
    } else if w.rank() == 1 {
        let back = 0;
        loop {
            let id = w.notify_waitsome(SegId(0), PING..STOP + 1, Timeout::Block)?;
            w.notify_reset(SegId(0), id)?;
            if id == STOP {
                break;
            }
            q.write_notify(
                SegId(0).at(256),
                SegId(0).on(back, 256),
                8,
                Notification { id: PING, value: 1 },
            )?;
            q.wait(Timeout::Block)?;
        }
    }
    if w.size() == 1 {
        // The ping went to this rank itself; clear the stop flag.
        w.notify_reset(SegId(0), STOP)?;
    }
    w.barrier(Timeout::Block)?;
    Ok(report)
}

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
    let mut samples = Vec::new();
    let mut spent = 0.0;
    let start = Instant::now();
    while samples.len() < 5
        || (spent < min_time && start.elapsed() < Duration::from_secs_f64(20.0 * min_time))
    {
        let t = time(n, &mut f)?;
        spent += t;
        samples.push(t / n as f64);
    }
    Ok(tiers_bench::median(&samples))
}

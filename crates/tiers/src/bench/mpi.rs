//! MPI's own numbers beside tiers' in one launch (`mpirun -n 2 tiers bench ranks|put|latency`,
//! with the `mpi` feature).
//!
//! Rows: `mpi` (MPI_Barrier, MPI_Allreduce, MPI_Put + MPI_Win_flush, MPI_Fetch_and_op called
//! directly through rsmpi's bindings), `tiers-mpi` (a tiers world on the mpi engine with every
//! rank its own host, so all traffic goes through MPI) and `tiers-shm` (the same engine
//! multi-tier: ranks of one host talk through shared memory). Every rank runs the same number
//! of iterations (agreed with an allreduce), every sample is the slowest rank's time, and the
//! implementations alternate sample by sample so that a noisy machine slows all alike.

use super::Outcome;
use serde_json::json;
use std::time::Instant;
use tiers_bench::{median, progress, Opts, Report};
use tiers_cluster::engine::mpi::baseline::Mpi;
use tiers_cluster::engine::mpi::{collective_algorithm, MpiConfig, MpiEngine};
use tiers_cluster::{Builder, Op, SegId, Timeout, World};

type Res<T> = tiers_cluster::Result<T>;

/// Samples per implementation and configuration.
const SAMPLES: usize = 7;

/// One implementation under test: runs `n` operations, returns nothing (timed outside).
struct Cand<'a> {
    name: &'static str,
    run: Box<dyn FnMut(u64) + 'a>,
}

fn slowest(mpi: &Mpi, t: f64) -> f64 {
    let mut out = [0.0f64];
    mpi.allreduce_f64(&[t], &mut out, Op::Max);
    out[0]
}

fn timed(mpi: &Mpi, f: &mut dyn FnMut(u64), n: u64) -> f64 {
    mpi.barrier();
    let t0 = Instant::now();
    f(n);
    slowest(mpi, t0.elapsed().as_secs_f64())
}

/// Seconds per operation of each candidate (median of SAMPLES samples, alternating).
fn measure(mpi: &Mpi, min_time: f64, cands: &mut [Cand<'_>]) -> Vec<f64> {
    let target = (min_time / SAMPLES as f64).max(1e-4);
    let mut iters = Vec::new();
    for c in cands.iter_mut() {
        (c.run)(4); // warm up
        let mut n = 1u64;
        loop {
            let t = timed(mpi, &mut *c.run, n);
            if t >= target / 4.0 || n >= 1 << 32 {
                iters.push(((target * n as f64 / t.max(1e-12)) as u64).clamp(1, 1 << 32));
                break;
            }
            n *= 2;
        }
    }
    let mut samples = vec![Vec::new(); cands.len()];
    for _ in 0..SAMPLES {
        for (i, c) in cands.iter_mut().enumerate() {
            let t = timed(mpi, &mut *c.run, iters[i]);
            samples[i].push(t / iters[i] as f64);
        }
    }
    samples.iter().map(|s| median(s)).collect()
}

/// Two worlds on the mpi engine: all through MPI, and multi-tier.
fn worlds() -> Res<(World, World)> {
    let world = |host_local| -> Res<World> {
        let e = MpiEngine::new(MpiConfig {
            host_local,
            ..MpiConfig::from_env()
        })?;
        Ok(Builder::new().wrap(Box::new(e)))
    };
    Ok((world(false)?, world(true)?))
}

/// `ranks`: barrier, allreduce of one f64, fetch_add latency (ns).
fn ranks_report(opts: &Opts, mpi: &Mpi) -> Result<Report, Box<dyn std::error::Error>> {
    let (me, n) = (mpi.rank(), mpi.size());
    let mut rep = Report::new("ranks", "ns", true);
    let (wm, ws) = worlds()?;
    for w in [&wm, &ws] {
        let s = w.segment(SegId(0), 64)?;
        drop(s);
    }
    let win = mpi.window(64)?;
    let peer = (me + 1) % n;
    let hosts = ws.engine().local_size();
    // The limit: half a cache-line round trip between ranks 0 and 1, when they share memory
    // (a barrier or an allreduce of two ranks needs a line to go each way, both at once: one
    // one-way transfer). fetch_add has none:
    // each rank adds to its peer's word, which no one else touches, so no line need move.
    let line = if hosts == n && n >= 2 {
        super::cluster::RankLine::new(&ws)?
    } else {
        None
    };
    let mut limit_cpus = None;
    for op in ["barrier", "allreduce", "fetch_add"] {
        progress(opts, format_args!("ranks: {op}, {n} ranks"));
        let mut cands: Vec<Cand<'_>> = match op {
            "barrier" => vec![
                Cand {
                    name: "mpi",
                    run: Box::new(|k| (0..k).for_each(|_| mpi.barrier())),
                },
                Cand {
                    name: "tiers-mpi",
                    run: Box::new(|k| {
                        (0..k).for_each(|_| wm.barrier(Timeout::Block).expect("barrier"))
                    }),
                },
                Cand {
                    name: "tiers-shm",
                    run: Box::new(|k| {
                        (0..k).for_each(|_| ws.barrier(Timeout::Block).expect("barrier"))
                    }),
                },
            ],
            "allreduce" => {
                let reduce = |w: &World, k: u64| {
                    let mut y = [0.0f64];
                    for i in 0..k {
                        w.allreduce(&[i as f64], &mut y, Op::Sum, Timeout::Block)
                            .expect("allreduce");
                    }
                };
                let (a, b) = (&wm, &ws);
                vec![
                    Cand {
                        name: "mpi",
                        run: Box::new(move |k| {
                            let mut y = [0.0f64];
                            for i in 0..k {
                                mpi.allreduce_f64(&[i as f64], &mut y, Op::Sum);
                            }
                        }),
                    },
                    Cand {
                        name: "tiers-mpi",
                        run: Box::new(move |k| reduce(a, k)),
                    },
                    Cand {
                        name: "tiers-shm",
                        run: Box::new(move |k| reduce(b, k)),
                    },
                ]
            }
            _ => {
                let fa = |w: &World, k: u64| {
                    for _ in 0..k {
                        w.atomic_fetch_add(SegId(0), 0, peer, 1).expect("fetch_add");
                    }
                    // The target answers inside tiers calls (`TIERS_MPI_ONESIDED=messages`), not
                    // inside the harness's MPI_Barrier: the ranks meet in one of tiers' own.
                    w.barrier(Timeout::Block).expect("barrier");
                };
                let (a, b, win) = (&wm, &ws, &win);
                vec![
                    Cand {
                        name: "mpi",
                        run: Box::new(move |k| {
                            for _ in 0..k {
                                win.fetch_add(peer, 0, 1).expect("MPI_Fetch_and_op");
                            }
                        }),
                    },
                    Cand {
                        name: "tiers-mpi",
                        run: Box::new(move |k| fa(a, k)),
                    },
                    Cand {
                        name: "tiers-shm",
                        run: Box::new(move |k| fa(b, k)),
                    },
                ]
            }
        };
        let measured = cands.len();
        if let (Some(l), true) = (&line, op != "fetch_add") {
            cands.push(Cand {
                name: tiers_bench::limit::IMPL,
                run: Box::new(move |k| {
                    if me < 2 {
                        tiers_bench::limit::ping_pong(l.line(), me, k);
                    }
                }),
            });
            limit_cpus = Some(l.cpus);
        }
        let v = measure(mpi, opts.min_time, &mut cands);
        if let Some(t) = v.get(measured) {
            rep.push_limit(
                &[("op", op.into()), ("ranks", json!(n))],
                t * 1e9 / 2.0,
                "half a cache-line round trip between ranks 0 and 1 (they bounce one line of \
                 a mapping they share; one one-way transfer), timed as the other rows",
            );
        }
        for (c, t) in cands.iter().zip(v).take(measured) {
            let row = rep.push(c.name, &[("op", op.into()), ("ranks", json!(n))], t * 1e9);
            let algo = match (c.name, op) {
                ("mpi", "barrier") => "MPI_Barrier",
                ("mpi", "allreduce") => "MPI_Allreduce",
                ("mpi", _) => "MPI_Fetch_and_op + MPI_Win_flush",
                (_, "barrier") => wm_algo(c.name, &wm, &ws, true),
                (_, "allreduce") => wm_algo(c.name, &wm, &ws, false),
                ("tiers-shm", _) if hosts == n => "shared-memory atomic",
                _ => "MPI_Fetch_and_op + MPI_Win_flush",
            };
            row.extra.push(("algorithm".into(), json!(algo)));
        }
    }
    rep.note(format!(
        "{n} ranks, {} per host; MPI thread level provided: {}",
        hosts,
        mpi.thread_level()
    ));
    let cpu = |c: Option<usize>| c.map_or("unpinned".to_string(), |c| format!("cpu {c}"));
    match limit_cpus {
        Some(c) => rep.note(format!(
            "limit: a cache-line round trip between rank 0 ({}) and rank 1 ({})",
            cpu(c[0]),
            cpu(c[1])
        )),
        None => rep.note(format!(
            "limit: none here ({hosts} of {n} ranks on rank 0's host: the ranks share no memory to bounce a line in)"
        )),
    }
    drop(line);
    win.free()?;
    drop((wm, ws));
    Ok(rep)
}

fn wm_algo(name: &str, wm: &World, ws: &World, barrier: bool) -> &'static str {
    let w = if name == "tiers-mpi" { wm } else { ws };
    collective_algorithm(w.engine(), barrier)
}

/// The message sizes of `put`: 8 B to 4 MiB by powers of 4 and 4 KiB.
fn sizes() -> Vec<usize> {
    let mut v: Vec<usize> = (0..)
        .map(|i| 8usize << (2 * i))
        .take_while(|&s| s <= 4 << 20)
        .collect();
    if !v.contains(&4096) {
        v.push(4096);
    }
    v.push(4 << 20);
    v.sort_unstable();
    v.dedup();
    v
}

/// Puts per flush (or per queue wait) at `size` bytes: about 1 MiB in flight, at most 256.
fn batch(size: usize) -> u64 {
    ((1usize << 20) / size).clamp(1, 256) as u64
}

/// `put`: rank 0 writes to rank 1, GB/s by message size.
fn put_report(opts: &Opts, mpi: &Mpi) -> Res<Report> {
    let (me, n) = (mpi.rank(), mpi.size());
    let mut rep = Report::new("put", "GB/s", false);
    if n < 2 {
        rep.note("put needs 2 ranks: mpirun -n 2 tiers bench put");
        return Ok(rep);
    }
    let max = 4 << 20;
    let (wm, ws) = worlds()?;
    let _sm = wm.segment(SegId(0), max)?;
    let _ss = ws.segment(SegId(0), max)?;
    let win = mpi.window(max)?;
    let src = vec![7u8; max];
    for size in sizes() {
        progress(opts, format_args!("put: {size} bytes"));
        let b = batch(size);
        let tiers = |w: &World, k: u64| {
            if me == 0 {
                let q = w.queue(0).expect("queue");
                for i in 0..k {
                    q.write(SegId(0).at(0), SegId(0).on(1, 0), size)
                        .expect("write");
                    if (i + 1) % b == 0 {
                        q.wait(Timeout::Block).expect("wait");
                    }
                }
                q.wait(Timeout::Block).expect("wait");
            }
            // The target applies writes inside tiers calls (`TIERS_MPI_ONESIDED=messages`),
            // not inside the harness's MPI_Barrier: the ranks meet in one of tiers' own.
            w.barrier(Timeout::Block).expect("barrier");
        };
        let (a, c, win, src) = (&wm, &ws, &win, &src);
        // The limit's destination, allocated (and faulted in) outside its timing.
        let mut dst = vec![0u8; size];
        let mut cands = vec![
            Cand {
                name: "mpi",
                run: Box::new(move |k| {
                    if me != 0 {
                        return;
                    }
                    for i in 0..k {
                        // SAFETY: src is neither changed nor freed before the flush below.
                        unsafe { win.put(&src[..size], 1, 0) }.expect("MPI_Put");
                        if (i + 1) % b == 0 {
                            win.flush(1).expect("flush");
                        }
                    }
                    win.flush(1).expect("flush");
                }),
            },
            Cand {
                name: "tiers-mpi",
                run: Box::new(move |k| tiers(a, k)),
            },
            Cand {
                name: "tiers-shm",
                run: Box::new(move |k| tiers(c, k)),
            },
            Cand {
                name: tiers_bench::limit::IMPL,
                run: Box::new(move |k| {
                    for _ in 0..k {
                        dst.copy_from_slice(&src[..size]);
                        std::hint::black_box(&mut dst);
                    }
                }),
            },
        ];
        let v = measure(mpi, opts.min_time, &mut cands);
        for (c, t) in cands.iter().zip(v) {
            let gbs = size as f64 / t / 1e9;
            if c.name == tiers_bench::limit::IMPL {
                rep.push_limit(
                    &[("bytes", json!(size))],
                    gbs,
                    "memcpy of the same size within rank 0 (one copy, which a put is at best)",
                );
            } else {
                rep.push(c.name, &[("bytes", json!(size))], gbs);
            }
        }
    }
    rep.note(format!(
        "rank 0 writes to rank 1 of {n}; {} ranks on rank 0's host; a flush (queue wait) every ~1 MiB",
        ws.engine().local_size()
    ));
    drop((_sm, _ss));
    win.free()?;
    drop((wm, ws));
    Ok(rep)
}

/// Notification ids and offsets of `latency`'s ping-pong.
const PING: usize = 0;
const PING_AT: usize = 256;

/// One 8-byte ping-pong round trip through a tiers world: rank 0 writes with a notification
/// and waits for the answer; rank 1 waits and answers the same way. Other ranks idle.
fn tiers_ping_pong(w: &World, k: u64) {
    let (me, q) = (w.rank(), w.queue(0).expect("queue"));
    let id = tiers_cluster::Notification { id: PING, value: 1 };
    let (to, from) = match me {
        0 => (1, 0),
        1 => (0, 1),
        _ => {
            w.barrier(Timeout::Block).expect("barrier");
            return;
        }
    };
    for _ in 0..k {
        if me == 1 {
            w.notify_waitsome(SegId(0), PING..PING + 1, Timeout::Block)
                .expect("ping");
            w.notify_reset(SegId(0), PING).expect("reset");
        }
        q.write_notify(
            SegId(0).at(PING_AT * (1 + from)),
            SegId(0).on(to, PING_AT),
            8,
            id,
        )
        .expect("write_notify");
        q.wait(Timeout::Block).expect("wait");
        if me == 0 {
            w.notify_waitsome(SegId(0), PING..PING + 1, Timeout::Block)
                .expect("pong");
            w.notify_reset(SegId(0), PING).expect("reset");
        }
    }
    // Rank 1's last wait needs rank 0 inside a tiers call to answer (`TIERS_MPI_ONESIDED=
    // messages`), not inside the harness's MPI_Barrier.
    w.barrier(Timeout::Block).expect("barrier");
}

/// `latency`: 8 bytes from rank 0 to rank 1. `write`: MPI_Put + MPI_Win_flush against a tiers
/// write and its queue wait (remote completion); `write_notify`: half the round trip of an
/// MPI_Send/MPI_Recv ping-pong against tiers' notified writes. The limit is the cache-line
/// round trip between the two ranks' processors, when they share memory.
fn latency_report(opts: &Opts, mpi: &Mpi) -> Result<Report, Box<dyn std::error::Error>> {
    let (me, n) = (mpi.rank(), mpi.size());
    let mut rep = Report::new("latency", "ns", true);
    if n < 2 {
        rep.note("latency needs 2 ranks: mpirun -n 2 tiers bench latency");
        return Ok(rep);
    }
    let (wm, ws) = worlds()?;
    let _sm = wm.segment(SegId(0), 4096)?;
    let _ss = ws.segment(SegId(0), 4096)?;
    let win = mpi.window(64)?;
    let hosts = ws.engine().local_size();
    // The cache line is shared through /dev/shm; only meaningful when both ranks share it.
    let line = if hosts == n {
        super::cluster::RankLine::new(&ws)?
    } else {
        None
    };
    let src = [7u8; 8];
    let mut buf = [0u8; 8];
    progress(opts, "latency: write, write_notify (8 bytes)");
    let write = |w: &World, k: u64| {
        if me == 0 {
            let q = w.queue(0).expect("queue");
            for _ in 0..k {
                q.write(SegId(0).at(0), SegId(0).on(1, 64), 8)
                    .expect("write");
                q.wait(Timeout::Block).expect("wait");
            }
        }
        // See `put_report`: the target answers inside tiers calls.
        w.barrier(Timeout::Block).expect("barrier");
    };
    let (a, c, wr, src, buf) = (&wm, &ws, &win, &src, &mut buf);
    let mut cands: Vec<Cand<'_>> = vec![
        Cand {
            name: "mpi",
            run: Box::new(move |k| {
                if me != 0 {
                    return;
                }
                for _ in 0..k {
                    // SAFETY: src is neither changed nor freed before the flush below.
                    unsafe { wr.put(src, 1, 0) }.expect("MPI_Put");
                    wr.flush(1).expect("MPI_Win_flush");
                }
            }),
        },
        Cand {
            name: "tiers-mpi",
            run: Box::new(move |k| write(a, k)),
        },
        Cand {
            name: "tiers-shm",
            run: Box::new(move |k| write(c, k)),
        },
        Cand {
            name: "mpi",
            run: Box::new(move |k| {
                for _ in 0..k {
                    match me {
                        0 => {
                            mpi.send(src, 1, 1).expect("MPI_Send");
                            mpi.recv(buf, 1, 1).expect("MPI_Recv");
                        }
                        1 => {
                            mpi.recv(buf, 0, 1).expect("MPI_Recv");
                            mpi.send(src, 0, 1).expect("MPI_Send");
                        }
                        _ => return,
                    }
                }
            }),
        },
        Cand {
            name: "tiers-mpi",
            run: Box::new(move |k| tiers_ping_pong(a, k)),
        },
        Cand {
            name: "tiers-shm",
            run: Box::new(move |k| tiers_ping_pong(c, k)),
        },
    ];
    if let Some(l) = &line {
        cands.push(Cand {
            name: tiers_bench::limit::IMPL,
            run: Box::new(move |k| {
                if me < 2 {
                    tiers_bench::limit::ping_pong(l.line(), me, k);
                }
            }),
        });
    }
    let v = measure(mpi, opts.min_time, &mut cands);
    let ops = [
        "write",
        "write",
        "write",
        "write_notify",
        "write_notify",
        "write_notify",
    ];
    for (i, (c, t)) in cands.iter().zip(&v).enumerate().take(ops.len()) {
        let op = ops[i];
        // The ping-pongs report half a round trip.
        let ns = if op == "write" {
            t * 1e9
        } else {
            t * 1e9 / 2.0
        };
        let row = rep.push(
            c.name,
            &[("op", json!(op)), ("bytes", json!(8)), ("ranks", json!(n))],
            ns,
        );
        let algo = match (c.name, op) {
            ("mpi", "write") => "MPI_Put + MPI_Win_flush",
            ("mpi", _) => "MPI_Send/MPI_Recv ping-pong, half round trip",
            (_, "write") => "write + queue wait",
            _ => "write_notify ping-pong, half round trip",
        };
        row.extra.push(("algorithm".into(), json!(algo)));
    }
    let cpu = |c: Option<usize>| c.map_or("unpinned".to_string(), |c| format!("cpu {c}"));
    match (&line, v.get(ops.len())) {
        (Some(l), Some(t)) => {
            rep.push_limit(
                &[
                    ("op", json!("write_notify")),
                    ("bytes", json!(8)),
                    ("ranks", json!(n)),
                ],
                t * 1e9 / 2.0,
                format!(
                    "half of the cache-line round trip (one way, as write_notify) between rank 0 \
                     ({}) and rank 1 ({}): the ranks bounce one line of a mapping they share, \
                     timed as the other rows (median of samples, slowest rank)",
                    cpu(l.cpus[0]),
                    cpu(l.cpus[1])
                ),
            );
        }
        _ => rep.note(format!(
            "limit: none here ({hosts} of {n} ranks on rank 0's host: the ranks share no memory to bounce a line in)"
        )),
    }
    rep.note(format!(
        "rank 0 to rank 1 of {n}; {hosts} ranks on rank 0's host; MPI thread level provided: {}",
        mpi.thread_level()
    ));
    drop(cands);
    drop((_sm, _ss));
    win.free()?;
    drop((wm, ws));
    Ok(rep)
}

/// `latency` under mpirun; rank 0 reports.
pub fn latency(opts: &Opts) -> Outcome {
    let mpi = Mpi::init()?;
    let rep = latency_report(opts, &mpi)?;
    Ok((mpi.rank() == 0).then_some(rep))
}

/// Whether this process was started by an MPI launcher (then `ranks` and `put` run here).
pub fn wanted() -> bool {
    tiers_cluster::engine::mpi::launched()
}

/// `ranks` under mpirun; rank 0 reports.
pub fn ranks(opts: &Opts) -> Outcome {
    let mpi = Mpi::init()?;
    let rep = ranks_report(opts, &mpi)?;
    Ok((mpi.rank() == 0).then_some(rep))
}

/// `put` under mpirun; rank 0 reports.
pub fn put(opts: &Opts) -> Outcome {
    let mpi = Mpi::init()?;
    let rep = put_report(opts, &mpi)?;
    Ok((mpi.rank() == 0).then_some(rep))
}

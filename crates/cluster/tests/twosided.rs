//! Two-sided messaging (`tiers_cluster::twosided`) on the `local` engine (ranks are threads)
//! and the `shm` engine (ranks are processes started by the launcher, which re-runs this test
//! binary with the behaviour to play in `TIERS_TEST_SCENARIO`), each behaviour on 1 to 4 ranks;
//! with the `mpi` feature also under `mpirun -n 2` and `-n 4`, ranks of a host sharing memory
//! and every rank talking through MPI.

use std::time::Duration;
use tiers_cluster::launch::{End, Job};
use tiers_cluster::twosided::{Comm, Options};
use tiers_cluster::{run_local, Error, Health, Op, SegId, Timeout, World};

const SCENARIO: &str = "TIERS_TEST_SCENARIO";
const SEG: SegId = SegId(5);
/// Small slots, so that chunk boundaries come cheap.
const SMALL: Options = Options {
    slots: 3,
    slot_bytes: 96,
};
const PAYLOAD: usize = 96 - 32;

/// A byte of message `i` of (`src`, `dst`, `tag`) at `k`.
fn byte(src: usize, dst: usize, tag: u32, i: usize, k: usize) -> u8 {
    (src * 31 + dst * 17 + tag as usize * 7 + i * 13 + k) as u8
}

fn message(src: usize, dst: usize, tag: u32, i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| byte(src, dst, tag, i, k)).collect()
}

/// A generator of lengths that every rank computes alike.
fn lcg(x: &mut u64) -> u64 {
    *x = x
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *x >> 33
}

/// Messages of three tags to every rank, received with the tags in another order than sent:
/// each (source, tag) arrives in sending order.
fn ordering(w: &World) {
    let c = Comm::with_options(w, SEG, SMALL, Timeout::Block).unwrap();
    let (me, p) = (c.rank(), c.size());
    const N: usize = 20;
    for i in 0..N {
        for d in 0..p {
            for tag in [1u32, 2, 3] {
                let len = (i * 11 + tag as usize * 5) % (3 * PAYLOAD);
                c.send(d, tag, &message(me, d, tag, i, len), Timeout::Block)
                    .unwrap();
            }
        }
    }
    for s in (0..p).rev() {
        for tag in [3u32, 1, 2] {
            for i in 0..N {
                let len = (i * 11 + tag as usize * 5) % (3 * PAYLOAD);
                let got = c.recv_vec(s, tag, Timeout::Block).unwrap();
                assert_eq!(got, message(s, me, tag, i, len), "from {s} tag {tag} #{i}");
            }
        }
    }
    c.barrier(Timeout::Block).unwrap();
}

/// Every length around the chunk boundaries, and a large one, through the ring to the right.
fn sizes(w: &World) {
    let c = Comm::with_options(w, SEG, SMALL, Timeout::Block).unwrap();
    let (me, p) = (c.rank(), c.size());
    let (right, left) = ((me + 1) % p, (me + p - 1) % p);
    let mut lens = vec![0, 1, 2, 10_007];
    for k in 1..=4 {
        lens.extend([k * PAYLOAD - 1, k * PAYLOAD, k * PAYLOAD + 1]);
    }
    for (i, &len) in lens.iter().enumerate() {
        c.send(right, 9, &message(me, right, 9, i, len), Timeout::Block)
            .unwrap();
        let mut buf = vec![0u8; len + 3];
        let n = c.recv(left, 9, &mut buf, Timeout::Block).unwrap();
        assert_eq!(n, len);
        assert_eq!(&buf[..n], &message(left, me, 9, i, len)[..], "length {len}");
    }
    // The default options, large messages.
    let d = Comm::new(w, SegId(6), Timeout::Block).unwrap();
    for len in [32 * 1024 - 33, 32 * 1024 - 32, 32 * 1024 - 31, 3 << 20] {
        d.send(right, 1, &message(me, right, 1, len, len), Timeout::Block)
            .unwrap();
        let got = d.recv_vec(left, 1, Timeout::Block).unwrap();
        assert_eq!(got, message(left, me, 1, len, len), "length {len}");
    }
    d.barrier(Timeout::Block).unwrap();
    c.barrier(Timeout::Block).unwrap();
}

/// Allreduce of each type and operation against the values every rank can compute.
fn reductions(w: &World) {
    let c = Comm::new(w, SEG, Timeout::Block).unwrap();
    let (me, p) = (c.rank(), c.size());
    let ranks = 0..p as u64;
    let u: Vec<u64> = (0..5).map(|i| me as u64 * 1000 + i).collect();
    let mut out = vec![0u64; 5];
    for (op, want) in [
        (Op::Sum, ranks.clone().map(|r| r * 1000).sum::<u64>()),
        (Op::Min, 0),
        (Op::Max, (p as u64 - 1) * 1000),
    ] {
        c.allreduce(&u, &mut out, op, Timeout::Block).unwrap();
        let extra = if op == Op::Sum { p as u64 } else { 1 };
        for (i, o) in out.iter().enumerate() {
            assert_eq!(*o, want + i as u64 * extra, "{op:?} u64");
        }
    }
    let x = [-(me as i64) - 1, me as i64 * 3];
    let mut o = [0i64; 2];
    c.allreduce(&x, &mut o, Op::Min, Timeout::Block).unwrap();
    assert_eq!(o, [-(p as i64), 0]);
    c.allreduce(&x, &mut o, Op::Sum, Timeout::Block).unwrap();
    let s: i64 = (0..p as i64).sum();
    assert_eq!(o, [-s - p as i64, 3 * s]);
    let f = [0.1 * (me as f64 + 1.0), -(me as f64)];
    let mut g = [0.0f64; 2];
    c.allreduce(&f, &mut g, Op::Sum, Timeout::Block).unwrap();
    let want = (0..p).fold(0.0, |a, r| a + 0.1 * (r as f64 + 1.0));
    assert_eq!(g[0].to_bits(), want.to_bits(), "float sum in rank order");
    c.allreduce(&f, &mut g, Op::Max, Timeout::Block).unwrap();
    assert_eq!(g, [0.1 * p as f64, 0.0]);
    let mut short = [0u64; 4];
    assert!(matches!(
        c.allreduce(&u, &mut short, Op::Sum, Timeout::Block),
        Err(Error::LengthMismatch { .. })
    ));
    c.barrier(Timeout::Block).unwrap();
    if p > 1 {
        // Ranks that disagree on the call (the last rank on the operation, then on the
        // length) all get an error; every message of the call is taken, so the next agreeing
        // call gets right results.
        let last = me == p - 1;
        let op = if last { Op::Max } else { Op::Sum };
        assert!(matches!(
            c.allreduce(&u, &mut out, op, Timeout::Block),
            Err(Error::CollectiveMismatch(_))
        ));
        let n = if last { 4 } else { 5 };
        let r = c.allreduce(&u[..n], &mut out[..n], Op::Sum, Timeout::Block);
        assert!(matches!(r, Err(Error::CollectiveMismatch(_))), "{r:?}");
        c.allreduce(&u, &mut out, Op::Sum, Timeout::Block).unwrap();
        let want = ranks.clone().map(|r| r * 1000).sum::<u64>();
        assert_eq!(out[0], want, "the call after the mismatches");
        // An alltoallv whose own block's counts differ at one rank: that rank is told, the
        // others get their blocks (no rank waits for one that never comes), and the next
        // exchange is in step.
        let counts = vec![1usize; p];
        let mut other = counts.clone();
        if last {
            other[me] = 2;
        }
        let send = vec![7u64; p];
        let mut recv = vec![0u64; other.iter().sum()];
        let r = c.alltoallv(&send, &counts, &mut recv, &other, Timeout::Block);
        if last {
            assert!(matches!(r, Err(Error::LengthMismatch { .. })), "{r:?}");
        } else {
            assert_eq!(r, Ok(()));
            assert_eq!(recv, vec![7u64; p]);
        }
        let mut recv = vec![0u64; p];
        c.alltoallv(&send, &counts, &mut recv, &counts, Timeout::Block)
            .unwrap();
        assert_eq!(recv, vec![7u64; p]);
        c.barrier(Timeout::Block).unwrap();
    }
}

/// Alltoall and alltoallv in many rounds of lengths drawn alike at every rank (zero-length
/// blocks included), each block checked.
fn alltoalls(w: &World) {
    let c = Comm::with_options(w, SEG, SMALL, Timeout::Block).unwrap();
    let (me, p) = (c.rank(), c.size());
    let send: Vec<u32> = (0..p * 7).map(|i| (me * 1000 + i) as u32).collect();
    let mut recv = vec![0u32; p * 7];
    c.alltoall(&send, &mut recv, Timeout::Block).unwrap();
    for s in 0..p {
        for k in 0..7 {
            assert_eq!(recv[s * 7 + k], (s * 1000 + me * 7 + k) as u32);
        }
    }
    let mut seed = 42u64;
    for round in 0..200 {
        // count[s][d]: elements from s to d this round.
        let count: Vec<Vec<usize>> = (0..p)
            .map(|_| (0..p).map(|_| (lcg(&mut seed) % 50) as usize).collect())
            .collect();
        let val = |s: usize, d: usize, k: usize| (round * 7919 + s * 131 + d * 17 + k) as u64;
        let mut send = Vec::new();
        for (d, &n) in count[me].iter().enumerate() {
            send.extend((0..n).map(|k| val(me, d, k)));
        }
        let rc: Vec<usize> = (0..p).map(|s| count[s][me]).collect();
        let mut recv = vec![0u64; rc.iter().sum()];
        c.alltoallv(&send, &count[me], &mut recv, &rc, Timeout::Block)
            .unwrap();
        let mut at = 0;
        for (s, &n) in rc.iter().enumerate() {
            for k in 0..n {
                assert_eq!(recv[at + k], val(s, me, k), "round {round} from {s}");
            }
            at += n;
        }
    }
    let bad = vec![0usize; p + 1];
    assert!(matches!(
        c.alltoallv(&send, &bad, &mut recv, &bad, Timeout::Block),
        Err(Error::LengthMismatch { .. })
    ));
    c.barrier(Timeout::Block).unwrap();
}

/// Many iterations of sends to every rank interleaved with barriers and reductions.
fn stress(w: &World) {
    let c = Comm::with_options(w, SEG, SMALL, Timeout::Block).unwrap();
    let (me, p) = (c.rank(), c.size());
    let mut seed = 7u64;
    let mut total = 0u64;
    for i in 0..300 {
        let len = (lcg(&mut seed) % 400) as usize;
        for d in 0..p {
            c.send(d, i as u32 % 4, &message(me, d, 0, i, len), Timeout::Block)
                .unwrap();
        }
        for s in (0..p).rev() {
            let got = c.recv_vec(s, i as u32 % 4, Timeout::Block).unwrap();
            assert_eq!(got, message(s, me, 0, i, len), "iteration {i} from {s}");
            total += got.len() as u64;
        }
        if i % 50 == 0 {
            c.barrier(Timeout::Block).unwrap();
        }
    }
    let mut all = [0u64];
    c.allreduce(&[total], &mut all, Op::Sum, Timeout::Block)
        .unwrap();
    assert_eq!(all[0], total * p as u64);
    c.flush(Timeout::Block).unwrap();
    c.barrier(Timeout::Block).unwrap();
}

/// Unknown ranks, short buffers (the message stays), timeouts (resumable) and the errors of
/// mismatched collectives.
fn errors(w: &World) {
    let c = Comm::with_options(w, SEG, SMALL, Timeout::Block).unwrap();
    let (me, p) = (c.rank(), c.size());
    assert_eq!(
        c.send(p, 0, b"x", Timeout::Block),
        Err(Error::NoSuchRank { rank: p, size: p })
    );
    let mut buf = [0u8; 4];
    assert_eq!(
        c.recv(p + 3, 0, &mut buf, Timeout::Block),
        Err(Error::NoSuchRank {
            rank: p + 3,
            size: p
        })
    );
    let right = (me + 1) % p;
    let left = (me + p - 1) % p;
    c.send(right, 4, &[7u8; 200], Timeout::Block).unwrap();
    assert_eq!(
        c.recv(left, 4, &mut buf, Timeout::Block),
        Err(Error::BufferTooSmall { need: 200, have: 4 })
    );
    let mut big = [0u8; 256];
    assert_eq!(c.recv(left, 4, &mut big, Timeout::Block), Ok(200));
    assert_eq!(
        c.recv(left, 5, &mut big, Timeout::millis(20)),
        Err(Error::Timeout)
    );
    c.barrier(Timeout::Block).unwrap();
    c.send(right, 5, b"late", Timeout::Block).unwrap();
    assert_eq!(c.recv(left, 5, &mut big, Timeout::Block), Ok(4));
    assert_eq!(&big[..4], b"late");
    // A barrier that times out at one rank, then resumes.
    if p > 1 {
        if me == 0 {
            assert_eq!(c.barrier(Timeout::millis(20)), Err(Error::Timeout));
            let r = c.allreduce(&[1u64], &mut [0u64], Op::Sum, Timeout::Block);
            assert!(matches!(r, Err(Error::CollectiveMismatch(_))), "{r:?}");
            c.send(1, 6, b"go", Timeout::Block).unwrap();
            c.barrier(Timeout::Block).unwrap();
        } else {
            if me == 1 {
                c.recv(0, 6, &mut big, Timeout::Block).unwrap();
            }
            c.barrier(Timeout::Block).unwrap();
        }
    }
    c.barrier(Timeout::Block).unwrap();
}

/// A behaviour every rank plays.
type Behaviour = fn(&World);

/// Ranks that give different ring options are all told so (nothing is exchanged at offsets
/// the receiver does not use), and the segment is free again for a `Comm` of the same options.
fn options(w: &World) {
    if w.size() > 1 {
        let mine = if w.rank() == 0 {
            Options {
                slots: 8,
                slot_bytes: 64,
            }
        } else {
            Options {
                slots: 4,
                slot_bytes: 128,
            }
        };
        match Comm::with_options(w, SEG, mine, Timeout::Block) {
            Err(Error::Setup(m)) => assert!(m.contains("other ring options"), "{m}"),
            other => panic!("rank {}: {:?}", w.rank(), other.map(|_| ())),
        }
    }
    let c = Comm::with_options(w, SEG, SMALL, Timeout::Block).unwrap();
    let mut y = [0u64];
    c.allreduce(&[1u64], &mut y, Op::Sum, Timeout::Block)
        .unwrap();
    assert_eq!(y[0], w.size() as u64);
}

const BEHAVIOURS: &[(&str, Behaviour)] = &[
    ("options", options),
    ("ordering", ordering),
    ("sizes", sizes),
    ("reductions", reductions),
    ("alltoalls", alltoalls),
    ("stress", stress),
    ("errors", errors),
];

/// The last rank dies after a barrier: the others' receive from it fails with `PeerFailed`.
fn peer_dies(w: &World) {
    let c = Comm::new(w, SEG, Timeout::Block).unwrap();
    let (me, p) = (c.rank(), c.size());
    c.barrier(Timeout::Block).unwrap();
    if me == p - 1 {
        // SAFETY: kill has no memory-safety preconditions; this process ends here.
        unsafe { libc::kill(std::process::id() as libc::pid_t, libc::SIGKILL) };
        unreachable!("SIGKILL is not ignored");
    }
    let mut buf = [0u8; 8];
    let r = c.recv(p - 1, 0, &mut buf, Timeout::After(Duration::from_secs(30)));
    assert_eq!(r, Err(Error::PeerFailed(p - 1)));
    assert_eq!(w.health(p - 1), Ok(Health::Failed));
    assert_eq!(
        c.send(p - 1, 0, b"x", Timeout::Block),
        Err(Error::PeerFailed(p - 1))
    );
}

/// The rank side of the shm tests: does nothing in a normal test run.
#[test]
fn child() {
    let Ok(s) = std::env::var(SCENARIO) else {
        return;
    };
    let w = tiers_cluster::init().expect("init");
    assert!(
        matches!(w.engine_name(), "shm" | "mpi"),
        "{}",
        w.engine_name()
    );
    if s == "peer_dies" {
        peer_dies(&w);
        return;
    }
    let (_, f) = BEHAVIOURS
        .iter()
        .find(|(name, _)| *name == s)
        .expect("scenario");
    f(&w);
}

fn on_local(f: fn(&World)) {
    for n in 1..=4 {
        run_local(n, f).unwrap();
    }
}

fn on_shm(name: &str, ranks: std::ops::RangeInclusive<usize>) -> Vec<Vec<End>> {
    let exe = std::env::current_exe().unwrap();
    ranks
        .map(|n| {
            let mut job = Job::new(n, exe.clone())
                .args(["child", "--exact", "--nocapture", "--test-threads=1", "-q"])
                .env(SCENARIO, name)
                .env("TIERS_INIT_TIMEOUT_MS", "120000");
            job.engine = "shm".into();
            job.grace = Duration::from_secs(30);
            job.pin = false;
            job.report = false;
            job.discard_stdout = true;
            job.run().expect("launch").ends
        })
        .collect()
}

macro_rules! behaviours {
    ($($name:ident),*) => {
        mod local {
            $( #[test] fn $name() { super::on_local(super::$name); } )*
        }
        mod shm {
            $( #[test] fn $name() {
                for (i, ends) in super::on_shm(stringify!($name), 1..=4).into_iter().enumerate() {
                    assert_eq!(ends, vec![super::End::Exited(0); i + 1], "{} ranks", i + 1);
                }
            } )*
        }
    };
}
behaviours!(ordering, sizes, reductions, alltoalls, stress, errors, options);

#[test]
fn a_dead_peer_is_reported() {
    for (i, ends) in on_shm("peer_dies", 2..=3).into_iter().enumerate() {
        let n = i + 2;
        let mut want = vec![End::Exited(0); n];
        want[n - 1] = End::Signaled(libc::SIGKILL);
        assert_eq!(ends, want, "{n} ranks");
    }
}

/// Every behaviour in one `mpirun` job per rank count and transport (skipped without `mpirun`).
#[cfg(feature = "mpi")]
#[test]
fn every_behaviour_under_mpirun() {
    let Some(mpirun) = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("mpirun"))
            .find(|p| p.is_file())
    }) else {
        eprintln!("mpirun not found: skipped");
        return;
    };
    let exe = std::env::current_exe().unwrap();
    for n in ["2", "4"] {
        for host_local in ["1", "0"] {
            for (name, _) in BEHAVIOURS {
                let mut c = std::process::Command::new(&mpirun);
                // SAFETY: geteuid has no preconditions.
                if unsafe { libc::geteuid() } == 0 {
                    c.arg("--allow-run-as-root")
                        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
                }
                let status = c
                    .args(["-n", n, "--oversubscribe"])
                    .args(["-x", &format!("TIERS_MPI_HOST_LOCAL={host_local}")])
                    .args(["-x", &format!("{SCENARIO}={name}")])
                    .arg(&exe)
                    .args(["child", "--exact", "--nocapture", "--test-threads=1", "-q"])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .status()
                    .expect("mpirun starts");
                assert!(
                    status.success(),
                    "{name} on {n} ranks, host-local {host_local}"
                );
            }
        }
    }
}

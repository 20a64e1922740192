//! `tiers bench replication [CLASS] [-- RANKS [ENGINE]]`: NPB IS (`tiers is`) on RANKS logical ranks
//! unreplicated, with 2 replicas per rank (`tiers run --replicas 2`), and with 2 replicas of
//! which one (replica 1 of rank 0) is killed with SIGKILL a quarter of a second into the run,
//! and with one (replica 0 of rank 1, the one its peers ask first; with one rank, replica 1 of
//! rank 0) stopped with SIGSTOP then, so that its peers find it out by the replica timeout,
//! alternated run by run. Each value is the time IS's report gives for its ten timed
//! iterations, the median over runs; the ratio of the replicated rows to the unreplicated one
//! is the overhead of replication on this machine (on fewer cores than processes it is mostly
//! the oversubscription).
//!
//! ENGINE is `shm` (default) or `tcp` (the replicas' messages over sockets).
//!
//! Beside IS, the same three rows for an alltoallv loop on `twosided::Comm`
//! ([`ALLTOALLV_ITERS`] exchanges of [`ALLTOALLV_BYTES`] per pair, every block checked: the
//! hidden `tiers bench replication-rank`), the pure communication case where the pull of
//! replicated messages is all there is to measure.
//!
//! `limit`: as `tiers bench is`, ten iterations of three copies of one rank's keys at the
//! memory bandwidth a `memcpy` of them reaches in this run.

use super::Outcome;
use crate::bench::Ctx;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tiers_apps::is::{Class, ITERATIONS};
use tiers_bench::{compare, limit, progress, Candidate, Report};
use tiers_cluster::{twosided::Comm, Op, SegId, Timeout};

/// The row of two unreplicated jobs at once ([`timed_pair`]).
const TWO_JOBS: &str = "tiers R=1, two jobs at once";

/// Bytes per pair of the alltoallv loop.
pub const ALLTOALLV_BYTES: usize = 32 << 10;
/// Exchanges of the alltoallv loop per run.
pub const ALLTOALLV_ITERS: usize = 200;

/// One rank (or replica) of the alltoallv loop (`tiers bench replication-rank -- [BYTES
/// [ITERS]]` under `tiers run`): each iteration fills a block per peer with a pattern of
/// (sender, receiver, iteration), exchanges them with `Comm::alltoallv` and checks every
/// received byte; logical rank 0 prints the slowest rank's seconds and the verification as
/// NPB's reports do, so that the benchmark reads both the same way.
pub(super) fn rank_main(ctx: &Ctx<'_>) -> Outcome {
    let arg = |i: usize, d: usize| -> Result<usize, String> {
        ctx.args.get(i).map_or(Ok(d), |a| {
            a.parse::<usize>()
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| format!("tiers bench replication-rank: {a}: not a positive count"))
        })
    };
    let (bytes, iters) = (arg(0, ALLTOALLV_BYTES)?, arg(1, ALLTOALLV_ITERS)?);
    if bytes > 64 << 20 {
        return Err(format!(
            "tiers bench replication-rank: {bytes} bytes per pair: at most 64 MiB"
        )
        .into());
    }
    let w = tiers_cluster::init()?;
    let patient = Timeout::After(Duration::from_secs(120));
    let c = Comm::new(&w, SegId(9), patient)?;
    let (me, n) = (c.rank(), c.size());
    let counts = vec![bytes; n];
    let total = bytes
        .checked_mul(n)
        .ok_or("tiers bench replication-rank: bytes x ranks overflows")?;
    let (mut send, mut recv) = (vec![0u8; total], vec![0u8; total]);
    let pattern = |from: usize, to: usize, it: usize, i: usize| {
        (from.wrapping_mul(131) ^ to.wrapping_mul(31) ^ it.wrapping_mul(7) ^ i) as u8
    };
    c.barrier(patient)?;
    let t0 = std::time::Instant::now();
    for it in 0..iters {
        for (to, block) in send.chunks_mut(bytes).enumerate() {
            for (i, b) in block.iter_mut().enumerate() {
                *b = pattern(me, to, it, i);
            }
        }
        c.alltoallv(&send, &counts, &mut recv, &counts, patient)?;
        for (from, block) in recv.chunks(bytes).enumerate() {
            if let Some(i) = (0..bytes).find(|&i| block[i] != pattern(from, me, it, i)) {
                return Err(format!(
                    "alltoallv {it}: byte {i} from rank {from} is wrong at rank {me}"
                )
                .into());
            }
        }
    }
    let mut slowest = [0f64];
    c.allreduce(
        &[t0.elapsed().as_secs_f64()],
        &mut slowest,
        Op::Max,
        patient,
    )?;
    if me == 0 {
        outln!(" Time in seconds = {:>24.6}", slowest[0])?;
        outln!(" VERIFICATION SUCCESSFUL")?;
    }
    Ok(None)
}

/// The "Time in seconds" of an NPB-style report.
fn seconds(out: &str) -> Option<f64> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Time in seconds"))
        .and_then(|r| r.trim_start_matches([' ', '=']).trim().parse().ok())
}

/// The pid of the process `launcher` started whose environment has `TIERS_RANK=rank`.
fn rank_pid(launcher: u32, rank: usize) -> Option<i32> {
    let want = format!("TIERS_RANK={rank}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?;
        if ppid.parse::<u32>().ok()? != launcher {
            return None;
        }
        let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        env.split(|&b| b == 0)
            .any(|kv| kv == want.as_bytes())
            .then_some(pid)
    })
}

/// Runs `tiers run` with `args` and returns IS's time; with `fault = Some((process, signal))`,
/// sends `signal` to that process of the job a quarter of a second in (a stopped one is ended
/// by the launcher once every rank has a finished replica). A failed or unverified run is an
/// error.
fn timed(
    exe: &std::path::Path,
    args: &[String],
    fault: Option<(usize, i32)>,
) -> Result<f64, String> {
    let child = spawn(exe, args, None)?;
    if let Some((process, signal)) = fault {
        std::thread::sleep(Duration::from_millis(250));
        if let Some(pid) = rank_pid(child.id(), process) {
            // SAFETY: kill has no memory effects; the pid is a rank of the job just started.
            unsafe { libc::kill(pid, signal) };
        }
    }
    is_seconds(child, args)
}

/// Starts `tiers run` with `args`, its output captured, on `cpus` when given.
fn spawn(
    exe: &std::path::Path,
    args: &[String],
    cpus: Option<Vec<usize>>,
) -> Result<Child, String> {
    let mut cmd = Command::new(exe);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(cpus) = cpus {
        super::run_on(&mut cmd, cpus);
    }
    cmd.spawn().map_err(|e| format!("tiers run: {e}"))
}

/// Waits for the job `child` (started with `args`) and returns IS's time from its report; a
/// failed or unverified run is an error.
fn is_seconds(child: Child, args: &[String]) -> Result<f64, String> {
    let out = child
        .wait_with_output()
        .map_err(|e| format!("tiers run: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !text.contains("VERIFICATION SUCCESSFUL") {
        return Err(format!(
            "tiers run {args:?} failed or did not verify: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    seconds(&text).ok_or_else(|| format!("no time in {text}"))
}

/// Runs two copies of the unreplicated job `args` (given with `--no-pin`) at once, the first
/// on the even and the second on the odd ones of `cpus` (with one rank, where `tiers run
/// --replicas 2` pins the two replicas), and returns the mean of their two IS times. Nothing
/// passes between the two jobs: this is what running every process twice costs on this
/// machine (shared memory bandwidth and caches) without any replication protocol, the floor
/// under the replicated rows.
fn timed_pair(exe: &std::path::Path, args: &[String], cpus: &[usize]) -> Result<f64, String> {
    let half = |h: usize| {
        let part: Vec<usize> = cpus.iter().copied().skip(h).step_by(2).collect();
        if part.is_empty() {
            cpus.to_vec()
        } else {
            part
        }
    };
    let children = [
        spawn(exe, args, Some(half(0)))?,
        spawn(exe, args, Some(half(1)))?,
    ];
    let mut total = 0.0;
    for child in children {
        total += is_seconds(child, args)?;
    }
    Ok(total / 2.0)
}

/// Runs the benchmark (it starts the ranks it needs).
pub(super) fn run(ctx: &Ctx<'_>) -> Outcome {
    let class = Class::parse(ctx.args.first().map_or("W", String::as_str))?;
    let ranks: usize = match ctx.args.get(1) {
        Some(a) => a
            .parse()
            .map_err(|_| format!("tiers bench replication: {a}: not a rank count"))?,
        None => 1,
    };
    if ranks == 0 || !ranks.is_power_of_two() || ranks > 64 {
        return Err(format!(
            "tiers bench replication: {ranks} ranks: IS needs a power of two, here at most 64"
        )
        .into());
    }
    let engine = ctx.args.get(2).map_or("shm", String::as_str);
    if !matches!(engine, "shm" | "tcp") {
        return Err(format!(
            "tiers bench replication: engine {engine:?}: replicas run on shm or tcp"
        )
        .into());
    }
    let exe = std::env::current_exe()?;
    let letter = class.letter().to_string();
    let keys = 1usize << class.params().total_keys_log2;
    let rank_bytes = keys / ranks * 4;
    let mut failure: Option<String> = None;
    let mut r = Report::new("replication", "s", true);
    {
        let fail = std::cell::RefCell::new(&mut failure);
        let job = |replicas: usize, program: &[&str]| -> Vec<String> {
            let mut a: Vec<String> = ["run", "--engine", engine, "-n"].map(String::from).to_vec();
            a.push(ranks.to_string());
            a.push("--replicas".into());
            a.push(replicas.to_string());
            a.push("--".into());
            a.push(exe.to_string_lossy().into());
            a.extend(program.iter().map(|s| s.to_string()));
            a
        };
        // `iters` runs of `one`, their seconds summed; a failed run is recorded and counts 1 s.
        let repeat = |iters: u64, one: &dyn Fn() -> Result<f64, String>| {
            let mut total = 0.0;
            for _ in 0..iters {
                match one() {
                    Ok(s) => total += s,
                    Err(e) => {
                        fail.borrow_mut().get_or_insert(e);
                        total += 1.0;
                    }
                }
            }
            Duration::from_secs_f64(total)
        };
        let run_one = |args: &[String], fault: Option<(usize, i32)>, iters: u64| {
            repeat(iters, &|| timed(&exe, args, fault))
        };
        let cpus = tiers_node::affinity::get().unwrap_or_else(|_| vec![0]);
        let pair = |args: &[String], iters: u64| repeat(iters, &|| timed_pair(&exe, args, &cpus));
        let is = ["is", "--class", letter.as_str()];
        let a2a = ["bench", "replication-rank", "--quiet"];
        let (one, two) = (job(1, &is), job(2, &is));
        // The same unreplicated job, unpinned, for two copies at once on halves of the cores.
        let mut one_free = one.clone();
        one_free.insert(1, "--no-pin".into());
        let pair = &pair;
        let (a_one, a_two) = (job(1, &a2a), job(2, &a2a));
        let (run_one, letter) = (&run_one, &letter);
        // Process 1 is replica 1 of rank 0; process 2 replica 0 of rank 1, the replica its
        // peers ask first.
        let kill = Some((1, libc::SIGKILL));
        let stop = Some((if ranks > 1 { 2 } else { 1 }, libc::SIGSTOP));
        let mut cands = vec![
            Candidate::new("tiers R=1", |iters| {
                progress(&ctx.opts, format!("replication: IS {letter}, R = 1"));
                run_one(&one, None, iters)
            }),
            Candidate::new("tiers R=2", |iters| {
                progress(&ctx.opts, format!("replication: IS {letter}, R = 2"));
                run_one(&two, None, iters)
            }),
            Candidate::new(TWO_JOBS, |iters| {
                progress(
                    &ctx.opts,
                    format!("replication: IS {letter}, two unreplicated jobs at once"),
                );
                pair(&one_free, iters)
            }),
            Candidate::new("tiers R=2, one killed", |iters| {
                progress(
                    &ctx.opts,
                    format!("replication: IS {letter}, R = 2, one replica killed"),
                );
                run_one(&two, kill, iters)
            }),
            Candidate::new("tiers R=2, one stopped", |iters| {
                progress(
                    &ctx.opts,
                    format!("replication: IS {letter}, R = 2, one replica stopped"),
                );
                run_one(&two, stop, iters)
            }),
            Candidate::new("alltoallv R=1", |iters| {
                progress(&ctx.opts, "replication: alltoallv loop, R = 1".to_string());
                run_one(&a_one, None, iters)
            }),
            Candidate::new("alltoallv R=2", |iters| {
                progress(&ctx.opts, "replication: alltoallv loop, R = 2".to_string());
                run_one(&a_two, None, iters)
            }),
            Candidate::new("alltoallv R=2, one killed", |iters| {
                progress(
                    &ctx.opts,
                    "replication: alltoallv loop, R = 2, one replica killed".to_string(),
                );
                run_one(&a_two, kill, iters)
            }),
            Candidate::new("alltoallv R=2, one stopped", |iters| {
                progress(
                    &ctx.opts,
                    "replication: alltoallv loop, R = 2, one replica stopped".to_string(),
                );
                run_one(&a_two, stop, iters)
            }),
        ];
        let mut copy = limit::memcpy(rank_bytes);
        cands.push(Candidate::new(limit::IMPL, move |iters| {
            (copy.run)(iters * 3 * ITERATIONS as u64)
        }));
        // The alltoallv loop's limit: each exchange copies a rank's whole receive buffer once.
        let a2a_bytes = ALLTOALLV_BYTES * ranks;
        let mut a2a_copy = limit::memcpy(a2a_bytes);
        cands.push(Candidate::new("alltoallv limit", move |iters| {
            (a2a_copy.run)(iters * ALLTOALLV_ITERS as u64)
        }));
        let res = compare(ctx.opts.min_time, &mut cands);
        let params = [
            ("class", letter.as_str().into()),
            ("ranks", ranks.into()),
            ("engine", engine.into()),
        ];
        // The alltoallv rows stand apart by their "class".
        let a2a_params = [
            ("class", "alltoallv".into()),
            ("ranks", ranks.into()),
            ("engine", engine.into()),
        ];
        for (c, (median, _)) in cands.iter().zip(&res) {
            if c.name == limit::IMPL {
                r.push_limit(
                    &params,
                    *median,
                    format!(
                        "{ITERATIONS} iterations x 3 copies of one rank's keys ({rank_bytes} B): {}",
                        limit::memcpy_note()
                    ),
                );
            } else if c.name == "alltoallv limit" {
                r.push_limit(
                    &a2a_params,
                    *median,
                    format!(
                        "{ALLTOALLV_ITERS} copies of one rank's receive buffer ({a2a_bytes} B): {}",
                        limit::memcpy_note()
                    ),
                );
            } else if let Some(rest) = c.name.strip_prefix("alltoallv ") {
                r.push(&format!("tiers {rest}"), &a2a_params, *median);
            } else {
                r.push(&c.name, &params, *median);
            }
        }
    }
    if let Some(e) = failure {
        return Err(e.into());
    }
    r.note(format!(
        "alltoallv rows: {ALLTOALLV_ITERS} exchanges of {ALLTOALLV_BYTES} B per pair on twosided::Comm, every block checked, the slowest rank's seconds"
    ));
    r.note(format!(
        "{TWO_JOBS}: two copies of the R=1 job started together, on alternate cores, mean of their IS times: no protocol, only the machine shared; R=2's overhead above it is replication's own"
    ));
    r.note(
        "the kill lands 0.25 s after the launch (or not at all when the job has ended): for small classes that may be before or after the timed iterations",
    );
    r.note(format!(
        "seconds of IS's {ITERATIONS} timed iterations as its report gives them, median over alternated runs; R replicas per rank on the {engine} engine, {} cores here",
        tiers_node::affinity::get().map_or(0, |c| c.len())
    ));
    Ok(Some(r))
}

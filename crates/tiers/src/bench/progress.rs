//! `tiers bench progress [-- RANKS [BYTES]]`: \[Gabriel2010\]'s Table II on the `tcp` engine. How
//! often does the transport's progress engine run for the same alltoallv when the sender
//! pushes its data (`direct`) and when the receiver pulls it (`pull`, receiver-driven as in
//! VolpexMPI), under the eager and the lazy polling policy?
//!
//! Every rank repeats an alltoallv of BYTES (default 32 KiB) per pair, one-sided (segments,
//! queues, notifications), ITERS times per run; ITERS is calibrated (on the slower variant,
//! the same count for both) so that a run lasts about `--min-time` seconds. Each block is filled with a pattern of (sender, receiver, iteration)
//! and every received byte is checked (a wrong one ends the benchmark with an error), so the
//! data really moves and is consumed. One iteration of each variant, at rank `r`:
//!
//! - `direct`: wait until every peer has freed its slot of the previous iteration; fill the
//!   blocks and `write_notify` each into its receiver's slot; wait for the data notification
//!   of every sender and check its block; then tell every sender its slot is free (a
//!   notification; not before all arrived, or a fast sender's next block could land in this
//!   gather); wait for the queue.
//! - `pull`: wait until every peer has taken its block of the previous iteration; fill the
//!   blocks in this rank's own segment (its log) and notify each receiver that its block is
//!   ready; for every ready notification, `read` the block from its sender; wait for the
//!   reads, check the blocks, tell each sender its block was taken (a notification); wait for
//!   the queue.
//!
//! Both variants therefore do the same synchronisation: one notification from sender to
//! receiver per pair (the data's or "ready") and one back ("free" or "taken") that makes
//! reusing the memory safe, and one wait for the queue; the pull adds what a pull is, a read
//! request to the sender and its answer. The back-notifications of the last iteration are
//! waited for inside the timed run, so a run leaves no notification behind.
//!
//! The policies come from `TIERS_PROGRESS`, one job of RANKS tcp ranks per policy (a process
//! joins one tcp world); inside a job the two variants alternate for [`ROUNDS`] runs each and
//! every value is the median over runs. Before and after each run every rank reads
//! `World::transport_stats` (passes of the progress engine: each one `epoll_wait` and what it
//! found) and `World::progress_stats` (the policy's own polls); the counts of a run are summed
//! over ranks and divided by ITERS, the time per alltoallv is the slowest rank's.
//!
//! `limit`: a memcpy of the bytes one rank sends per alltoallv ((RANKS − 1) × BYTES), in
//! this run: the copy a shared-memory alltoallv would need at least.

use super::{Ctx, Outcome};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tiers_bench::{compare, limit, median, progress, Report};
use tiers_cluster::launch::Job;
use tiers_cluster::{Notification, Op, SegId, Timeout, TransportStats, World};

/// Runs of each variant per job, alternated.
pub const ROUNDS: usize = 3;
/// The default bytes per pair (\[Gabriel2010\]'s Table II).
const BYTES: usize = 32 << 10;
/// Where rank 0 of a job writes its runs for the benchmark that started it.
const OUT_ENV: &str = "TIERS_PROGRESS_BENCH_OUT";
/// Iterations of the calibrating run of each variant (also warms the connections up).
const PROBE: u64 = 20;
/// Most ranks: two notification ids per rank must fit in a segment's notifications.
const MAX_RANKS: usize = 64;
/// The longest one wait may take before the run is declared stuck.
const STUCK: Duration = Duration::from_secs(60);
/// Policies, in report order.
const POLICIES: [&str; 2] = ["eager", "lazy"];
/// Variants, in report order.
const VARIANTS: [Variant; 2] = [Variant::Direct, Variant::Pull];

type Res<T> = Result<T, String>;

/// Who moves the blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// The sender writes into the receiver's segment.
    Direct,
    /// The receiver reads from the sender's segment.
    Pull,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Direct => "direct",
            Variant::Pull => "pull",
        }
    }
}

/// The counters of one run, summed over ranks (time: the slowest rank's), and the names
/// they are reported by, in order.
const COUNTS: [&str; 10] = [
    "calls",
    "recv_ready",
    "send_ready",
    "recv_ns",
    "send_ns",
    "world_polls",
    "frames_in",
    "frames_out",
    "bytes_in",
    "bytes_out",
];

fn counts(t: &TransportStats, polls: u64) -> [u64; 10] {
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    [
        t.calls,
        t.recv_ready,
        t.send_ready,
        ns(t.recv_time),
        ns(t.send_time),
        polls,
        t.frames_in,
        t.frames_out,
        t.bytes_in,
        t.bytes_out,
    ]
}

/// Word `k` of the block `sender` sends `receiver` in iteration `iter`: every block of every
/// iteration differs, so a stale or misplaced block is caught.
#[inline]
fn word(sender: usize, receiver: usize, iter: u64, k: usize) -> u64 {
    let x = ((sender as u64) << 48) ^ ((receiver as u64) << 32) ^ iter;
    x.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(17)
        .wrapping_add(k as u64)
}

/// The notification value of iteration `iter` (never 0).
fn value(iter: u64) -> u32 {
    (iter % u64::from(u32::MAX - 1)) as u32 + 1
}

/// One rank's side of the alltoallv: the world, its segment and buffers.
struct Side<'w> {
    w: &'w World,
    seg: tiers_cluster::Segment<'w>,
    me: usize,
    n: usize,
    bytes: usize,
    /// A block as bytes, to fill and to check.
    buf: Vec<u8>,
}

/// Segment 0 of every rank: `n` send blocks (the block for rank `p` at `p * bytes`, the log
/// of the pull), then `n` receive slots (the slot of sender `s` at `(n + s) * bytes`).
/// Notifications `0..n`: data or "ready" from sender `s` (id `s`); `n..2n`: "free" or
/// "taken" from receiver `p` (id `n + p`).
impl<'w> Side<'w> {
    fn send_off(&self, p: usize) -> usize {
        p * self.bytes
    }

    fn recv_off(&self, s: usize) -> usize {
        (self.n + s) * self.bytes
    }

    fn peers(&self) -> impl Iterator<Item = usize> {
        let me = self.me;
        (0..self.n).filter(move |&p| p != me)
    }

    /// Fills the send block for every peer with the pattern of iteration `iter`.
    fn fill(&mut self, iter: u64) -> Res<()> {
        for p in (0..self.n).filter(|&p| p != self.me) {
            for (k, c) in self.buf.chunks_exact_mut(8).enumerate() {
                c.copy_from_slice(&word(self.me, p, iter, k).to_le_bytes());
            }
            self.seg
                .write(p * self.bytes, &self.buf)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Checks the block sender `s` placed in this rank's slot in iteration `iter`.
    fn check(&mut self, s: usize, iter: u64) -> Res<()> {
        let off = self.recv_off(s);
        self.seg
            .read(off, &mut self.buf)
            .map_err(|e| e.to_string())?;
        for (k, c) in self.buf.chunks_exact(8).enumerate() {
            let got = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            let want = word(s, self.me, iter, k);
            if got != want {
                return Err(format!(
                    "rank {}: iteration {iter}: the block from rank {s} has {got:#018x} at byte {}, not {want:#018x}",
                    self.me,
                    8 * k
                ));
            }
        }
        Ok(())
    }

    /// Waits for one notification from every peer among ids `base..base + n` (the id of
    /// peer `p` is `base + p`), each with the value of iteration `iter`; calls `each` with
    /// the peer as each arrives.
    fn gather(
        &mut self,
        base: usize,
        iter: u64,
        mut each: impl FnMut(&mut Self, usize) -> Res<()>,
    ) -> Res<()> {
        let mut seen = vec![false; self.n];
        seen[self.me] = true;
        let want = value(iter);
        let to = Timeout::After(STUCK);
        for _ in 1..self.n {
            let id = self
                .w
                .notify_waitsome(SegId(0), base..base + self.n, to)
                .map_err(|e| format!("rank {}: waiting for notifications: {e}", self.me))?;
            let v = self
                .w
                .notify_reset(SegId(0), id)
                .map_err(|e| e.to_string())?;
            let p = id - base;
            if v != want || seen[p] {
                return Err(format!(
                    "rank {}: notification {id} from rank {p} says {v}, expected {want} once (iteration {iter})",
                    self.me
                ));
            }
            seen[p] = true;
            each(self, p)?;
        }
        Ok(())
    }

    /// `iters` alltoallvs of `v`, the iterations numbered from `first`.
    fn run(&mut self, v: Variant, first: u64, iters: u64) -> Res<()> {
        let e = |e: tiers_cluster::Error| e.to_string();
        let q = self.w.queue(0).map_err(e)?;
        let reads = self.w.queue(1).map_err(e)?;
        let (n, me, b) = (self.n, self.me, self.bytes);
        let to = Timeout::After(STUCK);
        for iter in first..first + iters {
            let note = Notification {
                id: me,
                value: value(iter),
            };
            let back = Notification {
                id: n + me,
                value: value(iter),
            };
            if iter > first {
                self.gather(n, iter - 1, |_, _| Ok(()))?;
            }
            self.fill(iter)?;
            match v {
                Variant::Direct => {
                    for p in self.peers() {
                        let dst = SegId(0).on(p, (n + me) * b);
                        q.write_notify(SegId(0).at(self.send_off(p)), dst, b, note)
                            .map_err(e)?;
                    }
                    // The slots are freed once all arrived: a sender that had every
                    // "free" could otherwise notify its next block into this gather.
                    self.gather(0, iter, |r, s| r.check(s, iter))?;
                    for s in self.peers() {
                        q.notify(s, SegId(0), back).map_err(e)?;
                    }
                }
                Variant::Pull => {
                    for p in self.peers() {
                        q.notify(p, SegId(0), note).map_err(e)?;
                    }
                    self.gather(0, iter, |r, s| {
                        let src = SegId(0).on(s, r.send_off(me));
                        reads.read(SegId(0).at(r.recv_off(s)), src, b).map_err(e)
                    })?;
                    reads.wait(to).map_err(e)?;
                    for s in (0..n).filter(|&s| s != me) {
                        self.check(s, iter)?;
                    }
                    for s in self.peers() {
                        q.notify(s, SegId(0), back).map_err(e)?;
                    }
                }
            }
            q.wait(to).map_err(e)?;
        }
        self.gather(n, first + iters - 1, |_, _| Ok(()))
    }

    /// One timed run: the job's counts summed over ranks and the slowest rank's seconds.
    fn timed(&mut self, v: Variant, first: u64, iters: u64) -> Res<([u64; 10], f64)> {
        let e = |e: tiers_cluster::Error| e.to_string();
        self.w.barrier(patient()).map_err(e)?;
        let t0 = self.w.transport_stats().ok_or("not on the tcp engine")?;
        let p0 = self.w.progress_stats().calls;
        let clock = Instant::now();
        self.run(v, first, iters)?;
        let secs = clock.elapsed().as_secs_f64();
        let t1 = self.w.transport_stats().ok_or("not on the tcp engine")?;
        let p1 = self.w.progress_stats().calls;
        let mine = counts(&t1.since(&t0), p1 - p0);
        let mut sum = [0u64; 10];
        self.w
            .allreduce(&mine, &mut sum, Op::Sum, patient())
            .map_err(e)?;
        let mut slowest = [0f64];
        self.w
            .allreduce(&[secs], &mut slowest, Op::Max, patient())
            .map_err(e)?;
        Ok((sum, slowest[0]))
    }
}

/// Collectives wait at most [`STUCK`] too.
fn patient() -> Timeout {
    Timeout::After(STUCK)
}

/// Parses the bytes per pair: a positive multiple of 8.
fn parse_bytes(a: Option<&String>) -> Res<usize> {
    let Some(a) = a else { return Ok(BYTES) };
    match a.parse::<usize>() {
        Ok(b) if b >= 8 && b % 8 == 0 && b <= 64 << 20 => Ok(b),
        _ => Err(format!(
            "tiers bench progress: {a}: bytes per pair must be a multiple of 8 from 8 to 64 MiB"
        )),
    }
}

/// One rank of a job `run` starts (`tiers bench progress-rank -- BYTES`, under `tiers run
/// --engine tcp` with `TIERS_PROGRESS` set): calibrates ITERS, alternates the variants for
/// [`ROUNDS`] runs each, and rank 0 writes the runs to the file `TIERS_PROGRESS_BENCH_OUT`
/// names.
pub(super) fn rank_main(ctx: &Ctx<'_>) -> Outcome {
    let bytes = parse_bytes(ctx.args.first())?;
    let w = tiers_cluster::init()?;
    if w.transport_stats().is_none() {
        return Err(format!(
            "tiers bench progress-rank runs on the tcp engine, not {}",
            w.engine_name()
        )
        .into());
    }
    let n = w.size();
    if !(2..=MAX_RANKS).contains(&n) {
        return Err(format!("tiers bench progress: {n} ranks: 2 to {MAX_RANKS}").into());
    }
    let seg = w.segment(SegId(0), 2 * n * bytes)?;
    let mut r = Side {
        w: &w,
        seg,
        me: w.rank(),
        n,
        bytes,
        buf: vec![0; bytes],
    };
    // Calibration: the slower variant's probe, the slowest rank's (bit-identical everywhere,
    // so every rank runs the same count).
    let mut iter = 0u64;
    let mut per = 0f64;
    for v in VARIANTS {
        let (_, s) = r.timed(v, iter, PROBE)?;
        iter += PROBE;
        per = per.max(s / PROBE as f64);
    }
    let iters = (ctx.opts.min_time / per.max(1e-9)).clamp(10.0, 1e7) as u64;
    let mut runs = Vec::new();
    for _ in 0..ROUNDS {
        for v in VARIANTS {
            let (c, secs) = r.timed(v, iter, iters)?;
            iter += iters;
            let mut o = serde_json::Map::new();
            o.insert("variant".into(), json!(v.name()));
            o.insert("secs".into(), json!(secs));
            for (k, x) in COUNTS.iter().zip(c) {
                o.insert((*k).into(), json!(x));
            }
            runs.push(Value::Object(o));
        }
    }
    w.barrier(patient())?;
    if w.rank() == 0 {
        let doc = json!({ "iters": iters, "policy": w.progress().name(), "runs": runs });
        let path = std::env::var(OUT_ENV).map_err(|_| format!("{OUT_ENV} is not set"))?;
        std::fs::write(&path, doc.to_string()).map_err(|e| format!("{path}: {e}"))?;
    }
    drop(r);
    drop(w);
    Ok(None)
}

/// Starts a job of `ranks` tcp ranks under `policy` and returns rank 0's document.
fn job(ctx: &Ctx<'_>, ranks: usize, bytes: usize, policy: &str) -> Res<Value> {
    let out = std::env::temp_dir().join(format!(
        "tiers-progress-{}-{policy}.json",
        std::process::id()
    ));
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut job = Job::new(ranks, exe).args([
        "bench".to_string(),
        "progress-rank".into(),
        "--quiet".into(),
        "--min-time".into(),
        ctx.opts.min_time.to_string(),
        "--".into(),
        bytes.to_string(),
    ]);
    job.engine = "tcp".into();
    job.discard_stdout = true;
    // A stuck wait ends its rank after STUCK; the launcher's own limit is a last resort.
    job.timeout = Some(Duration::from_secs_f64(
        300.0 + 4.0 * ROUNDS as f64 * ctx.opts.min_time,
    ));
    job.env.push(("TIERS_PROGRESS".into(), policy.into()));
    job.env.push((OUT_ENV.into(), out.display().to_string()));
    let _ = std::fs::remove_file(&out);
    let res = job
        .run()
        .map_err(|e| format!("tiers bench progress: {e}"))?;
    let text = std::fs::read_to_string(&out);
    let _ = std::fs::remove_file(&out);
    if !res.success() {
        return Err(format!(
            "tiers bench progress: the {policy} job of {ranks} tcp ranks failed: {:?}",
            res.ends
        ));
    }
    let text = text.map_err(|e| format!("tiers bench progress: rank 0 wrote no result: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("tiers bench progress: {e}"))
}

/// Three decimals: the JSON and the table stay readable.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The medians over the runs of `variant` in `doc`: every count per alltoallv, and seconds
/// per alltoallv.
fn medians(doc: &Value, variant: &str) -> Res<(Vec<f64>, f64)> {
    let iters = doc["iters"].as_u64().filter(|&i| i > 0).ok_or("no iters")? as f64;
    let runs: Vec<&Value> = doc["runs"]
        .as_array()
        .ok_or("no runs")?
        .iter()
        .filter(|r| r["variant"] == variant)
        .collect();
    if runs.is_empty() {
        return Err(format!("no {variant} runs"));
    }
    let per = |k: &str| -> Res<f64> {
        let v: Option<Vec<f64>> = runs
            .iter()
            .map(|r| r[k].as_f64().map(|x| x / iters))
            .collect();
        v.map(|v| median(&v)).ok_or_else(|| format!("no {k}"))
    };
    let counts = COUNTS.iter().map(|k| per(k)).collect::<Res<Vec<f64>>>()?;
    Ok((counts, per("secs")?))
}

/// Runs the benchmark (it starts the jobs it needs).
pub(super) fn run(ctx: &Ctx<'_>) -> Outcome {
    let ranks: usize = match ctx.args.first() {
        Some(a) => a
            .parse()
            .map_err(|_| format!("tiers bench progress: {a}: not a rank count"))?,
        None => 2,
    };
    if !(2..=MAX_RANKS).contains(&ranks) {
        return Err(format!("tiers bench progress: {ranks} ranks: 2 to {MAX_RANKS}").into());
    }
    let bytes = parse_bytes(ctx.args.get(1))?;
    let mut r = Report::new("progress", "per alltoallv", true);
    // Two measures of one alltoallv in their own units: progress calls, and microseconds.
    let params = |unit: &str| {
        [
            ("ranks", json!(ranks)),
            ("bytes", json!(bytes)),
            ("op", json!("alltoallv")),
            ("unit", json!(unit)),
        ]
    };
    let mut calls = Vec::new();
    let mut times = Vec::new();
    let mut iters = Vec::new();
    for policy in POLICIES {
        progress(
            &ctx.opts,
            format!("progress: {ranks} tcp ranks, {bytes} B per pair, {policy}"),
        );
        let doc = job(ctx, ranks, bytes, policy)?;
        iters.push(format!("{policy} {}", doc["iters"]));
        for v in VARIANTS {
            let (c, secs) = medians(&doc, v.name())?;
            calls.push((format!("{}-{policy}", v.name()), c));
            times.push((format!("{}-{policy}", v.name()), secs));
        }
    }
    let ix = |k: &str| COUNTS.iter().position(|c| *c == k).expect("a count");
    for (imp, c) in &calls {
        let row = r.push(imp, &params("progress calls"), round3(c[ix("calls")]));
        for (k, scale) in [
            ("recv_ready", 1.0),
            ("send_ready", 1.0),
            ("recv_ns", 1e-3),
            ("send_ns", 1e-3),
            ("world_polls", 1.0),
            ("frames_in", 1.0),
        ] {
            let name = k.replace("_ns", "_us");
            row.extra.push((name, json!(round3(c[ix(k)] * scale))));
        }
    }
    for (imp, secs) in &times {
        r.push(imp, &params("µs"), round3(secs * 1e6));
    }
    let copy = (ranks - 1) * bytes;
    let mut cands = [limit::memcpy(copy)];
    let (lim, _) = compare(ctx.opts.min_time, &mut cands)[0].clone();
    r.push_limit(
        &params("µs"),
        round3(lim * 1e6),
        format!(
            "one rank's share of an alltoallv, (ranks - 1) x bytes = {copy} B: {}",
            limit::memcpy_note()
        ),
    );
    let get = |imp: &str| {
        calls
            .iter()
            .find(|(i, _)| i == imp)
            .map(|(_, c)| c[ix("calls")])
    };
    let mut ratios = Vec::new();
    for policy in POLICIES {
        if let (Some(d), Some(p)) = (
            get(&format!("direct-{policy}")),
            get(&format!("pull-{policy}")),
        ) {
            ratios.push(format!("{policy} {:.2}x", d / p));
        }
    }
    r.note(format!(
        "progress calls direct/pull (the target is at least 10x): {}",
        ratios.join(", ")
    ));
    r.note(format!(
        "op calls: passes of the tcp progress engine (each one epoll_wait and what it found) per alltoallv, summed over the {ranks} ranks; recv_ready / send_ready: passes that found a socket to read / wrote out a backlog; recv_us / send_us: microseconds reading and applying frames / writing frames (at the post and in passes); world_polls: the policy's own polls (each also a pass); frames_in: frames received; op us: microseconds per alltoallv, the slowest rank's"
    ));
    r.note(format!(
        "{bytes} B per pair; median of {ROUNDS} alternated runs of each variant per job, one job per policy (TIERS_PROGRESS); iterations per run: {}; every received block checked against its (sender, receiver, iteration) pattern; {} cores here",
        iters.join(", "),
        tiers_node::affinity::get().map_or(0, |c| c.len())
    ));
    Ok(Some(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_checked() {
        assert_eq!(parse_bytes(None), Ok(BYTES));
        assert_eq!(parse_bytes(Some(&"64".to_string())), Ok(64));
        for bad in ["0", "12", "-8", "x", "134217728"] {
            assert!(parse_bytes(Some(&bad.to_string())).is_err(), "{bad}");
        }
    }

    #[test]
    fn patterns_differ_by_sender_receiver_and_iteration() {
        let w = word(1, 2, 3, 0);
        assert_ne!(w, word(2, 1, 3, 0));
        assert_ne!(w, word(1, 2, 4, 0));
        assert_ne!(w, word(1, 3, 3, 0));
        assert_ne!(w, word(1, 2, 3, 1));
        assert!((0..10).all(|i| value(i) != 0));
        assert_eq!(value(u64::from(u32::MAX - 1)), 1, "wraps past zero");
    }

    #[test]
    fn medians_are_per_alltoallv() {
        let run = |v: &str, calls: u64, secs: f64| {
            let mut o = serde_json::Map::new();
            o.insert("variant".into(), json!(v));
            o.insert("secs".into(), json!(secs));
            for k in COUNTS {
                o.insert(k.into(), json!(calls));
            }
            Value::Object(o)
        };
        let doc = json!({"iters": 10, "runs": [
            run("direct", 100, 1.0), run("pull", 10, 2.0),
            run("direct", 300, 3.0), run("pull", 20, 4.0),
            run("direct", 200, 2.0), run("pull", 30, 6.0),
        ]});
        let (c, s) = medians(&doc, "direct").unwrap();
        assert_eq!((c[0], s), (20.0, 0.2));
        let (c, s) = medians(&doc, "pull").unwrap();
        assert_eq!((c[0], s), (2.0, 0.4));
        assert!(medians(&doc, "other").is_err());
        assert!(medians(&json!({"iters": 0, "runs": []}), "direct").is_err());
    }
}

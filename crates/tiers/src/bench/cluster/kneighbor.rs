//! `tiers bench kneighbor`: \[Mei2010\]'s kNeighbor with k = 3. Every element sends a message to
//! its 3 neighbours on each side and waits for all 6 replies; then the next step. Three ways on
//! the same elements, placed round-robin on 2 workers pinned to the same 2 processors:
//!
//! - `tiers-smp`: one process, the endpoint library (`endpoint::run`) on a pool of 2 workers;
//!   a message between workers goes by pointer into the target worker's inbox (the bypass).
//!   Senders write every byte of the payload and receivers read it, as Charm++'s kNeighbor
//!   does with `TOUCH_MSGDATA 1`.
//! - `tiers-smp-block`: the same with the elements in two blocks, one per worker (Charm++'s
//!   default map: only the messages at the blocks' edges cross workers), touching only the
//!   header byte, as Charm++'s default build does; beside Charm++'s own kNeighbor.
//! - `tiers-smp-nobypass`: one process, 2 workers, and a message between workers goes through
//!   the engine instead: each worker is a rank of the `local` engine and polls its own
//!   mailbox. No progress thread: it differs from `tiers-smp` in the route only.
//! - `tiers-process`: 2 processes of one worker each (shm engine), each worker polling its own
//!   mailbox; a payload is copied twice (into the target's mailbox, out of it).
//!
//! The two engine routes run the benchmark's own loop ([`MailboxRank`]): `endpoint::run`
//! gives a rank with one worker a progress thread that shares the worker's core (a context
//! switch every hop) and copies a payload four times, which measured the library's progress
//! thread rather than the route. A message to an element of the same worker moves by pointer
//! in every variant.
//!
//! When `CHARM_DIR` points at a Charm++ build, its own kNeighbor is run beside (see
//! [`charm`]); otherwise a note says it was not.

use super::BenchResult;
use serde_json::json;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use tiers_bench::{median, progress, Opts, Report};
use tiers_cluster::endpoint::{self, Ctx, Delivery, Endpoint, EpId};
use tiers_cluster::launch::Job;
use tiers_cluster::{Error, Op, Result, Timeout, World};
use tiers_node::Pool;

const K: usize = 3;
const ELEMENTS: usize = 64;
const SIZES: &[usize] = &[16, 256, 4096, 16384];
const REQ: u8 = 1;
const REP: u8 = 2;
const OUT_ENV: &str = "TIERS_KNEIGHBOR_OUT";

struct Elem {
    size: usize,
    steps: usize,
    step: usize,
    replies: usize,
    place: Placement,
    /// The payload is written by the sender and read by the receiver (Charm++'s
    /// `TOUCH_MSGDATA 1`); otherwise only the header byte is (its default).
    touch: bool,
    /// Buffers the replies brought back, reused for the next step's requests.
    spare: Vec<Vec<u8>>,
}

/// Where the elements of the ring live, given that the endpoint library puts endpoint `e` on
/// slot `e % slots` (round-robin).
#[derive(Clone, Copy, PartialEq)]
enum Placement {
    /// Element i is endpoint i: neighbours on other workers (2 of every 3 messages cross).
    RoundRobin,
    /// Element i lives on slot i / (n / slots), as Charm++'s default map places an array:
    /// only the messages at the blocks' edges cross workers.
    Block { slots: usize },
}

impl Placement {
    /// The endpoint of element `i` of `n`.
    fn endpoint(self, i: usize, n: usize) -> EpId {
        match self {
            Placement::RoundRobin => i,
            Placement::Block { slots } => {
                let per = n / slots;
                (i % per) * slots + i / per
            }
        }
    }

    /// The element of endpoint `e` of `n`.
    fn element(self, e: EpId, n: usize) -> usize {
        match self {
            Placement::RoundRobin => e,
            Placement::Block { slots } => (e % slots) * (n / slots) + e / slots,
        }
    }
}

/// What a touching sender writes: 32-bit words 0, 1, 2, … (Charm++'s `init`), as long as the
/// largest message.
fn pattern() -> &'static [u8] {
    static P: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let max = SIZES.iter().copied().max().unwrap_or(0);
        (0..max.div_ceil(4) as u32)
            .flat_map(u32::to_ne_bytes)
            .collect()
    })
}

impl Elem {
    fn requests(&mut self, ctx: &mut Ctx<'_>) -> Result<()> {
        let n = ctx.total();
        let me = self.place.element(ctx.id(), n);
        for d in 1..=K {
            for to in [(me + d) % n, (me + n - d % n) % n] {
                let mut m = self.spare.pop().unwrap_or_else(|| vec![0u8; self.size]);
                if self.touch {
                    m.copy_from_slice(&pattern()[..self.size]);
                }
                m[0] = REQ;
                ctx.send(self.place.endpoint(to, n), m)?;
            }
        }
        Ok(())
    }
}

impl Endpoint for Elem {
    fn start(&mut self, ctx: &mut Ctx<'_>) -> Result<()> {
        if self.steps == 0 {
            return ctx.finish();
        }
        self.requests(ctx)
    }

    fn receive(&mut self, ctx: &mut Ctx<'_>, from: EpId, mut data: Vec<u8>) -> Result<()> {
        if data[0] == REQ {
            if self.touch {
                // Charm++'s receiver sums the payload as ints.
                let sum = data
                    .chunks_exact(4)
                    .map(|w| u32::from_ne_bytes(w.try_into().expect("4 bytes")))
                    .fold(0u32, u32::wrapping_add);
                std::hint::black_box(sum);
            }
            data[0] = REP; // the reply travels in the request's buffer
            return ctx.send(from, data);
        }
        self.spare.push(data);
        self.replies += 1;
        if self.replies == 2 * K {
            self.replies = 0;
            self.step += 1;
            if self.step == self.steps {
                return ctx.finish();
            }
            self.requests(ctx)?;
        }
        Ok(())
    }
}

/// Seconds for `steps` steps (the slowest rank's).
fn time_steps(
    w: &World,
    pool: &Pool,
    d: Delivery,
    place: Placement,
    size: usize,
    steps: usize,
) -> Result<f64> {
    w.barrier(Timeout::Block)?;
    let t = Instant::now();
    endpoint::run(w, pool, ELEMENTS, d, |_| Elem {
        size,
        steps,
        step: 0,
        replies: 0,
        place,
        // Round-robin rows stand beside Charm++'s round-robin build, which touches the
        // payload; the block row beside its own map, which does not.
        touch: place == Placement::RoundRobin,
        spare: Vec::with_capacity(2 * K),
    })?;
    let mut m = [0.0f64];
    w.allreduce(
        &[t.elapsed().as_secs_f64()],
        &mut m,
        Op::Max,
        Timeout::Block,
    )?;
    Ok(m[0])
}

/// Microseconds per step of `time(steps)` (seconds, the slowest rank's): calibrate, then the
/// median of 5 runs (all ranks agree on counts, as every rank sees the same slowest time).
fn measure(min_time: f64, mut time: impl FnMut(usize) -> Result<f64>) -> Result<f64> {
    let probe = 20;
    let t = time(probe)?;
    let steps = ((min_time / 5.0) / (t / probe as f64)).clamp(20.0, 1e6) as usize;
    let mut v = Vec::new();
    for _ in 0..5 {
        v.push(time(steps)? / steps as f64 * 1e6);
    }
    Ok(median(&v))
}

/// The trailer of a message between ranks: the target element and the sender (u32 each). At
/// the end, so that a reply leaves in the request's buffer with no copy to make room.
const TRAILER: usize = 8;
/// The target of a rank's last message: all its elements have finished.
const FIN: u32 = u32::MAX;

/// One rank of kNeighbor on the engine route, its one worker polling its own mailbox: no
/// progress thread; a message to an element of this rank moves by pointer, one to another
/// rank is copied into that rank's mailbox and out of it into a receive buffer: two copies.
/// A reply leaves from its receive buffer; when the target's mailbox is full it waits in the
/// outbox with that buffer, and a spare one receives.
struct MailboxRank<'w> {
    w: &'w World,
    size: usize,
    steps: usize,
    /// Per local element (element `rank + i * ranks`): steps done, replies of this step.
    step: Vec<usize>,
    replies: Vec<usize>,
    finished: usize,
    /// FIN messages received from the other ranks.
    fins: usize,
    local: VecDeque<(u32, u32, Vec<u8>)>,
    /// Messages waiting for room in a full mailbox, in order: rank, buffer, length.
    outbox: VecDeque<(usize, Vec<u8>, usize)>,
    /// Receive buffers (each `passive_max` long) not in use.
    spare: Vec<Vec<u8>>,
}

impl<'w> MailboxRank<'w> {
    fn new(w: &'w World, size: usize, steps: usize) -> Self {
        let mine = (w.rank()..ELEMENTS).step_by(w.size()).count();
        MailboxRank {
            w,
            size,
            steps,
            step: vec![0; mine],
            replies: vec![0; mine],
            finished: 0,
            fins: 0,
            local: VecDeque::new(),
            outbox: VecDeque::new(),
            spare: Vec::new(),
        }
    }

    fn home(&self, e: u32) -> usize {
        e as usize % self.w.size()
    }

    /// Sends `bytes` (payload and trailer) to `rank` unless earlier messages wait; whether sent.
    fn try_send(&self, rank: usize, bytes: &[u8]) -> Result<bool> {
        if !self.outbox.is_empty() {
            return Ok(false);
        }
        match self.w.passive_send(rank, bytes, Timeout::Test) {
            Ok(()) => Ok(true),
            Err(Error::Timeout) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Sends the first `len` bytes of `data`, or queues the buffer (no copy) behind earlier
    /// messages.
    fn post(&mut self, rank: usize, data: Vec<u8>, len: usize) -> Result<()> {
        if self.try_send(rank, &data[..len])? {
            self.recycle(data);
        } else {
            self.outbox.push_back((rank, data, len));
        }
        Ok(())
    }

    /// Keeps a receive buffer for the next receive; drops a message's own.
    fn recycle(&mut self, data: Vec<u8>) {
        if data.len() == self.w.passive_max() {
            self.spare.push(data);
        }
    }

    fn flush(&mut self) -> Result<()> {
        while let Some((rank, v, len)) = self.outbox.front() {
            match self.w.passive_send(*rank, &v[..*len], Timeout::Test) {
                Ok(()) => {
                    let (_, v, _) = self.outbox.pop_front().expect("front");
                    self.recycle(v);
                }
                Err(Error::Timeout) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Sends an owned payload from element `from` to element `to`.
    fn send(&mut self, to: u32, from: u32, mut data: Vec<u8>) -> Result<()> {
        let rank = self.home(to);
        if rank == self.w.rank() {
            self.local.push_back((to, from, data));
            return Ok(());
        }
        data.extend_from_slice(&to.to_le_bytes());
        data.extend_from_slice(&from.to_le_bytes());
        let len = data.len();
        self.post(rank, data, len)
    }

    fn requests(&mut self, e: u32) -> Result<()> {
        let n = ELEMENTS as u32;
        for d in 1..=K as u32 {
            for to in [(e + d) % n, (e + n - d % n) % n] {
                // Room for the trailer, as a user would allocate a message to send on.
                let mut m = Vec::with_capacity(self.size + TRAILER);
                m.resize(self.size, 0);
                m[0] = REQ;
                self.send(to, e, m)?;
            }
        }
        Ok(())
    }

    fn all_done(&mut self) -> Result<()> {
        for r in (0..self.w.size()).filter(|&r| r != self.w.rank()) {
            let mut fin = FIN.to_le_bytes().to_vec();
            fin.extend_from_slice(&0u32.to_le_bytes());
            self.post(r, fin, TRAILER)?;
        }
        Ok(())
    }

    fn reply(&mut self, e: u32) -> Result<()> {
        let i = e as usize / self.w.size();
        self.replies[i] += 1;
        if self.replies[i] < 2 * K {
            return Ok(());
        }
        self.replies[i] = 0;
        self.step[i] += 1;
        if self.step[i] < self.steps {
            return self.requests(e);
        }
        self.finished += 1;
        if self.finished == self.step.len() {
            self.all_done()?;
        }
        Ok(())
    }

    /// A message from another rank, the first `len` bytes of `buf` (payload then trailer).
    fn remote(&mut self, mut buf: Vec<u8>, len: usize) -> Result<()> {
        let to = u32::from_le_bytes(buf[len - 8..len - 4].try_into().expect("4 bytes"));
        let from = u32::from_le_bytes(buf[len - 4..len].try_into().expect("4 bytes"));
        if to == FIN {
            self.fins += 1;
        } else if buf[0] == REP {
            self.reply(to)?;
        } else {
            // The reply leaves from the receive buffer: sender and target swap.
            buf[0] = REP;
            buf[len - 8..len - 4].copy_from_slice(&from.to_le_bytes());
            buf[len - 4..len].copy_from_slice(&to.to_le_bytes());
            return self.post(self.home(from), buf, len);
        }
        self.recycle(buf);
        Ok(())
    }

    fn run(mut self) -> Result<()> {
        let (me, ranks) = (self.w.rank(), self.w.size());
        if self.steps == 0 {
            self.finished = self.step.len();
            self.all_done()?;
        } else {
            for e in (me..ELEMENTS).step_by(ranks) {
                self.requests(e as u32)?;
            }
        }
        let max = self.w.passive_max();
        loop {
            self.flush()?;
            while let Some((to, from, mut data)) = self.local.pop_front() {
                if data[0] == REQ {
                    data[0] = REP;
                    self.send(from, to, data)?;
                } else {
                    self.reply(to)?;
                }
            }
            if self.finished == self.step.len() && self.fins == ranks - 1 && self.outbox.is_empty()
            {
                return Ok(());
            }
            // Wait (the engine polls, then sleeps) only with nothing left to send.
            let wait = if self.outbox.is_empty() {
                Timeout::After(Duration::from_millis(1))
            } else {
                Timeout::Test
            };
            let mut buf = self.spare.pop().unwrap_or_else(|| vec![0u8; max]);
            match self.w.passive_receive(&mut buf, wait) {
                Ok((_, len)) => self.remote(buf, len)?,
                Err(Error::Timeout) => {
                    self.spare.push(buf);
                    if !self.outbox.is_empty() {
                        // The target's mailbox is full and ours is empty: let it run (as the
                        // endpoint library does when an inbox is full).
                        std::thread::yield_now();
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Seconds for `steps` steps on the engine route (the slowest rank's).
fn mailbox_steps(w: &World, size: usize, steps: usize) -> Result<f64> {
    w.barrier(Timeout::Block)?;
    let t = Instant::now();
    MailboxRank::new(w, size, steps).run()?;
    let mut m = [0.0f64];
    w.allreduce(
        &[t.elapsed().as_secs_f64()],
        &mut m,
        Op::Max,
        Timeout::Block,
    )?;
    Ok(m[0])
}

/// Rounds of the whole comparison; each value is the median over rounds, so that a noisy
/// phase of a shared machine does not land on one implementation only.
const ROUNDS: usize = 3;

fn process_round(opts: &Opts) -> BenchResult<Vec<f64>> {
    let out = std::env::temp_dir().join(format!(
        "tiers-kneighbor-{}-{}.json",
        std::process::id(),
        tiers_cluster::engine::shm::new_job_id()
    ));
    let exe = std::env::current_exe()?;
    let mut job = Job::new(2, exe).args([
        "bench".to_string(),
        "kneighbor-rank".into(),
        "--quiet".into(),
        "--min-time".into(),
        (opts.min_time / ROUNDS as f64).to_string(),
    ]);
    job.env.push((OUT_ENV.into(), out.display().to_string()));
    let res = job.run()?;
    let text = std::fs::read_to_string(&out);
    let _ = std::fs::remove_file(&out);
    if !res.success() {
        return Err(format!("kneighbor ranks failed: {:?}", res.ends).into());
    }
    Ok(serde_json::from_str(&text?)?)
}

/// `tiers-smp-nobypass` at one size: two ranks of the `local` engine, one thread each, pinned
/// to `cpus` (the smp pool's processors); microseconds per step.
fn nobypass(worlds: &[World], cpus: &[usize], size: usize, min_time: f64) -> BenchResult<f64> {
    let out: Vec<Result<f64>> = std::thread::scope(|s| {
        let hs: Vec<_> = worlds
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let cpu = cpus.get(i).copied();
                s.spawn(move || {
                    if let Some(c) = cpu {
                        let _ = tiers_node::affinity::set(&[c]);
                    }
                    measure(min_time, |steps| mailbox_steps(w, size, steps))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("kneighbor rank thread panicked"))
            .collect()
    });
    let mut v = Vec::new();
    for r in out {
        v.push(r?);
    }
    Ok(v[0])
}

pub(in crate::bench) fn run(opts: &Opts) -> BenchResult {
    let mut report = Report::new("kneighbor", "us/step", true);
    let w = tiers_cluster::Builder::new().local(1)?.remove(0);
    let pool = Pool::builder().threads(2).build()?;
    let worlds = tiers_cluster::Builder::new().local(2)?;
    let cpus = pool.cpus().to_vec();
    let imps = [
        "tiers-smp",
        "tiers-smp-nobypass",
        "tiers-process",
        "tiers-smp-block",
    ];
    let block = Placement::Block {
        slots: w.size() * pool.threads(),
    };
    // samples[imp][size] over rounds
    let mut samples = vec![vec![Vec::new(); SIZES.len()]; imps.len()];
    // The limit: one cache-line round trip between the two workers' cpus per step (every
    // step waits for at least one request and its reply between them, in every placement).
    let pair = tiers_bench::limit::pair(&cpus);
    let mut trips = Vec::new();
    let t = opts.min_time / ROUNDS as f64;
    for round in 0..ROUNDS {
        progress(opts, format!("kneighbor round {}/{ROUNDS}", round + 1));
        if let Some((a, b)) = pair {
            let n = 16 * tiers_bench::limit::BATCH;
            let d = (tiers_bench::limit::round_trip(a, b).run)(n);
            trips.push(d.as_secs_f64() * 1e6 / n as f64);
        }
        for (j, &size) in SIZES.iter().enumerate() {
            samples[0][j].push(measure(t, |steps| {
                let rr = Placement::RoundRobin;
                time_steps(&w, &pool, Delivery::Bypass, rr, size, steps)
            })?);
            samples[3][j].push(measure(t, |steps| {
                time_steps(&w, &pool, Delivery::Bypass, block, size, steps)
            })?);
            samples[1][j].push(nobypass(&worlds, &cpus, size, t)?);
        }
        for (j, v) in process_round(opts)?
            .into_iter()
            .enumerate()
            .take(SIZES.len())
        {
            samples[2][j].push(v);
        }
    }
    let charm = charm::run(opts, &mut report);
    for (j, &size) in SIZES.iter().enumerate() {
        let params = [("bytes", json!(size)), ("elements", json!(ELEMENTS))];
        for (i, imp) in imps.iter().enumerate() {
            report.push(imp, &params, median(&samples[i][j]));
        }
        for (form, tag, per_size) in &charm {
            if let Some(v) = per_size[j] {
                report.push(&format!("charm-{form}{tag}"), &params, v);
            }
        }
        if let Some((a, b)) = pair {
            report.push_limit(
                &params,
                median(&trips),
                format!(
                    "one {} per step: every step waits for at least one request and its reply between the two workers",
                    tiers_bench::limit::round_trip_note(a, b)
                ),
            );
        }
    }
    if pair.is_none() {
        report.note("limit: none on one cpu (nothing crosses between cores)");
    }
    report.note(format!(
        "k = {K}, {ELEMENTS} elements round-robin on 2 workers pinned to cpus {cpus:?} (smp-block: in two blocks, as Charm++'s default map, so only the messages at the blocks' edges cross workers); smp's senders write every payload byte and its receivers read them (Charm++'s TOUCH_MSGDATA 1, as in its rr build), smp-block's touch the header only (Charm++'s default); smp: endpoint::run, one process, messages between workers by pointer; smp-nobypass: the same two threads as ranks of the local engine, messages between them through the engine's mailboxes, each worker polling its own (no progress thread); process: 2 processes of one worker each over shm, each polling its own mailbox (two copies per payload); median of {ROUNDS} rounds"
    ));
    Ok(report)
}

/// One rank of the `tiers-process` variant (started by `run`).
pub(in crate::bench) fn rank_main(opts: &Opts) -> BenchResult<()> {
    let w = tiers_cluster::init()?;
    let mut per = Vec::new();
    for &size in SIZES {
        per.push(measure(opts.min_time, |steps| {
            mailbox_steps(&w, size, steps)
        })?);
    }
    if w.rank() == 0 {
        let path = std::env::var(OUT_ENV)?;
        std::fs::write(path, serde_json::to_string(&per)?)?;
    }
    drop(w);
    std::process::exit(0);
}

/// Charm++'s own kNeighbor (`benchmarks/charm++/kNeighbor`), k = 3 like ours, on 2 PEs with
/// the same element count and sizes, when `CHARM_DIR` names a Charm++ tree or build.
mod charm {
    use super::{ELEMENTS, SIZES};
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use tiers_bench::{progress, Opts, Report};

    /// The variable naming the Charm++ tree (holding `multicore-linux-x86_64/` and
    /// `netlrts-linux-x86_64/` builds) or one build.
    pub const VAR: &str = "CHARM_DIR";
    const FORMS: [&str; 2] = ["multicore-linux-x86_64", "netlrts-linux-x86_64"];
    /// kNeighbor's outer iterations (each is 100 of its steps).
    const ITERS: usize = 20;

    /// The variants of Charm++'s kNeighbor looked for in a build: its own (block mapping: with
    /// 64 elements on 2 PEs only the messages at the block edges cross PEs) and, when built
    /// beside it, `kNeighbor-rr`: the same program with `BLOCKMAPPING 0` (round-robin, as
    /// tiers places its elements, so that most messages cross PEs) and `TOUCH_MSGDATA 1`
    /// (the sender writes the payload, as tiers' senders do).
    const VARIANTS: [(&str, &str); 2] = [("kNeighbor", ""), ("kNeighbor-rr", "-rr")];

    fn binaries(build: &Path) -> Vec<(&'static str, PathBuf)> {
        VARIANTS
            .iter()
            .filter_map(|&(name, tag)| {
                let b = build.join("benchmarks/charm++/kNeighbor").join(name);
                b.is_file().then_some((tag, b))
            })
            .collect()
    }

    /// The time per step from kNeighbor's output, in microseconds.
    pub fn parse(out: &str) -> Option<f64> {
        out.lines()
            .find(|l| l.contains("kNeighbor iteration with msg size"))?
            .split(" is ")
            .nth(1)?
            .trim()
            .trim_end_matches("(us)")
            .trim()
            .parse()
            .ok()
    }

    fn one(form: &str, bin: &Path, size: usize) -> Result<f64, String> {
        let args = [ELEMENTS.to_string(), ITERS.to_string(), size.to_string()];
        let out = if form.starts_with("netlrts") {
            let charmrun = bin.with_file_name("charmrun");
            // charmrun takes its own flags before the program and Charm++'s after it.
            Command::new(charmrun)
                .arg("+p2")
                .arg(bin)
                .args(args)
                .args(["++local", "+setcpuaffinity"])
                .output()
        } else {
            // Pinned like tiers' workers (unpinned runs are slower and jump between levels).
            Command::new(bin)
                .args(["+p2", "+setcpuaffinity"])
                .args(args)
                .output()
        }
        .map_err(|e| format!("{}: {e}", bin.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        parse(&text).ok_or_else(|| {
            format!(
                "{} printed no time per step (status {})",
                bin.display(),
                out.status
            )
        })
    }

    /// Per form measured, its time per step at each of `SIZES` (None where a run failed).
    pub fn run(
        opts: &Opts,
        report: &mut Report,
    ) -> Vec<(&'static str, &'static str, Vec<Option<f64>>)> {
        let Some(dir) = std::env::var_os(VAR).map(PathBuf::from) else {
            report.note(format!(
                "Charm++'s kNeighbor not run: {VAR} is not set (point it at a Charm++ tree with {} builds to run it beside)",
                FORMS.join(" and ")
            ));
            return Vec::new();
        };
        let mut found = Vec::new();
        for form in FORMS {
            let build = dir.join(form);
            let own = dir.file_name().is_some_and(|n| n == form);
            let mut bins = binaries(&build);
            if bins.is_empty() && own {
                bins = binaries(&dir);
            }
            if bins.is_empty() {
                report.note(format!(
                    "Charm++'s kNeighbor ({form}) not run: no {form}/benchmarks/charm++/kNeighbor/kNeighbor under {VAR}={} (build it with make there)",
                    dir.display()
                ));
            }
            found.extend(bins.into_iter().map(|(tag, b)| (form, tag, b)));
        }
        let mut out = Vec::new();
        for (form, tag, bin) in found {
            progress(opts, format!("kneighbor: Charm++ {form}{tag}"));
            let mut per = Vec::new();
            for &size in SIZES {
                match one(form, &bin, size) {
                    Ok(v) => per.push(Some(v)),
                    Err(e) => {
                        report.note(format!("Charm++ {form} at {size} B: {e}"));
                        per.push(None);
                    }
                }
            }
            let what = if tag.is_empty() {
                "its block mapping, payload untouched"
            } else {
                "round-robin mapping, payload written by the sender (BLOCKMAPPING 0, TOUCH_MSGDATA 1)"
            };
            report.note(format!(
                "charm-{form}{tag}: Charm++'s own kNeighbor (k = 3, {what}) on 2 PEs pinned (+setcpuaffinity), {ELEMENTS} elements, {ITERS} x 100 steps, its reported average per step (its byte count excludes its header)"
            ));
            out.push((form, tag, per));
        }
        out
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn reads_the_time_per_step() {
            let out = "Charm++> Running in SMP mode\nkNeighbor program finished!\nTime stats: lowest: 1.0, median: 2.0, highest: 3.0\nThe average time for each 3-kNeighbor iteration with msg size 16 is 12.500000 (us)\n";
            assert_eq!(super::parse(out), Some(12.5));
            assert_eq!(super::parse("nothing"), None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Placement;

    #[test]
    fn blocks_are_contiguous_and_every_element_has_one_endpoint() {
        let n = 64;
        for place in [Placement::RoundRobin, Placement::Block { slots: 2 }] {
            let mut seen = vec![false; n];
            for i in 0..n {
                let e = place.endpoint(i, n);
                assert!(!seen[e], "endpoint {e} given twice");
                seen[e] = true;
                assert_eq!(place.element(e, n), i);
            }
        }
        // The endpoint library puts endpoint e on slot e % 2: a block is one slot.
        let block = Placement::Block { slots: 2 };
        for i in 0..n {
            assert_eq!(block.endpoint(i, n) % 2, i / 32, "element {i}");
        }
        let crossing = (0..n)
            .filter(|&i| block.endpoint(i, n) % 2 != block.endpoint((i + 1) % n, n) % 2)
            .count();
        assert_eq!(crossing, 2, "only the blocks' two edges cross");
    }
}

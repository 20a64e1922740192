//! The launcher: `tiers run -n N [--engine shm|local] [--threads T] [--prefix] -- PROGRAM ARGS`.
//!
//! It sweeps objects left by dead jobs, creates the job's control block, starts the ranks with
//! their environment (see [`env`](mod@crate::env)), pinned to distinct cores when there are enough,
//! forwards their output (optionally prefixed with `[rank]`), and watches them: when one dies
//! it marks the state vector (peers get `PeerFailed`), reports which rank died and how, ends the
//! others after a grace period and fails. Every shared-memory object of the job is removed at
//! the end; children die with the launcher (`PR_SET_PDEATHSIG`), a guardian process then kills
//! what they started (their process groups), and a launcher killed with `kill -9` leaves
//! objects that the next launcher's sweep removes. Every rank leads a process
//! group of its own, and ending a rank signals the whole group, so that what a rank started
//! (a shell's children, say) ends with it.
//!
//! # Replicas
//!
//! With [`Job::replicas`] `R > 1` the job is `n × R` processes: process `p` is replica `p % R`
//! of logical rank `p / R` (environment `TIERS_REPLICA`, `TIERS_REPLICAS`; `TIERS_RANK` and
//! `TIERS_SIZE` stay those of the process, the world underneath `twosided::Comm`'s replicated
//! mode). A replica that dies is reported and marked failed (its peers get `PeerFailed`), and
//! the job goes on as long as every logical rank has a replica that has not failed; when all
//! the replicas of one rank have failed the job ends ([`Stop::Lost`] names the rank). Once
//! every logical rank has a replica that exited with code 0, the replicas still running are
//! redundant and are ended after the grace period (a stopped one would otherwise hold the job).
//!
//! The replicas of a rank write the same lines, so their output is merged line by line: line
//! `i` of a logical rank's standard output (and, apart, of its standard error) is forwarded
//! once, by whichever replica writes it first, and the others' copies are dropped. A replica
//! that dies in the middle of a line loses only that unfinished line, which another replica
//! then writes whole: nothing is lost or duplicated as long as the replicas write the same
//! lines (a line that differs between them, a timing say, comes from one of them, whole).
//! A last line without a newline is dropped in a replicated job (a dying replica's half line
//! cannot be told from it).

mod streams;

pub use streams::resolve;
use streams::{forward_input, input_readable, pump, pump_merged};

use crate::config::{env, LAUNCH_GRACE, LAUNCH_KILL_AFTER, LAUNCH_WATCH};
use crate::engine::shm::{self, JobControl};
use crate::sys;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a rank ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// It exited with this code.
    Exited(i32),
    /// A signal killed it.
    Signaled(i32),
    /// The launcher ended it after another rank failed (or on request).
    Stopped,
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            End::Exited(c) => write!(f, "exit code {c}"),
            End::Signaled(s) => write!(f, "signal {s} ({})", sys::signal_name(s)),
            End::Stopped => f.write_str("ended by the launcher"),
        }
    }
}

impl End {
    /// Whether it exited with code 0.
    pub fn ok(self) -> bool {
        self == End::Exited(0)
    }
}

/// The end of every rank of a job, in rank order (one entry per process).
#[derive(Clone, Debug)]
pub struct Outcome {
    /// How each process ended.
    pub ends: Vec<End>,
    /// The job id.
    pub job: String,
    /// Why the launcher ended the job early, if it did.
    pub stop: Option<Stop>,
    /// Replicas per logical rank (`ends` holds `replicas` entries per rank, replica order).
    pub replicas: usize,
    /// What each entry of `ends` is, for messages: `rank P`, or `replica K of rank L` in a
    /// replicated job (on a host of a `--hosts` list, its ranks in the whole job).
    pub names: Vec<String>,
    /// The entry of `ends` that failed first in time (exited with a code other than 0 or was
    /// killed by a signal, not by the launcher): the cause, where the others' failures may
    /// only be its consequences. `tiers run` exits with its code, as `mpirun` does.
    pub first_failure: Option<usize>,
}

impl Outcome {
    /// Whether every rank exited with code 0; in a replicated job, whether every logical rank
    /// has a replica that exited with code 0.
    pub fn success(&self) -> bool {
        let r = self.replicas.max(1);
        self.stop.is_none() && self.ends.chunks(r).all(|c| c.iter().any(|e| e.ok()))
    }
}

/// Why the launcher ended a job before its ranks finished by themselves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// A rank failed; the others were ended after the grace period.
    Failure,
    /// The job ran past its time limit; these ranks were still running.
    Timeout {
        /// The limit.
        limit: Duration,
        /// Ranks that had not finished.
        running: Vec<usize>,
    },
    /// The launcher received this signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT).
    Signal(i32),
    /// The launcher's output was closed (`tiers run --prefix … | head`).
    OutputClosed,
    /// Every replica of this logical rank failed (a replicated job).
    Lost {
        /// The logical rank.
        rank: usize,
    },
}

pub use crate::config::{MAX_RANKS, MAX_THREADS};

/// The hosts of a `tcp` job that spans several (`tiers run --engine tcp --hosts …`): one
/// launcher runs on each host (started there by whatever starts programs on it: a batch
/// system, `ip netns exec`, a shell), starts that host's ranks, and the launcher of the first
/// host also serves the job's rendezvous. No launcher reaches into another host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hosts {
    /// Every host's address (on which its ranks listen) and its number of ranks, in rank
    /// order: host `k`'s ranks follow those of hosts `0..k`.
    pub hosts: Vec<(String, usize)>,
    /// Which of them this launcher is.
    pub this: usize,
    /// The port of the rendezvous on the first host.
    pub port: u16,
}

impl Hosts {
    /// Parses `ADDR:N,ADDR:N,…` (an address without `:N` holds one rank).
    pub fn parse(list: &str, this: usize, port: u16) -> io::Result<Hosts> {
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        let mut hosts = Vec::new();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            // Named whole ("::1" is not host ":" with 1 rank).
            if item.matches(':').count() > 1 || item.starts_with('[') {
                return Err(invalid(format!(
                    "--hosts: {item:?}: IPv6 addresses are not supported (give an IPv4 address or a host name)"
                )));
            }
            let (addr, n) = match item.rsplit_once(':') {
                Some((a, n)) => (
                    a,
                    n.parse::<usize>()
                        .map_err(|_| invalid(format!("--hosts: {item:?} is not ADDR:RANKS")))?,
                ),
                None => (item, 1),
            };
            if addr.is_empty() || n == 0 {
                return Err(invalid(format!(
                    "--hosts: {item:?} needs an address and at least 1 rank"
                )));
            }
            if n > MAX_RANKS {
                return Err(invalid(format!(
                    "--hosts: {item:?}: at most {MAX_RANKS} ranks per host"
                )));
            }
            if hosts.len() >= MAX_RANKS {
                return Err(invalid(format!("--hosts: more than {MAX_RANKS} hosts")));
            }
            hosts.push((addr.to_string(), n));
        }
        if hosts.is_empty() {
            return Err(invalid("--hosts names no host".into()));
        }
        if this >= hosts.len() {
            return Err(invalid(format!(
                "--host {this}: the list names {} hosts (0..{})",
                hosts.len(),
                hosts.len()
            )));
        }
        if hosts.iter().map(|h| h.1).sum::<usize>() > MAX_RANKS * hosts.len() {
            return Err(invalid("--hosts: too many ranks".into()));
        }
        if port == 0 {
            // Every host's launcher must know where the first one serves the rendezvous.
            return Err(invalid(
                "--port 0 with --hosts: the other hosts could not learn a port picked at random; give the same port to every host's launcher".into(),
            ));
        }
        if let Some((a, _)) = hosts.iter().find(|h| h.0.contains(':')) {
            return Err(invalid(format!(
                "--hosts: {a:?}: IPv6 addresses are not supported (give an IPv4 address or a host name)"
            )));
        }
        Ok(Hosts { hosts, this, port })
    }

    /// Ranks of the whole job.
    pub fn size(&self) -> usize {
        self.hosts.iter().map(|h| h.1).sum()
    }

    /// The first rank of this host.
    pub fn first(&self) -> usize {
        self.hosts[..self.this].iter().map(|h| h.1).sum()
    }

    /// The rendezvous address.
    pub fn root(&self) -> String {
        format!("{}:{}", self.hosts[0].0, self.port)
    }
}

/// A job to launch.
#[derive(Clone, Debug)]
pub struct Job {
    /// Number of ranks.
    pub n: usize,
    /// `shm`, `local` or `tcp`.
    pub engine: String,
    /// Worker threads per rank.
    pub threads: usize,
    /// Prefix output lines with `[rank]`.
    pub prefix: bool,
    /// Time the others get after a failure.
    pub grace: Duration,
    /// Pin ranks to cores.
    pub pin: bool,
    /// Report rank failures on stderr.
    pub report: bool,
    /// Discard the ranks' standard output.
    pub discard_stdout: bool,
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment for every rank.
    pub env: Vec<(String, String)>,
    /// End the job when it runs longer than this.
    pub timeout: Option<Duration>,
    /// Forward the launcher's standard input to rank 0 (as mpirun does); the other ranks
    /// read `/dev/null`. Without it every rank reads `/dev/null`. In a replicated job only
    /// replica 0 of rank 0 gets it.
    pub stdin_to_rank0: bool,
    /// Replicas per logical rank (1: none; see the [module](self) notes). `shm` or `tcp`.
    pub replicas: usize,
    /// With the `tcp` engine across hosts: the job's hosts (then `n` must be this host's
    /// number of ranks). `None`: every rank on this host, listening on loopback.
    pub hosts: Option<Hosts>,
}

impl Job {
    /// A job of `n` shm ranks running `program`.
    pub fn new(n: usize, program: impl Into<PathBuf>) -> Job {
        Job {
            n,
            engine: "shm".into(),
            threads: 1,
            prefix: false,
            grace: LAUNCH_GRACE,
            pin: true,
            report: true,
            discard_stdout: false,
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            timeout: None,
            stdin_to_rank0: false,
            replicas: 1,
            hosts: None,
        }
    }

    /// Processes this launcher starts: one for the `local` engine, this host's share of the
    /// `--hosts` list when the replicas are spread over hosts, else `n × replicas`.
    pub fn processes(&self) -> usize {
        if self.engine == "local" {
            1
        } else if let Some(h) = self.hosts.as_ref().filter(|_| self.spread()) {
            h.hosts[h.this].1
        } else {
            self.n.saturating_mul(self.replicas.max(1))
        }
    }

    /// Whether the replicas of each rank are spread over the hosts of a tcp job (`--hosts`
    /// with `--replicas`): see [`Job::spread_slot`].
    pub fn spread(&self) -> bool {
        self.hosts.is_some() && self.replicas > 1
    }

    /// Spread over hosts: the logical rank and the replica that this host's `r`-th process
    /// runs. The `--hosts` list gives each host a number of processes; taken in list order
    /// they are the job's processes in replica-major order (replica 0 of every rank, then
    /// replica 1 of every rank, …). With at most `n` processes per host no two replicas of a
    /// rank share a host; with R hosts of `n`, host `k` runs replica `k` of every rank.
    pub fn spread_slot(&self, r: usize) -> (usize, usize) {
        let q = self.hosts.as_ref().map_or(0, Hosts::first) + r;
        let n = self.n.max(1);
        (q % n, q / n)
    }

    /// Checks, before anything is created, that this host can hold the job: at most
    /// [`MAX_RANKS`], within the user's process limit, and a control block that fits in the
    /// shared-memory file system. The error says which limit.
    pub fn check_limits(&self) -> io::Result<()> {
        let invalid = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
        if self.n == 0 {
            return invalid("-n must be at least 1".into());
        }
        if self.n > MAX_RANKS {
            return invalid(format!(
                "-n {}: at most {MAX_RANKS} ranks per host (tiers_cluster::launch::MAX_RANKS)",
                self.n
            ));
        }
        // Read as every rank will read them: a value they would refuse is refused here.
        self.job_millis(env::INIT_TIMEOUT_MS)?;
        self.job_millis(env::REPLICA_TIMEOUT_MS)?;
        if self.replicas == 0 || self.replicas > MAX_REPLICAS {
            return invalid(format!(
                "--replicas {}: 1 to {MAX_REPLICAS} replicas per rank",
                self.replicas
            ));
        }
        if self.threads > MAX_THREADS {
            return invalid(format!(
                "--threads {}: at most {MAX_THREADS} threads per rank",
                self.threads
            ));
        }
        if let Some(h) = &self.hosts {
            if self.engine != "tcp" {
                return invalid(format!("--hosts needs the tcp engine, not {}", self.engine));
            }
            if self.replicas <= 1 && h.hosts[h.this].1 != self.n {
                return invalid(format!(
                    "-n {}: --hosts gives host {} {} ranks",
                    self.n, h.this, h.hosts[h.this].1
                ));
            }
        }
        if self.replicas > 1 && !matches!(self.engine.as_str(), "shm" | "tcp") {
            return invalid(format!(
                "--replicas {} needs a process per replica (the shm or tcp engine), not {}",
                self.replicas, self.engine
            ));
        }
        if let Some(h) = self.hosts.as_ref().filter(|_| self.replicas > 1) {
            // The list gives each host its processes (one replica of some ranks each).
            let total = self.n.checked_mul(self.replicas);
            if total != Some(h.size()) || h.hosts.iter().any(|x| x.1 > self.n) {
                return invalid(format!(
                    "-n {} --replicas {} across hosts: --hosts must give the hosts {} processes \
                     in all, at most {} on any host (so that no two replicas of a rank share \
                     one); it gives {} ({})",
                    self.n,
                    self.replicas,
                    total.map_or_else(|| "too many".to_string(), |t| t.to_string()),
                    self.n,
                    h.size(),
                    h.hosts
                        .iter()
                        .map(|x| x.1.to_string())
                        .collect::<Vec<_>>()
                        .join(" + ")
                ));
            }
        }
        if self
            .n
            .checked_mul(self.replicas)
            .is_none_or(|p| p > MAX_RANKS)
        {
            return invalid(format!(
                "-n {} × --replicas {}: at most {MAX_RANKS} processes per host",
                self.n, self.replicas
            ));
        }
        let procs = self.processes();
        if let Some(limit) = process_limit() {
            if procs as u64 >= limit {
                return invalid(format!(
                    "-n {}: the process limit of this user is {limit} (ulimit -u)",
                    self.n
                ));
            }
        }
        if self.engine == "shm" {
            let need = crate::engine::ctl::Ctl::len(procs);
            if let Some(free) = shm_free_bytes() {
                if need as u64 > free {
                    return invalid(format!(
                        "-n {}: the job's control block needs {} MiB of /dev/shm, {} MiB are free",
                        self.n,
                        need >> 20,
                        free >> 20
                    ));
                }
            }
        }
        Ok(())
    }

    /// Sets the arguments.
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, a: I) -> Job {
        self.args = a.into_iter().map(Into::into).collect();
        self
    }

    /// Adds an environment variable for every rank.
    pub fn env(mut self, k: &str, v: &str) -> Job {
        self.env.push((k.into(), v.into()));
        self
    }

    /// Starts the ranks, watches them to the end, cleans up.
    pub fn run(&self) -> io::Result<Outcome> {
        self.check_limits()?;
        shm::sweep_stale();
        let job = shm::new_job_id();
        let procs = self.processes();
        let reps = self.replicas.max(1);
        let spread = self.spread();
        let jc = if self.engine == "shm" {
            Some(JobControl::create(&job, procs)?)
        } else {
            None
        };
        let tcp = if self.engine == "tcp" {
            Some(self.rendezvous()?)
        } else {
            None
        };
        let (first, total) = match &self.hosts {
            Some(h) => (h.first(), h.size()),
            None => (0, self.n),
        };
        let cpus = tiers_node::affinity::get().unwrap_or_default();
        let per = if self.engine == "local" {
            self.n * self.threads.max(1)
        } else {
            self.threads.max(1)
        };
        let pin = self.pin && procs * per <= cpus.len();
        let mut children: Vec<Option<Child>> = Vec::new();
        let mut pids = Vec::new();
        let mut pumps = Vec::new();
        let mut ends: Vec<Option<End>> = vec![None; procs];
        let closed = Arc::new(AtomicBool::new(false));
        // Per logical rank, lines of standard output and of standard error forwarded so far.
        let merged: Vec<[Arc<Mutex<u64>>; 2]> = (0..self.n)
            .map(|_| [Arc::default(), Arc::default()])
            .collect();
        let started = Instant::now();
        // What the launcher's messages call each process.
        let names: Vec<String> = (0..procs).map(|r| self.name(r)).collect();
        // A failure seen while the ranks start (reaped there), kept for the watch below: it
        // is seen only once, and the ranks that started after it must still be ended.
        let mut lost_early: Option<Option<usize>> = None;
        let mut first_failure: Option<usize> = None;
        let read_input = self.stdin_to_rank0 && input_readable();
        let mut inputs = Vec::new();
        for r in 0..procs {
            if sys::termination().is_some() {
                // Interrupted while starting: the ranks not started yet never will be, and
                // the watch below ends the others.
                for e in &mut ends[r..] {
                    *e = Some(End::Stopped);
                }
                children.resize_with(procs, || None);
                pids.resize(procs, 0);
                break;
            }
            // Ranks that already ended are reaped while the others start (looking at every
            // rank at every start would make starting quadratic in the ranks).
            if r % 64 == 0 {
                let reaped = self.reap(&mut children, &mut ends, jc.as_ref(), &pids, false);
                if let Some(lost) = reaped.lost {
                    lost_early.get_or_insert(lost);
                }
                first_failure = first_failure.or(reaped.first_failure);
                self.tell_rendezvous(tcp.as_ref(), &ends);
            }
            let mut cmd = Command::new(&self.program);
            let size = if reps > 1 { procs } else { self.n };
            let global = if reps > 1 && !spread { procs } else { total };
            // Process `p` of the job is replica `p % reps` of rank `p / reps`; spread over
            // hosts, this host's `r`-th process is the one `spread_slot` names.
            let p = self.world_rank(r);
            cmd.args(&self.args)
                .env(env::ENGINE, &self.engine)
                .env(env::JOB, &job)
                .env(env::RANK, p.to_string())
                .env(env::SIZE, global.to_string())
                .env(env::LOCAL_RANK, r.to_string())
                .env(env::LOCAL_SIZE, size.to_string())
                .env(env::THREADS, self.threads.max(1).to_string())
                .env(env::JOB_CPUS, cpus.len().max(1).to_string())
                .envs(self.env.iter().map(|(k, v)| (k, v)));
            if let Some((root, bind)) = tcp.as_ref().map(|t| (&t.root, &t.bind)) {
                cmd.env(env::TCP_ROOT, root).env(env::TCP_BIND, bind);
            }
            if reps > 1 {
                cmd.env(env::REPLICAS, reps.to_string())
                    .env(env::REPLICA, (p % reps).to_string());
            } else {
                // Not the ones of a job this launcher runs in, or of the user's environment.
                cmd.env_remove(env::REPLICAS).env_remove(env::REPLICA);
            }
            if self.prefix || reps > 1 {
                cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            }
            // Rank 0 of the whole job reads the input; replicated, every replica of it on this
            // host does (each host's launcher forwards its own input).
            let logical = match reps {
                1 => p,
                _ if spread => self.spread_slot(r).0,
                _ => r / reps,
            };
            if read_input && logical == 0 {
                cmd.stdin(Stdio::piped());
            } else {
                cmd.stdin(Stdio::null());
            }
            if self.discard_stdout {
                cmd.stdout(Stdio::null());
            }
            let mine: Vec<usize> = if pin {
                cpus[r * per..(r + 1) * per].to_vec()
            } else {
                Vec::new()
            };
            sys::child_setup(&mut cmd, &mine);
            let mut child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => {
                    for c in children.iter_mut().flatten() {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot start {}: {e}", self.program.display()),
                    ));
                }
            };
            if reps > 1 {
                let l = if spread {
                    self.spread_slot(r).0
                } else {
                    r / reps
                };
                let tag = self.prefix.then_some(l);
                if let Some(o) = child.stdout.take() {
                    let (c, m) = (closed.clone(), merged[l][0].clone());
                    pumps.push(std::thread::spawn(move || {
                        pump_merged(o, tag, false, &m, &c)
                    }));
                }
                if let Some(o) = child.stderr.take() {
                    let (c, m) = (closed.clone(), merged[l][1].clone());
                    pumps.push(std::thread::spawn(move || {
                        pump_merged(o, tag, true, &m, &c)
                    }));
                }
            } else if self.prefix {
                if let Some(o) = child.stdout.take() {
                    let c = closed.clone();
                    let g = first + r;
                    pumps.push(std::thread::spawn(move || pump(o, g, false, &c)));
                }
                if let Some(o) = child.stderr.take() {
                    let c = closed.clone();
                    let g = first + r;
                    pumps.push(std::thread::spawn(move || pump(o, g, true, &c)));
                }
            }
            inputs.extend(child.stdin.take());
            pids.push(child.id());
            children.push(Some(child));
        }
        forward_input(inputs);
        // Kills what the ranks started should this launcher be killed outright.
        let guardian = match sys::Guardian::start(&pids) {
            Ok(g) => Some(g),
            Err(e) => {
                if self.report {
                    eprintln!("tiers run: warning: no guardian process ({e}): if this launcher is killed with -9, processes the ranks started may outlive it");
                }
                None
            }
        };
        let mut failed_at: Option<Instant> = None;
        let mut termed_at: Option<Instant> = None;
        let mut stop: Option<Stop> = None;
        while ends.iter().any(Option::is_none) {
            // A closed output comes first: the ranks' SIGPIPE deaths that follow are its doing,
            // not failures.
            let output_closed = closed.load(Ordering::Relaxed);
            if output_closed && stop.is_none() {
                if self.report {
                    eprintln!("tiers run: the output was closed, ending the ranks");
                }
                stop = Some(Stop::OutputClosed);
                failed_at = Some(Instant::now().checked_sub(self.grace).unwrap_or(started));
            }
            let stopping = termed_at.is_some() || output_closed;
            let reaped = self.reap(&mut children, &mut ends, jc.as_ref(), &pids, stopping);
            first_failure = first_failure.or(reaped.first_failure);
            let lost = reaped.lost.or(lost_early.take());
            self.tell_rendezvous(tcp.as_ref(), &ends);
            if let Some(lost) = lost {
                failed_at.get_or_insert_with(Instant::now);
                stop.get_or_insert(match lost {
                    Some(rank) => Stop::Lost { rank },
                    None => Stop::Failure,
                });
            }
            // Every logical rank has a replica that finished: the others are redundant.
            if reps > 1
                && !spread
                && failed_at.is_none()
                && ends
                    .chunks(reps)
                    .all(|c| c.iter().any(|e| e.is_some_and(End::ok)))
            {
                failed_at = Some(Instant::now());
            }
            let now = Instant::now();
            let at_once = now.checked_sub(self.grace).unwrap_or(started);
            if let Some(sig) = sys::termination() {
                if !matches!(stop, Some(Stop::Signal(_))) {
                    if self.report {
                        eprintln!(
                            "tiers run: {} received, ending the ranks",
                            sys::signal_name(sig)
                        );
                    }
                    stop = Some(Stop::Signal(sig));
                    failed_at = Some(at_once);
                }
            }
            if let Some(limit) = self.timeout {
                if stop.is_none() && started.elapsed() >= limit {
                    let running: Vec<usize> = (0..procs).filter(|&r| ends[r].is_none()).collect();
                    if self.report {
                        eprintln!(
                            "tiers run: the job ran past its time limit of {:?}; {} still running, ending them",
                            limit,
                            list_names(&names, &running)
                        );
                    }
                    stop = Some(Stop::Timeout { limit, running });
                    failed_at = Some(at_once);
                }
            }
            if let Some(t) = failed_at {
                if termed_at.is_none() && t.elapsed() >= self.grace {
                    let left: Vec<usize> = (0..procs).filter(|&r| ends[r].is_none()).collect();
                    let failure = matches!(stop, Some(Stop::Failure | Stop::Lost { .. }));
                    if self.report && !left.is_empty() && failure {
                        eprintln!(
                            "tiers run: ending {} after a failure",
                            list_names(&names, &left)
                        );
                    }
                    for &r in &left {
                        sys::signal_group(pids[r], libc::SIGTERM);
                    }
                    termed_at = Some(Instant::now());
                }
            }
            if let Some(t) = termed_at {
                if t.elapsed() >= LAUNCH_KILL_AFTER {
                    for r in (0..procs).filter(|&r| ends[r].is_none()) {
                        sys::signal_group(pids[r], libc::SIGKILL);
                    }
                }
            }
            std::thread::sleep(LAUNCH_WATCH);
        }
        // What the ranks left running (a program in the background of a rank's shell) ends
        // with the job: it would outlive it, and hold the forwarded output open.
        end_leftovers(&pids);
        if let Some(g) = guardian {
            g.release();
        }
        for p in pumps {
            let _ = p.join();
        }
        if let Some(t) = tcp {
            // A report of a replica dead before joining must reach the rendezvous even when
            // this host has nothing left to run.
            for h in t.reports.into_inner().unwrap_or_else(|e| e.into_inner()) {
                let _ = h.join();
            }
            if let Some((server, stop)) = t.server {
                stop.store(true, Ordering::Relaxed);
                // Why the job could not start, when it failed: a job whose ranks all ended
                // well (programs that never join, `--help`) needs no word of it.
                if let Ok(Some(e)) = server.join() {
                    if self.report && ends.iter().any(|e| !e.is_some_and(End::ok)) {
                        eprintln!("tiers run: {e}");
                    }
                }
            }
        }
        drop(jc);
        shm::remove_job(&job);
        Ok(Outcome {
            ends: ends
                .into_iter()
                .map(|e| e.unwrap_or(End::Stopped))
                .collect(),
            job,
            stop,
            replicas: if spread { 1 } else { reps },
            names,
            first_failure,
        })
    }

    /// What messages call this host's `r`-th process: its world rank, or which replica of
    /// which rank it is.
    fn name(&self, r: usize) -> String {
        let reps = self.replicas.max(1);
        match self.world_rank(r) {
            p if reps > 1 => format!("replica {} of rank {}", p % reps, p / reps),
            p => format!("rank {p}"),
        }
    }

    /// The `tcp` job's rendezvous: served here (in a thread) by the launcher of the first
    /// host, on loopback when the job has one host.
    fn rendezvous(&self) -> io::Result<Rendezvous> {
        let (root_host, bind, port, serve) = match &self.hosts {
            Some(h) => (
                h.hosts[0].0.clone(),
                h.hosts[h.this].0.clone(),
                h.port,
                h.this == 0,
            ),
            None => ("127.0.0.1".to_string(), "127.0.0.1".to_string(), 0, true),
        };
        if !serve {
            return Ok(Rendezvous {
                root: format!("{root_host}:{port}"),
                bind,
                server: None,
                dead: (0..self.processes_total())
                    .map(|_| AtomicBool::new(false))
                    .collect(),
                reports: Mutex::default(),
            });
        }
        let listener = std::net::TcpListener::bind((root_host.as_str(), port)).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("tcp rendezvous: cannot listen on {root_host}:{port}: {e}"),
            )
        })?;
        let root = listener.local_addr()?.to_string();
        let size = self.processes_total();
        let deadline = Instant::now() + self.init_wait();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let dead: Arc<[AtomicBool]> = (0..size).map(|_| AtomicBool::new(false)).collect();
        let dead2 = dead.clone();
        let replicas = self.replicas.max(1);
        // A replicated job starts without a replica that a launcher saw die before it joined
        // (spread over hosts, the other hosts' launchers report theirs: `tell_rendezvous`), and
        // without one that has not joined one replica timeout after every rank has a replica
        // in (stopped, or far behind: left behind, as the engines' collectives do); spread over
        // hosts, 10 replica timeouts, for launchers started by hand one after another.
        let timeout = self.replica_timeout();
        let grace = if self.spread() { 10 * timeout } else { timeout };
        let server = std::thread::spawn(move || {
            let absent = crate::engine::tcp::rendezvous::Absent {
                replicas,
                dead: &dead2,
                grace,
            };
            crate::engine::tcp::rendezvous::serve(listener, size, &absent, deadline, &stop2).err()
        });
        Ok(Rendezvous {
            root,
            bind,
            server: Some((server, stop)),
            dead,
            reports: Mutex::default(),
        })
    }

    /// The ranks' own init timeout (`TIERS_INIT_TIMEOUT_MS` as they will see it): how long
    /// the rendezvous waits for them.
    fn init_wait(&self) -> Duration {
        self.job_millis(env::INIT_TIMEOUT_MS)
            .ok()
            .flatten()
            .unwrap_or(crate::config::INIT_TIMEOUT)
    }

    /// Duration variable `key` as the ranks will read it: the job's setting, else the one
    /// they inherit from the launcher.
    fn job_millis(&self, key: &str) -> io::Result<Option<Duration>> {
        let v = self
            .job_env(key)
            .map(str::to_string)
            .or_else(|| std::env::var(key).ok());
        crate::config::parse_millis(key, v.as_deref())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))
    }

    /// The value the job sets for variable `key` (the last setting wins, as in the ranks'
    /// environment).
    fn job_env(&self, key: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The replicas' timeout (`TIERS_REPLICA_TIMEOUT_MS` as the ranks will see it).
    fn replica_timeout(&self) -> Duration {
        self.job_millis(env::REPLICA_TIMEOUT_MS)
            .ok()
            .flatten()
            .unwrap_or(crate::config::REPLICA_TIMEOUT)
    }

    /// Processes in the whole job (every host's).
    fn processes_total(&self) -> usize {
        self.hosts.as_ref().map_or(self.processes(), Hosts::size)
    }

    /// The world rank of this host's `r`-th process: replica `p % R` of rank `p / R`, the one
    /// `spread_slot` names when spread over hosts.
    fn world_rank(&self, r: usize) -> usize {
        if self.spread() {
            let (l, k) = self.spread_slot(r);
            l * self.replicas.max(1) + k
        } else {
            self.hosts.as_ref().map_or(0, Hosts::first) + r
        }
    }

    /// Tells the rendezvous which of this host's processes ended badly (without replicas:
    /// ended at all, since a rank that ended before it joined never will): through the flags
    /// it reads when served here, else by a report to the first host's (a replicated job's
    /// only).
    fn tell_rendezvous(&self, tcp: Option<&Rendezvous>, ends: &[Option<End>]) {
        let Some(t) = tcp else { return };
        let unreplicated = self.replicas <= 1;
        for (r, e) in ends.iter().enumerate() {
            if e.is_some_and(|e| unreplicated || !e.ok()) {
                let p = self.world_rank(r);
                let told = t
                    .dead
                    .get(p)
                    .is_none_or(|d| d.swap(true, Ordering::Relaxed));
                if !told && t.server.is_none() && self.replicas > 1 {
                    // Until the first host's rendezvous would stop waiting for the process
                    // anyway; the launcher waits for the report before it exits.
                    let root = t.root.clone();
                    let deadline =
                        Instant::now() + self.init_wait().min(10 * self.replica_timeout());
                    let h = std::thread::spawn(move || {
                        crate::engine::tcp::rendezvous::report_dead(&root, p, deadline);
                    });
                    t.reports.lock().unwrap_or_else(|e| e.into_inner()).push(h);
                }
            }
        }
    }

    /// Collects the processes that ended since the last call.
    /// `stopping`: the launcher has signalled the ranks, so a death by signal is its doing.
    fn reap(
        &self,
        children: &mut [Option<Child>],
        ends: &mut [Option<End>],
        jc: Option<&JobControl>,
        pids: &[u32],
        stopping: bool,
    ) -> Reaped {
        let reps = self.replicas.max(1);
        let mut failed = None;
        let mut first_failure = None;
        for r in 0..children.len() {
            let Some(c) = children[r].as_mut() else {
                continue;
            };
            let Ok(Some(st)) = c.try_wait() else { continue };
            children[r] = None;
            let end = if stopping && st.signal().is_some() {
                End::Stopped
            } else if let Some(s) = st.signal() {
                End::Signaled(s)
            } else {
                End::Exited(st.code().unwrap_or(-1))
            };
            ends[r] = Some(end);
            if let Some(jc) = jc {
                jc.mark(r, !end.ok());
            }
            if !end.ok() && end != End::Stopped {
                first_failure = first_failure.or(Some(r));
                if self.report {
                    let how = match end {
                        End::Exited(c) => format!("exited with code {c}"),
                        End::Signaled(s) => {
                            format!("was killed by signal {s} ({})", sys::signal_name(s))
                        }
                        End::Stopped => String::new(),
                    };
                    if self.spread() {
                        let (l, k) = self.spread_slot(r);
                        eprintln!(
                            "tiers run: replica {k} of rank {l} (pid {}) {how}; its other replicas run on other hosts",
                            pids[r]
                        );
                    } else if reps > 1 {
                        eprintln!(
                            "tiers run: replica {} of rank {} (pid {}) {how}",
                            r % reps,
                            r / reps,
                            pids[r]
                        );
                    } else {
                        let first = self.hosts.as_ref().map_or(0, Hosts::first);
                        eprintln!("tiers run: rank {} (pid {}) {how}", first + r, pids[r]);
                    }
                }
                if reps == 1 {
                    failed = Some(None);
                    continue;
                }
                if self.spread() {
                    // This host's replica of rank `r` is gone; the rank goes on elsewhere, and
                    // so do this host's other processes.
                    sys::signal_group(pids[r], libc::SIGKILL);
                    continue;
                }
                // What a dead replica started would hold its output open and run on.
                sys::signal_group(pids[r], libc::SIGKILL);
                let l = r / reps;
                let group = &ends[l * reps..(l + 1) * reps];
                let dead = |e: &Option<End>| e.is_some_and(|e| !e.ok());
                if group.iter().all(dead) {
                    if self.report {
                        eprintln!("tiers run: rank {l} lost: all {reps} of its replicas failed");
                    }
                    // The first rank lost is the one the job's end names.
                    failed.get_or_insert(Some(l));
                } else if self.report {
                    let live: Vec<usize> = (0..reps).filter(|&k| !dead(&group[k])).collect();
                    eprintln!("tiers run: rank {l} goes on with replicas {live:?}");
                }
            }
        }
        Reaped {
            lost: failed,
            first_failure,
        }
    }
}

/// What one [`Job::reap`] saw.
struct Reaped {
    /// `Some` when the job has failed: `Some(None)` when a rank failed, `Some(Some(l))` when
    /// every replica of logical rank `l` has (a replicated job, where a replica's failure
    /// alone is not the job's).
    lost: Option<Option<usize>>,
    /// The first process, in the order reaped, that failed by itself.
    first_failure: Option<usize>,
}

/// A `tcp` job's rendezvous as the ranks see it.
struct Rendezvous {
    /// Where the ranks join (`TIERS_TCP_ROOT`).
    root: String,
    /// Where this host's ranks listen (`TIERS_TCP_BIND`).
    bind: String,
    /// The serving thread, on the first host, and its stop flag.
    /// It ends with the job, with why the job could not start if it could not.
    server: Option<(std::thread::JoinHandle<Option<io::Error>>, Arc<AtomicBool>)>,
    /// Per process of the job (its world rank): this launcher saw it end badly (the
    /// rendezvous of a replicated job need not wait for it).
    dead: Arc<[AtomicBool]>,
    /// This host's reports of dead processes to the first host's rendezvous, in flight.
    reports: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// The most replicas of a rank (a log entry of the replicated mode keeps a bit per replica).
pub const MAX_REPLICAS: usize = 64;

/// `names` of the processes `which`, as a message lists them.
fn list_names(names: &[String], which: &[usize]) -> String {
    let v: Vec<&str> = which
        .iter()
        .map(|&r| names.get(r).map_or("?", String::as_str))
        .collect();
    v.join(", ")
}

/// Ends the process groups of ranks that have exited (every rank leads one) where processes
/// remain: `SIGTERM`, then `SIGKILL` to those still there after [`LAUNCH_KILL_AFTER`]. Every
/// leader has been reaped, so a process with a leader's number is another process that took
/// the number: then the group is not the rank's and is left alone (while the rank's group
/// has members, Linux gives its number to no new process).
fn end_leftovers(pids: &[u32]) {
    let ours = |pid: u32| !std::path::Path::new(&format!("/proc/{pid}")).exists();
    let alive = |pid: u32| ours(pid) && sys::signal_group_only(pid, 0);
    let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    if left.is_empty() {
        return;
    }
    for &p in left.iter().filter(|&&p| ours(p)) {
        sys::signal_group_only(p, libc::SIGTERM);
    }
    let t = Instant::now();
    while t.elapsed() < LAUNCH_KILL_AFTER && left.iter().any(|&p| alive(p)) {
        std::thread::sleep(LAUNCH_WATCH);
    }
    for &p in left.iter().filter(|&&p| ours(p)) {
        sys::signal_group_only(p, libc::SIGKILL);
    }
}

/// The user's soft process limit (`ulimit -u`), when there is one.
fn process_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// Free bytes in the shared-memory file system, when it can be asked.
fn shm_free_bytes() -> Option<u64> {
    // SAFETY: statvfs is plain old data, for which all-zero bytes are a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a struct statvfs to fill.
    let ok = unsafe { libc::statvfs(c"/dev/shm".as_ptr(), &mut st) } == 0;
    ok.then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

/// The name of signal `sig` (`SIGINT`, …).
pub fn signal_name(sig: i32) -> &'static str {
    sys::signal_name(sig)
}

/// Makes SIGINT, SIGTERM, SIGHUP and SIGQUIT end the running job cleanly (its ranks stopped, its
/// shared-memory objects removed) instead of killing the launcher outright. A command-line
/// launcher calls this once before [`Job::run`].
pub fn catch_termination() {
    sys::catch_termination();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread_job(n: usize, replicas: usize, list: &str, this: usize) -> Job {
        let mut j = Job::new(n, "/bin/true");
        j.engine = "tcp".into();
        j.replicas = replicas;
        j.hosts = Some(Hosts::parse(list, this, 7470).unwrap());
        j
    }

    /// Every (rank, replica) of the job, by host, as the launchers of `list` would start them.
    fn placement(n: usize, replicas: usize, list: &str, hosts: usize) -> Vec<Vec<(usize, usize)>> {
        (0..hosts)
            .map(|h| {
                let j = spread_job(n, replicas, list, h);
                j.check_limits().unwrap();
                (0..j.processes()).map(|r| j.spread_slot(r)).collect()
            })
            .collect()
    }

    #[test]
    fn spread_replicas_never_share_a_host_and_cover_the_job() {
        // R hosts of n: host k runs replica k of every rank.
        assert_eq!(
            placement(2, 2, "a:2,b:2", 2),
            vec![vec![(0, 0), (1, 0)], vec![(0, 1), (1, 1)]]
        );
        for (n, reps, list, hosts) in [
            (2, 2, "a:1,b:1,c:1,d:1", 4),
            (3, 2, "a:2,b:2,c:2", 3),
            (2, 2, "a:2,b:1,c:1", 3),
            (4, 3, "a:4,b:3,c:3,d:2", 4),
        ] {
            let p = placement(n, reps, list, hosts);
            let mut all: Vec<(usize, usize)> = p.iter().flatten().copied().collect();
            all.sort();
            let want: Vec<(usize, usize)> = (0..n)
                .flat_map(|l| (0..reps).map(move |k| (l, k)))
                .collect();
            assert_eq!(all, want, "{list}: every replica of every rank once");
            for (h, procs) in p.iter().enumerate() {
                let mut ranks: Vec<usize> = procs.iter().map(|x| x.0).collect();
                ranks.dedup();
                assert_eq!(
                    ranks.len(),
                    procs.len(),
                    "{list}: host {h} runs two replicas of a rank"
                );
            }
        }
    }

    #[test]
    fn a_spread_list_of_the_wrong_size_or_too_full_a_host_is_refused() {
        for list in ["a:2,b:1", "a:2,b:2,c:1", "a:3,b:1"] {
            let e = spread_job(2, 2, list, 0).check_limits().unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{list}");
            assert!(
                e.to_string().contains("at most 2 on any host"),
                "{list}: {e}"
            );
        }
    }
}

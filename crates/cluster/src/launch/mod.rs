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

use crate::config::{env, LAUNCH_GRACE, LAUNCH_KILL_AFTER, LAUNCH_WATCH};
use crate::engine::shm::{self, JobControl};
use crate::sys;
use std::io::{self, BufRead, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Arguments of `tiers run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "ranks", default_value_t = 1)]
    pub n: usize,
    /// Engine: `shm` (one process per rank) or `local` (one process, a thread per rank).
    #[arg(long, default_value = "shm", value_parser = ["shm", "local"])]
    pub engine: String,
    /// Node-tier worker threads per rank (passed as TIERS_THREADS; pinning reserves cores).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Prefix every output line with `[rank]`.
    #[arg(long)]
    pub prefix: bool,
    /// Seconds the other ranks get to finish after one has failed.
    #[arg(long, default_value_t = 2.0)]
    pub grace: f64,
    /// Do not pin ranks to cores.
    #[arg(long)]
    pub no_pin: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

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
}

impl Outcome {
    /// Whether every rank exited with code 0.
    pub fn success(&self) -> bool {
        self.ends.iter().all(|e| e.ok())
    }
}

/// A job to launch.
#[derive(Clone, Debug)]
pub struct Job {
    /// Number of ranks.
    pub n: usize,
    /// `shm` or `local`.
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
        }
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
        if self.n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "-n must be at least 1",
            ));
        }
        shm::sweep_stale();
        let job = shm::new_job_id();
        let procs = if self.engine == "local" { 1 } else { self.n };
        let jc = if self.engine == "shm" {
            Some(JobControl::create(&job, self.n)?)
        } else {
            None
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
        for r in 0..procs {
            let mut cmd = Command::new(&self.program);
            cmd.args(&self.args)
                .env(env::ENGINE, &self.engine)
                .env(env::JOB, &job)
                .env(env::RANK, r.to_string())
                .env(env::SIZE, self.n.to_string())
                .env(env::LOCAL_RANK, r.to_string())
                .env(env::LOCAL_SIZE, self.n.to_string())
                .env(env::THREADS, self.threads.max(1).to_string())
                .env(env::JOB_CPUS, cpus.len().max(1).to_string())
                .envs(self.env.iter().map(|(k, v)| (k, v)));
            if self.prefix {
                cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
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
            if self.prefix {
                if let Some(o) = child.stdout.take() {
                    pumps.push(std::thread::spawn(move || pump(o, r, false)));
                }
                if let Some(o) = child.stderr.take() {
                    pumps.push(std::thread::spawn(move || pump(o, r, true)));
                }
            }
            pids.push(child.id());
            children.push(Some(child));
        }
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
        let mut ends: Vec<Option<End>> = vec![None; procs];
        let mut failed_at: Option<Instant> = None;
        let mut termed_at: Option<Instant> = None;
        while ends.iter().any(Option::is_none) {
            for r in 0..procs {
                let Some(c) = children[r].as_mut() else {
                    continue;
                };
                let Ok(Some(st)) = c.try_wait() else { continue };
                children[r] = None;
                let end = if termed_at.is_some() && st.signal().is_some() {
                    End::Stopped
                } else if let Some(s) = st.signal() {
                    End::Signaled(s)
                } else {
                    End::Exited(st.code().unwrap_or(-1))
                };
                ends[r] = Some(end);
                if let Some(jc) = &jc {
                    jc.mark(r, !end.ok());
                }
                if !end.ok() && end != End::Stopped {
                    if self.report {
                        let how = match end {
                            End::Exited(c) => format!("exited with code {c}"),
                            End::Signaled(s) => {
                                format!("was killed by signal {s} ({})", sys::signal_name(s))
                            }
                            End::Stopped => unreachable!(),
                        };
                        eprintln!("tiers run: rank {r} (pid {}) {how}", pids[r]);
                    }
                    failed_at.get_or_insert_with(Instant::now);
                }
            }
            if let Some(sig) = sys::termination() {
                failed_at.get_or_insert(Instant::now() - self.grace);
                if self.report && termed_at.is_none() {
                    eprintln!(
                        "tiers run: {} received, ending the ranks",
                        sys::signal_name(sig)
                    );
                }
            }
            if let Some(t) = failed_at {
                if termed_at.is_none() && t.elapsed() >= self.grace {
                    let left: Vec<usize> = (0..procs).filter(|&r| ends[r].is_none()).collect();
                    if self.report && !left.is_empty() {
                        eprintln!("tiers run: ending ranks {left:?} after a failure");
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
        if let Some(g) = guardian {
            g.release();
        }
        for p in pumps {
            let _ = p.join();
        }
        drop(jc);
        shm::remove_job(&job);
        Ok(Outcome {
            ends: ends.into_iter().map(|e| e.expect("all ended")).collect(),
            job,
        })
    }
}

fn pump(src: impl io::Read, rank: usize, err: bool) {
    let mut r = io::BufReader::new(src);
    let mut line = Vec::new();
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if !line.ends_with(b"\n") {
                    line.push(b'\n');
                }
                let mut buf = format!("[{rank}] ").into_bytes();
                buf.extend_from_slice(&line);
                let _ = if err {
                    io::stderr().lock().write_all(&buf)
                } else {
                    io::stdout().lock().write_all(&buf)
                };
            }
        }
    }
}

/// Finds `prog` like a shell would; `tiers` falls back to the running executable.
fn resolve(prog: &str) -> PathBuf {
    if prog.contains('/') {
        return PathBuf::from(prog);
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&paths) {
            let p = d.join(prog);
            if p.is_file() {
                return p;
            }
        }
    }
    if let Ok(me) = std::env::current_exe() {
        if me.file_name().and_then(|s| s.to_str()) == Some(prog) {
            return me;
        }
    }
    PathBuf::from(prog)
}

/// `tiers run`: launches the job; an error when a rank failed.
pub fn run_cli(a: RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    sys::catch_termination();
    let mut job = Job::new(a.n, resolve(&a.command[0])).args(a.command[1..].iter().cloned());
    job.engine = a.engine;
    job.threads = a.threads.max(1);
    job.prefix = a.prefix;
    job.pin = !a.no_pin;
    if !(a.grace >= 0.0 && a.grace.is_finite()) {
        return Err(format!("--grace must be a number of seconds, not {}", a.grace).into());
    }
    job.grace = Duration::from_secs_f64(a.grace);
    let out = job.run()?;
    if out.success() {
        return Ok(());
    }
    let bad: Vec<String> = out
        .ends
        .iter()
        .enumerate()
        .filter(|(_, e)| !e.ok())
        .map(|(r, e)| match e {
            End::Exited(c) => format!("rank {r}: exit code {c}"),
            End::Signaled(s) => format!("rank {r}: signal {s} ({})", sys::signal_name(*s)),
            End::Stopped => format!("rank {r}: ended by the launcher"),
        })
        .collect();
    Err(format!("job failed ({})", bad.join(", ")).into())
}

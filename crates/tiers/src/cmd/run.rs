//! `tiers run`: the cluster tier's launcher on one host.

use super::Exit;
use std::time::Duration;
use tiers_cluster::launch::{self, End, Job, Stop};

/// Arguments of `tiers run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "ranks", default_value_t = 1)]
    pub n: usize,
    /// Engine: `shm` (one process per rank, shared memory), `local` (one process, a thread
    /// per rank) or `tcp` (one process per rank, sockets: a dead rank is a `PeerFailed` for
    /// the others, and ranks may span hosts with `--hosts`).
    #[arg(long, default_value = "shm", value_parser = ["shm", "local", "tcp"])]
    pub engine: String,
    /// The hosts of a `tcp` job across machines: `ADDR:RANKS,ADDR:RANKS,…` in rank order.
    /// Start one `tiers run --engine tcp --hosts LIST --host K -n RANKS_K` on each host
    /// (ssh, a batch system, `ip netns exec`: whatever starts programs there); the first host's
    /// launcher serves the rendezvous on `--port`.
    #[arg(long)]
    pub hosts: Option<String>,
    /// Which host of `--hosts` this launcher is (0 serves the rendezvous).
    #[arg(long, default_value_t = 0, requires = "hosts")]
    pub host: usize,
    /// The rendezvous port on the first host of `--hosts`.
    #[arg(long, default_value_t = 7470, requires = "hosts")]
    pub port: u16,
    /// Replicas per rank: `-n N --replicas R` starts N·R processes (shm or tcp engine),
    /// replica `TIERS_REPLICA` of logical rank `TIERS_RANK / R`; the job survives a replica's
    /// death as long as every rank keeps one, and each rank's output is written once. With
    /// `--hosts` (tcp), `ADDR:K` gives a host K processes, at most N, N·R in all: taken in list
    /// order they run replica 0 of every rank, then replica 1, …, so no two replicas of a rank
    /// share a host (R hosts of N: host k runs replica k of every rank).
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
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
    /// End the job when it runs longer than this (`90`, `90s`, `500ms`, `2m`, `1h`); the
    /// ranks still running are named and the exit code is 124.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Where the ranks' standard input comes from: `rank0` (the launcher's input goes to rank
    /// 0, the others read /dev/null, as mpirun does) or `none` (every rank reads /dev/null).
    #[arg(long, default_value = "rank0", value_parser = ["rank0", "none"])]
    pub stdin: String,
    /// After the job, print the peak resident memory of its largest rank (`[tiers run] peak
    /// RSS …`): what the ranks' memory per rank (O(N²/p) for the applications) comes to.
    #[arg(long)]
    pub peak_rss: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Parses a duration: a number of seconds, or a number with `ms`, `s`, `m` or `h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    // The unit is the trailing letters, so that a number in exponent form (1e3s) keeps its e.
    let num = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = match &t[num.len()..] {
        "" => "s",
        u => u,
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 90, 90s, 500ms, 2m, 1h)"))?;
    let secs = match unit {
        "ms" => v / 1e3,
        "s" => v,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is not a duration a job can have"))
}

/// The longest `--grace` (a day: a grace period is seconds, not a schedule).
const GRACE_MAX: f64 = 86_400.0;

/// `--grace` as a duration: seconds, from 0 to [`GRACE_MAX`].
pub fn grace_period(g: f64) -> Result<Duration, String> {
    if !(0.0..=GRACE_MAX).contains(&g) {
        return Err(format!(
            "--grace {g}: must be a number of seconds from 0 to {GRACE_MAX}"
        ));
    }
    Ok(Duration::from_secs_f64(g))
}

/// Launches the job; an error naming every rank that failed.
pub fn run(a: RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    let grace = grace_period(a.grace)?;
    if a.timeout.is_some_and(|t| t.is_zero()) {
        return Err("--timeout must be longer than zero (a job cannot start in no time)".into());
    }
    if a.n == 0 {
        return Err("-n must be at least 1 rank".into());
    }
    if a.threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    launch::catch_termination();
    let mut job =
        Job::new(a.n, launch::resolve(&a.command[0])).args(a.command[1..].iter().cloned());
    job.engine = a.engine;
    job.threads = a.threads;
    job.prefix = a.prefix;
    job.pin = !a.no_pin;
    job.grace = grace;
    job.timeout = a.timeout;
    job.stdin_to_rank0 = a.stdin == "rank0";
    job.replicas = a.replicas;
    if let Some(list) = &a.hosts {
        job.hosts = Some(launch::Hosts::parse(list, a.host, a.port)?);
    }
    let out = job.run()?;
    if a.peak_rss {
        if let Some(kib) = largest_child_rss_kib() {
            eprintln!(
                "[tiers run] peak RSS of the largest rank: {:.1} MiB",
                kib as f64 / 1024.0
            );
        }
    }
    match &out.stop {
        Some(Stop::Signal(sig)) => {
            return Err(Exit::new(
                128 + *sig as u8,
                format!(
                    "interrupted by {}",
                    tiers_cluster::launch::signal_name(*sig)
                ),
            )
            .into())
        }
        Some(Stop::Timeout { limit, running }) => {
            let running: Vec<String> = running
                .iter()
                .map(|&r| {
                    out.names
                        .get(r)
                        .cloned()
                        .unwrap_or_else(|| format!("rank {r}"))
                })
                .collect();
            return Err(Exit::new(
                124,
                format!(
                    "timed out after {limit:?}; {} still running",
                    running.join(", ")
                ),
            )
            .into());
        }
        Some(Stop::OutputClosed) => {
            return Err(Exit::new(141, "the output was closed".into()).into())
        }
        Some(Stop::Lost { rank }) => {
            let msg = format!(
                "job failed (rank {rank}: all {} of its replicas died)",
                out.replicas
            );
            // As for a rank without replicas: the status of the lost rank's replica that
            // failed first (of its replicas on this host; spread over hosts, this host's first
            // failure).
            let group = (out.replicas > 1).then(|| rank * out.replicas..(rank + 1) * out.replicas);
            let failed = |i: &usize| out.ends.get(*i).is_some_and(|e| !e.ok());
            let pick = match &group {
                Some(g) => out
                    .first_failure
                    .filter(|f| g.contains(f))
                    .or_else(|| g.clone().find(failed)),
                None => out.first_failure,
            };
            return Err(match pick.and_then(|f| out.ends.get(f)) {
                Some(&end) => Exit::new(exit_code(end), msg).into(),
                None => msg.into(),
            });
        }
        _ if out.success() => return Ok(()),
        _ => {}
    }
    let bad: Vec<String> = out
        .ends
        .iter()
        .enumerate()
        .filter(|(_, e)| !e.ok())
        .map(|(r, e)| match out.names.get(r) {
            Some(name) => format!("{name}: {e}"),
            None => format!("rank {r}: {e}"),
        })
        .collect();
    let msg = format!("job failed ({})", bad.join(", "));
    // As `mpirun`: the exit status of the rank that failed first, the cause of the others'.
    match out.first_failure.and_then(|f| out.ends.get(f)) {
        Some(&end) => Err(Exit::new(exit_code(end), msg).into()),
        None => Err(msg.into()),
    }
}

/// The exit status a launcher reports for a rank that ended this way: its own exit code, or
/// 128 + the signal that killed it, as a shell reports; 1 where neither fits in 1..=255.
fn exit_code(end: End) -> u8 {
    let code = match end {
        End::Exited(c) => c,
        End::Signaled(s) => 128 + s,
        End::Stopped => 1,
    };
    u8::try_from(code).ok().filter(|&c| c != 0).unwrap_or(1)
}

/// The largest resident set of any child this process has waited for (the ranks: the
/// launcher reaps every one), in KiB as Linux reports `ru_maxrss`.
fn largest_child_rss_kib() -> Option<u64> {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one `rusage` into the pointer, which is valid and aligned.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, u.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: getrusage succeeded, so the struct is initialised (it was zeroed before).
    let u = unsafe { u.assume_init() };
    u64::try_from(u.ru_maxrss).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("1e3s").unwrap(), Duration::from_secs(1000));
        assert_eq!(parse_duration("2.5e1").unwrap(), Duration::from_secs(25));
        for bad in ["", "x", "-1", "1e300h", "NaN", "5 parsecs", "1d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        // An exponent is a number, not a unit.
        let e = parse_duration("1e300h").unwrap_err();
        assert!(e.contains("not a duration a job can have"), "{e}");
    }
}

//! `tiers gaspi`: GASPI for C programs. `install` lays down tiers' GASPI headers, library
//! and launcher (also under GPI-2's names, so that build systems looking for GPI-2 find
//! tiers); `run` is a `gaspi_run`-compatible launcher over the cluster tier's.

use std::path::{Path, PathBuf};
use tiers_cluster::launch::{self, End, Job};

/// The headers of `crates/gaspi/include`.
pub(crate) const HEADERS: [(&str, &str); 5] = [
    ("GASPI.h", include_str!("../../../gaspi/include/GASPI.h")),
    (
        "GASPI_types.h",
        include_str!("../../../gaspi/include/GASPI_types.h"),
    ),
    (
        "GASPI_Ext.h",
        include_str!("../../../gaspi/include/GASPI_Ext.h"),
    ),
    (
        "GASPI_Threads.h",
        include_str!("../../../gaspi/include/GASPI_Threads.h"),
    ),
    ("PGASPI.h", include_str!("../../../gaspi/include/PGASPI.h")),
];

/// `tiers gaspi …`
#[derive(clap::Args, Debug, Clone)]
pub struct GaspiArgs {
    #[command(subcommand)]
    pub cmd: GaspiCommand,
}

/// The subcommands of `tiers gaspi`.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum GaspiCommand {
    /// Install include/, lib/ (libtiers_gaspi, and libGPI2 linked to it, .so and .a;
    /// tiers-gaspi.pc and GPI2.pc) and bin/ (tiers, and gaspi_run as `tiers gaspi run`)
    /// under a prefix; the library must be built (`cargo build --release -p tiers-gaspi`).
    Install {
        /// Installation prefix.
        #[arg(long)]
        prefix: PathBuf,
    },
    /// Start a GASPI program like GPI-2's gaspi_run: `-n N` ranks, or one per line of the
    /// machine file; the job's exit status is rank 0's (GPI-2's rule).
    Run {
        /// Machine file (one host per line and rank, as gaspi_run's; every host must be
        /// this one: across hosts, start the program with mpirun or `tiers run --engine tcp
        /// --hosts`).
        #[arg(short = 'm', long = "machinefile")]
        machinefile: Option<PathBuf>,
        /// Number of ranks (default: the machine file's lines, else 1); with a machine
        /// file, its first N lines.
        #[arg(short = 'n', long = "nodes")]
        n: Option<usize>,
        /// gaspi_run's NUMA placement, accepted for its scripts: tiers places ranks itself.
        #[arg(short = 'N', long = "NUMA")]
        numa: bool,
        /// gaspi_run's ping of the hosts, accepted for its scripts: every host is this one.
        #[arg(short = 'p', long = "ping")]
        ping: bool,
        /// Seconds the other ranks get after one has failed.
        #[arg(long, default_value_t = 5.0)]
        grace: f64,
        /// Engine: `shm` (shared memory) or `tcp` (sockets on loopback: writes travel as
        /// messages, as across hosts; `tiers run --engine tcp --hosts` spans hosts).
        #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
        engine: String,
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
    /// The network's limit for GASPI's micro-benchmarks across two hosts: on one host
    /// `--serve ADDR:PORT`, on the other `--to ADDR:PORT` prints, per size, half a TCP round
    /// trip and the time per message streamed one way (`net-limit BYTES US US` lines, read by
    /// `tiers bench gaspi-micro -- --from DIR` as the limit row).
    NetLimit {
        /// Serve the measurement on this address (one measuring client, then exit).
        #[arg(long)]
        serve: Option<String>,
        /// Measure against the server at this address.
        #[arg(long)]
        to: Option<String>,
        /// The largest size (GPI-2's micro-benchmarks go to 8 MiB).
        #[arg(long, default_value_t = 8 << 20)]
        max_bytes: usize,
    },
}

/// Runs `tiers gaspi …`.
pub fn run(a: GaspiArgs) -> Result<(), Box<dyn std::error::Error>> {
    match a.cmd {
        GaspiCommand::Install { prefix } => install(&prefix),
        GaspiCommand::NetLimit {
            serve,
            to,
            max_bytes,
        } => Ok(super::net_limit::run(
            serve.as_deref(),
            to.as_deref(),
            max_bytes,
        )?),
        GaspiCommand::Run {
            machinefile,
            n,
            numa,
            ping,
            grace,
            engine,
            command,
        } => {
            let _ = (numa, ping);
            let n = match machinefile {
                Some(m) => machine_ranks(&m, n)?,
                None => n.unwrap_or(1),
            };
            if n == 0 {
                return Err("no ranks: -n 0 or an empty machine file".into());
            }
            let grace = super::run::grace_period(grace)?;
            launch::catch_termination();
            let mut job =
                Job::new(n, launch::resolve(&command[0])).args(command[1..].iter().cloned());
            job.grace = grace;
            job.engine = engine;
            let out = job.run()?;
            match out.ends[0] {
                End::Exited(0) => Ok(()),
                End::Exited(c) => std::process::exit(c.clamp(1, 255)),
                e => Err(format!("rank 0: {e}").into()),
            }
        }
    }
}

/// The number of ranks a gaspi_run machine file starts: its host lines (blank lines and `#`
/// comments skipped), or the first `n` of them, each of which must name this host.
fn machine_ranks(path: &Path, n: Option<usize>) -> Result<usize, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let hosts: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split_whitespace().next().unwrap_or("")))
        .filter(|(_, h)| !h.is_empty() && !h.starts_with('#'))
        .collect();
    let n = n.unwrap_or(hosts.len());
    if hosts.len() < n {
        return Err(format!(
            "machine file {}: {} host lines for -n {n}",
            path.display(),
            hosts.len()
        )
        .into());
    }
    let me = this_host();
    for &(line, host) in &hosts[..n] {
        if !is_this_host(host, &me) {
            return Err(format!(
                "machine file {}, line {line}: {host} is not this host ({me}); `tiers gaspi \
                 run` starts ranks here only: across hosts, start the program with mpirun \
                 (the mpi engine) or with `tiers run --engine tcp --hosts …` on each host",
                path.display()
            )
            .into());
        }
    }
    Ok(n)
}

/// This host's name, as the kernel has it.
fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// Whether `host` names this host: its name or short name, `localhost`, a loopback address,
/// or a name that resolves to an address this host's name resolves to.
fn is_this_host(host: &str, me: &str) -> bool {
    use std::net::ToSocketAddrs;
    let short = |h: &str| h.split('.').next().unwrap_or(h).to_ascii_lowercase();
    if host.eq_ignore_ascii_case(me) || host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    if host.parse::<std::net::IpAddr>().is_err() && short(host) == short(me) {
        return true;
    }
    let addrs = |h: &str| -> Vec<std::net::IpAddr> {
        (h, 0)
            .to_socket_addrs()
            .map(|a| a.map(|a| a.ip()).collect())
            .unwrap_or_default()
    };
    let theirs = addrs(host);
    if theirs.iter().any(|a| a.is_loopback()) {
        return true;
    }
    let mine = addrs(me);
    theirs.iter().any(|a| mine.contains(a))
}

/// Whether `a` and `b` name one file (both exist and share device and inode).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Writes `dest` through `make`, first removing what is there (a file or a link of an
/// earlier install), so that re-installing never writes through an old link into its target.
fn replace(
    dest: &Path,
    make: impl FnOnce(&Path) -> std::io::Result<()>,
) -> Result<(), Box<dyn std::error::Error>> {
    match std::fs::remove_file(dest) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", dest.display()).into()),
    }
    make(dest).map_err(|e| format!("{}: {e}", dest.display()).into())
}

fn install(prefix: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().ok_or("no directory of the tiers binary")?;
    let inc = prefix.join("include");
    let lib = prefix.join("lib");
    // Every source first, and nothing written until each is found and none is a destination.
    let mut sources = Vec::new();
    for ext in ["so", "a"] {
        // Beside the binary (`cargo build -p tiers-gaspi` puts it there), or in `deps/` (where
        // `cargo test` leaves it without copying it up): the newer of the two.
        let name = format!("libtiers_gaspi.{ext}");
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let Some(src) = [dir.join(&name), dir.join("deps").join(&name)]
            .into_iter()
            .filter_map(|p| modified(&p).map(|t| (t, p)))
            .max_by_key(|(t, _)| *t)
            .map(|(_, p)| p)
        else {
            return Err(format!(
                "{} is not built: cargo build --release -p tiers-gaspi",
                dir.join(&name).display()
            )
            .into());
        };
        for dest in ["libtiers_gaspi", "libGPI2", "libGPI2-dbg"] {
            let dest = lib.join(format!("{dest}.{ext}"));
            if same_file(&src, &dest) {
                return Err(format!(
                    "--prefix {}: {} is the library being installed (choose another prefix)",
                    prefix.display(),
                    dest.display()
                )
                .into());
            }
        }
        sources.push((name, ext, src));
    }
    // The launcher: this binary as `bin/tiers`, and `bin/gaspi_run`, a link to it that
    // behaves as `tiers gaspi run` (build systems find GPI-2 through `gaspi_run` on the PATH).
    // A hard link where the prefix shares the build's file system (the binary is large),
    // else a copy; nothing to do where `bin/tiers` already is this binary.
    let bin = prefix.join("bin");
    // Every directory exists and takes files before the first file is written, so that a
    // prefix that cannot hold the install fails with nothing half installed.
    let at = |p: &Path, e: std::io::Error| {
        format!("--prefix {}: {}: {e}", prefix.display(), p.display())
    };
    for d in [&bin, &inc, &lib.join("pkgconfig")] {
        std::fs::create_dir_all(d).map_err(|e| at(d, e))?;
        let probe = d.join(format!(".tiers-install-{}", std::process::id()));
        std::fs::write(&probe, b"")
            .and_then(|()| std::fs::remove_file(&probe))
            .map_err(|e| at(d, e))?;
    }
    if !same_file(&exe, &bin.join("tiers")) {
        let d = bin.join("tiers");
        replace(&d, |d| {
            std::fs::hard_link(&exe, d).or_else(|_| std::fs::copy(&exe, d).map(drop))
        })?;
    }
    let d = bin.join("gaspi_run");
    replace(&d, |d| std::os::unix::fs::symlink("tiers", d))?;
    for (name, text) in HEADERS {
        let d = inc.join(name);
        std::fs::write(&d, text).map_err(|e| at(&d, e))?;
    }
    for (name, ext, src) in sources {
        let d = lib.join(&name);
        replace(&d, |d| std::fs::copy(&src, d).map(drop))?;
        // GPI-2's names point at the one file: a program linked through them needs
        // `libtiers_gaspi.so` (the library's SONAME) and finds it beside them.
        for alias in ["libGPI2", "libGPI2-dbg"] {
            let d = lib.join(format!("{alias}.{ext}"));
            replace(&d, |d| std::os::unix::fs::symlink(&name, d))?;
        }
    }
    let pc = format!(
        "prefix={}\nlibdir=${{prefix}}/lib\nincludedir=${{prefix}}/include\n\n\
         Name: tiers-gaspi\nDescription: GASPI on tiers\nVersion: {}\n\
         Libs: -L${{libdir}} -ltiers_gaspi -Wl,-rpath,${{libdir}}\nLibs.private: -pthread -ldl -lm\n\
         Cflags: -I${{includedir}}\n",
        prefix.display(),
        env!("CARGO_PKG_VERSION")
    );
    for (name, text) in [
        ("tiers-gaspi.pc", pc.clone()),
        ("GPI2.pc", pc.replace("Name: tiers-gaspi", "Name: GPI2")),
    ] {
        let d = lib.join("pkgconfig").join(name);
        std::fs::write(&d, text).map_err(|e| at(&d, e))?;
    }
    eprintln!("installed tiers GASPI under {}", prefix.display());
    Ok(())
}

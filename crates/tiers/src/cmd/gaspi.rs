//! `tiers gaspi`: GASPI for C programs. `install` lays down tiers' GASPI headers and library
//! (also under GPI-2's names, so that build systems looking for GPI-2 find tiers); `run` is a
//! `gaspi_run`-compatible launcher over the cluster tier's.

use std::path::{Path, PathBuf};
use std::time::Duration;
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
    /// Install include/ and lib/ (libtiers_gaspi and libGPI2, .so and .a, tiers-gaspi.pc)
    /// under a prefix; the library must be built (`cargo build --release -p tiers-gaspi`).
    Install {
        /// Installation prefix.
        #[arg(long)]
        prefix: PathBuf,
    },
    /// Start a GASPI program like GPI-2's gaspi_run: `-n N` ranks, or one per line of the
    /// machine file; the job's exit status is rank 0's (GPI-2's rule).
    Run {
        /// Machine file (one line per rank; every host must be this one).
        #[arg(short = 'm', long = "machinefile")]
        machinefile: Option<PathBuf>,
        /// Number of ranks (default: the machine file's lines, else 1).
        #[arg(short = 'n', long = "nodes")]
        n: Option<usize>,
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
            grace,
            engine,
            command,
        } => {
            let n = match (n, machinefile) {
                (Some(n), _) => n,
                (None, Some(m)) => std::fs::read_to_string(&m)
                    .map_err(|e| format!("{}: {e}", m.display()))?
                    .lines()
                    .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
                    .count(),
                (None, None) => 1,
            };
            if n == 0 {
                return Err("no ranks: -n 0 or an empty machine file".into());
            }
            let grace = Duration::try_from_secs_f64(grace)
                .map_err(|_| format!("--grace must be a number of seconds, not {grace}"))?;
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

fn install(prefix: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().ok_or("no directory of the tiers binary")?;
    let inc = prefix.join("include");
    let lib = prefix.join("lib");
    std::fs::create_dir_all(&inc)?;
    std::fs::create_dir_all(lib.join("pkgconfig"))?;
    for (name, text) in HEADERS {
        std::fs::write(inc.join(name), text)?;
    }
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
        for name in ["libtiers_gaspi", "libGPI2", "libGPI2-dbg"] {
            std::fs::copy(&src, lib.join(format!("{name}.{ext}")))?;
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
    std::fs::write(lib.join("pkgconfig/tiers-gaspi.pc"), &pc)?;
    std::fs::write(
        lib.join("pkgconfig/GPI2.pc"),
        pc.replace("Name: tiers-gaspi", "Name: GPI2"),
    )?;
    eprintln!("installed tiers GASPI under {}", prefix.display());
    Ok(())
}

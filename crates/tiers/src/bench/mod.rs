//! Every benchmark of `tiers bench`, in one registry.
//!
//! A benchmark is a [`Bench`]: its name, what it measures, the peers it runs beside tiers, how
//! it is launched, and one function with one signature, [`Run`]. The registry [`BENCHES`] is
//! the only list: `tiers bench list` prints it, `tiers bench NAME` looks the name up in it.
//!
//! Where a new benchmark goes: a file in the family it measures (`node/` for the thread pool,
//! barriers, locks and queues; `cluster/` for ranks and the global address space; `apps.rs`
//! for the applications; `mpi.rs` for MPI's own numbers), and one entry in [`BENCHES`]. The
//! harness it uses (alternating candidates, medians, ratio tables, JSON, the `limit` row) is
//! the `tiers-bench` crate.

mod apps;
mod cluster;
mod fft2d;
mod gaspi;
mod gaspi_micro;
mod hybrid;
mod is;
mod md;
#[cfg(feature = "mpi")]
mod mpi;
mod node;
mod overlap;
mod progress;
mod redblack;
mod replication;

use tiers_bench::{Opts, Report};

/// What a benchmark returns: a report to print, or `None` on a process that took part
/// without reporting (every rank but 0).
pub type Outcome = Result<Option<Report>, Box<dyn std::error::Error>>;

/// The one signature of every benchmark.
pub type Run = fn(&Ctx<'_>) -> Outcome;

/// What a benchmark is given.
pub struct Ctx<'a> {
    /// Thread counts, minimum time, output form.
    pub opts: Opts,
    /// Whether `--threads` was given (else `opts.threads` is the common default).
    pub threads_given: bool,
    /// Its own arguments: the target word (`tiers bench scaling mds`) then those after `--`.
    pub args: &'a [String],
}

/// How a benchmark is started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    /// One process, on its own threads: `tiers bench NAME`.
    Process,
    /// Every rank runs it and rank 0 reports: `tiers run -n N -- tiers bench NAME`, or under
    /// `mpirun` with the `mpi` feature (then MPI's own rows join tiers').
    Ranks,
    /// It starts the processes it needs itself: `tiers bench NAME`.
    StartsRanks,
    /// Not for users: one rank of a benchmark that starts its own ranks.
    Internal,
}

impl Launch {
    fn how(self, name: &str) -> String {
        match self {
            Launch::Process | Launch::StartsRanks => format!("tiers bench {name}"),
            Launch::Ranks => format!("tiers run -n 2 -- tiers bench {name}"),
            Launch::Internal => String::new(),
        }
    }
}

/// One benchmark.
pub struct Bench {
    /// `tiers bench NAME`.
    pub name: &'static str,
    /// What it measures, and in which unit.
    pub measures: &'static str,
    /// What tiers is compared with in the same run.
    pub peers: &'static str,
    /// How it is started.
    pub launch: Launch,
    /// The benchmark.
    pub run: Run,
}

/// Every benchmark, in the order `tiers bench list` prints them.
pub static BENCHES: &[Bench] = &[
    Bench {
        name: "barrier",
        measures: "ns per barrier, by threads",
        peers: "std::sync::Barrier, pthread_barrier_t, OpenMP barrier",
        launch: Launch::Process,
        run: |c| Ok(Some(node::barrier::run(&c.opts))),
    },
    Bench {
        name: "lock",
        measures: "ns per contended critical section (a shared increment), by threads",
        peers: "std Mutex, parking_lot, pthread mutex, OpenMP critical",
        launch: Launch::Process,
        run: |c| Ok(Some(node::lock::run(&c.opts))),
    },
    Bench {
        name: "queue",
        measures: "messages/s, N producers (default 1-4) and one consumer, taken one at a time (and batched: tiers-batch); ping-pong round trips/s",
        peers: "crossbeam-channel and std sync_channel, bounded; one crossbeam ArrayQueue per producer (the same design); all at the same capacity",
        launch: Launch::Process,
        run: |c| {
            let mut opts = c.opts.clone();
            if !c.threads_given {
                opts.threads = Vec::new(); // its own default: 1-4 producers
            }
            Ok(Some(node::queue::run(&opts)))
        },
    },
    Bench {
        name: "private",
        measures: "ns per access to a per-thread counter",
        peers: "an array of counters (false sharing), thread_local!",
        launch: Launch::Process,
        run: |c| Ok(Some(node::private::run(&c.opts))),
    },
    Bench {
        name: "alloc",
        measures: "us per thread for 100,000 alloc/free pairs",
        peers: "the system allocator vs mimalloc",
        launch: Launch::Process,
        run: |c| Ok(Some(node::alloc::run(&c.opts))),
    },
    Bench {
        name: "put",
        measures: "GB/s of one-sided writes by size, 8 B to 4 MiB",
        peers: "memcpy; under mpirun: MPI_Put + MPI_Win_flush",
        launch: Launch::Ranks,
        run: |c| {
            #[cfg(feature = "mpi")]
            if mpi::wanted() {
                return mpi::put(&c.opts);
            }
            cluster::on_ranks("put", c, cluster::put)
        },
    },
    Bench {
        name: "latency",
        measures:
            "ns of an 8-byte write, read (local completion) and write_notify (half round trip)",
        peers: "under mpirun: MPI_Put + MPI_Win_flush, MPI_Send/MPI_Recv ping-pong (half round trip)",
        launch: Launch::Ranks,
        run: |c| {
            #[cfg(feature = "mpi")]
            if mpi::wanted() {
                return mpi::latency(&c.opts);
            }
            cluster::on_ranks("latency", c, cluster::latency)
        },
    },
    Bench {
        name: "ranks",
        measures: "ns per barrier, allreduce of one f64 and fetch_add across ranks",
        peers: "under mpirun: MPI_Barrier, MPI_Allreduce, MPI_Fetch_and_op",
        launch: Launch::Ranks,
        run: |c| {
            #[cfg(feature = "mpi")]
            if mpi::wanted() {
                return mpi::ranks(&c.opts);
            }
            cluster::on_ranks("ranks", c, cluster::ranks::run)
        },
    },
    Bench {
        name: "kneighbor",
        measures: "us per kNeighbor step (k = 3), 16 B to 16 KiB",
        peers: "tiers-smp vs tiers-smp-nobypass vs tiers-process (Charm++'s SMP study); Charm++'s own kNeighbor when CHARM_DIR is set",
        launch: Launch::StartsRanks,
        run: |c| cluster::kneighbor::run(&c.opts).map(Some),
    },
    Bench {
        name: "kneighbor-rank",
        measures: "one rank of kneighbor's tiers-process variant",
        peers: "",
        launch: Launch::Internal,
        run: |c| cluster::kneighbor::rank_main(&c.opts).map(|()| None),
    },
    Bench {
        name: "mds",
        measures: "s per SMACOF iteration (N = 2000, 4499; 3-D) and parallel efficiency",
        peers: "scikit-learn's smacof when installed (marginal cost per iteration, 1 thread and all)",
        launch: Launch::Process,
        run: |c| apps::run(apps::mds, c),
    },
    Bench {
        name: "cluster",
        measures: "s per DA-PWC EM iteration (N = 2000, K = 10) and parallel efficiency",
        peers: "none (efficiency against 1 thread)",
        launch: Launch::Process,
        run: |c| apps::run(apps::cluster, c),
    },
    Bench {
        name: "distances",
        measures: "pairs/s for hamming, kmer and swg distances and parallel efficiency",
        peers: "rust-bio's alignment beside the native kernel",
        launch: Launch::Process,
        run: |c| apps::run(apps::distances, c),
    },
    Bench {
        name: "render",
        measures: "s per 1024x768 Mandelbrot image and parallel efficiency",
        peers: "static vs dynamic tiles",
        launch: Launch::Process,
        run: |c| apps::run(apps::render_bench, c),
    },
    Bench {
        name: "scaling",
        measures: "an app (mds, cluster, render, distances) over thread counts and sizes, written as runs for `tiers model` (`-- --out FILE`, default tiers-runs-APP.json here)",
        peers: "",
        launch: Launch::Process,
        run: |c| apps::run(apps::scaling, c),
    },
    Bench {
        name: "redblack",
        measures: "ms per RedBlack3D iteration (total, wait, comp) by variant ([Baden2001]'s Table 1): hand, mt1, mtp, mtp-olap, mtp-olap-xtra, irr, limit",
        peers: "the variants against each other; limit = computation alone",
        launch: Launch::Ranks,
        run: redblack::run,
    },
    Bench {
        name: "overlap",
        measures: "us per one-sided write (comm) and its part not hidden behind computation (exposed), 1 KiB to 4 MiB, by progress policy; overlap % and progress counters in the notes",
        peers: "local worlds under eager, lazy and proxy; the launched world (shm or mpi); under mpirun: MPI_Put + MPI_Win_flush; limit = memcpy",
        launch: Launch::Ranks,
        run: overlap::run,
    },
    Bench {
        name: "fft2d",
        measures: "ms per complex N x N 2-D FFT (default N 1024; `-- N`) across the job's ranks: transpose overlapped with the first pass vs after it",
        peers: "the same 1-D plans serially in one process; FFTW's MPI 2-D transform on as many MPI ranks (when libfftw3-mpi-dev and mpicc are there); limit = memcpy of the data three times",
        launch: Launch::Ranks,
        run: fft2d::run,
    },
    Bench {
        name: "md",
        measures: "Lennard-Jones steps per second (default N 2048; `-- N`) across the job's ranks: positions broadcast overlapped with the forces",
        peers: "a blocking allgather before the forces (the MPI-style peer); limit = the forces alone, no broadcast",
        launch: Launch::Ranks,
        run: md::run,
    },
    Bench {
        name: "hybrid",
        measures: "an app (distances, mds, cluster, render) as every pattern t x m x n that fits the cores (n > 1 with `-- --hosts`): time, speedup, efficiency, overhead, peak RSS per rank",
        peers: "the patterns against each other: threads, processes, mixes",
        launch: Launch::StartsRanks,
        run: hybrid::run,
    },
    Bench {
        name: "gaspi",
        measures: "us per GASPI operation of one C program on 2 ranks: write_notify ping-pong (half round trip) and streamed writes by size, barrier, allreduce, fetch_add, gaspi_proc_init",
        peers: "the same program linked against GPI-2 (GPI2_DIR: its install prefix, Ethernet device)",
        launch: Launch::StartsRanks,
        run: gaspi::run,
    },
    Bench {
        name: "gaspi-micro",
        measures: "us per operation of GPI-2's own 13 micro-benchmarks (their sources, unmodified) on 2 ranks: ping_pong, read/write latency and bandwidth by size, barrier, allreduce by elements, init time",
        peers: "the same sources linked against GPI-2 (GPI2_DIR: its install prefix, Ethernet device)",
        launch: Launch::StartsRanks,
        run: gaspi_micro::run,
    },
    Bench {
        name: "is",
        measures: "seconds of NPB IS's 10 timed iterations (class and ranks as arguments: `tiers bench is A -- 2`)",
        peers: "NPB's own IS (NPB-MPI, C) under mpirun when TIERS_NPB_IS names its binary; limit = 3 copies of a rank's keys per iteration at memcpy bandwidth",
        launch: Launch::StartsRanks,
        run: is::run,
    },
    Bench {
        name: "replication",
        measures: "seconds of NPB IS's 10 timed iterations and of an alltoallv loop (200 x 32 KiB per pair) with 1 and 2 replicas per rank, with one replica killed and with one stopped (`tiers bench replication W -- 1 [tcp]`, shm or tcp engine)",
        peers: "the same job unreplicated (R = 1); limit = 3 copies of a rank's keys per iteration at memcpy bandwidth",
        launch: Launch::StartsRanks,
        run: replication::run,
    },
    Bench {
        name: "replication-rank",
        measures: "one rank (or replica) of replication's alltoallv loop",
        peers: "",
        launch: Launch::Internal,
        run: replication::rank_main,
    },
    Bench {
        name: "progress",
        measures: "passes of the tcp engine's progress engine per alltoallv of 32 KiB per pair (`-- RANKS [BYTES]`), sender-driven (direct) against receiver-driven (pull), eager and lazy polling ([Gabriel2010]'s Table II); ready sockets, time in receives and sends and us per alltoallv beside",
        peers: "direct writes against pulled reads, each under eager and lazy; limit = memcpy of one rank's share of an alltoallv",
        launch: Launch::StartsRanks,
        run: progress::run,
    },
    Bench {
        name: "progress-rank",
        measures: "one rank of progress's tcp jobs",
        peers: "",
        launch: Launch::Internal,
        run: progress::rank_main,
    },
];

/// The benchmark called `name`.
pub fn find(name: &str) -> Option<&'static Bench> {
    BENCHES.iter().find(|b| b.name == name)
}

/// `tiers bench list`: one line per benchmark users run.
pub fn list() -> String {
    let mut s = String::new();
    for b in BENCHES.iter().filter(|b| b.launch != Launch::Internal) {
        s.push_str(&format!("{:<10} {}\n", b.name, b.measures));
        if !b.peers.is_empty() {
            s.push_str(&format!("{:<10}   peers: {}\n", "", b.peers));
        }
        s.push_str(&format!("{:<10}   run: {}\n", "", b.launch.how(b.name)));
    }
    s
}

/// Makes the process `cmd` starts run on `cpus` only (whatever the launching thread was
/// pinned to): peers given the whole machine, ranks or jobs given their own cores.
pub(crate) fn run_on(cmd: &mut std::process::Command, cpus: Vec<usize>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only the sched_setaffinity system call runs, on a set
    // built on the child's stack from the numbers moved into the closure (no allocation).
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
                libc::CPU_SET(c, &mut set);
            }
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_described() {
        for (i, b) in BENCHES.iter().enumerate() {
            assert!(!b.measures.is_empty(), "{} says what it measures", b.name);
            assert!(
                BENCHES[i + 1..].iter().all(|o| o.name != b.name),
                "{} is registered twice",
                b.name
            );
            assert!(std::ptr::eq(find(b.name).unwrap(), b));
        }
        assert!(find("no-such-bench").is_none());
        let l = list();
        assert!(l.contains("kneighbor ") && !l.contains("kneighbor-rank"));
    }
}

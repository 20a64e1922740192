//! What the machine is made of: packages (sockets), NUMA nodes, cores, hardware threads, the
//! caches and which processors share each, the SIMD level, and the affinity mask the process
//! may run on (MCTP's "full hardware awareness", [GPI-MCTP]).
//!
//! Read from Linux `/sys` (module `sysfs`), or through hwloc with the `hwloc` feature
//! (`Topology::detect_hwloc`). Where `/sys` says nothing (another OS, a locked-down
//! container) a flat fallback is built from the number of available processors, and
//! [`Topology::source`] says so.

#[cfg(feature = "hwloc")]
mod hwloc;
mod simd;
mod sysfs;

pub use simd::Simd;

use crate::cpulist;
use serde::Serialize;
use std::sync::OnceLock;

/// One hardware thread (a logical processor, the unit of affinity).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Cpu {
    /// The operating system's processor number.
    pub id: usize,
    /// The package (socket) it belongs to.
    pub package: usize,
    /// Index into [`Topology::cores`].
    pub core: usize,
    /// Its NUMA node.
    pub numa: usize,
    /// Its position among the hardware threads of its core (0 for the first).
    pub smt: usize,
}

/// One physical core.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Core {
    /// The package (socket) it belongs to.
    pub package: usize,
    /// The kernel's core id within the package.
    pub core_id: usize,
    /// Its hardware threads.
    pub cpus: Vec<usize>,
}

/// One NUMA node.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NumaNode {
    /// The node number.
    pub id: usize,
    /// The processors attached to it.
    pub cpus: Vec<usize>,
}

/// One cache, and the processors that share it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Cache {
    /// 1, 2, 3, …
    pub level: u8,
    /// `data`, `instruction` or `unified`.
    pub kind: String,
    /// Capacity in bytes.
    pub size: u64,
    /// Line size in bytes.
    pub line: u32,
    /// The processors that share it.
    pub cpus: Vec<usize>,
}

/// The machine as the node tier sees it.
#[derive(Debug, Clone, Serialize)]
pub struct Topology {
    /// Where the description came from: `sysfs`, `hwloc`, or `fallback`.
    pub source: &'static str,
    /// Number of packages (sockets).
    pub packages: usize,
    /// NUMA nodes.
    pub numa_nodes: Vec<NumaNode>,
    /// Physical cores, ordered by package then core id.
    pub cores: Vec<Core>,
    /// Hardware threads, ordered by processor number.
    pub cpus: Vec<Cpu>,
    /// Every distinct cache.
    pub caches: Vec<Cache>,
    /// The SIMD instruction sets the processor offers.
    pub simd: Simd,
    /// The processors this process may run on at the time of detection.
    pub affinity: Vec<usize>,
}

/// Why hwloc could not describe the machine (`Topology::detect_hwloc`, feature `hwloc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HwlocError {
    /// The hwloc library failed (building or loading the topology), with its message.
    Library(String),
    /// hwloc's topology lists no processing unit with an operating-system index.
    NoProcessors,
}

impl std::fmt::Display for HwlocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HwlocError::Library(m) => write!(f, "hwloc: {m}"),
            HwlocError::NoProcessors => write!(f, "hwloc: the topology has no processing units"),
        }
    }
}

impl std::error::Error for HwlocError {}

impl Topology {
    /// Detects the machine now (reads `/sys` every time).
    pub fn detect() -> Topology {
        let mut t = sysfs::read().unwrap_or_else(Topology::fallback);
        t.affinity =
            crate::affinity::get().unwrap_or_else(|_| t.cpus.iter().map(|c| c.id).collect());
        t
    }

    /// Detects the machine through hwloc (the `hwloc` feature): the same description as
    /// [`Topology::detect`], with `source` set to `hwloc`.
    ///
    /// # Errors
    /// [`HwlocError`] when hwloc cannot load the machine's topology or finds no processor.
    #[cfg(feature = "hwloc")]
    pub fn detect_hwloc() -> Result<Topology, HwlocError> {
        let mut t = hwloc::read()?;
        t.affinity =
            crate::affinity::get().unwrap_or_else(|_| t.cpus.iter().map(|c| c.id).collect());
        Ok(t)
    }

    /// The topology detected at first use, shared by the whole process.
    pub fn get() -> &'static Topology {
        static T: OnceLock<Topology> = OnceLock::new();
        T.get_or_init(Topology::detect)
    }

    /// A flat machine of `n` single-threaded cores in one package and one NUMA node.
    pub fn flat(n: usize) -> Topology {
        let n = n.max(1);
        Topology {
            source: "fallback",
            packages: 1,
            numa_nodes: vec![NumaNode {
                id: 0,
                cpus: (0..n).collect(),
            }],
            cores: (0..n)
                .map(|i| Core {
                    package: 0,
                    core_id: i,
                    cpus: vec![i],
                })
                .collect(),
            cpus: (0..n)
                .map(|i| Cpu {
                    id: i,
                    package: 0,
                    core: i,
                    numa: 0,
                    smt: 0,
                })
                .collect(),
            caches: Vec::new(),
            simd: Simd::detect(),
            affinity: (0..n).collect(),
        }
    }

    fn fallback() -> Topology {
        Topology::flat(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Number of hardware threads.
    pub fn hw_threads(&self) -> usize {
        self.cpus.len()
    }

    /// The processor with number `id`.
    pub fn cpu(&self, id: usize) -> Option<&Cpu> {
        self.cpus.iter().find(|c| c.id == id)
    }

    /// The largest-level caches (the last-level caches), one per sharing domain.
    pub fn last_level_caches(&self) -> Vec<&Cache> {
        let top = self
            .caches
            .iter()
            .filter(|c| c.kind != "instruction")
            .map(|c| c.level)
            .max();
        self.caches
            .iter()
            .filter(|c| Some(c.level) == top && c.kind != "instruction")
            .collect()
    }

    /// The caches that processor `cpu` uses, innermost first.
    pub fn caches_of(&self, cpu: usize) -> Vec<&Cache> {
        let mut v: Vec<_> = self
            .caches
            .iter()
            .filter(|c| c.cpus.contains(&cpu))
            .collect();
        v.sort_by_key(|c| (c.level, c.kind.clone()));
        v
    }

    /// The domain the hierarchical barrier groups `cpu` into: its last-level cache when the
    /// machine has more than one, else its NUMA node, else its package. Domains are numbered
    /// from 0 in an order that is the same for every caller.
    pub fn barrier_domain(&self, cpu: usize) -> usize {
        let llc = self.last_level_caches();
        if llc.len() > 1 {
            if let Some(i) = llc.iter().position(|c| c.cpus.contains(&cpu)) {
                return i;
            }
        }
        if self.numa_nodes.len() > 1 {
            if let Some(i) = self.numa_nodes.iter().position(|n| n.cpus.contains(&cpu)) {
                return i;
            }
        }
        self.cpu(cpu).map_or(0, |c| c.package)
    }

    /// A human-readable report (what `tiers topo` prints).
    pub fn report(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let smt = self.cores.iter().map(|c| c.cpus.len()).max().unwrap_or(1);
        let _ = writeln!(
            s,
            "machine: {} package(s), {} NUMA node(s), {} core(s), {} hardware thread(s) ({} per core)   [source: {}]",
            self.packages,
            self.numa_nodes.len(),
            self.cores.len(),
            self.cpus.len(),
            smt,
            self.source
        );
        let _ = writeln!(
            s,
            "simd: {} ({})",
            self.simd.level,
            self.simd.features.join(" ")
        );
        let _ = writeln!(s, "affinity mask: {}", cpulist::format(&self.affinity));
        for n in &self.numa_nodes {
            let _ = writeln!(s, "numa node {}: cpus {}", n.id, cpulist::format(&n.cpus));
        }
        for p in 0..self.packages {
            let _ = writeln!(s, "package {p}:");
            for c in self.cores.iter().filter(|c| c.package == p) {
                let _ = writeln!(
                    s,
                    "  core {:>3}: cpus {}",
                    c.core_id,
                    cpulist::format(&c.cpus)
                );
            }
        }
        if !self.caches.is_empty() {
            let _ = writeln!(s, "caches:");
            for c in &self.caches {
                let _ = writeln!(
                    s,
                    "  L{} {:<11} {:>9}  line {:>3} B  shared by cpus {}",
                    c.level,
                    c.kind,
                    human_bytes(c.size),
                    c.line,
                    cpulist::format(&c.cpus)
                );
            }
        }
        s
    }
}

/// `32 KiB`, `1 MiB`, …
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{} {}", v as u64, UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn detected_topology_is_consistent() {
        let t = Topology::detect();
        assert!(t.hw_threads() >= 1);
        assert!(!t.cores.is_empty() && t.cores.len() <= t.hw_threads());
        assert!(t.packages >= 1);
        // Every hardware thread belongs to exactly one core, and the core lists it.
        for c in &t.cpus {
            assert!(
                t.cores[c.core].cpus.contains(&c.id),
                "cpu {} not in its core",
                c.id
            );
            assert!(c.package < t.packages);
        }
        let listed: usize = t.cores.iter().map(|c| c.cpus.len()).sum();
        assert_eq!(listed, t.hw_threads());
        // The affinity mask is a subset of the processors.
        for a in &t.affinity {
            assert!(t.cpu(*a).is_some(), "affinity cpu {a} unknown");
        }
        // Caches name known processors and have plausible sizes.
        for c in &t.caches {
            assert!(c.level >= 1 && c.size >= 1024, "{c:?}");
            assert!(c.cpus.iter().all(|id| t.cpu(*id).is_some()));
        }
        // The report mentions every core count it claims.
        assert!(t.report().contains(&format!("{} core(s)", t.cores.len())));
        // NUMA nodes partition the processors.
        let mut all: Vec<usize> = t.numa_nodes.iter().flat_map(|n| n.cpus.clone()).collect();
        all.sort();
        let mut ids: Vec<usize> = t.cpus.iter().map(|c| c.id).collect();
        ids.sort();
        assert_eq!(all, ids);
    }

    #[test]
    fn flat_machine_has_one_domain() {
        let t = Topology::flat(4);
        assert_eq!(t.barrier_domain(3), 0);
        assert_eq!(t.cores.len(), 4);
    }

    #[test]
    fn bytes_read_well() {
        assert_eq!(human_bytes(32 * 1024), "32 KiB");
        assert_eq!(human_bytes(1536 * 1024), "1.5 MiB");
        assert_eq!(human_bytes(100), "100 B");
    }
}

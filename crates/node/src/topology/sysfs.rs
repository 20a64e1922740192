//! Reading the topology from Linux `/sys/devices/system`.

use super::{Cache, Core, Cpu, NumaNode, Simd, Topology};
use crate::cpulist;
use std::fs;
use std::path::Path;

const SYS: &str = "/sys/devices/system";

fn read_str(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn read_num(path: impl AsRef<Path>) -> Option<usize> {
    read_str(path)?.parse().ok()
}

/// `32K`, `1024K`, `8M` → bytes.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1024),
        'M' | 'm' => (&s[..s.len() - 1], 1024 * 1024),
        'G' | 'g' => (&s[..s.len() - 1], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|v| v * mul)
}

/// The topology from `/sys`, or `None` when it is not there.
pub(super) fn read() -> Option<Topology> {
    read_from(Path::new(SYS))
}

pub(super) fn read_from(root: &Path) -> Option<Topology> {
    let online = cpulist::parse(&read_str(root.join("cpu/online"))?).ok()?;
    if online.is_empty() {
        return None;
    }
    // (package, core_id) → core index
    let mut cores: Vec<Core> = Vec::new();
    let mut cpus: Vec<Cpu> = Vec::new();
    let mut caches: Vec<Cache> = Vec::new();
    for &id in &online {
        let base = root.join(format!("cpu/cpu{id}"));
        let package = read_num(base.join("topology/physical_package_id")).unwrap_or(0);
        let core_id = read_num(base.join("topology/core_id")).unwrap_or(id);
        let core = match cores
            .iter()
            .position(|c| c.package == package && c.core_id == core_id)
        {
            Some(i) => i,
            None => {
                cores.push(Core {
                    package,
                    core_id,
                    cpus: Vec::new(),
                });
                cores.len() - 1
            }
        };
        let smt = cores[core].cpus.len();
        cores[core].cpus.push(id);
        cpus.push(Cpu {
            id,
            package,
            core,
            numa: 0,
            smt,
        });
        for index in 0.. {
            let dir = base.join(format!("cache/index{index}"));
            if !dir.exists() {
                break;
            }
            let (Some(level), Some(kind), Some(size)) = (
                read_num(dir.join("level")),
                read_str(dir.join("type")),
                read_str(dir.join("size")).and_then(|s| parse_size(&s)),
            ) else {
                continue;
            };
            let shared = read_str(dir.join("shared_cpu_list"))
                .and_then(|s| cpulist::parse(&s).ok())
                .unwrap_or_else(|| vec![id]);
            let kind = kind.to_lowercase();
            let line = read_num(dir.join("coherency_line_size")).unwrap_or(64) as u32;
            let cache = Cache {
                level: level as u8,
                kind,
                size,
                line,
                cpus: shared,
            };
            if !caches.contains(&cache) {
                caches.push(cache);
            }
        }
    }
    // Packages are renumbered densely in order of appearance.
    let mut pkg_ids: Vec<usize> = cores.iter().map(|c| c.package).collect();
    pkg_ids.sort_unstable();
    pkg_ids.dedup();
    let dense = |p: usize| pkg_ids.iter().position(|&x| x == p).unwrap_or(0);
    for c in &mut cores {
        c.package = dense(c.package);
    }
    for c in &mut cpus {
        c.package = dense(c.package);
    }
    // NUMA nodes; without them, one node holding everything.
    let mut numa_nodes = Vec::new();
    if let Ok(entries) = fs::read_dir(root.join("node")) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let Some(id) = name
                .strip_prefix("node")
                .and_then(|n| n.parse::<usize>().ok())
            else {
                continue;
            };
            let list = read_str(e.path().join("cpulist"))
                .and_then(|s| cpulist::parse(&s).ok())
                .unwrap_or_default();
            let list: Vec<usize> = list.into_iter().filter(|c| online.contains(c)).collect();
            if !list.is_empty() {
                numa_nodes.push(NumaNode { id, cpus: list });
            }
        }
    }
    numa_nodes.sort_by_key(|n| n.id);
    if numa_nodes.is_empty() {
        numa_nodes.push(NumaNode {
            id: 0,
            cpus: online.clone(),
        });
    }
    for c in &mut cpus {
        c.numa = numa_nodes
            .iter()
            .find(|n| n.cpus.contains(&c.id))
            .map_or(0, |n| n.id);
    }
    caches.sort_by(|a, b| (a.level, &a.kind, &a.cpus).cmp(&(b.level, &b.kind, &b.cpus)));
    Some(Topology {
        source: "sysfs",
        packages: pkg_ids.len().max(1),
        numa_nodes,
        cores,
        cpus,
        caches,
        simd: Simd::detect(),
        affinity: Vec::new(),
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("32K"), Some(32768));
        assert_eq!(parse_size("8M"), Some(8 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("x"), None);
    }

    /// A two-socket, hyperthreaded, two-NUMA-node machine written out as /sys would show it.
    #[test]
    fn reads_a_synthetic_two_socket_machine() {
        let dir = std::env::temp_dir().join(format!("tiers-sysfs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let w = |p: &str, s: &str| {
            let p = dir.join(p);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, s).unwrap();
        };
        w("cpu/online", "0-7\n");
        // cpus 0-3 on socket 0 (cores 0,1 with siblings 4,5 → here ids 0,1,2,3 = core 0,0,1,1)
        for id in 0..8usize {
            let pkg = id / 4;
            let core = (id % 4) / 2;
            w(
                &format!("cpu/cpu{id}/topology/physical_package_id"),
                &format!("{}\n", pkg * 10),
            );
            w(
                &format!("cpu/cpu{id}/topology/core_id"),
                &format!("{core}\n"),
            );
            let l1 = format!("{}-{}", id / 2 * 2, id / 2 * 2 + 1);
            let l3 = if pkg == 0 { "0-3" } else { "4-7" };
            for (i, (lvl, ty, sz, sh)) in [
                (1, "Data", "32K", l1.as_str()),
                (1, "Instruction", "32K", l1.as_str()),
                (3, "Unified", "16M", l3),
            ]
            .into_iter()
            .enumerate()
            {
                let b = format!("cpu/cpu{id}/cache/index{i}");
                w(&format!("{b}/level"), &format!("{lvl}\n"));
                w(&format!("{b}/type"), ty);
                w(&format!("{b}/size"), sz);
                w(&format!("{b}/shared_cpu_list"), sh);
                w(&format!("{b}/coherency_line_size"), "64");
            }
        }
        w("node/node0/cpulist", "0-3");
        w("node/node1/cpulist", "4-7");
        let t = read_from(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(t.packages, 2);
        assert_eq!(t.cores.len(), 4);
        assert_eq!(t.cpus.len(), 8);
        assert_eq!(t.cores[0].cpus, vec![0, 1]);
        assert_eq!(t.cpus[1].smt, 1);
        assert_eq!(t.cpus[5].package, 1);
        assert_eq!(t.cpus[5].numa, 1);
        assert_eq!(t.numa_nodes.len(), 2);
        // 4 L1d + 4 L1i + 2 L3
        assert_eq!(t.caches.len(), 10);
        assert_eq!(t.last_level_caches().len(), 2);
        assert_eq!(t.barrier_domain(2), 0);
        assert_eq!(t.barrier_domain(6), 1);
        assert_eq!(t.caches_of(0)[0].level, 1);
    }
}

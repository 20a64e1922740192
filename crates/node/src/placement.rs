//! Where a pool's threads run: compactly (filling one core, cache and socket before the next),
//! scattered (spreading over sockets and cores first), or on an explicit processor map in
//! Charm++'s `+pemap` grammar.

use crate::cpulist;
use crate::topology::Topology;

/// A placement policy.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Placement {
    /// Thread i+1 as close as possible to thread i: the hardware threads of a core, then the
    /// next core of the same package. Best when threads share data.
    #[default]
    Compact,
    /// Spread over packages, then cores, using a core's second hardware thread only when every
    /// core has one thread. Best for memory bandwidth.
    Scatter,
    /// Exactly these processors, in this order (thread i on `list[i % len]`); an empty list
    /// pins nothing, as [`Placement::None`].
    List(Vec<usize>),
    /// Leave threads where the OS puts them.
    None,
}

impl Placement {
    /// Parses `compact`, `scatter`, `none`, or a processor map such as `0-7:2` or `0,2,4-6`.
    pub fn parse(s: &str) -> Result<Placement, cpulist::CpuListError> {
        Ok(match s.trim() {
            "compact" | "close" => Placement::Compact,
            "scatter" | "spread" => Placement::Scatter,
            "none" | "off" => Placement::None,
            map => {
                let list = cpulist::parse(map)?;
                if list.is_empty() {
                    return Err(cpulist::CpuListError {
                        input: s.into(),
                        reason: "no processors".into(),
                    });
                }
                Placement::List(list)
            }
        })
    }

    /// The processor for each of `n` threads, limited to the processors in the topology's
    /// affinity mask (for the compact and scatter policies). Empty for [`Placement::None`].
    /// When threads outnumber processors the list wraps around; see [`oversubscribed`].
    pub fn cpus(&self, n: usize, topo: &Topology) -> Vec<usize> {
        let allowed = |id: usize| topo.affinity.is_empty() || topo.affinity.contains(&id);
        let order: Vec<usize> = match self {
            Placement::None => return Vec::new(),
            // An empty list pins nothing, as `None`.
            Placement::List(list) if list.is_empty() => return Vec::new(),
            Placement::List(list) => return (0..n).map(|i| list[i % list.len()]).collect(),
            Placement::Compact => {
                let mut cpus: Vec<_> = topo.cpus.iter().filter(|c| allowed(c.id)).collect();
                cpus.sort_by_key(|c| (c.package, c.numa, c.core, c.smt));
                cpus.into_iter().map(|c| c.id).collect()
            }
            Placement::Scatter => {
                // Round-robin over packages; inside each package cores first, then siblings.
                let mut per_pkg: Vec<Vec<usize>> = vec![Vec::new(); topo.packages.max(1)];
                let mut cpus: Vec<_> = topo.cpus.iter().filter(|c| allowed(c.id)).collect();
                cpus.sort_by_key(|c| (c.smt, c.numa, c.core));
                let last = per_pkg.len() - 1;
                for c in cpus {
                    per_pkg[c.package.min(last)].push(c.id);
                }
                let mut out = Vec::new();
                let longest = per_pkg.iter().map(Vec::len).max().unwrap_or(0);
                for i in 0..longest {
                    for p in &per_pkg {
                        if let Some(&c) = p.get(i) {
                            out.push(c);
                        }
                    }
                }
                out
            }
        };
        if order.is_empty() {
            return Vec::new();
        }
        (0..n).map(|i| order[i % order.len()]).collect()
    }
}

/// A warning when `threads` exceed the hardware threads available, `None` otherwise.
pub fn oversubscribed(threads: usize, topo: &Topology) -> Option<String> {
    let hw = if topo.affinity.is_empty() {
        topo.hw_threads()
    } else {
        topo.affinity.len()
    };
    (threads > hw).then(|| {
        format!(
            "tiers: warning: {threads} threads on {hw} hardware thread(s): threads will share processors, \
             and spinning waits will slow each other down"
        )
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::topology::{Core, Cpu, NumaNode};

    /// 2 packages × 2 cores × 2 hardware threads; cpu ids as Linux numbers them (siblings +4).
    fn machine() -> Topology {
        let mut t = Topology::flat(8);
        t.packages = 2;
        t.cores = (0..4)
            .map(|c| Core {
                package: c / 2,
                core_id: c % 2,
                cpus: vec![c, c + 4],
            })
            .collect();
        t.cpus = (0..8)
            .map(|id| Cpu {
                id,
                package: (id % 4) / 2,
                core: id % 4,
                numa: (id % 4) / 2,
                smt: id / 4,
            })
            .collect();
        t.numa_nodes = vec![
            NumaNode {
                id: 0,
                cpus: vec![0, 1, 4, 5],
            },
            NumaNode {
                id: 1,
                cpus: vec![2, 3, 6, 7],
            },
        ];
        t.affinity = (0..8).collect();
        t
    }

    #[test]
    fn compact_fills_a_core_then_its_package() {
        assert_eq!(
            Placement::Compact.cpus(8, &machine()),
            vec![0, 4, 1, 5, 2, 6, 3, 7]
        );
    }

    #[test]
    fn scatter_spreads_over_packages_and_cores_first() {
        assert_eq!(
            Placement::Scatter.cpus(8, &machine()),
            vec![0, 2, 1, 3, 4, 6, 5, 7]
        );
    }

    #[test]
    fn lists_wrap_and_masks_apply() {
        let t = machine();
        assert_eq!(
            Placement::parse("0-6:2").unwrap().cpus(5, &t),
            vec![0, 2, 4, 6, 0]
        );
        let mut masked = t.clone();
        masked.affinity = vec![1, 3];
        assert_eq!(Placement::Compact.cpus(3, &masked), vec![1, 3, 1]);
        assert!(Placement::None.cpus(3, &t).is_empty());
    }

    #[test]
    fn parse_errors_and_warnings() {
        assert!(Placement::parse("5-1").is_err());
        assert_eq!(Placement::parse("scatter").unwrap(), Placement::Scatter);
        assert!(oversubscribed(9, &machine())
            .unwrap()
            .contains("9 threads on 8"));
        assert!(oversubscribed(8, &machine()).is_none());
    }
}

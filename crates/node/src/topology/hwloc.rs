//! Reading the topology through hwloc (the `hwloc` feature, via the hwlocality crate).
//!
//! Yields the same [`Topology`] as the `/sys` reader, in the same order: hardware threads by
//! processor number, cores in order of their first hardware thread, packages numbered densely,
//! caches sorted by level, kind and processors.

use super::{Cache, Core, Cpu, HwlocError, NumaNode, Simd, Topology};
use hwlocality::object::attributes::ObjectAttributes;
use hwlocality::object::types::{CacheType, ObjectType};
use hwlocality::object::TopologyObject;
use hwlocality::topology::builder::TypeFilter;

fn cpus_of(o: &TopologyObject) -> Vec<usize> {
    let mut v: Vec<usize> = o
        .cpuset()
        .map(|s| s.iter_set().map(usize::from).collect())
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// The topology as hwloc sees it.
pub(super) fn read() -> Result<Topology, HwlocError> {
    let err = |e: hwlocality::errors::RawHwlocError| HwlocError::Library(e.to_string());
    // hwloc leaves instruction caches out by default; /sys lists them, so keep them.
    let topo = hwlocality::Topology::builder()
        .with_cpu_icache_type_filter(TypeFilter::KeepAll)
        .map_err(err)?
        .build()
        .map_err(err)?;
    let packages: Vec<&TopologyObject> = topo.objects_with_type(ObjectType::Package).collect();
    let package_of = |o: &TopologyObject| -> usize {
        o.first_ancestor_with_type(ObjectType::Package)
            .and_then(|p| {
                packages
                    .iter()
                    .position(|q| q.global_persistent_index() == p.global_persistent_index())
            })
            .unwrap_or(0)
    };

    // Hardware threads by processor number, with the core each belongs to.
    let mut pus: Vec<(usize, &TopologyObject)> = topo
        .objects_with_type(ObjectType::PU)
        .filter_map(|pu| Some((pu.os_index()?, pu)))
        .collect();
    if pus.is_empty() {
        return Err(HwlocError::NoProcessors);
    }
    pus.sort_by_key(|&(id, _)| id);
    let mut cores: Vec<Core> = Vec::new();
    let mut core_objs: Vec<u64> = Vec::new();
    let mut cpus: Vec<Cpu> = Vec::new();
    for &(id, pu) in &pus {
        let core_obj = pu.first_ancestor_with_type(ObjectType::Core);
        // A PU without a core object (hwloc may omit cores) is its own core, as in /sys.
        let key = core_obj.map_or(u64::MAX - id as u64, |c| c.global_persistent_index());
        let core = match core_objs.iter().position(|&k| k == key) {
            Some(i) => i,
            None => {
                core_objs.push(key);
                cores.push(Core {
                    package: package_of(pu),
                    core_id: core_obj.and_then(|c| c.os_index()).unwrap_or(id),
                    cpus: Vec::new(),
                });
                cores.len() - 1
            }
        };
        let smt = cores[core].cpus.len();
        cores[core].cpus.push(id);
        cpus.push(Cpu {
            id,
            package: package_of(pu),
            core,
            numa: 0,
            smt,
        });
    }

    let mut numa_nodes: Vec<NumaNode> = topo
        .objects_with_type(ObjectType::NUMANode)
        .filter_map(|n| {
            let cpus = cpus_of(n);
            (!cpus.is_empty()).then(|| NumaNode {
                id: n.os_index().unwrap_or(0),
                cpus,
            })
        })
        .collect();
    numa_nodes.sort_by_key(|n| n.id);
    if numa_nodes.is_empty() {
        numa_nodes.push(NumaNode {
            id: 0,
            cpus: pus.iter().map(|&(id, _)| id).collect(),
        });
    }
    for c in &mut cpus {
        c.numa = numa_nodes
            .iter()
            .find(|n| n.cpus.contains(&c.id))
            .map_or(0, |n| n.id);
    }

    let mut caches: Vec<Cache> = Vec::new();
    for o in topo.objects() {
        if !o.object_type().is_cpu_cache() {
            continue;
        }
        let Some(ObjectAttributes::Cache(attr)) = o.attributes() else {
            continue;
        };
        let Some(size) = attr.size() else { continue };
        let kind = match attr.cache_type() {
            CacheType::Data => "data",
            CacheType::Instruction => "instruction",
            _ => "unified",
        };
        let cache = Cache {
            level: attr.depth() as u8,
            kind: kind.to_string(),
            size: size.get(),
            line: attr.line_size().map_or(64, |l| l.get() as u32),
            cpus: cpus_of(o),
        };
        if !caches.contains(&cache) {
            caches.push(cache);
        }
    }
    caches.sort_by(|a, b| (a.level, &a.kind, &a.cpus).cmp(&(b.level, &b.kind, &b.cpus)));

    Ok(Topology {
        source: "hwloc",
        packages: packages.len().max(1),
        numa_nodes,
        cores,
        cpus,
        caches,
        simd: Simd::detect(),
        affinity: Vec::new(),
    })
}

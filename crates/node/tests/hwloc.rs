//! With the `hwloc` feature: hwloc and Linux /sys describe this machine the same way.
#![cfg(all(feature = "hwloc", target_os = "linux", not(loom)))]

use tiers_node::Topology;

#[test]
fn hwloc_and_sysfs_agree_on_this_machine() {
    let sys = Topology::detect();
    let hw = Topology::detect_hwloc().expect("hwloc reads the topology");
    assert_eq!(hw.source, "hwloc");
    if sys.source != "sysfs" {
        eprintln!("no /sys topology here ({}); nothing to compare", sys.source);
        return;
    }
    println!("sysfs:\n{}\nhwloc:\n{}", sys.report(), hw.report());
    assert_eq!(hw.packages, sys.packages, "packages");
    assert_eq!(hw.cpus, sys.cpus, "hardware threads");
    let cores = |t: &Topology| {
        t.cores
            .iter()
            .map(|c| (c.package, c.cpus.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(cores(&hw), cores(&sys), "cores");
    assert_eq!(hw.numa_nodes, sys.numa_nodes, "NUMA nodes");
    let caches = |t: &Topology| {
        t.caches
            .iter()
            .map(|c| (c.level, c.kind.clone(), c.size, c.cpus.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        caches(&hw),
        caches(&sys),
        "caches (level, kind, size, sharing)"
    );
    assert_eq!(hw.affinity, sys.affinity, "affinity");
}

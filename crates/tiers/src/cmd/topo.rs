//! `tiers topo`: the machine as the node tier sees it.

use clap::Args;

/// Arguments of `tiers topo`.
#[derive(Args, Debug)]
pub struct TopoArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Where to read it from: `sysfs` (Linux /sys) or `hwloc` (needs the `hwloc` feature).
    #[arg(long, default_value = "sysfs", value_parser = ["sysfs", "hwloc"])]
    source: String,
}

#[cfg(feature = "hwloc")]
fn hwloc() -> Result<tiers_node::Topology, String> {
    tiers_node::Topology::detect_hwloc().map_err(|e| e.to_string())
}

#[cfg(not(feature = "hwloc"))]
fn hwloc() -> Result<tiers_node::Topology, String> {
    Err(
        "built without hwloc: rebuild with `--features hwloc` (needs libhwloc-dev and libudev-dev)"
            .into(),
    )
}

/// Prints the topology.
pub fn run(a: TopoArgs) -> Result<(), Box<dyn std::error::Error>> {
    let t = if a.source == "hwloc" {
        hwloc()?
    } else {
        tiers_node::Topology::detect()
    };
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&t)?)?;
    } else {
        out!("{}", t.report())?;
    }
    Ok(())
}

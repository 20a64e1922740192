//! # tiers-gaspi: GASPI for C programs, on tiers
//!
//! A drop-in GASPI library (`libtiers_gaspi.so`/`.a`, installed also as `libGPI2`) with the
//! headers of `include/`: unmodified GASPI programs compiled against it run on the cluster
//! tier, started by `tiers run -n N -- ./prog` (shm engine), as one process, or by
//! `tiers gaspi run` (a `gaspi_run`-compatible launcher). How GASPI's objects map onto the
//! cluster tier is described in [`ctx`].
#![allow(clippy::missing_safety_doc)]
#![deny(missing_docs)]

mod api;
mod coll;
pub mod ctx;
mod passive;
mod printf;
mod seg;
pub mod stats;
mod threads;
pub mod types;

pub use api::*;

/// The directory of the C headers (for the installer and the tests).
pub const INCLUDE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/include");

/// The headers, for `tiers gaspi install`: (file name, contents).
pub const HEADERS: [(&str, &str); 5] = [
    ("GASPI.h", include_str!("../include/GASPI.h")),
    ("GASPI_types.h", include_str!("../include/GASPI_types.h")),
    ("GASPI_Ext.h", include_str!("../include/GASPI_Ext.h")),
    (
        "GASPI_Threads.h",
        include_str!("../include/GASPI_Threads.h"),
    ),
    ("PGASPI.h", include_str!("../include/PGASPI.h")),
];

//! # tiers-node: the node tier of tiers
//!
//! Everything that makes the cores of one machine work together fast:
//!
//! - [`Topology`]: packages, NUMA nodes, cores, hardware threads, caches, SIMD level, affinity.
//! - [`affinity`] and [`Placement`]: pinning threads, compactly, scattered, or by a `+pemap`-style map.
//! - [`Pool`]: pinned workers running SPMD regions ([`Pool::spmd`]) and parallel loops with
//!   static, blocked and dynamic [`Schedule`]s; suspend/resume; stop/start; panics propagate.
//! - [`barrier`]: active, passive, relaxed, central, hierarchical (NUMA) and adaptive barriers.
//! - [`lock`]: ticket, MCS and test-and-test-and-set locks with guards, and [`critical`].
//! - [`queue`]: [`Inbox`], the multi-producer single-consumer inbox made of one lock-free SPSC
//!   ring per producer.
//! - [`PerWorker`]: processor-private data without false sharing.
//! - [`AlignedBuf`] (cache-line and page alignment, first touch) and the [`timer`].
//! - [`wait`]: the [`WaitPolicy`] of pools and barriers and [`Backoff`], the one waiting
//!   schedule (spin, yield, sleep) of every wait in the node tier.
//!
//! ```
//! use tiers_node::{Pool, Schedule};
//! use std::sync::atomic::{AtomicU64, Ordering};
//!
//! let pool = Pool::builder().threads(2).build().unwrap();
//! let sum = AtomicU64::new(0);
//! pool.for_each(0..1000, Schedule::Dynamic(64), |i| {
//!     sum.fetch_add(i as u64, Ordering::Relaxed);
//! });
//! assert_eq!(sum.into_inner(), 499_500);
//! let total = pool.reduce(0..1000, Schedule::Static, || 0u64, |r| r.map(|i| i as u64).sum(), |a, b| a + b);
//! assert_eq!(total, 499_500);
//! ```

#![deny(missing_docs)]

pub(crate) mod sync;

pub mod affinity;
pub mod barrier;
pub mod buffer;
pub mod cpulist;
pub mod futex;
pub mod lock;
pub mod padded;
pub mod placement;
pub mod pool;
pub mod private;
pub mod queue;
pub mod timer;
pub mod topology;
pub mod wait;

pub use barrier::{
    ActiveBarrier, AdaptiveBarrier, Barrier, BarrierKind, Breakable, CentralBarrier, HierBarrier,
    PassiveBarrier, RelaxedBarrier,
};
pub use buffer::{Align, AlignedBuf, BufError, MAX_ALIGN};
#[cfg(not(loom))]
pub use lock::critical;
pub use lock::{Lock, LockGuard, McsLock, RawLock, TicketLock, TtasLock};
pub use padded::CachePadded;
pub use placement::Placement;
pub use pool::{current_worker, partition, Pool, PoolBuilder, PoolError, Schedule, Worker};
pub use private::PerWorker;
pub use queue::{Full, Inbox, InboxSender, NoRoom};
pub use timer::Ticks;
pub use topology::{HwlocError, Topology};
pub use wait::{Backoff, WaitPolicy};

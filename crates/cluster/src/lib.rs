//! # tiers-cluster: the cluster tier of tiers
//!
//! A partitioned global address space with GASPI (GPI-2) semantics in Rust style: every rank
//! registers [segments](Segment) that every other rank reads and writes one-sidedly through
//! independent [queues](Queue); [notifications](World::notify_waitsome) tell a rank that data
//! has arrived (a `write_notify` makes the notification visible only after its data); passive
//! messages, barrier, allreduce and global atomic counters complete the set. Every call that
//! can wait takes a [`Timeout`]; every remote access is checked and fails with a typed
//! [`Error`], and the [state vector](World::state) tells which ranks are alive.
//!
//! ```
//! use tiers_cluster::{Notification, Op, SegId, Timeout};
//!
//! let out = tiers_cluster::run_local(2, |w| {
//!     let seg = w.segment(SegId(0), 64).unwrap();
//!     seg.set::<u64>(0, 40 + w.rank() as u64).unwrap();
//!     let peer = (w.rank() + 1) % w.size();
//!     let q = w.queue(0).unwrap();
//!     // 8 bytes from this rank's segment 0 at 0 to the peer's segment 0 at 8, then its
//!     // notification 0 = 1 (visible only after the data).
//!     let note = Notification { id: 0, value: 1 };
//!     q.write_notify(SegId(0).at(0), SegId(0).on(peer, 8), 8, note).unwrap();
//!     q.wait(Timeout::Block).unwrap();
//!     w.notify_waitsome(SegId(0), 0..1, Timeout::Block).unwrap();
//!     w.notify_reset(SegId(0), 0).unwrap();
//!     let mut sum = [0u64];
//!     w.allreduce(&[seg.get::<u64>(1).unwrap()], &mut sum, Op::Sum, Timeout::Block).unwrap();
//!     sum[0]
//! }).unwrap();
//! assert_eq!(out, vec![81, 81]);
//! ```
//!
//! Ranks are threads of one process (`local` engine), processes of one host started by
//! `tiers run` (`shm` engine), processes on any hosts talking over TCP sockets (`tcp`
//! engine, `tiers run --engine tcp`, also replicated), or MPI processes started by mpirun
//! (`mpi` engine, feature `mpi`); the [`Engine`] trait is the seam between them.
//! [`endpoint`] adds message-driven objects on node-tier workers.

#![deny(missing_docs)]

mod addr;
mod atomic;
pub mod collective;
mod config;
pub mod decomp;
pub mod endpoint;
pub mod engine;
mod error;
mod fingerprint;
mod health;
pub mod launch;
pub mod mover;
mod notify;
pub mod output;
mod passive;
pub mod progress;
mod queue;
mod segment;
mod sys;
mod timeout;
pub mod twosided;
mod wait;
mod world;

pub use addr::{Local, Notification, Remote, SegId};
pub use collective::{Collective, DataType, Op, Pod, Reducible};
pub use config::{
    env, threads, DEFAULT_QUEUE_DEPTH, LAZY_POLL_EVERY, MAX_SEGMENTS, NOTIFICATIONS, PROXY_MIN,
    QUEUES,
};
pub use engine::{Engine, EngineInfo, Transfer, TransportStats};
pub use error::{Error, IoError, Mismatch, Rank, Result};
pub use fingerprint::Fingerprint;
pub use health::Health;
pub use output::{output_target, Commit, OutputTarget, RankFile};
pub use progress::{Progress, ProgressStats};
pub use queue::Queue;
pub use segment::Segment;
pub use timeout::Timeout;
pub use world::{init, run_local, spmd, Builder, ProgressClaim, World};

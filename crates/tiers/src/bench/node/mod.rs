//! The node-tier benchmarks: barriers, locks, the inbox queue, per-thread data and allocators,
//! each beside its Rust and C peers on the same pinned threads.

pub mod alloc;
pub mod barrier;
pub mod lock;
mod peers;
pub mod private;
pub mod queue;
mod threads;

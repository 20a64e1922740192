//! Applications built on tiers: the sequence pipeline of SPIDAL (pairwise distances, SMACOF
//! multidimensional scaling, deterministic-annealing pairwise clustering), dynamically balanced
//! tile rendering, and the parallel overhead model used to analyse their scaling.
//!
//! Every O(N²) kernel works on contiguous row blocks of row-major matrices, so a row block is
//! the unit of work for a thread today and can become the unit owned by a rank later.

#![deny(missing_docs)]

pub mod alu;
pub mod clustering;
pub mod compare;
pub mod distance;
mod error;
pub mod fasta;
pub mod fft2d;
pub mod files;
mod guttman;
pub mod is;
mod kernel;
pub mod limits;
pub mod matrix;
pub mod md;
pub mod mds;
pub mod model;
pub mod npy;
pub mod projection;
pub mod redblack;
pub mod render;
pub mod rng;
mod rows;

pub use error::{Error, Result};

//! Places in the global address space, typed so that a swapped argument does not compile:
//! a [`Local`] place (this rank's segment and offset), a [`Remote`] one (a rank, its segment and
//! an offset) and a [`Notification`] (an id and a non-zero value).
//!
//! ```
//! use tiers_cluster::{Notification, SegId};
//! let src = SegId(0).at(64); // this rank's segment 0, offset 64
//! let dst = SegId(1).on(3, 0); // segment 1 of rank 3, offset 0
//! assert_eq!((src.offset, dst.rank, dst.seg), (64, 3, SegId(1)));
//! let ping = Notification { id: 0, value: 1 };
//! # let _ = ping;
//! ```

use crate::error::Rank;

/// A segment id (`0..MAX_SEGMENTS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegId(pub u32);

impl SegId {
    /// This rank's segment, at `offset`.
    #[inline]
    pub const fn at(self, offset: usize) -> Local {
        Local { seg: self, offset }
    }

    /// This segment at `rank`, at `offset`.
    #[inline]
    pub const fn on(self, rank: Rank, offset: usize) -> Remote {
        Remote {
            rank,
            seg: self,
            offset,
        }
    }
}

/// A place in the calling rank's memory: the source of a write, the destination of a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Local {
    /// The segment.
    pub seg: SegId,
    /// Bytes from its start.
    pub offset: usize,
}

/// A place in some rank's memory (the calling rank's own included).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Remote {
    /// The rank.
    pub rank: Rank,
    /// Its segment.
    pub seg: SegId,
    /// Bytes from the segment's start.
    pub offset: usize,
}

/// A notification: which one of a segment's, and the non-zero value it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Notification {
    /// `0..NOTIFICATIONS`.
    pub id: usize,
    /// Non-zero: a notification reads 0 until it arrives.
    pub value: u32,
}

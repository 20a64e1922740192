//! The state vector: the health of every rank.
//!
//! The launcher marks a rank that dies (and one that exits); waiting calls additionally check,
//! whenever a wait slice runs out, whether the processes of their peers still exist, so the
//! vector stays true even when the launcher itself is gone.

use crate::engine::ctl;

/// The health of one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Started by the launcher, not yet joined.
    Starting,
    /// Running.
    Healthy,
    /// Died, or was killed.
    Failed,
    /// Left the world normally.
    Exited,
}

impl Health {
    pub(crate) fn from_code(c: u32) -> Health {
        match c {
            ctl::ST_STARTING => Health::Starting,
            ctl::ST_HEALTHY => Health::Healthy,
            ctl::ST_EXITED => Health::Exited,
            _ => Health::Failed,
        }
    }

    /// Whether the rank is gone (failed or exited): nothing it would do can still happen.
    pub fn is_gone(self) -> bool {
        matches!(self, Health::Failed | Health::Exited)
    }
}

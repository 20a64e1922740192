//! How long a call may wait.

use std::time::{Duration, Instant};

/// How long a call that can wait may wait (GASPI's `GASPI_BLOCK`, `GASPI_TEST` or milliseconds).
///
/// Nothing in the cluster tier waits without one; a call that runs out returns
/// [`Error::Timeout`](crate::Error::Timeout) and, for collectives, can be called again to resume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// Wait until done (or until a peer the call needs has failed).
    Block,
    /// Check once, never wait.
    Test,
    /// Wait at most this long.
    After(Duration),
}

impl Timeout {
    /// At most `ms` milliseconds.
    pub const fn millis(ms: u64) -> Timeout {
        Timeout::After(Duration::from_millis(ms))
    }

    pub(crate) fn deadline(self) -> Deadline {
        match self {
            Timeout::Block => Deadline::Never,
            Timeout::Test => Deadline::Now,
            Timeout::After(d) => match Instant::now().checked_add(d) {
                Some(t) => Deadline::At(t),
                None => Deadline::Never,
            },
        }
    }
}

impl From<Duration> for Timeout {
    fn from(d: Duration) -> Self {
        Timeout::After(d)
    }
}

/// A [`Timeout`] turned into a point in time when the call starts.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Deadline {
    Never,
    Now,
    At(Instant),
}

impl Deadline {
    /// The time left as a [`Timeout`], for the next step of a call that waits in several.
    pub(crate) fn left(self) -> Timeout {
        match self {
            Deadline::Never => Timeout::Block,
            Deadline::Now => Timeout::Test,
            Deadline::At(t) => Timeout::After(t.saturating_duration_since(Instant::now())),
        }
    }

    /// The time left, capped at `slice` (so that waiters re-check peer health), or `None` when
    /// the deadline has passed.
    pub(crate) fn slice(self, slice: Duration) -> Option<Duration> {
        match self {
            Deadline::Never => Some(slice),
            Deadline::Now => None,
            Deadline::At(t) => {
                let left = t.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    None
                } else {
                    Some(left.min(slice))
                }
            }
        }
    }

    pub(crate) fn expired(self) -> bool {
        self.slice(Duration::from_secs(1)).is_none()
    }
}

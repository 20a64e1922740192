//! GASPI's statistics counters (`gaspi_statistic_*`): what this process has asked of the
//! network, counted while the verbosity level is 1 or more (0, the default, counts nothing, so
//! a program that does not ask pays one relaxed load per call).
//!
//! The specification leaves the counters to the implementation; these are tiers'. A counter
//! whose argument is `GASPI_STATISTIC_ARGUMENT_RANK` is kept per target rank (its total over
//! all ranks is not a counter of its own: sum them); the others take no argument.

use crate::types::*;
use std::ffi::CStr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The counters, in the order of their numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Counter {
    /// One-sided writes posted, by target rank (each element of a list counts).
    Writes,
    /// Bytes of those writes, by target rank.
    BytesWritten,
    /// One-sided reads posted, by target rank.
    Reads,
    /// Bytes of those reads, by target rank.
    BytesRead,
    /// Notifications posted (alone or with a write), by target rank.
    Notifications,
    /// Atomic operations (fetch-and-add, compare-and-swap), by target rank.
    Atomics,
    /// Passive messages sent, by target rank.
    PassiveSends,
    /// `gaspi_wait` calls.
    Waits,
    /// Barriers.
    Barriers,
    /// Allreduces (with a predefined or a user's operation).
    Allreduces,
}

/// Every counter: its name, its description, whether it is kept per rank.
const INFO: [(&CStr, &CStr, bool); 10] = [
    (c"writes", c"one-sided writes posted, by target rank", true),
    (
        c"bytes written",
        c"bytes of one-sided writes posted, by target rank",
        true,
    ),
    (c"reads", c"one-sided reads posted, by target rank", true),
    (
        c"bytes read",
        c"bytes of one-sided reads posted, by target rank",
        true,
    ),
    (
        c"notifications",
        c"notifications posted, by target rank",
        true,
    ),
    (c"atomics", c"atomic operations, by target rank", true),
    (
        c"passive sends",
        c"passive messages sent, by target rank",
        true,
    ),
    (c"waits", c"gaspi_wait calls", false),
    (c"barriers", c"barriers", false),
    (c"allreduces", c"allreduces", false),
];

/// How many counters there are.
pub const COUNTERS: usize = INFO.len();

/// The verbosity level every counter is gathered at.
const LEVEL: u32 = 1;

/// The counters of one process.
pub struct Stats {
    level: AtomicU32,
    /// Per counter: the total (counters without argument), or per rank (`n` words each).
    words: Box<[AtomicU64]>,
    n: usize,
}

impl Stats {
    /// Counters for a job of `n` ranks, all zero, not gathering.
    pub fn new(n: usize) -> Stats {
        Stats {
            level: AtomicU32::new(0),
            words: (0..COUNTERS * n.max(1))
                .map(|_| AtomicU64::new(0))
                .collect(),
            n: n.max(1),
        }
    }

    /// Counts `v` more of `c` for target `rank` (ignored for counters without argument).
    #[inline]
    pub fn count(&self, c: Counter, rank: usize, v: u64) {
        if self.level.load(Ordering::Relaxed) < LEVEL {
            return;
        }
        let i = c as usize * self.n
            + if INFO[c as usize].2 {
                rank.min(self.n - 1)
            } else {
                0
            };
        self.words[i].fetch_add(v, Ordering::Relaxed);
    }

    /// `gaspi_statistic_verbosity_level`.
    pub fn set_level(&self, level: u32) {
        self.level.store(level, Ordering::Relaxed);
    }

    /// `gaspi_statistic_counter_info`: (argument kind, name, description, level).
    pub fn info(c: u32) -> Option<(i32, &'static CStr, &'static CStr, u32)> {
        let &(name, desc, by_rank) = INFO.get(c as usize)?;
        let arg = if by_rank {
            GASPI_STATISTIC_ARGUMENT_RANK
        } else {
            GASPI_STATISTIC_ARGUMENT_NONE
        };
        Some((arg, name, desc, LEVEL))
    }

    /// `gaspi_statistic_counter_get`: counter `c` (for `arg`, a rank, where it has one).
    pub fn get(&self, c: u32, arg: u32) -> Result<u64, i32> {
        let &(_, _, by_rank) = INFO.get(c as usize).ok_or(GASPI_ERR_INV_NUM)?;
        let i = if by_rank {
            if arg as usize >= self.n {
                return Err(GASPI_ERR_INV_RANK);
            }
            arg as usize
        } else {
            0
        };
        Ok(self.words[c as usize * self.n + i].load(Ordering::Relaxed))
    }

    /// `gaspi_statistic_counter_reset`: counter `c` (every rank of it) back to zero.
    pub fn reset(&self, c: u32) -> Result<(), i32> {
        if c as usize >= COUNTERS {
            return Err(GASPI_ERR_INV_NUM);
        }
        for w in &self.words[c as usize * self.n..(c as usize + 1) * self.n] {
            w.store(0, Ordering::Relaxed);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_counted_until_asked_then_by_rank_or_in_total() {
        let s = Stats::new(3);
        s.count(Counter::Writes, 1, 1);
        assert_eq!(s.get(Counter::Writes as u32, 1), Ok(0));
        s.set_level(1);
        s.count(Counter::Writes, 1, 2);
        s.count(Counter::BytesWritten, 2, 4096);
        s.count(Counter::Barriers, 2, 1);
        s.count(Counter::Barriers, 0, 1);
        assert_eq!(s.get(Counter::Writes as u32, 1), Ok(2));
        assert_eq!(s.get(Counter::Writes as u32, 0), Ok(0));
        assert_eq!(s.get(Counter::BytesWritten as u32, 2), Ok(4096));
        assert_eq!(s.get(Counter::Barriers as u32, 99), Ok(2));
        assert_eq!(s.get(Counter::Writes as u32, 3), Err(GASPI_ERR_INV_RANK));
        assert_eq!(s.get(COUNTERS as u32, 0), Err(GASPI_ERR_INV_NUM));
        s.reset(Counter::Writes as u32).unwrap();
        assert_eq!(s.get(Counter::Writes as u32, 1), Ok(0));
        assert_eq!(s.get(Counter::BytesWritten as u32, 2), Ok(4096));
        assert_eq!(s.reset(COUNTERS as u32), Err(GASPI_ERR_INV_NUM));
        let (arg, name, _, level) = Stats::info(Counter::Waits as u32).unwrap();
        assert_eq!(
            (arg, name.to_str().unwrap(), level),
            (GASPI_STATISTIC_ARGUMENT_NONE, "waits", 1)
        );
        assert!(Stats::info(COUNTERS as u32).is_none());
    }
}

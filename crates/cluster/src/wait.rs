//! How the cluster tier waits: poll, busy-poll a little (spin, or yield), then nap.
//!
//! Every waiting loop of the engines paces itself with one [`Pace`]; the loops differ only in
//! what they poll and what they sleep on (a futex a peer rings, or plain time while MPI must be
//! polled). [`until`] is the loop for the plain case. The durations come from
//! [`config`](crate::config).

use crate::config::{FIRST_NAP, MAX_NAP};
use crate::error::{Error, Result};
use crate::timeout::Deadline;
use std::time::Duration;
use tiers_node::Backoff;

/// How long the naps of a wait are: the first, then twice the last up to the longest.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Naps {
    first: Duration,
    max: Duration,
}

impl Naps {
    /// Naps of a waiter that must poll (MPI progress): [`FIRST_NAP`] doubling to [`MAX_NAP`].
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) const POLLED: Naps = Naps {
        first: FIRST_NAP,
        max: MAX_NAP,
    };

    /// Naps of a fixed length (a waiter that is woken when there is news, and naps only to
    /// re-check what no one rings a bell for).
    pub(crate) const fn fixed(d: Duration) -> Naps {
        Naps { first: d, max: d }
    }
}

/// The pace of one wait: after each poll that found nothing, [`Pace::busy`] spins (for
/// `spin`), then yields the processor (for `yields`), and once both have run out the caller
/// sleeps [`Pace::nap`]s. The steps are the node tier's [`Backoff`] (one hint per spin step,
/// the clock read every [`Backoff::CLOCK_EVERY`] steps), so every wait of tiers has one
/// schedule type; a `Pace` adds only naps bounded by a deadline.
#[derive(Debug)]
pub(crate) struct Pace {
    steps: Backoff,
    /// Naps of zero length: the caller only re-polls.
    no_naps: bool,
}

impl Pace {
    /// A wait that starts now.
    pub(crate) fn new(spin: Duration, yields: Duration, naps: Naps) -> Pace {
        let mut steps = Backoff::new()
            .spin_limit(0)
            .spin_for(spin)
            .yield_for(yields);
        let no_naps = naps.first.is_zero();
        if !no_naps {
            steps = steps.with_sleep(naps.first, naps.max.max(naps.first));
        }
        Pace { steps, no_naps }
    }

    /// After a poll that found nothing: spins once or yields the processor while the busy
    /// phases last, and says whether it did. Once it says `false`, the caller naps.
    #[inline]
    pub(crate) fn busy(&mut self) -> bool {
        self.steps.busy()
    }

    /// The next nap, never past `deadline`; `None` once the deadline has passed.
    #[inline]
    pub(crate) fn nap(&mut self, deadline: Deadline) -> Option<Duration> {
        let next = if self.no_naps {
            Duration::ZERO
        } else {
            self.steps.nap()
        };
        deadline.slice(next)
    }
}

/// Polls `done` until it says `true`, paced by `pace`, sleeping its naps; `Err(Timeout)` once
/// `deadline` has passed (what `done` drives stays pending, so the wait can be resumed).
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) fn until(
    deadline: Deadline,
    mut pace: Pace,
    mut done: impl FnMut() -> Result<bool>,
) -> Result<()> {
    loop {
        if done()? {
            return Ok(());
        }
        if deadline.expired() {
            return Err(Error::Timeout);
        }
        if !pace.busy() {
            let nap = pace.nap(deadline).ok_or(Error::Timeout)?;
            std::thread::sleep(nap);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn spins_then_naps_doubling_up_to_the_longest() {
        let mut p = Pace::new(Duration::from_millis(2), Duration::ZERO, Naps::POLLED);
        let t = Instant::now();
        while p.busy() {}
        assert!(t.elapsed() >= Duration::from_millis(2));
        let naps: Vec<_> = (0..8).map(|_| p.nap(Deadline::Never).unwrap()).collect();
        assert_eq!(naps[0], FIRST_NAP);
        assert_eq!(naps[1], FIRST_NAP * 2);
        assert_eq!(naps[7], MAX_NAP);
        assert_eq!(p.nap(Deadline::Now), None);
    }

    #[test]
    fn no_busy_phase_without_spin_or_yield() {
        let mut p = Pace::new(Duration::ZERO, Duration::ZERO, Naps::fixed(FIRST_NAP));
        assert!(!p.busy());
        assert_eq!(p.nap(Deadline::Never), Some(FIRST_NAP));
        assert_eq!(p.nap(Deadline::Never), Some(FIRST_NAP));
    }

    #[test]
    fn until_times_out_and_finishes() {
        let pace = || Pace::new(Duration::from_micros(10), Duration::ZERO, Naps::POLLED);
        assert_eq!(
            until(Deadline::Now, pace(), || Ok(false)),
            Err(Error::Timeout)
        );
        let mut n = 0;
        let r = until(Deadline::Never, pace(), || {
            n += 1;
            Ok(n == 300)
        });
        assert_eq!((r, n), (Ok(()), 300));
    }
}

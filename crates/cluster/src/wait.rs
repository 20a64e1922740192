//! How the cluster tier waits: poll, busy-poll a little (spin, or yield), then nap.
//!
//! Every waiting loop of the engines paces itself with one [`Pace`]; the loops differ only in
//! what they poll and what they sleep on (a futex a peer rings, or plain time while MPI must be
//! polled). [`until`] is the loop for the plain case. The durations come from
//! [`config`](crate::config).

use crate::config::{CLOCK_EVERY, FIRST_NAP, MAX_NAP};
use crate::error::{Error, Result};
use crate::timeout::Deadline;
use std::time::{Duration, Instant};

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
/// sleeps [`Pace::nap`]s.
#[derive(Debug)]
pub(crate) struct Pace {
    /// End of the spinning phase (`None`: none, or over).
    spin_until: Option<Instant>,
    /// End of the yielding phase (`None`: none, or over).
    yield_until: Option<Instant>,
    polls: u32,
    nap: Duration,
    max_nap: Duration,
}

impl Pace {
    /// A wait that starts now.
    pub(crate) fn new(spin: Duration, yields: Duration, naps: Naps) -> Pace {
        let now = (!spin.is_zero() || !yields.is_zero()).then(Instant::now);
        Pace {
            spin_until: now.filter(|_| !spin.is_zero()).map(|t| t + spin),
            yield_until: now.filter(|_| !yields.is_zero()).map(|t| t + spin + yields),
            polls: 0,
            nap: naps.first,
            max_nap: naps.max,
        }
    }

    /// After a poll that found nothing: spins once (reading the clock every [`CLOCK_EVERY`]
    /// polls) or yields the processor while the busy phases last, and says whether it did.
    /// Once it says `false`, the caller naps.
    #[inline]
    pub(crate) fn busy(&mut self) -> bool {
        if let Some(end) = self.spin_until {
            self.polls = self.polls.wrapping_add(1);
            if self.polls % CLOCK_EVERY != 0 || Instant::now() < end {
                std::hint::spin_loop();
                return true;
            }
            self.spin_until = None;
        }
        if let Some(end) = self.yield_until {
            if Instant::now() < end {
                std::thread::yield_now();
                return true;
            }
            self.yield_until = None;
        }
        false
    }

    /// The next nap, never past `deadline`; `None` once the deadline has passed.
    #[inline]
    pub(crate) fn nap(&mut self, deadline: Deadline) -> Option<Duration> {
        let nap = deadline.slice(self.nap)?;
        self.nap = (self.nap * 2).min(self.max_nap);
        Some(nap)
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

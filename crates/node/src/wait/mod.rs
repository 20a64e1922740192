//! How a thread waits for another: the wait policies of the node tier, the one primitive,
//! `Signal`, that every waiting structure (barriers, pool wake-up) is built from, and
//! [`Backoff`], the waiting schedule (spin, yield, sleep) that every wait of the node tier
//! runs, for the other tiers to use too.
//!
//! MCTP's lesson ([GPI-MCTP]) is that no single way of waiting wins: busy spinning answers
//! fastest but burns a core and the memory bus, PAUSE-spinning is nearly as fast and kinder to
//! a sibling hyperthread, and sleeping in the kernel costs microseconds but frees the core when
//! arrival times differ by milliseconds. The adaptive policy spins briefly, then sleeps.
//!
//! Who waits where, on what, with which schedule and why each limit is what it is: see
//! `README.md` beside this file (`crates/node/src/wait/README.md`).

mod backoff;

pub(crate) use backoff::after;
pub use backoff::Backoff;

use crate::futex;
use crate::sync::{AtomicU32, Ordering};

/// How a waiting thread passes the time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
pub enum WaitPolicy {
    /// Busy-wait on the word (the "active" wait): lowest latency, burns the core.
    Spin,
    /// Busy-wait with a PAUSE instruction in the loop (the "passive" wait).
    Pause,
    /// Sleep in the kernel at once (the "relaxed" wait): frees the core, costs a wake-up.
    Park,
    /// Spin with PAUSE for a while, yield a few times, then sleep. The default.
    #[default]
    Auto,
}

/// Polls between yields under `WaitPolicy::Spin` (a poll is a few ns at most). Spinning waiters
/// yield every few µs, so that when threads outnumber cores the thread they wait for gets to
/// run within a few yields instead of a scheduler tick; when each thread has its core a yield
/// with nothing else runnable is a short syscall (well under 1% here).
const SPIN_YIELD_EVERY: u32 = 1 << 12;
/// Polls between yields under `WaitPolicy::Pause` (a PAUSE is tens of ns on recent x86).
const PAUSE_YIELD_EVERY: u32 = 1 << 8;
/// PAUSE-spins before an adaptive waiter starts yielding: 15 to 200 µs as a PAUSE takes 10 to
/// 140 cycles (about 100 µs measured on an AMD EPYC), long enough for threads that arrive
/// nearly together, short next to the milliseconds of a skewed arrival. One
/// PAUSE between looks: each waiter of a barrier or of the pool watches a line that one other
/// thread writes once, so looking often costs the writer nothing and answers soonest.
const AUTO_SPINS: u32 = 1 << 12;

/// `WaitPolicy::Spin`: bare polls, one yield every [`SPIN_YIELD_EVERY`] polls (the schedule
/// starts over after the yield).
const SPIN: Backoff = Backoff::new()
    .without_pause()
    .spin_limit(0)
    .spin_steps(SPIN_YIELD_EVERY - 1)
    .yield_limit(1);
/// `WaitPolicy::Pause`: a PAUSE before each poll, one yield every [`PAUSE_YIELD_EVERY`] polls.
const PAUSE: Backoff = Backoff::new()
    .spin_limit(0)
    .spin_steps(PAUSE_YIELD_EVERY - 1)
    .yield_limit(1);
/// `WaitPolicy::Auto`: [`AUTO_SPINS`] polls a PAUSE apart, [`Backoff::YIELD_LIMIT`] (8)
/// yields, then a futex sleep.
const AUTO: Backoff = Backoff::new().spin_limit(0).spin_steps(AUTO_SPINS);

impl WaitPolicy {
    /// Whether a waiter under this policy may sleep in the kernel, so that whoever changes the
    /// word it watches must be ready to wake it.
    #[inline(always)]
    pub fn may_park(self) -> bool {
        matches!(self, WaitPolicy::Park | WaitPolicy::Auto)
    }

    /// Parses `spin`, `pause`, `park` or `auto`.
    pub fn parse(s: &str) -> Option<WaitPolicy> {
        Some(match s {
            "spin" | "active" => WaitPolicy::Spin,
            "pause" | "passive" => WaitPolicy::Pause,
            "park" | "relaxed" | "sleep" => WaitPolicy::Park,
            "auto" | "adaptive" => WaitPolicy::Auto,
            _ => return None,
        })
    }
}

/// A 31-bit value that one thread publishes and others wait on, with a sleeping waiter
/// announced in bit 0 so that the publisher pays for a wake-up system call only when someone
/// actually sleeps.
#[derive(Debug)]
pub(crate) struct Signal(AtomicU32);

const SLEEPER: u32 = 1;

impl Signal {
    pub(crate) fn new(value: u32) -> Signal {
        Signal(AtomicU32::new(value << 1))
    }

    /// The current value (Acquire: what was written before the matching `set` is visible).
    #[inline(always)]
    pub(crate) fn get(&self) -> u32 {
        self.0.load(Ordering::Acquire) >> 1
    }

    /// Back to 0, with no sleeper announced. Only while nobody waits on it or sets it.
    pub(crate) fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }

    /// Publishes `value` (Release) and wakes sleepers if any announced themselves.
    #[inline(always)]
    pub(crate) fn set(&self, value: u32, policy: WaitPolicy) {
        if policy.may_park() {
            let old = self.0.swap(value << 1, Ordering::AcqRel);
            if old & SLEEPER != 0 {
                futex::wake_all(&self.0);
            }
        } else {
            self.0.store(value << 1, Ordering::Release);
        }
    }

    /// Waits, under `policy`, until `done(value)` holds, and returns that value.
    #[inline]
    pub(crate) fn wait_until(&self, policy: WaitPolicy, mut done: impl FnMut(u32) -> bool) -> u32 {
        let v = self.get();
        if done(v) {
            return v;
        }
        match policy {
            WaitPolicy::Spin | WaitPolicy::Pause => {
                let mut backoff = if policy == WaitPolicy::Spin {
                    SPIN
                } else {
                    PAUSE
                };
                loop {
                    backoff.snooze();
                    let v = self.get();
                    if done(v) {
                        return v;
                    }
                    if backoff.is_completed() {
                        backoff.reset();
                    }
                }
            }
            WaitPolicy::Park => self.sleep_until(done),
            WaitPolicy::Auto => {
                let mut backoff = AUTO;
                while !backoff.is_completed() {
                    backoff.snooze();
                    let v = self.get();
                    if done(v) {
                        return v;
                    }
                }
                self.sleep_until(done)
            }
        }
    }

    #[cold]
    fn sleep_until(&self, mut done: impl FnMut(u32) -> bool) -> u32 {
        loop {
            let raw = self.0.load(Ordering::Acquire);
            if done(raw >> 1) {
                return raw >> 1;
            }
            let marked = raw | SLEEPER;
            if raw == marked
                || self
                    .0
                    .compare_exchange(raw, marked, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                futex::wait(&self.0, marked, None);
            }
        }
    }
}

/// The crate-private `Signal` for the loom models in `tests/loom.rs`; it exists only under `--cfg loom`.
#[cfg(loom)]
#[doc(hidden)]
#[derive(Debug)]
pub struct LoomSignal(Signal);

#[cfg(loom)]
impl LoomSignal {
    /// `Signal::new`.
    pub fn new(value: u32) -> Self {
        LoomSignal(Signal::new(value))
    }
    /// `Signal::get`.
    pub fn get(&self) -> u32 {
        self.0.get()
    }
    /// `Signal::set`.
    pub fn set(&self, value: u32, policy: WaitPolicy) {
        self.0.set(value, policy)
    }
    /// `Signal::wait_until`.
    pub fn wait_until(&self, policy: WaitPolicy, done: impl FnMut(u32) -> bool) -> u32 {
        self.0.wait_until(policy, done)
    }
}

/// `a` is at or past `b` in 31-bit wrapping order (episode counters wrap).
#[inline(always)]
pub(crate) fn reached(a: u32, b: u32) -> bool {
    a.wrapping_sub(b) & (1 << 30) == 0
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn wrapping_order() {
        assert!(reached(5, 5));
        assert!(reached(6, 5));
        assert!(!reached(4, 5));
        // 0 comes right after the largest 31-bit episode.
        assert!(reached(0, (1 << 31) - 1));
        assert!(!reached((1 << 31) - 1, 0));
    }

    #[test]
    fn every_policy_sees_the_published_value() {
        for policy in [
            WaitPolicy::Spin,
            WaitPolicy::Pause,
            WaitPolicy::Park,
            WaitPolicy::Auto,
        ] {
            let s = Arc::new(Signal::new(0));
            let s2 = s.clone();
            let t = std::thread::spawn(move || s2.wait_until(policy, |v| v == 7));
            std::thread::sleep(std::time::Duration::from_millis(5));
            s.set(7, policy);
            assert_eq!(t.join().unwrap(), 7);
        }
    }

    #[test]
    fn parse_names() {
        assert_eq!(WaitPolicy::parse("passive"), Some(WaitPolicy::Pause));
        assert_eq!(WaitPolicy::parse("nope"), None);
    }
}

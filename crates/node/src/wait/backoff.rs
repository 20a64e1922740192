//! [`Backoff`]: the one waiting schedule of tiers (spin, then yield, then sleep).
//!
//! Why each phase and each limit is what it is, and which waits of the node tier use which
//! schedule: `README.md` beside this file.

use crate::sync::{spin_hint, yield_now};
use std::time::{Duration, Instant};

/// Waits in three phases, each step longer than the last: **spin** (spin-loop hints, twice as
/// many each step up to a limit), **yield** (give the processor to another runnable thread, a
/// limited number of times), **sleep** (naps that double from a minimum to a maximum).
///
/// The caller looks at what it waits for between steps. [`Backoff::new`] gives the default
/// schedule, whose limits are the associated constants ([`SPIN_LIMIT`](Backoff::SPIN_LIMIT),
/// [`YIELD_LIMIT`](Backoff::YIELD_LIMIT), [`SLEEP_MIN`](Backoff::SLEEP_MIN),
/// [`SLEEP_MAX`](Backoff::SLEEP_MAX)); the `const` builders change them, so a wait can name its
/// schedule once, as a `const`:
///
/// ```
/// use tiers_node::Backoff;
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::time::Duration;
///
/// /// Four looks 1, 2, 4 and 8 hints apart, seven yields, then naps of 20 µs doubling to 1 ms.
/// const SCHEDULE: Backoff = Backoff::new().spin_limit(3).yield_limit(7);
///
/// fn wait_for(ready: &AtomicBool) {
///     let mut backoff = SCHEDULE;
///     while !ready.load(Ordering::Acquire) {
///         backoff.snooze();
///     }
/// }
///
/// let ready = AtomicBool::new(false);
/// std::thread::scope(|s| {
///     s.spawn(|| wait_for(&ready));
///     std::thread::sleep(Duration::from_millis(5));
///     ready.store(true, Ordering::Release);
/// });
/// ```
///
/// A waiter with a better way to sleep than a timed nap (a futex whose writer wakes it, a
/// channel) spins and yields with [`snooze`](Backoff::snooze) until
/// [`is_completed`](Backoff::is_completed), then blocks on that:
///
/// ```
/// use tiers_node::Backoff;
/// use std::sync::atomic::{AtomicBool, Ordering};
///
/// fn wait_for(ready: &AtomicBool) {
///     let mut backoff = Backoff::new();
///     while !ready.load(Ordering::Acquire) {
///         if backoff.is_completed() {
///             std::thread::park(); // whoever sets `ready` unparks this thread
///         } else {
///             backoff.snooze();
///         }
///     }
/// }
/// # let ready = AtomicBool::new(true);
/// # wait_for(&ready);
/// ```
///
/// A waiter that must do something between naps (let a progress engine run, check a
/// deadline) or sleeps on a word of its own takes the naps' lengths from
/// [`nap`](Backoff::nap). A waiter that should spin for a time rather than a number of steps
/// says so with [`spin_for`](Backoff::spin_for):
///
/// ```
/// use tiers_node::Backoff;
/// use std::time::{Duration, Instant};
///
/// let mut backoff = Backoff::new().spin_limit(0).spin_for(Backoff::SPIN_TIME);
/// let t = Instant::now();
/// while !backoff.is_completed() {
///     backoff.snooze(); // one hint a step for 50 µs, then the yields
/// }
/// assert!(t.elapsed() >= Backoff::SPIN_TIME);
/// assert_eq!(backoff.nap(), Backoff::SLEEP_MIN);
/// assert_eq!(backoff.nap(), 2 * Backoff::SLEEP_MIN);
/// ```
///
/// Under loom (`--cfg loom`) every hint, yield and sleep is one scheduling point of the model,
/// so the spin and yield phases take one step each whatever the schedule: every path (spin,
/// yield, sleep) is still taken, and the models stay small.
#[derive(Clone, Debug)]
pub struct Backoff {
    // Where the wait stands (first: what every step reads).
    spins: u32,
    /// Spin steps in this wait: the schedule's, or, for a timed spin phase, `u32::MAX` until a
    /// step finds the time up and sets it to the steps taken.
    spin_end: u32,
    yields: u32,
    // The schedule, set by the builders and kept by `reset`.
    spin_limit: u32,
    /// Spin steps (`u32::MAX` for a timed phase), with loom's bound already applied.
    spin_steps: u32,
    /// The schedule sets `spin_steps` itself rather than from `spin_limit`.
    steps_set: bool,
    yield_limit: u32,
    pause: bool,
    sleep: bool,
    spin_for: Option<Duration>,
    spin_until: Option<Instant>,
    yield_for: Option<Duration>,
    yield_until: Option<Instant>,
    sleep_min: Duration,
    sleep_max: Duration,
    nap: Duration,
}

impl Backoff {
    /// The spin phase's pauses double from one spin-loop hint to `2^SPIN_LIMIT` (6: 1, 2, ...,
    /// 64 hints, 127 in all), as in crossbeam-utils' `Backoff`.
    ///
    /// Why: a hint is a PAUSE instruction, about 10 cycles on older x86 cores and about 140 since
    /// Intel's Skylake, so the phase lasts roughly 0.4 to 6 µs: a few to a few tens of
    /// cache-line transfers between cores (about 100 ns each), which covers a hand-over between
    /// two running threads. Every look at a word another core is writing pulls its cache line
    /// away from the writer, so the looks get rarer; a wait that lasts longer than this is
    /// probably waiting for a thread that is not running, and should give the core away.
    pub const SPIN_LIMIT: u32 = 6;
    /// Yields between the spin phase and the sleep phase (8).
    ///
    /// Why: `sched_yield` with nothing else runnable on the core returns in well under a
    /// microsecond, so eight cost a waiter that has its own core a few µs; when threads
    /// outnumber cores each yield runs another thread of this core for up to its time slice,
    /// so the thread being waited for gets to run within a few yields, sooner than from a
    /// sleep, which needs a timer and a wake-up.
    pub const YIELD_LIMIT: u32 = 8;
    /// The first nap of the sleep phase (20 µs); each next nap is twice as long.
    ///
    /// Why: a nap costs a system call and a wake-up (a few µs), and Linux lets the timer of a
    /// normal thread fire up to its timer slack (50 µs by default) late, so a 20 µs nap really
    /// lasts 20 to 70 µs: a shorter one would sleep about as long and cost as much. This is the
    /// schedule the cluster tier has always napped with.
    pub const SLEEP_MIN: Duration = Duration::from_micros(20);
    /// The longest nap (1 ms).
    ///
    /// Why: a sleeper that nobody wakes notices the change at most this late, about one
    /// scheduler tick (1 ms at 1000 Hz, 4 ms at 250 Hz); a wake-up every millisecond costs
    /// under 1% of a core, so longer naps would save almost nothing and answer later.
    pub const SLEEP_MAX: Duration = Duration::from_millis(1);
    /// How long the cluster tier spins before its first nap (50 µs), for
    /// [`spin_for`](Backoff::spin_for).
    ///
    /// Why: about the default timer slack, the shortest a nap really lasts (see
    /// [`SLEEP_MIN`](Backoff::SLEEP_MIN)): a wait that would end within the first nap anyway
    /// answers sooner when it is spun out, for the same core time.
    pub const SPIN_TIME: Duration = Duration::from_micros(50);
    /// A timed spin phase ([`spin_for`](Backoff::spin_for)) reads the clock once every this
    /// many steps: a step of one hint and a look at shared memory costs a few nanoseconds, a
    /// clock read about twenty, so the phase overruns its time by at most a microsecond or so.
    pub const CLOCK_EVERY: u32 = 64;

    /// The default schedule: spin up to [`SPIN_LIMIT`](Backoff::SPIN_LIMIT), yield
    /// [`YIELD_LIMIT`](Backoff::YIELD_LIMIT) times, then nap from
    /// [`SLEEP_MIN`](Backoff::SLEEP_MIN) doubling to [`SLEEP_MAX`](Backoff::SLEEP_MAX).
    ///
    /// ```
    /// use tiers_node::Backoff;
    ///
    /// let mut backoff = Backoff::new();
    /// let mut steps = 0;
    /// while !backoff.is_completed() {
    ///     backoff.snooze();
    ///     steps += 1;
    /// }
    /// assert_eq!(steps, Backoff::SPIN_LIMIT + 1 + Backoff::YIELD_LIMIT);
    /// ```
    #[inline]
    pub const fn new() -> Backoff {
        let spin_steps = loom_bound(Self::SPIN_LIMIT + 1);
        Backoff {
            spins: 0,
            spin_end: spin_steps,
            yields: 0,
            spin_limit: Self::SPIN_LIMIT,
            spin_steps,
            steps_set: false,
            yield_limit: loom_bound(Self::YIELD_LIMIT),
            pause: true,
            sleep: true,
            spin_for: None,
            spin_until: None,
            yield_for: None,
            yield_until: None,
            sleep_min: Self::SLEEP_MIN,
            sleep_max: Self::SLEEP_MAX,
            nap: Self::SLEEP_MIN,
        }
    }

    /// Pauses double up to `2^limit` hints (`limit` below 32). Unless
    /// [`spin_steps`](Backoff::spin_steps) or [`spin_for`](Backoff::spin_for) says otherwise,
    /// the spin phase is `limit + 1` steps, one per doubling; `spin_limit(0)` makes every step
    /// one hint.
    #[inline]
    pub const fn spin_limit(mut self, limit: u32) -> Backoff {
        assert!(limit < 32, "tiers: a Backoff's spin limit is below 32");
        self.spin_limit = limit;
        if !self.steps_set {
            self.spin_steps = loom_bound(limit + 1);
            self.spin_end = self.spin_steps;
        }
        self
    }

    /// The spin phase takes `steps` steps (0: none), the pause staying at `2^spin_limit` hints
    /// once it has got there.
    ///
    /// ```
    /// use tiers_node::Backoff;
    ///
    /// // A look after every hint, 4096 times, then straight to the naps.
    /// let mut backoff = Backoff::new().spin_limit(0).spin_steps(4096).yield_limit(0);
    /// for _ in 0..4096 {
    ///     assert!(backoff.is_spinning());
    ///     backoff.snooze();
    /// }
    /// assert!(backoff.is_completed());
    /// ```
    #[inline]
    pub const fn spin_steps(mut self, steps: u32) -> Backoff {
        self.spin_steps = loom_bound(steps);
        self.spin_end = self.spin_steps;
        self.steps_set = true;
        self.spin_for = None;
        self
    }

    /// The spin phase lasts `time` from the first [`snooze`](Backoff::snooze), however many
    /// steps that is (the clock is read once a step).
    #[inline]
    pub const fn spin_for(mut self, time: Duration) -> Backoff {
        self.steps_set = true;
        if cfg!(loom) || time.is_zero() {
            // Under loom the model has no time: one step.
            self.spin_steps = loom_bound(if time.is_zero() { 0 } else { 1 });
            self.spin_for = None;
        } else {
            self.spin_steps = u32::MAX;
            self.spin_for = Some(time);
        }
        self.spin_end = self.spin_steps;
        self
    }

    /// The yield phase takes `yields` steps (0: none).
    #[inline]
    pub const fn yield_limit(mut self, yields: u32) -> Backoff {
        self.yield_limit = loom_bound(yields);
        self.yield_for = None;
        self
    }

    /// The yield phase lasts `time` from its first step (zero: none), as MPI's own blocking
    /// calls yield while they wait when told the cores are oversubscribed.
    #[inline]
    pub const fn yield_for(mut self, time: Duration) -> Backoff {
        if cfg!(loom) || time.is_zero() {
            self.yield_limit = loom_bound(if time.is_zero() { 0 } else { 1 });
            self.yield_for = None;
        } else {
            self.yield_limit = u32::MAX;
            self.yield_for = Some(time);
        }
        self
    }

    /// The sleep phase naps from `min` doubling to `max` (`min` not zero, not above `max`).
    ///
    /// ```
    /// use tiers_node::Backoff;
    /// use std::time::Duration;
    ///
    /// let (min, max) = (Duration::from_micros(100), Duration::from_micros(300));
    /// let mut backoff = Backoff::new().with_sleep(min, max);
    /// let naps: Vec<_> = (0..4).map(|_| backoff.nap().as_micros()).collect();
    /// assert_eq!(naps, [100, 200, 300, 300]);
    /// ```
    #[inline]
    pub const fn with_sleep(mut self, min: Duration, max: Duration) -> Backoff {
        assert!(
            min.as_nanos() > 0 && min.as_nanos() <= max.as_nanos(),
            "tiers: a Backoff's naps go from a shortest above zero to a longest no shorter"
        );
        self.sleep_min = min;
        self.sleep_max = max;
        self.nap = min;
        self
    }

    /// No sleep phase: past the yields, [`snooze`](Backoff::snooze) keeps yielding (the
    /// behaviour of crossbeam-utils' `Backoff`), for a wait that must answer quickly however
    /// long it lasts and has no one to wake it. [`is_completed`](Backoff::is_completed) still
    /// says when the spin and yield phases are over.
    #[inline]
    pub const fn never_sleep(mut self) -> Backoff {
        self.sleep = false;
        self
    }

    /// The spin phase issues no hints: each step is only the caller's look (a bare busy
    /// poll, the lowest latency, and the hardest on a sibling hyperthread and on the memory
    /// system). Under loom a step is still a scheduling point.
    #[inline]
    pub const fn without_pause(mut self) -> Backoff {
        self.pause = false;
        self
    }

    /// Issues `hints` spin-loop hints (`std::hint::spin_loop`, PAUSE on x86): the unit every
    /// spin step is made of, for a wait whose pause depends on something only the caller knows
    /// (the ticket lock pauses in proportion to the waiters ahead of it). Under loom each hint
    /// is a scheduling point.
    ///
    /// ```
    /// tiers_node::Backoff::pause(16);
    /// ```
    #[inline]
    pub fn pause(hints: u32) {
        for _ in 0..hints {
            spin_hint();
        }
    }

    /// Backs off in a lock-free retry loop (a compare-and-swap lost to another thread, which
    /// therefore made progress): pauses `2^min(step, spin_limit)` hints and never yields or
    /// sleeps.
    ///
    /// ```
    /// use tiers_node::Backoff;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// fn fetch_mul(a: &AtomicUsize, b: usize) -> usize {
    ///     let mut backoff = Backoff::new();
    ///     loop {
    ///         let v = a.load(Ordering::Relaxed);
    ///         match a.compare_exchange_weak(v, v * b, Ordering::AcqRel, Ordering::Relaxed) {
    ///             Ok(v) => return v,
    ///             Err(_) => backoff.spin(),
    ///         }
    ///     }
    /// }
    /// let a = AtomicUsize::new(7);
    /// assert_eq!(fetch_mul(&a, 6), 7);
    /// assert_eq!(a.into_inner(), 42);
    /// ```
    #[inline]
    pub fn spin(&mut self) {
        Self::pause(1 << self.spins.min(self.spin_limit));
        self.spins = (self.spins + 1).min(self.spin_limit);
    }

    /// Backs off in a waiting loop (another thread has to act first): one step of the
    /// schedule. Spins while the spin phase lasts, then yields, then sleeps a nap (or, after
    /// [`never_sleep`](Backoff::never_sleep), yields again).
    #[inline]
    pub fn snooze(&mut self) {
        if self.spins < self.spin_end && self.spin_time_left() {
            if self.pause || cfg!(loom) {
                Self::pause(1 << self.spins.min(self.spin_limit));
            }
            self.spins += 1;
        } else {
            self.snooze_slow();
        }
    }

    /// One step of the spin or the yield phase, for a caller that sleeps on its own (on a
    /// futex a peer rings, or naps of [`nap`](Backoff::nap) between polls of a progress
    /// engine); `false`, doing nothing, once both phases are over.
    ///
    /// ```
    /// use tiers_node::Backoff;
    ///
    /// let mut backoff = Backoff::new().spin_limit(0).spin_steps(3).yield_limit(2);
    /// let mut steps = 0;
    /// while backoff.busy() {
    ///     steps += 1;
    /// }
    /// assert_eq!(steps, 5);
    /// assert!(backoff.is_completed());
    /// ```
    #[inline]
    pub fn busy(&mut self) -> bool {
        if self.spins < self.spin_end && self.spin_time_left() {
            if self.pause || cfg!(loom) {
                Self::pause(1 << self.spins.min(self.spin_limit));
            }
            self.spins += 1;
            return true;
        }
        if self.yield_left() {
            yield_now();
            self.yields = self.yields.saturating_add(1);
            return true;
        }
        false
    }

    /// Whether the yield phase has a step left; starts a timed phase's clock at its first step.
    fn yield_left(&mut self) -> bool {
        if self.yields >= self.yield_limit {
            return false;
        }
        let Some(time) = self.yield_for else {
            return true;
        };
        let now = Instant::now();
        if now < *self.yield_until.get_or_insert(after(now, time)) {
            return true;
        }
        self.yield_limit = self.yields;
        false
    }

    /// The yield and sleep phases, kept out of the spin loop.
    #[cold]
    fn snooze_slow(&mut self) {
        if self.yield_left() || !self.sleep {
            yield_now();
            self.yields = self.yields.saturating_add(1);
        } else {
            let nap = self.nap();
            #[cfg(not(loom))]
            std::thread::sleep(nap);
            #[cfg(loom)]
            {
                let _ = nap;
                yield_now();
            }
        }
    }

    /// Whether a timed spin phase has time left (always, for a counted one); starts its clock
    /// at the first step, and ends the phase when the time is up.
    #[inline]
    fn spin_time_left(&mut self) -> bool {
        let Some(time) = self.spin_for else {
            return true;
        };
        if self.spin_until.is_some() && self.spins % Self::CLOCK_EVERY != 0 {
            return true;
        }
        let now = Instant::now();
        if now < *self.spin_until.get_or_insert(after(now, time)) {
            return true;
        }
        self.spin_end = self.spins;
        false
    }

    /// Whether the spin phase is still on: the next [`snooze`](Backoff::snooze) spins (for a
    /// timed phase: unless its time runs out before).
    #[inline]
    pub fn is_spinning(&self) -> bool {
        self.spins < self.spin_end && self.spin_until.is_none_or(|until| Instant::now() < until)
    }

    /// Whether the spin and yield phases are over: a waiter that can block on something
    /// better than a timed nap (a futex, `thread::park`) should do so now.
    #[inline]
    pub fn is_completed(&self) -> bool {
        !self.is_spinning()
            && (self.yields >= self.yield_limit
                || self
                    .yield_until
                    .is_some_and(|until| Instant::now() >= until))
    }

    /// The next nap of the sleep phase, for a caller that sleeps on its own (a futex wait with
    /// a timeout, a progress call between naps): [`SLEEP_MIN`](Backoff::SLEEP_MIN) at first,
    /// twice the last one each call, at most [`SLEEP_MAX`](Backoff::SLEEP_MAX) (or the
    /// bounds given to [`with_sleep`](Backoff::with_sleep)).
    #[inline]
    pub fn nap(&mut self) -> Duration {
        let nap = self.nap;
        self.nap = nap.saturating_mul(2).min(self.sleep_max);
        nap
    }

    /// Starts the schedule over (for a new wait with the same `Backoff`).
    ///
    /// ```
    /// use tiers_node::Backoff;
    ///
    /// let mut backoff = Backoff::new().spin_steps(0).yield_limit(1);
    /// backoff.snooze();
    /// assert!(backoff.is_completed());
    /// backoff.reset();
    /// assert!(!backoff.is_completed());
    /// ```
    #[inline]
    pub fn reset(&mut self) {
        self.spins = 0;
        self.spin_end = self.spin_steps;
        self.yields = 0;
        self.spin_until = None;
        self.yield_until = None;
        self.yield_limit = match self.yield_for {
            Some(_) => u32::MAX,
            None => self.yield_limit,
        };
        self.nap = self.sleep_min;
    }
}

/// Under loom every step is a scheduling point of the model: a phase of one step already takes
/// every path, and more only multiply the interleavings.
const fn loom_bound(steps: u32) -> u32 {
    if cfg!(loom) && steps > 1 {
        1
    } else {
        steps
    }
}

/// `now + d`, or a century from now where that is beyond what an `Instant` holds (a wait of
/// `Duration::MAX` is a wait without end, not an overflow).
pub(crate) fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The phases in order, as (spin steps, yields) before `is_completed`.
    fn phases(mut b: Backoff) -> (u32, u32) {
        let (mut spins, mut yields) = (0, 0);
        while !b.is_completed() {
            if b.is_spinning() {
                spins += 1;
            } else {
                yields += 1;
            }
            b.snooze();
        }
        (spins, yields)
    }

    #[test]
    fn counted_phases() {
        assert_eq!(
            phases(Backoff::new()),
            (Backoff::SPIN_LIMIT + 1, Backoff::YIELD_LIMIT)
        );
        assert_eq!(phases(Backoff::new().spin_limit(3).yield_limit(7)), (4, 7));
        assert_eq!(
            phases(Backoff::new().spin_limit(0).spin_steps(100).yield_limit(0)),
            (100, 0)
        );
        assert_eq!(phases(Backoff::new().spin_steps(0).yield_limit(0)), (0, 0));
    }

    #[test]
    fn timed_spin_phase() {
        let d = Duration::from_micros(200);
        let mut b = Backoff::new().spin_for(d).yield_limit(0);
        assert!(b.is_spinning() && !b.is_completed());
        let t = Instant::now();
        while b.is_spinning() {
            b.snooze();
        }
        assert!(t.elapsed() >= d);
        assert!(b.is_completed());
        b.reset();
        assert!(b.is_spinning());
        assert!(Backoff::new()
            .spin_for(Duration::ZERO)
            .yield_limit(0)
            .is_completed());
    }

    #[test]
    fn naps_double_to_the_maximum_and_reset() {
        let mut b = Backoff::new();
        let naps: Vec<_> = (0..8).map(|_| b.nap()).collect();
        assert_eq!(naps[0], Backoff::SLEEP_MIN);
        assert_eq!(naps[1], 2 * Backoff::SLEEP_MIN);
        assert_eq!(*naps.last().unwrap(), Backoff::SLEEP_MAX);
        assert!(naps.windows(2).all(|w| w[0] <= w[1]));
        b.reset();
        assert_eq!(b.nap(), Backoff::SLEEP_MIN);
    }

    #[test]
    fn sleep_phase_sleeps_and_never_sleep_yields() {
        let mut b = Backoff::new()
            .spin_steps(0)
            .yield_limit(0)
            .with_sleep(Duration::from_millis(2), Duration::from_millis(2));
        let t = Instant::now();
        b.snooze();
        assert!(t.elapsed() >= Duration::from_millis(2));
        let mut b = Backoff::new().spin_steps(0).yield_limit(0).never_sleep();
        let t = Instant::now();
        for _ in 0..10 {
            b.snooze();
        }
        // Ten yields, no 20 µs naps (a generous bound for a loaded machine).
        assert!(t.elapsed() < Duration::from_secs(1));
        assert!(b.is_completed());
    }

    #[test]
    fn spin_stays_in_the_spin_phase() {
        let mut b = Backoff::new().spin_limit(2).yield_limit(0);
        for _ in 0..100 {
            b.spin();
        }
        assert!(b.is_spinning());
    }
}

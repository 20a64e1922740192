//! A high-frequency timer: the processor's time-stamp counter, calibrated once against the
//! monotonic clock (MCTP's "high frequency timer", [GPI-MCTP]). Reading it costs a few
//! nanoseconds, against some tens for `Instant::now()`. On processors without an invariant
//! TSC, and off x86-64, it falls back to the monotonic clock.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A reading of the timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticks(pub u64);

struct Calibration {
    /// Nanoseconds per tick, as a 32.32 fixed-point number.
    ns_per_tick_fp: u128,
    ticks_per_second: f64,
    tsc: bool,
}

fn epoch() -> &'static Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    E.get_or_init(Instant::now)
}

#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    // CPUID exists on every x86-64 processor; leaf 0x8000_0007 is queried only when the
    // maximum extended leaf says it exists.
    use core::arch::x86_64::__cpuid;
    let max_ext = __cpuid(0x8000_0000).eax;
    max_ext >= 0x8000_0007 && (__cpuid(0x8000_0007).edx & (1 << 8)) != 0
}

#[inline(always)]
fn raw(tsc: bool) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if tsc {
        // SAFETY: RDTSC has no preconditions on x86-64.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    let _ = tsc;
    epoch().elapsed().as_nanos() as u64
}

fn calibration() -> &'static Calibration {
    static C: OnceLock<Calibration> = OnceLock::new();
    C.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        let tsc = invariant_tsc();
        #[cfg(not(target_arch = "x86_64"))]
        let tsc = false;
        if !tsc {
            return Calibration {
                ns_per_tick_fp: 1 << 32,
                ticks_per_second: 1e9,
                tsc: false,
            };
        }
        // Two 20 ms windows; keep the later (caches and frequency settled).
        let mut tps = 0.0;
        for _ in 0..2 {
            let (t0, c0) = (Instant::now(), raw(true));
            while t0.elapsed() < Duration::from_millis(20) {
                std::hint::spin_loop();
            }
            let (t1, c1) = (Instant::now(), raw(true));
            tps = (c1 - c0) as f64 / (t1 - t0).as_secs_f64();
        }
        Calibration {
            ns_per_tick_fp: ((1e9 / tps) * 4294967296.0) as u128,
            ticks_per_second: tps,
            tsc: true,
        }
    })
}

impl Ticks {
    /// Reads the timer.
    #[inline(always)]
    pub fn now() -> Ticks {
        Ticks(raw(calibration().tsc))
    }

    /// Time from `earlier` to `self`.
    #[inline]
    pub fn since(self, earlier: Ticks) -> Duration {
        let t = self.0.saturating_sub(earlier.0) as u128;
        Duration::from_nanos(((t * calibration().ns_per_tick_fp) >> 32) as u64)
    }

    /// Time since this reading.
    #[inline]
    pub fn elapsed(self) -> Duration {
        Ticks::now().since(self)
    }
}

/// Timer ticks per second (the calibrated TSC frequency, or 10⁹ for the fallback clock).
pub fn ticks_per_second() -> f64 {
    calibration().ticks_per_second
}

/// Whether the time-stamp counter is in use (rather than the fallback clock).
pub fn uses_tsc() -> bool {
    calibration().tsc
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_the_monotonic_clock() {
        let _ = Ticks::now(); // calibrate first
        let (i0, t0) = (Instant::now(), Ticks::now());
        std::thread::sleep(Duration::from_millis(50));
        let (i1, t1) = (Instant::now(), Ticks::now());
        let ours = t1.since(t0).as_secs_f64();
        let std = (i1 - i0).as_secs_f64();
        assert!(
            (ours - std).abs() / std < 0.05,
            "timer {ours} s vs clock {std} s"
        );
        assert!(ticks_per_second() > 1e6);
        assert_eq!(t0.since(t1), Duration::ZERO, "no negative durations");
    }
}

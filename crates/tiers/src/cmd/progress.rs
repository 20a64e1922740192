//! Progress lines of long runs: what is done of how much, the time so far and an estimate of
//! the time left, on standard error (standard output keeps the results), at most every few
//! seconds and never for a run shorter than that.

use std::time::{Duration, Instant};

/// The first line after this long, then one this often.
const EVERY: Duration = Duration::from_secs(5);

/// A run's progress reporter (for one process: rank 0 reports for the job).
pub(crate) struct Progress {
    what: String,
    start: Instant,
    next: Duration,
    on: bool,
}

impl Progress {
    /// A reporter for `what` (`md`, `redblack mtp`, …) that prints only when `on`.
    pub(crate) fn new(what: impl Into<String>, on: bool) -> Progress {
        Progress {
            what: what.into(),
            start: Instant::now(),
            next: EVERY,
            on,
        }
    }

    /// `done` of `total` `units` are done.
    pub(crate) fn at(&mut self, done: usize, total: usize, units: &str) {
        if !self.on {
            return;
        }
        let t = self.start.elapsed();
        if t < self.next {
            return;
        }
        self.next = t + EVERY;
        eprintln!("{}", line(&self.what, done, total, units, t.as_secs_f64()));
    }
}

/// The line for `done` of `total` after `s` seconds: the rest estimated at the pace so far.
fn line(what: &str, done: usize, total: usize, units: &str, s: f64) -> String {
    let left = s * total.saturating_sub(done) as f64 / done.max(1) as f64;
    format!(
        "[{what}] {done} of {total} {units} ({:.0} %), {s:.1} s, about {left:.0} s to go",
        100.0 * done as f64 / total.max(1) as f64
    )
}

/// For a run whose parts report nothing as they go (an image's tiles, a transform's passes):
/// a line with the time so far every few seconds, from a thread of its own, until dropped.
pub(crate) struct Heartbeat {
    stop: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeat {
    /// Starts the lines for `what`; none when not `on`.
    pub(crate) fn start(what: &str, on: bool) -> Heartbeat {
        let stop = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let thread = on.then(|| {
            let (stop, what) = (stop.clone(), what.to_string());
            std::thread::spawn(move || {
                let t0 = Instant::now();
                let (lock, cv) = &*stop;
                let mut done = lock.lock().unwrap_or_else(|e| e.into_inner());
                // Looked at before every wait: a drop before the first wait is not missed.
                while !*done {
                    let (d, timeout) = cv
                        .wait_timeout(done, EVERY)
                        .unwrap_or_else(|e| e.into_inner());
                    done = d;
                    if !*done && timeout.timed_out() {
                        eprintln!(
                            "[{what}] running, {:.0} s so far",
                            t0.elapsed().as_secs_f64()
                        );
                    }
                }
            })
        });
        Heartbeat { stop, thread }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_estimate_the_rest_at_the_pace_so_far() {
        assert_eq!(
            line("md", 25, 100, "steps", 10.0),
            "[md] 25 of 100 steps (25 %), 10.0 s, about 30 s to go"
        );
        // Nothing done yet, or an empty run: no division by zero.
        assert!(line("x", 0, 0, "steps", 1.0).contains("0 of 0 steps"));
    }

    #[test]
    fn a_heartbeat_ends_when_dropped() {
        let t = Instant::now();
        drop(Heartbeat::start("test", true));
        assert!(t.elapsed() < EVERY, "{:?}", t.elapsed());
    }
}

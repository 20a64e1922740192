//! Who runs the passes: a thread that waits in a call drives the progress engine itself, and
//! a thread that only stands by (the GASPI library's watcher, which applies writes that
//! arrive while the program computes) steps aside while one does.
//!
//! A stand-by thread sleeps inside a pass, in `epoll_wait`, holding the reactor. Were it left
//! there, every answer a waiting thread needs would come through it: the stand-by wakes for
//! the data, applies it, and signals the waiter, which wakes in turn. Two wake-ups per
//! message, each tens of microseconds on a loaded host, where a waiter that runs the pass
//! itself pays none while it spins and one (the kernel's, for the socket) when it sleeps in
//! `epoll_wait`. So a waiter *claims* the progress engine: the first claim kicks a stand-by
//! out of `epoll_wait` (the waker), the stand-by parks until the last claim is released, and
//! the waiter's own passes take the reactor.
//!
//! The handshakes are Dekker-style, with sequentially consistent accesses on both sides:
//! a claimer increments `drivers` then reads `standing_by`, a stand-by sets `standing_by`
//! then reads `drivers`, so at least one of them sees the other (the claimer kicks, or the
//! stand-by parks). Releasing is the mirror: the last releaser decrements `drivers` then
//! reads `parked`; the stand-by sets `parked` (under the `aside` mutex) then reads `drivers`
//! before it waits, so it either sees no driver or is woken.

use super::{lock, TcpEngine};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

/// A claim on the progress engine, released when dropped.
pub(super) struct Claim<'a>(&'a TcpEngine);

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl TcpEngine {
    /// Claims the progress engine for a thread about to wait for passes of its own.
    pub(super) fn claim(&self) -> Claim<'_> {
        self.acquire();
        Claim(self)
    }

    /// Takes a claim without a guard (the engine trait's `progress_claim`); the first kicks a
    /// stand-by out of its pass.
    pub(super) fn acquire(&self) {
        if self.drivers.fetch_add(1, SeqCst) == 0 && self.standing_by.load(SeqCst) {
            self.waker.wake();
        }
    }

    /// Releases a claim (see [`claim`](Self::claim)); the last one wakes a parked stand-by.
    pub(super) fn release(&self) {
        if self.drivers.fetch_sub(1, SeqCst) == 1 && self.parked.load(SeqCst) {
            let _g = lock(&self.aside.0);
            self.aside.1.notify_all();
        }
    }

    /// A stand-by thread's pass: one pass waiting up to `max` for sockets, as
    /// [`poll`](Self::poll), while no thread drives; while one does, a nap of up to `max`
    /// that its release ends. Whether it found work.
    pub(super) fn stand_by(&self, max: Duration) -> bool {
        self.standing_by.store(true, SeqCst);
        if self.drivers.load(SeqCst) == 0 {
            let found = self.poll(max);
            self.standing_by.store(false, SeqCst);
            return found;
        }
        self.standing_by.store(false, SeqCst);
        let g = lock(&self.aside.0);
        self.parked.store(true, SeqCst);
        let g = if self.drivers.load(SeqCst) > 0 {
            self.aside
                .1
                .wait_timeout(g, max)
                .unwrap_or_else(|e| e.into_inner())
                .0
        } else {
            g
        };
        self.parked.store(false, SeqCst);
        drop(g);
        false
    }

    /// Wakes a thread asleep in a pass, so that it looks at its condition again: a thread of
    /// this rank changed memory that one may wait on (a notification set locally).
    pub(super) fn interrupt(&self) {
        if self.drivers.load(SeqCst) > 0 {
            self.waker.wake();
        }
    }
}

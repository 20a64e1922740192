//! Notifications: 32-bit flags in a segment's notification area, set remotely, waited for and
//! reset locally. A waiter sleeps on a futex; a notifier wakes it only when someone sleeps.

use crate::config::NOTIFICATIONS;
use crate::error::{Error, Result};
use crate::timeout::Timeout;
use crate::world::{SegId, World};
use std::ops::Range;

impl World {
    /// Waits until one of the notifications `ids` of the local segment `seg` is set; returns the
    /// lowest such id (reset it with [`World::notify_reset`]).
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchNotification`] for an empty range or one beyond
    /// [`NOTIFICATIONS`](crate::NOTIFICATIONS), [`Error::NoSuchSegment`] when `seg` is not
    /// registered, [`Error::Timeout`] when none came in time, [`Error::PeerFailed`] when a rank
    /// has failed, [`Error::Mpi`] when MPI fails.
    pub fn notify_waitsome(
        &self,
        seg: SegId,
        ids: Range<usize>,
        timeout: Timeout,
    ) -> Result<usize> {
        if ids.start >= ids.end || ids.end > NOTIFICATIONS {
            return Err(Error::NoSuchNotification {
                id: if ids.start >= NOTIFICATIONS || ids.start >= ids.end {
                    ids.start
                } else {
                    ids.end - 1
                },
                count: NOTIFICATIONS,
            });
        }
        self.engine
            .notify_waitsome(seg.0, ids.start, ids.end - ids.start, timeout)
    }

    /// Atomically reads and zeroes notification `id` of the local segment `seg`.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchNotification`] for an id beyond [`NOTIFICATIONS`](crate::NOTIFICATIONS),
    /// [`Error::NoSuchSegment`] when `seg` is not registered.
    pub fn notify_reset(&self, seg: SegId, id: usize) -> Result<u32> {
        self.check_notification(id)?;
        self.engine.notify_reset(seg.0, id)
    }
}

//! Passive communication: two-sided messages whose receiver sleeps (no CPU burnt) until a
//! sender wakes it. Each rank has a mailbox of fixed slots; a sender waits while it is full.

use crate::error::{Rank, Result};
use crate::timeout::Timeout;
use crate::world::World;

impl World {
    /// Sends `data` to `rank`'s mailbox, waiting within `timeout` while it is full.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchRank`](crate::Error::NoSuchRank), [`Error::MessageTooLarge`](crate::Error::MessageTooLarge) (beyond [`World::passive_max`]),
    /// [`Error::Timeout`](crate::Error::Timeout) when the mailbox stayed full, [`Error::PeerFailed`](crate::Error::PeerFailed) when `rank` has
    /// failed, [`Error::Mpi`](crate::Error::Mpi) when MPI fails.
    pub fn passive_send(&self, rank: Rank, data: &[u8], timeout: Timeout) -> Result<()> {
        self.check_rank(rank)?;
        self.engine.passive_send(rank, data, timeout)
    }

    /// Receives the next message into `buf`, sleeping while there is none; returns the sender
    /// and the length. A message longer than `buf` stays queued (`BufferTooSmall`).
    ///
    /// # Errors
    ///
    /// [`Error::BufferTooSmall`](crate::Error::BufferTooSmall), [`Error::Timeout`](crate::Error::Timeout) when no message came in time,
    /// [`Error::PeerFailed`](crate::Error::PeerFailed) when a rank has failed, [`Error::Mpi`](crate::Error::Mpi) when MPI fails.
    pub fn passive_receive(&self, buf: &mut [u8], timeout: Timeout) -> Result<(Rank, usize)> {
        self.engine.passive_receive(buf, timeout)
    }

    /// The largest passive message.
    pub fn passive_max(&self) -> usize {
        self.engine.passive_max()
    }
}

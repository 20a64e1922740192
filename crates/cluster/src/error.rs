//! Typed errors of the cluster tier.
//!
//! Every remote access is checked before it touches memory, so a bad argument is an `Err` that
//! names the offending values, never undefined behaviour in some other process.

use std::fmt;
use std::io;
use std::sync::Arc;

/// The index of a rank in the world.
pub type Rank = usize;

/// What went wrong in a cluster-tier call.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// `offset + len` does not fit in the segment `seg` of `rank` (whose size is `size`).
    OutOfBounds {
        /// The rank owning the segment.
        rank: Rank,
        /// The segment.
        seg: u32,
        /// The first byte asked for.
        offset: usize,
        /// The number of bytes asked for.
        len: usize,
        /// The registered size of the segment.
        size: usize,
    },
    /// The rank is not in the world.
    NoSuchRank {
        /// The rank asked for.
        rank: Rank,
        /// The size of the world.
        size: usize,
    },
    /// The segment is not registered (at that rank).
    NoSuchSegment {
        /// The segment asked for.
        seg: u32,
        /// The rank asked about.
        rank: Rank,
    },
    /// The segment id is registered already.
    SegmentExists {
        /// The segment.
        seg: u32,
    },
    /// The segment id is beyond the supported range.
    SegmentIdTooLarge {
        /// The segment asked for.
        seg: u32,
        /// The number of segment ids.
        max: u32,
    },
    /// An atomic needs an offset aligned to `align` bytes.
    Misaligned {
        /// The offset given.
        offset: usize,
        /// The alignment needed.
        align: usize,
    },
    /// The queue has `depth` requests posted since its last `wait`.
    QueueFull {
        /// The queue.
        queue: usize,
        /// Its depth.
        depth: usize,
    },
    /// The queue does not exist.
    NoSuchQueue {
        /// The queue asked for.
        queue: usize,
        /// The number of queues.
        count: usize,
    },
    /// The notification id is beyond the notification area of a segment.
    NoSuchNotification {
        /// The id asked for.
        id: usize,
        /// The number of notifications per segment.
        count: usize,
    },
    /// A notification value must not be 0 (0 means "not notified").
    ZeroNotification {
        /// The notification id.
        id: usize,
    },
    /// A passive message is longer than a mailbox slot.
    MessageTooLarge {
        /// The length given.
        len: usize,
        /// The largest passive message.
        max: usize,
    },
    /// The receive buffer is shorter than the next message (which stays queued).
    BufferTooSmall {
        /// The length of the message.
        need: usize,
        /// The length of the buffer.
        have: usize,
    },
    /// Input and output of a collective differ in length.
    LengthMismatch {
        /// Input length (elements).
        input: usize,
        /// Output length (elements).
        output: usize,
    },
    /// The ranks called different collectives, or the same one with different arguments (an
    /// allreduce of other lengths, types or operations, a barrier against a `segment()`), or
    /// this rank called another collective while one of its own had timed out and was still
    /// to be resumed (then `rank` is this rank and `theirs` the pending call). Every rank of the
    /// mismatched call gets this error; the collectives of the world stay usable (the call
    /// had no effect beyond a segment's creation being undone).
    CollectiveMismatch(Box<Mismatch>),
    /// The call did not complete within its timeout; calling it again resumes it.
    Timeout,
    /// The rank failed (died, or left the world) and the call needed it.
    PeerFailed(Rank),
    /// The launcher environment or the arguments of a setup call are wrong (a variable that is
    /// not set or not a number, a job that is not one, a segment too large to map).
    Setup(String),
    /// An operating-system call failed while doing `what` (mapping a segment, opening the
    /// control block of a job); [`source`](std::error::Error::source) is the OS error.
    Io {
        /// What was being done.
        what: String,
        /// The operating system's error.
        source: IoError,
    },
    /// An MPI call of the `mpi` engine returned an error code.
    Mpi {
        /// The MPI function (`MPI_Rput`, `MPI_Win_flush`, ...).
        call: &'static str,
        /// Its return code.
        code: i32,
        /// MPI's description of the code (`MPI_Error_string`), empty when MPI gave none.
        message: Box<str>,
    },
    /// A message to endpoint `endpoint` cannot be delivered: its worker has stopped (a handler
    /// of the run returned an error) and its inbox is full.
    EndpointStopped {
        /// The target endpoint.
        endpoint: usize,
    },
    /// A peer sent what this rank cannot take while data was moving: a message header that
    /// names an impossible length, an answer of the wrong size (a peer of another build, or
    /// memory overwritten by the program).
    Protocol {
        /// The rank that sent it, when known.
        from: Option<Rank>,
        /// What was wrong.
        what: Box<str>,
    },
    /// A message of `bytes` bytes could not be received: this process has no memory for it.
    OutOfMemory {
        /// What needed the memory.
        what: Box<str>,
        /// Bytes asked for.
        bytes: u64,
    },
    /// This replica fell so far behind that every live replica of `from` had dropped message
    /// `stamp` of `tag` from its log: the replica cannot go on (its rank goes on with the
    /// other replicas).
    ReplicaLagged {
        /// This replica's number (below 64).
        replica: u32,
        /// Its logical rank.
        rank: Rank,
        /// The logical rank whose message is gone.
        from: Rank,
        /// The message's tag.
        tag: u32,
        /// Its logical timestamp.
        stamp: u64,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::OutOfBounds {
                rank,
                seg,
                offset,
                len,
                size,
            } => write!(
                f,
                "out of bounds: bytes {offset}..{} of segment {seg} at rank {rank}, whose size is {size}",
                offset.saturating_add(*len)
            ),
            Error::NoSuchRank { rank, size } => {
                write!(f, "no rank {rank} in a world of {size} ranks")
            }
            Error::NoSuchSegment { seg, rank } => {
                write!(f, "segment {seg} is not registered at rank {rank}")
            }
            Error::SegmentExists { seg } => write!(f, "segment {seg} exists already"),
            Error::SegmentIdTooLarge { seg, max } => {
                write!(f, "segment id {seg} is too large: ids are 0..{max}")
            }
            Error::Misaligned { offset, align } => {
                write!(f, "offset {offset} is not aligned to {align} bytes")
            }
            Error::QueueFull { queue, depth } => write!(
                f,
                "queue {queue} is full: {depth} requests posted since its last wait"
            ),
            Error::NoSuchQueue { queue, count } => {
                write!(f, "no queue {queue}: there are {count} queues")
            }
            Error::NoSuchNotification { id, count } => {
                write!(f, "no notification {id}: a segment has {count}")
            }
            Error::ZeroNotification { id } => {
                write!(f, "notification {id}: the value must not be 0")
            }
            Error::MessageTooLarge { len, max } => {
                write!(f, "passive message of {len} bytes is larger than {max}")
            }
            Error::BufferTooSmall { need, have } => write!(
                f,
                "receive buffer of {have} bytes is too small for a message of {need}"
            ),
            Error::LengthMismatch { input, output } => write!(
                f,
                "input has {input} elements but output has {output}"
            ),
            Error::CollectiveMismatch(m) => write!(
                f,
                "collectives out of step: this rank called {}, rank {} called {}",
                m.mine, m.rank, m.theirs
            ),
            Error::Timeout => write!(f, "timed out (the call can be resumed)"),
            Error::PeerFailed(r) => write!(f, "rank {r} has failed"),
            Error::Setup(s) => write!(f, "setup: {s}"),
            Error::Io { what, source } => write!(f, "{what}: {source}"),
            Error::Mpi {
                call,
                code,
                message,
            } if message.is_empty() => write!(f, "{call} failed (MPI error {code})"),
            Error::Mpi {
                call,
                code,
                message,
            } => write!(f, "{call} failed: {message} (MPI error {code})"),
            Error::EndpointStopped { endpoint } => write!(
                f,
                "endpoint {endpoint} cannot receive: its worker has stopped and its inbox is full"
            ),
            Error::Protocol {
                from: Some(r),
                what,
            } => write!(f, "rank {r} sent what this rank cannot take: {what}"),
            Error::Protocol { from: None, what } => {
                write!(f, "a peer sent what this rank cannot take: {what}")
            }
            Error::OutOfMemory { what, bytes } => {
                write!(f, "no memory for {what} ({bytes} bytes)")
            }
            Error::ReplicaLagged {
                replica,
                rank,
                from,
                tag,
                stamp,
            } => write!(
                f,
                "replica {replica} of rank {rank} lags too far: every live replica of rank {from} dropped message {stamp} of tag {tag} from its log"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source.get()),
            _ => None,
        }
    }
}

/// What the ranks of a [`Error::CollectiveMismatch`] called.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// What this rank called.
    pub mine: crate::collective::Collective,
    /// What `rank` called.
    pub theirs: crate::collective::Collective,
    /// A rank that called something else (this rank itself when the mismatch is with its own
    /// pending call).
    pub rank: Rank,
}

impl Error {
    /// An [`Error::CollectiveMismatch`].
    pub fn mismatch(
        mine: crate::collective::Collective,
        theirs: crate::collective::Collective,
        rank: Rank,
    ) -> Error {
        Error::CollectiveMismatch(Box::new(Mismatch { mine, theirs, rank }))
    }

    /// An [`Error::Io`]: `source` happened while doing `what`.
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source: IoError(Arc::new(source)),
        }
    }
}

/// An operating-system error inside an [`Error::Io`], shared by the clones of that error.
/// Dereferences to the [`std::io::Error`]; two are equal when their kind, OS code and message
/// are.
#[derive(Clone, Debug)]
pub struct IoError(Arc<io::Error>);

impl IoError {
    /// The operating system's error.
    pub fn get(&self) -> &io::Error {
        &self.0
    }
}

impl std::ops::Deref for IoError {
    type Target = io::Error;
    fn deref(&self) -> &io::Error {
        &self.0
    }
}

impl PartialEq for IoError {
    fn eq(&self, other: &IoError) -> bool {
        self.0.kind() == other.0.kind()
            && self.0.raw_os_error() == other.0.raw_os_error()
            && self.0.to_string() == other.0.to_string()
    }
}

impl Eq for IoError {}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The result of a cluster-tier call.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn errors_stay_small() {
        // A post returns a Result<()> on every request: keep it as small as before the typed
        // variants (40 bytes on 64-bit targets).
        assert!(std::mem::size_of::<Error>() <= 40);
    }

    #[test]
    fn io_errors_keep_their_source() {
        let e = Error::io(
            "mapping the control block of job 1x2",
            io::Error::from_raw_os_error(libc::ENOENT),
        );
        assert_eq!(
            e.source().map(|s| s.to_string()),
            Some(io::Error::from_raw_os_error(libc::ENOENT).to_string())
        );
        assert!(e
            .to_string()
            .starts_with("mapping the control block of job 1x2: "));
        assert_eq!(e.clone(), e);
        let m = Error::Mpi {
            call: "MPI_Rput",
            code: 5,
            message: "".into(),
        };
        assert_eq!(m.to_string(), "MPI_Rput failed (MPI error 5)");
        assert!(m.source().is_none());
    }
}

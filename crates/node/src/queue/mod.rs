//! Message queues: the inboxes of the message-driven scheduler.
//!
//! Charm++'s SMP port (\[Mei2010\]) found that one shared, locked inbox per core collapses under
//! many producers, and that giving every producer its own lock-free single-producer queue into
//! each consumer ("a queue pair per producer") removes that contention. [`Inbox`] is exactly
//! that: one bounded SPSC ring ([`spsc`]) per producer, polled round-robin by the one consumer,
//! with batched consumption so the consumer publishes its progress once per batch, not once
//! per message.

mod inbox;
pub mod spsc;

pub use inbox::{Inbox, InboxSender, DEFAULT_CAPACITY, DEFAULT_MAX_PRODUCERS};

/// A push into a full queue: the value comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full<T>(pub T);

impl<T> std::fmt::Display for Full<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("queue is full")
    }
}

impl<T: std::fmt::Debug> std::error::Error for Full<T> {}

/// A producer refused: the queue already has as many as it was made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoRoom {
    /// The most producers the queue takes (every sender ever made counts, dropped or not).
    pub max_producers: usize,
}

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a queue made for {} producers has no room for another",
            self.max_producers
        )
    }
}

impl std::error::Error for NoRoom {}

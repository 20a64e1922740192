//! Passive messages: send and receive through each rank's mailbox.

use super::ok;
use tiers_cluster::{Error, Timeout, World};

const BLK: Timeout = Timeout::Block;

/// Every rank sends one message to the next around the ring and receives one from the previous,
/// with its sender, length and bytes intact.
pub fn passive_messages_go_around_the_ring(w: &World) {
    let (me, n) = (w.rank(), w.size());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let mut buf = vec![0u8; 64 * 1024];
    let msg: Vec<u8> = (0..100 + me).map(|i| (i + me) as u8).collect();
    ok(w.passive_send(next, &msg, BLK), "passive send");
    let (from, len) = ok(w.passive_receive(&mut buf, BLK), "passive receive");
    assert_eq!((from, len), (prev, 100 + prev));
    assert!(buf[..len]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == (i + prev) as u8));
    ok(w.barrier(BLK), "barrier");
}

/// Rank 0 sends to itself until its mailbox is full (a send that finds no room times out), a
/// receive into a buffer too short for the first message is refused without consuming it, and
/// the messages then come out in the order they were sent.
pub fn full_mailbox_refuses_then_drains_in_order(w: &World) {
    if w.rank() == 0 {
        let mut k = 0u32;
        loop {
            match w.passive_send(0, &k.to_le_bytes(), Timeout::Test) {
                Ok(()) => k += 1,
                Err(Error::Timeout) => break,
                Err(e) => panic!("self send: {e}"),
            }
            assert!(k < 10_000, "a mailbox must fill up");
        }
        assert!(k >= 1);
        let mut small = [0u8; 2];
        assert_eq!(
            w.passive_receive(&mut small, Timeout::Test),
            Err(Error::BufferTooSmall { need: 4, have: 2 })
        );
        let mut buf = [0u8; 64];
        for i in 0..k {
            let (from, len) = ok(w.passive_receive(&mut buf, Timeout::Test), "drain");
            assert_eq!((from, len), (0, 4));
            assert_eq!(u32::from_le_bytes(buf[..4].try_into().unwrap()), i, "FIFO");
        }
    }
    ok(w.barrier(BLK), "barrier");
}

/// With nothing sent, a receive times out, at once or after a while.
pub fn passive_receive_times_out(w: &World) {
    let mut buf = vec![0u8; 64 * 1024];
    assert_eq!(
        w.passive_receive(&mut buf, Timeout::Test),
        Err(Error::Timeout)
    );
    assert_eq!(
        w.passive_receive(&mut buf, Timeout::millis(10)),
        Err(Error::Timeout)
    );
    ok(w.barrier(BLK), "barrier");
}

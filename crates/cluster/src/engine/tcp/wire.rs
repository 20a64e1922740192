//! The tcp engine's frames: a fixed 48-byte header (little-endian words) and `len` bytes of
//! payload. Each rank sends everything it has for a peer on its own connection to that peer
//! (requests and replies alike), so the bytes of one rank to another arrive in the order they
//! were posted; that order is what makes a notification land after the data it announces.

/// Bytes of a header.
pub(super) const HEADER: usize = 48;

/// The largest payload a frame may announce (a sanity bound on what a peer can make this rank
/// allocate; transfers are limited by segment sizes long before).
pub(super) const MAX_PAYLOAD: u64 = 1 << 40;

/// What a frame asks for. Frames marked *counted* are acknowledged by [`Kind::Ack`] when the
/// sender asks ([`Kind::AckReq`]): a fence completes when every counted frame sent before it
/// has been applied at its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(super) enum Kind {
    /// First frame of a connection: `a` = the sender's rank.
    Hello = 1,
    /// Counted. Write the payload at `seg[a..]`.
    Put = 2,
    /// Counted. Store `b` (non-zero) into notification `a` of `seg`.
    Notify = 3,
    /// Read `c` bytes at `seg[a..]`; answer [`Kind::GetReply`] with request id `b`.
    Get = 4,
    /// The bytes of request `b` (`d` non-zero: the target could not read them).
    GetReply = 5,
    /// Fetch-and-add `c` to the word at `seg[a]`; answer [`Kind::AtomicReply`] for request `b`.
    FetchAdd = 6,
    /// Compare the word at `seg[a]` with `c`, swap in `d` when equal; answer for request `b`.
    CompareSwap = 7,
    /// The old value `c` of request `b` (`d` non-zero: the target had no such word).
    AtomicReply = 8,
    /// A passive message (the payload).
    Passive = 9,
    /// The receiver took `a` passive messages of the sender's: that many more may come.
    Credit = 10,
    /// `a` counted frames of the receiver's connection have been applied.
    Ack = 11,
    /// To the root: contribution to collective number `a`, call word `b`, the payload.
    Coll = 12,
    /// From the root: collective `a` ended with status `b` (see `coll::Status`), `c` and `d`
    /// the other call and its rank of a mismatch or the failed rank, payload the result.
    CollResult = 13,
    /// From the root: rank `a` is gone (`b` = 1: failed, 0: exited).
    Gone = 14,
    /// The sender leaves normally; its connection closes after this.
    Bye = 15,
    /// Acknowledge, with an [`Kind::Ack`], every counted frame of mine applied so far (a
    /// fence waits for it; acknowledgements are only sent when asked).
    AckReq = 16,
    /// Counted. Store `b` into the 8-byte word at `seg[a]`, atomically (a flag after data).
    Store = 17,
}

impl Kind {
    fn from_u32(v: u32) -> Option<Kind> {
        use Kind::*;
        Some(match v {
            1 => Hello,
            2 => Put,
            3 => Notify,
            4 => Get,
            5 => GetReply,
            6 => FetchAdd,
            7 => CompareSwap,
            8 => AtomicReply,
            9 => Passive,
            10 => Credit,
            11 => Ack,
            12 => Coll,
            13 => CollResult,
            14 => Gone,
            15 => Bye,
            16 => AckReq,
            17 => Store,
            _ => return None,
        })
    }

    /// Whether the target acknowledges it.
    pub(super) fn counted(self) -> bool {
        matches!(self, Kind::Put | Kind::Notify | Kind::Store)
    }
}

/// A frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Header {
    pub kind: Kind,
    pub seg: u32,
    pub a: u64,
    pub b: u64,
    pub c: u64,
    pub d: u64,
    /// Payload bytes that follow.
    pub len: u64,
}

impl Header {
    pub(super) fn new(kind: Kind) -> Header {
        Header {
            kind,
            seg: 0,
            a: 0,
            b: 0,
            c: 0,
            d: 0,
            len: 0,
        }
    }

    pub(super) fn encode(&self) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[0..4].copy_from_slice(&(self.kind as u32).to_le_bytes());
        h[4..8].copy_from_slice(&self.seg.to_le_bytes());
        for (i, w) in [self.a, self.b, self.c, self.d, self.len]
            .iter()
            .enumerate()
        {
            h[8 + 8 * i..16 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        h
    }

    /// The header at the start of `h`, or a description of what is wrong with it.
    pub(super) fn decode(h: &[u8]) -> Result<Header, String> {
        let word = |i: usize| u64::from_le_bytes(h[8 + 8 * i..16 + 8 * i].try_into().unwrap());
        let k = u32::from_le_bytes(h[0..4].try_into().unwrap());
        let kind = Kind::from_u32(k).ok_or_else(|| format!("unknown frame kind {k}"))?;
        let len = word(4);
        if len > MAX_PAYLOAD {
            return Err(format!("a frame announces {len} bytes of payload"));
        }
        Ok(Header {
            kind,
            seg: u32::from_le_bytes(h[4..8].try_into().unwrap()),
            a: word(0),
            b: word(1),
            c: word(2),
            d: word(3),
            len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_bad_ones_are_refused() {
        let mut h = Header::new(Kind::CompareSwap);
        h.seg = 7;
        h.a = 1 << 40;
        h.b = 3;
        h.c = u64::MAX;
        h.d = 42;
        h.len = 9;
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        let mut bad = h.encode();
        bad[0] = 99;
        assert!(Header::decode(&bad).unwrap_err().contains("99"));
        h.len = MAX_PAYLOAD + 1;
        assert!(Header::decode(&h.encode()).is_err());
        assert!(Kind::Put.counted() && Kind::Notify.counted() && !Kind::Ack.counted());
    }
}

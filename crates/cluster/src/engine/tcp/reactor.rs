//! The tcp engine's progress engine: one pass waits for ready sockets under epoll, reads every
//! incoming connection that has bytes until the kernel has none left (the sockets are
//! edge-triggered), applies the frames, acknowledges what it applied, accepts new
//! connections and writes out the links whose sockets became writable.
//!
//! Only one thread runs a pass at a time (the engine's reactor lock), so the read state of
//! the connections needs no lock of its own. Payloads of writes and of read answers go
//! straight into segment memory: through the connection's buffer for small frames, with a
//! `read` into the segment for large ones.

use super::poll::{self, copy_raw, IN, OUT};
use super::root::Outcome;
use super::wire::{Header, Kind, HEADER};
use super::{TcpEngine, T_CONN, T_LINK, T_LISTENER, T_WAKER};
use crate::sys::Mapping;
use std::io;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes a connection reads at a time into its buffer.
const READ_BUF: usize = 256 * 1024;
/// A payload with at least this many bytes still to come is read straight into its
/// destination (one copy less) once the buffer is empty.
const DIRECT_MIN: usize = 16 * 1024;
/// A payload with at least this many bytes still to come when the socket runs dry raises the
/// socket's low-water mark (`SO_RCVLOWAT`) to what is missing, so that the rest wakes the pass
/// once, when it is all in, instead of at every burst the network delivers (each wake-up a
/// scheduling of the thread that stands by, on a host whose cores are busy).
const LOWAT_MIN: usize = 32 * 1024;

/// Where the payload of the frame being read goes.
enum Sink {
    /// Segment memory (a write, or the answer to a read), kept alive while it is filled.
    Mem(*mut u8, #[allow(dead_code)] Arc<Mapping>),
    /// A buffer, handed on whole (passive messages, collectives).
    Buf(Vec<u8>),
    /// Nowhere (a write to a segment this rank does not have).
    Discard,
}

struct Cur {
    h: Header,
    sink: Sink,
    got: usize,
}

/// An incoming connection: a peer's link to this rank.
struct Conn {
    stream: TcpStream,
    peer: Option<usize>,
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
    cur: Option<Cur>,
    /// Counted frames applied (what an [`Kind::AckReq`] is answered with).
    applied: u64,
    /// The socket's low-water mark now (1: the kernel's default).
    lowat: usize,
    /// The highest low-water mark this socket takes: a quarter of its receive buffer, so
    /// that the bytes waited for always fit in the window the kernel advertises.
    lowat_max: usize,
}

/// What reading a connection ended with.
enum Read {
    /// The kernel has no more bytes for now.
    Drained,
    /// The peer closed the connection, or broke the protocol.
    Closed,
}

/// The state of the passes.
#[derive(Default)]
pub(super) struct Reactor {
    conns: Vec<Option<Conn>>,
    events: Vec<(u64, u32)>,
}

// SAFETY: the raw pointers in a connection's sink point into the mapping the sink keeps
// alive; the reactor is used under the engine's lock, one thread at a time.
unsafe impl Send for Reactor {}

impl Reactor {
    /// One pass: waits up to `max` for ready sockets and handles them. Whether it found work.
    pub(super) fn pass(&mut self, e: &TcpEngine, max: Duration) -> bool {
        let mut events = std::mem::take(&mut self.events);
        let _ = e.epoll.wait(&mut events, Some(max));
        let (mut recv_ns, mut send_ns) = (None::<u64>, None::<u64>);
        let (mut frames, mut bytes) = (0u64, 0u64);
        let mut found = false;
        for &(token, ev) in &events {
            match token {
                T_WAKER => {
                    e.waker.drain();
                    found = true;
                }
                T_LISTENER => {
                    let t0 = Instant::now();
                    self.accept(e, &mut frames, &mut bytes);
                    *recv_ns.get_or_insert(0) += super::ns(t0);
                    found = true;
                }
                t if t >= T_CONN => {
                    let i = (t - T_CONN) as usize;
                    let t0 = Instant::now();
                    self.serve(e, i, &mut frames, &mut bytes);
                    *recv_ns.get_or_insert(0) += super::ns(t0);
                    found = true;
                }
                t => {
                    // An outgoing link became writable (or its peer hung up, which the
                    // peer's own connection to this rank reports: see `TcpEngine::send`).
                    let p = (t - T_LINK) as usize;
                    if ev & OUT != 0 {
                        let t0 = Instant::now();
                        e.flush_link(p);
                        *send_ns.get_or_insert(0) += super::ns(t0);
                    }
                    found = true;
                }
            }
        }
        // Links that a sender left with a backlog while the socket had room again.
        let t0 = Instant::now();
        if e.flush_links() {
            *send_ns.get_or_insert(0) += super::ns(t0);
            found = true;
        }
        e.count_pass(recv_ns, send_ns, frames, bytes);
        self.events = events;
        found
    }

    fn accept(&mut self, e: &TcpEngine, frames: &mut u64, bytes: &mut u64) {
        loop {
            let s = match e.listener.accept() {
                Ok((s, _)) => s,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            if s.set_nonblocking(true).is_err() {
                continue;
            }
            let _ = s.set_nodelay(true);
            let i = match self.conns.iter().position(Option::is_none) {
                Some(i) => i,
                None => {
                    self.conns.push(None);
                    self.conns.len() - 1
                }
            };
            if e.epoll.add(&s, IN, T_CONN + i as u64).is_err() {
                continue;
            }
            let lowat_max = poll::rcvbuf(&s) / 4;
            self.conns[i] = Some(Conn {
                lowat: 1,
                lowat_max,
                stream: s,
                peer: None,
                buf: Vec::new(),
                lo: 0,
                hi: 0,
                cur: None,
                applied: 0,
            });
            // Bytes that arrived before the registration are read now.
            self.serve(e, i, frames, bytes);
        }
    }

    /// Reads connection `i` dry and applies its frames.
    fn serve(&mut self, e: &TcpEngine, i: usize, frames: &mut u64, bytes: &mut u64) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        let end = c.read(e, frames, bytes);
        if let Read::Closed = end {
            let c = self.conns[i].take().expect("present");
            e.epoll.remove(&c.stream);
            if let Some(p) = c.peer {
                // Without a goodbye first (which marks the peer as left), the peer failed.
                e.mark_gone(p, false);
            }
        }
    }
}

impl Conn {
    fn read(&mut self, e: &TcpEngine, frames: &mut u64, bytes: &mut u64) -> Read {
        if self.buf.is_empty() {
            self.buf = vec![0; READ_BUF];
        }
        loop {
            // Apply what the buffer holds.
            loop {
                match self.cur.as_mut() {
                    None => {
                        if self.hi - self.lo < HEADER {
                            break;
                        }
                        let h = match Header::decode(&self.buf[self.lo..self.lo + HEADER]) {
                            Ok(h) => h,
                            Err(_) => return Read::Closed,
                        };
                        self.lo += HEADER;
                        *frames += 1;
                        if !self.begin(e, h) {
                            return Read::Closed;
                        }
                    }
                    Some(cur) => {
                        let want = cur.h.len as usize - cur.got;
                        let n = want.min(self.hi - self.lo);
                        if n > 0 {
                            let src = &self.buf[self.lo..self.lo + n];
                            match &mut cur.sink {
                                Sink::Mem(p, _) => {
                                    // SAFETY: the sink's range was bounds-checked against
                                    // its mapping, which it keeps alive; `got + n <= len`.
                                    unsafe { copy_raw(src.as_ptr(), p.add(cur.got), n) };
                                }
                                Sink::Buf(v) => v.extend_from_slice(src),
                                Sink::Discard => {}
                            }
                            cur.got += n;
                            self.lo += n;
                        }
                        if cur.got < cur.h.len as usize {
                            break;
                        }
                        let cur = self.cur.take().expect("a frame");
                        self.finish(e, cur);
                    }
                }
            }
            if self.lo == self.hi {
                self.lo = 0;
                self.hi = 0;
            }
            // Read more: a large payload straight into its place, else into the buffer.
            let direct = match &self.cur {
                Some(Cur {
                    h,
                    sink: Sink::Mem(p, _),
                    got,
                }) if self.lo == self.hi && h.len as usize - got >= DIRECT_MIN => {
                    // SAFETY: `got < len`, inside the checked range.
                    Some((unsafe { p.add(*got) }, h.len as usize - got))
                }
                _ => None,
            };
            let r = match direct {
                Some((p, n)) => poll::read_raw(&self.stream, p, n),
                None => {
                    if self.lo > 0 && self.hi == self.buf.len() {
                        self.buf.copy_within(self.lo..self.hi, 0);
                        self.hi -= self.lo;
                        self.lo = 0;
                    }
                    let hi = self.hi;
                    io::Read::read(&mut &self.stream, &mut self.buf[hi..])
                }
            };
            match r {
                Ok(0) => return Read::Closed,
                Ok(n) => {
                    *bytes += n as u64;
                    match direct {
                        Some(_) => {
                            if let Some(cur) = self.cur.as_mut() {
                                cur.got += n;
                                if cur.got == cur.h.len as usize {
                                    let cur = self.cur.take().expect("a frame");
                                    self.finish(e, cur);
                                }
                            }
                        }
                        None => self.hi += n,
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    self.set_lowat();
                    return Read::Drained;
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Read::Closed,
            }
        }
    }

    /// Sets the socket's low-water mark for what is still to come (see [`LOWAT_MIN`]): the
    /// missing part of a large payload, at most `lowat_max`; else back to 1. Called when the
    /// socket has run dry, so no byte is waiting behind the mark; a FIN or an error wakes
    /// the pass whatever the mark.
    fn set_lowat(&mut self) {
        let missing = match &self.cur {
            Some(cur) => cur.h.len as usize - cur.got,
            None => 0,
        };
        let want = if missing >= LOWAT_MIN && self.lowat_max >= LOWAT_MIN {
            missing.min(self.lowat_max)
        } else {
            1
        };
        if want != self.lowat {
            poll::set_rcvlowat(&self.stream, want);
            self.lowat = want;
        }
    }

    /// Starts frame `h`: where its payload goes. False for a protocol error.
    fn begin(&mut self, e: &TcpEngine, h: Header) -> bool {
        let Some(_) = self.peer.or_else(|| (h.kind == Kind::Hello).then_some(0)) else {
            return false;
        };
        let len = h.len as usize;
        let sink = match h.kind {
            Kind::Put => match e.write_target(h.seg, h.a, h.len) {
                Some((p, keep)) => Sink::Mem(p, keep),
                None => Sink::Discard,
            },
            Kind::GetReply if h.d == 0 => match e.get_target(h.b) {
                Some((p, n, keep)) if n == len => Sink::Mem(p, keep),
                _ => Sink::Discard,
            },
            Kind::Passive | Kind::Coll | Kind::CollResult => {
                Sink::Buf(Vec::with_capacity(len.min(1 << 20)))
            }
            _ => Sink::Discard,
        };
        self.cur = Some(Cur { h, sink, got: 0 });
        if len == 0 {
            let cur = self.cur.take().expect("a frame");
            self.finish(e, cur);
        }
        true
    }

    /// Applies a frame whose payload is in.
    fn finish(&mut self, e: &TcpEngine, cur: Cur) {
        let h = cur.h;
        if h.kind == Kind::Hello {
            if (h.a as usize) < e.size {
                self.peer = Some(h.a as usize);
            }
            return;
        }
        let Some(p) = self.peer else { return };
        let payload = match cur.sink {
            Sink::Buf(v) => v,
            _ => Vec::new(),
        };
        match h.kind {
            Kind::Hello => {}
            Kind::Put => self.applied += 1,
            Kind::Notify => {
                e.notify_local(h.seg, h.a, h.b as u32);
                self.applied += 1;
            }
            Kind::Store => {
                e.store_local(h.seg, h.a, h.b);
                self.applied += 1;
            }
            Kind::Get => e.serve_get(p, &h),
            Kind::GetReply => e.get_done(h.b, h.d == 0),
            Kind::FetchAdd | Kind::CompareSwap => e.serve_atomic(p, &h),
            Kind::AtomicReply => e.atomic_done(h.b, h.c, h.d != 0),
            Kind::Passive => e.mailbox_push(p, payload),
            Kind::Credit => e.credit(p, h.a),
            Kind::Ack => e.ack(p, h.a),
            Kind::Coll => e.root_contribute(p, h.a, h.b, payload),
            Kind::CollResult => e.coll_result(h.a, Outcome::from_status(h.b, h.c, h.d, payload)),
            Kind::Gone if h.a as usize == e.rank => e.gone_self(),
            Kind::Gone => e.mark_gone(h.a as usize, h.b == 0),
            Kind::Bye => e.mark_gone(p, true),
            // Every counted frame sent before the request has been applied: the stream is in
            // order.
            Kind::AckReq => e.send_ack(p, self.applied),
        }
    }
}

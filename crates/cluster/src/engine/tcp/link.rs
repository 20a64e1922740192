//! A rank's outgoing link to one peer: the connection this rank made to the peer (on demand,
//! at the first frame for it) and the bytes the socket has not taken yet.
//!
//! Every frame for the peer goes through here, whichever thread sends it, under the link's
//! lock: frames go out whole and in the order they were sent. A send never blocks on the
//! socket: what the kernel does not take at once is kept in `pending` (the caller's memory is
//! free again when `send` returns) and written by later sends or by the progress engine when
//! the socket is writable again.

use super::poll::{self, copy_raw, Epoll, OUT};
use super::wire::{Header, Kind, HEADER};
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The socket buffers asked for on each side of a link (send on the connecting side, receive
/// on the listener, which its accepted connections inherit): a large write goes into the
/// kernel in one system call instead of waiting in the link's backlog for passes on
/// `EPOLLOUT` edges, each a wake-up. Memory is taken only while bytes are queued.
pub(super) const SOCKET_BUFFER: usize = 4 << 20;

/// One outgoing link.
#[derive(Default)]
pub(super) struct Link {
    stream: Option<TcpStream>,
    /// The connection failed (or could not be made): nothing more goes to this peer.
    pub broken: bool,
    /// Bytes not yet taken by the socket, from `start`.
    pending: Vec<u8>,
    start: usize,
    /// Counted frames sent so far (see [`Kind::counted`]).
    pub counted: u64,
}

/// What [`Link::send`] reports.
pub(super) enum Sent {
    /// The frame is on its way; the number of counted frames sent so far on this link.
    Ok(u64),
    /// The link is broken: the peer is gone.
    Broken,
}

impl Link {
    /// Bytes waiting for the socket.
    pub(super) fn backlog(&self) -> usize {
        self.pending.len() - self.start
    }

    /// Whether the connection exists.
    pub(super) fn connected(&self) -> bool {
        self.stream.is_some()
    }

    /// Connects to the peer at `addr` (this rank is `me`; the peer learns it from the hello
    /// frame) and registers the socket with `epoll` under `token`, within `timeout`.
    pub(super) fn connect(
        &mut self,
        addr: SocketAddr,
        me: usize,
        epoll: &Epoll,
        token: u64,
        timeout: Duration,
    ) -> io::Result<()> {
        let mut s = TcpStream::connect_timeout(&addr, timeout)?;
        s.set_nodelay(true)?;
        poll::set_buffer(&s, true, SOCKET_BUFFER);
        s.set_write_timeout(Some(timeout))?;
        let mut h = Header::new(Kind::Hello);
        h.a = me as u64;
        s.write_all(&h.encode())?;
        s.set_nonblocking(true)?;
        epoll.add(&s, OUT, token)?;
        self.stream = Some(s);
        Ok(())
    }

    /// Sends the frames `(header, payload, payload length)` in order, in one system call when
    /// the socket takes them (a write and its notification go out together). Returns the
    /// count of counted frames sent on this link so far.
    ///
    /// # Safety
    ///
    /// Every payload must be readable for its length for the duration of the call; each
    /// header's `len` must be its payload's length.
    pub(super) unsafe fn send(
        &mut self,
        frames: &[(Header, *const u8, usize)],
        sent_bytes: &mut u64,
    ) -> Sent {
        if self.broken {
            return Sent::Broken;
        }
        let Some(s) = self.stream.as_ref() else {
            return Sent::Broken;
        };
        let heads: Vec<[u8; HEADER]> = frames
            .iter()
            .map(|(h, _, len)| {
                debug_assert_eq!(h.len as usize, *len);
                if h.kind.counted() {
                    self.counted += 1;
                }
                h.encode()
            })
            .collect();
        let mut parts: Vec<(*const u8, usize)> = Vec::with_capacity(2 * frames.len());
        for (h, (_, p, len)) in heads.iter().zip(frames) {
            parts.push((h.as_ptr(), HEADER));
            parts.push((*p, *len));
        }
        let mut done = 0;
        if self.backlog() == 0 {
            match poll::writev_raw(s, &parts) {
                Ok(n) => done = n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.broken = true;
                    return Sent::Broken;
                }
            }
        }
        *sent_bytes += done as u64;
        // Keep what the socket did not take.
        for &(p, len) in &parts {
            if done >= len {
                done -= len;
                continue;
            }
            let rest = len - done;
            let at = self.pending.len();
            self.pending.reserve(rest);
            // SAFETY: the caller guarantees the piece is readable for `len` bytes; `reserve`
            // made room for `rest` bytes past `at`, which `set_len` then covers.
            unsafe {
                copy_raw(p.add(done), self.pending.as_mut_ptr().add(at), rest);
                self.pending.set_len(at + rest);
            }
            done = 0;
        }
        if self.backlog() > 0 {
            self.flush(sent_bytes);
        }
        Sent::Ok(self.counted)
    }

    /// Writes as much of the backlog as the socket takes; whether anything went out.
    pub(super) fn flush(&mut self, sent_bytes: &mut u64) -> bool {
        let Some(s) = self.stream.as_ref() else {
            return false;
        };
        let mut any = false;
        while self.backlog() > 0 && !self.broken {
            let p = &self.pending[self.start..];
            match poll::writev_raw(s, &[(p.as_ptr(), p.len())]) {
                Ok(0) => break,
                Ok(n) => {
                    self.start += n;
                    *sent_bytes += n as u64;
                    any = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => self.broken = true,
            }
        }
        if self.start == self.pending.len() {
            self.pending.clear();
            self.start = 0;
            if self.pending.capacity() > 1 << 22 {
                self.pending.shrink_to(1 << 16);
            }
        } else if self.start > 1 << 20 && self.start * 2 > self.pending.len() {
            self.pending.drain(..self.start);
            self.start = 0;
        }
        any
    }

    /// Closes the connection after the backlog (the peer reads the end of the stream).
    pub(super) fn close(&mut self) {
        if let Some(s) = self.stream.take() {
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
        self.broken = true;
    }
}

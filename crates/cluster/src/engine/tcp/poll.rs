//! The system calls of the tcp engine's progress thread: an epoll instance (edge-triggered
//! interest in sockets) and an eventfd that other threads write to wake it. Everything unsafe
//! of the engine is here.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// Readable (or the peer closed).
pub(super) const IN: u32 = libc::EPOLLIN as u32;
/// Writable again after a write that would have blocked.
pub(super) const OUT: u32 = libc::EPOLLOUT as u32;

/// An epoll instance.
pub(super) struct Epoll(RawFd);

impl Epoll {
    pub(super) fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 has no memory preconditions; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll(fd))
    }

    /// Watches `fd` (edge-triggered) for `events`, reported with `token`.
    pub(super) fn add(&self, fd: &impl AsRawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: events | libc::EPOLLET as u32 | libc::EPOLLRDHUP as u32,
            u64: token,
        };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call; both fds are open
        // (the caller owns `fd`, this instance owns its own).
        let r = unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut ev) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Stops watching `fd` (closing it would too; this is for sockets that stay open).
    pub(super) fn remove(&self, fd: &impl AsRawFd) {
        // SAFETY: a null event is allowed for EPOLL_CTL_DEL since Linux 2.6.9.
        unsafe {
            libc::epoll_ctl(
                self.0,
                libc::EPOLL_CTL_DEL,
                fd.as_raw_fd(),
                std::ptr::null_mut(),
            )
        };
    }

    /// Waits up to `timeout` (`None`: until an event; zero: a poll) for events, appending
    /// `(token, events)` to `out` (cleared first).
    pub(super) fn wait(
        &self,
        out: &mut Vec<(u64, u32)>,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        const MAX: usize = 64;
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; MAX];
        let ms = timeout.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as i32);
        out.clear();
        // SAFETY: `evs` has room for MAX events, as told.
        let n = unsafe { libc::epoll_wait(self.0, evs.as_mut_ptr(), MAX as i32, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        for ev in &evs[..n as usize] {
            out.push((ev.u64, ev.events));
        }
        Ok(())
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: this instance owns the fd and closes it once.
        unsafe { libc::close(self.0) };
    }
}

/// An eventfd: `wake` from any thread makes the progress thread's epoll report it.
pub(super) struct Waker(RawFd);

impl Waker {
    pub(super) fn new() -> io::Result<Waker> {
        // SAFETY: eventfd has no memory preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Waker(fd))
    }

    pub(super) fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an eventfd this instance owns. A full
        // counter (EAGAIN) still leaves the fd readable, which is all a wake needs.
        unsafe { libc::write(self.0, (&one as *const u64).cast(), 8) };
    }

    /// Resets the counter (after the epoll reported it).
    pub(super) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from an eventfd this instance owns.
        unsafe { libc::read(self.0, (&mut v as *mut u64).cast(), 8) };
    }
}

impl AsRawFd for Waker {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        // SAFETY: this instance owns the fd and closes it once.
        unsafe { libc::close(self.0) };
    }
}

/// Reads up to `len` bytes from `fd` into the raw memory at `dst` (a segment's, which other
/// threads may be using: no Rust reference to it is formed). `Ok(0)`: the peer closed.
pub(super) fn read_raw(fd: &impl AsRawFd, dst: *mut u8, len: usize) -> io::Result<usize> {
    // SAFETY: the caller guarantees `dst..dst + len` lies inside a live mapping; read writes
    // at most `len` bytes there.
    let n = unsafe { libc::read(fd.as_raw_fd(), dst.cast(), len) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Asks the kernel for socket buffers of `bytes` (`SO_SNDBUF` when `send`, else
/// `SO_RCVBUF`); a refusal leaves the default (autotuned) size.
pub(super) fn set_buffer(fd: &impl AsRawFd, send: bool, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    let opt = if send {
        libc::SO_SNDBUF
    } else {
        libc::SO_RCVBUF
    };
    // SAFETY: `v` is a c_int that lives through the call, and its size is passed with it.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Sets `SO_RCVLOWAT`: the kernel reports the socket readable (and wakes an `epoll_wait`)
/// only once this many bytes are in, or the peer closed. A refusal leaves the old value.
pub(super) fn set_rcvlowat(fd: &impl AsRawFd, bytes: usize) {
    let v = bytes.clamp(1, i32::MAX as usize) as libc::c_int;
    // SAFETY: `v` is a c_int that lives through the call, and its size is passed with it.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// The socket's receive buffer in bytes as the kernel sized it (`SO_RCVBUF`), 0 if unknown.
pub(super) fn rcvbuf(fd: &impl AsRawFd) -> usize {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` live through the call; `len` holds `v`'s size.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &mut v as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    if r == 0 {
        v.max(0) as usize
    } else {
        0
    }
}

/// Writes the pieces `(pointer, length)` in order to `fd` (non-blocking); returns how many
/// bytes went out.
pub(super) fn writev_raw(fd: &impl AsRawFd, parts: &[(*const u8, usize)]) -> io::Result<usize> {
    let iov: Vec<libc::iovec> = parts
        .iter()
        .filter(|p| p.1 > 0)
        .map(|&(p, l)| libc::iovec {
            iov_base: p as *mut libc::c_void,
            iov_len: l,
        })
        .collect();
    if iov.is_empty() {
        return Ok(0);
    }
    // SAFETY: an all-zero msghdr is valid (no name, no control data); its iovecs point at
    // memory the caller guarantees readable for their lengths, which sendmsg only reads.
    // MSG_NOSIGNAL: a closed peer gives EPIPE, not a SIGPIPE that would kill the process.
    let n = unsafe {
        let mut m: libc::msghdr = std::mem::zeroed();
        m.msg_iov = iov.as_ptr() as *mut libc::iovec;
        m.msg_iovlen = iov.len().min(1024) as _;
        libc::sendmsg(fd.as_raw_fd(), &m, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT)
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Copies `len` bytes between raw memory ranges (a received payload into a segment, a
/// segment's bytes into a send buffer).
///
/// # Safety
///
/// Both ranges must be valid for `len` bytes and must not overlap.
pub(super) unsafe fn copy_raw(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

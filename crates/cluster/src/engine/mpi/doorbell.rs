//! A doorbell for the messages mode: a datagram that wakes a rank's stand-by thread when
//! another host has sent it an operation.
//!
//! Over MPI's TCP transports an operation on another host's memory lands only while the target
//! calls into MPI, and MPI gives nothing to sleep on until data arrives: no file descriptor, no
//! callback. A rank that only spins on its memory (a GASPI program waiting for a write, as
//! GPI-2's `write_lat` does) therefore depended on a watcher that probed MPI on a timer (every
//! 20 µs, about 70 µs with the kernel's timer slack), two to three times GPI-2's TCP device,
//! whose thread sleeps in `epoll_wait` on its sockets.
//!
//! Here every rank of a world across hosts opens a UDP socket; the addresses are gathered once
//! through MPI. After a header of the messages mode leaves for another host (`MPI_Isend`), the
//! sender sends that target a 12-byte datagram: its rank and how many headers it has sent to
//! it so far. The target's stand-by thread sleeps in `poll` on the socket, wakes when the
//! datagram arrives, and lets MPI progress until it has taken in as many headers from that
//! sender as the datagram announced (and any payload behind them), for at most
//! [`CATCH_UP`]: the data itself still travels through MPI, the doorbell only says when to
//! look. A header can come later than its ring (MPI queued it: a connection still being
//! made, a full socket); a sender whose wait outlasted the target's `CATCH_UP` rings again
//! once its messages are out, as it does after a large payload. A datagram that is lost
//! (UDP over a local network rarely loses one) costs the target one stand-by's timeout, as
//! before; one from elsewhere costs a spurious wake-up and is forgotten after `CATCH_UP`.
//!
//! The address a sender rings is the target's interface on a subnet of one of the sender's own
//! interfaces (Open MPI's TCP transport chooses its routes the same way), else the target's
//! first address that is not a loopback one. `TIERS_MPI_DOORBELL=0` turns the doorbell off.

use super::raw::{self, Comm};
use crate::error::{Error, Rank, Result};
use crate::timeout::Deadline;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The longest a stand-by thread lets MPI progress after a ring before it sleeps again.
pub(super) const CATCH_UP: Duration = Duration::from_micros(200);

/// The longest a stand-by thread polls for a payload still coming in before it naps.
pub(super) const PAYLOAD_SPIN: Duration = Duration::from_micros(30);

/// Headers taken in between two reads of the rings waiting on the socket (see
/// [`Doorbell::took`]); well below the ~256 rings a socket's default buffer holds.
const DRAIN_EVERY: u64 = 32;

/// Addresses a rank advertises (IPv4 interfaces, the loopback one last).
const MAX_ADDRS: usize = 4;

/// Bytes of one ring: the sender's rank (u32) and its count of headers sent (u64).
const RING_LEN: usize = 12;

/// One rank's doorbell (see the module documentation).
pub(super) struct Doorbell {
    sock: UdpSocket,
    /// Where each rank's doorbell is rung from here (`None`: this rank, or no route).
    peers: Vec<Option<SocketAddrV4>>,
    /// Headers this rank has sent to each rank (counted under the messages mode's send lock).
    sent: Vec<AtomicU64>,
    /// The highest count each rank's rings announced.
    rung: Vec<AtomicU64>,
    /// Headers taken in from each rank.
    got: Vec<AtomicU64>,
    /// Headers taken in since the socket was last drained.
    undrained: AtomicU64,
    me: Rank,
}

/// An interface address and its netmask, host byte order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Iface {
    ip: u32,
    mask: u32,
}

impl Iface {
    fn is_loopback(self) -> bool {
        self.ip >> 24 == 127
    }
    fn pack(self) -> u64 {
        (self.ip as u64) << 32 | self.mask as u64
    }
    fn unpack(v: u64) -> Option<Iface> {
        (v != 0).then_some(Iface {
            ip: (v >> 32) as u32,
            mask: v as u32,
        })
    }
}

/// This host's IPv4 interfaces that are up, the loopback ones last, at most [`MAX_ADDRS`].
fn interfaces() -> Vec<Iface> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list that we walk read-only and free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut p = head;
    while !p.is_null() {
        // SAFETY: p is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        let up = ifa.ifa_flags & libc::IFF_UP as u32 != 0;
        if !up || ifa.ifa_addr.is_null() || ifa.ifa_netmask.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points to a sockaddr of the family it names.
        if unsafe { (*ifa.ifa_addr).sa_family } as i32 != libc::AF_INET {
            continue;
        }
        // SAFETY: an AF_INET address and netmask are sockaddr_in.
        let (addr, mask) = unsafe {
            (
                &*(ifa.ifa_addr as *const libc::sockaddr_in),
                &*(ifa.ifa_netmask as *const libc::sockaddr_in),
            )
        };
        out.push(Iface {
            ip: u32::from_be(addr.sin_addr.s_addr),
            mask: u32::from_be(mask.sin_addr.s_addr),
        });
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out.sort_by_key(|i| i.is_loopback());
    out.dedup();
    out.truncate(MAX_ADDRS);
    out
}

/// The address of a peer with interfaces `theirs` to ring from a host with `mine`: one on a
/// subnet of ours, else their first that is not a loopback one, else their loopback one when
/// we have one too (a rank on this machine).
fn route(mine: &[Iface], theirs: &[Iface]) -> Option<u32> {
    let shared = theirs.iter().find(|t| {
        !t.is_loopback()
            && mine
                .iter()
                .any(|m| !m.is_loopback() && m.mask == t.mask && m.ip & m.mask == t.ip & t.mask)
    });
    if let Some(t) = shared {
        return Some(t.ip);
    }
    if let Some(t) = theirs.iter().find(|t| !t.is_loopback()) {
        return Some(t.ip);
    }
    let local = mine.iter().any(|m| m.is_loopback());
    theirs
        .iter()
        .find(|t| t.is_loopback() && local)
        .map(|t| t.ip)
}

impl Doorbell {
    /// Opens this rank's doorbell and gathers every rank's (collective over `comm`). `None`
    /// where any rank could not open one or the doorbell is turned off: then nobody rings.
    pub(super) fn open(comm: Comm, off: bool) -> Result<Option<Doorbell>> {
        let (me, n) = raw::rank_size(comm);
        let setup = Deadline::Never;
        let sock = if off {
            None
        } else {
            UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
                .and_then(|s| s.set_nonblocking(true).map(|()| s))
                .ok()
        };
        let port = sock
            .as_ref()
            .and_then(|s| s.local_addr().ok())
            .map_or(0, |a| a.port());
        let mine = if port == 0 { Vec::new() } else { interfaces() };
        let ports = raw::allgather_u64(port as u64, comm, setup)?;
        let mut addrs = vec![Vec::new(); n];
        for k in 0..MAX_ADDRS {
            let v = mine.get(k).map_or(0, |i| i.pack());
            for (r, x) in raw::allgather_u64(v, comm, setup)?.into_iter().enumerate() {
                addrs[r].extend(Iface::unpack(x));
            }
        }
        let Some(sock) = sock else {
            return Ok(None);
        };
        if ports.contains(&0) {
            return Ok(None);
        }
        let peers = (0..n)
            .map(|r| {
                if r == me {
                    return None;
                }
                let ip = route(&mine, &addrs[r])?;
                Some(SocketAddrV4::new(Ipv4Addr::from(ip), ports[r] as u16))
            })
            .collect();
        let zeros = || (0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        Ok(Some(Doorbell {
            sock,
            peers,
            sent: zeros(),
            rung: zeros(),
            got: zeros(),
            undrained: AtomicU64::new(0),
            me,
        }))
    }

    /// Counts a header sent to `rank` and rings its doorbell with the new count. Called under
    /// the messages mode's send lock, right after the header's `MPI_Isend`, so counts follow
    /// the order of the messages.
    pub(super) fn ring(&self, rank: Rank) {
        let Some(cnt) = self.sent.get(rank) else {
            return;
        };
        let seq = cnt.fetch_add(1, Ordering::Relaxed) + 1;
        let Some(Some(to)) = self.peers.get(rank) else {
            return;
        };
        let mut b = [0u8; RING_LEN];
        b[..4].copy_from_slice(&(self.me as u32).to_le_bytes());
        b[4..].copy_from_slice(&seq.to_le_bytes());
        // A ring that cannot go (the socket's buffer full) only delays the target until its
        // stand-by's timeout: the data itself travels through MPI.
        let _ = self.sock.send_to(&b, *to);
    }

    /// Rings `rank`'s doorbell again without a new header: a payload it is receiving from
    /// this rank has left.
    pub(super) fn nudge(&self, rank: Rank) {
        let (Some(cnt), Some(Some(to))) = (self.sent.get(rank), self.peers.get(rank)) else {
            return;
        };
        let mut b = [0u8; RING_LEN];
        b[..4].copy_from_slice(&(self.me as u32).to_le_bytes());
        b[4..].copy_from_slice(&cnt.load(Ordering::Relaxed).to_le_bytes());
        let _ = self.sock.send_to(&b, *to);
    }

    /// Wakes a thread of this rank asleep in [`wait`](Self::wait) (a stand-by that must step
    /// aside): a datagram to this rank's own socket that announces nothing.
    pub(super) fn kick(&self) {
        if let Ok(a) = self.sock.local_addr() {
            let _ = self
                .sock
                .send_to(&[0u8], SocketAddrV4::new(Ipv4Addr::LOCALHOST, a.port()));
        }
    }

    /// Counts a header taken in from `src`. Every [`DRAIN_EVERY`] headers the rings that
    /// announced them are read from the socket, whichever thread took them in: a rank that
    /// takes its headers in its own waits, never standing by, would otherwise leave them
    /// there until the socket's buffer is full (about 256 rings), and the kernel would drop
    /// the next rings, among them the one a later stand-by needs.
    pub(super) fn took(&self, src: Rank) {
        if let Some(g) = self.got.get(src) {
            g.fetch_add(1, Ordering::Relaxed);
        }
        if self.undrained.fetch_add(1, Ordering::Relaxed) + 1 >= DRAIN_EVERY {
            self.drain();
        }
    }

    /// Whether a ring announced headers that have not been taken in yet.
    pub(super) fn behind(&self) -> bool {
        self.rung
            .iter()
            .zip(&self.got)
            .any(|(r, g)| r.load(Ordering::Relaxed) > g.load(Ordering::Relaxed))
    }

    /// Forgets what rings announced beyond what was taken in (a catch-up ran out of time:
    /// the rest is slow, or the ring was not one of ours).
    pub(super) fn forget(&self) {
        for (r, g) in self.rung.iter().zip(&self.got) {
            r.store(g.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// Sleeps until a ring arrives or `max` passes, then reads every ring that came; whether
    /// one did. A wake-up by a signal counts as a timeout.
    pub(super) fn wait(&self, max: Duration) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: max.as_secs() as libc::time_t,
            tv_nsec: max.subsec_nanos() as libc::c_long,
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask.
        let r = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        r > 0 && self.drain()
    }

    /// Reads every ring waiting on the socket; whether there was one.
    fn drain(&self) -> bool {
        self.undrained.store(0, Ordering::Relaxed);
        let mut any = false;
        let mut b = [0u8; 64];
        while let Ok(k) = self.sock.recv(&mut b) {
            if k != RING_LEN {
                continue;
            }
            let src = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
            let mut s = [0u8; 8];
            s.copy_from_slice(&b[4..RING_LEN]);
            if let Some(r) = self.rung.get(src) {
                r.fetch_max(u64::from_le_bytes(s), Ordering::Relaxed);
                any = true;
            }
        }
        any
    }
}

/// `TIERS_MPI_DOORBELL`: `0` off, `1` or unset on.
pub(super) fn turned_off(v: Option<&str>) -> Result<bool> {
    match v {
        None | Some("1") => Ok(false),
        Some("0") => Ok(true),
        Some(other) => Err(Error::Setup(format!(
            "{}={other}: expected 1 (ring a target's doorbell after each operation sent to \
             another host) or 0 (never)",
            crate::config::env::MPI_DOORBELL
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(a: [u8; 4], bits: u32) -> Iface {
        Iface {
            ip: u32::from_be_bytes(a),
            mask: if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            },
        }
    }

    #[test]
    fn a_route_prefers_a_shared_subnet_then_any_address_then_loopback() {
        let lo = i([127, 0, 0, 1], 8);
        let mine = [i([10, 0, 0, 1], 24), i([192, 168, 1, 5], 24), lo];
        let theirs = [i([172, 16, 0, 9], 16), i([192, 168, 1, 7], 24), lo];
        assert_eq!(
            route(&mine, &theirs),
            Some(u32::from_be_bytes([192, 168, 1, 7]))
        );
        let far = [i([172, 16, 0, 9], 16), lo];
        assert_eq!(
            route(&mine, &far),
            Some(u32::from_be_bytes([172, 16, 0, 9]))
        );
        assert_eq!(
            route(&mine, &[lo]),
            Some(u32::from_be_bytes([127, 0, 0, 1]))
        );
        assert_eq!(route(&[i([10, 0, 0, 1], 24)], &[lo]), None);
        assert_eq!(route(&mine, &[]), None);
    }

    #[test]
    fn addresses_survive_packing_and_zero_is_none() {
        let a = i([10, 1, 2, 3], 20);
        assert_eq!(Iface::unpack(a.pack()), Some(a));
        assert_eq!(Iface::unpack(0), None);
    }

    #[test]
    fn interfaces_list_loopback_last() {
        let v = interfaces();
        assert!(v.len() <= MAX_ADDRS);
        if let Some(k) = v.iter().position(|x| x.is_loopback()) {
            assert!(v[k..].iter().all(|x| x.is_loopback()), "{v:?}");
        }
    }

    #[test]
    fn the_setting_is_read_strictly() {
        assert!(!turned_off(None).unwrap());
        assert!(!turned_off(Some("1")).unwrap());
        assert!(turned_off(Some("0")).unwrap());
        assert!(turned_off(Some("yes")).is_err());
    }

    /// Two ranks' doorbells on loopback, each ringing the other; `pb`: rank 1's address.
    fn pair() -> (Doorbell, Doorbell, SocketAddrV4) {
        let sock = || {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_nonblocking(true).unwrap();
            let at = match s.local_addr().unwrap() {
                std::net::SocketAddr::V4(v) => v,
                _ => unreachable!(),
            };
            (s, at)
        };
        let ((a, pa), (b, pb)) = (sock(), sock());
        let zeros = || (0..2).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        let bell = |sock, me, peers| Doorbell {
            sock,
            peers,
            sent: zeros(),
            rung: zeros(),
            got: zeros(),
            undrained: AtomicU64::new(0),
            me,
        };
        (
            bell(a, 0, vec![None, Some(pb)]),
            bell(b, 1, vec![Some(pa), None]),
            pb,
        )
    }

    #[test]
    fn rings_are_counted_and_junk_is_ignored() {
        let (r0, r1, pb) = pair();
        assert!(!r1.wait(Duration::from_millis(1)), "nothing rang");
        r0.ring(1);
        r0.ring(1);
        r0.ring(7); // no such rank: nothing sent
        r0.sock.send_to(b"junk", pb).unwrap();
        r0.sock.send_to(&[9u8; RING_LEN], pb).unwrap(); // rank 9 of 2: ignored
        assert!(r1.wait(Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(20));
        r1.drain();
        assert_eq!(r1.rung[0].load(Ordering::Relaxed), 2);
        assert!(r1.behind());
        r1.took(0);
        assert!(r1.behind());
        r1.took(0);
        assert!(!r1.behind());
        r0.ring(1);
        assert!(r1.wait(Duration::from_secs(5)));
        assert!(r1.behind());
        r1.forget();
        assert!(!r1.behind());
    }

    #[test]
    fn rings_of_headers_taken_in_elsewhere_do_not_fill_the_socket() {
        // A rank that takes its headers in its own waits never stands by: without reading
        // the rings as it takes the headers, the socket fills (~256 rings) and the kernel
        // drops the ring a later stand-by needs.
        let (r0, r1, _) = pair();
        for _ in 0..5000 {
            r0.ring(1);
            r1.took(0);
        }
        assert!(!r1.behind());
        r0.ring(1);
        assert!(r1.wait(Duration::from_secs(5)), "the last ring came");
        assert!(r1.behind(), "it announced a header not yet taken in");
        r1.took(0);
        assert!(!r1.behind());
    }
}

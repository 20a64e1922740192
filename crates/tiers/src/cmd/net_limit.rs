//! `tiers gaspi net-limit`: what the network between two hosts allows, by size, as the limit
//! row of GASPI's micro-benchmarks across hosts (`tiers bench gaspi-micro -- --from DIR`).
//!
//! One host serves (`--serve ADDR:PORT`), the other measures (`--to ADDR:PORT`) over one TCP
//! connection with `TCP_NODELAY`, as a GASPI TCP device or MPI's TCP transport would use:
//! for each size from 2 bytes to `--max-bytes` (doubling, GPI-2's sizes) half the shortest round
//! trip of a ping-pong of that many bytes (what a write that the target waits for must cross
//! at least once), and the time per message of a one-way stream of them (what streamed writes
//! cost at best). Both sides poll the socket during the round trips (a rank waiting for a
//! write spins too; a thread asleep in `read` would add an idle core's wake-up, tens of
//! microseconds on a virtual machine). Both sides ask for the socket buffers the tcp engine's
//! links use (4 MiB), so that the stream is what the engine could reach. Prints `net-limit BYTES HALF_ROUND_TRIP_US STREAM_US`
//! per size.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Sizes from 2 bytes to `max` (doubling).
fn sizes(max: usize) -> impl Iterator<Item = usize> {
    std::iter::successors(Some(2usize), |s| s.checked_mul(2)).take_while(move |&s| s <= max)
}

/// How many round trips and streamed messages of `size` bytes to time: about `budget` bytes
/// each way, at least 5 and at most 1000 round trips.
fn counts(size: usize, budget: usize) -> (u64, u64) {
    let trips = (budget / size).clamp(5, 1000) as u64;
    let stream = (budget * 4 / size).clamp(10, 20_000) as u64;
    (trips, stream)
}

/// How long either side waits for the other (to connect, or for the next bytes) before it
/// gives up with `TimedOut`: a peer that died or never came cannot hold it.
const PATIENCE: Duration = Duration::from_secs(60);

/// `TCP_NODELAY`, the tcp engine's socket buffers and the read and write timeouts of
/// [`PATIENCE`] on a measurement connection.
fn configure(s: &TcpStream) -> io::Result<()> {
    s.set_nodelay(true)?;
    tiers_cluster::engine::tcp::link_buffers(s);
    s.set_read_timeout(Some(PATIENCE))?;
    s.set_write_timeout(Some(PATIENCE))
}

/// Reads exactly `buf.len()` bytes, polling the socket without sleeping: a thread asleep in
/// `read` pays the wake-up of an idle core (tens of microseconds on a virtual machine), the
/// scheduler's cost rather than the network's, while a GASPI rank that waits spins. The
/// socket is non-blocking for the round trips.
fn spin_read_exact(s: &mut TcpStream, buf: &mut [u8]) -> io::Result<()> {
    let eof = io::ErrorKind::UnexpectedEof;
    spin_all(buf.len(), eof, |at| s.read(&mut buf[at..]))
}

/// Writes all of `buf` to a non-blocking socket, polling while it is full.
fn spin_write_all(s: &mut TcpStream, buf: &[u8]) -> io::Result<()> {
    spin_all(buf.len(), io::ErrorKind::WriteZero, |at| {
        s.write(&buf[at..])
    })
}

/// Runs `op(done)` until it has moved `len` bytes, polling while the socket would block;
/// a call that moves nothing ends it with `zero`.
fn spin_all(
    len: usize,
    zero: io::ErrorKind,
    mut op: impl FnMut(usize) -> io::Result<usize>,
) -> io::Result<()> {
    let start = Instant::now();
    let mut done = 0;
    while done < len {
        match op(done) {
            Ok(0) => return Err(zero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => patience(start)?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `TimedOut` once a poll has waited [`PATIENCE`] since `start`.
fn patience(start: Instant) -> io::Result<()> {
    if start.elapsed() > PATIENCE {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("net-limit: the peer sent nothing for {PATIENCE:?}"),
        ));
    }
    std::hint::spin_loop();
    Ok(())
}

/// Serves measurements on `addr` until the measuring side closes its connection (one client,
/// which must connect within [`PATIENCE`]).
pub fn serve(addr: &str) -> io::Result<()> {
    let l = TcpListener::bind(resolve(addr)?.as_slice()).map_err(|e| {
        io::Error::new(e.kind(), format!("net-limit: cannot listen on {addr}: {e}"))
    })?;
    l.set_nonblocking(true)?;
    // Before the connection comes: the window it offers is sized from these.
    tiers_cluster::engine::tcp::link_buffers(&l);
    let start = Instant::now();
    let mut s = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && start.elapsed() < PATIENCE => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("net-limit: nobody connected to {addr} within {PATIENCE:?}"),
                ))
            }
            Err(e) => return Err(e),
        }
    };
    s.set_nonblocking(false)?;
    configure(&s)?;
    let mut head = [0u8; 24];
    let mut buf = Vec::new();
    loop {
        match s.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let word =
            |i: usize| u64::from_le_bytes(head[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        let (size, trips, stream) = (word(0) as usize, word(1), word(2));
        if size == 0 || size > MAX_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("net-limit: a request for {size} bytes"),
            ));
        }
        buf.resize(size, 0);
        s.set_nonblocking(true)?;
        for _ in 0..trips {
            spin_read_exact(&mut s, &mut buf)?;
            spin_write_all(&mut s, &buf)?;
        }
        s.set_nonblocking(false)?;
        for _ in 0..stream {
            s.read_exact(&mut buf)?;
        }
        s.write_all(&[1])?;
    }
}

/// Measures against the server at `addr`: per size, (bytes, half the shortest round trip in
/// µs, µs per message streamed one way).
pub fn measure(addr: &str, max_bytes: usize, budget: usize) -> io::Result<Vec<(usize, f64, f64)>> {
    let start = Instant::now();
    let to = resolve(addr)?;
    let mut s = loop {
        match TcpStream::connect(to.as_slice()) {
            Ok(s) => break s,
            // The server may not listen yet.
            Err(e)
                if e.kind() == io::ErrorKind::ConnectionRefused
                    && start.elapsed() < Duration::from_secs(30) =>
            {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("net-limit: cannot connect to {addr}: {e}"),
                ))
            }
        }
    };
    configure(&s)?;
    let mut rows = Vec::new();
    for size in sizes(max_bytes) {
        let (trips, stream) = counts(size, budget);
        let mut head = [0u8; 24];
        for (i, v) in [size as u64, trips, stream].iter().enumerate() {
            head[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        s.write_all(&head)?;
        let mut buf = vec![0x5au8; size];
        let mut rtts = Vec::with_capacity(trips as usize);
        s.set_nonblocking(true)?;
        for _ in 0..trips {
            let t = Instant::now();
            spin_write_all(&mut s, &buf)?;
            spin_read_exact(&mut s, &mut buf)?;
            rtts.push(t.elapsed().as_secs_f64());
        }
        s.set_nonblocking(false)?;
        // The best round trip: what the network and both kernels allow, the bound that a
        // transfer over them cannot beat (a median would fold in the scheduler's delays).
        let half = rtts.iter().copied().fold(f64::INFINITY, f64::min) / 2.0 * 1e6;
        let t = Instant::now();
        for _ in 0..stream {
            s.write_all(&buf)?;
        }
        let mut ack = [0u8; 1];
        s.read_exact(&mut ack)?;
        let per = t.elapsed().as_secs_f64() / stream as f64 * 1e6;
        rows.push((size, half, per));
    }
    Ok(rows)
}

/// The addresses `addr` (`HOST:PORT`) names, or an error that names it.
fn resolve(addr: &str) -> io::Result<Vec<std::net::SocketAddr>> {
    use std::net::ToSocketAddrs as _;
    let bad = |why: String| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("net-limit: {addr:?} is not an address (HOST:PORT): {why}"),
        )
    };
    let v: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| bad(e.to_string()))?
        .collect();
    if v.is_empty() {
        return Err(bad("it names no address".into()));
    }
    Ok(v)
}

/// The largest message either side handles (the server refuses larger requests).
const MAX_BYTES: usize = 1 << 30;

/// `tiers gaspi net-limit`: serves, or measures and prints the table.
pub fn run(serve_on: Option<&str>, to: Option<&str>, max_bytes: usize) -> io::Result<()> {
    if !(2..=MAX_BYTES).contains(&max_bytes) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("net-limit: --max-bytes {max_bytes}: from 2 to {MAX_BYTES}"),
        ));
    }
    match (serve_on, to) {
        (Some(a), None) => serve(a),
        (None, Some(a)) => {
            resolve(a)?;
            outln!("# net-limit: TCP to {a}, TCP_NODELAY; bytes, half the shortest round trip (us; both sides poll the socket), us per message streamed one way")?;
            for (size, half, per) in measure(a, max_bytes, 1 << 22)? {
                outln!("net-limit {size} {half:.3} {per:.3}")?;
            }
            Ok(())
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "net-limit: give exactly one of --serve ADDR:PORT and --to ADDR:PORT",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_double_from_two_to_the_largest() {
        assert_eq!(sizes(16).collect::<Vec<_>>(), vec![2, 4, 8, 16]);
        assert_eq!(sizes(1).count(), 0);
        assert_eq!(sizes(usize::MAX).last(), Some(1 << (usize::BITS - 1)));
        assert_eq!(counts(2, 1 << 20), (1000, 20_000));
        assert_eq!(counts(1 << 23, 1 << 20), (5, 10));
    }

    #[test]
    fn measures_over_loopback() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        drop(l);
        let a = addr.clone();
        let server = std::thread::spawn(move || serve(&a));
        let rows = measure(&addr, 64, 4096).unwrap();
        server.join().unwrap().unwrap();
        assert_eq!(
            rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![2, 4, 8, 16, 32, 64]
        );
        for (size, half, per) in rows {
            assert!(half > 0.0 && half.is_finite(), "{size}: {half}");
            assert!(per > 0.0 && per.is_finite(), "{size}: {per}");
        }
        assert!(run(None, None, 8).is_err());
        for bad in [0, 1, MAX_BYTES + 1, usize::MAX] {
            let e = run(None, Some("127.0.0.1:1"), bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}");
        }
    }
}

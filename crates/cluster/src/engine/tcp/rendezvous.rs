//! How the ranks of a tcp job learn each other's addresses: every rank binds a listener of its
//! own, connects to the job's rendezvous address (`TIERS_TCP_ROOT`, served by the launcher of
//! the first host) and sends its rank and listening address; once every rank has, each gets
//! the whole table back and the rendezvous closes. Nothing else goes through it.
//!
//! The server refuses a second process claiming a rank already taken (both are told) and gives
//! up at its deadline, naming the ranks that never came.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};
use tiers_node::Backoff;

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn get_u64(r: &mut impl Read) -> io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn get_str(r: &mut impl Read) -> io::Result<String> {
    let mut b = [0u8; 2];
    r.read_exact(&mut b)?;
    let mut s = vec![0u8; u16::from_le_bytes(b) as usize];
    r.read_exact(&mut s)?;
    String::from_utf8(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))
}

/// The naps of the rendezvous while no rank connects (see `serve`).
const ACCEPT_NAPS: Backoff = Backoff::new()
    .spin_steps(0)
    .yield_limit(0)
    .with_sleep(Backoff::SLEEP_MIN, Duration::from_millis(2));

fn invalid(m: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m)
}

/// Who a replicated job's rendezvous may start without (see [`serve`]).
pub struct Absent<'a> {
    /// Replicas per logical rank (process `p` is replica `p % replicas` of rank
    /// `p / replicas`); 1 when the job is not replicated.
    pub replicas: usize,
    /// Processes the launcher serving the rendezvous saw die (the launchers of other hosts
    /// report theirs with [`report_dead`]).
    pub dead: &'a [std::sync::atomic::AtomicBool],
    /// How long to wait for the rest once every logical rank has a replica in, for a
    /// process nobody reported dead (a host lost before its launcher could report).
    pub grace: Duration,
}

impl Absent<'_> {
    /// Not replicated: every rank must join.
    pub const NONE: Absent<'static> = Absent {
        replicas: 1,
        dead: &[],
        grace: Duration::ZERO,
    };

    fn dead(&self, r: usize) -> bool {
        self.dead
            .get(r)
            .is_some_and(|d| d.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// Serves one job's rendezvous on `listener` for `size` ranks until every rank has its table,
/// until `deadline`, or until `stop` says so (the job ended). Run by the launcher (in a
/// thread of its own).
///
/// In a replicated job (`absent.replicas > 1`) the table goes out without the processes that
/// are missing once every logical rank has a replica in and each missing one is dead or
/// `absent.grace` has passed: a replica killed before it joined must not hold the job. The
/// table marks those absent (their peers count them failed), and the rendezvous goes on
/// refusing latecomers (they exit, as a failed replica) until `stop`.
pub fn serve(
    listener: TcpListener,
    size: usize,
    absent: &Absent<'_>,
    deadline: Instant,
    stop: &std::sync::atomic::AtomicBool,
) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut joined: Vec<Option<(TcpStream, String)>> = (0..size).map(|_| None).collect();
    let mut count = 0;
    // Between two looks for a new connection: naps from 20 µs doubling to 2 ms (ranks
    // start within milliseconds of each other; a late one costs a wake-up every 2 ms).
    let mut idle = ACCEPT_NAPS;
    let reps = absent.replicas.max(1);
    // When every logical rank first had a replica in (a replicated job).
    let mut covered_at: Option<Instant> = None;
    // Processes another host's launcher reported dead.
    let mut reported = vec![false; size];
    // Each connection says who it is on a thread of its own, so that one that says nothing
    // (a port scan, a health check) holds up no other.
    let (said, hear): (std::sync::mpsc::Sender<Hello>, Hellos) = std::sync::mpsc::channel();
    while count < size {
        if reps > 1 {
            let all_ranks = joined.chunks(reps).all(|g| g.iter().any(Option::is_some));
            if all_ranks {
                let at = *covered_at.get_or_insert_with(Instant::now);
                let rest_dead =
                    (0..size).all(|r| joined[r].is_some() || absent.dead(r) || reported[r]);
                if rest_dead || at.elapsed() >= absent.grace {
                    break;
                }
            }
        } else if let Some(r) = (0..size).find(|&r| joined[r].is_none() && absent.dead(r)) {
            // Without replicas every rank must join: one that ended first never will.
            let why = format!("tcp rendezvous: rank {r} ended before it joined");
            tell_all(&mut joined, &why);
            refuse_latecomers(&listener, &hear, stop, Some(deadline), &why);
            return Err(io::Error::new(io::ErrorKind::NotConnected, why));
        }
        if let Ok((mut s, hello)) = hear.try_recv() {
            let Ok((rank, addr)) = hello else {
                continue; // Not a rank of this job (or it died while joining).
            };
            let rank = rank as usize;
            if rank >= size {
                refuse(&mut s, &format!("rank {rank} of a job of {size}"));
                continue;
            }
            if addr.is_empty() {
                // A launcher's report that its process `rank` died (see `report_dead`).
                reported[rank] = true;
                continue;
            }
            if let Some((mut other, _)) = joined[rank].take() {
                let why = format!("two processes joined the tcp job as rank {rank}");
                refuse(&mut s, &why);
                refuse(&mut other, &why);
                // The job cannot start: every rank that joined, or comes later, is told.
                tell_all(&mut joined, &why);
                refuse_latecomers(&listener, &hear, stop, Some(deadline), &why);
                return Err(invalid(why));
            }
            joined[rank] = Some((s, addr));
            count += 1;
            continue;
        }
        match listener.accept() {
            Ok((s, _)) => {
                idle = ACCEPT_NAPS;
                let said = said.clone();
                std::thread::spawn(move || {
                    let mut s = s;
                    let hello = s
                        .set_nonblocking(false)
                        .and_then(|()| s.set_read_timeout(Some(Duration::from_secs(10))))
                        .and_then(|()| Ok((get_u64(&mut s)?, get_str(&mut s)?)));
                    let _ = said.send((s, hello));
                });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    tell_all(&mut joined, "its job ended before every rank joined");
                    return Ok(());
                }
                if Instant::now() >= deadline {
                    let missing: Vec<usize> = (0..size).filter(|&r| joined[r].is_none()).collect();
                    let why = format!("tcp rendezvous: ranks {missing:?} never joined");
                    // The ranks that did join learn why the job does not start, rather than
                    // reading a closed connection.
                    tell_all(
                        &mut joined,
                        &format!("{why} (with --hosts: is the launcher of every host started, with the same list?)"),
                    );
                    return Err(io::Error::new(io::ErrorKind::TimedOut, why));
                }
                std::thread::sleep(idle.nap());
            }
            Err(e) => return Err(e),
        }
    }
    let mut table = 0u64.to_le_bytes().to_vec();
    table.extend_from_slice(&(size as u64).to_le_bytes());
    for j in &joined {
        // An absent process (a replicated job's) has an empty address.
        put_str(&mut table, j.as_ref().map_or("", |j| j.1.as_str()));
    }
    for (s, _) in joined.iter_mut().flatten() {
        // A rank that died meanwhile finds out from its peers; the others go on.
        let _ = s.write_all(&table);
    }
    if count < size {
        refuse_latecomers(
            &listener,
            &hear,
            stop,
            None,
            "came after its job had started without it",
        );
    }
    Ok(())
}

/// Tells one process why the job does not take it.
fn refuse(s: &mut TcpStream, why: &str) {
    let mut out = 1u64.to_le_bytes().to_vec();
    put_str(&mut out, why);
    let _ = s.write_all(&out);
}

/// A connection and what it said it is (rank, address), from the thread that heard it.
type Hello = (TcpStream, io::Result<(u64, String)>);
/// Where the rendezvous hears them.
type Hellos = std::sync::mpsc::Receiver<Hello>;

/// Tells every rank that joined that the job will not start, and why.
fn tell_all(joined: &mut [Option<(TcpStream, String)>], why: &str) {
    let mut out = 1u64.to_le_bytes().to_vec();
    put_str(&mut out, why);
    for (s, _) in joined.iter_mut().flatten() {
        let _ = s.write_all(&out);
    }
}

/// After a replicated job's table went out without some processes, or once the job cannot
/// start: tells each process that comes later `why` (after its rank), until `stop` (or
/// `until`, when every rank has given up joining anyway), so that it ends at once instead of
/// retrying until its deadline.
fn refuse_latecomers(
    listener: &TcpListener,
    hear: &Hellos,
    stop: &std::sync::atomic::AtomicBool,
    until: Option<Instant>,
    why: &str,
) {
    let mut idle = ACCEPT_NAPS;
    while !stop.load(std::sync::atomic::Ordering::Relaxed)
        && until.is_none_or(|t| Instant::now() < t)
    {
        // Those that connected before and were still saying who they are.
        while let Ok((mut s, hello)) = hear.try_recv() {
            if let Ok((rank, _)) = hello {
                refuse(&mut s, &format!("rank {rank}: {why}"));
            }
        }
        match listener.accept() {
            Ok((mut s, _)) => {
                idle = ACCEPT_NAPS;
                let _ = s.set_nonblocking(false);
                // A short wait: nothing else is served meanwhile but other latecomers.
                let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                let Ok(rank) = get_u64(&mut s) else { continue };
                refuse(&mut s, &format!("rank {rank}: {why}"));
            }
            Err(_) => std::thread::sleep(idle.nap()),
        }
    }
}

/// A launcher's side, for a replicated job: tells the rendezvous at `root` that its process
/// `rank` died, so that the job need not wait for it (an empty address is the report).
/// Retried until `deadline` while nothing listens there: the first host's launcher may not
/// listen yet (launchers started one after another), or no longer (the job has started, and
/// then needs no report; the caller runs this in a thread of its own).
pub fn report_dead(root: &str, rank: usize, deadline: Instant) {
    let Some(addr) = root.to_socket_addrs().ok().and_then(|mut a| a.next()) else {
        return;
    };
    let mut retry = Backoff::new()
        .spin_steps(0)
        .yield_limit(0)
        .with_sleep(Duration::from_millis(1), Duration::from_millis(100));
    while Instant::now() < deadline {
        if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            let mut out = (rank as u64).to_le_bytes().to_vec();
            put_str(&mut out, "");
            let _ = s.write_all(&out);
            return;
        }
        std::thread::sleep(retry.nap());
    }
}

/// This rank's side: sends `(rank, me)` to the rendezvous at `root` (retrying until it
/// listens, up to `deadline`) and returns every rank's address (`None` for a process a
/// replicated job started without).
pub fn join(
    root: &str,
    rank: usize,
    me: SocketAddr,
    deadline: Instant,
) -> io::Result<Vec<Option<SocketAddr>>> {
    let addr = root
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| invalid(format!("tcp rendezvous address {root:?} names no address")))?;
    // Between two tries to connect: naps from 1 ms doubling to 20 ms (the launcher listens
    // before it starts any rank; only a rank of another host may come first).
    let mut retry = Backoff::new()
        .spin_steps(0)
        .yield_limit(0)
        .with_sleep(Duration::from_millis(1), Duration::from_millis(20));
    let mut s = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(
            &addr,
            left.clamp(Duration::from_millis(1), Duration::from_secs(5)),
        ) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(retry.nap());
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("tcp rendezvous at {root}: {e}"),
                ))
            }
        }
    };
    let mut out = (rank as u64).to_le_bytes().to_vec();
    put_str(&mut out, &me.to_string());
    s.write_all(&out)?;
    s.set_read_timeout(Some(
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1)),
    ))?;
    let closed = |e: io::Error| {
        match e.kind() {
        io::ErrorKind::UnexpectedEof => io::Error::new(
            e.kind(),
            format!("the tcp rendezvous at {root} closed before every rank joined (its launcher ended or gave up)"),
        ),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
            io::ErrorKind::TimedOut,
            format!("not every rank joined the tcp job at {root} within the init timeout"),
        ),
        _ => e,
    }
    };
    if get_u64(&mut s).map_err(closed)? != 0 {
        let why = get_str(&mut s).unwrap_or_default();
        return Err(invalid(why));
    }
    let n = get_u64(&mut s).map_err(closed)? as usize;
    (0..n)
        .map(|_| {
            let a = get_str(&mut s)?;
            if a.is_empty() {
                return Ok(None);
            }
            a.parse::<SocketAddr>()
                .map(Some)
                .map_err(|_| invalid(format!("tcp rendezvous: bad address {a:?}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    static NO: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    /// Ranks `ranks` joining the rendezvous at `root`, each from a thread of its own, rank `r`
    /// listening at port 1000 + r.
    fn join_all(
        root: &str,
        ranks: impl Iterator<Item = usize>,
        deadline: Instant,
    ) -> Vec<std::thread::JoinHandle<io::Result<Vec<Option<SocketAddr>>>>> {
        ranks
            .map(|r| {
                let root = root.to_string();
                std::thread::spawn(move || {
                    let me: SocketAddr = format!("127.0.0.1:{}", 1000 + r).parse().unwrap();
                    join(&root, r, me, deadline)
                })
            })
            .collect()
    }

    #[test]
    fn every_rank_gets_the_table_and_a_duplicate_rank_is_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let root = l.local_addr().unwrap().to_string();
        let deadline = Instant::now() + Duration::from_secs(20);
        let server = std::thread::spawn(move || serve(l, 3, &Absent::NONE, deadline, &NO));
        for c in join_all(&root, 0..3, deadline) {
            let t = c.join().unwrap().unwrap();
            assert_eq!(t.len(), 3);
            for (r, a) in t.iter().enumerate() {
                assert_eq!(a.expect("present").port() as usize, 1000 + r);
            }
        }
        server.join().unwrap().unwrap();

        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let root = l.local_addr().unwrap().to_string();
        // The server goes on refusing latecomers after the clash, until the job ends.
        let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let e2 = ended.clone();
        let server = std::thread::spawn(move || serve(l, 3, &Absent::NONE, deadline, &e2));
        let twins: Vec<_> = (0..2)
            .map(|_| {
                let root = root.clone();
                std::thread::spawn(move || join(&root, 1, "127.0.0.1:9".parse().unwrap(), deadline))
            })
            .collect();
        for t in twins {
            let e = t.join().unwrap().unwrap_err();
            assert!(e.to_string().contains("two processes"), "{e}");
        }
        // A rank that comes after the clash is told too.
        let late = join(&root, 0, "127.0.0.1:9".parse().unwrap(), deadline).unwrap_err();
        assert!(late.to_string().contains("two processes"), "{late}");
        ended.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(server.join().unwrap().is_err());
    }

    #[test]
    fn a_replicated_job_starts_without_a_dead_or_late_replica() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        // 2 ranks x 2 replicas; process 3 died before it joined (the launcher saw it); in the
        // second job another host's launcher reports process 1 dead; in the third process 0
        // just never comes (the grace period ends the wait).
        for (dead_one, reported, grace) in [
            (Some(3), None, Duration::from_secs(30)),
            (None, Some(1), Duration::from_secs(30)),
            (None, None, Duration::from_millis(100)),
        ] {
            let missing = dead_one.or(reported).unwrap_or(0);
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let root = l.local_addr().unwrap().to_string();
            let deadline = Instant::now() + Duration::from_secs(20);
            let dead: Arc<[AtomicBool]> = (0..4)
                .map(|r| AtomicBool::new(Some(r) == dead_one))
                .collect();
            let stop = Arc::new(AtomicBool::new(false));
            let (d2, s2) = (dead.clone(), stop.clone());
            let server = std::thread::spawn(move || {
                let absent = Absent {
                    replicas: 2,
                    dead: &d2,
                    grace,
                };
                serve(l, 4, &absent, deadline, &s2)
            });
            if let Some(r) = reported {
                report_dead(&root, r, deadline);
            }
            for c in join_all(&root, (0..4).filter(|&r| r != missing), deadline) {
                let t = c.join().unwrap().unwrap();
                assert_eq!(t.len(), 4);
                for (r, a) in t.iter().enumerate() {
                    if r == missing {
                        assert_eq!(*a, None);
                    } else {
                        assert_eq!(a.expect("joined").port() as usize, 1000 + r);
                    }
                }
            }
            // The latecomer is told, and the server ends with the job.
            let me: SocketAddr = "127.0.0.1:9".parse().unwrap();
            let e = join(&root, missing, me, deadline).unwrap_err();
            assert!(e.to_string().contains("started without it"), "{e}");
            stop.store(true, Ordering::Relaxed);
            server.join().unwrap().unwrap();
        }
    }

    #[test]
    fn a_replicated_job_waits_for_a_rank_with_no_replica_in() {
        use std::sync::atomic::AtomicBool;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let dead: Vec<AtomicBool> = (0..4).map(|r| AtomicBool::new(r == 3)).collect();
        let absent = Absent {
            replicas: 2,
            dead: &dead,
            grace: Duration::ZERO,
        };
        // Nobody joins: no rank has a replica in, so the deadline ends it, naming them all.
        let e = serve(
            l,
            4,
            &absent,
            Instant::now() + Duration::from_millis(50),
            &NO,
        )
        .unwrap_err();
        assert!(e.to_string().contains("[0, 1, 2, 3]"), "{e}");
    }

    #[test]
    fn a_missing_rank_is_named_at_the_deadline() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let e = serve(
            l,
            2,
            &Absent::NONE,
            Instant::now() + Duration::from_millis(50),
            &NO,
        )
        .unwrap_err();
        assert!(e.to_string().contains("[0, 1]"), "{e}");
    }

    /// A rank that joined learns why the job does not start: the rendezvous names the ranks
    /// that never came, where the rank would otherwise read a closed connection.
    #[test]
    fn a_rank_that_joined_is_told_who_never_came() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let root = l.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            serve(
                l,
                2,
                &Absent::NONE,
                Instant::now() + Duration::from_millis(300),
                &NO,
            )
        });
        let joined = join_all(&root, 0..1, Instant::now() + Duration::from_secs(20));
        for c in joined {
            let e = c.join().unwrap().unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
            assert!(e.to_string().contains("ranks [1] never joined"), "{e}");
        }
        assert!(server.join().unwrap().is_err());
    }
}

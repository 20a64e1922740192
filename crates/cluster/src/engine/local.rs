//! The `local` engine: ranks are threads of one process.
//!
//! Used for tests (many worlds in one test process) and for hybrid runs that want the cluster
//! API without processes. Segment memory is anonymous shared memory registered in a table of
//! the job; everything else is the shared-memory core of `mem`.

use super::ctl::Ctl;
use super::mem::{Backing, MemEngine};
use crate::error::{Error, Rank, Result};
use crate::sys::Mapping;
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

struct LocalJob {
    _ctl_map: Mapping,
    ctl: Ctl,
    segs: Mutex<HashMap<(u32, Rank), Arc<Mapping>>>,
}

/// The memory of an in-process job.
#[derive(Clone)]
pub(crate) struct LocalBacking(Arc<LocalJob>);

impl Backing for LocalBacking {
    fn name(&self) -> &'static str {
        "local"
    }
    fn ctl(&self) -> Ctl {
        self.0.ctl
    }
    fn create_segment(&self, seg: u32, rank: Rank, len: usize) -> io::Result<Arc<Mapping>> {
        let m = Arc::new(Mapping::anonymous(len)?);
        self.0
            .segs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((seg, rank), m.clone());
        Ok(m)
    }
    fn open_segment(&self, seg: u32, rank: Rank) -> io::Result<Arc<Mapping>> {
        self.0
            .segs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(seg, rank))
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }
    fn remove_segment(&self, seg: u32, rank: Rank) {
        self.0
            .segs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(seg, rank));
    }
    fn processes(&self) -> bool {
        false
    }
}

/// The engines of an in-process job of `n` ranks, rank `i` at index `i`.
pub(crate) fn job(n: usize) -> Result<Vec<MemEngine<LocalBacking>>> {
    if n == 0 {
        return Err(Error::Setup("a world needs at least one rank".into()));
    }
    if n > crate::config::MAX_RANKS {
        return Err(Error::Setup(format!(
            "an in-process job of {n} ranks: the local engine runs 1..={} ranks",
            crate::config::MAX_RANKS
        )));
    }
    let map = Mapping::anonymous(Ctl::len(n)).map_err(|e| {
        Error::io(
            format!("mapping the control block of an in-process job of {n} ranks"),
            e,
        )
    })?;
    // SAFETY: a fresh zeroed, page-aligned mapping of Ctl::len(n) bytes, kept in the job.
    let ctl = unsafe { Ctl::init(map.ptr(), n, std::process::id()) };
    let job = LocalBacking(Arc::new(LocalJob {
        _ctl_map: map,
        ctl,
        segs: Mutex::new(HashMap::new()),
    }));
    Ok((0..n).map(|r| MemEngine::new(job.clone(), r)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::Timeout;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    #[test]
    fn a_mailbox_lock_held_by_a_dead_rank_is_taken_over() {
        let mut es = job(3).unwrap();
        let ctl = es[0].ctl();
        // Rank 1 dies while it holds rank 0's mailbox lock (between lock and unlock).
        ctl.rank(0).mailbox.lock.v.store(2, Ordering::Release);
        es[1].leave(true);
        let (tx, rx) = std::sync::mpsc::channel();
        let e2 = es.pop().unwrap();
        // Detached: if the send hangs, the test fails instead of hanging with it.
        std::thread::spawn(move || {
            let r = e2.passive_send(0, b"after", Timeout::Block);
            tx.send(r).unwrap();
            e2
        });
        let sent = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("a send to a mailbox locked by a dead rank hangs");
        assert_eq!(sent, Ok(()));
        let mut buf = [0u8; 16];
        assert_eq!(
            es[0].passive_receive(&mut buf, Timeout::After(Duration::from_secs(5))),
            Ok((2, 5))
        );
        assert_eq!(&buf[..5], b"after");
        // A lock held by a live rank (another thread of rank 0) is not taken: the send times
        // out.
        ctl.rank(0).mailbox.lock.v.store(1, Ordering::Release);
        assert_eq!(
            es[0].passive_send(0, b"x", Timeout::After(Duration::from_millis(50))),
            Err(crate::Error::Timeout)
        );
        ctl.rank(0).mailbox.lock.v.store(0, Ordering::Release);
    }
}

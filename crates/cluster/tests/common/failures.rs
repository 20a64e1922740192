//! A rank that dies (used by the local and shm tests: under mpirun, a rank that dies ends the
//! whole job).

use crate::common::{ok, S1};
use std::time::Duration;
use tiers_cluster::{Error, Health, Timeout, World};

/// Rank `victim` dies after the first barrier; the survivors must see it fail (or time out),
/// never hang.
pub fn killed(w: &World, victim: usize, die: impl FnOnce()) {
    let (me, n) = (w.rank(), w.size());
    assert!(n >= 2 && victim < n);
    let _seg = ok(w.segment(S1, 4096), "segment");
    ok(w.barrier(Timeout::Block), "barrier");
    if me == victim {
        die();
        return;
    }
    let r = w.barrier(Timeout::After(Duration::from_secs(30)));
    assert!(
        matches!(r, Err(Error::PeerFailed(_)) | Err(Error::Timeout)),
        "barrier after a death: {r:?}"
    );
    let mut buf = [0u8; 16];
    let r = w.passive_receive(&mut buf, Timeout::After(Duration::from_secs(30)));
    assert!(
        matches!(r, Err(Error::PeerFailed(_)) | Err(Error::Timeout)),
        "receive: {r:?}"
    );
    assert_eq!(w.health(victim), Ok(Health::Failed));
    let q = ok(w.queue(0), "queue");
    assert_eq!(
        q.write(S1.at(0), S1.on(victim, 0), 8),
        Err(Error::PeerFailed(victim))
    );
    assert_eq!(
        w.atomic_fetch_add(S1, 0, victim, 1),
        Err(Error::PeerFailed(victim))
    );
}

//! One-sided communication: segments, writes, reads, list operations and notifications.

use super::{ok, Fixture, S1, S2};
use tiers_cluster::{Error, Notification, SegId, Timeout, Transfer, World};

const BLK: Timeout = Timeout::Block;

/// Both segments exist at every rank with the size that rank gave (checked by the fixture).
pub fn segments_register_at_every_rank(w: &World) {
    let f = Fixture::new(w);
    for r in 0..f.n {
        assert_eq!(ok(w.segment_size(S1, r), "size"), Fixture::size1(f.n));
    }
    assert_eq!(ok(f.seg.get::<u64>(0), "zeroed"), 0);
    assert_eq!(ok(f.s2.get::<u64>(f.s2.len() / 8 - 1), "zeroed"), 0);
    f.done();
}

/// 300 rounds of data plus notification around the ring: the receiver always sees the data of
/// the round the notification announces.
pub fn write_notify_shows_data_before_the_notification(w: &World) {
    let f = Fixture::new(w);
    let (seg, q) = (&f.seg, &f.q);
    for round in 1..=300u32 {
        let v = [round as u8; 256];
        ok(seg.write(0, &v), "local write");
        ok(
            q.write_notify(
                S1.at(0),
                S1.on(f.next, 1024),
                256,
                Notification {
                    id: 7,
                    value: round,
                },
            ),
            "write_notify",
        );
        ok(q.wait(BLK), "wait");
        let id = ok(w.notify_waitsome(S1, 0..8, BLK), "waitsome");
        assert_eq!(id, 7);
        assert_eq!(ok(w.notify_reset(S1, 7), "reset"), round);
        let mut got = [0u8; 256];
        ok(seg.read(1024, &mut got), "local read");
        assert!(
            got.iter().all(|&b| b == round as u8),
            "round {round}: data after notification"
        );
        // Nobody may run more than one round ahead (the notification would be overwritten).
        ok(
            q.notify(
                f.prev,
                S1,
                Notification {
                    id: 8,
                    value: round,
                },
            ),
            "ack",
        );
        ok(w.notify_waitsome(S1, 8..9, BLK), "ack wait");
        ok(w.notify_reset(S1, 8), "ack reset");
    }
    ok(w.barrier(BLK), "barrier");
    f.done();
}

/// Waits until the word at byte `off` of `f.seg` holds `want`, letting the engine progress
/// (under a claim, as a library's own wait on memory does).
fn await_word(f: &Fixture<'_>, off: usize, want: u64) {
    // SAFETY: `off` is 8-aligned and inside the segment, which outlives the loop; remote
    // stores change the word atomically, so it is only ever loaded atomically here.
    let word = unsafe { &*(f.seg.as_ptr().add(off) as *const std::sync::atomic::AtomicU64) };
    let _claim = f.w.progress_claim();
    let t0 = std::time::Instant::now();
    while word.load(std::sync::atomic::Ordering::Acquire) != want {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "word {off} never became {want}"
        );
        f.w.progress_wait(std::time::Duration::from_millis(1));
    }
}

/// 300 rounds of data plus an atomic store of a flag word around the ring: the flag becomes
/// the round's number only once the round's data is in place, and the store can be told
/// from the write before it (a receiver that spins on the word sees every round).
pub fn atomic_store_lands_after_the_data(w: &World) {
    let f = Fixture::new(w);
    let (seg, q) = (&f.seg, &f.q);
    const FLAG: usize = 3584;
    const ACK: usize = 3592;
    for round in 1..=300u64 {
        let v = [round as u8; 2048];
        ok(seg.write(0, &v), "local write");
        ok(q.write(S1.at(0), S1.on(f.next, 1024), 2048), "write");
        ok(q.atomic_store(S1.on(f.next, FLAG), round), "atomic_store");
        await_word(&f, FLAG, round);
        let mut got = [0u8; 2048];
        ok(seg.read(1024, &mut got), "local read");
        assert!(
            got.iter().all(|&b| b == round as u8),
            "round {round}: data after the flag"
        );
        // Nobody runs a round ahead (its write would overwrite data not yet checked).
        ok(q.atomic_store(S1.on(f.prev, ACK), round), "ack");
        await_word(&f, ACK, round);
        ok(q.wait(BLK), "wait");
    }
    ok(w.barrier(BLK), "barrier");
    f.done();
}

/// A rank that only stands by for arriving data (`World::progress_stand_by`, what the GASPI
/// library's watcher does while a program spins on its memory) sees every round's store land;
/// where the engine's stand-by sleeps until work arrives (the tcp engine's sockets, the mpi
/// engine's doorbells), the store wakes it: no round waits for the stand-by's 20 s timeout.
pub fn a_store_wakes_a_rank_that_stands_by(w: &World) {
    let f = Fixture::new(w);
    const FLAG: usize = 3600;
    let max = std::time::Duration::from_secs(20);
    // SAFETY: as in `await_word`: an 8-aligned word inside the segment, loaded atomically.
    let word = unsafe { &*(f.seg.as_ptr().add(FLAG) as *const std::sync::atomic::AtomicU64) };
    // The store from a rank of this host lands in memory, with nothing to wake: spin for it.
    let direct = w.shares_memory_with(f.prev);
    assert!(
        w.shares_memory_with(w.rank()),
        "a rank shares its own memory"
    );
    assert!(!w.shares_memory_with(w.size()), "a rank outside the world");
    match w.engine_name() {
        "tcp" => assert_eq!(
            direct,
            f.prev == w.rank(),
            "tcp: every other rank via sockets"
        ),
        "mpi" => {}
        _ => assert!(direct, "a shared-memory engine shares it with every rank"),
    }
    for round in 1..=20u64 {
        ok(w.barrier(BLK), "barrier");
        ok(f.q.atomic_store(S1.on(f.next, FLAG), round), "atomic_store");
        ok(f.q.wait_local(BLK), "local wait");
        let t0 = std::time::Instant::now();
        while word.load(std::sync::atomic::Ordering::Acquire) != round {
            assert!(t0.elapsed() < max, "round {round}: the store never came");
            if direct {
                std::thread::yield_now();
            } else {
                w.progress_stand_by(max);
            }
        }
        // A stand-by that slept through the store wakes only at its end.
        assert!(
            t0.elapsed() < max / 2,
            "round {round}: a stand-by was not woken by the store (waited {:?}; from a rank \
             sharing memory: {direct})",
            t0.elapsed()
        );
    }
    ok(f.q.wait(BLK), "wait");
    ok(w.barrier(BLK), "barrier");
    f.done();
}

/// 64 bytes that say which round and which step wrote them.
fn stamp(round: u32, step: u8) -> [u8; 64] {
    let mut v = [0u8; 64];
    for (i, b) in v.iter_mut().enumerate() {
        *b = (round as u8).wrapping_mul(3) ^ step ^ i as u8;
    }
    v
}

/// `Queue::wait_local` (GASPI's `gaspi_wait`) leaves writes in flight only as far as nothing
/// can tell: a notification, a barrier, a read from the same target and a second write over
/// the same bytes all come after them, round after round.
pub fn local_waits_land_before_what_follows(w: &World) {
    let f = Fixture::new(w);
    let (seg, q) = (&f.seg, &f.q);
    let to = f.next;
    let written = |off: usize, want: [u8; 64], what: &str, round: u32| {
        let mut got = [0u8; 64];
        ok(seg.read(off, &mut got), "local read");
        assert_eq!(got, want, "round {round}: {what}");
    };
    for round in 1..=100u32 {
        // Before a notification.
        ok(seg.write(0, &stamp(round, 1)), "source");
        ok(q.write(S1.at(0), S1.on(to, 1024), 64), "write");
        ok(q.wait_local(BLK), "local wait");
        ok(
            q.notify(
                to,
                S1,
                Notification {
                    id: 9,
                    value: round,
                },
            ),
            "notify",
        );
        ok(w.notify_waitsome(S1, 9..10, BLK), "waitsome");
        assert_eq!(ok(w.notify_reset(S1, 9), "reset"), round);
        written(1024, stamp(round, 1), "data before the notification", round);
        // Twice over the same bytes, then a barrier: the second write wins.
        ok(seg.write(64, &stamp(round, 2)), "source");
        ok(q.write(S1.at(64), S1.on(to, 1536), 64), "write");
        ok(q.wait_local(BLK), "local wait");
        ok(seg.write(64, &stamp(round, 3)), "source reused");
        ok(q.write(S1.at(64), S1.on(to, 1536), 64), "write again");
        ok(q.wait_local(BLK), "local wait");
        // A read of what was just written, from the same target.
        ok(seg.write(128, &stamp(round, 4)), "source");
        ok(q.write(S1.at(128), S1.on(to, 2048), 64), "write");
        ok(q.wait_local(BLK), "local wait");
        ok(q.read(S1.at(2560), S1.on(to, 2048), 64), "read back");
        ok(q.wait_local(BLK), "local wait for the read");
        written(
            2560,
            stamp(round, 4),
            "read after a locally completed write",
            round,
        );
        ok(w.barrier(BLK), "barrier");
        written(
            1536,
            stamp(round, 3),
            "second write after the barrier",
            round,
        );
        written(2048, stamp(round, 4), "write before the barrier", round);
        // Nobody starts the next round before every rank has checked this one.
        ok(w.barrier(BLK), "barrier");
    }
    f.done();
}

/// The pattern rank `from` writes to rank `to`.
fn pattern(from: usize, to: usize) -> Vec<u8> {
    (0..64).map(|i| (from * 31 + to * 7 + i) as u8).collect()
}

/// Every rank writes its own pattern into every rank (itself included), each at its own place.
fn write_everywhere(f: &Fixture<'_>) {
    for r in 0..f.n {
        ok(f.seg.write(2048, &pattern(f.me, r)), "pattern");
        ok(
            f.q.write(S1.at(2048), S1.on(r, 4096 + 64 * f.me), 64),
            "write",
        );
        ok(f.q.wait(BLK), "wait");
    }
    ok(f.w.barrier(BLK), "barrier");
}

/// Plain writes into every rank arrive, each where it was sent.
pub fn writes_reach_every_rank(w: &World) {
    let f = Fixture::new(w);
    write_everywhere(&f);
    for src in 0..f.n {
        let mut got = [0u8; 64];
        ok(f.seg.read(4096 + 64 * src, &mut got), "read back");
        assert_eq!(&got[..], &pattern(src, f.me)[..], "data from rank {src}");
    }
    ok(w.barrier(BLK), "barrier");
    f.done();
}

/// A read fetches what `next` received from this rank.
pub fn reads_fetch_remote_data(w: &World) {
    let f = Fixture::new(w);
    write_everywhere(&f);
    ok(
        f.q.read(S1.at(3000), S1.on(f.next, 4096 + 64 * f.me), 64),
        "read",
    );
    ok(f.q.wait(BLK), "wait");
    let mut got = [0u8; 64];
    ok(f.seg.read(3000, &mut got), "read local");
    assert_eq!(&got[..], &pattern(f.me, f.next)[..]);
    ok(w.barrier(BLK), "barrier");
    f.done();
}

/// Fills the first 8 words of this rank's segment 2 with `(rank << 32) | i`.
fn fill_words(f: &Fixture<'_>) {
    for i in 0..8u64 {
        ok(f.s2.set::<u64>(i as usize, (f.me as u64) << 32 | i), "set");
    }
}

/// 8 writes of 8 bytes each into `next`'s segment 2 (in reverse order), then one notification
/// that shows only after all of them.
pub fn write_list_notify_delivers_every_write(w: &World) {
    let f = Fixture::new(w);
    fill_words(&f);
    let list: Vec<Transfer> = (0..8)
        .map(|i| Transfer::new(S2.at(8 * i), S2.on(f.next, 512 + 8 * (7 - i)), 8))
        .collect();
    ok(
        f.q.write_list_notify(&list, f.next, S2, Notification { id: 3, value: 5 }),
        "write_list_notify",
    );
    ok(f.q.wait(BLK), "wait");
    assert_eq!(ok(w.notify_waitsome(S2, 0..8, BLK), "list waitsome"), 3);
    assert_eq!(ok(w.notify_reset(S2, 3), "reset"), 5);
    assert_eq!(ok(w.notify_reset(S2, 3), "reset again"), 0);
    for i in 0..8u64 {
        assert_eq!(
            ok(f.s2.get::<u64>(64 + (7 - i as usize)), "get"),
            (f.prev as u64) << 32 | i
        );
    }
    ok(w.barrier(BLK), "barrier");
    f.done();
}

/// 4 reads of 8 bytes each from `prev`'s segment 2 in one call.
pub fn read_list_fetches_every_transfer(w: &World) {
    let f = Fixture::new(w);
    fill_words(&f);
    let rl: Vec<Transfer> = (0..4)
        .map(|i| Transfer::new(S2.at(256 + 8 * i), S2.on(f.prev, 8 * i), 8))
        .collect();
    ok(w.barrier(BLK), "barrier");
    ok(f.q.read_list(&rl), "read_list");
    ok(f.q.wait(BLK), "wait");
    for i in 0..4u64 {
        assert_eq!(
            ok(f.s2.get::<u64>(32 + i as usize), "get"),
            (f.prev as u64) << 32 | i
        );
    }
    ok(w.barrier(BLK), "barrier");
    f.done();
}

/// With nothing set, waiting for notifications times out, at once or after a while.
pub fn notify_waitsome_times_out(w: &World) {
    let f = Fixture::new(w);
    assert_eq!(
        w.notify_waitsome(S1, 100..200, Timeout::Test),
        Err(Error::Timeout)
    );
    assert_eq!(
        w.notify_waitsome(S1, 100..200, Timeout::millis(20)),
        Err(Error::Timeout)
    );
    f.done();
}

/// A deleted segment is refused as a target, while a view taken before stays readable;
/// created again (with another size) it is zeroed and reachable.
pub fn deleted_segment_is_gone_and_can_be_recreated(w: &World) {
    let f = Fixture::new(w);
    // Dirty the memory the new segment 2 may get, to see that it comes back zeroed.
    ok(f.s2.set::<u64>(0, u64::MAX), "dirty");
    ok(w.barrier(BLK), "barrier");
    ok(w.segment_delete(S2, BLK), "delete");
    // A view taken before the deletion still reads the memory it had (it keeps it alive).
    assert_eq!(
        ok(f.s2.get::<u64>(0), "a view after the deletion"),
        u64::MAX
    );
    assert_eq!(
        f.q.write(S1.at(0), S2.on(f.next, 0), 8),
        Err(Error::NoSuchSegment {
            seg: 2,
            rank: f.next
        })
    );
    let s2 = ok(w.segment(S2, 128), "re-create");
    assert_eq!(s2.len(), 128);
    assert_eq!(ok(s2.get::<u64>(0), "zeroed"), 0);
    ok(
        f.q.write(S1.at(0), S2.on(f.next, 120), 8),
        "write to re-created",
    );
    ok(f.q.wait(BLK), "wait");
    ok(w.barrier(BLK), "final barrier");
    f.done();
}

/// Writes and reads of payloads the network delivers in many bursts (40 KB to 3 MiB, sizes
/// that are not multiples of anything) land whole: each round every rank writes a payload
/// whose bytes depend on the round, the writer and their position into the next rank, with a
/// notification behind it, checks every byte it received, then reads its own payload back
/// from the next rank and checks that too.
pub fn large_transfers_land_whole(w: &World) {
    const BIG: SegId = SegId(5);
    const MAX: usize = 3 << 20 | 7;
    let f = Fixture::new(w);
    // Send area at 0, receive area at MAX, read-back area at 2 MAX.
    let seg = ok(w.segment(BIG, 3 * MAX), "big segment");
    let byte = |round: usize, rank: usize, i: usize| (i * 7 + i / 4093 + round * 31 + rank) as u8;
    for (round, len) in [40_000usize, 300_001, 1_000_003, MAX]
        .into_iter()
        .enumerate()
    {
        let data: Vec<u8> = (0..len).map(|i| byte(round, f.me, i)).collect();
        ok(seg.write(0, &data), "fill");
        ok(
            f.q.write_notify(
                BIG.at(0),
                BIG.on(f.next, MAX),
                len,
                Notification {
                    id: 3,
                    value: round as u32 + 1,
                },
            ),
            "write_notify",
        );
        ok(f.q.wait(BLK), "wait");
        ok(w.notify_waitsome(BIG, 3..4, BLK), "waitsome");
        assert_eq!(ok(w.notify_reset(BIG, 3), "reset"), round as u32 + 1);
        let mut got = vec![0u8; len];
        ok(seg.read(MAX, &mut got), "local read");
        if let Some(i) = (0..len).find(|&i| got[i] != byte(round, f.prev, i)) {
            panic!(
                "round {round}: {len}-byte write from rank {}: byte {i} differs",
                f.prev
            );
        }
        ok(f.q.read(BIG.at(2 * MAX), BIG.on(f.next, MAX), len), "read");
        ok(f.q.wait(BLK), "read wait");
        ok(seg.read(2 * MAX, &mut got), "local read back");
        if let Some(i) = (0..len).find(|&i| got[i] != data[i]) {
            panic!(
                "round {round}: {len}-byte read from rank {}: byte {i} differs",
                f.next
            );
        }
        // Nobody overwrites a receive area before its owner has checked it.
        ok(w.barrier(BLK), "barrier");
    }
    drop(seg);
    ok(w.segment_delete(BIG, BLK), "delete big segment");
    f.done();
}

//! The job control block and the segment header: `#[repr(C)]` structures of atomics laid over
//! shared memory (zeroed memory is their initial state), mapped by every rank and by the
//! launcher.

use crate::config::{
    FAST_REDUCE_MAX, MAX_SEGMENTS, NOTIFICATIONS, PASSIVE_MAX, PASSIVE_SLOTS, REDUCE_CHUNK,
};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// Bytes before the user data of each segment mapping (the notification area, [`SegHeader`]),
/// rounded up to whole pages so that user data is page-aligned.
pub const SEG_HEADER: usize = std::mem::size_of::<SegHeader>().next_multiple_of(4096);

const MAGIC: u64 = 0x7469_6572_735f_6374; // "tiers_ct"

/// Health codes in the state vector.
pub const ST_STARTING: u32 = 0;
pub const ST_HEALTHY: u32 = 1;
pub const ST_FAILED: u32 = 2;
pub const ST_EXITED: u32 = 3;

/// One 32-bit word alone on its cache line (futex words and hot counters).
#[repr(C, align(64))]
#[derive(Default)]
pub struct Line {
    pub v: AtomicU32,
    pub waiters: AtomicU32,
}

/// One 64-bit counter alone on its cache line.
#[repr(C, align(64))]
#[derive(Default)]
pub struct Line64 {
    pub v: AtomicU64,
}

/// Bits of `Header.barrier_count` that count arrivals; the bits above sum the arrivals'
/// [`Collective::digest`](crate::collective::Collective::digest)s (32 bits each, so no carry
/// out of 64 bits below 2^16 ranks).
pub const COUNT_BITS: u32 = 16;

/// A rank's record of the collectives it entered through the barrier (`mem.rs`): `seq`, the
/// index of the last one, and `call[seq % 2]`, its [`Collective::word`](crate::collective::Collective::word).
#[repr(C, align(64))]
#[derive(Default)]
pub struct Calls {
    pub seq: AtomicU64,
    pub call: [AtomicU64; 2],
}

#[repr(C)]
pub struct Header {
    pub magic: AtomicU64,
    pub size: AtomicU32,
    pub launcher_pid: AtomicU32,
    /// The launcher's start time (`sys::start_time`) and PID namespace (`sys::pid_ns`), 0 when
    /// unknown: a pid alone names another process once it is reused or seen from another
    /// namespace sharing `/dev/shm` (`shm::sweep_stale`).
    pub launcher_start: AtomicU64,
    pub pid_ns: AtomicU64,
    /// Arrivals at the barrier (low [`COUNT_BITS`]) and the sum of their call digests.
    pub barrier_count: Line64,
    /// Moves by 1 when a barrier completes, by 2 when its arrivals disagreed.
    pub barrier_gen: Line,
    /// Bumped (only when someone sleeps) after a rank published a small allreduce's input.
    pub fast_bell: Line,
}

#[repr(C)]
pub struct Slot {
    pub from: AtomicU32,
    pub len: AtomicU32,
    pub data: UnsafeCell<[u8; PASSIVE_MAX]>,
}

#[repr(C)]
pub struct Mailbox {
    /// Spin lock over head/tail/slots, held for one copy.
    pub lock: Line,
    pub head: AtomicU32,
    pub tail: AtomicU32,
    /// Bumped per message; the receiver sleeps on it.
    pub bell: Line,
    /// Bumped per receive; full senders sleep on it.
    pub space: Line,
    pub slots: [Slot; PASSIVE_SLOTS],
}

/// One rank's arrival at a small allreduce: the allreduce's sequence number (the flag) and the
/// rank's input on one cache line, so the peer that sees the flag has the value in the same
/// cache-line transfer. Two per rank, used alternately.
#[repr(C, align(64))]
pub struct FastSlot {
    /// The allreduce's flag (low 32 bits) and its call (`mem::fast_sig`, high 32 bits): one
    /// word, so that a reader's one comparison checks both.
    pub tag: AtomicU64,
    pub data: UnsafeCell<[u8; FAST_REDUCE_MAX]>,
}

const _: () = assert!(std::mem::size_of::<FastSlot>() == 64);

#[repr(C)]
pub struct RankCtl {
    pub state: Line,
    pub pid: AtomicU32,
    /// Registered segment sizes plus one (0: not registered).
    pub seg_size: [AtomicU64; MAX_SEGMENTS as usize],
    pub mailbox: Mailbox,
    pub reduce: [UnsafeCell<[u8; REDUCE_CHUNK]>; 2],
    pub fast: [FastSlot; 2],
    pub calls: Calls,
    /// Where this rank leads a group of the combining barrier (`mem.rs`, worlds above
    /// `COMBINE_MIN` ranks): the arrivals of its group, counted as `Header.barrier_count`
    /// counts the groups' (low [`COUNT_BITS`] arrivals, above them the sum of their digests).
    pub group_count: Line64,
}

/// The notification area at the start of every segment mapping.
#[repr(C)]
pub struct SegHeader {
    /// Bumped per notification; `notify_waitsome` sleeps on it.
    pub seq: Line,
    pub notif: [AtomicU32; NOTIFICATIONS],
    /// The job's `Header.launcher_start` and `pid_ns`, copied at creation (for `sweep_stale`,
    /// which sees segments whose control block is gone).
    pub owner_start: AtomicU64,
    pub owner_ns: AtomicU64,
}

/// A view of a control block at a fixed address.
#[derive(Clone, Copy)]
pub struct Ctl {
    base: *mut u8,
    n: usize,
}

// SAFETY: Ctl points into a mapping that outlives it (its owner holds the Mapping); every field
// is an atomic or an UnsafeCell accessed through raw pointers under the protocols of mem.rs.
unsafe impl Send for Ctl {}
// SAFETY: as above.
unsafe impl Sync for Ctl {}

fn rank_offset() -> usize {
    let h = std::mem::size_of::<Header>();
    let a = std::mem::align_of::<RankCtl>();
    h.div_ceil(a) * a
}

impl Ctl {
    /// Bytes of the control block of an `n`-rank job.
    pub fn len(n: usize) -> usize {
        rank_offset() + n * std::mem::size_of::<RankCtl>()
    }

    /// Initialises a zeroed block of `Ctl::len(n)` bytes.
    ///
    /// # Safety
    /// `base` must point to at least `Ctl::len(n)` zeroed bytes, aligned to 64, that stay mapped
    /// while the returned value (and its copies) are used.
    pub unsafe fn init(base: *mut u8, n: usize, launcher_pid: u32) -> Ctl {
        let c = Ctl { base, n };
        c.header()
            .size
            .store(n as u32, std::sync::atomic::Ordering::Relaxed);
        c.header()
            .launcher_pid
            .store(launcher_pid, std::sync::atomic::Ordering::Relaxed);
        c.header().launcher_start.store(
            crate::sys::start_time(launcher_pid).unwrap_or(0),
            std::sync::atomic::Ordering::Relaxed,
        );
        c.header().pid_ns.store(
            crate::sys::pid_ns().unwrap_or(0),
            std::sync::atomic::Ordering::Relaxed,
        );
        c.header()
            .magic
            .store(MAGIC, std::sync::atomic::Ordering::Release);
        c
    }

    /// Attaches to an initialised block of `len` bytes; `None` if it is not one (or too short).
    ///
    /// # Safety
    /// As for [`Ctl::init`], with `len` the mapped length.
    pub unsafe fn attach(base: *mut u8, len: usize) -> Option<Ctl> {
        if len < std::mem::size_of::<Header>() {
            return None;
        }
        // SAFETY: the header fits in the mapping (checked above).
        let h = unsafe { &*(base as *const Header) };
        if h.magic.load(std::sync::atomic::Ordering::Acquire) != MAGIC {
            return None;
        }
        let n = h.size.load(std::sync::atomic::Ordering::Relaxed) as usize;
        if n == 0 || Ctl::len(n) > len {
            return None;
        }
        Some(Ctl { base, n })
    }

    pub fn n(&self) -> usize {
        self.n
    }

    pub fn header(&self) -> &Header {
        // SAFETY: base is valid for Ctl::len(n) bytes (constructor contract).
        unsafe { &*(self.base as *const Header) }
    }

    pub fn rank(&self, r: usize) -> &RankCtl {
        assert!(r < self.n, "tiers: rank {r} outside the control block");
        // SAFETY: r < n, so the RankCtl lies inside the block; alignment of rank_offset and of
        // the mapping (page) make it aligned.
        unsafe {
            &*(self
                .base
                .add(rank_offset() + r * std::mem::size_of::<RankCtl>())
                as *const RankCtl)
        }
    }
}

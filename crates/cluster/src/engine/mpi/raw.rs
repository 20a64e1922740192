//! The MPI calls of the `mpi` engine, each behind a small wrapper over rsmpi's raw bindings
//! (`mpi::ffi`), so that the engine and the benchmarks above contain no `unsafe` of their own
//! except where a buffer must outlive a non-blocking request.
//!
//! Thread safety: MPI is initialised with the level the program asks for. Unless the library
//! provides `MPI_THREAD_MULTIPLE`, every call made here holds one process-wide lock, so any
//! thread may call tiers (MPI sees `MPI_THREAD_SERIALIZED` use). Waits never hold the lock
//! between two tests, so other threads progress meanwhile.

use crate::config;
use crate::error::{Error, Result};
use crate::timeout::Deadline;
use crate::wait::{self, Naps, Pace};
use mpi::ffi;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::Duration;

pub(crate) use ffi::{MPI_Datatype as Datatype, MPI_Op as MpiOp};

/// A communicator handle.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Comm(ffi::MPI_Comm);

// SAFETY: a communicator handle is an opaque reference MPI lets any thread use (our calls are
// serialised by `lock` unless MPI is fully thread-safe).
unsafe impl Send for Comm {}
// SAFETY: as above.
unsafe impl Sync for Comm {}

/// The thread level a program asks MPI for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threading {
    /// One thread of each rank communicates at a time (`MPI_THREAD_FUNNELED` is asked for;
    /// tiers serialises its own calls, so that thread need not be the main one).
    Funneled,
    /// Any worker communicates (`MPI_THREAD_MULTIPLE`).
    Multiple,
}

static LOCK: Mutex<()> = Mutex::new(());
static MULTIPLE: AtomicBool = AtomicBool::new(false);
static INIT: Once = Once::new();
static INIT_RESULT: AtomicI32 = AtomicI32::new(0);

/// Holds the process-wide MPI lock (none when MPI provides `MPI_THREAD_MULTIPLE`).
pub(crate) struct Guard(#[allow(dead_code)] Option<MutexGuard<'static, ()>>);

pub(crate) fn lock() -> Guard {
    if MULTIPLE.load(Ordering::Relaxed) {
        Guard(None)
    } else {
        Guard(Some(LOCK.lock().unwrap_or_else(|e| e.into_inner())))
    }
}

fn check(rc: c_int, what: &str) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::Setup(format!("{what} failed (MPI error {rc})")))
    }
}

/// Whether this process was started by an MPI launcher (Open MPI, MPICH/Hydra, PMIx, Slurm).
pub fn launched() -> bool {
    config::MPI_LAUNCHER_VARS
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

extern "C" fn finalize_at_exit() {
    let mut fin: c_int = 0;
    // SAFETY: MPI_Finalized may be called at any time; MPI_Finalize once, after init, from
    // the main thread (atexit handlers run on the thread that calls exit, normally main).
    unsafe {
        ffi::MPI_Finalized(&mut fin);
        if fin == 0 {
            ffi::MPI_Finalize();
        }
    }
}

extern "C" {
    fn atexit(cb: extern "C" fn()) -> c_int;
}

/// Initialises MPI once per process (later calls return the level provided the first time).
/// MPI is finalised when the process exits, because a rank that exits without
/// `MPI_Finalize` makes the launcher report a failed job.
pub fn init(level: Threading) -> Result<()> {
    INIT.call_once(|| {
        let want = match level {
            // SAFETY: reading constants exported by the MPI shim.
            Threading::Funneled => unsafe { ffi::RSMPI_THREAD_FUNNELED },
            // SAFETY: as above.
            Threading::Multiple => unsafe { ffi::RSMPI_THREAD_MULTIPLE },
        };
        let mut provided: c_int = 0;
        let mut flag: c_int = 0;
        // SAFETY: argc/argv may be null (MPI-2); provided is a valid out-pointer. We call
        // MPI_Init_thread only if nobody (the program itself) initialised MPI before.
        let rc = unsafe {
            ffi::MPI_Initialized(&mut flag);
            if flag != 0 {
                ffi::MPI_Query_thread(&mut provided)
            } else {
                let rc = ffi::MPI_Init_thread(
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    want,
                    &mut provided,
                );
                if rc == 0 {
                    atexit(finalize_at_exit);
                }
                rc
            }
        };
        // SAFETY: constant read.
        let multiple = unsafe { ffi::RSMPI_THREAD_MULTIPLE };
        MULTIPLE.store(provided >= multiple, Ordering::Relaxed);
        INIT_RESULT.store(rc, Ordering::Relaxed);
    });
    check(INIT_RESULT.load(Ordering::Relaxed), "MPI_Init_thread")
}

/// Whether MPI provides `MPI_THREAD_MULTIPLE` (then tiers does not serialise its MPI calls).
pub fn thread_multiple() -> bool {
    MULTIPLE.load(Ordering::Relaxed)
}

/// The thread level MPI provides (`MPI_THREAD_*` as a number).
pub fn provided() -> i32 {
    let mut p: c_int = 0;
    let _g = lock();
    // SAFETY: valid out-pointer; MPI is initialised by our callers.
    unsafe { ffi::MPI_Query_thread(&mut p) };
    p
}

/// `MPI_COMM_WORLD`.
pub(crate) fn world() -> Comm {
    // SAFETY: constant read.
    Comm(unsafe { ffi::RSMPI_COMM_WORLD })
}

pub(crate) fn dt_u8() -> Datatype {
    // SAFETY: constant read.
    unsafe { ffi::RSMPI_UINT8_T }
}
pub(crate) fn dt_u64() -> Datatype {
    // SAFETY: constant read.
    unsafe { ffi::RSMPI_UINT64_T }
}
pub(crate) fn dt_f64() -> Datatype {
    // SAFETY: constant read.
    unsafe { ffi::RSMPI_DOUBLE }
}
pub(crate) fn datatype(ty: crate::DataType) -> Datatype {
    use crate::DataType as D;
    // SAFETY: constant reads.
    unsafe {
        match ty {
            D::I32 => ffi::RSMPI_INT32_T,
            D::U32 => ffi::RSMPI_UINT32_T,
            D::I64 => ffi::RSMPI_INT64_T,
            D::U64 => ffi::RSMPI_UINT64_T,
            D::F32 => ffi::RSMPI_FLOAT,
            D::F64 => ffi::RSMPI_DOUBLE,
        }
    }
}
pub(crate) fn op(op: crate::Op) -> MpiOp {
    // SAFETY: constant reads.
    unsafe {
        match op {
            crate::Op::Min => ffi::RSMPI_MIN,
            crate::Op::Max => ffi::RSMPI_MAX,
            crate::Op::Sum => ffi::RSMPI_SUM,
        }
    }
}

/// Rank and size of `comm`.
pub(crate) fn rank_size(comm: Comm) -> (usize, usize) {
    let (mut r, mut s): (c_int, c_int) = (0, 0);
    let _g = lock();
    // SAFETY: valid communicator and out-pointers.
    unsafe {
        ffi::MPI_Comm_rank(comm.0, &mut r);
        ffi::MPI_Comm_size(comm.0, &mut s);
    }
    (r as usize, s as usize)
}

/// `MPI_Comm_dup` (collective).
pub(crate) fn dup(comm: Comm) -> Result<Comm> {
    let mut out = world();
    let _g = lock();
    // SAFETY: valid communicator; out is a valid out-pointer.
    check(
        unsafe { ffi::MPI_Comm_dup(comm.0, &mut out.0) },
        "MPI_Comm_dup",
    )?;
    Ok(out)
}

/// The ranks of `comm` that share memory with this one (`MPI_Comm_split_type` shared).
pub(crate) fn split_shared(comm: Comm) -> Result<Comm> {
    let mut out = world();
    let _g = lock();
    // SAFETY: constants and valid handles; out is a valid out-pointer.
    check(
        unsafe {
            ffi::MPI_Comm_split_type(
                comm.0,
                ffi::RSMPI_COMM_TYPE_SHARED,
                0,
                ffi::RSMPI_INFO_NULL,
                &mut out.0,
            )
        },
        "MPI_Comm_split_type",
    )?;
    Ok(out)
}

/// `MPI_Comm_split`; `None` for ranks that pass no colour.
pub(crate) fn split(comm: Comm, color: Option<i32>, key: i32) -> Result<Option<Comm>> {
    let mut out = world();
    let _g = lock();
    // SAFETY: constant read.
    let undefined = unsafe { ffi::RSMPI_UNDEFINED };
    // SAFETY: valid communicator; out is a valid out-pointer.
    check(
        unsafe { ffi::MPI_Comm_split(comm.0, color.unwrap_or(undefined), key, &mut out.0) },
        "MPI_Comm_split",
    )?;
    Ok(color.map(|_| out))
}

/// A pending non-blocking operation. Its buffers must stay valid until [`Req::test`] says
/// done; the constructors are `unsafe` for that reason.
pub(crate) struct Req(ffi::MPI_Request);

// SAFETY: a request handle may be tested from any thread (calls are serialised by `lock`).
unsafe impl Send for Req {}
// SAFETY: a shared &Req allows nothing (testing takes &mut).
unsafe impl Sync for Req {}

impl Req {
    /// Tests once; `true` when complete (the request is then freed by MPI).
    pub(crate) fn test(&mut self) -> Result<bool> {
        let mut flag: c_int = 0;
        let _g = lock();
        // SAFETY: self.0 is an active (or already null) request; status is ignored.
        check(
            unsafe { ffi::MPI_Test(&mut self.0, &mut flag, ffi::RSMPI_STATUS_IGNORE) },
            "MPI_Test",
        )?;
        Ok(flag != 0)
    }

    /// Tests until complete or until `deadline`, paced by `pace` (see [`wait`]), so a long
    /// wait costs little CPU. `Err(Timeout)` leaves the request pending (resumable).
    pub(crate) fn wait(&mut self, deadline: Deadline, pace: Pace) -> Result<()> {
        wait::until(deadline, pace, || self.test())
    }
}

/// The pace of the waits of setup (see [`config::MPI_SETUP_SPIN`]).
pub(crate) fn setup_pace() -> Pace {
    Pace::new(config::MPI_SETUP_SPIN, Duration::ZERO, Naps::POLLED)
}

/// Lets MPI progress (one `MPI_Iprobe`): one-sided operations of other ranks that MPI
/// emulates with messages (TCP) complete at this rank only while it calls into MPI.
///
/// The probe is for a tag no one sends: a probe that matches a waiting message returns at
/// once without driving progress (Open MPI's ob1), and collectives' point-to-point messages
/// may wait here unreceived for a while.
pub(crate) fn progress(comm: Comm) {
    const NEVER_SENT: c_int = 0x7fff;
    let mut flag: c_int = 0;
    let _g = lock();
    // SAFETY: valid communicator and out-pointers; the status is ignored.
    unsafe {
        ffi::MPI_Iprobe(
            ffi::RSMPI_ANY_SOURCE,
            NEVER_SENT,
            comm.0,
            &mut flag,
            ffi::RSMPI_STATUS_IGNORE,
        )
    };
}

/// `MPI_Ibarrier`.
pub(crate) fn ibarrier(comm: Comm) -> Result<Req> {
    // SAFETY: constant read.
    let mut r = Req(unsafe { ffi::RSMPI_REQUEST_NULL });
    let _g = lock();
    // SAFETY: valid communicator; r.0 is a valid out-pointer. No buffers.
    check(
        unsafe { ffi::MPI_Ibarrier(comm.0, &mut r.0) },
        "MPI_Ibarrier",
    )?;
    Ok(r)
}

/// `MPI_Iallreduce` of `count` elements.
///
/// # Safety
/// `send` and `recv` must hold `count` elements of `dt` and stay valid and unmoved (and
/// `recv` unread) until the request completes.
pub(crate) unsafe fn iallreduce(
    send: *const u8,
    recv: *mut u8,
    count: usize,
    dt: Datatype,
    op: MpiOp,
    comm: Comm,
) -> Result<Req> {
    // SAFETY: constant read.
    let mut r = Req(unsafe { ffi::RSMPI_REQUEST_NULL });
    let _g = lock();
    // SAFETY: the caller keeps both buffers valid until completion.
    check(
        unsafe {
            ffi::MPI_Iallreduce(
                send as *const c_void,
                recv as *mut c_void,
                count as c_int,
                dt,
                op,
                comm.0,
                &mut r.0,
            )
        },
        "MPI_Iallreduce",
    )?;
    Ok(r)
}

/// `MPI_Iallgather` of one `u64` per rank.
///
/// # Safety
/// `send` and `recv` (one element per rank of `comm`) must stay valid until completion.
pub(crate) unsafe fn iallgather_u64(send: *const u64, recv: *mut u64, comm: Comm) -> Result<Req> {
    // SAFETY: constant read.
    let mut r = Req(unsafe { ffi::RSMPI_REQUEST_NULL });
    let dt = dt_u64();
    let _g = lock();
    // SAFETY: the caller keeps both buffers valid until completion.
    check(
        unsafe {
            ffi::MPI_Iallgather(
                send as *const c_void,
                1,
                dt,
                recv as *mut c_void,
                1,
                dt,
                comm.0,
                &mut r.0,
            )
        },
        "MPI_Iallgather",
    )?;
    Ok(r)
}

/// `MPI_Iallgather` of `len` bytes per rank.
///
/// # Safety
/// `send` (`len` bytes) and `recv` (`len` bytes per rank of `comm`) must stay valid until
/// completion.
pub(crate) unsafe fn iallgather_bytes(
    send: *const u8,
    len: usize,
    recv: *mut u8,
    comm: Comm,
) -> Result<Req> {
    // SAFETY: constant read.
    let mut r = Req(unsafe { ffi::RSMPI_REQUEST_NULL });
    let dt = dt_u8();
    let _g = lock();
    // SAFETY: the caller keeps both buffers valid until completion.
    check(
        unsafe {
            ffi::MPI_Iallgather(
                send as *const c_void,
                len as c_int,
                dt,
                recv as *mut c_void,
                len as c_int,
                dt,
                comm.0,
                &mut r.0,
            )
        },
        "MPI_Iallgather",
    )?;
    Ok(r)
}

/// Gathers one `u64` from every rank of `comm` (every rank gets all), with a real timeout.
pub(crate) fn allgather_u64(x: u64, comm: Comm, deadline: Deadline) -> Result<Vec<u64>> {
    let (_, n) = rank_size(comm);
    let send = Box::new(x);
    let mut recv = vec![0u64; n];
    // SAFETY: both buffers live in this frame until the request completes below; on timeout
    // we cannot cancel a collective, so we leak them (the request may still write).
    let mut req = unsafe { iallgather_u64(&*send, recv.as_mut_ptr(), comm)? };
    match req.wait(deadline, setup_pace()) {
        Ok(()) => Ok(recv),
        Err(e) => {
            std::mem::forget(send);
            std::mem::forget(recv);
            Err(e)
        }
    }
}

/// An MPI-3 window over memory this rank owns, in a passive-target epoch to every rank
/// (`MPI_Win_lock_all`) from creation to [`Win::free`].
pub(crate) struct Win(ffi::MPI_Win);

// SAFETY: a window handle may be used from any thread (calls are serialised by `lock`).
unsafe impl Send for Win {}
// SAFETY: as above.
unsafe impl Sync for Win {}

impl Win {
    /// `MPI_Win_create` over `len` bytes at `base` (displacement unit 1), then
    /// `MPI_Win_lock_all`. Collective over `comm`.
    ///
    /// # Safety
    /// `base..base+len` must stay valid until [`Win::free`] returns.
    pub(crate) unsafe fn create(base: *mut u8, len: usize, comm: Comm) -> Result<Win> {
        // SAFETY: constant read.
        let mut w = unsafe { ffi::RSMPI_WIN_NULL };
        let _g = lock();
        // SAFETY: the caller keeps the memory valid for the window's life.
        check(
            unsafe {
                ffi::MPI_Win_create(
                    base as *mut c_void,
                    len as ffi::MPI_Aint,
                    1,
                    ffi::RSMPI_INFO_NULL,
                    comm.0,
                    &mut w,
                )
            },
            "MPI_Win_create",
        )?;
        // SAFETY: w is the window just created.
        check(
            unsafe { ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, w) },
            "MPI_Win_lock_all",
        )?;
        Ok(Win(w))
    }

    /// `MPI_Win_allocate` of `len` zero bytes (displacement unit 1), then lock_all. Returns
    /// the window and its memory (valid until `free`).
    pub(crate) fn allocate(len: usize, comm: Comm) -> Result<(Win, *mut u8)> {
        // SAFETY: constant read.
        let mut w = unsafe { ffi::RSMPI_WIN_NULL };
        let mut base: *mut u8 = std::ptr::null_mut();
        let _g = lock();
        // SAFETY: baseptr receives the address of MPI-owned memory of len bytes.
        check(
            unsafe {
                ffi::MPI_Win_allocate(
                    len as ffi::MPI_Aint,
                    1,
                    ffi::RSMPI_INFO_NULL,
                    comm.0,
                    &mut base as *mut *mut u8 as *mut c_void,
                    &mut w,
                )
            },
            "MPI_Win_allocate",
        )?;
        // SAFETY: base points to len bytes owned by the window.
        unsafe { std::ptr::write_bytes(base, 0, len) };
        // SAFETY: w is the window just created.
        check(
            unsafe { ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, w) },
            "MPI_Win_lock_all",
        )?;
        Ok((Win(w), base))
    }

    /// `MPI_Put` of `len` bytes (blocking only until issued).
    ///
    /// # Safety
    /// `src..src+len` must stay valid until the put is flushed; `disp + len` must lie inside
    /// the target's window.
    pub(crate) unsafe fn put(
        &self,
        src: *const u8,
        len: usize,
        rank: usize,
        disp: usize,
    ) -> Result<()> {
        let dt = dt_u8();
        let _g = lock();
        // SAFETY: the caller's contract.
        check(
            unsafe {
                ffi::MPI_Put(
                    src as *const c_void,
                    len as c_int,
                    dt,
                    rank as c_int,
                    disp as ffi::MPI_Aint,
                    len as c_int,
                    dt,
                    self.0,
                )
            },
            "MPI_Put",
        )
    }

    /// `MPI_Rput`: the request completes when `src` may be reused.
    ///
    /// # Safety
    /// As [`Win::put`], until the request completes.
    pub(crate) unsafe fn rput(
        &self,
        src: *const u8,
        len: usize,
        rank: usize,
        disp: usize,
    ) -> Result<Req> {
        let dt = dt_u8();
        // SAFETY: constant read.
        let mut r = Req(unsafe { ffi::RSMPI_REQUEST_NULL });
        let _g = lock();
        // SAFETY: the caller's contract.
        check(
            unsafe {
                ffi::MPI_Rput(
                    src as *const c_void,
                    len as c_int,
                    dt,
                    rank as c_int,
                    disp as ffi::MPI_Aint,
                    len as c_int,
                    dt,
                    self.0,
                    &mut r.0,
                )
            },
            "MPI_Rput",
        )?;
        Ok(r)
    }

    /// `MPI_Rget`: the request completes when the data is in `dst`.
    ///
    /// # Safety
    /// `dst..dst+len` must stay valid (and unread) until the request completes; `disp + len`
    /// must lie inside the target's window.
    pub(crate) unsafe fn rget(
        &self,
        dst: *mut u8,
        len: usize,
        rank: usize,
        disp: usize,
    ) -> Result<Req> {
        let dt = dt_u8();
        // SAFETY: constant read.
        let mut r = Req(unsafe { ffi::RSMPI_REQUEST_NULL });
        let _g = lock();
        // SAFETY: the caller's contract.
        check(
            unsafe {
                ffi::MPI_Rget(
                    dst as *mut c_void,
                    len as c_int,
                    dt,
                    rank as c_int,
                    disp as ffi::MPI_Aint,
                    len as c_int,
                    dt,
                    self.0,
                    &mut r.0,
                )
            },
            "MPI_Rget",
        )?;
        Ok(r)
    }

    /// `MPI_Win_flush(rank)`: every operation to `rank` is complete at the target. MPI-3 has
    /// no non-blocking flush; callers first drive their requests to local completion with
    /// timeouts, so this waits only for the remote acknowledgement.
    pub(crate) fn flush(&self, rank: usize) -> Result<()> {
        let _g = lock();
        // SAFETY: a valid window in a lock_all epoch.
        check(
            unsafe { ffi::MPI_Win_flush(rank as c_int, self.0) },
            "MPI_Win_flush",
        )
    }

    /// `MPI_Win_flush_local(rank)`: every operation to `rank` is complete at this rank. Where
    /// MPI implements one-sided operations with messages (osc pt2pt over TCP), small
    /// operations wait in a buffer until a flush; this sends them on their way, so that they
    /// arrive without the origin waiting for the target's acknowledgement.
    pub(crate) fn flush_local(&self, rank: usize) -> Result<()> {
        let _g = lock();
        // SAFETY: a valid window in a lock_all epoch.
        check(
            unsafe { ffi::MPI_Win_flush_local(rank as c_int, self.0) },
            "MPI_Win_flush_local",
        )
    }

    /// `MPI_Fetch_and_op(MPI_SUM)` on a `u64` plus flush: returns the old value.
    pub(crate) fn fetch_add(&self, rank: usize, disp: usize, v: u64) -> Result<u64> {
        let mut old = 0u64;
        let (dt, sum) = (dt_u64(), op(crate::Op::Sum));
        {
            let _g = lock();
            // SAFETY: origin/result are valid u64s in this frame, completed by the flush below
            // before they go out of scope; the caller checked disp.
            check(
                unsafe {
                    ffi::MPI_Fetch_and_op(
                        &v as *const u64 as *const c_void,
                        &mut old as *mut u64 as *mut c_void,
                        dt,
                        rank as c_int,
                        disp as ffi::MPI_Aint,
                        sum,
                        self.0,
                    )
                },
                "MPI_Fetch_and_op",
            )?;
            // SAFETY: a valid window in a lock_all epoch.
            check(
                unsafe { ffi::MPI_Win_flush(rank as c_int, self.0) },
                "MPI_Win_flush",
            )?;
        }
        Ok(old)
    }

    /// `MPI_Compare_and_swap` on a `u64` plus flush: returns the old value.
    pub(crate) fn compare_swap(
        &self,
        rank: usize,
        disp: usize,
        expected: u64,
        new: u64,
    ) -> Result<u64> {
        let mut old = 0u64;
        let dt = dt_u64();
        let _g = lock();
        // SAFETY: as in fetch_add.
        check(
            unsafe {
                ffi::MPI_Compare_and_swap(
                    &new as *const u64 as *const c_void,
                    &expected as *const u64 as *const c_void,
                    &mut old as *mut u64 as *mut c_void,
                    dt,
                    rank as c_int,
                    disp as ffi::MPI_Aint,
                    self.0,
                )
            },
            "MPI_Compare_and_swap",
        )?;
        // SAFETY: a valid window in a lock_all epoch.
        check(
            unsafe { ffi::MPI_Win_flush(rank as c_int, self.0) },
            "MPI_Win_flush",
        )?;
        Ok(old)
    }

    /// Ends the epoch and frees the window (collective over the window's communicator).
    pub(crate) fn free(mut self) -> Result<()> {
        let _g = lock();
        // SAFETY: a valid window in a lock_all epoch; freed once (self is consumed).
        unsafe {
            check(ffi::MPI_Win_unlock_all(self.0), "MPI_Win_unlock_all")?;
            check(ffi::MPI_Win_free(&mut self.0), "MPI_Win_free")
        }
    }
}

/// Blocking `MPI_Barrier` (benchmark peer only: the engine never blocks in MPI this way).
pub(crate) fn barrier_blocking(comm: Comm) {
    let _g = lock();
    // SAFETY: a valid communicator.
    unsafe { ffi::MPI_Barrier(comm.0) };
}

/// Blocking `MPI_Allreduce` of `f64`s (benchmark peer and calibration).
pub(crate) fn allreduce_f64_blocking(x: &[f64], out: &mut [f64], op_: crate::Op, comm: Comm) {
    assert_eq!(x.len(), out.len());
    let (dt, o) = (dt_f64(), op(op_));
    let _g = lock();
    // SAFETY: both slices hold x.len() doubles and outlive the blocking call.
    unsafe {
        ffi::MPI_Allreduce(
            x.as_ptr() as *const c_void,
            out.as_mut_ptr() as *mut c_void,
            x.len() as c_int,
            dt,
            o,
            comm.0,
        )
    };
}

/// `MPI_Isend` (`sync`: `MPI_Issend`, complete only once matched by the receiver).
///
/// # Safety
/// `buf` must stay valid until the request completes.
pub(crate) unsafe fn isend(
    buf: &[u8],
    dest: usize,
    tag: i32,
    comm: Comm,
    sync: bool,
) -> Result<Req> {
    let dt = dt_u8();
    // SAFETY: constant read.
    let mut r = Req(unsafe { ffi::RSMPI_REQUEST_NULL });
    let _g = lock();
    let f = if sync {
        ffi::MPI_Issend
    } else {
        ffi::MPI_Isend
    };
    // SAFETY: the caller keeps buf valid until completion.
    check(
        unsafe {
            f(
                buf.as_ptr() as *const c_void,
                buf.len() as c_int,
                dt,
                dest as c_int,
                tag,
                comm.0,
                &mut r.0,
            )
        },
        "MPI_Isend",
    )?;
    Ok(r)
}

/// `MPI_Irecv` of up to `len` bytes from `src` with `tag`.
///
/// # Safety
/// `buf..buf+len` must stay valid (and unread) until the request completes.
pub(crate) unsafe fn irecv(
    buf: *mut u8,
    len: usize,
    src: usize,
    tag: i32,
    comm: Comm,
) -> Result<Req> {
    let dt = dt_u8();
    // SAFETY: constant read.
    let mut r = Req(unsafe { ffi::RSMPI_REQUEST_NULL });
    let _g = lock();
    // SAFETY: the caller keeps buf valid until completion.
    check(
        unsafe {
            ffi::MPI_Irecv(
                buf as *mut c_void,
                len as c_int,
                dt,
                src as c_int,
                tag,
                comm.0,
                &mut r.0,
            )
        },
        "MPI_Irecv",
    )?;
    Ok(r)
}

/// A dissemination barrier over `comm` from zero-byte point-to-point messages:
/// ceil(log2 n) rounds; in the round of distance d, rank r sends to r + d and receives from
/// r - d. Cheaper per call than `MPI_Ibarrier` (no schedule is built), and resumable.
pub(crate) struct Dissemination {
    comm: Comm,
    me: usize,
    n: usize,
    dist: usize,
    round: i32,
    reqs: Option<(Req, Req)>,
}

impl Dissemination {
    /// Tags of the rounds (tag + round); point-to-point traffic of its own on `comm`.
    const TAG: i32 = 0x7500;

    pub(crate) fn new(comm: Comm) -> Dissemination {
        let (me, n) = rank_size(comm);
        Dissemination {
            comm,
            me,
            n,
            dist: 1,
            round: 0,
            reqs: None,
        }
    }

    /// Drives the barrier without blocking; `true` once every rank has arrived.
    pub(crate) fn step(&mut self) -> Result<bool> {
        loop {
            if self.dist >= self.n {
                return Ok(true);
            }
            match &mut self.reqs {
                None => {
                    let (to, from) = (
                        (self.me + self.dist) % self.n,
                        (self.me + self.n - self.dist) % self.n,
                    );
                    let tag = Self::TAG + self.round;
                    // SAFETY: zero-byte messages: no buffer is read or written.
                    let r = unsafe {
                        irecv(
                            std::ptr::NonNull::dangling().as_ptr(),
                            0,
                            from,
                            tag,
                            self.comm,
                        )?
                    };
                    // SAFETY: as above.
                    let s = unsafe { isend(&[], to, tag, self.comm, false)? };
                    self.reqs = Some((s, r));
                }
                Some((s, r)) => {
                    // A completed request is null; testing it again says complete.
                    let sent = s.test()?;
                    if !(r.test()? && sent) {
                        return Ok(false);
                    }
                    self.reqs = None;
                    self.dist *= 2;
                    self.round += 1;
                }
            }
        }
    }
}

/// An allgather of `len` bytes per rank over `comm` from point-to-point messages (Bruck's
/// algorithm: ceil(log2 n) rounds, any n), resumable, with no schedule built per call as
/// `MPI_Iallgather` does.
pub(crate) struct Bruck {
    comm: Comm,
    me: usize,
    n: usize,
    len: usize,
    dist: usize,
    round: i32,
    /// Block i holds the input of rank me + i (mod n) once received. Heap memory that stays
    /// put while requests are in flight (the Vec is never resized).
    tmp: Vec<u8>,
    reqs: Option<(Req, Req)>,
}

impl Bruck {
    const TAG: i32 = 0x7600;

    pub(crate) fn new(input: &[u8], comm: Comm) -> Bruck {
        let (me, n) = rank_size(comm);
        let mut tmp = vec![0u8; input.len() * n];
        tmp[..input.len()].copy_from_slice(input);
        Bruck {
            comm,
            me,
            n,
            len: input.len(),
            dist: 1,
            round: 0,
            tmp,
            reqs: None,
        }
    }

    /// Drives the exchange without blocking; `true` when every rank's input is here.
    pub(crate) fn step(&mut self) -> Result<bool> {
        loop {
            if self.dist >= self.n {
                return Ok(true);
            }
            match &mut self.reqs {
                None => {
                    let d = self.dist;
                    let cnt = d.min(self.n - d) * self.len;
                    let to = (self.me + self.n - d) % self.n;
                    let from = (self.me + d) % self.n;
                    let tag = Self::TAG + self.round;
                    let base = self.tmp.as_mut_ptr();
                    // SAFETY: receives into blocks d..d+cnt, sends blocks 0..cnt (cnt <= d: no
                    // overlap), both inside tmp, which is not touched or moved until the two
                    // requests complete (`reqs` is cleared only then; dropping a pending
                    // Bruck is not done: the engine keeps it until complete).
                    let r = unsafe { irecv(base.add(d * self.len), cnt, from, tag, self.comm)? };
                    // SAFETY: as above.
                    let s = unsafe {
                        isend(
                            std::slice::from_raw_parts(base, cnt),
                            to,
                            tag,
                            self.comm,
                            false,
                        )?
                    };
                    self.reqs = Some((s, r));
                }
                Some((s, r)) => {
                    let sent = s.test()?;
                    if !(r.test()? && sent) {
                        return Ok(false);
                    }
                    self.reqs = None;
                    self.dist *= 2;
                    self.round += 1;
                }
            }
        }
    }

    /// Every rank's input in rank order (after `step` said `true`).
    pub(crate) fn result(&self) -> Vec<u8> {
        let mut all = vec![0u8; self.tmp.len()];
        for i in 0..self.n {
            let r = (self.me + i) % self.n;
            all[r * self.len..(r + 1) * self.len]
                .copy_from_slice(&self.tmp[i * self.len..(i + 1) * self.len]);
        }
        all
    }
}

/// A matched incoming message (`MPI_Improbe`), received with [`Matched::recv`].
pub(crate) struct Matched {
    msg: ffi::MPI_Message,
    /// Sender's rank in the communicator.
    pub(crate) source: usize,
    /// Length in bytes.
    pub(crate) len: usize,
}

// SAFETY: a message handle may be received from any thread (calls serialised by `lock`).
unsafe impl Send for Matched {}

/// `MPI_Improbe` for `tag` from anyone.
pub(crate) fn improbe(tag: i32, comm: Comm) -> Result<Option<Matched>> {
    let mut flag: c_int = 0;
    // SAFETY: constant read.
    let mut msg = unsafe { ffi::RSMPI_MESSAGE_NULL };
    // SAFETY: MPI_Status is a plain C struct; zero is a valid initial value.
    let mut st: ffi::MPI_Status = unsafe { std::mem::zeroed() };
    let dt = dt_u8();
    let _g = lock();
    // SAFETY: valid handles and out-pointers.
    check(
        unsafe {
            ffi::MPI_Improbe(
                ffi::RSMPI_ANY_SOURCE,
                tag,
                comm.0,
                &mut flag,
                &mut msg,
                &mut st,
            )
        },
        "MPI_Improbe",
    )?;
    if flag == 0 {
        return Ok(None);
    }
    let mut count: c_int = 0;
    // SAFETY: st was filled by the successful probe.
    check(
        unsafe { ffi::MPI_Get_count(&st, dt, &mut count) },
        "MPI_Get_count",
    )?;
    Ok(Some(Matched {
        msg,
        source: st.MPI_SOURCE as usize,
        len: count as usize,
    }))
}

impl Matched {
    /// Receives the matched message into a fresh buffer (`MPI_Imrecv` driven to completion,
    /// paced by `pace`: the message is already here or on its way, so this never waits for
    /// the sender to act).
    pub(crate) fn recv(mut self, pace: Pace) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; self.len];
        // SAFETY: constant read.
        let mut r = Req(unsafe { ffi::RSMPI_REQUEST_NULL });
        let dt = dt_u8();
        {
            let _g = lock();
            // SAFETY: buf holds len bytes and lives until the request completes below.
            check(
                unsafe {
                    ffi::MPI_Imrecv(
                        buf.as_mut_ptr() as *mut c_void,
                        self.len as c_int,
                        dt,
                        &mut self.msg,
                        &mut r.0,
                    )
                },
                "MPI_Imrecv",
            )?;
        }
        r.wait(Deadline::Never, pace)?;
        Ok(buf)
    }
}

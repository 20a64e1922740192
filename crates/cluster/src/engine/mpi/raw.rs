//! The MPI calls of the `mpi` engine, each behind a small wrapper over rsmpi's raw bindings
//! (`mpi::ffi`), so that the engine and the benchmarks above contain no `unsafe` of their own
//! except where a buffer must outlive a non-blocking request.
//!
//! Every call goes through [`call`] (or [`start`], for the calls that begin a non-blocking
//! operation): it takes the MPI lock for the call and turns an error code into
//! [`Error::Mpi`].
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
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
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
    /// One thread of each rank communicates at a time: tiers serialises its own calls, so any
    /// thread may be that one, and `MPI_THREAD_SERIALIZED` is asked for (MPI's promise for
    /// exactly that use; Open MPI implements it as it does `FUNNELED`, without locks). A
    /// progress thread may then call MPI beside the rank's own threads.
    Funneled,
    /// Any worker communicates (`MPI_THREAD_MULTIPLE`).
    Multiple,
}

static LOCK: Mutex<()> = Mutex::new(());
static MULTIPLE: AtomicBool = AtomicBool::new(false);
static SERIALIZED: AtomicBool = AtomicBool::new(false);
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

/// Set when this process has begun to finalise MPI (at its exit): from then on no call of
/// tiers reaches MPI, since a thread of the process (the GASPI library's watcher, a proxy)
/// calling MPI while the main thread finalises it crashed in MPI's unloaded components.
static CLOSED: AtomicBool = AtomicBool::new(false);
/// MPI calls in progress, counted only under `MPI_THREAD_MULTIPLE` (otherwise [`LOCK`]
/// orders them with the finalisation).
static IN_CALL: AtomicUsize = AtomicUsize::new(0);

/// Runs one MPI call `f` (named `name`) under the MPI lock; a non-zero return code becomes
/// [`Error::Mpi`], and so does any call once the process has begun to finalise MPI.
#[inline]
fn call(name: &'static str, f: impl FnOnce() -> c_int) -> Result<()> {
    let code = {
        let g = lock();
        let counted = g.0.is_none();
        if counted {
            IN_CALL.fetch_add(1, Ordering::SeqCst);
        }
        let code = if CLOSED.load(Ordering::SeqCst) {
            None
        } else {
            Some(f())
        };
        if counted {
            IN_CALL.fetch_sub(1, Ordering::Release);
        }
        code
    };
    match code {
        Some(code) => check(name, code),
        None => Err(Error::Mpi {
            call: name,
            code: -1,
            message: "MPI has been finalised: the process is exiting".into(),
        }),
    }
}

/// [`call`] for a call that starts a non-blocking operation: `f` fills in the request.
#[inline]
fn start(name: &'static str, f: impl FnOnce(&mut ffi::MPI_Request) -> c_int) -> Result<Req> {
    // SAFETY: constant read.
    let mut r = Req(unsafe { ffi::RSMPI_REQUEST_NULL });
    call(name, || f(&mut r.0))?;
    Ok(r)
}

/// `Ok` for `MPI_SUCCESS`, else [`Error::Mpi`] with MPI's description of `code`. Must not be
/// called with the MPI lock held (the description is asked for under it).
#[inline]
fn check(name: &'static str, code: c_int) -> Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(Error::Mpi {
            call: name,
            code,
            message: error_string(code),
        })
    }
}

/// `MPI_Error_string(code)`, or nothing when MPI is not running.
#[cold]
fn error_string(code: c_int) -> Box<str> {
    let mut buf = [0 as c_char; ffi::MPI_MAX_ERROR_STRING as usize];
    let (mut len, mut up, mut down): (c_int, c_int, c_int) = (0, 0, 0);
    let _g = lock();
    // SAFETY: MPI_Initialized and MPI_Finalized may be called at any time; MPI_Error_string
    // writes at most MPI_MAX_ERROR_STRING characters into buf and their number into len.
    let ok = unsafe {
        ffi::MPI_Initialized(&mut up);
        ffi::MPI_Finalized(&mut down);
        up != 0 && down == 0 && ffi::MPI_Error_string(code, buf.as_mut_ptr(), &mut len) == 0
    };
    if !ok {
        return "".into();
    }
    let bytes: Vec<u8> = buf[..(len.max(0) as usize).min(buf.len())]
        .iter()
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into()
}

/// Whether this process was started by an MPI launcher (Open MPI, MPICH/Hydra, PMIx, Slurm).
pub fn launched() -> bool {
    config::MPI_LAUNCHER_VARS
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// Closes tiers' access to MPI: from here on no call of tiers reaches MPI. Serialised
/// callers are held by the lock, counted ones (`MPI_THREAD_MULTIPLE`) are waited for. Once.
pub(super) fn close() {
    if CLOSED.load(Ordering::SeqCst) {
        return;
    }
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    CLOSED.store(true, Ordering::SeqCst);
    while IN_CALL.load(Ordering::SeqCst) != 0 {
        std::thread::yield_now();
    }
}

/// `MPI_Finalize`, under the MPI lock, once [`close`] has shut tiers' other calls out.
pub(super) fn finalize() {
    close();
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: MPI_Finalize once, after init (the exit's caller checked MPI_Finalized), with
    // no other tiers call in MPI.
    unsafe { ffi::MPI_Finalize() };
}

/// Initialises MPI once per process (later calls return the level provided the first time).
/// MPI is finalised when the process exits, because a rank that exits without
/// `MPI_Finalize` makes the launcher report a failed job.
pub fn init(level: Threading) -> Result<()> {
    INIT.call_once(|| {
        let want = match level {
            // SAFETY: reading constants exported by the MPI shim.
            Threading::Funneled => unsafe { ffi::RSMPI_THREAD_SERIALIZED },
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
                super::exit::hook_finalize();
                ffi::MPI_Query_thread(&mut provided)
            } else {
                super::segments::prefer_shared_windows_on_one_node();
                let rc = ffi::MPI_Init_thread(
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    want,
                    &mut provided,
                );
                if rc == 0 {
                    super::exit::finalize_when_exiting();
                    super::exit::hook_finalize();
                }
                rc
            }
        };
        // SAFETY: constant read.
        let multiple = unsafe { ffi::RSMPI_THREAD_MULTIPLE };
        MULTIPLE.store(provided >= multiple, Ordering::Relaxed);
        // SAFETY: constant read.
        let serialized = unsafe { ffi::RSMPI_THREAD_SERIALIZED };
        SERIALIZED.store(provided >= serialized, Ordering::Relaxed);
        INIT_RESULT.store(rc, Ordering::Relaxed);
    });
    check("MPI_Init_thread", INIT_RESULT.load(Ordering::Relaxed))
}

/// Whether any thread may call MPI through tiers: MPI provides `MPI_THREAD_SERIALIZED` (tiers
/// serialises its calls) or `MPI_THREAD_MULTIPLE`.
pub fn any_thread() -> bool {
    SERIALIZED.load(Ordering::Relaxed) || MULTIPLE.load(Ordering::Relaxed)
}

/// Whether MPI provides `MPI_THREAD_MULTIPLE` (then tiers does not serialise its MPI calls).
pub fn thread_multiple() -> bool {
    MULTIPLE.load(Ordering::Relaxed)
}

/// The thread level MPI provides (`MPI_THREAD_*` as a number).
pub fn provided() -> i32 {
    let mut p: c_int = 0;
    // SAFETY: valid out-pointer; MPI is initialised by our callers.
    let _ = call("MPI_Query_thread", || unsafe {
        ffi::MPI_Query_thread(&mut p)
    });
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
pub(crate) fn dt_u32() -> Datatype {
    // SAFETY: constant read.
    unsafe { ffi::RSMPI_UINT32_T }
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
    // SAFETY: valid communicator; out is a valid out-pointer.
    call("MPI_Comm_dup", || unsafe {
        ffi::MPI_Comm_dup(comm.0, &mut out.0)
    })?;
    Ok(out)
}

/// The ranks of `comm` that share memory with this one (`MPI_Comm_split_type` shared).
pub(crate) fn split_shared(comm: Comm) -> Result<Comm> {
    let mut out = world();
    // SAFETY: constants and valid handles; out is a valid out-pointer.
    call("MPI_Comm_split_type", || unsafe {
        ffi::MPI_Comm_split_type(
            comm.0,
            ffi::RSMPI_COMM_TYPE_SHARED,
            0,
            ffi::RSMPI_INFO_NULL,
            &mut out.0,
        )
    })?;
    Ok(out)
}

/// `MPI_Comm_split`; `None` for ranks that pass no colour.
pub(crate) fn split(comm: Comm, color: Option<i32>, key: i32) -> Result<Option<Comm>> {
    let mut out = world();
    // SAFETY: constant read.
    let undefined = unsafe { ffi::RSMPI_UNDEFINED };
    // SAFETY: valid communicator; out is a valid out-pointer.
    call("MPI_Comm_split", || unsafe {
        ffi::MPI_Comm_split(comm.0, color.unwrap_or(undefined), key, &mut out.0)
    })?;
    Ok(color.map(|_| out))
}

/// The status of a completed receive.
pub(crate) struct Status(ffi::MPI_Status);

impl Status {
    /// The message's tag.
    pub(crate) fn tag(&self) -> i32 {
        self.0.MPI_TAG
    }

    /// The message's length in bytes (`MPI_Get_count`).
    pub(crate) fn bytes(&self) -> Result<usize> {
        let mut count: c_int = 0;
        let dt = dt_u8();
        // SAFETY: the status was filled by a completed receive.
        call("MPI_Get_count", || unsafe {
            ffi::MPI_Get_count(&self.0, dt, &mut count)
        })?;
        Ok(count.max(0) as usize)
    }
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
    /// Tests with Open MPI's yield-when-idle off (see [`without_yield`]): tiers' waits pace
    /// themselves (spin, yield, nap), and the GASPI watcher tests every few microseconds.
    pub(crate) fn test(&mut self) -> Result<bool> {
        let mut flag: c_int = 0;
        // SAFETY: self.0 is an active (or already null) request; status is ignored.
        call("MPI_Test", || {
            without_yield(|| unsafe {
                ffi::MPI_Test(&mut self.0, &mut flag, ffi::RSMPI_STATUS_IGNORE)
            })
        })?;
        Ok(flag != 0)
    }

    /// Tests a receive once; its status when complete (the request is then freed by MPI).
    pub(crate) fn test_status(&mut self) -> Result<Option<Status>> {
        let mut flag: c_int = 0;
        // SAFETY: MPI_Status is a plain C struct; zero is a valid initial value.
        let mut st: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: self.0 is an active (or already null) request; st is a valid out-pointer.
        call("MPI_Test", || unsafe {
            ffi::MPI_Test(&mut self.0, &mut flag, &mut st)
        })?;
        Ok((flag != 0).then_some(Status(st)))
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

/// MPI's largest tag (`MPI_TAG_UB`: at least 32767 by the standard, 2^31 − 1 in Open MPI).
pub(crate) fn tag_ub() -> i32 {
    let mut ptr: *mut c_int = std::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: MPI_TAG_UB is a predefined attribute of MPI_COMM_WORLD, whose value is a
    // pointer to an int that MPI owns; ptr and flag are valid out-pointers.
    let r = call("MPI_Comm_get_attr", || unsafe {
        ffi::MPI_Comm_get_attr(
            ffi::RSMPI_COMM_WORLD,
            ffi::MPI_TAG_UB as c_int,
            &mut ptr as *mut *mut c_int as *mut c_void,
            &mut flag,
        )
    });
    if r.is_err() || flag == 0 || ptr.is_null() {
        return 32767;
    }
    // SAFETY: MPI set ptr to its int, valid for the life of MPI.
    unsafe { *ptr }
}

/// Lets MPI progress (one `MPI_Iprobe`): one-sided operations of other ranks that MPI
/// emulates with messages (TCP) complete at this rank only while it calls into MPI.
///
/// The probe is for a tag no one sends: a probe that matches a waiting message returns at
/// once without driving progress (Open MPI's ob1), and collectives' point-to-point messages
/// may wait here unreceived for a while.
///
/// Open MPI told to yield when idle (`mpi_yield_when_idle`) would yield the processor inside
/// this probe whenever nothing arrived, which on a busy host costs the calling thread (a
/// watcher that wakes every few microseconds) its place in the scheduler's queue: its next
/// wake-ups then wait for the scheduler's tick (4 ms) instead of running at once. So the probe
/// runs with Open MPI's yield off (tiers' MPI lock is held: no other thread is in MPI) and it
/// is restored after.
pub(crate) fn progress(comm: Comm) {
    const NEVER_SENT: c_int = 0x7fff;
    let mut flag: c_int = 0;
    // Only while tiers' lock keeps every other thread out of MPI.
    let toggle = if thread_multiple() {
        None
    } else {
        opal_set_yield()
    };
    let _ = call("MPI_Iprobe", || {
        let before = toggle.map(|f| f(false));
        // SAFETY: valid communicator and out-pointers; the status is ignored.
        let rc = unsafe {
            ffi::MPI_Iprobe(
                ffi::RSMPI_ANY_SOURCE,
                NEVER_SENT,
                comm.0,
                &mut flag,
                ffi::RSMPI_STATUS_IGNORE,
            )
        };
        if let (Some(f), Some(b)) = (toggle, before) {
            f(b);
        }
        rc
    });
}

/// Runs the MPI call `f` with Open MPI's yield-when-idle off, then restores it; only while
/// tiers' lock keeps every other thread out of MPI (below `MPI_THREAD_MULTIPLE`), so that no
/// other thread's restore can interleave. A thread that polls every few microseconds must not
/// yield the processor at each empty poll, or its next wake-ups wait for the scheduler's tick.
fn without_yield(f: impl FnOnce() -> c_int) -> c_int {
    let toggle = if thread_multiple() {
        None
    } else {
        opal_set_yield()
    };
    let before = toggle.map(|s| s(false));
    let rc = f();
    if let (Some(s), Some(b)) = (toggle, before) {
        s(b);
    }
    rc
}

/// The address of Open MPI's internal function `name` where this MPI is Open MPI (looked up
/// in the loaded objects once per name; 0 elsewhere).
fn open_mpi_symbol(name: &'static std::ffi::CStr, cache: &std::sync::OnceLock<usize>) -> usize {
    *cache.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name looks a symbol up in the loaded objects.
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
    })
}

/// `MPI_REPLACE`, where this MPI is Open MPI (rsmpi's shim does not export it; Open MPI's
/// handle is the address of its predefined object).
pub(crate) fn op_replace() -> Option<MpiOp> {
    static F: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let f = open_mpi_symbol(c"ompi_mpi_op_replace", &F);
    const _: () = assert!(std::mem::size_of::<MpiOp>() <= std::mem::size_of::<usize>());
    // SAFETY: where present, Open MPI's `MPI_Op` is a pointer to that object (its mpi.h
    // defines `MPI_REPLACE` as `&ompi_mpi_op_replace`), which lives as long as libmpi.
    (f != 0).then(|| unsafe { std::mem::transmute_copy::<usize, MpiOp>(&f) })
}

/// Whether this MPI is Open MPI (its progress engine's functions are loaded).
pub(crate) fn is_open_mpi() -> bool {
    opal_set_yield().is_some()
}

/// Open MPI's `bool opal_progress_set_yield_when_idle(bool)` (returns the setting before),
/// where this MPI is Open MPI.
fn opal_set_yield() -> Option<extern "C" fn(bool) -> bool> {
    static F: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let f = open_mpi_symbol(c"opal_progress_set_yield_when_idle", &F);
    // SAFETY: where present the symbol is Open MPI's function of that signature (a C bool is
    // Rust's bool), loaded with libmpi for the life of the process.
    (f != 0).then(|| unsafe { std::mem::transmute::<usize, extern "C" fn(bool) -> bool>(f) })
}

/// Makes Open MPI read its sockets at every progress call, as it does while it sets itself
/// up, instead of on one call in eight and at most every 10 ms (its event tick). Open MPI
/// stops doing so after `MPI_Init` "to get better latency when not using TCP"; tiers calls
/// this once the world spans hosts, where MPI's one-sided operations travel over TCP
/// (osc pt2pt) and every put, flush request and acknowledgement waits for the peer to read
/// its socket: without it a write across hosts whose target only spins on its memory took
/// 4-14 ms. Costs one `epoll_wait(0)` per progress call. Once per process; nothing where the
/// MPI is not Open MPI.
pub(crate) fn read_sockets_at_every_progress() {
    static F: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    static DONE: Once = Once::new();
    DONE.call_once(|| {
        let f = open_mpi_symbol(c"opal_progress_event_users_increment", &F);
        if f != 0 {
            // SAFETY: Open MPI's `void opal_progress_event_users_increment(void)`, loaded with
            // libmpi; it takes nothing and only raises a counter.
            let inc = unsafe { std::mem::transmute::<usize, extern "C" fn()>(f) };
            inc();
        }
    });
}

/// `MPI_Ibarrier`.
pub(crate) fn ibarrier(comm: Comm) -> Result<Req> {
    // SAFETY: valid communicator; r is a valid out-pointer. No buffers.
    start("MPI_Ibarrier", |r| unsafe { ffi::MPI_Ibarrier(comm.0, r) })
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
    // SAFETY: the caller keeps both buffers valid until completion.
    start("MPI_Iallreduce", |r| unsafe {
        ffi::MPI_Iallreduce(
            send as *const c_void,
            recv as *mut c_void,
            count as c_int,
            dt,
            op,
            comm.0,
            r,
        )
    })
}

/// `MPI_Iallgather` of `count` elements of `dt` per rank.
///
/// # Safety
/// `send` (`count` elements) and `recv` (`count` elements per rank of `comm`) must stay valid
/// (and `recv` unread) until completion.
unsafe fn iallgather(
    send: *const c_void,
    count: usize,
    dt: Datatype,
    recv: *mut c_void,
    comm: Comm,
) -> Result<Req> {
    // SAFETY: the caller keeps both buffers valid until completion.
    start("MPI_Iallgather", |r| unsafe {
        ffi::MPI_Iallgather(
            send,
            count as c_int,
            dt,
            recv,
            count as c_int,
            dt,
            comm.0,
            r,
        )
    })
}

/// `MPI_Iallgather` of one `u64` per rank.
///
/// # Safety
/// `send` and `recv` (one element per rank of `comm`) must stay valid until completion.
pub(crate) unsafe fn iallgather_u64(send: *const u64, recv: *mut u64, comm: Comm) -> Result<Req> {
    // SAFETY: the caller's contract.
    unsafe { iallgather(send.cast(), 1, dt_u64(), recv.cast(), comm) }
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
    // SAFETY: the caller's contract.
    unsafe { iallgather(send.cast(), len, dt_u8(), recv.cast(), comm) }
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
        // SAFETY: the caller keeps the memory valid for the window's life.
        call("MPI_Win_create", || unsafe {
            ffi::MPI_Win_create(
                base as *mut c_void,
                len as ffi::MPI_Aint,
                1,
                ffi::RSMPI_INFO_NULL,
                comm.0,
                &mut w,
            )
        })?;
        Win::lock_all(w)
    }

    /// `MPI_Win_allocate` of `len` zero bytes (displacement unit 1), then lock_all. Returns
    /// the window and its memory (valid until `free`).
    pub(crate) fn allocate(len: usize, comm: Comm) -> Result<(Win, *mut u8)> {
        // SAFETY: constant read.
        let mut w = unsafe { ffi::RSMPI_WIN_NULL };
        let mut base: *mut u8 = std::ptr::null_mut();
        // SAFETY: baseptr receives the address of MPI-owned memory of len bytes.
        call("MPI_Win_allocate", || unsafe {
            ffi::MPI_Win_allocate(
                len as ffi::MPI_Aint,
                1,
                ffi::RSMPI_INFO_NULL,
                comm.0,
                &mut base as *mut *mut u8 as *mut c_void,
                &mut w,
            )
        })?;
        // SAFETY: base points to len bytes owned by the window.
        unsafe { std::ptr::write_bytes(base, 0, len) };
        Ok((Win::lock_all(w)?, base))
    }

    /// Opens the window's passive-target epoch to every rank.
    fn lock_all(w: ffi::MPI_Win) -> Result<Win> {
        // SAFETY: w is a window just created by this rank.
        call("MPI_Win_lock_all", || unsafe {
            ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, w)
        })?;
        Ok(Win(w))
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
        // SAFETY: the caller's contract.
        call("MPI_Put", || unsafe {
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
        })
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
        // SAFETY: the caller's contract.
        start("MPI_Rput", |r| unsafe {
            ffi::MPI_Rput(
                src as *const c_void,
                len as c_int,
                dt,
                rank as c_int,
                disp as ffi::MPI_Aint,
                len as c_int,
                dt,
                self.0,
                r,
            )
        })
    }

    /// `MPI_Raccumulate` of one `u32` with `op` (MPI_REPLACE: an atomic store with respect
    /// to MPI's other accumulate operations on the word); the request completes when `src`
    /// may be reused.
    ///
    /// # Safety
    /// `src` must stay valid and unchanged until the request completes; `disp + 4` must lie
    /// inside the target's window.
    pub(crate) unsafe fn raccumulate_u32(
        &self,
        src: *const u32,
        rank: usize,
        disp: usize,
        op: MpiOp,
    ) -> Result<Req> {
        let dt = dt_u32();
        // SAFETY: the caller's contract.
        start("MPI_Raccumulate", |r| unsafe {
            ffi::MPI_Raccumulate(
                src as *const c_void,
                1,
                dt,
                rank as c_int,
                disp as ffi::MPI_Aint,
                1,
                dt,
                op,
                self.0,
                r,
            )
        })
    }

    /// `MPI_Fetch_and_op` of one `u32` with `op` (MPI_REPLACE: an atomic swap with respect to
    /// MPI's accumulate operations) plus flush: returns the old value.
    pub(crate) fn fetch_op_u32(&self, rank: usize, disp: usize, v: u32, op: MpiOp) -> Result<u32> {
        self.fetch_op(rank, disp, v, dt_u32(), op)
    }

    /// `MPI_Fetch_and_op` of one `T` (whose MPI type is `dt`) with `op`, plus flush: returns
    /// the old value.
    fn fetch_op<T: Copy + Default>(
        &self,
        rank: usize,
        disp: usize,
        v: T,
        dt: Datatype,
        op: MpiOp,
    ) -> Result<T> {
        let mut old = T::default();
        // SAFETY: origin/result are valid `T`s in this frame, completed by the flush below
        // before they go out of scope; `dt` is `T`'s type (the callers above); the caller
        // checked disp.
        call("MPI_Fetch_and_op", || unsafe {
            ffi::MPI_Fetch_and_op(
                &v as *const T as *const c_void,
                &mut old as *mut T as *mut c_void,
                dt,
                rank as c_int,
                disp as ffi::MPI_Aint,
                op,
                self.0,
            )
        })?;
        self.flush(rank)?;
        Ok(old)
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
        // SAFETY: the caller's contract.
        start("MPI_Rget", |r| unsafe {
            ffi::MPI_Rget(
                dst as *mut c_void,
                len as c_int,
                dt,
                rank as c_int,
                disp as ffi::MPI_Aint,
                len as c_int,
                dt,
                self.0,
                r,
            )
        })
    }

    /// `MPI_Win_flush(rank)`: every operation to `rank` is complete at the target. MPI-3 has
    /// no non-blocking flush; callers first drive their requests to local completion with
    /// timeouts, so this waits only for the remote acknowledgement.
    pub(crate) fn flush(&self, rank: usize) -> Result<()> {
        // SAFETY: a valid window in a lock_all epoch.
        call("MPI_Win_flush", || unsafe {
            ffi::MPI_Win_flush(rank as c_int, self.0)
        })
    }

    /// `MPI_Win_flush_local(rank)`: every operation to `rank` is complete at this rank. Where
    /// MPI implements one-sided operations with messages (osc pt2pt over TCP), small
    /// operations wait in a buffer until a flush; this sends them on their way, so that they
    /// arrive without the origin waiting for the target's acknowledgement.
    pub(crate) fn flush_local(&self, rank: usize) -> Result<()> {
        // SAFETY: a valid window in a lock_all epoch.
        call("MPI_Win_flush_local", || unsafe {
            ffi::MPI_Win_flush_local(rank as c_int, self.0)
        })
    }

    /// `MPI_Fetch_and_op(MPI_SUM)` on a `u64` plus flush: returns the old value.
    pub(crate) fn fetch_add(&self, rank: usize, disp: usize, v: u64) -> Result<u64> {
        self.fetch_op(rank, disp, v, dt_u64(), op(crate::Op::Sum))
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
        // SAFETY: as in fetch_add.
        call("MPI_Compare_and_swap", || unsafe {
            ffi::MPI_Compare_and_swap(
                &new as *const u64 as *const c_void,
                &expected as *const u64 as *const c_void,
                &mut old as *mut u64 as *mut c_void,
                dt,
                rank as c_int,
                disp as ffi::MPI_Aint,
                self.0,
            )
        })?;
        self.flush(rank)?;
        Ok(old)
    }

    /// Ends the epoch and frees the window (collective over the window's communicator).
    pub(crate) fn free(mut self) -> Result<()> {
        // SAFETY: a valid window in a lock_all epoch.
        call("MPI_Win_unlock_all", || unsafe {
            ffi::MPI_Win_unlock_all(self.0)
        })?;
        // SAFETY: a valid window, freed once (self is consumed).
        call("MPI_Win_free", || unsafe { ffi::MPI_Win_free(&mut self.0) })
    }
}

/// Blocking `MPI_Barrier` (benchmark peer only: the engine never blocks in MPI this way).
pub(crate) fn barrier_blocking(comm: Comm) {
    // SAFETY: a valid communicator.
    let _ = call("MPI_Barrier", || unsafe { ffi::MPI_Barrier(comm.0) });
}

/// Blocking `MPI_Allreduce` of `f64`s (benchmark peer and calibration).
pub(crate) fn allreduce_f64_blocking(x: &[f64], out: &mut [f64], op_: crate::Op, comm: Comm) {
    assert_eq!(x.len(), out.len());
    let (dt, o) = (dt_f64(), op(op_));
    // SAFETY: both slices hold x.len() doubles and outlive the blocking call.
    let _ = call("MPI_Allreduce", || unsafe {
        ffi::MPI_Allreduce(
            x.as_ptr() as *const c_void,
            out.as_mut_ptr() as *mut c_void,
            x.len() as c_int,
            dt,
            o,
            comm.0,
        )
    });
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
    let f = if sync {
        ffi::MPI_Issend
    } else {
        ffi::MPI_Isend
    };
    let name = if sync { "MPI_Issend" } else { "MPI_Isend" };
    // SAFETY: the caller keeps buf valid until completion.
    start(name, |r| unsafe {
        f(
            buf.as_ptr() as *const c_void,
            buf.len() as c_int,
            dt,
            dest as c_int,
            tag,
            comm.0,
            r,
        )
    })
}

/// `MPI_Irecv` of up to `len` bytes from `src` with `tag` (`None`: any tag).
///
/// # Safety
/// `buf..buf+len` must stay valid (and unread) until the request completes.
pub(crate) unsafe fn irecv(
    buf: *mut u8,
    len: usize,
    src: usize,
    tag: Option<i32>,
    comm: Comm,
) -> Result<Req> {
    let dt = dt_u8();
    // SAFETY: constant read.
    let tag = tag.unwrap_or(unsafe { ffi::RSMPI_ANY_TAG });
    // SAFETY: the caller keeps buf valid until completion.
    start("MPI_Irecv", |r| unsafe {
        ffi::MPI_Irecv(
            buf as *mut c_void,
            len as c_int,
            dt,
            src as c_int,
            tag,
            comm.0,
            r,
        )
    })
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

/// `MPI_Improbe` for `tag` from `src` (`None`: from anyone). Like [`progress`], it probes
/// with Open MPI's yield-when-idle off (while tiers' lock keeps other threads out of MPI): a
/// thread that polls every few microseconds (the GASPI library's watcher, a wait's loop)
/// must not yield the processor at each empty probe, or its next wake-ups wait for the
/// scheduler's tick (4 ms per write to a rank that spins on its memory across two hosts).
pub(crate) fn improbe(src: Option<usize>, tag: i32, comm: Comm) -> Result<Option<Matched>> {
    // SAFETY: constant read.
    let src = src.map_or(unsafe { ffi::RSMPI_ANY_SOURCE }, |s| s as c_int);
    let mut flag: c_int = 0;
    // SAFETY: constant read.
    let mut msg = unsafe { ffi::RSMPI_MESSAGE_NULL };
    // SAFETY: MPI_Status is a plain C struct; zero is a valid initial value.
    let mut st: ffi::MPI_Status = unsafe { std::mem::zeroed() };
    call("MPI_Improbe", || {
        // SAFETY: valid handles and out-pointers.
        without_yield(|| unsafe {
            ffi::MPI_Improbe(src, tag, comm.0, &mut flag, &mut msg, &mut st)
        })
    })?;
    if flag == 0 {
        return Ok(None);
    }
    let mut count: c_int = 0;
    let dt = dt_u8();
    // SAFETY: st was filled by the successful probe.
    call("MPI_Get_count", || unsafe {
        ffi::MPI_Get_count(&st, dt, &mut count)
    })?;
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
    pub(crate) fn recv(self, pace: Pace) -> Result<Vec<u8>> {
        // SAFETY: the buffer is kept until the request completes, just below.
        let (buf, mut r) = unsafe { self.start_recv()? };
        r.wait(Deadline::Never, pace)?;
        Ok(buf)
    }

    /// Starts receiving the matched message into a fresh buffer (`MPI_Imrecv`): the buffer
    /// and the request, which completes when the message is all there (for a large message,
    /// once the sender has sent the rest: it may need the sender's own MPI calls).
    ///
    /// # Safety
    ///
    /// The buffer (its heap memory: the `Vec` itself may move) must stay alive, unread and
    /// unresized until the request completes.
    pub(crate) unsafe fn start_recv(mut self) -> Result<(Vec<u8>, Req)> {
        let mut buf = vec![0u8; self.len];
        let dt = dt_u8();
        // SAFETY: buf holds len bytes and lives until the request completes (the caller's
        // promise).
        let r = start("MPI_Imrecv", |r| unsafe {
            ffi::MPI_Imrecv(
                buf.as_mut_ptr() as *mut c_void,
                self.len as c_int,
                dt,
                &mut self.msg,
                r,
            )
        })?;
        Ok((buf, r))
    }
}

/// Blocking `MPI_Waitall` (benchmark peer only): completes every request of `reqs`, holding
/// the MPI lock throughout, so no other thread of the process calls MPI meanwhile.
pub(crate) fn waitall_blocking(reqs: &mut [Req]) -> Result<()> {
    if reqs.is_empty() {
        return Ok(());
    }
    let mut handles: Vec<ffi::MPI_Request> = reqs.iter().map(|r| r.0).collect();
    // SAFETY: handles holds reqs.len() active (or null) requests; statuses are ignored.
    let r = call("MPI_Waitall", || unsafe {
        ffi::MPI_Waitall(
            handles.len() as c_int,
            handles.as_mut_ptr(),
            ffi::RSMPI_STATUSES_IGNORE,
        )
    });
    // MPI sets completed requests to MPI_REQUEST_NULL; keep our copies in step.
    for (r, h) in reqs.iter_mut().zip(handles) {
        r.0 = h;
    }
    r
}

/// Blocking `MPI_Send` of `buf` (benchmark peer only).
pub(crate) fn send_blocking(buf: &[u8], dest: usize, tag: i32, comm: Comm) -> Result<()> {
    let dt = dt_u8();
    // SAFETY: buf outlives the blocking call; the length fits c_int (checked by the caller).
    call("MPI_Send", || unsafe {
        ffi::MPI_Send(
            buf.as_ptr() as *const c_void,
            buf.len() as c_int,
            dt,
            dest as c_int,
            tag,
            comm.0,
        )
    })
}

/// Blocking `MPI_Recv` of up to `buf.len()` bytes from `src` with `tag` (benchmark peer only).
pub(crate) fn recv_blocking(buf: &mut [u8], src: usize, tag: i32, comm: Comm) -> Result<()> {
    let dt = dt_u8();
    // SAFETY: buf outlives the blocking call; the status is ignored.
    call("MPI_Recv", || unsafe {
        ffi::MPI_Recv(
            buf.as_mut_ptr() as *mut c_void,
            buf.len() as c_int,
            dt,
            src as c_int,
            tag,
            comm.0,
            ffi::RSMPI_STATUS_IGNORE,
        )
    })
}

/// Blocking `MPI_Alltoallv` of bytes (benchmark peer only): counts and displacements per rank
/// of `comm`, in bytes, already checked by the caller to fit `c_int` and the buffers.
pub(crate) fn alltoallv_bytes_blocking(
    send: &[u8],
    send_counts: &[c_int],
    send_displs: &[c_int],
    recv: &mut [u8],
    recv_counts: &[c_int],
    recv_displs: &[c_int],
    comm: Comm,
) -> Result<()> {
    let dt = dt_u8();
    // SAFETY: the caller checked that every count/displacement pair lies inside its buffer
    // and that the arrays have one entry per rank; all outlive the blocking call.
    call("MPI_Alltoallv", || unsafe {
        ffi::MPI_Alltoallv(
            send.as_ptr() as *const c_void,
            send_counts.as_ptr(),
            send_displs.as_ptr(),
            dt,
            recv.as_mut_ptr() as *mut c_void,
            recv_counts.as_ptr(),
            recv_displs.as_ptr(),
            dt,
            comm.0,
        )
    })
}

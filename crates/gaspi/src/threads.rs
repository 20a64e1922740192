//! The deprecated `GASPI_Threads.h`: threads of one rank that number themselves
//! (`gaspi_threads_register`), start more threads (`gaspi_threads_run`) and meet at a barrier
//! of their own (`gaspi_threads_sync`) or at one that also spans the ranks
//! (`gaspi_threads_sync_all`). Plain detached threads: the interface hands out no handles,
//! so a pool would add nothing the programs could use.
//!
//! The barrier counts arrivals of the `total` threads given to `gaspi_threads_init*` and
//! releases them by bumping a generation word (a sense-reversing central barrier); the last
//! thread to arrive runs the GASPI barrier for `sync_all`, so exactly one per rank does.

use crate::types::*;
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

/// Threads a program may declare (`gaspi_threads_init_user` clamps to it).
const THREADS_MAX: u32 = 1024;

/// The next thread id to hand out; -1 while the thread helpers are not initialized.
static NEXT: AtomicI32 = AtomicI32::new(-1);
/// Threads that take part in the barrier.
static TOTAL: AtomicI32 = AtomicI32::new(0);
/// Threads arrived at the current barrier.
static ARRIVED: AtomicI32 = AtomicI32::new(0);
/// Barriers completed; waiting threads watch it change.
static GENERATION: AtomicU32 = AtomicU32::new(0);
/// The return code of the last `sync_all`'s GASPI barrier, for every thread of the rank.
static SYNC_RET: AtomicI32 = AtomicI32::new(GASPI_SUCCESS);

thread_local! {
    static TID: Cell<i32> = const { Cell::new(-1) };
}

fn initialized() -> bool {
    NEXT.load(Ordering::Acquire) >= 0
}

/// Cores this process may run on (its affinity mask).
fn cores() -> Option<i32> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        Some(libc::CPU_COUNT(&set))
    }
}

/// Waits for the generation to move past `gen`: spins briefly, then yields (the threads may
/// outnumber the cores).
fn wait_past(gen: u32) {
    let mut backoff = tiers_node::Backoff::new().never_sleep();
    while GENERATION.load(Ordering::Acquire) == gen {
        backoff.snooze();
    }
}

/// One barrier over the rank's `TOTAL` threads; the last to arrive runs `last` first.
fn barrier(last: impl FnOnce()) {
    let total = TOTAL.load(Ordering::Acquire).max(1);
    let gen = GENERATION.load(Ordering::Acquire);
    if ARRIVED.fetch_add(1, Ordering::AcqRel) + 1 >= total {
        last();
        ARRIVED.store(0, Ordering::Relaxed);
        GENERATION.fetch_add(1, Ordering::AcqRel);
    } else {
        wait_past(gen);
    }
}

/// A C thread's function and argument, moved into the spawned thread.
struct Start(unsafe extern "C" fn(*mut c_void) -> *mut c_void, usize);

/// `gaspi_threads_get_tid`: this thread's id (-1 when it has not registered).
#[no_mangle]
pub unsafe extern "C" fn gaspi_threads_get_tid(tid: *mut i32) -> gaspi_return_t {
    if tid.is_null() {
        return GASPI_ERR_NULLPTR;
    }
    if !initialized() {
        return GASPI_ERROR;
    }
    // SAFETY: non-null, and valid for a write by the caller's contract.
    unsafe { tid.write(TID.with(Cell::get)) };
    GASPI_SUCCESS
}

/// `gaspi_threads_get_total`: the number of threads declared at init.
#[no_mangle]
pub unsafe extern "C" fn gaspi_threads_get_total(num: *mut i32) -> gaspi_return_t {
    if num.is_null() {
        return GASPI_ERR_NULLPTR;
    }
    if !initialized() {
        return GASPI_ERROR;
    }
    // SAFETY: as above.
    unsafe { num.write(TOTAL.load(Ordering::Acquire)) };
    GASPI_SUCCESS
}

/// `gaspi_threads_get_num_cores`: the cores in this process's affinity mask.
#[no_mangle]
pub unsafe extern "C" fn gaspi_threads_get_num_cores(n: *mut i32) -> gaspi_return_t {
    if n.is_null() {
        return GASPI_ERR_NULLPTR;
    }
    match cores() {
        // SAFETY: as above.
        Some(c) => unsafe {
            n.write(c);
            GASPI_SUCCESS
        },
        None => GASPI_ERROR,
    }
}

/// `gaspi_threads_init_user`: declares `num` threads (at most 1024) for the barrier.
#[no_mangle]
pub extern "C" fn gaspi_threads_init_user(num: u32) -> gaspi_return_t {
    if num == 0 {
        return GASPI_ERROR;
    }
    if NEXT
        .compare_exchange(-1, 0, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return GASPI_ERROR;
    }
    TOTAL.store(num.min(THREADS_MAX) as i32, Ordering::Release);
    ARRIVED.store(0, Ordering::Release);
    GASPI_SUCCESS
}

/// `gaspi_threads_init`: declares one thread per core of the affinity mask.
#[no_mangle]
pub unsafe extern "C" fn gaspi_threads_init(num: *mut i32) -> gaspi_return_t {
    if num.is_null() {
        return GASPI_ERR_NULLPTR;
    }
    let Some(c) = cores() else {
        return GASPI_ERROR;
    };
    let r = gaspi_threads_init_user(c.max(1) as u32);
    if r == GASPI_SUCCESS {
        // SAFETY: non-null, and valid for a write by the caller's contract.
        unsafe { num.write(TOTAL.load(Ordering::Acquire)) };
    }
    r
}

/// `gaspi_threads_term`: forgets the threads (running ones are the program's).
#[no_mangle]
pub extern "C" fn gaspi_threads_term() -> gaspi_return_t {
    NEXT.store(-1, Ordering::Release);
    TOTAL.store(0, Ordering::Release);
    GASPI_SUCCESS
}

/// `gaspi_threads_register`: gives the calling thread the next id.
#[no_mangle]
pub unsafe extern "C" fn gaspi_threads_register(tid: *mut i32) -> gaspi_return_t {
    if tid.is_null() {
        return GASPI_ERR_NULLPTR;
    }
    if !initialized() {
        return GASPI_ERROR;
    }
    let id = NEXT.fetch_add(1, Ordering::AcqRel);
    TID.with(|t| t.set(id));
    // SAFETY: non-null, and valid for a write by the caller's contract.
    unsafe { tid.write(id) };
    GASPI_SUCCESS
}

/// `gaspi_threads_run`: starts `f(arg)` on a new detached thread.
#[no_mangle]
pub extern "C" fn gaspi_threads_run(
    f: Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>,
    arg: *mut c_void,
) -> gaspi_return_t {
    let Some(f) = f else {
        return GASPI_ERR_NULLPTR;
    };
    if !initialized() {
        return GASPI_ERROR;
    }
    let start = Start(f, arg as usize);
    let spawned = std::thread::Builder::new()
        .name("gaspi-thread".into())
        .spawn(move || {
            let Start(f, arg) = start;
            // SAFETY: the program's thread function, called with its own argument as
            // pthread_create would.
            unsafe { f(arg as *mut c_void) };
        });
    match spawned {
        Ok(_) => GASPI_SUCCESS,
        Err(_) => GASPI_ERROR,
    }
}

/// `gaspi_threads_sync`: the barrier of the rank's declared threads.
#[no_mangle]
pub extern "C" fn gaspi_threads_sync() {
    barrier(|| {});
}

/// `gaspi_threads_sync_all`: the threads' barrier, with one GASPI barrier over group `g`
/// inside it; every thread returns that barrier's code.
#[no_mangle]
pub extern "C" fn gaspi_threads_sync_all(g: gaspi_group_t, timeout: gaspi_timeout_t) -> i32 {
    barrier(|| {
        // SAFETY: an exported GASPI call with plain arguments.
        let r = unsafe { crate::api::gaspi_barrier(g, timeout) };
        SYNC_RET.store(r, Ordering::Release);
    });
    SYNC_RET.load(Ordering::Acquire)
}

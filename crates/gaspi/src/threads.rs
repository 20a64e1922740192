//! The deprecated `GASPI_Threads.h`: threads of one rank that number themselves
//! (`gaspi_threads_register`), start more threads (`gaspi_threads_run`) and meet at a barrier
//! of their own (`gaspi_threads_sync`) or at one that also spans the ranks
//! (`gaspi_threads_sync_all`). Plain detached threads: the interface hands out no handles,
//! so a pool would add nothing the programs could use.
//!
//! The barrier counts arrivals of the `total` threads given to `gaspi_threads_init*` and
//! releases them by bumping a generation (a sense-reversing central barrier); the last
//! thread to arrive runs the GASPI barrier for `sync_all`, so exactly one per rank does. The
//! generation and the count share one word, so that a thread whose `sync_all` times out
//! before the others arrived takes its arrival back atomically, without racing the last
//! arrival: it either withdraws from this generation's count or finds the count complete.

use crate::types::*;
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Threads a program may declare (`gaspi_threads_init_user` clamps to it).
const THREADS_MAX: u32 = 1024;

/// The next thread id to hand out; -1 while the thread helpers are not initialized.
static NEXT: AtomicI32 = AtomicI32::new(-1);
/// Threads that take part in the barrier.
static TOTAL: AtomicI32 = AtomicI32::new(0);
/// The barrier's state: barriers completed (the generation, which waiting threads watch
/// change) in the high 32 bits, threads arrived at the current one in the low 32.
static STATE: AtomicU64 = AtomicU64::new(0);
/// The arrival count's bits of [`STATE`].
const COUNT: u64 = 0xffff_ffff;
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

/// One barrier over the rank's `TOTAL` threads; the last to arrive runs `last` first. The
/// others wait for it (spinning briefly, then yielding: the threads may outnumber the cores)
/// up to `timeout`: one whose time runs out before every thread arrived withdraws its
/// arrival and gets `false`. Once all have arrived the barrier is complete, and a waiter
/// waits for `last` (which has a timeout of its own) whatever its time.
fn barrier(timeout: gaspi_timeout_t, last: impl FnOnce()) -> bool {
    let total = TOTAL.load(Ordering::Acquire).max(1) as u64;
    let before = STATE.fetch_add(1, Ordering::AcqRel);
    let gen = before >> 32;
    if (before & COUNT) + 1 >= total {
        last();
        // The next generation, nobody arrived: threads of the next barrier arrive only
        // after they saw this store.
        STATE.store(gen.wrapping_add(1) << 32, Ordering::Release);
        return true;
    }
    let start = Instant::now();
    let limit = match timeout {
        GASPI_BLOCK => None,
        ms => Some(Duration::from_millis(ms)),
    };
    let mut backoff = tiers_node::Backoff::new().never_sleep();
    loop {
        let now = STATE.load(Ordering::Acquire);
        if now >> 32 != gen {
            return true;
        }
        let late = limit.is_some_and(|l| start.elapsed() >= l);
        if late && now & COUNT < total {
            // Withdraw, unless the count changed meanwhile (then look again).
            if STATE
                .compare_exchange(now, now - 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return false;
            }
            continue;
        }
        backoff.snooze();
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
    // No thread has arrived at the next barrier (the generation goes on).
    STATE.fetch_and(!COUNT, Ordering::AcqRel);
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
    barrier(GASPI_BLOCK, || {});
}

/// `gaspi_threads_sync_all`: the threads' barrier, with one GASPI barrier over group `g`
/// inside it; every thread returns that barrier's code. A thread that waits `timeout` for the
/// rank's other threads to arrive returns `GASPI_TIMEOUT` (and has not arrived: it may call
/// again).
#[no_mangle]
pub extern "C" fn gaspi_threads_sync_all(g: gaspi_group_t, timeout: gaspi_timeout_t) -> i32 {
    let all = barrier(timeout, || {
        // SAFETY: an exported GASPI call with plain arguments.
        let r = unsafe { crate::api::gaspi_barrier(g, timeout) };
        SYNC_RET.store(r, Ordering::Release);
    });
    if !all {
        return GASPI_TIMEOUT;
    }
    SYNC_RET.load(Ordering::Acquire)
}

//! How a process of the mpi engine ends: what its exit does to MPI and to the job.
//!
//! A rank's exit finalises MPI, and `MPI_Finalize` waits for every other process (Open MPI
//! ends it with a fence), so a rank that ends while its peers wait for it hangs the job. Here
//! the exit aborts the job instead where the rank failed (a panic through a world,
//! `World::fail`, a non-zero exit status), meets the other ranks in a barrier of their own
//! where it exits with a world still open, and shuts tiers' other threads out of MPI before
//! MPI is finalised, by the exit or by the program itself (see the engine's README, "Failure
//! detection and the state vector").

use super::raw::{self, Comm};
use crate::config;
use crate::error::Result;
use mpi::ffi;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Set when a world of this process was torn down by a panic: its peers may wait for this
/// rank without a deadline, and `MPI_Finalize` (which Open MPI ends with a fence over every
/// process of the job) would wait for them in turn, so the job would hang. The exit then
/// aborts the job instead.
static ABORT_AT_EXIT: AtomicBool = AtomicBool::new(false);

/// Makes this process's exit abort the whole job (`MPI_Abort`, error code 101, Rust's exit
/// code for a panic) instead of finalising MPI: called when a world is dropped by a panic.
/// The panic's message has been printed by then, and the unwinding goes on (files are
/// closed, temporary outputs removed) until the process exits.
pub(super) fn abort_at_exit() {
    ABORT_AT_EXIT.store(true, Ordering::Relaxed);
}

/// Worlds of the mpi engine alive in this process (made and not dropped).
static LIVE_WORLDS: AtomicUsize = AtomicUsize::new(0);
/// A communicator of every process for the exit's barrier alone (so that it can match no
/// collective of a world), made with the first world.
static EXIT_COMM: std::sync::OnceLock<Comm> = std::sync::OnceLock::new();

/// Makes the exit's communicator, with the first world (collective over `MPI_COMM_WORLD`,
/// as a world's creation is).
pub(super) fn prepare_exit() -> Result<()> {
    if EXIT_COMM.get().is_none() {
        let c = raw::dup(raw::world())?;
        let _ = EXIT_COMM.set(c);
    }
    Ok(())
}

/// Counts a world made.
pub(super) fn world_made() {
    LIVE_WORLDS.fetch_add(1, Ordering::SeqCst);
}

/// Counts a world dropped.
pub(super) fn world_dropped() {
    LIVE_WORLDS.fetch_sub(1, Ordering::SeqCst);
}

/// This process exits with a world still open: its peers may be waiting for it in that
/// world, while `MPI_Finalize` would wait for them, and the job would hang. Every rank that
/// exits this way meets the others in a barrier of their own: when all of them do within
/// `TIERS_MPI_EXIT_TIMEOUT_MS` (a program that never ends its world on any rank), MPI is
/// finalised as usual; otherwise the job is aborted, naming this rank.
fn exit_with_open_world() {
    let Some(&comm) = EXIT_COMM.get() else {
        return;
    };
    let ms = match config::env_str(config::env::MPI_EXIT_TIMEOUT_MS) {
        None => 60_000,
        Some(v) => v.parse::<u64>().unwrap_or_else(|_| {
            // At the exit there is no caller to return an error to: say so and go on.
            eprintln!(
                "tiers: {}={v} is not a number of milliseconds: waiting 60000 ms",
                config::env::MPI_EXIT_TIMEOUT_MS
            );
            60_000
        }),
    };
    let (rank, size) = raw::rank_size(comm);
    if size <= 1 {
        return;
    }
    let t0 = std::time::Instant::now();
    let met = raw::ibarrier(comm).and_then(|mut r| loop {
        if r.test()? {
            return Ok(true);
        }
        if t0.elapsed() >= Duration::from_millis(ms) {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(1));
    });
    if met != Ok(true) {
        eprintln!(
            "tiers: rank {rank} exited with its world still open (no gaspi_proc_term, or an exit before the world's end), and not every other rank did the same within {ms} ms ({}=...): aborting the job",
            config::env::MPI_EXIT_TIMEOUT_MS
        );
        // SAFETY: MPI is initialised and not finalised (the caller checked).
        unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, 1) };
    }
}

/// Called by MPI at the start of `MPI_Finalize` (the deletion of an attribute of
/// `MPI_COMM_SELF`, MPI's hook for libraries): a program that finalises MPI itself before it
/// ends its world (a GASPI program calling `MPI_Finalize` before `gaspi_proc_term`) must not
/// have tiers' threads call MPI afterwards, which Open MPI answers by aborting the job.
unsafe extern "C" fn closing_at_finalize(
    _comm: ffi::MPI_Comm,
    _keyval: c_int,
    _value: *mut c_void,
    _extra: *mut c_void,
) -> c_int {
    raw::close();
    0
}

/// The attribute is not copied to duplicates of `MPI_COMM_SELF`.
unsafe extern "C" fn not_copied(
    _comm: ffi::MPI_Comm,
    _keyval: c_int,
    _extra: *mut c_void,
    _in: *mut c_void,
    _out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: MPI passes a valid flag pointer.
    unsafe { *flag = 0 };
    0
}

/// Hooks [`closing_at_finalize`] to `MPI_Finalize` (called once, right after MPI's
/// initialisation, on the thread that initialised it).
pub(super) fn hook_finalize() {
    let mut key: c_int = 0;
    // SAFETY: both functions have MPI's attribute signatures; key is a valid out-pointer;
    // MPI_COMM_SELF is valid between init and finalize. Errors leave the hook out (the
    // program then must not finalise MPI before ending its world).
    unsafe {
        if ffi::MPI_Comm_create_keyval(
            Some(not_copied),
            Some(closing_at_finalize),
            &mut key,
            std::ptr::null_mut(),
        ) == 0
        {
            ffi::MPI_Comm_set_attr(ffi::RSMPI_COMM_SELF, key, std::ptr::null_mut());
        }
    }
}

/// The exit handler (with the exit status where the C library gives it).
#[cfg(target_env = "gnu")]
extern "C" fn finalize_at_exit_with(status: c_int, _arg: *mut c_void) {
    finalize_at_exit(status);
}

/// The exit handler where the C library does not give the exit status.
#[cfg(not(target_env = "gnu"))]
extern "C" fn finalize_at_exit_without() {
    finalize_at_exit(0);
}

/// Registers [`finalize_at_exit`] to run when the process exits.
pub(super) fn finalize_when_exiting() {
    // SAFETY: registering a handler that touches only statics and MPI.
    #[cfg(target_env = "gnu")]
    unsafe {
        on_exit(finalize_at_exit_with, std::ptr::null_mut());
    }
    // SAFETY: as above.
    #[cfg(not(target_env = "gnu"))]
    unsafe {
        atexit(finalize_at_exit_without);
    }
}

/// What the process's exit does to MPI. A rank exiting with a non-zero status aborts the job
/// (what mpirun does next anyway, by default, once the process is gone), because
/// `MPI_Finalize` would first wait for every other rank, which may be waiting for this one.
fn finalize_at_exit(status: c_int) {
    let mut fin: c_int = 0;
    // SAFETY: MPI_Finalized may be called at any time.
    unsafe { ffi::MPI_Finalized(&mut fin) };
    if fin != 0 {
        return;
    }
    if status != 0 && !ABORT_AT_EXIT.load(Ordering::Relaxed) {
        let (rank, size) = raw::rank_size(raw::world());
        if size > 1 {
            eprintln!(
                "tiers: rank {rank} exits with status {status}: aborting the job (finalising MPI would wait for ranks that may wait for this one)"
            );
            // SAFETY: MPI_Abort on the world's communicator, MPI initialised and not
            // finalised.
            unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, status) };
        }
    }
    if ABORT_AT_EXIT.load(Ordering::Relaxed) {
        eprintln!(
            "tiers: a world of this rank ended in failure (a panic, or World::fail): aborting the job (its peers may wait for this rank)"
        );
        // SAFETY: MPI_Abort on the world's communicator, MPI initialised and not finalised.
        unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, 101) };
    }
    if LIVE_WORLDS.load(Ordering::SeqCst) > 0 {
        exit_with_open_world();
    }
    // No other thread of tiers calls MPI from here on (and the hook in MPI_Finalize finds
    // it closed already).
    raw::finalize();
}

extern "C" {
    #[cfg(not(target_env = "gnu"))]
    fn atexit(cb: extern "C" fn()) -> c_int;
    /// glibc's `atexit` that is handed the exit status.
    #[cfg(target_env = "gnu")]
    fn on_exit(cb: extern "C" fn(c_int, *mut c_void), arg: *mut c_void) -> c_int;
}

//! The one place the node tier takes its atomics, cells and thread primitives from.
//!
//! Built normally it re-exports `std`; built with `RUSTFLAGS="--cfg loom"` it re-exports
//! [loom](https://docs.rs/loom)'s models instead, so the lock-free structures can be
//! model-checked without touching their code (the same arrangement crossbeam uses).
//!
//! Built with `RUSTFLAGS="--cfg tiers_valgrind"` (and without loom) it re-exports the wrappers
//! of the `valgrind` module below instead: the same atomics, plus the happens-before annotations that Helgrind
//! and DRD need to see a Release/Acquire hand-over as synchronisation (`.ci/valgrind`). Without
//! that cfg nothing here changes: the default build uses `std`'s types directly.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering,
};
#[cfg(all(not(loom), tiers_valgrind))]
pub(crate) use std::sync::atomic::Ordering;
#[cfg(all(not(loom), not(tiers_valgrind)))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering,
};
#[cfg(all(not(loom), tiers_valgrind))]
pub(crate) use valgrind::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicUsize};

#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Mutex};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex};

#[cfg(loom)]
pub(crate) use loom::thread_local;
#[cfg(not(loom))]
pub(crate) use std::thread_local;

/// A hint to the CPU that we are in a spin loop (PAUSE on x86). Under loom it yields to the
/// model's scheduler, which is what makes spin loops checkable.
#[inline(always)]
pub(crate) fn spin_hint() {
    #[cfg(not(loom))]
    std::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// Gives the processor away; under loom, lets the model run another thread.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(not(loom))]
    std::thread::yield_now();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// An `UnsafeCell` with loom's closure-based API, so code using it reads the same in both builds.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(v: T) -> Self {
        UnsafeCell(core::cell::UnsafeCell::new(v))
    }
    pub(crate) fn into_inner(self) -> T {
        self.0.into_inner()
    }
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// Atomics that tell Helgrind and DRD about the happens-before edges they create.
///
/// The tools only know pthread primitives (and the futex-free parts of std built on them), so a
/// Release store read by an Acquire load looks like no synchronisation at all and every access
/// it protects is reported as a race. Each wrapper here issues, keyed on the atomic's address:
///
/// - `ANNOTATE_HAPPENS_BEFORE(addr)` (Helgrind's `_VG_USERREQ__HG_USERSO_SEND_PRE`, which DRD
///   reads as its own `VG_USERREQ__DRD_ANNOTATE_HAPPENS_BEFORE`: the same code) just before
///   every store or read-modify-write whose ordering is Release, AcqRel or SeqCst;
/// - `ANNOTATE_HAPPENS_AFTER(addr)` (`_VG_USERREQ__HG_USERSO_RECV_POST`, DRD's
///   `..._HAPPENS_AFTER`) just after every load or read-modify-write whose ordering is Acquire,
///   AcqRel or SeqCst (for a compare-exchange, the ordering of the outcome that happened).
///
/// A compare-exchange cannot know before it runs whether it will store, so it announces the
/// release whenever its success ordering releases; a failed one then adds an edge that did not
/// exist, which can only hide a race, never invent one.
///
/// Fences: a `fence(Release)` followed by a Relaxed store (or a Relaxed load followed by
/// `fence(Acquire)`) synchronises through whichever atomic carried the value, which the fence
/// does not name. Fences are therefore annotated on one global key: a releasing fence announces
/// before itself, an acquiring fence receives after itself, so every acquiring fence is ordered
/// after every releasing fence that ran before it. That over-approximates (it may hide a race
/// between two threads that both pass fences) but never reports a correct fence pairing as a
/// race. Today the only fences are the SeqCst ones in the Inbox wake-up protocol, which
/// order a store before a load and publish no data themselves.
///
/// Each operation also marks the atomic word itself as not to be checked by DRD
/// (`DRD_IGNORE_VAR`): its accesses are atomic, but DRD sees plain loads and stores there and
/// would report them against each other. The data the atomics protect is still checked. Helgrind
/// ignores that request (its own, `VALGRIND_HG_DISABLE_CHECKING`, is not issued), so under
/// Helgrind the atomic words themselves are still reported; `.ci/valgrind` runs DRD.
///
/// Futex waits and wakes need no annotation: every waiter re-checks its condition through an
/// annotated atomic after waking, and the waker's Release store comes before the wake, so the
/// edge is already there without the syscall. std's `Mutex` (futex-based on Linux, unknown to
/// the tools) needs none here either: what it guards in the pool (the panic slot, the region
/// lock) is also ordered by the pool's annotated hand-overs.
///
/// The requests are valgrind's x86_64 "magic sequence" (valgrind.h): four rotations of `rdi`
/// that add up to 128 bits (so `rdi` is unchanged) and `xchg rbx, rbx`; natively it does
/// nothing, under valgrind the tool acts on it. Other architectures do not build with the cfg.
#[cfg(all(not(loom), tiers_valgrind))]
#[allow(dead_code)] // mirrors std's API; not every method is used by every type
pub(crate) mod valgrind {
    use core::sync::atomic as std_atomic;
    use core::sync::atomic::Ordering;

    #[cfg(not(target_arch = "x86_64"))]
    compile_error!(
        "--cfg tiers_valgrind issues valgrind client requests with x86_64 inline asm only; \
         build without it on this architecture"
    );

    /// `VG_USERREQ_TOOL_BASE('H','G') + 256 + 33`: `_VG_USERREQ__HG_USERSO_SEND_PRE` in
    /// helgrind.h, `VG_USERREQ__DRD_ANNOTATE_HAPPENS_BEFORE` in drd.h.
    const HAPPENS_BEFORE: usize = 0x4847_0121;
    /// `VG_USERREQ_TOOL_BASE('H','G') + 256 + 34`: `_VG_USERREQ__HG_USERSO_RECV_POST`,
    /// `VG_USERREQ__DRD_ANNOTATE_HAPPENS_AFTER`.
    const HAPPENS_AFTER: usize = 0x4847_0122;

    /// `VG_USERREQ_TOOL_BASE('D','R') + 2`: `VG_USERREQ__DRD_START_SUPPRESSION` in drd.h, what
    /// `DRD_IGNORE_VAR` and `ANNOTATE_BENIGN_RACE_SIZED` issue.
    const DRD_IGNORE_RANGE: usize = 0x4452_0002;

    /// `VALGRIND_DO_CLIENT_REQUEST_STMT(request, arg1, arg2, 0, 0, 0)` for x86_64.
    #[inline(always)]
    fn client_request(request: usize, arg1: usize, arg2: usize) {
        let args: [usize; 6] = [request, arg1, arg2, 0, 0, 0];
        // SAFETY: the rotations leave rdi as it was, `xchg rbx, rbx` changes nothing, and rdx
        // (the request's result, 0 natively) is declared clobbered. The block reads `args`
        // through rax (hence no `nomem`) and touches no stack.
        unsafe {
            core::arch::asm!(
                "rol rdi, 3",
                "rol rdi, 13",
                "rol rdi, 61",
                "rol rdi, 51",
                "xchg rbx, rbx",
                in("rax") args.as_ptr(),
                inout("rdx") 0usize => _,
                options(nostack),
            );
        }
    }

    #[inline(always)]
    fn releases(order: Ordering) -> bool {
        matches!(
            order,
            Ordering::Release | Ordering::AcqRel | Ordering::SeqCst
        )
    }

    #[inline(always)]
    fn acquires(order: Ordering) -> bool {
        matches!(
            order,
            Ordering::Acquire | Ordering::AcqRel | Ordering::SeqCst
        )
    }

    #[inline(always)]
    fn before(key: usize, order: Ordering) {
        if releases(order) {
            client_request(HAPPENS_BEFORE, key, 0);
        }
    }

    #[inline(always)]
    fn after(key: usize, order: Ordering) {
        if acquires(order) {
            client_request(HAPPENS_AFTER, key, 0);
        }
    }

    /// The key every fence is annotated on (see the module's documentation).
    static FENCE_KEY: u8 = 0;

    /// `std::sync::atomic::fence`, annotated on one global key.
    #[inline]
    pub fn fence(order: Ordering) {
        let key = &FENCE_KEY as *const u8 as usize;
        before(key, order);
        std_atomic::fence(order);
        after(key, order);
    }

    macro_rules! common {
        ($inner:ty, $value:ty) => {
            #[inline]
            pub fn into_inner(self) -> $value {
                self.0.into_inner()
            }
            #[inline]
            pub fn get_mut(&mut self) -> &mut $value {
                self.0.get_mut()
            }
            #[inline]
            pub fn as_ptr(&self) -> *mut $value {
                self.0.as_ptr()
            }
            /// The annotations' key: the atomic's address. Also tells DRD not to check the
            /// atomic word itself, whose accesses are atomic by construction (DRD sees plain
            /// loads and stores there and would report them against each other).
            #[inline(always)]
            fn key(&self) -> usize {
                let key = &self.0 as *const $inner as usize;
                client_request(DRD_IGNORE_RANGE, key, core::mem::size_of::<$inner>());
                key
            }
            #[inline]
            pub fn load(&self, order: Ordering) -> $value {
                let key = self.key();
                let v = self.0.load(order);
                after(key, order);
                v
            }
            #[inline]
            pub fn store(&self, value: $value, order: Ordering) {
                let key = self.key();
                before(key, order);
                self.0.store(value, order);
            }
            #[inline]
            pub fn swap(&self, value: $value, order: Ordering) -> $value {
                let key = self.key();
                before(key, order);
                let v = self.0.swap(value, order);
                after(key, order);
                v
            }
            #[inline]
            pub fn compare_exchange(
                &self,
                current: $value,
                new: $value,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$value, $value> {
                let key = self.key();
                before(key, success);
                let r = self.0.compare_exchange(current, new, success, failure);
                after(key, if r.is_ok() { success } else { failure });
                r
            }
            #[inline]
            pub fn compare_exchange_weak(
                &self,
                current: $value,
                new: $value,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$value, $value> {
                let key = self.key();
                before(key, success);
                let r = self.0.compare_exchange_weak(current, new, success, failure);
                after(key, if r.is_ok() { success } else { failure });
                r
            }
        };
    }

    macro_rules! rmw {
        ($value:ty, $($name:ident),*) => {
            $(
                #[inline]
                pub fn $name(&self, value: $value, order: Ordering) -> $value {
                    let key = self.key();
                    before(key, order);
                    let v = self.0.$name(value, order);
                    after(key, order);
                    v
                }
            )*
        };
    }

    macro_rules! integer {
        ($name:ident, $value:ty) => {
            #[doc = concat!("`std::sync::atomic::", stringify!($name), "` with annotations.")]
            #[derive(Debug, Default)]
            #[repr(transparent)]
            pub struct $name(std_atomic::$name);

            impl $name {
                #[inline]
                pub const fn new(value: $value) -> Self {
                    $name(std_atomic::$name::new(value))
                }
                common!(std_atomic::$name, $value);
                rmw!(
                    $value, fetch_add, fetch_sub, fetch_and, fetch_or, fetch_xor, fetch_max,
                    fetch_min
                );
            }
        };
    }

    integer!(AtomicU32, u32);
    integer!(AtomicUsize, usize);

    /// `std::sync::atomic::AtomicBool` with annotations.
    #[derive(Debug, Default)]
    #[repr(transparent)]
    pub struct AtomicBool(std_atomic::AtomicBool);

    impl AtomicBool {
        #[inline]
        pub const fn new(value: bool) -> Self {
            AtomicBool(std_atomic::AtomicBool::new(value))
        }
        common!(std_atomic::AtomicBool, bool);
        rmw!(bool, fetch_and, fetch_or, fetch_xor, fetch_nand);
    }

    /// `std::sync::atomic::AtomicPtr` with annotations.
    #[derive(Debug, Default)]
    #[repr(transparent)]
    pub struct AtomicPtr<T>(std_atomic::AtomicPtr<T>);

    impl<T> AtomicPtr<T> {
        #[inline]
        pub const fn new(value: *mut T) -> Self {
            AtomicPtr(std_atomic::AtomicPtr::new(value))
        }
        common!(std_atomic::AtomicPtr<T>, *mut T);
    }
}

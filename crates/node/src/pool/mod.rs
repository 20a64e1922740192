//! The thread pool: pinned workers that run SPMD regions and parallel loops.
//!
//! A region is OpenMP's `parallel`: the same closure runs on every worker with its index. The
//! calling thread takes part as worker 0 (so a region costs one broadcast and one gather, and a
//! pool of n threads keeps n cores busy, not n + 1); workers 1..n are threads of the pool,
//! pinned by the [`Placement`]. Between regions workers wait under the pool's [`WaitPolicy`].
//!
//! A panic in any worker is caught, the region still completes on the other workers, and the
//! first panic is resumed on the caller: the pool stays usable. The team barrier is broken open
//! when a worker panics, so that the others, which would wait there for ever for the worker that
//! will not come, leave the region at their next barrier (with a panic of their own, which the
//! caller does not see: it gets the first worker's).

mod schedule;

pub use schedule::{partition, partition_range, Schedule};

use crate::barrier::{BarrierKind, Breakable};
use crate::padded::CachePadded;
use crate::placement::{oversubscribed, Placement};
use crate::sync::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use crate::topology::Topology;
use crate::wait::{reached, Signal, WaitPolicy};
use core::cell::Cell;
use core::ops::Range;
use std::any::Any;
use std::fmt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

std::thread_local! {
    /// (pool id, worker index) of the calling thread while it works for a pool.
    static CURRENT: Cell<Option<(usize, usize)>> = const { Cell::new(None) };
    /// Every pool the calling thread is working for now, outermost first (a worker thread's
    /// own pool for its whole life, then the regions it started, nested): a region of any of
    /// them started here would wait for itself.
    static ACTIVE: core::cell::RefCell<Vec<usize>> = const { core::cell::RefCell::new(Vec::new()) };
}

/// Panics when the calling thread works for pool `id` now (`what` would wait for itself).
fn refuse_nested(id: usize, what: &str) {
    let nested = ACTIVE.with(|a| a.borrow().contains(&id));
    assert!(
        !nested,
        "tiers: {what} cannot be called from inside a region of the same pool"
    );
}

/// The panic of a worker that leaves a region at its barrier because another one panicked.
const ABANDONED: &str = "tiers: another worker of this pool region panicked; this one left the \
                         region at its barrier";

fn is_abandoned(p: &(dyn Any + Send)) -> bool {
    p.downcast_ref::<&str>().is_some_and(|s| *s == ABANDONED)
}

/// The bits of an epoch number (a `Signal` holds 31).
const EPOCH_MASK: u32 = (1 << 31) - 1;

/// Pool ids only tell pools apart, so this counter is never model-checked: it is a plain std
/// atomic in every build (loom's atomics cannot be built in a `static`).
static NEXT_POOL_ID: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);

/// The index of the calling thread in the pool it is working for, if any.
pub fn current_worker() -> Option<usize> {
    CURRENT.with(|c| c.get().map(|(_, i)| i))
}

/// Why a pool could not be built.
#[derive(Debug)]
pub enum PoolError {
    /// `threads(0)`.
    ZeroThreads,
    /// More threads than [`Pool::MAX_THREADS`] (the pool's barriers count rounds for at most
    /// that many parties).
    TooManyThreads(usize),
    /// The operating system refused a thread.
    Spawn(std::io::Error),
    /// A thread name prefix with a NUL byte (no thread can be given it).
    BadName(String),
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::ZeroThreads => {
                f.write_str("a pool needs at least one thread (threads(0) was asked for)")
            }
            PoolError::TooManyThreads(n) => write!(
                f,
                "a pool has at most {} threads ({n} were asked for)",
                Pool::MAX_THREADS
            ),
            PoolError::Spawn(e) => write!(f, "could not start a pool thread: {e}"),
            PoolError::BadName(n) => write!(f, "thread name prefix {n:?} has a NUL byte"),
        }
    }
}

impl std::error::Error for PoolError {}

/// Configures a [`Pool`].
#[derive(Clone, Debug)]
pub struct PoolBuilder {
    threads: Option<usize>,
    placement: Placement,
    wait: WaitPolicy,
    barrier: BarrierKind,
    pin_caller: bool,
    warn: bool,
    name: String,
}

impl Default for PoolBuilder {
    fn default() -> Self {
        PoolBuilder {
            threads: None,
            placement: Placement::Compact,
            wait: WaitPolicy::Auto,
            barrier: BarrierKind::Adaptive,
            pin_caller: false,
            warn: true,
            name: "tiers".into(),
        }
    }
}

impl PoolBuilder {
    /// Number of workers, the caller included (default: the processors in the affinity mask).
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = Some(n);
        self
    }
    /// Where workers run (default compact).
    pub fn placement(mut self, p: Placement) -> Self {
        self.placement = p;
        self
    }
    /// How idle workers and the region's gather wait (default adaptive).
    pub fn wait(mut self, w: WaitPolicy) -> Self {
        self.wait = w;
        self
    }
    /// Which barrier [`Worker::barrier`] uses (default adaptive).
    pub fn barrier(mut self, b: BarrierKind) -> Self {
        self.barrier = b;
        self
    }
    /// Also pin the calling thread to worker 0's processor at its first region (default: the
    /// caller's affinity is left alone).
    pub fn pin_caller(mut self, yes: bool) -> Self {
        self.pin_caller = yes;
        self
    }
    /// Print a warning when threads outnumber hardware threads (default yes).
    pub fn warn_oversubscription(mut self, yes: bool) -> Self {
        self.warn = yes;
        self
    }
    /// Thread name prefix (default `tiers`).
    pub fn name(mut self, n: impl Into<String>) -> Self {
        self.name = n.into();
        self
    }

    /// Starts the pool.
    pub fn build(self) -> Result<Pool, PoolError> {
        let topo = Topology::get();
        let n = match self.threads {
            Some(0) => return Err(PoolError::ZeroThreads),
            Some(n) if n > Pool::MAX_THREADS => return Err(PoolError::TooManyThreads(n)),
            Some(n) => n,
            None => topo.affinity.len().max(1),
        };
        if self.name.contains('\0') {
            return Err(PoolError::BadName(self.name));
        }
        if self.warn {
            if let Some(w) = oversubscribed(n, topo) {
                eprintln!("{w}");
            }
        }
        let cpus = self.placement.cpus(n, topo);
        let mut pool = Pool {
            inner: Arc::new(Inner::new(n, self.wait, self.barrier, &cpus)),
            handles: Vec::new(),
            cpus,
            region: Mutex::new(()),
            caller_pinned: AtomicBool::new(false),
            config: self,
        };
        pool.start()?;
        Ok(pool)
    }
}

type Job<'a> = dyn Fn(&Worker<'_>) + Sync + 'a;

struct Inner {
    id: usize,
    n: usize,
    wait: WaitPolicy,
    /// Region number; a bump with no job is a control event (stop, suspend, resume).
    epoch: CachePadded<Signal>,
    /// Points at a `&Job` on the region caller's stack, valid from the epoch bump until every
    /// worker reported done; null for control events.
    job: AtomicPtr<()>,
    /// `done[i]`: the last region worker i finished.
    done: Box<[CachePadded<Signal>]>,
    stop: AtomicBool,
    suspended: AtomicBool,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    barrier: Box<dyn Breakable>,
    /// A worker of the current region panicked and the barrier is broken open.
    abandoned: AtomicBool,
}

impl Inner {
    fn new(n: usize, wait: WaitPolicy, barrier: BarrierKind, cpus: &[usize]) -> Inner {
        Inner {
            id: NEXT_POOL_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            n,
            wait,
            epoch: CachePadded::new(Signal::new(0)),
            job: AtomicPtr::new(core::ptr::null_mut()),
            done: (0..n).map(|_| CachePadded::new(Signal::new(0))).collect(),
            stop: AtomicBool::new(false),
            suspended: AtomicBool::new(false),
            panic: Mutex::new(None),
            barrier: barrier.build_breakable(n, (!cpus.is_empty()).then_some(cpus)),
            abandoned: AtomicBool::new(false),
        }
    }

    /// Publishes a new epoch; waiters may be asleep whatever the policy (suspension), so this
    /// always uses the waking form.
    ///
    /// Region epochs are odd and control epochs even. A worker must not decide "region or
    /// control" from `job` alone: a region's caller stores `job` before bumping, so a worker
    /// that has just seen a control epoch could read the next region's job early, run it, and
    /// then run it again when it sees that region's own epoch.
    fn bump(&self, region: bool) -> u32 {
        // The next even number after the current epoch (Signal values are 31 bits), plus one
        // for a region.
        let e = ((self.epoch.get() | 1).wrapping_add(1) | region as u32) & EPOCH_MASK;
        self.epoch.set(e, WaitPolicy::Park);
        e
    }

    fn record_panic(&self, p: Box<dyn Any + Send>) {
        let mut slot = self.panic.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(p);
        }
    }

    /// Worker `index` panicked (its panic is recorded): the others must not wait for it at the
    /// team barrier. The flag is stored before the barrier's flags (whose stores release it),
    /// so every worker that gets through the barrier from here on sees it.
    fn abandon(&self, index: usize) {
        self.abandoned.store(true, Ordering::Release);
        self.barrier.break_open(index);
    }
}

/// What a region's closure gets: its worker index, the team size, and the team barrier.
pub struct Worker<'a> {
    index: usize,
    inner: &'a Inner,
}

impl Worker<'_> {
    /// This worker's index, `0..count()`; the caller is 0.
    #[inline(always)]
    pub fn index(&self) -> usize {
        self.index
    }
    /// Number of workers in the region.
    #[inline(always)]
    pub fn count(&self) -> usize {
        self.inner.n
    }
    /// Waits until every worker of the region reached this barrier. Returns true on one worker.
    ///
    /// # Panics
    ///
    /// When another worker of the region panicked: this worker leaves the region here instead
    /// of waiting for ever for the one that will not come (the region's caller gets the first
    /// panic).
    #[inline]
    pub fn barrier(&self) -> bool {
        let lead = self.inner.barrier.wait(self.index);
        if self.inner.abandoned.load(Ordering::Acquire) {
            // Not through the panic hook: the panic that matters was reported already.
            resume_unwind(Box::new(ABANDONED));
        }
        lead
    }
    /// This worker's static share of `range` (row-block partition).
    #[inline]
    pub fn static_range(&self, range: &Range<usize>) -> Range<usize> {
        partition_range(range, self.inner.n, self.index)
    }
}

/// A pool of pinned worker threads.
pub struct Pool {
    inner: Arc<Inner>,
    handles: Vec<JoinHandle<()>>,
    cpus: Vec<usize>,
    /// Serialises regions started from different threads.
    region: Mutex<()>,
    caller_pinned: AtomicBool,
    config: PoolBuilder,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("threads", &self.inner.n)
            .field("cpus", &self.cpus)
            .field("wait", &self.inner.wait)
            .field("running", &self.is_running())
            .finish()
    }
}

impl Pool {
    /// A builder with the defaults: all allowed processors, compact placement, adaptive waiting.
    pub fn builder() -> PoolBuilder {
        PoolBuilder::default()
    }

    /// The most threads a pool can have: its dissemination barrier's limit.
    pub const MAX_THREADS: usize = 1 << 16;

    /// A pool of `n` threads with the default settings.
    pub fn new(n: usize) -> Result<Pool, PoolError> {
        Pool::builder().threads(n).build()
    }

    /// Number of workers, the caller included.
    pub fn threads(&self) -> usize {
        self.inner.n
    }

    /// The processor of each worker (empty when placement is `None`).
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// The wait policy.
    pub fn wait_policy(&self) -> WaitPolicy {
        self.inner.wait
    }

    /// Whether the worker threads are running (not stopped).
    pub fn is_running(&self) -> bool {
        self.inner.n == 1 || !self.handles.is_empty()
    }

    /// Starts the worker threads (after [`Pool::stop`]; `build` already starts them).
    pub fn start(&mut self) -> Result<(), PoolError> {
        if !self.handles.is_empty() {
            return Ok(());
        }
        if Arc::strong_count(&self.inner) > 1 || self.inner.stop.load(Ordering::Acquire) {
            // Threads of an earlier run may still hold the old state; start from a fresh one.
            self.inner = Arc::new(Inner::new(
                self.inner.n,
                self.config.wait,
                self.config.barrier,
                &self.cpus,
            ));
        }
        let first = self.inner.epoch.get();
        for i in 1..self.inner.n {
            let inner = self.inner.clone();
            let cpu = self.cpus.get(i).copied();
            let h = std::thread::Builder::new()
                .name(format!("{}-{i}", self.config.name))
                .spawn(move || worker_main(inner, i, cpu, first))
                .map_err(PoolError::Spawn);
            match h {
                Ok(h) => self.handles.push(h),
                Err(e) => {
                    self.stop();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Stops and joins the worker threads. The pool can be started again with [`Pool::start`].
    pub fn stop(&mut self) {
        if self.handles.is_empty() {
            return;
        }
        self.inner.stop.store(true, Ordering::Release);
        self.inner.bump(false);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }

    /// Lets idle workers sleep in the kernel whatever the wait policy, so a pool that is not
    /// needed for a while burns no CPU. Regions still run (they wake the workers, who go back
    /// to sleep afterwards) until [`Pool::resume`].
    pub fn suspend(&self) {
        refuse_nested(self.inner.id, "Pool::suspend");
        let _serial = self.region.lock().unwrap_or_else(|e| e.into_inner());
        self.inner.suspended.store(true, Ordering::Release);
        self.inner.bump(false);
    }

    /// Ends a [`Pool::suspend`]: idle workers wait under the pool's policy again.
    pub fn resume(&self) {
        refuse_nested(self.inner.id, "Pool::resume");
        let _serial = self.region.lock().unwrap_or_else(|e| e.into_inner());
        self.inner.suspended.store(false, Ordering::Release);
        self.inner.bump(false);
    }

    /// Whether the pool is suspended.
    pub fn is_suspended(&self) -> bool {
        self.inner.suspended.load(Ordering::Acquire)
    }

    /// Runs `f` on every worker (SPMD, OpenMP's `parallel`), the caller as worker 0, and
    /// returns when all are done. A panic on any worker is re-raised here after the others
    /// finished. Regions started from several threads run one after another. Starting a region
    /// of a pool from inside one of its own regions panics, however deep the nesting through
    /// other pools' regions on this thread. (A region started by another thread waits for the
    /// current one: from a thread the current region itself waits for, it would wait for ever.)
    pub fn spmd<F>(&self, f: F)
    where
        F: Fn(&Worker<'_>) + Sync,
    {
        let inner = &*self.inner;
        refuse_nested(inner.id, "a region (spmd, for_each, reduce)");
        assert!(
            self.is_running(),
            "tiers: the pool is stopped; call start() first"
        );
        let _serial = self.region.lock().unwrap_or_else(|e| e.into_inner());
        if self.config.pin_caller && !self.caller_pinned.swap(true, Ordering::Relaxed) {
            if let Some(&c) = self.cpus.first() {
                let _ = crate::affinity::set(&[c]);
            }
        }
        let job: &Job<'_> = &f;
        // Workers read the pointer after the epoch bump (Release/Acquire); it points at `job`
        // on this stack frame, which does not return or unwind before every worker has
        // reported done for this epoch, after which no worker touches it again.
        inner
            .job
            .store(&job as *const &Job<'_> as *mut (), Ordering::Relaxed);
        let e = inner.bump(true);

        let prev = CURRENT.with(|c| c.replace(Some((inner.id, 0))));
        ACTIVE.with(|a| a.borrow_mut().push(inner.id));
        let mine = catch_unwind(AssertUnwindSafe(|| f(&Worker { index: 0, inner })));
        ACTIVE.with(|a| a.borrow_mut().pop());
        CURRENT.with(|c| c.set(prev));
        if mine.is_err() {
            inner.abandon(0);
        }
        for i in 1..inner.n {
            inner.done[i].wait_until(inner.wait, |v| reached(v, e));
        }
        inner.job.store(core::ptr::null_mut(), Ordering::Relaxed);
        if inner.abandoned.load(Ordering::Acquire) {
            // Every worker is out of the region, so none is inside the barrier.
            inner.barrier.mend();
            inner.abandoned.store(false, Ordering::Relaxed);
        }
        let theirs = inner.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
        match (mine, theirs) {
            // The caller left at a barrier because a worker panicked: that panic is the news.
            (Err(p), Some(t)) if is_abandoned(&*p) => resume_unwind(t),
            (Err(p), _) | (Ok(()), Some(p)) => resume_unwind(p),
            (Ok(()), None) => {}
        }
    }

    /// Calls `f(i)` for every `i` in `range`, shared among the workers by `schedule`.
    pub fn for_each<F>(&self, range: Range<usize>, schedule: Schedule, f: F)
    where
        F: Fn(usize) + Sync,
    {
        self.for_each_range(range, schedule, |r| r.for_each(&f));
    }

    /// Calls `f` with contiguous sub-ranges of `range` that together cover it exactly once:
    /// one per worker (static), blocks of b (blocked) or chunks (dynamic).
    pub fn for_each_range<F>(&self, range: Range<usize>, schedule: Schedule, f: F)
    where
        F: Fn(Range<usize>) + Sync,
    {
        if range.is_empty() {
            return;
        }
        // One thread too goes through `spmd`: the same nesting check, worker index, caller
        // pinning and serialisation with other callers as every other pool size.
        let next = CachePadded::new(AtomicUsize::new(0));
        self.spmd(|w| run_schedule(w.index(), w.count(), &range, schedule, &next, &f));
    }

    /// A parallel map-reduce: each worker folds `map` over its sub-ranges into its own partial
    /// (starting from `identity()`), then the partials are combined in worker order, so a static
    /// schedule gives the same result on every run with the same number of threads.
    pub fn reduce<T, I, M, C>(
        &self,
        range: Range<usize>,
        schedule: Schedule,
        identity: I,
        map: M,
        combine: C,
    ) -> T
    where
        T: Send,
        I: Fn() -> T + Sync,
        M: Fn(Range<usize>) -> T + Sync,
        C: Fn(T, T) -> T + Sync,
    {
        let partials: Vec<Mutex<Option<T>>> = (0..self.inner.n).map(|_| Mutex::new(None)).collect();
        let next = CachePadded::new(AtomicUsize::new(0));
        let body = |w: &Worker<'_>| {
            let acc = core::cell::RefCell::new(Some(identity()));
            if !range.is_empty() {
                run_schedule(
                    w.index(),
                    w.count(),
                    &range,
                    schedule,
                    &next,
                    &|r: Range<usize>| {
                        let part = map(r);
                        let mut a = acc.borrow_mut();
                        let prev = a.take().expect("accumulator present");
                        *a = Some(combine(prev, part));
                    },
                );
            }
            *partials[w.index()]
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = acc.into_inner();
        };
        self.spmd(body);
        partials
            .into_iter()
            .filter_map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
            .reduce(&combine)
            .unwrap_or_else(identity)
    }
}

/// The loop driver shared by `for_each_range` and `reduce`.
#[inline]
fn run_schedule(
    me: usize,
    n: usize,
    range: &Range<usize>,
    schedule: Schedule,
    next: &AtomicUsize,
    f: &(impl Fn(Range<usize>) + ?Sized),
) {
    match schedule {
        Schedule::Static => {
            let r = partition_range(range, n, me);
            if !r.is_empty() {
                f(r);
            }
        }
        // Saturating and checked arithmetic throughout: a block or chunk size near
        // `usize::MAX`, or a range near its top, must not wrap (an index run twice, or outside
        // the range, or a loop that never ends).
        Schedule::Blocked(b) => {
            let b = b.max(1);
            let Some(mut start) = me.checked_mul(b).and_then(|o| range.start.checked_add(o)) else {
                return;
            };
            let stride = n.saturating_mul(b);
            while start < range.end {
                f(start..start.saturating_add(b).min(range.end));
                start = start.saturating_add(stride);
            }
        }
        Schedule::Dynamic(c) => {
            let c = c.max(1);
            loop {
                // Chunk numbers, not indices: each worker takes at most one past the end, so
                // the count cannot wrap, whatever the chunk size.
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(start) = k.checked_mul(c).and_then(|o| range.start.checked_add(o)) else {
                    break;
                };
                if start >= range.end {
                    break;
                }
                f(start..start.saturating_add(c).min(range.end));
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop();
    }
}

fn worker_main(inner: Arc<Inner>, index: usize, cpu: Option<usize>, first_epoch: u32) {
    if let Some(c) = cpu {
        if let Err(e) = crate::affinity::set(&[c]) {
            eprintln!("tiers: warning: could not pin worker {index} to cpu {c}: {e}");
        }
    }
    CURRENT.with(|c| c.set(Some((inner.id, index))));
    ACTIVE.with(|a| a.borrow_mut().push(inner.id));
    let mut seen = first_epoch;
    loop {
        let policy = if inner.suspended.load(Ordering::Acquire) {
            WaitPolicy::Park
        } else {
            inner.wait
        };
        let e = inner.epoch.wait_until(policy, |v| v != seen);
        seen = e;
        if inner.stop.load(Ordering::Acquire) {
            return;
        }
        if e & 1 == 0 {
            continue; // a control event (stop was checked above)
        }
        // Epoch e is a region: its caller stored `job` before the bump we acquired, and keeps it
        // until we report e done, so this is that region's job.
        let job = inner.job.load(Ordering::Relaxed) as *const &Job<'_>;
        if job.is_null() {
            continue;
        }
        // SAFETY: the region's caller keeps the closure (and the reference to it) alive until
        // we set done[index] below; see `Pool::spmd`.
        let job: &Job<'_> = unsafe { *job };
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| {
            job(&Worker {
                index,
                inner: &inner,
            })
        })) {
            // Recorded before the barrier opens, so the first panic of the region is the one
            // that opened it, not a worker leaving through it.
            inner.record_panic(p);
            inner.abandon(index);
        }
        inner.done[index].set(e, inner.wait);
    }
}

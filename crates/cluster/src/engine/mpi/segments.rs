//! Segment creation and deletion between hosts: the host-local segment, the agreement on the
//! call, the allgather of the sizes and the MPI window over the host's memory (resumable after
//! a timeout), and the reverse; on memory MPI allocates, the adoption of that memory and the
//! lock-free lookup of the segments for atomics.

use super::{check, raw, MpiEngine, MpiSeg, Slot, SEG_HEADER};
use crate::collective::Collective;
use crate::engine::Engine;
use crate::error::{Error, Rank, Result};
use crate::sys::Mapping;
use crate::timeout::Timeout;
use raw::Win;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl MpiEngine {
    /// The segment holding the 8-byte atomic word at `seg[offset]` of `rank` (another host),
    /// after checking the word is in bounds and aligned.
    pub(super) fn atomic_seg(&self, seg: u32, rank: Rank, offset: usize) -> Result<SegRef<'_>> {
        let s = match self
            .ready
            .get(seg as usize)
            .map(|p| p.load(Ordering::Acquire))
        {
            // SAFETY: non-null pointers in `ready` are `Arc::as_ptr` of segments on memory MPI
            // allocated, kept (in `segs`, then in `retired`) until the engine is dropped, which
            // `&self` prevents.
            Some(p) if !p.is_null() => SegRef::Ready(unsafe { &*p }),
            _ => SegRef::Held(self.seg(seg, rank)?),
        };
        check(s.sizes[rank], rank, seg, offset, 8)?;
        if offset % 8 != 0 {
            return Err(Error::Misaligned { offset, align: 8 });
        }
        Ok(s)
    }

    /// Whether an atomic on `rank`'s words (with other hosts in the job) may be a processor
    /// atomic here: in the messages mode, where every atomic is one at its target, and on this
    /// rank's own words when MPI applies other ranks' atomics inside this rank's MPI calls
    /// (windows over memory of tiers' own). Not on memory MPI allocated: there Open MPI's
    /// components apply them from the origin (within a node, on the shared memory), with an
    /// atomicity only among MPI's own atomics (seen: two compare-and-swaps of the same value
    /// both winning).
    pub(super) fn own_atomics(&self, rank: Rank) -> bool {
        self.am.is_some() || (rank == self.rank && !self.allocate)
    }

    /// `segment_create` between hosts (resumable): the host-local creation, the agreement on
    /// the call (undoing the host's creation when some rank called something else), the
    /// allgather of the sizes, the window.
    pub(super) fn segment_create_hosts(
        &self,
        seg: u32,
        size: usize,
        timeout: Timeout,
    ) -> Result<()> {
        let deadline = timeout.deadline();
        let resuming = {
            let s = self.segs.read().unwrap_or_else(|e| e.into_inner());
            match s[seg as usize] {
                Slot::Ready(_) => return Err(Error::SegmentExists { seg }),
                Slot::Gathering { .. } => true,
                Slot::Empty => false,
            }
        };
        if !resuming {
            let call = Collective::SegmentCreate { seg }.word();
            let mut c = self.coll.lock().unwrap_or_else(|e| e.into_inner());
            let host = if c.agreeing() {
                None
            } else {
                // Resumable by itself after a timeout.
                match self.host_wait(deadline, |t| self.host.segment_create(seg, size, t)) {
                    r @ (Ok(()) | Err(Error::CollectiveMismatch(_))) => Some(r),
                    Err(e) => return Err(e),
                }
            };
            if let Err(e) = self.agree_locked(&mut c, call, host, deadline) {
                if matches!(e, Error::CollectiveMismatch(_)) && self.host.segment_local(seg).is_ok()
                {
                    // This host created it, another did not: the host's ranks (all of which
                    // get this error) delete it together.
                    self.host_wait(deadline, |t| self.host.segment_delete(seg, t))?;
                }
                return Err(e);
            }
        }
        let mut s = self.segs.write().unwrap_or_else(|e| e.into_inner());
        if matches!(s[seg as usize], Slot::Empty) {
            let send = Box::new(size as u64);
            let mut recv = vec![0u64; self.size];
            // SAFETY: both buffers move into the slot (heap memory, never moved or freed
            // before the request completes: the slot is only replaced after completion).
            let req = unsafe { raw::iallgather_u64(&*send, recv.as_mut_ptr(), self.comm)? };
            s[seg as usize] = Slot::Gathering {
                req,
                _send: send,
                sizes: recv,
            };
        }
        let Slot::Gathering { req, .. } = &mut s[seg as usize] else {
            return Err(Error::SegmentExists { seg });
        };
        self.am_until(timeout.deadline(), || req.test())?;
        let Slot::Gathering { sizes, .. } = std::mem::replace(&mut s[seg as usize], Slot::Empty)
        else {
            unreachable!("matched above")
        };
        let (data, len, keep) = self.host.segment_local(seg).map_err(|e| self.lift(e))?;
        let largest = sizes.iter().copied().max().unwrap_or(0) as usize;
        let (win, data, keep, pads) = match self.allocated_window(seg, len, largest)? {
            Some(w) => w,
            None => {
                // SAFETY: the host mapping is SEG_HEADER + len bytes from data - SEG_HEADER;
                // `keep` (stored with the window) keeps it mapped until the window is freed.
                // MPI has no non-blocking window creation; every rank reaches it right after
                // the allgather.
                let win =
                    unsafe { Win::create(data.sub(SEG_HEADER), SEG_HEADER + len, self.comm)? };
                (win, data, keep, Vec::new())
            }
        };
        let m = Arc::new(MpiSeg {
            data,
            size: len,
            _keep: keep,
            sizes: sizes.into_iter().map(|x| x as usize).collect(),
            win,
            pads,
        });
        if !m.pads.is_empty() {
            // On memory MPI allocated the segment stays until the engine ends: its atomics
            // find it without a lock.
            self.ready[seg as usize].store(Arc::as_ptr(&m) as *mut MpiSeg, Ordering::Release);
        }
        s[seg as usize] = Slot::Ready(m);
        Ok(())
    }

    pub(super) fn segment_delete_hosts(&self, seg: u32, timeout: Timeout) -> Result<()> {
        self.seg(seg, self.rank)?;
        {
            let mut c = self.coll.lock().unwrap_or_else(|e| e.into_inner());
            let call = Collective::SegmentDelete { seg }.word();
            self.barrier_locked(&mut c, call, timeout)?;
        }
        let slot = {
            let mut s = self.segs.write().unwrap_or_else(|e| e.into_inner());
            std::mem::replace(&mut s[seg as usize], Slot::Empty)
        };
        match slot {
            Slot::Ready(m) if !m.pads.is_empty() => {
                // The window, which owns the memory, goes with the engine: the host engine's
                // lock-free readers may still hold its old table, and this engine's (`ready`)
                // the segment (the shm engine keeps deleted segments' memory until its end
                // the same way).
                self.ready[seg as usize].store(std::ptr::null_mut(), Ordering::Release);
                self.retired
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(m);
            }
            Slot::Ready(mut m) => {
                // Wait for threads still inside a transfer on this segment.
                let mut backoff = tiers_node::Backoff::new().never_sleep();
                let m = loop {
                    match Arc::try_unwrap(m) {
                        Ok(x) => break x,
                        Err(a) => {
                            m = a;
                            backoff.snooze();
                        }
                    }
                };
                m.win.free()?;
            }
            _ => {}
        }
        self.host_wait(timeout.deadline(), |t| self.host.segment_delete(seg, t))
    }

    /// With every rank alone on its host, the segment's memory comes from `MPI_Win_allocate`
    /// (collective), which lets MPI take its fastest one-sided path: Open MPI's one-sided
    /// components put allocated windows of the ranks of a node in memory they share, and
    /// answer `MPI_Fetch_and_op` there with a processor atomic, where a window over memory of
    /// tiers' own costs rounds of locks, gets and puts (measured 115-537 against 519-1045 ns).
    /// The host engine moves the rank's part into it. MPI aligns a rank's part as it likes:
    /// the header starts at the first page boundary inside it, and every rank learns where
    /// the others' start (`MpiSeg::pads`). `None` when this is not the engine's way, or when
    /// some rank's part (`largest`, the same at every rank) is above [`ALLOCATE_MAX`]: MPI's
    /// memory must be zeroed by touching every page, where memory of tiers' own is zero when
    /// first touched (a GASPI library's heap is large and mostly never touched).
    #[allow(clippy::type_complexity)]
    fn allocated_window(
        &self,
        seg: u32,
        len: usize,
        largest: usize,
    ) -> Result<Option<(Win, *mut u8, crate::engine::KeepAlive, Vec<usize>)>> {
        if !self.allocate || largest > ALLOCATE_MAX {
            return Ok(None);
        }
        let total = SEG_HEADER + len;
        let (win, raw) = Win::allocate(total + SEG_ALIGN, self.comm)?;
        let pad = raw.align_offset(SEG_ALIGN);
        // SAFETY: pad < SEG_ALIGN, inside the window's total + SEG_ALIGN bytes.
        let base = unsafe { raw.add(pad) };
        // SAFETY: the window's zeroed memory from `base`, `total` bytes (SEG_ALIGN-aligned),
        // valid until the window is freed: with the engine (`retired`), after every user of
        // the mapping.
        let m = Arc::new(unsafe { Mapping::borrowed(base, total) });
        // Before the gather below: until this rank has sent its offset, no other can reach
        // its memory, so nothing they write (a notification in the header) is overwritten by
        // the header's move. (Moved after it, a fast rank's first notification was lost.)
        self.host
            .segment_adopt(seg, m.clone())
            .map_err(|e| self.lift(e))?;
        // Every rank is right behind the collective allocation: a short wait.
        let pads = raw::allgather_u64(pad as u64, self.comm, Timeout::Block.deadline())?;
        // SAFETY: SEG_HEADER < total.
        let data = unsafe { base.add(SEG_HEADER) };
        Ok(Some((
            win,
            data,
            m,
            pads.into_iter().map(|p| p as usize).collect(),
        )))
    }
}

/// A segment found for an atomic: through the lock-free table, or held.
pub(super) enum SegRef<'a> {
    Ready(&'a MpiSeg),
    Held(Arc<MpiSeg>),
}

impl std::ops::Deref for SegRef<'_> {
    type Target = MpiSeg;
    fn deref(&self) -> &MpiSeg {
        match self {
            SegRef::Ready(s) => s,
            SegRef::Held(s) => s,
        }
    }
}

/// The largest segment (per rank) whose memory MPI allocates: zeroing it costs about a
/// millisecond per 10 MiB.
const ALLOCATE_MAX: usize = 64 << 20;

/// Where the header of a segment in memory MPI allocated starts: a page boundary, so that the
/// data (a whole number of pages after it) is page-aligned, as in memory of tiers' own.
const SEG_ALIGN: usize = 4096;

/// Whether MPI may allocate segment memory (`MPI_Win_allocate`) without crashing: not where
/// Open MPI's shared-memory transport (`vader`, alias `sm`) moves data with its single-copy
/// mechanism, because there a 64-bit `MPI_Compare_and_swap` on an allocated window ends the
/// process with a segmentation fault inside the transport (Open MPI 4.0.4 to 4.1.x: its
/// issues 7967 and 11349; reproduced here with a C program on 4.1.4, which passes with
/// `--mca btl_vader_single_copy_mechanism none`, with `--mca btl self,tcp` and on created
/// windows). `mpirun --mca NAME VALUE` reaches the ranks as `OMPI_MCA_NAME`.
pub(super) fn allocate_is_safe() -> bool {
    let mca = |name: &str| std::env::var(format!("OMPI_MCA_{name}")).ok();
    !raw::is_open_mpi()
        || vader_out_of_the_way(
            mca("btl_vader_single_copy_mechanism").as_deref(),
            mca("btl").as_deref(),
        )
        || (launched_on_one_node()
            && shared_memory_wins(mca("osc").as_deref(), mca("osc_rdma_priority").as_deref()))
}

/// Open MPI's priority of its `sm` one-sided component for windows whose ranks share a node
/// (`rdma`'s default is 101, which is why `rdma` serves them).
const OSC_SM_PRIORITY: u32 = 100;

/// Open MPI's one-sided component for a job on one node: called before `MPI_Init`. Where
/// every rank of the job is on this node and the user has chosen neither the one-sided
/// components (`OMPI_MCA_osc`) nor `rdma`'s priority, this puts `rdma` just below `sm`
/// (`OMPI_MCA_osc_rdma_priority=99`). On one node `rdma` rides vader's single copy: an atomic
/// on a window MPI allocated takes 640-890 ns there (rounds of locks, gets and puts), and a
/// 64-bit compare-and-swap ends the process (see [`allocate_is_safe`]). `sm` serves such
/// windows from memory the node's ranks share, with processor atomics (50-90 ns on the
/// machine of `docs/results/mpi.md`), so segments may live in memory MPI allocates. Windows
/// on memory of the program's own (`sm` cannot take them) still go to `rdma`, before `pt2pt`;
/// jobs across nodes keep Open MPI's choice. Every MPI program of the process gets the same
/// setting: tiers' windows and the MPI rows of its benchmarks alike.
pub(super) fn prefer_shared_windows_on_one_node() {
    let set = |name: &str| std::env::var_os(name).is_some();
    if raw::is_open_mpi()
        && !set("OMPI_MCA_osc")
        && !set("OMPI_MCA_osc_rdma_priority")
        && launched_on_one_node()
    {
        // Before MPI_Init, from the thread that initialises MPI: Open MPI reads its
        // parameters from the environment then. No other thread of tiers reads the
        // environment while an engine starts.
        std::env::set_var(
            "OMPI_MCA_osc_rdma_priority",
            (OSC_SM_PRIORITY - 1).to_string(),
        );
    }
}

/// Whether Open MPI's launcher says every rank of the job is on this node
/// (`OMPI_COMM_WORLD_LOCAL_SIZE` = `OMPI_COMM_WORLD_SIZE`).
fn launched_on_one_node() -> bool {
    let var = |name: &str| std::env::var(name).ok();
    one_node(
        var("OMPI_COMM_WORLD_SIZE").as_deref(),
        var("OMPI_COMM_WORLD_LOCAL_SIZE").as_deref(),
    )
}

fn one_node(size: Option<&str>, local: Option<&str>) -> bool {
    let n = |v: Option<&str>| v.and_then(|v| v.trim().parse::<usize>().ok());
    matches!((n(size), n(local)), (Some(s), Some(l)) if s == l && s > 0)
}

/// Whether, on one node, Open MPI's settings `osc` (the one-sided components: a list to use,
/// or after `^` a list not to) and `osc_rdma_priority` keep `rdma` off windows MPI allocates:
/// it is not among the components, or it ranks below `sm`.
fn shared_memory_wins(osc: Option<&str>, rdma_priority: Option<&str>) -> bool {
    let has = |list: &str| list.split(',').any(|c| c.trim() == "rdma");
    let rdma_listed = match osc {
        None => true,
        Some(osc) => match osc.strip_prefix('^') {
            Some(excluded) => !has(excluded),
            None => has(osc),
        },
    };
    let below_sm = rdma_priority
        .and_then(|p| p.trim().parse::<u32>().ok())
        .is_some_and(|p| p < OSC_SM_PRIORITY);
    !rdma_listed || below_sm
}

/// Whether Open MPI's settings `btl_vader_single_copy_mechanism` and `btl` keep vader's
/// single copy away from one-sided operations: it is off, or vader (alias `sm`) is not among
/// the transports (`btl` lists the ones to use, or with a leading `^` the ones not to).
fn vader_out_of_the_way(single_copy: Option<&str>, btl: Option<&str>) -> bool {
    if single_copy == Some("none") {
        return true;
    }
    let Some(btl) = btl else {
        return false;
    };
    let shared = |list: &str| list.split(',').any(|b| matches!(b.trim(), "vader" | "sm"));
    match btl.strip_prefix('^') {
        Some(excluded) => shared(excluded),
        None => !shared(btl),
    }
}

#[cfg(test)]
mod tests {
    use super::vader_out_of_the_way as out;

    #[test]
    fn vader_settings_are_read_as_open_mpi_reads_them() {
        assert!(
            !out(None, None),
            "Open MPI's defaults: vader with its single copy"
        );
        assert!(out(Some("none"), None));
        assert!(!out(Some("cma"), None));
        assert!(out(None, Some("self,tcp")));
        assert!(out(None, Some("tcp, self")));
        assert!(!out(None, Some("self,vader,tcp")));
        assert!(!out(None, Some("sm,self")));
        assert!(out(None, Some("^vader")));
        assert!(out(None, Some("^openib,sm")));
        assert!(!out(None, Some("^openib")));
        assert!(!out(None, Some("smcuda,vader")));
    }

    #[test]
    fn the_one_sided_components_are_read_as_open_mpi_reads_them() {
        use super::shared_memory_wins as sm;
        assert!(!sm(None, None), "Open MPI's defaults: rdma first");
        assert!(sm(None, Some("99")));
        assert!(!sm(None, Some("101")));
        assert!(!sm(None, Some("high")));
        assert!(sm(Some("^rdma"), None));
        assert!(sm(Some("^ucx, rdma"), None));
        assert!(!sm(Some("^ucx"), None));
        assert!(!sm(Some("rdma,sm"), None));
        assert!(sm(Some("rdma,sm"), Some("10")));
        assert!(sm(Some("sm,pt2pt"), None));
    }

    #[test]
    fn one_node_only_when_the_launcher_says_every_rank_is_here() {
        use super::one_node;
        assert!(one_node(Some("2"), Some("2")));
        assert!(one_node(Some("1"), Some("1")));
        assert!(!one_node(Some("4"), Some("2")), "two nodes");
        assert!(!one_node(Some("2"), None), "no word from the launcher");
        assert!(!one_node(None, None));
        assert!(!one_node(Some("x"), Some("x")));
        assert!(!one_node(Some("0"), Some("0")));
    }
}

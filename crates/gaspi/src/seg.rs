//! GASPI segments in the heap: allocation, deletion, registration with peers, and binding
//! the program's own memory (`gaspi_segment_bind`/`use`).
//!
//! Every size and offset a program passes is checked with overflowing arithmetic in mind: a
//! size near `SIZE_MAX` rounded up to pages would wrap to a small number, and the segment would
//! then claim more bytes than the heap holds for it.

use crate::ctx::{err, tmo, Ctx, Seg, HEAP, PAGE, R};
use crate::types::*;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tiers_cluster::{Timeout, QUEUES};

/// How long `gaspi_segment_delete` waits for its peers to learn that the segment is gone.
const FORGET_WAIT: Duration = Duration::from_secs(1);

/// `x` rounded up to a multiple of the page, or `None` when that overflows (a program's size
/// near `SIZE_MAX`).
fn pages(x: usize) -> Option<usize> {
    x.checked_next_multiple_of(PAGE)
}

impl Ctx {
    /// `GASPI_ERR_INV_SEG` unless `id` is a segment id of the configuration that is free.
    fn check_free_id(&self, segs: &[Option<Seg>], id: gaspi_segment_id_t) -> R<()> {
        if id as u32 >= self.cfg.segment_max.min(SEGMENT_MAX) || segs[id as usize].is_some() {
            return Err(GASPI_ERR_INV_SEG);
        }
        Ok(())
    }

    /// Allocates segment `id` of `size` bytes locally: its notification words, and its data
    /// in the heap too, unless `at` says at which heap offset the data already lies (a bound
    /// part of another segment). A size the heap cannot hold, up to `SIZE_MAX`, is
    /// `GASPI_ERR_MEMALLOC`, as the allocation of any size beyond the heap's free space is
    /// (GPI-2's `posix_memalign` failing).
    pub fn alloc(&self, id: gaspi_segment_id_t, size: usize, at: Option<usize>) -> R<Seg> {
        if size == 0 {
            return Err(GASPI_ERR_INV_SEGSIZE);
        }
        let mut segs = self.segs.write().unwrap_or_else(|e| e.into_inner());
        self.check_free_id(&segs, id)?;
        if segs.iter().filter(|s| s.is_some()).count() >= self.cfg.segment_max as usize {
            return Err(GASPI_ERR_MANY_SEG);
        }
        // `notification_num` is at most NOTIFICATION_MAX (checked by `gaspi_config_set`).
        let nbytes = crate::ctx::align(self.cfg.notification_num as usize * 8, PAGE);
        let total = match at {
            Some(_) => nbytes,
            None => pages(size)
                .and_then(|d| d.checked_add(nbytes))
                .ok_or(GASPI_ERR_MEMALLOC)?,
        };
        let notif = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            let i = free
                .iter()
                .position(|&(_, l)| l >= total)
                .ok_or(GASPI_ERR_MEMALLOC)?;
            let (o, l) = free[i];
            if l == total {
                free.remove(i);
            } else {
                free[i] = (o + total, l - total);
            }
            o
        };
        let s = Seg {
            notif,
            data: at.unwrap_or(notif + nbytes),
            size,
            total,
            user: 0,
            alias: at.is_some(),
            resumable: false,
        };
        segs[id as usize] = Some(s);
        let e = self.dir(self.rank, id as usize);
        self.word(e).store(s.data as u64, Ordering::Relaxed);
        self.word(e + 8).store(size as u64, Ordering::Relaxed);
        self.word(e + 16).store(s.notif as u64, Ordering::Relaxed);
        self.word(e + 24).store(1, Ordering::Release);
        Ok(s)
    }

    /// Whether segment `id` (which exists) may be found made by a call resumed after a
    /// timeout (see [`Seg::resumable`]).
    pub fn set_resumable(&self, id: gaspi_segment_id_t, on: bool) {
        if let Some(s) = self.segs.write().unwrap_or_else(|e| e.into_inner())[id as usize].as_mut()
        {
            s.resumable = on;
        }
    }

    /// Deletes segment `id` locally; its memory reads as zero when reused. A bound segment's
    /// pages turn back into private memory of the program, holding what they held. The peers
    /// forget the segment (`Ctx::forget`): a segment allocated again on the same id is theirs
    /// to address only once it is registered with them again. A segment that another one is
    /// bound inside cannot be deleted before that one (`GASPI_ERROR`).
    pub fn delete(&self, id: gaspi_segment_id_t) -> R<()> {
        let s = {
            let mut segs = self.segs.write().unwrap_or_else(|e| e.into_inner());
            let s = segs[id as usize].ok_or(GASPI_ERR_INV_SEG)?;
            // A segment bound inside this one would be left addressing freed memory, and
            // then whatever the heap gives that memory to next: it goes first.
            let holds = |o: &Seg| o.alias && o.data >= s.data && o.data < s.data + s.size;
            if !s.alias && segs.iter().flatten().any(holds) {
                return Err(GASPI_ERROR);
            }
            if s.user != 0 && !s.alias {
                unbind(s.user, s.size)?;
            }
            segs[id as usize] = None;
            s
        };
        let e = self.dir(self.rank, id as usize);
        self.word(e + 24).store(0, Ordering::Release);
        self.forget(e);
        // SAFETY: the range is page-aligned inside the heap and belongs to no segment now.
        unsafe {
            let p = self.base.add(s.notif);
            if libc::madvise(p as *mut libc::c_void, s.total, libc::MADV_REMOVE) != 0 {
                std::ptr::write_bytes(p, 0, s.total);
            }
        }
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        free.push((s.notif, s.total));
        free.sort_unstable();
        let mut out: Vec<(usize, usize)> = Vec::with_capacity(free.len());
        for &(o, l) in free.iter() {
            match out.last_mut() {
                Some((po, pl)) if *po + *pl == o => *pl += l,
                _ => out.push((o, l)),
            }
        }
        *free = out;
        Ok(())
    }

    /// Clears the valid word of this rank's directory entry `e` (cleared here already) in
    /// every live peer's heap, so that a peer that registered the deleted segment gets
    /// `GASPI_ERR_INV_SEG` rather than writing into whatever the id or the memory holds next (a
    /// segment allocated again on the id, not registered with that peer). Best effort: a peer
    /// that is gone needs nothing, and a delete has no timeout to report one with, so the wait
    /// is bounded and its result ignored. A write a peer posted before it saw the entry
    /// cleared still lands, as it does under GPI-2: deleting a segment that peers still
    /// write to is the program's race.
    fn forget(&self, e: usize) {
        let Ok(q) = self.w.queue(QUEUES - 1) else {
            return;
        };
        let mut posted = false;
        for r in (0..self.n).filter(|&r| r != self.rank) {
            if !self.health(r).is_gone() {
                posted |= q.write(HEAP.at(e + 24), HEAP.on(r, e + 24), 8).is_ok();
            }
        }
        if posted {
            let _ = q.wait(Timeout::After(FORGET_WAIT));
        }
    }

    /// Binds the program's memory `[ptr, ptr + size)` as segment `id` (shm engine only, but
    /// for another segment's bytes, below): the segment is allocated in the heap over the
    /// pages that hold the range, their bytes are copied there, and the heap's shared-memory
    /// object is mapped over those pages, so that remote ranks reach the very bytes the
    /// program uses. `ptr` need not be page-aligned (memory from `malloc`): the bytes that
    /// share the first and last page keep their values, but other threads must not write them
    /// while the segment is bound or deleted, and two bound segments cannot share a page.
    ///
    /// A range inside another segment of this rank (allocated or bound) is that segment's
    /// bytes bound again, as GPI-2 allows (its `seg_subsegments` test binds two parts of a
    /// segment): the new segment aliases them ([`Seg::alias`]), with notification words of
    /// its own, and nothing is copied or mapped (so on every engine). A range that overlaps
    /// another segment only in part, or that is not wholly the program's private, readable
    /// and writable memory (an unmapped address, a size past the end of its mapping,
    /// read-only or shared memory) is `GASPI_ERR_MEMALLOC`, the code of every other range
    /// that cannot be bound: GPI-2 fails there when the device refuses to register the
    /// memory, while copying the range would fault, or, over another segment's pages, replace
    /// them with a private copy at the delete and lose what peers write there afterwards.
    pub fn bind(&self, id: gaspi_segment_id_t, ptr: usize, size: usize) -> R<()> {
        if ptr == 0 {
            return Err(GASPI_ERR_NULLPTR);
        }
        if size == 0 {
            return Err(GASPI_ERR_INV_SEGSIZE);
        }
        self.check_free_id(&self.segs.read().unwrap_or_else(|e| e.into_inner()), id)?;
        let end = ptr.checked_add(size).ok_or(GASPI_ERR_INV_SEGSIZE)?;
        let lo = ptr & !(PAGE - 1);
        let hi = pages(end).ok_or(GASPI_ERR_INV_SEGSIZE)?;
        let shift = ptr - lo;
        // Another segment's bytes need no mapping: bound again on any engine.
        if let Some(data) = self.inside_segment(ptr, end)? {
            let mut s = self.alloc(id, size, Some(data))?;
            s.user = ptr;
            self.segs.write().unwrap_or_else(|e| e.into_inner())[id as usize] = Some(s);
            return Ok(());
        }
        if self.w.engine_name() != "shm" {
            return Err(GASPI_ERR_MEMALLOC);
        }
        {
            let segs = self.segs.read().unwrap_or_else(|e| e.into_inner());
            // The heap holds every allocated segment (and every rank's heap is mapped here,
            // shared, which `private_rw` refuses too).
            let heap = self.base as usize;
            if heap < hi && lo < heap + self.heap_len {
                return Err(GASPI_ERR_MEMALLOC);
            }
            for b in segs.iter().flatten().filter(|b| b.user != 0) {
                let blo = b.user & !(PAGE - 1);
                let bhi = crate::ctx::align(b.user + b.size, PAGE);
                if blo < hi && lo < bhi {
                    return Err(GASPI_ERR_MEMALLOC);
                }
            }
        }
        if !private_rw(lo, hi) {
            return Err(GASPI_ERR_MEMALLOC);
        }
        let s = self.alloc(id, hi - lo, None)?;
        // The mapping of the heap's object at `s.data` (page-aligned, like `lo`).
        let mapped = (|| -> Option<()> {
            let job = std::env::var(tiers_cluster::env::JOB).ok()?;
            let name =
                std::ffi::CString::new(tiers_cluster::engine::shm::seg_name(&job, 0, self.rank))
                    .ok()?;
            // The heap's data follows the cluster tier's segment header in the object.
            let hdr = self.base as usize - self.mapping_start()?;
            // SAFETY: [lo, hi) is the program's private read-write memory (`private_rw`),
            // [ptr, ptr + size) rounded to pages; the heap range is this new segment's.
            // MAP_FIXED replaces exactly those pages with the object's, after their bytes were
            // copied there.
            unsafe {
                let fd = libc::shm_open(name.as_ptr(), libc::O_RDWR, 0);
                if fd < 0 {
                    return None;
                }
                std::ptr::copy_nonoverlapping(lo as *const u8, self.base.add(s.data), hi - lo);
                let p = libc::mmap(
                    lo as *mut libc::c_void,
                    hi - lo,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    fd,
                    (hdr + s.data) as libc::off_t,
                );
                libc::close(fd);
                (p as usize == lo).then_some(())
            }
        })();
        if mapped.is_none() {
            let _ = self.delete(id);
            return Err(GASPI_ERR_MEMALLOC);
        }
        let mut segs = self.segs.write().unwrap_or_else(|e| e.into_inner());
        let b = Seg {
            data: s.data + shift,
            size,
            user: ptr,
            ..s
        };
        segs[id as usize] = Some(b);
        let e = self.dir(self.rank, id as usize);
        self.word(e).store(b.data as u64, Ordering::Relaxed);
        self.word(e + 8).store(size as u64, Ordering::Release);
        Ok(())
    }

    /// The heap offset of `[ptr, end)` when it lies wholly inside the data of one of this
    /// rank's segments, as the program sees it (the heap for an allocated segment, the bound
    /// range for a bound one); `GASPI_ERR_MEMALLOC` when it overlaps one only in part.
    fn inside_segment(&self, ptr: usize, end: usize) -> R<Option<usize>> {
        let segs = self.segs.read().unwrap_or_else(|e| e.into_inner());
        let spans = || {
            segs.iter().flatten().map(|s| {
                let start = self.ptr(s) as usize;
                (s.data, start, start + s.size)
            })
        };
        if let Some((data, start, _)) = spans().find(|&(_, a, b)| a <= ptr && end <= b) {
            return Ok(Some(data + (ptr - start)));
        }
        if spans().any(|(_, a, b)| ptr < b && a < end) {
            return Err(GASPI_ERR_MEMALLOC);
        }
        Ok(None)
    }

    /// The start of the mapping that holds the heap (the heap follows the segment header).
    fn mapping_start(&self) -> Option<usize> {
        let b = self.base as usize;
        maps()?
            .into_iter()
            .find(|m| m.lo <= b && b < m.hi)
            .map(|m| m.lo)
    }

    /// Makes segment `id` known at `rank` (writes this rank's directory entry there).
    pub fn register(&self, id: gaspi_segment_id_t, rank: usize, timeout: u64) -> R<()> {
        self.seg(id)?;
        if rank == self.rank {
            return Ok(());
        }
        let e = self.dir(self.rank, id as usize);
        let q = self.w.queue(QUEUES - 1).map_err(err)?;
        q.write(HEAP.at(e), HEAP.on(rank, e), 32).map_err(err)?;
        q.wait(tmo(timeout)).map_err(err)
    }
}

/// One line of `/proc/self/maps`: `[lo, hi)` and whether it is readable, writable and private.
struct Map {
    lo: usize,
    hi: usize,
    private_rw: bool,
}

/// This process's mappings, in address order.
fn maps() -> Option<Vec<Map>> {
    let text = std::fs::read_to_string("/proc/self/maps").ok()?;
    let mut out = Vec::new();
    for l in text.lines() {
        let mut f = l.split_ascii_whitespace();
        let (lo, hi) = f.next()?.split_once('-')?;
        let perms = f.next()?.as_bytes();
        // The main thread's stack cannot be bound: see `on_this_stack`.
        let stack = l.ends_with("[stack]");
        out.push(Map {
            lo: usize::from_str_radix(lo, 16).ok()?,
            hi: usize::from_str_radix(hi, 16).ok()?,
            private_rw: perms.len() >= 4
                && perms[0] == b'r'
                && perms[1] == b'w'
                && perms[3] == b'p'
                && !stack,
        });
    }
    Some(out)
}

/// Whether every page of `[lo, hi)` is mapped private, readable and writable: what binding
/// may copy and then map the heap over (reading an unmapped page would fault, and mapping over
/// a shared one would cut it off from whatever else maps it).
fn private_rw(lo: usize, hi: usize) -> bool {
    if on_this_stack(lo, hi) {
        return false;
    }
    let Some(maps) = maps() else {
        return false;
    };
    let mut at = lo;
    for m in maps.iter().filter(|m| m.hi > lo && m.lo < hi) {
        if m.lo > at || !m.private_rw {
            return false;
        }
        at = m.hi;
        if at >= hi {
            return true;
        }
    }
    false
}

/// Whether `[lo, hi)` meets the calling thread's stack. Binding copies the pages and then
/// maps the heap over them; on the stack the frames of the bind call itself change between
/// the copy and the mapping, and the mapping would bring back their old bytes (return
/// addresses among them). A stack array is refused (`GASPI_ERR_MEMALLOC`), as is the main
/// thread's stack from any thread (`[stack]` in `maps`).
fn on_this_stack(lo: usize, hi: usize) -> bool {
    // SAFETY: an attribute object filled by pthread_getattr_np for this thread, read and
    // destroyed once.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            // Where the stack cannot be told, a range around this frame is refused.
            let here = &attr as *const _ as usize;
            return lo <= here && here < hi;
        }
        let mut addr = std::ptr::null_mut();
        let mut size = 0;
        let r = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        let base = addr as usize;
        r == 0 && base < hi && lo < base.saturating_add(size)
    }
}

/// Turns the pages of a bound range back into private memory with the same bytes: a fresh
/// private mapping takes a copy and is moved over the shared pages in one step, so the
/// program never sees them unmapped.
fn unbind(ptr: usize, size: usize) -> R<()> {
    let lo = ptr & !(PAGE - 1);
    // Checked when the range was bound.
    let len = crate::ctx::align(ptr + size, PAGE) - lo;
    // SAFETY: [lo, lo + len) is the bound range's pages, mapped since bind; the copy goes to
    // a new private mapping of the same length, which mremap then moves onto them.
    unsafe {
        let tmp = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if tmp == libc::MAP_FAILED {
            return Err(GASPI_ERR_MEMALLOC);
        }
        std::ptr::copy_nonoverlapping(lo as *const u8, tmp as *mut u8, len);
        let p = libc::mremap(
            tmp,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            lo as *mut libc::c_void,
        );
        if p as usize != lo {
            libc::munmap(tmp, len);
            return Err(GASPI_ERR_MEMALLOC);
        }
    }
    Ok(())
}

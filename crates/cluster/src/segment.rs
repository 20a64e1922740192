//! Segments: registered memory every rank can reach with one-sided operations.

use crate::collective::Pod;
use crate::engine::KeepAlive;
use crate::error::{Error, Rank, Result};
use crate::timeout::Timeout;
use crate::world::{SegId, World};
use std::marker::PhantomData;

/// This rank's part of a segment: a local view of its memory.
///
/// Other ranks may write into this memory at any time (that is the point), so the view hands
/// out copies (`get`, `read`) rather than references; the program orders its accesses with
/// notifications or barriers, as in GASPI. `unsafe` slice views are there for hot loops whose
/// program guarantees that nobody writes concurrently.
pub struct Segment<'w> {
    id: SegId,
    rank: Rank,
    ptr: *mut u8,
    len: usize,
    _keep: KeepAlive,
    _world: PhantomData<&'w World>,
}

// SAFETY: the view only does copies and atomics-free raw accesses that the program orders; the
// memory stays mapped while `_keep` lives.
unsafe impl Send for Segment<'_> {}
// SAFETY: as above.
unsafe impl Sync for Segment<'_> {}

impl World {
    /// Collective: creates and registers segment `id` with `size` bytes (zeroed) at every rank,
    /// waiting as long as it takes for all ranks. Sizes may differ between ranks.
    ///
    /// # Errors
    ///
    /// [`Error::SegmentIdTooLarge`] for an id beyond [`MAX_SEGMENTS`](crate::MAX_SEGMENTS),
    /// [`Error::SegmentExists`] when `id` is registered already, [`Error::Setup`] for a size too
    /// large to map, [`Error::Io`] when its memory cannot be mapped, [`Error::NoSuchSegment`] when
    /// a peer did not register it, [`Error::PeerFailed`] when a rank has failed, [`Error::Mpi`]
    /// when MPI fails, [`Error::CollectiveMismatch`] when other ranks called another collective
    /// (or this rank has another one pending after a timeout).
    pub fn segment(&self, id: SegId, size: usize) -> Result<Segment<'_>> {
        self.segment_timeout(id, size, Timeout::Block)
    }

    /// As [`World::segment`], within `timeout` (call again with the same arguments to resume).
    ///
    /// # Errors
    ///
    /// As [`World::segment`], and [`Error::Timeout`] when not every rank registered it in time
    /// (resumable).
    pub fn segment_timeout(&self, id: SegId, size: usize, timeout: Timeout) -> Result<Segment<'_>> {
        self.engine.segment_create(id.0, size, timeout)?;
        self.local(id)
    }

    /// Collective: deletes segment `id` at every rank.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchSegment`] when `id` is not registered, [`Error::Timeout`] when not every
    /// rank arrived in time (resumable), [`Error::PeerFailed`] when a rank has failed,
    /// [`Error::Mpi`] when MPI fails, [`Error::CollectiveMismatch`] as for [`World::segment`].
    pub fn segment_delete(&self, id: SegId, timeout: Timeout) -> Result<()> {
        self.engine.segment_delete(id.0, timeout)
    }

    /// A view of this rank's memory of the existing segment `id`.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchSegment`] when `id` is not registered.
    pub fn local(&self, id: SegId) -> Result<Segment<'_>> {
        let (ptr, len, keep) = self.engine.segment_local(id.0)?;
        Ok(Segment {
            id,
            rank: self.rank(),
            ptr,
            len,
            _keep: keep,
            _world: PhantomData,
        })
    }

    /// The registered size of segment `id` at `rank`.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchRank`] when `rank` is not in the world, [`Error::NoSuchSegment`] when `id`
    /// is not registered.
    pub fn segment_size(&self, id: SegId, rank: Rank) -> Result<usize> {
        self.check_rank(rank)?;
        self.engine.segment_size(id.0, rank)
    }
}

impl Segment<'_> {
    /// The segment id.
    pub fn id(&self) -> SegId {
        self.id
    }

    /// Bytes at this rank.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the segment has no bytes at this rank.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte (page-aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    fn range(&self, offset: usize, len: usize) -> Result<*mut u8> {
        match offset.checked_add(len) {
            // SAFETY: offset <= self.len, inside the mapping.
            Some(end) if end <= self.len => Ok(unsafe { self.ptr.add(offset) }),
            _ => Err(Error::OutOfBounds {
                rank: self.rank,
                seg: self.id.0,
                offset,
                len,
                size: self.len,
            }),
        }
    }

    /// Copies `buf.len()` bytes from `offset` into `buf`.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        let p = self.range(offset, buf.len())?;
        // SAFETY: in bounds; buf is a distinct Rust allocation.
        unsafe { crate::engine::copy::copy_bytes(p, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copies `data` to `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let p = self.range(offset, data.len())?;
        // SAFETY: in bounds; data is a distinct Rust allocation.
        unsafe { crate::engine::copy::copy_bytes(data.as_ptr(), p, data.len()) };
        Ok(())
    }

    /// Element `index` of the segment viewed as `[T]`.
    pub fn get<T: Pod>(&self, index: usize) -> Result<T> {
        let sz = std::mem::size_of::<T>();
        let p = self.range(index.saturating_mul(sz), sz)?;
        // SAFETY: in bounds and aligned (page-aligned base, index * size_of::<T>() offset);
        // volatile because other ranks write this memory behind the compiler's back.
        Ok(unsafe { std::ptr::read_volatile(p as *const T) })
    }

    /// Sets element `index` of the segment viewed as `[T]`.
    pub fn set<T: Pod>(&self, index: usize, value: T) -> Result<()> {
        let sz = std::mem::size_of::<T>();
        let p = self.range(index.saturating_mul(sz), sz)?;
        // SAFETY: as in get.
        unsafe { std::ptr::write_volatile(p as *mut T, value) };
        Ok(())
    }

    /// The segment as `&[T]` (whole elements only).
    ///
    /// # Safety
    /// No rank may write the segment while the slice lives.
    pub unsafe fn as_slice<T: Pod>(&self) -> &[T] {
        // SAFETY: aligned, in bounds, plain numbers; no concurrent writers (caller's contract).
        unsafe {
            std::slice::from_raw_parts(self.ptr as *const T, self.len / std::mem::size_of::<T>())
        }
    }

    /// The segment as `&mut [T]` (whole elements only).
    ///
    /// # Safety
    /// No rank may access the segment while the slice lives, and no other view of this
    /// segment may be used meanwhile.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice<T: Pod>(&self) -> &mut [T] {
        // SAFETY: as above, exclusive by the caller's contract.
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr as *mut T, self.len / std::mem::size_of::<T>())
        }
    }
}

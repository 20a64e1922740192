//! The exported C functions: every `gaspi_*` of `GASPI.h` and `GASPI_Ext.h`, each with its
//! `pgaspi_*` profiling name.
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments)]

use crate::coll::{combine, type_size};
use crate::ctx::{self, config, ctx, err, tmo, Coll, Ctx, CONFIG, R};
use crate::stats::{self, Counter, Stats};
use crate::types::*;
use std::ffi::{c_char, c_void};
use std::sync::atomic::Ordering;
use tiers_cluster::Op;

/// Every exported GASPI function: C callers promise what the GASPI specification asks of the
/// pointers they pass (valid for the call, sized as documented); each body checks null
/// pointers and sizes it can see before it dereferences anything.
macro_rules! api {
    ($(fn $name:ident / $p:ident ( $($a:ident : $t:ty),* $(,)? ) $body:block)*) => {$(
        #[doc = concat!("`", stringify!($name), "`, as the GASPI specification defines it (`include/GASPI.h`).")]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> gaspi_return_t {
            #[allow(unused_unsafe)]
            // SAFETY: the caller's contract on its pointer arguments (see above).
            let f = || -> R<()> { unsafe { $body } };
            match f() {
                Ok(()) => GASPI_SUCCESS,
                Err(e) => e,
            }
        }
        #[doc = concat!("`", stringify!($p), "`: the profiling name of `", stringify!($name), "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $p($($a: $t),*) -> gaspi_return_t {
            // SAFETY: the same contract: the profiling name forwards its arguments unchanged.
            unsafe { $name($($a),*) }
        }
    )*};
}

/// Writes `v` through the caller's output pointer.
///
/// # Safety
/// `p` is null or valid for a write of `T` (the GASPI caller's contract).
unsafe fn out<T>(p: *mut T, v: T) -> R<()> {
    if p.is_null() {
        return Err(GASPI_ERR_NULLPTR);
    }
    // SAFETY: non-null, and valid for a write by the function's contract.
    unsafe { p.write(v) };
    Ok(())
}

fn notif_id(c: &Ctx, id: u32) -> R<usize> {
    if id >= c.cfg.notification_num {
        return Err(GASPI_ERR_INV_NOTIF_ID);
    }
    Ok(id as usize)
}

/// A C array of `n` elements as a slice (null refused).
///
/// # Safety
///
/// A non-null `p` must point at `n` initialised elements that outlive `'a` (the GASPI
/// caller's list arguments, read during the call only).
unsafe fn list<'a, T>(p: *const T, n: u32) -> R<&'a [T]> {
    if p.is_null() {
        return Err(GASPI_ERR_NULLPTR);
    }
    // SAFETY: non-null, and the caller promises n initialised elements alive for 'a.
    Ok(unsafe { std::slice::from_raw_parts(p, n as usize) })
}

/// Posts the transfers of a list call on GASPI queue `q` (all or none reserved).
///
/// # Safety
///
/// Each non-null array argument must hold `num` elements (the GASPI list call's contract).
unsafe fn post_list(
    c: &Ctx,
    num: u32,
    lseg: *const u8,
    loff: *const u64,
    rank: u16,
    rseg: *const u8,
    roff: *const u64,
    size: *const u64,
    q: usize,
    extra: usize,
    write: bool,
) -> R<()> {
    if num == 0 || num > c.cfg.rw_list_elem_max {
        return Err(GASPI_ERR_INV_NUM);
    }
    // SAFETY: the caller's arrays hold `num` elements each (this function's contract).
    let (ls, lo, rs, ro, sz) = unsafe {
        (
            list(lseg, num)?,
            list(loff, num)?,
            list(rseg, num)?,
            list(roff, num)?,
            list(size, num)?,
        )
    };
    let mut ts = Vec::with_capacity(num as usize);
    for i in 0..num as usize {
        ts.push(c.transfer(ls[i], lo[i], rank, rs[i], ro[i], sz[i])?);
    }
    c.reserve(q, ts.len() + extra)?;
    let tq = c.tq(q);
    let r = if write {
        tq.write_list(&ts)
    } else {
        tq.read_list(&ts)
    };
    r.map_err(|e| {
        c.unreserve(q, ts.len() + extra);
        err(e)
    })?;
    let (ops, bytes) = if write {
        (Counter::Writes, Counter::BytesWritten)
    } else {
        (Counter::Reads, Counter::BytesRead)
    };
    c.stats.count(ops, rank as usize, ts.len() as u64);
    c.stats
        .count(bytes, rank as usize, ts.iter().map(|t| t.len as u64).sum());
    Ok(())
}

fn op_of(op: i32) -> R<Op> {
    match op {
        0 => Ok(Op::Min),
        1 => Ok(Op::Max),
        2 => Ok(Op::Sum),
        _ => Err(GASPI_ERR_INV_NUM),
    }
}

fn seg_bytes<'a>(c: &Ctx, s: &ctx::Seg, off: u64, size: u64) -> R<&'a mut [u8]> {
    if off.checked_add(size).is_none_or(|e| e > s.size as u64) {
        return Err(GASPI_ERR_INV_LOC_OFF);
    }
    // SAFETY: inside the segment's data in the heap.
    Ok(unsafe { std::slice::from_raw_parts_mut(c.base.add(s.data + off as usize), size as usize) })
}

api! {
    fn gaspi_config_get / pgaspi_config_get(config_out: *mut gaspi_config_t) {
        out(config_out, config())
    }
    fn gaspi_config_set / pgaspi_config_set(new: gaspi_config_t) {
        if ctx::initialized() {
            return Err(GASPI_ERROR);
        }
        if new.queue_num == 0 || new.queue_num > QUEUE_MAX
            || new.queue_size_max == 0
            || new.segment_max == 0 || new.segment_max > SEGMENT_MAX
            || new.group_max == 0 || new.group_max as usize > GROUP_MAX
            || new.notification_num > NOTIFICATION_MAX
            || new.allreduce_elem_max == 0
            || new.allreduce_buf_size as usize > REDUCE_SLOT
            || new.transfer_size_max == 0
            || !(0..=5).contains(&new.network)
            || new.rw_list_elem_max == 0
            || new.rw_list_elem_max > 255
            || new.passive_transfer_size_max == 0
            || new.build_infrastructure < 0 || new.build_infrastructure > 2
            || new.sn_port < 1024 || new.sn_port > 65535
        {
            return Err(GASPI_ERR_CONFIG);
        }
        let mut c = new;
        if new.network != config().network {
            c.user_net = 1;
        }
        *CONFIG.lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
        Ok(())
    }
    fn gaspi_version / pgaspi_version(v: *mut f32) {
        out(v, 1.6f32)
    }
    fn gaspi_proc_init / pgaspi_proc_init(timeout: u64) {
        ctx::init(timeout)
    }
    fn gaspi_proc_term / pgaspi_proc_term(_timeout: u64) {
        ctx::term()
    }
    fn gaspi_proc_rank / pgaspi_proc_rank(rank: *mut u16) {
        out(rank, ctx()?.rank as u16)
    }
    fn gaspi_proc_num / pgaspi_proc_num(n: *mut u16) {
        out(n, ctx()?.n as u16)
    }
    fn gaspi_proc_local_rank / pgaspi_proc_local_rank(r: *mut u16) {
        out(r, ctx()?.w.local_rank() as u16)
    }
    fn gaspi_proc_local_num / pgaspi_proc_local_num(r: *mut u16) {
        out(r, ctx()?.w.local_size() as u16)
    }
    fn gaspi_initialized / pgaspi_initialized(i: *mut u32) {
        out(i, ctx::initialized() as u32)
    }
    fn gaspi_proc_kill / pgaspi_proc_kill(rank: u16, timeout: u64) {
        let c = ctx()?;
        let r = c.check_rank(rank)?;
        if r == c.rank {
            return Err(GASPI_ERR_INV_RANK);
        }
        let start = std::time::Instant::now();
        c.w.atomic_compare_swap_timeout(ctx::HEAP, 0, r, 0, 1, ctx::tmo(timeout))
            .map_err(err)?;
        // The rank is gone when its process is: wait for that (or the timeout).
        c.poll(ctx::time_left(timeout, start), || Ok(c.health(r).is_gone()))
    }
    fn gaspi_proc_ping / pgaspi_proc_ping(rank: u16, _timeout: u64) {
        let c = ctx()?;
        let r = c.check_rank(rank)?;
        if c.health(r).is_gone() {
            return Err(GASPI_ERROR);
        }
        Ok(())
    }
    fn gaspi_connect / pgaspi_connect(rank: u16, _timeout: u64) {
        ctx()?.check_rank(rank).map(|_| ())
    }
    fn gaspi_disconnect / pgaspi_disconnect(rank: u16, _timeout: u64) {
        ctx()?.check_rank(rank).map(|_| ())
    }
    fn gaspi_state_vec_get / pgaspi_state_vec_get(v: *mut i32) {
        let c = ctx()?;
        if v.is_null() {
            return Err(GASPI_ERR_NULLPTR);
        }
        // A rank that is gone, killed or exited, is corrupt as much as one that failed: no
        // communication with it can succeed any more.
        for r in 0..c.n {
            v.add(r).write(c.health(r).is_gone() as i32);
        }
        Ok(())
    }

    // Groups
    fn gaspi_group_create / pgaspi_group_create(g: *mut u8) {
        let c = ctx()?;
        if g.is_null() {
            return Err(GASPI_ERR_NULLPTR);
        }
        let max = (c.cfg.group_max as usize).min(GROUP_MAX);
        for (i, slot) in c.groups.iter().enumerate().take(max) {
            let mut s = slot.lock().unwrap_or_else(|e| e.into_inner());
            if s.group.is_none() {
                s.group = Some(ctx::Group { members: Vec::new(), committed: false });
                g.write(i as u8);
                return Ok(());
            }
        }
        Err(GASPI_ERR_MANY_GRP)
    }
    fn gaspi_group_delete / pgaspi_group_delete(g: u8) {
        let c = ctx()?;
        if g == 0 {
            return Err(GASPI_ERR_INV_GROUP);
        }
        c.group(g)?.group = None;
        Ok(())
    }
    fn gaspi_group_add / pgaspi_group_add(g: u8, rank: u16) {
        let c = ctx()?;
        let r = c.check_rank(rank)?;
        let mut s = c.group(g)?;
        let grp = s.group.as_mut().ok_or(GASPI_ERR_INV_GROUP)?;
        if grp.committed || grp.members.contains(&r) {
            return Err(GASPI_ERR_INV_RANK);
        }
        grp.members.push(r);
        grp.members.sort_unstable();
        Ok(())
    }
    fn gaspi_group_commit / pgaspi_group_commit(g: u8, timeout: u64) {
        let c = ctx()?;
        if g == 0 {
            return Ok(());
        }
        c.group_barrier(g, timeout, true)
    }
    fn gaspi_group_num / pgaspi_group_num(n: *mut u32) {
        let c = ctx()?;
        let k = c.groups.iter().filter(|s| s.lock().unwrap_or_else(|e| e.into_inner()).group.is_some()).count();
        out(n, k as u32)
    }
    fn gaspi_group_size / pgaspi_group_size(g: u8, n: *mut u32) {
        let c = ctx()?;
        let s = c.group(g)?;
        out(n, s.group.as_ref().map_or(0, |x| x.members.len()) as u32)
    }
    fn gaspi_group_ranks / pgaspi_group_ranks(g: u8, ranks: *mut u16) {
        let c = ctx()?;
        let s = c.group(g)?;
        if ranks.is_null() {
            return Err(GASPI_ERR_NULLPTR);
        }
        for (i, &m) in s.group.as_ref().map_or(&[][..], |x| &x.members).iter().enumerate() {
            ranks.add(i).write(m as u16);
        }
        Ok(())
    }
    fn gaspi_group_max / pgaspi_group_max(n: *mut u32) {
        out(n, config().group_max)
    }

    // Segments
    fn gaspi_segment_alloc / pgaspi_segment_alloc(id: u8, size: u64, _policy: i32) {
        ctx()?.alloc(id, size as usize, None).map(|_| ())
    }
    fn gaspi_segment_delete / pgaspi_segment_delete(id: u8) {
        ctx()?.delete(id)
    }
    fn gaspi_segment_register / pgaspi_segment_register(id: u8, rank: u16, timeout: u64) {
        let c = ctx()?;
        let r = c.check_rank(rank)?;
        c.register(id, r, timeout)
    }
    fn gaspi_segment_create / pgaspi_segment_create(id: u8, size: u64, g: u8, timeout: u64, _policy: i32) {
        let c = ctx()?;
        let members = {
            let s = c.group(g)?;
            let grp = s.group.as_ref().ok_or(GASPI_ERR_INV_GROUP)?;
            if !grp.committed {
                return Err(GASPI_ERR_INV_GROUP);
            }
            grp.members.clone()
        };
        // A call resumed after a timeout finds its segment allocated already; any other
        // finds the id taken.
        match c.seg(id) {
            Ok(s) if s.resumable && s.size == size as usize && s.user == 0 => {}
            Ok(_) => return Err(GASPI_ERR_INV_SEG),
            Err(_) => {
                c.alloc(id, size as usize, None)?;
                c.set_resumable(id, true);
            }
        }
        for m in members {
            c.register(id, m, timeout)?;
        }
        gaspi_barrier_inner(c, g, timeout)?;
        c.set_resumable(id, false);
        Ok(())
    }
    fn gaspi_segment_bind / pgaspi_segment_bind(id: u8, ptr: *mut c_void, size: u64, _desc: i32) {
        ctx()?.bind(id, ptr as usize, usize::try_from(size).map_err(|_| GASPI_ERR_INV_SEGSIZE)?)
    }
    fn gaspi_segment_use / pgaspi_segment_use(id: u8, ptr: *mut c_void, size: u64, g: u8, timeout: u64, _desc: i32) {
        let c = ctx()?;
        let members = {
            let s = c.group(g)?;
            let grp = s.group.as_ref().ok_or(GASPI_ERR_INV_GROUP)?;
            if !grp.committed {
                return Err(GASPI_ERR_INV_GROUP);
            }
            grp.members.clone()
        };
        // A call resumed after a timeout finds its segment bound already; any other finds
        // the id taken.
        match c.seg(id) {
            Ok(s) if s.resumable && s.user != 0 && s.user == ptr as usize && s.size as u64 == size => {}
            Ok(_) => return Err(GASPI_ERR_INV_SEG),
            Err(_) => {
                c.bind(id, ptr as usize, usize::try_from(size).map_err(|_| GASPI_ERR_INV_SEGSIZE)?)?;
                c.set_resumable(id, true);
            }
        }
        for m in members {
            c.register(id, m, timeout)?;
        }
        gaspi_barrier_inner(c, g, timeout)?;
        c.set_resumable(id, false);
        Ok(())
    }
    fn gaspi_segment_num / pgaspi_segment_num(n: *mut u32) {
        let c = ctx()?;
        let k = c.segs.read().unwrap_or_else(|e| e.into_inner()).iter().filter(|s| s.is_some()).count();
        out(n, k as u32)
    }
    fn gaspi_segment_list / pgaspi_segment_list(num: u32, ids: *mut u8) {
        let c = ctx()?;
        if ids.is_null() {
            return Err(GASPI_ERR_NULLPTR);
        }
        let segs = c.segs.read().unwrap_or_else(|e| e.into_inner());
        let have: Vec<u8> = (0..segs.len()).filter(|&i| segs[i].is_some()).map(|i| i as u8).collect();
        if (num as usize) < have.len() {
            return Err(GASPI_ERR_INV_NUM);
        }
        for (i, s) in have.iter().enumerate() {
            ids.add(i).write(*s);
        }
        Ok(())
    }
    fn gaspi_segment_ptr / pgaspi_segment_ptr(id: u8, p: *mut *mut c_void) {
        let c = ctx()?;
        let s = c.seg(id)?;
        out(p, c.ptr(&s) as *mut c_void)
    }
    fn gaspi_segment_max / pgaspi_segment_max(n: *mut u32) {
        out(n, config().segment_max)
    }
    fn gaspi_segment_size / pgaspi_segment_size(id: u8, rank: u16, size: *mut u64) {
        let c = ctx()?;
        let r = c.check_rank(rank)?;
        out(size, c.remote(r, id)?.size as u64)
    }
    fn gaspi_segment_avail_local / pgaspi_segment_avail_local(id: *mut u8) {
        let c = ctx()?;
        let segs = c.segs.read().unwrap_or_else(|e| e.into_inner());
        let max = c.cfg.segment_max.min(SEGMENT_MAX) as usize;
        let i = (0..max).find(|&i| segs[i].is_none()).ok_or(GASPI_ERR_MANY_SEG)?;
        out(id, i as u8)
    }

    // One-sided communication
    fn gaspi_write / pgaspi_write(ls: u8, lo: u64, rank: u16, rs: u8, ro: u64, size: u64, q: u8, _timeout: u64) {
        let c = ctx()?;
        let q = c.queue(q)?;
        let t = c.transfer(ls, lo, rank, rs, ro, size)?;
        c.reserve(q, 1)?;
        c.tq(q).write(t.local, t.remote, t.len).map_err(|e| { c.unreserve(q, 1); err(e) })?;
        c.stats.count(Counter::Writes, rank as usize, 1);
        c.stats.count(Counter::BytesWritten, rank as usize, size);
        Ok(())
    }
    fn gaspi_read / pgaspi_read(ls: u8, lo: u64, rank: u16, rs: u8, ro: u64, size: u64, q: u8, _timeout: u64) {
        let c = ctx()?;
        let q = c.queue(q)?;
        let t = c.transfer(ls, lo, rank, rs, ro, size)?;
        c.reserve(q, 1)?;
        c.tq(q).read(t.local, t.remote, t.len).map_err(|e| { c.unreserve(q, 1); err(e) })?;
        c.stats.count(Counter::Reads, rank as usize, 1);
        c.stats.count(Counter::BytesRead, rank as usize, size);
        Ok(())
    }
    fn gaspi_write_list / pgaspi_write_list(num: u32, ls: *const u8, lo: *const u64, rank: u16, rs: *const u8, ro: *const u64, size: *const u64, q: u8, _timeout: u64) {
        let c = ctx()?;
        let q = c.queue(q)?;
        post_list(c, num, ls, lo, rank, rs, ro, size, q, 0, true)
    }
    fn gaspi_read_list / pgaspi_read_list(num: u32, ls: *const u8, lo: *const u64, rank: u16, rs: *const u8, ro: *const u64, size: *const u64, q: u8, _timeout: u64) {
        let c = ctx()?;
        let q = c.queue(q)?;
        post_list(c, num, ls, lo, rank, rs, ro, size, q, 0, false)
    }
    fn gaspi_wait / pgaspi_wait(q: u8, timeout: u64) {
        let c = ctx()?;
        let q = c.queue(q)?;
        c.stats.count(Counter::Waits, 0, 1);
        // GASPI's wait is local completion: on the mpi engine this leaves small writes to
        // other hosts in flight rather than waiting for each target's acknowledgement.
        let tq = c.tq(q);
        if let Some(e) = c.queue_error[q].lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(e);
        }
        c.wait_world(timeout, |t| tq.wait_local(t))?;
        c.posted[q].store(0, Ordering::Relaxed);
        c.read_notifications_done(q)
    }

    // Notifications
    fn gaspi_notify / pgaspi_notify(rs: u8, rank: u16, id: u32, value: u32, q: u8, _timeout: u64) {
        let c = ctx()?;
        let q = c.queue(q)?;
        let r = c.check_rank(rank)?;
        let id = notif_id(c, id)?;
        if value == 0 {
            return Err(GASPI_ERR_INV_NOTIF_VAL);
        }
        let rm = c.remote(r, rs)?;
        c.reserve(q, 1)?;
        c.set_notification(q % tiers_cluster::QUEUES, r, rm.notif + id * 8, value as u64)
            .inspect_err(|_| c.unreserve(q, 1))?;
        c.stats.count(Counter::Notifications, r, 1);
        Ok(())
    }
    fn gaspi_write_notify / pgaspi_write_notify(ls: u8, lo: u64, rank: u16, rs: u8, ro: u64, size: u64, id: u32, value: u32, q: u8, _timeout: u64) {
        let c = ctx()?;
        let q = c.queue(q)?;
        let id = notif_id(c, id)?;
        if value == 0 {
            return Err(GASPI_ERR_INV_NOTIF_VAL);
        }
        let t = c.transfer(ls, lo, rank, rs, ro, size)?;
        let rm = c.remote(t.remote.rank, rs)?;
        // One request in GASPI's count (its notification travels with it), so that a queue
        // takes `queue_size_max` of them.
        c.reserve(q, 1)?;
        c.tq(q).write(t.local, t.remote, t.len).map_err(|e| { c.unreserve(q, 1); err(e) })?;
        c.set_notification(q % tiers_cluster::QUEUES, t.remote.rank, rm.notif + id * 8, value as u64)?;
        c.stats.count(Counter::Writes, t.remote.rank, 1);
        c.stats.count(Counter::BytesWritten, t.remote.rank, size);
        c.stats.count(Counter::Notifications, t.remote.rank, 1);
        Ok(())
    }
    fn gaspi_write_list_notify / pgaspi_write_list_notify(num: u32, ls: *const u8, lo: *const u64, rank: u16, rs: *const u8, ro: *const u64, size: *const u64, ns: u8, id: u32, value: u32, q: u8, _timeout: u64) {
        let c = ctx()?;
        let q = c.queue(q)?;
        let r = c.check_rank(rank)?;
        let id = notif_id(c, id)?;
        if value == 0 {
            return Err(GASPI_ERR_INV_NOTIF_VAL);
        }
        let rm = c.remote(r, ns)?;
        post_list(c, num, ls, lo, rank, rs, ro, size, q, 1, true)?;
        c.set_notification(q % tiers_cluster::QUEUES, r, rm.notif + id * 8, value as u64)?;
        c.stats.count(Counter::Notifications, r, 1);
        Ok(())
    }
    fn gaspi_read_notify / pgaspi_read_notify(ls: u8, lo: u64, rank: u16, rs: u8, ro: u64, size: u64, id: u32, q: u8, timeout: u64) {
        let c = ctx()?;
        let q = c.queue(q)?;
        let id = notif_id(c, id)?;
        let t = c.transfer(ls, lo, rank, rs, ro, size)?;
        let l = c.seg(ls)?;
        c.reserve(q, 1)?;
        c.tq(q).read(t.local, t.remote, t.len).map_err(|e| { c.unreserve(q, 1); err(e) })?;
        c.stats.count(Counter::Reads, t.remote.rank, 1);
        c.stats.count(Counter::BytesRead, t.remote.rank, size);
        c.read_notification(q, l.notif + id * 8, timeout)
    }
    fn gaspi_read_list_notify / pgaspi_read_list_notify(num: u32, ls: *const u8, lo: *const u64, rank: u16, rs: *const u8, ro: *const u64, size: *const u64, ns: u8, id: u32, q: u8, timeout: u64) {
        let c = ctx()?;
        let q = c.queue(q)?;
        let id = notif_id(c, id)?;
        let l = c.seg(ns)?;
        post_list(c, num, ls, lo, rank, rs, ro, size, q, 1, false)?;
        c.read_notification(q, l.notif + id * 8, timeout)
    }
    fn gaspi_notify_waitsome / pgaspi_notify_waitsome(seg: u8, begin: u32, num: u32, first: *mut u32, timeout: u64) {
        let c = ctx::ctx_to_wait(timeout)?;
        let s = c.seg(seg)?;
        if first.is_null() {
            return Err(GASPI_ERR_NULLPTR);
        }
        if num == 0 {
            // Waiting for no notification returns at once.
            return Ok(());
        }
        if begin.checked_add(num).is_none_or(|e| e > c.cfg.notification_num) {
            return Err(GASPI_ERR_INV_NOTIF_ID);
        }
        let mut found = 0;
        c.poll(timeout, || {
            c.look_at_left_reads();
            for i in begin..begin + num {
                if c.word(s.notif + i as usize * 8).load(Ordering::Acquire) != 0 {
                    found = i;
                    return Ok(true);
                }
            }
            Ok(false)
        })?;
        first.write(found);
        Ok(())
    }
    fn gaspi_notify_reset / pgaspi_notify_reset(seg: u8, id: u32, old: *mut u32) {
        let c = ctx()?;
        let s = c.seg(seg)?;
        let id = notif_id(c, id)?;
        c.look_at_left_reads();
        let v = c.word(s.notif + id * 8).swap(0, Ordering::AcqRel) as u32;
        if !old.is_null() {
            old.write(v);
        }
        Ok(())
    }

    // Collectives
    fn gaspi_barrier / pgaspi_barrier(g: u8, timeout: u64) {
        let c = ctx()?;
        c.stats.count(Counter::Barriers, 0, 1);
        gaspi_barrier_inner(c, g, timeout)
    }
    fn gaspi_allreduce / pgaspi_allreduce(send: *const c_void, recv: *mut c_void, num: u32, op: i32, ty: i32, g: u8, timeout: u64) {
        let c = ctx()?;
        c.stats.count(Counter::Allreduces, 0, 1);
        if send.is_null() || recv.is_null() {
            return Err(GASPI_ERR_NULLPTR);
        }
        if num == 0 || num > c.cfg.allreduce_elem_max {
            return Err(GASPI_ERR_INV_NUM);
        }
        let es = type_size(ty).ok_or(GASPI_ERR_INV_NUM)?;
        let o = op_of(op)?;
        let bytes = num as usize * es;
        let input = std::slice::from_raw_parts(send as *const u8, bytes).to_vec();
        let output = std::slice::from_raw_parts_mut(recv as *mut u8, bytes);
        if g == 0 {
            let n = num as usize;
            return c.collective(0, Coll::Allreduce, timeout, |_, left| {
                let t = tmo(left);
                macro_rules! red {
                    ($t:ty) => {{
                        let i = std::slice::from_raw_parts(input.as_ptr() as *const $t, n);
                        let o2 = std::slice::from_raw_parts_mut(output.as_mut_ptr() as *mut $t, n);
                        c.w.allreduce(i, o2, o, t).map_err(err)
                    }};
                }
                match ty {
                    0 => red!(i32),
                    1 => red!(u32),
                    2 => red!(f32),
                    3 => red!(f64),
                    4 => red!(i64),
                    _ => red!(u64),
                }
            });
        }
        c.group_reduce(g, Coll::Allreduce, &input, output, es, timeout, |acc, x| {
            combine(ty, op, acc, x);
            Ok(())
        })
    }
    fn gaspi_allreduce_user / pgaspi_allreduce_user(send: *const c_void, recv: *mut c_void, num: u32, esize: u64, f: Option<ReduceFn>, state: *mut c_void, g: u8, timeout: u64) {
        let c = ctx()?;
        c.stats.count(Counter::Allreduces, 0, 1);
        let f = f.ok_or(GASPI_ERR_NULLPTR)?;
        if send.is_null() || recv.is_null() {
            return Err(GASPI_ERR_NULLPTR);
        }
        if num == 0 || num > c.cfg.allreduce_elem_max {
            return Err(GASPI_ERR_INV_NUM);
        }
        // More bytes than a contribution may hold is a size error, as GPI-2 has it; so are
        // elements of no bytes (the callback would get buffers that hold nothing).
        let bytes = (num as u64)
            .checked_mul(esize)
            .filter(|&b| b > 0 && b <= c.cfg.allreduce_buf_size)
            .ok_or(GASPI_ERR_INV_SIZE)? as usize;
        let input = std::slice::from_raw_parts(send as *const u8, bytes).to_vec();
        let output = std::slice::from_raw_parts_mut(recv as *mut u8, bytes);
        // At most allreduce_buf_size bytes: one round (the callback is told `num`).
        c.group_reduce(g, Coll::AllreduceUser, &input, output, bytes, timeout, |acc, x| {
            let mut res = vec![0u8; acc.len()];
            let r = f(acc.as_mut_ptr() as *mut c_void, x.as_ptr() as *mut c_void, res.as_mut_ptr() as *mut c_void, state, num, esize, timeout);
            if r != GASPI_SUCCESS {
                return Err(r);
            }
            acc.copy_from_slice(&res);
            Ok(())
        })
    }

    // Atomics
    fn gaspi_atomic_fetch_add / pgaspi_atomic_fetch_add(seg: u8, off: u64, rank: u16, add: u64, old: *mut u64, timeout: u64) {
        let c = ctx()?;
        let (r, at) = atomic_at(c, seg, off, rank)?;
        if old.is_null() {
            return Err(GASPI_ERR_NULLPTR);
        }
        let v = if r == c.rank {
            c.word(at).fetch_add(add, Ordering::AcqRel)
        } else {
            c.w.atomic_fetch_add_timeout(ctx::HEAP, at, r, add, ctx::tmo(timeout)).map_err(err)?
        };
        c.stats.count(Counter::Atomics, r, 1);
        old.write(v);
        Ok(())
    }
    fn gaspi_atomic_compare_swap / pgaspi_atomic_compare_swap(seg: u8, off: u64, rank: u16, cmp: u64, new: u64, old: *mut u64, timeout: u64) {
        let c = ctx()?;
        let (r, at) = atomic_at(c, seg, off, rank)?;
        if old.is_null() {
            return Err(GASPI_ERR_NULLPTR);
        }
        let v = if r == c.rank {
            match c.word(at).compare_exchange(cmp, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(v) | Err(v) => v,
            }
        } else {
            c.w.atomic_compare_swap_timeout(ctx::HEAP, at, r, cmp, new, ctx::tmo(timeout))
                .map_err(err)?
        };
        c.stats.count(Counter::Atomics, r, 1);
        old.write(v);
        Ok(())
    }

    // Passive communication
    fn gaspi_passive_send / pgaspi_passive_send(seg: u8, off: u64, rank: u16, size: u64, timeout: u64) {
        let c = ctx()?;
        let r = c.check_rank(rank)?;
        if size == 0 || size > c.passive_max() {
            return Err(GASPI_ERR_INV_COMMSIZE);
        }
        let s = c.seg(seg)?;
        let data = seg_bytes(c, &s, off, size)?;
        c.passive_send(r, data, timeout)?;
        c.stats.count(Counter::PassiveSends, r, 1);
        Ok(())
    }
    fn gaspi_passive_receive / pgaspi_passive_receive(seg: u8, off: u64, from: *mut u16, size: u64, timeout: u64) {
        let c = ctx::ctx_to_wait(timeout)?;
        if from.is_null() {
            return Err(GASPI_ERR_NULLPTR);
        }
        if size == 0 || size > c.passive_max() {
            return Err(GASPI_ERR_INV_COMMSIZE);
        }
        let s = c.seg(seg)?;
        let buf = seg_bytes(c, &s, off, size)?;
        let (r, _) = c.passive_receive(buf, timeout)?;
        from.write(r as u16);
        Ok(())
    }

    // Queues and limits
    fn gaspi_queue_purge / pgaspi_queue_purge(q: u8, timeout: u64) {
        // The cluster tier cannot drop posted requests: complete them instead.
        gaspi_wait(q, timeout).into_result()
    }
    fn gaspi_queue_size / pgaspi_queue_size(q: u8, n: *mut u32) {
        let c = ctx()?;
        let q = c.queue(q)?;
        out(n, c.posted[q].load(Ordering::Relaxed) as u32)
    }
    fn gaspi_queue_num / pgaspi_queue_num(n: *mut u32) {
        let c = ctx()?;
        out(n, c.queue_exists.iter().filter(|q| q.load(Ordering::Acquire)).count() as u32)
    }
    fn gaspi_queue_size_max / pgaspi_queue_size_max(n: *mut u32) {
        out(n, config().queue_size_max)
    }
    fn gaspi_queue_max / pgaspi_queue_max(n: *mut u32) {
        out(n, QUEUE_MAX)
    }
    fn gaspi_queue_create / pgaspi_queue_create(q: *mut u8, _timeout: u64) {
        let c = ctx()?;
        if q.is_null() {
            return Err(GASPI_ERR_NULLPTR);
        }
        for (i, e) in c.queue_exists.iter().enumerate() {
            if e.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                q.write(i as u8);
                return Ok(());
            }
        }
        Err(GASPI_ERR_INV_QUEUE)
    }
    fn gaspi_queue_delete / pgaspi_queue_delete(q: u8) {
        let c = ctx()?;
        let q = c.queue(q)?;
        if c.posted[q].load(Ordering::Relaxed) != 0 {
            return Err(GASPI_ERROR);
        }
        c.queue_exists[q].store(false, Ordering::Release);
        Ok(())
    }
    fn gaspi_transfer_size_min / pgaspi_transfer_size_min(n: *mut u64) {
        out(n, 0)
    }
    fn gaspi_transfer_size_max / pgaspi_transfer_size_max(n: *mut u64) {
        out(n, config().transfer_size_max)
    }
    fn gaspi_notification_num / pgaspi_notification_num(n: *mut u32) {
        out(n, config().notification_num)
    }
    fn gaspi_passive_transfer_size_min / pgaspi_passive_transfer_size_min(n: *mut u64) {
        out(n, 1)
    }
    fn gaspi_passive_transfer_size_max / pgaspi_passive_transfer_size_max(n: *mut u64) {
        match ctx() {
            Ok(c) => out(n, c.passive_max()),
            Err(_) => out(n, config().passive_transfer_size_max as u64),
        }
    }
    fn gaspi_atomic_max / pgaspi_atomic_max(n: *mut u64) {
        out(n, u64::MAX)
    }
    fn gaspi_allreduce_buf_size / pgaspi_allreduce_buf_size(n: *mut u64) {
        out(n, config().allreduce_buf_size)
    }
    fn gaspi_allreduce_elem_max / pgaspi_allreduce_elem_max(n: *mut u32) {
        out(n, config().allreduce_elem_max)
    }
    fn gaspi_rw_list_elem_max / pgaspi_rw_list_elem_max(n: *mut u32) {
        out(n, config().rw_list_elem_max)
    }
    fn gaspi_network_type / pgaspi_network_type(n: *mut i32) {
        out(n, config().network)
    }
    fn gaspi_build_infrastructure / pgaspi_build_infrastructure(n: *mut u32) {
        out(n, config().build_infrastructure as u32)
    }
    fn gaspi_time_ticks / pgaspi_time_ticks(t: *mut u64) {
        out(t, ticks())
    }
    fn gaspi_time_get / pgaspi_time_get(t: *mut f32) {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let start = ctx().map(|c| c.start).unwrap_or_else(|_| *START.get_or_init(std::time::Instant::now));
        out(t, start.elapsed().as_secs_f64() as f32 * 1000.0)
    }
    fn gaspi_cpu_frequency / pgaspi_cpu_frequency(mhz: *mut f32) {
        out(mhz, cpu_mhz())
    }
    fn gaspi_print_error / pgaspi_print_error(code: i32, msg: *mut *mut c_char) {
        if msg.is_null() {
            return Err(GASPI_ERR_NULLPTR);
        }
        let s = libc::strdup(gaspi_error_str(code));
        if s.is_null() {
            return Err(GASPI_ERR_MEMALLOC);
        }
        msg.write(s);
        Ok(())
    }
    fn gaspi_numa_socket / pgaspi_numa_socket(s: *mut u8) {
        let _ = ctx()?;
        if s.is_null() {
            return Err(GASPI_ERR_NULLPTR);
        }
        match std::env::var("GASPI_SET_NUMA_SOCKET") {
            Ok(v) if v == "1" => out(s, 0),
            _ => Err(GASPI_ERROR),
        }
    }
    fn gaspi_set_socket_affinity / pgaspi_set_socket_affinity(_s: u8) {
        Ok(())
    }

    // Statistics (see `stats.rs`).
    fn gaspi_statistic_verbosity_level / pgaspi_statistic_verbosity_level(l: u32) {
        ctx()?.stats.set_level(l);
        Ok(())
    }
    fn gaspi_statistic_counter_max / pgaspi_statistic_counter_max(n: *mut u32) {
        out(n, stats::COUNTERS as u32)
    }
    fn gaspi_statistic_counter_info / pgaspi_statistic_counter_info(counter: u32, a: *mut i32, name: *mut *mut c_char, desc: *mut *mut c_char, level: *mut u32) {
        let (arg, n, d, l) = Stats::info(counter).ok_or(GASPI_ERR_INV_NUM)?;
        if a.is_null() || name.is_null() || desc.is_null() || level.is_null() {
            return Err(GASPI_ERR_NULLPTR);
        }
        a.write(arg);
        // The strings are static; GASPI's type is a mutable pointer, never written through.
        name.write(n.as_ptr() as *mut c_char);
        desc.write(d.as_ptr() as *mut c_char);
        level.write(l);
        Ok(())
    }
    fn gaspi_statistic_counter_get / pgaspi_statistic_counter_get(counter: u32, arg: u32, v: *mut u64) {
        let x = ctx()?.stats.get(counter, arg)?;
        out(v, x)
    }
    fn gaspi_statistic_counter_reset / pgaspi_statistic_counter_reset(counter: u32) {
        ctx()?.stats.reset(counter)
    }
}

/// A user reduction (`gaspi_reduce_operation_t`).
pub type ReduceFn = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    u32,
    u64,
    u64,
) -> gaspi_return_t;

trait IntoResult {
    fn into_result(self) -> R<()>;
}
impl IntoResult for gaspi_return_t {
    fn into_result(self) -> R<()> {
        if self == GASPI_SUCCESS {
            Ok(())
        } else {
            Err(self)
        }
    }
}

fn gaspi_barrier_inner(c: &Ctx, g: u8, timeout: u64) -> R<()> {
    if g == 0 {
        return c.collective(0, Coll::Barrier, timeout, |_, left| {
            c.w.barrier(tmo(left)).map_err(err)
        });
    }
    c.group_barrier(g, timeout, false)
}

fn atomic_at(c: &Ctx, seg: u8, off: u64, rank: u16) -> R<(usize, usize)> {
    let r = c.check_rank(rank)?;
    let rm = c.remote(r, seg)?;
    if off % 8 != 0 {
        return Err(GASPI_ERR_UNALIGN_OFF);
    }
    if off.checked_add(8).is_none_or(|e| e > rm.size as u64) {
        return Err(GASPI_ERR_INV_REM_OFF);
    }
    // The word itself must be aligned, on this rank as on any other (the cluster tier refuses
    // a misaligned remote one, and a processor atomic on a misaligned own word is undefined):
    // a segment bound at a pointer that is not 8-aligned has no aligned offsets.
    let at = rm.data + off as usize;
    if at % 8 != 0 {
        return Err(GASPI_ERR_UNALIGN_OFF);
    }
    Ok((r, at))
}

fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc has no preconditions.
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

fn cpu_mhz() -> f32 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(1000.0)
}

/// `gaspi_error_str`: the name of a return code.
#[no_mangle]
pub extern "C" fn gaspi_error_str(code: gaspi_return_t) -> *mut c_char {
    let i = (code + 1) as usize;
    ERROR_STR
        .get(i)
        .copied()
        .unwrap_or(c"unknown error")
        .as_ptr() as *mut c_char
}

/// `pgaspi_error_str`.
#[no_mangle]
pub extern "C" fn pgaspi_error_str(code: gaspi_return_t) -> *mut c_char {
    gaspi_error_str(code)
}

/// `gaspi_delay`: a short pause for polling loops.
#[no_mangle]
pub extern "C" fn gaspi_delay() {
    std::hint::spin_loop();
}

/// `gaspi_print_affinity_mask`.
#[no_mangle]
pub extern "C" fn gaspi_print_affinity_mask() {
    let r = ctx().map(|c| c.rank).unwrap_or(0);
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let m = s
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list"))
        .unwrap_or("");
    println!("rank {r}: {m}");
}

/// The rank for the printing helpers (0 before init).
#[no_mangle]
pub extern "C" fn tiers_gaspi_rank() -> i32 {
    ctx().map(|c| c.rank as i32).unwrap_or(-1)
}

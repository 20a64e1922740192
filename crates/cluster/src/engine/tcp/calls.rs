//! The `Engine` calls of the tcp engine: argument checks, local shortcuts for this rank's own
//! memory, and the frames that carry the rest (see the module notes in `mod.rs`).

use super::wire::{Header, Kind};
use super::*;

impl Engine for TcpEngine {
    fn name(&self) -> &'static str {
        "tcp"
    }
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn local_rank(&self) -> usize {
        self.local_rank
    }
    fn local_size(&self) -> usize {
        self.local_size
    }

    fn segment_create(&self, seg: u32, size: usize, timeout: Timeout) -> Result<()> {
        if seg >= MAX_SEGMENTS {
            return Err(Error::SegmentIdTooLarge {
                seg,
                max: MAX_SEGMENTS,
            });
        }
        let word = Collective::SegmentCreate { seg }.word();
        self.check_pending(&lock(&self.calls), word)?;
        {
            let mut st = lock(&self.state);
            match &st.segs[seg as usize] {
                Some(s) if s.sizes.is_some() || s.size != size => {
                    return Err(Error::SegmentExists { seg })
                }
                Some(_) => {} // Resuming.
                None => {
                    let map = Mapping::anonymous(size.max(1)).map_err(|e| {
                        Error::io(format!("creating segment {seg} ({size} bytes)"), e)
                    })?;
                    st.segs[seg as usize] = Some(Seg {
                        map: Arc::new(map),
                        size,
                        notifs: Arc::new(Notifs::new()),
                        sizes: None,
                    });
                }
            }
        }
        match self.collective(word, &(size as u64).to_le_bytes(), timeout) {
            Ok(v) => {
                let sizes: Arc<[usize]> = v
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")) as usize)
                    .collect();
                if sizes.len() != self.size {
                    return Err(Error::Protocol {
                        from: Some(0),
                        what: format!(
                            "segment {seg}: {} sizes for {} ranks",
                            sizes.len(),
                            self.size
                        )
                        .into(),
                    });
                }
                if let Some(s) = lock(&self.state).segs[seg as usize].as_mut() {
                    s.sizes = Some(sizes);
                }
                Ok(())
            }
            Err(e @ Error::CollectiveMismatch(_)) => {
                lock(&self.state).segs[seg as usize] = None;
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    fn segment_delete(&self, seg: u32, timeout: Timeout) -> Result<()> {
        self.size_at(seg, self.rank)?;
        self.collective(Collective::SegmentDelete { seg }.word(), &[], timeout)?;
        lock(&self.state).segs[seg as usize] = None;
        Ok(())
    }

    fn segment_local(&self, seg: u32) -> Result<(*mut u8, usize, KeepAlive)> {
        let size = self.size_at(seg, self.rank)?;
        let (ptr, map) = self.local_range(seg, 0, size)?;
        Ok((ptr, size, map))
    }

    fn segment_size(&self, seg: u32, rank: Rank) -> Result<usize> {
        self.size_at(seg, rank)
    }

    fn write(&self, _queue: usize, t: &Transfer) -> Result<()> {
        let (src, _keep) = self.check_transfer(t)?;
        let r = t.remote.rank;
        if r == self.rank {
            let (dst, _k) = self.local_range(t.remote.seg.0, t.remote.offset, t.len)?;
            // SAFETY: both ranges are in bounds of live mappings; `copy` allows overlap.
            unsafe { std::ptr::copy(src, dst, t.len) };
            return Ok(());
        }
        let mut h = Header::new(Kind::Put);
        (h.seg, h.a) = (t.remote.seg.0, t.remote.offset as u64);
        self.post_counted(r, &h, src, t.len)
    }

    fn read(&self, queue: usize, t: &Transfer) -> Result<()> {
        let (dst, keep) = self.check_transfer(t)?;
        let r = t.remote.rank;
        if r == self.rank {
            let (src, _k) = self.local_range(t.remote.seg.0, t.remote.offset, t.len)?;
            // SAFETY: both ranges are in bounds of live mappings; `copy` allows overlap.
            unsafe { std::ptr::copy(src, dst, t.len) };
            return Ok(());
        }
        let id = {
            let mut st = lock(&self.state);
            st.next_req += 1;
            let id = st.next_req;
            st.gets.insert(
                id,
                Get {
                    dst,
                    len: t.len,
                    keep,
                    queue,
                    rank: r,
                    seg: t.remote.seg.0,
                    done: None,
                },
            );
            id
        };
        let mut h = Header::new(Kind::Get);
        (h.seg, h.a, h.b, h.c) = (t.remote.seg.0, t.remote.offset as u64, id, t.len as u64);
        self.send(r, &h, std::ptr::null(), 0).inspect_err(|_| {
            lock(&self.state).gets.remove(&id);
        })?;
        Ok(())
    }

    fn notify(&self, _queue: usize, rank: Rank, seg: u32, id: usize, value: u32) -> Result<()> {
        self.size_at(seg, rank)?;
        self.peer_ok(rank)?;
        if rank == self.rank {
            self.notify_local(seg, id as u64, value);
            self.wake();
            return Ok(());
        }
        let mut h = Header::new(Kind::Notify);
        (h.seg, h.a, h.b) = (seg, id as u64, u64::from(value));
        self.post_counted(rank, &h, std::ptr::null(), 0)
    }

    fn write_notify(&self, queue: usize, t: &Transfer, id: usize, value: u32) -> Result<()> {
        let r = t.remote.rank;
        if r == self.rank {
            self.write(queue, t)?;
            return self.notify(queue, r, t.remote.seg.0, id, value);
        }
        // One connection per peer keeps the order: the notification is applied after the
        // data. Both frames leave in one system call.
        let (src, _keep) = self.check_transfer(t)?;
        let mut put = Header::new(Kind::Put);
        (put.seg, put.a) = (t.remote.seg.0, t.remote.offset as u64);
        let mut note = Header::new(Kind::Notify);
        (note.seg, note.a, note.b) = (t.remote.seg.0, id as u64, u64::from(value));
        self.send_frames(r, &[(put, src, t.len), (note, std::ptr::null(), 0)])
            .map(drop)
    }

    fn wait(&self, queue: usize, timeout: Timeout) -> Result<()> {
        // Writes and notifications are locally complete when posted (the bytes are in the
        // socket or the link's backlog): only the reads of the queue wait for their answers.
        self.wait_until(timeout.deadline(), |e| {
            let mut st = lock(&e.state);
            let mut failed = None;
            for g in st.gets.values().filter(|g| g.queue == queue) {
                match g.done {
                    None => {
                        e.peer_ok(g.rank)?;
                        return Ok(None);
                    }
                    Some(false) => failed = Some((g.seg, g.rank)),
                    Some(true) => {}
                }
            }
            st.gets.retain(|_, g| g.queue != queue);
            match failed {
                Some((seg, rank)) => Err(Error::NoSuchSegment { seg, rank }),
                None => Ok(Some(())),
            }
        })
    }

    fn notify_waitsome(
        &self,
        seg: u32,
        first: usize,
        count: usize,
        timeout: Timeout,
    ) -> Result<usize> {
        self.size_at(seg, self.rank)?;
        let n = lock(&self.state).segs[seg as usize]
            .as_ref()
            .map(|s| s.notifs.clone())
            .ok_or(Error::NoSuchSegment {
                seg,
                rank: self.rank,
            })?;
        let end = first.saturating_add(count).min(NOTIFICATIONS);
        self.wait_until(timeout.deadline(), |e| {
            if let Some(i) = (first..end).find(|&i| n.0[i].load(Ordering::Acquire) != 0) {
                return Ok(Some(i));
            }
            match e.gone(false) {
                Some(r) => Err(Error::PeerFailed(r)),
                None => Ok(None),
            }
        })
    }

    fn notify_reset(&self, seg: u32, id: usize) -> Result<u32> {
        self.size_at(seg, self.rank)?;
        let st = lock(&self.state);
        let s = st.segs[seg as usize].as_ref().ok_or(Error::NoSuchSegment {
            seg,
            rank: self.rank,
        })?;
        Ok(s.notifs.0[id].swap(0, Ordering::AcqRel))
    }

    fn atomic_fetch_add(&self, rank: Rank, seg: u32, offset: usize, value: u64) -> Result<u64> {
        self.atomic(rank, seg, offset, Kind::FetchAdd, value, 0, Deadline::Never)
    }

    fn atomic_compare_swap(
        &self,
        rank: Rank,
        seg: u32,
        offset: usize,
        expected: u64,
        new: u64,
    ) -> Result<u64> {
        self.atomic(
            rank,
            seg,
            offset,
            Kind::CompareSwap,
            expected,
            new,
            Deadline::Never,
        )
    }

    fn atomic_fetch_add_timeout(
        &self,
        rank: Rank,
        seg: u32,
        offset: usize,
        value: u64,
        timeout: Timeout,
    ) -> Result<u64> {
        self.atomic(
            rank,
            seg,
            offset,
            Kind::FetchAdd,
            value,
            0,
            timeout.deadline(),
        )
    }

    fn atomic_compare_swap_timeout(
        &self,
        rank: Rank,
        seg: u32,
        offset: usize,
        expected: u64,
        new: u64,
        timeout: Timeout,
    ) -> Result<u64> {
        self.atomic(
            rank,
            seg,
            offset,
            Kind::CompareSwap,
            expected,
            new,
            timeout.deadline(),
        )
    }

    fn atomic_store(
        &self,
        _queue: usize,
        rank: Rank,
        seg: u32,
        offset: usize,
        value: u64,
    ) -> Result<()> {
        self.check_word(rank, seg, offset)?;
        if rank == self.rank {
            self.store_local(seg, offset as u64, value);
            self.interrupt();
            return Ok(());
        }
        // One connection per peer keeps the order: applied after every write and
        // notification sent to `rank` before it, and complete when posted, as they are.
        let mut h = Header::new(Kind::Store);
        (h.seg, h.a, h.b) = (seg, offset as u64, value);
        self.post_counted(rank, &h, std::ptr::null(), 0)
    }

    fn barrier(&self, timeout: Timeout) -> Result<()> {
        self.collective(Collective::BARRIER, &[], timeout).map(drop)
    }

    fn allreduce(
        &self,
        input: &[u8],
        output: &mut [u8],
        ty: DataType,
        op: Op,
        timeout: Timeout,
    ) -> Result<()> {
        let word = Collective::allreduce_word(input.len() / ty.size(), ty, op);
        let v = self.collective(word, input, timeout)?;
        if v.len() != output.len() {
            return Err(Error::Protocol {
                from: Some(0),
                what: format!(
                    "an allreduce answer of {} bytes for {}",
                    v.len(),
                    output.len()
                )
                .into(),
            });
        }
        output.copy_from_slice(&v);
        Ok(())
    }

    fn passive_send(&self, rank: Rank, data: &[u8], timeout: Timeout) -> Result<()> {
        if data.len() > PASSIVE_MAX {
            return Err(Error::MessageTooLarge {
                len: data.len(),
                max: PASSIVE_MAX,
            });
        }
        self.peer_ok(rank)?;
        let deadline = timeout.deadline();
        if rank == self.rank {
            self.wait_until(deadline, |e| {
                let mut st = lock(&e.state);
                if st.self_msgs >= PASSIVE_SLOTS {
                    return Ok(None);
                }
                st.self_msgs += 1;
                st.mailbox.push_back((e.rank, data.to_vec()));
                Ok(Some(()))
            })?;
            self.wake();
            return Ok(());
        }
        self.wait_until(deadline, |e| {
            let c = &e.credits[rank];
            let mut cur = c.load(Ordering::Acquire);
            while cur > 0 {
                match c.compare_exchange(cur, cur - 1, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return Ok(Some(())),
                    Err(v) => cur = v,
                }
            }
            e.peer_ok(rank).map(|()| None)
        })?;
        let h = Header::new(Kind::Passive);
        self.send(rank, &h, data.as_ptr(), data.len()).map(drop)
    }

    fn passive_receive(&self, buf: &mut [u8], timeout: Timeout) -> Result<(Rank, usize)> {
        let (from, len) = self.wait_until(timeout.deadline(), |e| {
            let mut st = lock(&e.state);
            if let Some((_, msg)) = st.mailbox.front() {
                if msg.len() > buf.len() {
                    return Err(Error::BufferTooSmall {
                        need: msg.len(),
                        have: buf.len(),
                    });
                }
                let (from, msg) = st.mailbox.pop_front().expect("a message");
                buf[..msg.len()].copy_from_slice(&msg);
                if from == e.rank {
                    st.self_msgs -= 1;
                }
                return Ok(Some((from, msg.len())));
            }
            match e.gone(false) {
                Some(r) => Err(Error::PeerFailed(r)),
                None => Ok(None),
            }
        })?;
        if from != self.rank {
            let mut h = Header::new(Kind::Credit);
            h.a = 1;
            let _ = self.send(from, &h, std::ptr::null(), 0);
        }
        Ok((from, len))
    }

    fn passive_max(&self) -> usize {
        PASSIVE_MAX
    }

    fn health(&self, rank: Rank) -> Health {
        match self.health.get(rank).map(|h| h.load(Ordering::Acquire)) {
            Some(H_FAILED) => Health::Failed,
            Some(H_EXITED) => Health::Exited,
            _ => Health::Healthy,
        }
    }

    fn leave(&self, failed: bool) {
        if self.left.swap(true, Ordering::AcqRel) {
            return;
        }
        if !failed {
            for p in (0..self.size).filter(|&p| p != self.rank) {
                let connected = lock(&self.links[p]).connected();
                if connected && self.gone_code(p) == H_OK {
                    let _ = self.send(p, &Header::new(Kind::Bye), std::ptr::null(), 0);
                }
            }
            // Write out what peers are still owed (answers, acknowledgements, results).
            let deadline = Instant::now() + LEAVE_FLUSH;
            while Instant::now() < deadline
                && self.links.iter().any(|l| {
                    let l = lock(l);
                    l.backlog() > 0 && !l.broken
                })
            {
                self.poll(Duration::from_millis(1));
            }
        }
        for l in &self.links {
            lock(l).close();
        }
    }

    fn needs_progress(&self) -> bool {
        true
    }

    fn progress(&self) -> Result<bool> {
        Ok(self.poll(Duration::ZERO))
    }

    fn progress_sleeps(&self) -> bool {
        true
    }

    fn progress_wait(&self, max: Duration) -> Result<bool> {
        Ok(self.poll(max))
    }

    fn progress_claim(&self) {
        self.acquire();
    }

    fn progress_release(&self) {
        self.release();
    }

    fn progress_stand_by(&self, max: Duration) -> Result<bool> {
        Ok(self.stand_by(max))
    }

    fn progress_interrupt(&self) {
        self.interrupt();
    }

    fn transport_stats(&self) -> Option<TransportStats> {
        Some(self.stats())
    }
}

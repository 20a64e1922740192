//! Random operations, valid and invalid, checked against a model of every segment.

use super::ok;
use tiers_cluster::{Error, Op, SegId, Timeout, World};

/// [`random`] with a seed of its own for each size of world.
pub fn random_ops_against_a_model(w: &World) {
    random(w, 0x5eed + w.size() as u64);
}

/// A small deterministic generator (splitmix64), the same on every rank for the same seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, k: usize) -> usize {
        (self.next() % k as u64) as usize
    }
}

/// Many random valid and invalid operations, each result checked against a model of every
/// segment of every rank. Phases: one rank acts while the others wait; every rank draws the
/// same random sequence, so every rank can keep the whole model.
fn random(w: &World, seed: u64) {
    let (me, n) = (w.rank(), w.size());
    let segs = [SegId(5), SegId(6)];
    let size = |s: usize, r: usize| 256 + 64 * r + 32 * s;
    let views: Vec<_> = (0..2)
        .map(|s| ok(w.segment(segs[s], size(s, me)), "segment"))
        .collect();
    let mut model: Vec<Vec<Vec<u8>>> = (0..2)
        .map(|s| (0..n).map(|r| vec![0u8; size(s, r)]).collect())
        .collect();
    let q = ok(w.queue(2), "queue");
    let mut rng = Rng::new(seed);
    let mut checked = 0usize;
    for phase in 0..2 * n {
        let actor = phase % n;
        for _ in 0..300 {
            let kind = rng.below(6);
            // Segment index 2 is an unregistered id; rank n does not exist.
            let ls = rng.below(5).min(2);
            let rs = rng.below(5).min(2);
            let r = if rng.below(10) == 0 { n } else { rng.below(n) };
            let lo = rng.below(size(1, n) + 16);
            let ro = rng.below(size(1, n) + 16);
            let len = rng.below(48);
            let value = rng.next();
            let sid = |s: usize| if s < 2 { segs[s] } else { SegId(7) };
            let bounds = |s: usize, rank: usize, off: usize, len: usize| -> Result<(), Error> {
                if off + len <= size(s, rank) {
                    Ok(())
                } else {
                    Err(Error::OutOfBounds {
                        rank,
                        seg: sid(s).0,
                        offset: off,
                        len,
                        size: size(s, rank),
                    })
                }
            };
            let expect: Result<u64, Error> = (|| match kind {
                0 | 1 => {
                    if r >= n {
                        return Err(Error::NoSuchRank { rank: r, size: n });
                    }
                    if ls == 2 {
                        return Err(Error::NoSuchSegment {
                            seg: 7,
                            rank: actor,
                        });
                    }
                    if rs == 2 {
                        return Err(Error::NoSuchSegment { seg: 7, rank: r });
                    }
                    bounds(ls, actor, lo, len)?;
                    bounds(rs, r, ro, len)?;
                    if kind == 0 {
                        let tmp = model[ls][actor][lo..lo + len].to_vec();
                        model[rs][r][ro..ro + len].copy_from_slice(&tmp);
                    } else {
                        let tmp = model[rs][r][ro..ro + len].to_vec();
                        model[ls][actor][lo..lo + len].copy_from_slice(&tmp);
                    }
                    Ok(0)
                }
                2 | 3 => {
                    let off = ro / 4 * 4;
                    if r >= n {
                        return Err(Error::NoSuchRank { rank: r, size: n });
                    }
                    if rs == 2 {
                        return Err(Error::NoSuchSegment { seg: 7, rank: r });
                    }
                    bounds(rs, r, off, 8)?;
                    if off % 8 != 0 {
                        return Err(Error::Misaligned {
                            offset: off,
                            align: 8,
                        });
                    }
                    let cell = &mut model[rs][r][off..off + 8];
                    let old = u64::from_ne_bytes(cell.try_into().unwrap());
                    let new = if kind == 2 {
                        old.wrapping_add(value)
                    } else if value % 2 == 0 {
                        if old == value % 5 {
                            value
                        } else {
                            old
                        }
                    } else {
                        if old == 0 {
                            value
                        } else {
                            old
                        }
                    };
                    cell.copy_from_slice(&new.to_ne_bytes());
                    Ok(old)
                }
                4 => {
                    if ls == 2 {
                        return Ok(0);
                    }
                    bounds(ls, actor, lo, len)?;
                    for (i, b) in model[ls][actor][lo..lo + len].iter_mut().enumerate() {
                        *b = (value >> (i % 8 * 8)) as u8;
                    }
                    Ok(0)
                }
                _ => Ok(0),
            })();
            if me != actor {
                continue;
            }
            let got: Result<u64, Error> = match kind {
                0 => q.write(sid(ls).at(lo), sid(rs).on(r, ro), len).map(|_| 0),
                1 => q.read(sid(ls).at(lo), sid(rs).on(r, ro), len).map(|_| 0),
                2 => w.atomic_fetch_add(sid(rs), ro / 4 * 4, r, value),
                3 => {
                    let expected = if value % 2 == 0 { value % 5 } else { 0 };
                    w.atomic_compare_swap(sid(rs), ro / 4 * 4, r, expected, value)
                }
                4 => {
                    if ls == 2 {
                        Ok(0)
                    } else {
                        let bytes: Vec<u8> =
                            (0..len).map(|i| (value >> (i % 8 * 8)) as u8).collect();
                        views[ls].write(lo, &bytes).map(|_| 0)
                    }
                }
                _ => q.wait(Timeout::Block).map(|_| 0),
            };
            assert_eq!(got, expect, "phase {phase} op kind {kind}");
            checked += 1;
        }
        ok(q.wait(Timeout::Block), "wait");
        ok(w.barrier(Timeout::Block), "phase barrier");
        for s in 0..2 {
            let mut mine = vec![0u8; size(s, me)];
            ok(views[s].read(0, &mut mine), "read own");
            assert!(
                mine == model[s][me],
                "segment {s} of rank {me} after phase {phase}"
            );
        }
        ok(w.barrier(Timeout::Block), "phase barrier");
    }
    let mut total = [0u64];
    ok(
        w.allreduce(&[checked as u64], &mut total, Op::Sum, Timeout::Block),
        "count",
    );
    assert_eq!(total[0], (2 * n * 300) as u64);
    for s in segs {
        ok(w.segment_delete(s, Timeout::Block), "delete");
    }
}

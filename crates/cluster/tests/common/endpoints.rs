//! Message-driven endpoints on node-tier workers (used by the local and shm tests).

use crate::common::ok;
use tiers_cluster::{Op, Timeout, World};

/// Message-driven endpoints: every endpoint exchanges numbered requests and replies with its
/// 2 neighbours on each side for 50 steps; handlers check every message; the number of
/// messages handled over all ranks must be exactly what the protocol implies.
pub fn endpoints(w: &World, workers: usize, delivery: tiers_cluster::endpoint::Delivery) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use tiers_cluster::endpoint::{self, Ctx, Endpoint, EpId};
    const K: usize = 2;
    const STEPS: u32 = 50;
    const TOTAL: usize = 11;
    struct E<'a> {
        step: u32,
        replies: usize,
        handled: &'a AtomicU64,
    }
    fn msg(kind: u8, from: EpId, step: u32) -> Vec<u8> {
        let mut v = vec![kind];
        v.extend_from_slice(&(from as u32).to_le_bytes());
        v.extend_from_slice(&step.to_le_bytes());
        v.resize(16 + from % 7 * 100, 0xab);
        v
    }
    impl E<'_> {
        fn ask(&self, ctx: &mut Ctx<'_>) -> tiers_cluster::Result<()> {
            let (me, n) = (ctx.id(), ctx.total());
            for d in 1..=K {
                ctx.send((me + d) % n, msg(1, me, self.step))?;
                ctx.send((me + n - d) % n, msg(1, me, self.step))?;
            }
            Ok(())
        }
    }
    impl Endpoint for E<'_> {
        fn start(&mut self, ctx: &mut Ctx<'_>) -> tiers_cluster::Result<()> {
            self.ask(ctx)
        }
        fn receive(
            &mut self,
            ctx: &mut Ctx<'_>,
            from: EpId,
            data: Vec<u8>,
        ) -> tiers_cluster::Result<()> {
            self.handled.fetch_add(1, Ordering::Relaxed);
            let sender = u32::from_le_bytes(data[1..5].try_into().unwrap()) as usize;
            let step = u32::from_le_bytes(data[5..9].try_into().unwrap());
            assert_eq!(sender, from, "sender recorded in the message");
            assert_eq!(data.len(), 16 + from % 7 * 100, "length kept");
            let n = ctx.total();
            let dist = (from + n - ctx.id()) % n;
            assert!(dist <= K || n - dist <= K, "only neighbours talk");
            if data[0] == 1 {
                return ctx.send(from, msg(2, ctx.id(), step));
            }
            assert_eq!(data[0], 2);
            assert_eq!(step, self.step, "a reply belongs to the current step");
            self.replies += 1;
            if self.replies == 2 * K {
                self.replies = 0;
                self.step += 1;
                if self.step == STEPS {
                    return ctx.finish();
                }
                self.ask(ctx)?;
            }
            Ok(())
        }
    }
    let pool = tiers_node::Pool::builder()
        .threads(workers)
        .build()
        .unwrap();
    let handled = AtomicU64::new(0);
    for _ in 0..2 {
        ok(
            endpoint::run(w, &pool, TOTAL, delivery, |_| E {
                step: 0,
                replies: 0,
                handled: &handled,
            }),
            "endpoints",
        );
    }
    let mut total = [0u64];
    ok(
        w.allreduce(
            &[handled.load(Ordering::Relaxed)],
            &mut total,
            Op::Sum,
            Timeout::Block,
        ),
        "count",
    );
    // Per run: every endpoint sends 2K requests per step and gets 2K replies.
    assert_eq!(total[0], 2 * (TOTAL * STEPS as usize * 2 * K * 2) as u64);
}

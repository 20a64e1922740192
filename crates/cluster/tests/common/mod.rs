//! The cluster-tier suite, generic over the world it runs in.
//!
//! Each behaviour is a plain function of a [`World`] that every rank of a job runs, grouped by
//! family (one file each). [`suite!`] lists them; each engine's test file turns the list into
//! one `#[test]` per behaviour (`local::allreduce_sum_f64`, `shm::allreduce_sum_f64`,
//! `mpi::allreduce_sum_f64`), so that a failure names the behaviour and the engine.
//!
//! Every behaviour leaves the world as it found it (its segments deleted, its queues waited
//! for, its passive messages received), so that behaviours can also run one after another in
//! one world: [`ALL`] lists them by name for that (the mpi tests start `mpirun` once per
//! configuration and play every behaviour in it; `all_behaviours_in_one_world` checks the
//! sequence on the local engine).

pub mod atomics;
pub mod collectives;
pub mod errors;
pub mod passive;
pub mod random;
pub mod rma;
pub mod threads;

use tiers_cluster::{Health, Queue, SegId, Segment, Timeout, World};

/// Calls the macro `$m` with every behaviour of the suite, as `family::function` paths.
macro_rules! suite {
    ($m:ident) => {
        $m! {
            rma::segments_register_at_every_rank,
            rma::write_notify_shows_data_before_the_notification,
            rma::atomic_store_lands_after_the_data,
            rma::a_store_wakes_a_rank_that_stands_by,
            rma::writes_reach_every_rank,
            rma::reads_fetch_remote_data,
            rma::local_waits_land_before_what_follows,
            rma::write_list_notify_delivers_every_write,
            rma::read_list_fetches_every_transfer,
            rma::notify_waitsome_times_out,
            rma::deleted_segment_is_gone_and_can_be_recreated,
            rma::large_transfers_land_whole,
            passive::passive_messages_go_around_the_ring,
            passive::full_mailbox_refuses_then_drains_in_order,
            passive::passive_receive_times_out,
            collectives::barrier_resumes_after_a_timeout,
            collectives::allreduce_resumes_after_a_timeout,
            collectives::small_allreduce_resumes_after_a_timeout,
            collectives::allreduce_sum_i32,
            collectives::allreduce_min_i32,
            collectives::allreduce_max_u32,
            collectives::allreduce_sum_u32,
            collectives::allreduce_max_i64,
            collectives::allreduce_min_i64,
            collectives::allreduce_sum_u64,
            collectives::allreduce_min_u64,
            collectives::allreduce_sum_f32,
            collectives::allreduce_min_f32,
            collectives::allreduce_sum_f64,
            collectives::allreduce_max_f64,
            collectives::allreduce_refuses_mismatched_lengths,
            collectives::allreduce_mismatches_are_reported,
            collectives::barrier_against_other_collectives_is_reported,
            collectives::regular_differences_between_three_calls_are_reported,
            collectives::another_collective_after_a_timeout_is_refused,
            atomics::fetch_add_from_every_rank_adds_up,
            atomics::one_compare_swap_wins,
            errors::bad_rank_is_refused,
            errors::out_of_bounds_is_refused,
            errors::unknown_segment_is_refused,
            errors::misaligned_atomic_is_refused,
            errors::bad_queue_or_notification_is_refused,
            errors::oversized_passive_message_is_refused,
            errors::bad_segment_ids_are_refused,
            errors::full_queue_is_refused_until_a_wait,
            random::random_ops_against_a_model,
        }
    };
}
pub(crate) use suite;

macro_rules! table {
    ($($family:ident :: $name:ident),* $(,)?) => {
        /// Every behaviour of the suite with its name, in the order of [`suite!`].
        pub const ALL: &[(&str, fn(&World))] = &[$((stringify!($name), $family::$name)),*];
    };
}
suite!(table);

/// Segment 1 of [`Fixture`]: `4096 + 64·n` bytes at every rank.
pub const S1: SegId = SegId(1);
/// Segment 2 of [`Fixture`]: `1024·(rank + 1)` bytes (sizes differ between ranks).
pub const S2: SegId = SegId(2);

/// Unwraps a result, naming what failed.
pub fn ok<T>(r: tiers_cluster::Result<T>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// What most behaviours start from: segments [`S1`] and [`S2`] created (and their sizes checked
/// at every rank), queue 1, and the ring neighbours. [`Fixture::done`] deletes both segments.
pub struct Fixture<'w> {
    pub w: &'w World,
    pub me: usize,
    pub n: usize,
    /// The next rank around the ring.
    pub next: usize,
    /// The previous rank around the ring.
    pub prev: usize,
    pub seg: Segment<'w>,
    pub s2: Segment<'w>,
    pub q: Queue<'w>,
}

impl<'w> Fixture<'w> {
    /// Collective.
    pub fn new(w: &'w World) -> Fixture<'w> {
        let (me, n) = (w.rank(), w.size());
        assert!(me < n);
        assert_eq!(w.state(), vec![Health::Healthy; n]);
        let seg = ok(w.segment(S1, Self::size1(n)), "segment 1");
        assert_eq!(seg.len(), Self::size1(n));
        let s2 = ok(w.segment(S2, 1024 * (me + 1)), "segment 2");
        assert_eq!(s2.len(), 1024 * (me + 1));
        for r in 0..n {
            assert_eq!(ok(w.segment_size(S2, r), "size"), 1024 * (r + 1));
        }
        Fixture {
            w,
            me,
            n,
            next: (me + 1) % n,
            prev: (me + n - 1) % n,
            seg,
            s2,
            q: ok(w.queue(1), "queue"),
        }
    }

    /// The size of segment 1 in an `n`-rank world.
    pub fn size1(n: usize) -> usize {
        4096 + 64 * n
    }

    /// Collective: waits for queue 1 and deletes both segments.
    pub fn done(self) {
        let blk = Timeout::Block;
        ok(self.q.wait(blk), "final wait");
        ok(self.w.segment_delete(S1, blk), "delete segment 1");
        ok(self.w.segment_delete(S2, blk), "delete segment 2");
    }
}

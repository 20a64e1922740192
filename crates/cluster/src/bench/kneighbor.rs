//! `tiers bench kneighbor` (to come).

use super::BenchResult;
use tiers_bench::Opts;

pub(super) fn run(_opts: &Opts, _rest: &[String]) -> BenchResult {
    Err("kneighbor: not built yet".into())
}

pub(super) fn rank_main(_opts: &Opts, _rest: &[String]) -> BenchResult {
    Err("kneighbor: not built yet".into())
}

//! Options every rank of a job must share. Each rank parses its own command line, and a rank
//! given other sizes, steps or variants than the rest would wait for ever in a collective the
//! others never call, or mix its part into results that are wrong without an error. So the
//! commands that run across ranks compare the options that shape the computation first, in
//! two allreduces (minimum and maximum of each), and every rank stops with the same error
//! naming the first option the ranks differ on. Paths and thread counts may differ per rank
//! (node-local copies of an input, hybrid patterns).

use std::hash::{Hash, Hasher};
use tiers_cluster::{Op, Timeout, World};

/// An option's value as a word the ranks compare: the same on every rank for the same value,
/// whichever build of `tiers` each runs ([`tiers_cluster::Fingerprint`]).
pub(crate) fn word(v: impl Hash) -> u64 {
    let mut h = tiers_cluster::Fingerprint::new();
    v.hash(&mut h);
    h.finish()
}

/// Checks that every rank of `w` was given the same `options` (name for the message, value
/// as a word); an error naming the first one that differs, the same on every rank.
pub(crate) fn same_options(w: &World, options: &[(&str, u64)]) -> Result<(), String> {
    if w.size() == 1 || options.is_empty() {
        return Ok(());
    }
    let v: Vec<u64> = options.iter().map(|o| o.1).collect();
    let (mut lo, mut hi) = (vec![0u64; v.len()], vec![0u64; v.len()]);
    let fail = |e: tiers_cluster::Error| format!("comparing the ranks' options: {e}");
    w.allreduce(&v, &mut lo, Op::Min, Timeout::Block)
        .map_err(fail)?;
    w.allreduce(&v, &mut hi, Op::Max, Timeout::Block)
        .map_err(fail)?;
    match (0..v.len()).find(|&k| lo[k] != hi[k]) {
        Some(k) => Err(format!(
            "the ranks were given different {} (every rank of a job needs the same options)",
            options[k].0
        )),
        None => Ok(()),
    }
}

//! How a parallel loop's iterations are shared among workers.

use core::ops::Range;

/// A loop schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Schedule {
    /// One contiguous block per worker, sizes differing by at most one (the seed's row-block
    /// partition). No shared state: the cheapest schedule when iterations cost the same.
    #[default]
    Static,
    /// Blocks of `b` iterations (0 is taken as 1) dealt round-robin to the workers (OpenMP's `static, b`; the
    /// seed's b = 64 for the blocked matrix multiply).
    Blocked(usize),
    /// Chunks of `c` iterations (0 is taken as 1) claimed one by one from a shared counter: balances uneven
    /// iterations at the price of one atomic add per chunk.
    Dynamic(usize),
}

impl Schedule {
    /// Parses `static`, `blocked:B` (or `blocked`, B = 64) and `dynamic:C` (or `dynamic`, C = 1).
    pub fn parse(s: &str) -> Option<Schedule> {
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a.parse::<usize>().ok().filter(|&v| v > 0)?)),
            None => (s, None),
        };
        Some(match name {
            "static" if arg.is_none() => Schedule::Static,
            "blocked" | "block" => Schedule::Blocked(arg.unwrap_or(64)),
            "dynamic" => Schedule::Dynamic(arg.unwrap_or(1)),
            _ => return None,
        })
    }
}

/// Part `k` of `0..len` cut into `parts` contiguous pieces whose lengths differ by at most one
/// (the first `len % parts` pieces are one longer).
#[inline]
pub fn partition(len: usize, parts: usize, k: usize) -> Range<usize> {
    assert!(parts > 0 && k < parts, "tiers: part {k} of {parts}");
    let base = len / parts;
    let extra = len % parts;
    let start = k * base + k.min(extra);
    let size = base + usize::from(k < extra);
    start..start + size
}

/// Worker `k`'s part of `range` under a static partition among `parts` workers.
#[inline]
pub fn partition_range(range: &Range<usize>, parts: usize, k: usize) -> Range<usize> {
    let len = range.end.saturating_sub(range.start);
    let r = partition(len, parts, k);
    range.start + r.start..range.start + r.end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_exactly_and_differ_by_at_most_one() {
        for len in [0, 1, 7, 64, 1000, 1001] {
            for parts in 1..=9 {
                let mut next = 0;
                let mut sizes = vec![];
                for k in 0..parts {
                    let r = partition(len, parts, k);
                    assert_eq!(r.start, next);
                    next = r.end;
                    sizes.push(r.len());
                }
                assert_eq!(next, len);
                let (mn, mx) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(mx - mn <= 1, "len {len} parts {parts}: {sizes:?}");
            }
        }
        assert_eq!(partition_range(&(10..20), 3, 2), 17..20);
    }

    #[test]
    fn parse_schedules() {
        assert_eq!(Schedule::parse("static"), Some(Schedule::Static));
        assert_eq!(Schedule::parse("blocked"), Some(Schedule::Blocked(64)));
        assert_eq!(Schedule::parse("dynamic:8"), Some(Schedule::Dynamic(8)));
        assert_eq!(Schedule::parse("dynamic:0"), None);
        assert_eq!(Schedule::parse("fancy"), None);
    }
}

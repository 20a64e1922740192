//! NPB IS, the NAS Parallel Benchmarks' integer sort (\[NPB\], NPB3.4-MPI), across the ranks of
//! a [`World`], in two-sided style on the cluster tier's [`Comm`]: NPB's key generator (randlc,
//! seed 314159265, multiplier 5¹³) and key distribution (the mean of four uniform numbers),
//! local buckets, an allreduce of the bucket sizes, an alltoall of the counts and an alltoallv
//! of the keys, a local ranking by counting, NPB's partial verification (the ranks of five test
//! keys in each of the ten timed iterations) and its full verification (the keys sorted within
//! and across ranks). The algorithm and its numbers are NPB's, so a class verifies against
//! NPB's published ranks and its Mop/s compares with NPB's own IS.

use crate::{Error, Result};
use std::time::Instant;
use tiers_cluster::twosided::{Comm, Options as CommOptions};
use tiers_cluster::{Op, SegId, Timeout, World};

/// Timed iterations (NPB's `MAX_ITERATIONS`).
pub const ITERATIONS: usize = 10;
/// Test keys of the partial verification.
const TESTS: usize = 5;
/// The segment the communicator uses.
const SEG: SegId = SegId(40);
/// NPB's generator: seed and multiplier (5¹³).
const SEED: u64 = 314_159_265;
const MULT: u64 = 1_220_703_125;

/// A problem class of NPB IS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// 2¹⁶ keys below 2¹¹.
    S,
    /// 2²⁰ keys below 2¹⁶.
    W,
    /// 2²³ keys below 2¹⁹.
    A,
    /// 2²⁵ keys below 2²¹.
    B,
    /// 2²⁷ keys below 2²³.
    C,
}

/// The sizes and verification values of a class (NPB's `is.c`).
#[derive(Clone, Copy, Debug)]
pub struct ClassParams {
    /// log₂ of the number of keys.
    pub total_keys_log2: u32,
    /// log₂ of the key range.
    pub max_key_log2: u32,
    /// log₂ of the number of buckets.
    pub buckets_log2: u32,
    test_index: [u64; TESTS],
    test_rank: [i64; TESTS],
}

impl Class {
    /// Parses `S`, `W`, `A`, `B` or `C`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for any other name.
    pub fn parse(s: &str) -> Result<Class> {
        Ok(match s {
            "S" | "s" => Class::S,
            "W" | "w" => Class::W,
            "A" | "a" => Class::A,
            "B" | "b" => Class::B,
            "C" | "c" => Class::C,
            _ => return Err(Error::Invalid(format!("IS class {s:?}: S, W, A, B or C"))),
        })
    }

    /// Its letter.
    pub fn letter(self) -> char {
        match self {
            Class::S => 'S',
            Class::W => 'W',
            Class::A => 'A',
            Class::B => 'B',
            Class::C => 'C',
        }
    }

    /// Its sizes and verification values.
    pub fn params(self) -> ClassParams {
        let (t, m, b, test_index, test_rank) = match self {
            Class::S => (
                16,
                11,
                9,
                [48427, 17148, 23627, 62548, 4431],
                [0, 18, 346, 64917, 65463],
            ),
            Class::W => (
                20,
                16,
                10,
                [357773, 934767, 875723, 898999, 404505],
                [1249, 11698, 1039987, 1043896, 1048018],
            ),
            Class::A => (
                23,
                19,
                10,
                [2112377, 662041, 5336171, 3642833, 4250760],
                [104, 17523, 123928, 8288932, 8388264],
            ),
            Class::B => (
                25,
                21,
                10,
                [41869, 812306, 5102857, 18232239, 26860214],
                [33422937, 10244, 59149, 33135281, 99],
            ),
            Class::C => (
                27,
                23,
                10,
                [44172927, 72999161, 74326391, 129606274, 21736814],
                [61147, 882988, 266290, 133997595, 133525895],
            ),
        };
        ClassParams {
            total_keys_log2: t,
            max_key_log2: m,
            buckets_log2: b,
            test_index,
            test_rank,
        }
    }

    /// The rank test key `i` must have in `iteration` (NPB shifts the published ranks by the
    /// iteration, differently per class, since each iteration changes two keys).
    fn expected_rank(self, i: usize, iteration: usize) -> i64 {
        let r = self.params().test_rank[i];
        let it = iteration as i64;
        match self {
            Class::S | Class::C => {
                if i <= 2 {
                    r + it
                } else {
                    r - it
                }
            }
            Class::W => {
                if i < 2 {
                    r + it - 2
                } else {
                    r - it
                }
            }
            Class::A => {
                if i <= 2 {
                    r + it - 1
                } else {
                    r - (it - 1)
                }
            }
            Class::B => {
                if i == 1 || i == 2 || i == 4 {
                    r + it
                } else {
                    r - it
                }
            }
        }
    }
}

/// NPB's randlc: `x ← a·x mod 2⁴⁶`, returning `x / 2⁴⁶`. NPB computes it in doubles split at
/// 2²³, exactly; integers give the same numbers.
pub fn randlc(x: &mut u64, a: u64) -> f64 {
    const MASK: u64 = (1 << 46) - 1;
    *x = ((u128::from(*x) * u128::from(a)) as u64) & MASK;
    *x as f64 / (1u64 << 46) as f64
}

/// The seed of rank `kn` of `np` for a sequence of `nn` numbers (NPB's `find_my_seed`):
/// `s · a^(kn · nn/np)`.
fn find_my_seed(kn: usize, np: usize, nn: u64, s: u64, a: u64) -> u64 {
    let mut nq = nn / np as u64;
    let mut mq = 0;
    while nq > 1 {
        mq += 1;
        nq /= 2;
    }
    let mut t1 = a;
    for _ in 0..mq {
        let t = t1;
        randlc(&mut t1, t);
    }
    let an = t1;
    let mut kk = kn;
    let mut t1 = s;
    let mut t2 = an;
    for _ in 0..100 {
        let ik = kk / 2;
        if 2 * ik != kk {
            randlc(&mut t1, t2);
        }
        if ik == 0 {
            break;
        }
        let t = t2;
        randlc(&mut t2, t);
        kk = ik;
    }
    t1
}

/// NPB's `create_seq`: `n` keys, each `MAX_KEY/4` times the sum of four uniform numbers.
fn create_seq(mut seed: u64, n: usize, max_key: u64) -> Vec<u32> {
    let k = (max_key / 4) as f64;
    (0..n)
        .map(|_| {
            let mut x = randlc(&mut seed, MULT);
            x += randlc(&mut seed, MULT);
            x += randlc(&mut seed, MULT);
            x += randlc(&mut seed, MULT);
            (k * x) as u32
        })
        .collect()
}

/// What a run is asked beyond the class.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Corrupts this rank's sorted keys before the full verification (swaps two that differ),
    /// so that a test can see the verification fail.
    pub corrupt_rank: Option<usize>,
}

/// The outcome at one rank.
#[derive(Clone, Debug)]
pub struct Report {
    /// The class.
    pub class: Class,
    /// Ranks.
    pub ranks: usize,
    /// Seconds of the ten timed iterations, the maximum over ranks.
    pub seconds: f64,
    /// Millions of keys ranked per second, as NPB reports it (`10 · keys / seconds / 10⁶`).
    pub mops: f64,
    /// Checks passed over all ranks.
    pub passed: u64,
    /// Checks a successful run passes: 5 per iteration and one full verification per rank.
    pub needed: u64,
    /// This rank's failed checks, as NPB prints them.
    pub failures: Vec<String>,
}

impl Report {
    /// Whether every check passed.
    pub fn verified(&self) -> bool {
        self.passed == self.needed
    }
}

/// One rank's state across iterations.
struct Rank<'a> {
    class: Class,
    p: ClassParams,
    comm: Comm<'a>,
    me: usize,
    size: usize,
    num_keys: usize,
    keys: Vec<u32>,
    /// The keys in bucket order, as sent.
    buff1: Vec<u32>,
    /// After `rank`: the received keys, the key counts turned into ranks, the first key of
    /// this rank's range, and the number of local keys.
    recv: Vec<u32>,
    counts: Vec<u32>,
    min_key: usize,
    passed: u64,
    failures: Vec<String>,
}

impl Rank<'_> {
    fn cluster(e: tiers_cluster::Error) -> Error {
        Error::Invalid(format!("IS across ranks: {e}"))
    }

    /// NPB's `rank(iteration)`.
    fn rank(&mut self, iteration: usize) -> Result<()> {
        let p = self.p;
        let shift = p.max_key_log2 - p.buckets_log2;
        let nb = 1usize << p.buckets_log2;
        let max_key = 1u64 << p.max_key_log2;
        if self.me == 0 {
            self.keys[iteration] = iteration as u32;
            self.keys[iteration + ITERATIONS] = (max_key - iteration as u64) as u32;
        }
        let mut size = vec![0i64; nb + TESTS];
        for i in 0..TESTS {
            let idx = p.test_index[i] as usize;
            if idx / self.num_keys == self.me {
                size[nb + i] = i64::from(self.keys[idx % self.num_keys]);
            }
        }
        for &k in &self.keys {
            size[(k >> shift) as usize] += 1;
        }
        let mut ptrs = vec![0usize; nb];
        for i in 1..nb {
            ptrs[i] = ptrs[i - 1] + size[i - 1] as usize;
        }
        // Kept across iterations: a fresh buffer would fault its pages in every time.
        let buff1 = &mut self.buff1;
        buff1.resize(self.num_keys, 0);
        for &k in &self.keys {
            let b = (k >> shift) as usize;
            buff1[ptrs[b]] = k;
            ptrs[b] += 1;
        }
        let mut totals = vec![0i64; nb + TESTS];
        self.comm
            .allreduce(&size, &mut totals, Op::Sum, Timeout::Block)
            .map_err(Self::cluster)?;
        // Which buckets go to which rank: fill ranks in order until each holds num_keys.
        let np = self.size;
        let mut send_count = vec![0usize; np];
        let mut ptr1 = vec![0usize; np];
        let mut ptr2 = vec![0usize; np];
        let (mut acc, mut local, mut j) = (0i64, 0i64, 0usize);
        for i in 0..nb {
            acc += totals[i];
            local += size[i];
            if j < np && acc >= ((j + 1) * self.num_keys) as i64 {
                send_count[j] = local as usize;
                if j != 0 {
                    ptr1[j] = ptr2[j - 1] + 1;
                }
                ptr2[j] = i;
                j += 1;
                local = 0;
            }
        }
        while j < np {
            send_count[j] = 0;
            ptr1[j] = 1;
            j += 1;
        }
        let mut recv_count = vec![0usize; np];
        self.comm
            .alltoall(&send_count, &mut recv_count, Timeout::Block)
            .map_err(Self::cluster)?;
        let total: usize = recv_count.iter().sum();
        // Every element is overwritten by the exchange: no need to zero it again.
        self.recv.resize(total, 0);
        self.recv.truncate(total);
        self.comm
            .alltoallv(
                &self.buff1,
                &send_count,
                &mut self.recv,
                &recv_count,
                Timeout::Block,
            )
            .map_err(Self::cluster)?;
        let me = self.me;
        let min_key = ptr1[me] << shift;
        let max_key_val = ((ptr2[me] + 1) << shift).saturating_sub(1);
        // Keys held by lower ranks.
        let mut m = 0i64;
        for k in 0..me {
            for t in totals.iter().take(ptr2[k] + 1).skip(ptr1[k]) {
                m += *t;
            }
        }
        let span = (max_key_val + 1).saturating_sub(min_key);
        self.counts.clear();
        self.counts.resize(span, 0);
        for &k in &self.recv {
            // One comparison: a key below min_key wraps around to a huge index.
            let i = (k as usize).wrapping_sub(min_key);
            match self.counts.get_mut(i) {
                Some(c) => *c += 1,
                None => {
                    return Err(Error::Invalid(format!(
                        "IS: key {k} outside rank {me}'s range"
                    )))
                }
            }
        }
        for i in 1..span {
            self.counts[i] += self.counts[i - 1];
        }
        self.min_key = min_key;
        for i in 0..TESTS {
            let k = totals[nb + i] as usize;
            if min_key <= k && k <= max_key_val {
                let below = if k > min_key {
                    i64::from(self.counts[k - 1 - min_key])
                } else {
                    0
                };
                let key_rank = below + m;
                if key_rank == self.class.expected_rank(i, iteration) {
                    self.passed += 1;
                } else {
                    self.failures.push(format!(
                        "Failed partial verification: iteration {iteration}, processor {me}, test key {i}, key rank {key_rank}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// NPB's `full_verify`: sorts the keys by their ranks and checks the order, within this
    /// rank and against the largest key of the rank before.
    fn full_verify(&mut self, corrupt: bool) -> Result<()> {
        let n = self.recv.len();
        let mut sorted = vec![0u32; n];
        for &k in &self.recv {
            let c = &mut self.counts[k as usize - self.min_key];
            *c -= 1;
            sorted[*c as usize] = k;
        }
        if corrupt {
            if let Some(i) = (1..n).find(|&i| sorted[i - 1] != sorted[i]) {
                sorted.swap(i - 1, i);
            }
        }
        let (me, np) = (self.me, self.size);
        let last = sorted.last().copied().unwrap_or(0);
        if me + 1 < np {
            self.comm
                .send(me + 1, 1000, &last.to_le_bytes(), Timeout::Block)
                .map_err(Self::cluster)?;
        }
        let mut wrong = 0usize;
        if me > 0 {
            let mut b = [0u8; 4];
            self.comm
                .recv(me - 1, 1000, &mut b, Timeout::Block)
                .map_err(Self::cluster)?;
            if n > 0 && u32::from_le_bytes(b) > sorted[0] {
                wrong += 1;
            }
        }
        wrong += sorted.windows(2).filter(|w| w[0] > w[1]).count();
        if wrong == 0 {
            self.passed += 1;
        } else {
            self.failures.push(format!(
                "Processor {me}:  Full_verify: number of keys out of sort: {wrong}"
            ));
        }
        Ok(())
    }
}

/// Runs IS of `class` across the ranks of `world` (a power of two, at most 2¹⁰); every rank
/// gets the report (seconds, Mop/s and checks summed over ranks; its own failures).
///
/// # Errors
///
/// [`Error::Invalid`] for a world size that is not a power of two or too large for the class,
/// or when the cluster tier fails.
pub fn run(world: &World, class: Class, opts: Options) -> Result<Report> {
    // In a replicated job (`tiers run --replicas R`) the communicator's ranks are the logical
    // ones and every exchange goes through it.
    let replicas = tiers_cluster::twosided::Placement::from_env(world)
        .map_err(Rank::cluster)?
        .map_or(1, |p| p.replicas);
    let (me, np) = (world.rank() / replicas, world.size() / replicas);
    let p = class.params();
    let total = 1usize << p.total_keys_log2;
    if !np.is_power_of_two() || np > 1024 || np > total >> 4 {
        return Err(Error::Invalid(format!(
            "IS runs on a power of two of ranks, at most 1024 and 1/16 of the keys: not {np}"
        )));
    }
    let num_keys = total / np;
    // Few ranks exchange large blocks: larger rings take fewer credit round trips.
    let rings = if np <= 8 {
        CommOptions {
            slots: 16,
            slot_bytes: 128 * 1024,
        }
    } else {
        CommOptions::default()
    };
    let comm = Comm::with_options(world, SEG, rings, Timeout::Block).map_err(Rank::cluster)?;
    let seed = find_my_seed(me, np, 4 * total as u64, SEED, MULT);
    let keys = create_seq(seed, num_keys, 1u64 << p.max_key_log2);
    let mut r = Rank {
        class,
        p,
        comm,
        me,
        size: np,
        num_keys,
        keys,
        buff1: Vec::new(),
        recv: Vec::new(),
        counts: Vec::new(),
        min_key: 0,
        passed: 0,
        failures: Vec::new(),
    };
    // One untimed iteration, as NPB, to touch every page.
    r.rank(1)?;
    r.passed = 0;
    r.failures.clear();
    r.comm.barrier(Timeout::Block).map_err(Rank::cluster)?;
    let t = Instant::now();
    for it in 1..=ITERATIONS {
        r.rank(it)?;
    }
    let mine = t.elapsed().as_secs_f64();
    let mut seconds = [0f64];
    r.comm
        .allreduce(&[mine], &mut seconds, Op::Max, Timeout::Block)
        .map_err(Rank::cluster)?;
    r.full_verify(opts.corrupt_rank == Some(me))?;
    let mut passed = [0u64];
    r.comm
        .allreduce(&[r.passed], &mut passed, Op::Sum, Timeout::Block)
        .map_err(Rank::cluster)?;
    r.comm.barrier(Timeout::Block).map_err(Rank::cluster)?;
    let seconds = seconds[0];
    Ok(Report {
        class,
        ranks: np,
        seconds,
        mops: (ITERATIONS * total) as f64 / seconds / 1e6,
        passed: passed[0],
        needed: (TESTS * ITERATIONS + np) as u64,
        failures: r.failures,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn randlc_matches_npbs_double_arithmetic() {
        // NPB's randlc in doubles, split at 2^23 (the reference).
        fn npb(x: &mut f64, a: f64) -> f64 {
            let (r23, t23) = (0.5f64.powi(23), 2f64.powi(23));
            let (r46, t46) = (0.5f64.powi(46), 2f64.powi(46));
            let a1 = (r23 * a).trunc();
            let a2 = a - t23 * a1;
            let x1 = (r23 * *x).trunc();
            let x2 = *x - t23 * x1;
            let t1 = a1 * x2 + a2 * x1;
            let t2 = (r23 * t1).trunc();
            let z = t1 - t23 * t2;
            let t3 = t23 * z + a2 * x2;
            let t4 = (r46 * t3).trunc();
            *x = t3 - t46 * t4;
            r46 * *x
        }
        let (mut xi, mut xf) = (SEED, SEED as f64);
        for _ in 0..1000 {
            assert_eq!(randlc(&mut xi, MULT), npb(&mut xf, MULT as f64));
            assert_eq!(xi as f64, xf);
        }
    }

    #[test]
    fn seeds_continue_the_sequence() {
        // Rank 1 of 2 starts where rank 0's share of the sequence ends.
        let n = 64u64;
        let mut x = SEED;
        for _ in 0..n / 2 {
            randlc(&mut x, MULT);
        }
        assert_eq!(find_my_seed(1, 2, n, SEED, MULT), x);
        assert_eq!(find_my_seed(0, 2, n, SEED, MULT), SEED);
    }

    #[test]
    fn class_s_verifies_and_a_corrupted_rank_is_caught() {
        let ok =
            tiers_cluster::run_local(2, |w| run(w, Class::S, Options::default()).unwrap()).unwrap();
        for r in &ok {
            assert!(r.verified(), "{r:?}");
            assert_eq!(r.needed, 52);
        }
        let bad = tiers_cluster::run_local(2, |w| {
            run(
                w,
                Class::S,
                Options {
                    corrupt_rank: Some(1),
                },
            )
            .unwrap()
        })
        .unwrap();
        assert!(!bad[0].verified());
        assert_eq!(bad[0].passed, 51);
        assert!(bad[1].failures[0].contains("out of sort"), "{:?}", bad[1]);
    }

    #[test]
    fn odd_world_sizes_are_refused() {
        let r =
            tiers_cluster::run_local(3, |w| run(w, Class::S, Options::default()).is_err()).unwrap();
        assert_eq!(r, vec![true; 3]);
    }
}

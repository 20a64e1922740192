//! Collectives: barrier and allreduce (min, max, sum over i32, u32, i64, u64, f32, f64).
//!
//! Unlike GPI-2, allreduce has no 255-element cap: engines reduce in chunks. Both collectives
//! take a [`Timeout`](crate::Timeout) and, after `Err(Timeout)`, resume where they stopped when
//! called again with the same arguments.

/// A reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Smallest value (for floats, NaN loses against numbers).
    Min,
    /// Largest value.
    Max,
    /// Sum (integers wrap; floats add in rank order, so every rank gets identical bits).
    Sum,
}

/// The element types an allreduce knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataType {
    /// `i32`
    I32,
    /// `u32`
    U32,
    /// `i64`
    I64,
    /// `u64`
    U64,
    /// `f32`
    F32,
    /// `f64`
    F64,
}

impl DataType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DataType::I32 | DataType::U32 | DataType::F32 => 4,
            DataType::I64 | DataType::U64 | DataType::F64 => 8,
        }
    }
}

/// A collective call as the engines compare it across ranks (see
/// [`Error::CollectiveMismatch`](crate::Error::CollectiveMismatch)). Segment sizes are not part
/// of it: ranks may register segments of different sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    /// [`World::barrier`](crate::World::barrier).
    Barrier,
    /// [`World::allreduce`](crate::World::allreduce) of `len` elements.
    Allreduce {
        /// Elements.
        len: usize,
        /// Element type.
        ty: DataType,
        /// Reduction.
        op: Op,
    },
    /// Creating segment `seg` ([`World::segment`](crate::World::segment)).
    SegmentCreate {
        /// The segment id.
        seg: u32,
    },
    /// Deleting segment `seg`.
    SegmentDelete {
        /// The segment id.
        seg: u32,
    },
    /// A call whose record the engine no longer has (the rank had moved on).
    Unknown,
}

impl std::fmt::Display for Collective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Collective::Barrier => write!(f, "barrier"),
            Collective::Allreduce { len, ty, op } => {
                write!(f, "allreduce({len} × {ty:?}, {op:?})")
            }
            Collective::SegmentCreate { seg } => write!(f, "segment {seg} create"),
            Collective::SegmentDelete { seg } => write!(f, "segment {seg} delete"),
            Collective::Unknown => write!(f, "an unknown collective"),
        }
    }
}

/// Every element type, in declaration order.
pub(crate) const TYPES: [DataType; 6] = [
    DataType::I32,
    DataType::U32,
    DataType::I64,
    DataType::U64,
    DataType::F32,
    DataType::F64,
];
/// Every operation, in declaration order.
pub(crate) const OPS: [Op; 3] = [Op::Min, Op::Max, Op::Sum];
const LEN_BITS: u32 = 52;

impl Collective {
    /// The call as one word, never 0: the kind in bits 60–63, then the type (56–59), the
    /// operation (52–55) and the element count (0–51) of an allreduce, or a segment id.
    #[inline]
    pub(crate) fn word(self) -> u64 {
        match self {
            Collective::Barrier => 1 << 60,
            Collective::Allreduce { len, ty, op } => Collective::allreduce_word(len, ty, op),
            Collective::SegmentCreate { seg } => (3 << 60) | seg as u64,
            Collective::SegmentDelete { seg } => (4 << 60) | seg as u64,
            Collective::Unknown => 15 << 60,
        }
    }

    /// The word of an allreduce, computed without building the enum (the fast path carries
    /// words, not enums: an enum assembled field by field on the stack and read back whole
    /// stalls store forwarding). `TYPES` and `OPS` are in declaration order.
    #[inline]
    pub(crate) fn allreduce_word(len: usize, ty: DataType, op: Op) -> u64 {
        (2 << 60) | ((ty as u64) << 56) | ((op as u64) << 52) | (len as u64 & ((1 << LEN_BITS) - 1))
    }

    /// The word of a barrier.
    pub(crate) const BARRIER: u64 = 1 << 60;

    /// The inverse of [`Collective::word`].
    pub(crate) fn from_word(w: u64) -> Collective {
        match w >> 60 {
            1 => Collective::Barrier,
            2 => Collective::Allreduce {
                len: (w & ((1 << LEN_BITS) - 1)) as usize,
                ty: TYPES[((w >> 56) & 15) as usize % TYPES.len()],
                op: OPS[((w >> 52) & 15) as usize % OPS.len()],
            },
            3 => Collective::SegmentCreate { seg: w as u32 },
            4 => Collective::SegmentDelete { seg: w as u32 },
            _ => Collective::Unknown,
        }
    }

    /// A 32-bit digest of [`Collective::word`], for sums of arrivals: the last arriver
    /// checks that the digests sum to `size` times its own. The mix is not linear (splitmix64's
    /// finaliser), so that different calls agree only by chance (about 2^-32): with a linear
    /// one (a multiply alone), three ranks whose words were a, b and (a + b) / 2, such as
    /// allreduces of 8, 12 and 10 elements, summed to three times the third's and passed.
    #[inline]
    pub(crate) fn digest(word: u64) -> u64 {
        let mut z = word.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) >> 32
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Plain numbers that may be copied to and from raw bytes (every bit pattern valid).
pub trait Pod: Copy + Send + Sync + 'static + sealed::Sealed {}

/// Element types of [`World::allreduce`](crate::World::allreduce).
pub trait Reducible: Pod {
    /// Its [`DataType`].
    const TYPE: DataType;
}

macro_rules! pod {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Pod for $t {}
    )*};
}
pod!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, usize, isize);

macro_rules! reducible {
    ($($t:ty => $d:ident),*) => {$(
        impl Reducible for $t { const TYPE: DataType = DataType::$d; }
    )*};
}
reducible!(i32 => I32, u32 => U32, i64 => I64, u64 => U64, f32 => F32, f64 => F64);

/// Views a slice of plain numbers as bytes.
pub(crate) fn as_bytes<T: Pod>(s: &[T]) -> &[u8] {
    // SAFETY: T is a plain number type (no padding, no invalid bit patterns); the byte slice
    // covers exactly the same memory and borrows it the same way.
    unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
}

/// Views a mutable slice of plain numbers as bytes.
pub(crate) fn as_bytes_mut<T: Pod>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as in as_bytes; any bytes written form valid values of T.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr() as *mut u8, std::mem::size_of_val(s)) }
}

trait Num: Copy {
    fn from(b: &[u8]) -> Self;
    fn put(self, b: &mut [u8]);
    fn min2(self, o: Self) -> Self;
    fn max2(self, o: Self) -> Self;
    fn add2(self, o: Self) -> Self;
}

macro_rules! num_int {
    ($($t:ty),*) => {$(
        impl Num for $t {
            fn from(b: &[u8]) -> Self { <$t>::from_ne_bytes(b.try_into().expect("element size")) }
            fn put(self, b: &mut [u8]) { b.copy_from_slice(&self.to_ne_bytes()) }
            fn min2(self, o: Self) -> Self { Ord::min(self, o) }
            fn max2(self, o: Self) -> Self { Ord::max(self, o) }
            fn add2(self, o: Self) -> Self { self.wrapping_add(o) }
        }
    )*};
}
num_int!(i32, u32, i64, u64);

macro_rules! num_float {
    ($($t:ty),*) => {$(
        impl Num for $t {
            fn from(b: &[u8]) -> Self { <$t>::from_ne_bytes(b.try_into().expect("element size")) }
            fn put(self, b: &mut [u8]) { b.copy_from_slice(&self.to_ne_bytes()) }
            fn min2(self, o: Self) -> Self { self.min(o) }
            fn max2(self, o: Self) -> Self { self.max(o) }
            fn add2(self, o: Self) -> Self { self + o }
        }
    )*};
}
num_float!(f32, f64);

fn combine_t<T: Num>(op: Op, acc: &mut [u8], x: &[u8], sz: usize) {
    for (a, b) in acc.chunks_exact_mut(sz).zip(x.chunks_exact(sz)) {
        let (p, q) = (T::from(a), T::from(b));
        let r = match op {
            Op::Min => p.min2(q),
            Op::Max => p.max2(q),
            Op::Sum => p.add2(q),
        };
        r.put(a);
    }
}

/// `out` = the first of `blocks` combined with each of the others in turn: the rank-order fold
/// every engine uses, so that float sums come out with the same bits everywhere.
pub(crate) fn fold_in_order<'a>(
    ty: DataType,
    op: Op,
    out: &mut [u8],
    blocks: impl IntoIterator<Item = &'a [u8]>,
) {
    let mut blocks = blocks.into_iter();
    if let Some(first) = blocks.next() {
        out.copy_from_slice(first);
    }
    for b in blocks {
        combine(ty, op, out, b);
    }
}

/// `acc[i] = op(acc[i], x[i])` elementwise over raw bytes of type `ty`.
pub(crate) fn combine(ty: DataType, op: Op, acc: &mut [u8], x: &[u8]) {
    let sz = ty.size();
    match ty {
        DataType::I32 => combine_t::<i32>(op, acc, x, sz),
        DataType::U32 => combine_t::<u32>(op, acc, x, sz),
        DataType::I64 => combine_t::<i64>(op, acc, x, sz),
        DataType::U64 => combine_t::<u64>(op, acc, x, sz),
        DataType::F32 => combine_t::<f32>(op, acc, x, sz),
        DataType::F64 => combine_t::<f64>(op, acc, x, sz),
    }
}

impl crate::World {
    /// Collective: `output[i] = op over all ranks of input[i]`, any length. After
    /// `Err(Timeout)`, calling it again with the same arguments resumes it.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) when `input` and `output` differ in length,
    /// [`Error::Timeout`](crate::Error::Timeout) when not every rank arrived in time (resumable), [`Error::PeerFailed`](crate::Error::PeerFailed)
    /// when a rank has failed, [`Error::Mpi`](crate::Error::Mpi) when MPI fails,
    /// [`Error::CollectiveMismatch`](crate::Error::CollectiveMismatch) when other ranks called
    /// another collective or this allreduce with another length, type or operation (or this
    /// rank has another collective pending after a timeout).
    pub fn allreduce<T: Reducible>(
        &self,
        input: &[T],
        output: &mut [T],
        op: Op,
        timeout: crate::Timeout,
    ) -> crate::Result<()> {
        if input.len() != output.len() {
            return Err(crate::Error::LengthMismatch {
                input: input.len(),
                output: output.len(),
            });
        }
        self.engine
            .allreduce(as_bytes(input), as_bytes_mut(output), T::TYPE, op, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combine_each_type_and_op() {
        let mut a = [3i32, -5, 7];
        combine(
            DataType::I32,
            Op::Sum,
            as_bytes_mut(&mut a),
            as_bytes(&[1i32, 1, i32::MAX]),
        );
        assert_eq!(a, [4, -4, 7i32.wrapping_add(i32::MAX)]);
        let mut b = [1.5f64, -2.0];
        combine(
            DataType::F64,
            Op::Min,
            as_bytes_mut(&mut b),
            as_bytes(&[0.5f64, 3.0]),
        );
        assert_eq!(b, [0.5, -2.0]);
        let mut c = [9u64, 1];
        combine(
            DataType::U64,
            Op::Max,
            as_bytes_mut(&mut c),
            as_bytes(&[2u64, 8]),
        );
        assert_eq!(c, [9, 8]);
    }
}

#[cfg(test)]
mod call_tests {
    use super::*;

    #[test]
    fn call_words_round_trip() {
        let mut calls = vec![
            Collective::Barrier,
            Collective::SegmentCreate { seg: 7 },
            Collective::SegmentDelete { seg: 0 },
        ];
        for ty in TYPES {
            for op in OPS {
                calls.push(Collective::Allreduce { len: 3, ty, op });
            }
        }
        for c in &calls {
            assert_eq!(Collective::from_word(c.word()), *c);
        }
        let words: std::collections::HashSet<u64> = calls.iter().map(|c| c.word()).collect();
        assert_eq!(words.len(), calls.len());
    }
}

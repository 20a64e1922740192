//! The header of NumPy's `.npy` format (versions 1 to 3), shared by the readers of distance
//! matrices ([`crate::matrix`]) and of fft2d's input ([`crate::fft2d`]): where the data
//! starts, the dtype's `descr`, the order and the shape. Each reader judges the dtype and the
//! shape it accepts; this module only takes the header apart, and refuses what it cannot read
//! with a message naming the fault.

/// A parsed `.npy` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Offset of the first data byte in the file.
    pub data: usize,
    /// The dtype, as NumPy writes it (`<f4`, `>c16`, `|u1`, …).
    pub descr: String,
    /// Column-major (`fortran_order: True`).
    pub fortran: bool,
    /// The shape, one entry per axis.
    pub shape: Vec<usize>,
}

/// A version-1 header for an array of `descr` and `shape`, by rows or (`fortran`) by
/// columns, padded with spaces and a newline to a multiple of 64 bytes as NumPy pads it;
/// the data follows it.
pub fn header(descr: &str, fortran: bool, shape: &[usize]) -> Vec<u8> {
    let order = if fortran { "True" } else { "False" };
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let dims = match dims.len() {
        1 => format!("{},", dims[0]),
        _ => dims.join(", "),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': ({dims}), }}");
    let total = (10 + dict.len() + 1).div_ceil(64) * 64;
    let mut h = b"\x93NUMPY\x01\x00".to_vec();
    h.extend_from_slice(&((total - 10) as u16).to_le_bytes());
    h.extend_from_slice(dict.as_bytes());
    h.resize(total - 1, b' ');
    h.push(b'\n');
    h
}

/// The longest header [`parse`] accepts (NumPy writes a few hundred bytes; version 2 allows
/// up to 4 GiB, which no reader should allocate on a file's say-so).
pub const MAX_HEADER: usize = 1 << 24;

/// Reads the start of a `.npy` file through the end of its header (what [`parse`] needs, and
/// no more than [`MAX_HEADER`] of it). A file shorter than its header comes back short, for
/// `parse` to name.
///
/// # Errors
///
/// A read error of `r`.
pub fn read_head(r: &mut impl std::io::Read) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut head = Vec::new();
    r.by_ref().take(12).read_to_end(&mut head)?;
    let (hlen, start) = match head.get(6) {
        Some(1) if head.len() >= 10 => (u16::from_le_bytes([head[8], head[9]]) as usize, 10),
        Some(2 | 3) if head.len() >= 12 => (
            u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize,
            12,
        ),
        _ => return Ok(head),
    };
    let want = start + hlen.min(MAX_HEADER);
    if want > head.len() {
        r.take((want - head.len()) as u64).read_to_end(&mut head)?;
    }
    Ok(head)
}

/// Takes apart the header at the start of `bytes` (the whole file, or at least its header).
///
/// # Errors
///
/// A message for a missing magic, an unknown version, a truncated or unreadable header, and
/// a missing or malformed `descr`, `fortran_order` or `shape`.
pub fn parse(bytes: &[u8]) -> Result<Header, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("not a .npy file (bad magic)".into());
    }
    let (hlen, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    if hlen > MAX_HEADER {
        return Err(format!(
            "a .npy header of {hlen} bytes, more than the {MAX_HEADER} read"
        ));
    }
    if bytes.len() - start < hlen {
        return Err("truncated .npy header".into());
    }
    let header = std::str::from_utf8(&bytes[start..start + hlen]).map_err(|_| "bad .npy header")?;
    let field = |key: &str| -> Option<&str> {
        let at = header.find(&format!("'{key}'"))? + key.len() + 2;
        header[at..]
            .trim_start()
            .strip_prefix(':')
            .map(str::trim_start)
    };
    let descr = field("descr")
        .and_then(|r| r.strip_prefix('\''))
        .and_then(|r| r.split('\'').next())
        .ok_or("no dtype in .npy header")?
        .to_string();
    let fortran = match field("fortran_order") {
        Some(r) if r.starts_with("True") => true,
        Some(r) if r.starts_with("False") => false,
        _ => return Err("no fortran_order in .npy header".into()),
    };
    let dims = field("shape")
        .and_then(|r| r.strip_prefix('('))
        .and_then(|r| r.split(')').next())
        .ok_or("no shape in .npy header")?;
    let shape = dims
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| {
            x.parse()
                .map_err(|_| format!("bad shape ({dims}) in .npy header"))
        })
        .collect::<Result<Vec<usize>, String>>()?;
    Ok(Header {
        data: start + hlen,
        descr,
        fortran,
        shape,
    })
}

/// A numeric dtype read as complex values: complex128 and complex64 (a value per pair of
/// floats), float64 and float32 (imaginary part 0), in either byte order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ComplexElem {
    float: usize,
    complex: bool,
    big: bool,
}

impl ComplexElem {
    /// The element of `descr` (`<c16`, `>c8`, `=f8`, …), if it is one of these.
    pub fn from_descr(descr: &str) -> Option<ComplexElem> {
        let (order, kind) = descr.split_at_checked(1)?;
        let big = match order {
            "<" => false,
            ">" => true,
            "=" => cfg!(target_endian = "big"),
            _ => return None,
        };
        let (float, complex) = match kind {
            "c16" => (8, true),
            "c8" => (4, true),
            "f8" => (8, false),
            "f4" => (4, false),
            _ => return None,
        };
        Some(ComplexElem {
            float,
            complex,
            big,
        })
    }

    /// Bytes per element.
    pub fn bytes(&self) -> usize {
        self.float * if self.complex { 2 } else { 1 }
    }

    /// The value of one element's [`bytes`](Self::bytes) bytes.
    pub fn decode(&self, b: &[u8]) -> num_complex::Complex64 {
        let f = |b: &[u8]| -> f64 {
            if self.float == 8 {
                let a = [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
                if self.big {
                    f64::from_be_bytes(a)
                } else {
                    f64::from_le_bytes(a)
                }
            } else {
                let a = [b[0], b[1], b[2], b[3]];
                f64::from(if self.big {
                    f32::from_be_bytes(a)
                } else {
                    f32::from_le_bytes(a)
                })
            }
        };
        let im = if self.complex {
            f(&b[self.float..])
        } else {
            0.0
        };
        num_complex::Complex64::new(f(b), im)
    }
}

/// The element's `descr`, in its canonical spelling (`<c16`, `>f4`, …).
impl std::fmt::Display for ComplexElem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let order = if self.big { '>' } else { '<' };
        let kind = if self.complex { 'c' } else { 'f' };
        write!(f, "{order}{kind}{}", self.bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_headers_are_read_whole_and_absurd_ones_refused() {
        // A version-2 header of 100,000 bytes (a long shape padding), then data.
        let dict = format!(
            "{{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }}{}\n",
            " ".repeat(100_000)
        );
        let mut f = b"\x93NUMPY\x02\x00".to_vec();
        f.extend_from_slice(&(dict.len() as u32).to_le_bytes());
        f.extend_from_slice(dict.as_bytes());
        f.extend_from_slice(&[0u8; 16]);
        let head = read_head(&mut &f[..]).unwrap();
        assert_eq!(head.len(), 12 + dict.len());
        let h = parse(&head).unwrap();
        assert_eq!((h.data, h.shape), (12 + dict.len(), vec![2, 2]));
        // A header that claims 4 GiB is refused, not allocated.
        let mut big = b"\x93NUMPY\x02\x00".to_vec();
        big.extend_from_slice(&u32::MAX.to_le_bytes());
        big.extend_from_slice(b"{'descr'");
        let head = read_head(&mut &big[..]).unwrap();
        assert!(parse(&head).unwrap_err().contains("more than"));
        // Short and foreign files come back short, for parse to name.
        assert!(parse(&read_head(&mut &b"\x93NUM"[..]).unwrap()).is_err());
        assert!(parse(&read_head(&mut &b"hello world, not numpy"[..]).unwrap()).is_err());
    }

    #[test]
    fn complex_elements_decode_in_both_orders() {
        let (re, im) = (1.25f64, -3.5f64);
        let mut c16le = re.to_le_bytes().to_vec();
        c16le.extend_from_slice(&im.to_le_bytes());
        let mut c16be = re.to_be_bytes().to_vec();
        c16be.extend_from_slice(&im.to_be_bytes());
        let mut c8le = (re as f32).to_le_bytes().to_vec();
        c8le.extend_from_slice(&(im as f32).to_le_bytes());
        let mut c8be = (re as f32).to_be_bytes().to_vec();
        c8be.extend_from_slice(&(im as f32).to_be_bytes());
        let want = num_complex::Complex64::new(re, im);
        let real = num_complex::Complex64::new(re, 0.0);
        let cases: [(&str, Vec<u8>, num_complex::Complex64); 8] = [
            ("<c16", c16le, want),
            (">c16", c16be, want),
            ("<c8", c8le, want),
            (">c8", c8be, want),
            ("<f8", re.to_le_bytes().to_vec(), real),
            (">f8", re.to_be_bytes().to_vec(), real),
            ("<f4", (re as f32).to_le_bytes().to_vec(), real),
            (">f4", (re as f32).to_be_bytes().to_vec(), real),
        ];
        for (d, bytes, v) in cases {
            let e = ComplexElem::from_descr(d).unwrap();
            assert_eq!(e.bytes(), bytes.len(), "{d}");
            assert_eq!(e.decode(&bytes), v, "{d}");
            assert_eq!(e.to_string(), d);
        }
        for d in ["<i4", "|u1", "c16", "", "<c32", "|O"] {
            assert!(ComplexElem::from_descr(d).is_none(), "{d}");
        }
    }

    fn file(version: u8, dict: &str) -> Vec<u8> {
        let mut b = b"\x93NUMPY".to_vec();
        b.push(version);
        b.push(0);
        if version == 1 {
            b.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        } else {
            b.extend_from_slice(&(dict.len() as u32).to_le_bytes());
        }
        b.extend_from_slice(dict.as_bytes());
        b
    }

    #[test]
    fn written_headers_parse_back() {
        for (descr, fortran, shape) in [
            ("<f4", false, vec![7, 7]),
            (">c16", true, vec![3, 4]),
            ("<f8", false, vec![5]),
            ("<f8", false, vec![100_000, 3]),
        ] {
            let h = header(descr, fortran, &shape);
            assert_eq!(h.len() % 64, 0);
            assert_eq!(h.last(), Some(&b'\n'));
            let p = parse(&h).unwrap();
            assert_eq!(
                (p.data, p.descr.as_str(), p.fortran),
                (h.len(), descr, fortran)
            );
            assert_eq!(p.shape, shape);
        }
    }

    #[test]
    fn headers_of_every_version_parse() {
        let dict = "{'descr': '>c16', 'fortran_order': True, 'shape': (3, 4), }";
        for v in [1, 2, 3] {
            let h = parse(&file(v, dict)).unwrap();
            assert_eq!(h.descr, ">c16");
            assert!(h.fortran);
            assert_eq!(h.shape, [3, 4]);
            assert_eq!(h.data, if v == 1 { 10 } else { 12 } + dict.len());
        }
        let one = "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }";
        assert_eq!(parse(&file(1, one)).unwrap().shape, [5]);
        let scalar = "{'descr': '<f4', 'fortran_order': False, 'shape': (), }";
        assert!(parse(&file(1, scalar)).unwrap().shape.is_empty());
    }

    #[test]
    fn malformed_headers_are_refused_with_the_fault() {
        let cases = [
            (b"NUMPY".to_vec(), "bad magic"),
            (file(4, "{}"), "version 4"),
            (
                file(1, "{'fortran_order': False, 'shape': (2, 2), }"),
                "no dtype",
            ),
            (
                file(1, "{'descr': '<f4', 'shape': (2, 2), }"),
                "no fortran_order",
            ),
            (
                file(1, "{'descr': '<f4', 'fortran_order': False, }"),
                "no shape",
            ),
            (
                file(
                    1,
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }",
                ),
                "bad shape",
            ),
            (
                file(
                    1,
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 2), }",
                ),
                "bad shape",
            ),
        ];
        for (bytes, want) in cases {
            let e = parse(&bytes).unwrap_err();
            assert!(e.contains(want), "{e} lacks {want}");
        }
        let mut cut = file(
            1,
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }",
        );
        cut.truncate(30);
        assert!(parse(&cut).unwrap_err().contains("truncated"));
    }
}

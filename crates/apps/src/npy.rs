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

/// A version-1 header (version 2 where it would be longer than 65,535 bytes) for an array
/// of `descr` and `shape`, by rows or (`fortran`) by
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
    let mut h = b"\x93NUMPY".to_vec();
    match u16::try_from(total - 10) {
        Ok(len) => {
            h.extend_from_slice(&[1, 0]);
            h.extend_from_slice(&len.to_le_bytes());
        }
        Err(_) => {
            // Beyond version 1's 16-bit length: version 2, a 32-bit one (as NumPy does).
            let total = (12 + dict.len() + 1).div_ceil(64) * 64;
            h.extend_from_slice(&[2, 0]);
            h.extend_from_slice(&((total - 12) as u32).to_le_bytes());
            h.extend_from_slice(dict.as_bytes());
            h.resize(total - 1, b' ');
            h.push(b'\n');
            return h;
        }
    }
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
    let mut descr = None;
    let mut fortran = None;
    let mut shape = None;
    for (key, value) in dict(header)? {
        let slot_taken = match key.as_str() {
            "descr" => descr.replace(value).is_some(),
            "fortran_order" => fortran.replace(value).is_some(),
            "shape" => shape.replace(value).is_some(),
            k => return Err(format!("unknown key '{k}' in .npy header")),
        };
        if slot_taken {
            return Err(format!("key '{key}' twice in .npy header"));
        }
    }
    let descr = match descr {
        Some(Value::Str(d)) => d,
        Some(Value::Other(v)) if v.starts_with('[') => {
            return Err(format!(
                "a structured dtype {v} in .npy header: not supported"
            ))
        }
        _ => return Err("no dtype in .npy header (descr must be a string such as '<f8')".into()),
    };
    let fortran = match fortran {
        Some(Value::Other(v)) if v == "True" => true,
        Some(Value::Other(v)) if v == "False" => false,
        _ => return Err("no fortran_order in .npy header (True or False)".into()),
    };
    let shape = match shape {
        Some(Value::Tuple(dims)) => dims
            .iter()
            .map(|x| {
                x.bytes()
                    .all(|b| b.is_ascii_digit())
                    .then(|| x.parse::<usize>().ok())
                    .flatten()
                    .ok_or_else(|| format!("bad shape ({}) in .npy header", dims.join(", ")))
            })
            .collect::<Result<Vec<usize>, String>>()?,
        Some(_) => return Err("bad shape in .npy header: not a tuple".into()),
        None => return Err("no shape in .npy header".into()),
    };
    Ok(Header {
        data: start + hlen,
        descr,
        fortran,
        shape,
    })
}

/// A value of a `.npy` header's dictionary.
#[derive(Debug)]
enum Value {
    /// A quoted string, unquoted.
    Str(String),
    /// A tuple's items, as written (`(3, 4)`, `(5,)`, `()`).
    Tuple(Vec<String>),
    /// Anything else, as written (`True`, `False`, a list).
    Other(String),
}

/// The entries of the Python dictionary literal that a `.npy` header holds (`{'descr': '<f8',
/// 'fortran_order': False, 'shape': (3, 4), }`, with either kind of quote), followed by
/// nothing but blanks, in order.
fn dict(text: &str) -> Result<Vec<(String, Value)>, String> {
    let bad = |what: &str| format!("malformed .npy header ({what}): {}", text.trim_end());
    let mut rest = text
        .trim_start()
        .strip_prefix('{')
        .ok_or_else(|| bad("no '{'"))?;
    let mut out = Vec::new();
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix('}') {
            if !r.trim().is_empty() {
                return Err(bad("text after the dictionary"));
            }
            return Ok(out);
        }
        let (key, r) = quoted(rest).ok_or_else(|| bad("a key that is not a quoted string"))?;
        rest = r
            .trim_start()
            .strip_prefix(':')
            .ok_or_else(|| bad("no ':' after a key"))?;
        rest = rest.trim_start();
        let (value, r) = if let Some((v, r)) = quoted(rest) {
            (Value::Str(v), r)
        } else if let Some(r) = rest.strip_prefix('(') {
            let close = r.find(')').ok_or_else(|| bad("a tuple without ')'"))?;
            let items = r[..close]
                .split(',')
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(String::from)
                .collect();
            (Value::Tuple(items), &r[close + 1..])
        } else if rest.starts_with('[') {
            let close = rest.rfind(']').ok_or_else(|| bad("a list without ']'"))?;
            (Value::Other(rest[..=close].to_string()), &rest[close + 1..])
        } else {
            let end = rest
                .find([',', '}'])
                .ok_or_else(|| bad("no ',' or '}' after a value"))?;
            (Value::Other(rest[..end].trim().to_string()), &rest[end..])
        };
        out.push((key, value));
        rest = r.trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with('}') {
            return Err(bad("no ',' or '}' after a value"));
        }
    }
}

/// A string in single or double quotes at the start of `s` (no escapes: none of a header's
/// strings needs one), and what follows it.
fn quoted(s: &str) -> Option<(String, &str)> {
    let q = s.chars().next().filter(|&c| c == '\'' || c == '"')?;
    let body = &s[1..];
    let end = body.find(q)?;
    Some((body[..end].to_string(), &body[end + 1..]))
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
        // A header this writes beyond 65,535 bytes (30,000 dimensions) is version 2 and reads
        // back whole; a short one stays version 1.
        let shape = vec![1usize; 30_000];
        let h = header("<f8", false, &shape);
        assert_eq!((h[6], h.len() % 64), (2, 0));
        assert_eq!(parse(&h).unwrap().shape, shape);
        let h = header("<f8", true, &[3, 4]);
        assert_eq!((h[6], h.len() % 64), (1, 0));
        let p = parse(&h).unwrap();
        assert_eq!((p.shape, p.fortran), (vec![3, 4], true));
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
        // Double quotes, no trailing comma, other spacing: NumPy reads these too.
        let other = "{\"descr\":\"<c8\",\"fortran_order\":True,\"shape\":(2,3)}  \n";
        let h = parse(&file(1, other)).unwrap();
        assert_eq!(
            (h.descr.as_str(), h.fortran, h.shape),
            ("<c8", true, vec![2, 3])
        );
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
        let more = [
            (
                "{'descr':'<c16','fortran_order':False,'shape':(8,8",
                "malformed",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), } GARBAGE",
                "text after",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (+8, 8), }",
                "bad shape",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'shape': (4, 4)}",
                "twice",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'x': 1}",
                "unknown key",
            ),
            (
                "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }",
                "structured",
            ),
            (
                "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 2), }",
                "fortran_order",
            ),
        ];
        let cases = cases
            .into_iter()
            .chain(more.into_iter().map(|(d, w)| (file(1, d), w)));
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

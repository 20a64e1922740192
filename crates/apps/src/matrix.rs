//! Distance matrix storage and file formats.
//!
//! In memory a matrix is N×N `f32`, row-major: half the memory of `f64` (a 35339² matrix is
//! 5 GB instead of 10) and more than the precision of SPIDAL's int16 files. On disk:
//! - SPIDAL binary (`.bin` and anything unrecognised): N² int16 values `round(d · 32767)`,
//!   little-endian by default or big-endian (SPIDAL's `IsBigEndian`); distances are clamped to
//!   [0, 1] on writing, as the format cannot hold more. N comes from the file size.
//! - NumPy `.npy`: written as 2-D `<f4`; read as `<f4`, `<f8`, `<i2` (scaled like SPIDAL's).
//! - CSV (`.csv`, `.txt`): N lines of N comma-separated numbers.

use std::fmt::Write as _;
use std::path::Path;

/// A square distance matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct DistMatrix {
    /// Number of points.
    pub n: usize,
    /// Row-major N×N distances.
    pub data: Vec<f32>,
}

impl DistMatrix {
    /// Wraps row-major data; panics unless it is N×N.
    pub fn new(n: usize, data: Vec<f32>) -> DistMatrix {
        assert_eq!(data.len(), n * n, "matrix data is not {n}x{n}");
        DistMatrix { n, data }
    }

    /// Distance between i and j.
    #[inline]
    pub fn get(&self, i: usize, j: usize) -> f32 {
        self.data[i * self.n + j]
    }

    /// Row i.
    #[inline]
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.n..(i + 1) * self.n]
    }

    /// Euclidean distances of the rows of an n×d point array.
    pub fn euclidean(points: &[f64], d: usize) -> DistMatrix {
        let n = points.len() / d;
        let mut data = vec![0f32; n * n];
        for i in 0..n {
            for j in 0..n {
                let s: f64 = (0..d)
                    .map(|k| (points[i * d + k] - points[j * d + k]).powi(2))
                    .sum();
                data[i * n + j] = s.sqrt() as f32;
            }
        }
        DistMatrix { n, data }
    }
}

/// File formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// SPIDAL int16 little-endian.
    SpidalLe,
    /// SPIDAL int16 big-endian.
    SpidalBe,
    /// NumPy.
    Npy,
    /// Comma-separated text.
    Csv,
}

impl Format {
    /// The format implied by a path's extension (SPIDAL binary unless `.npy`, `.csv`, `.txt`).
    pub fn from_path(path: &Path, big_endian: bool) -> Format {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
        {
            Some(e) if e == "npy" => Format::Npy,
            Some(e) if e == "csv" || e == "txt" => Format::Csv,
            _ if big_endian => Format::SpidalBe,
            _ => Format::SpidalLe,
        }
    }
}

type Res<T> = crate::Result<T>;

fn ferr(path: &Path, msg: impl std::fmt::Display) -> crate::Error {
    crate::Error::format(path.display(), 0, msg.to_string())
}

/// Encodes as SPIDAL int16.
pub fn to_spidal(m: &DistMatrix, big_endian: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(m.data.len() * 2);
    for &d in &m.data {
        let v = (f64::from(d).clamp(0.0, 1.0) * 32767.0).round() as i16;
        out.extend_from_slice(&if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        });
    }
    out
}

/// Decodes SPIDAL int16 bytes; `expect_n` checks the size when the caller knows N.
pub fn from_spidal(
    bytes: &[u8],
    big_endian: bool,
    expect_n: Option<usize>,
    path: &Path,
) -> Res<DistMatrix> {
    if let Some(n) = expect_n {
        let want = n * n * 2;
        if bytes.len() < want {
            return Err(ferr(
                path,
                format!(
                    "truncated: a {n}x{n} int16 matrix needs {want} bytes, the file has {}",
                    bytes.len()
                ),
            ));
        }
        if bytes.len() > want {
            return Err(ferr(
                path,
                format!(
                    "wrong size: a {n}x{n} int16 matrix needs {want} bytes, the file has {}",
                    bytes.len()
                ),
            ));
        }
    }
    if bytes.len() % 2 != 0 {
        return Err(ferr(
            path,
            format!(
                "truncated: {} bytes is not a whole number of int16 values",
                bytes.len()
            ),
        ));
    }
    let count = bytes.len() / 2;
    let n = (count as f64).sqrt().round() as usize;
    if n * n != count {
        return Err(ferr(path, format!("wrong size: {count} int16 values do not make a square matrix (truncated, or not a distance matrix)")));
    }
    if n == 0 {
        return Err(ferr(path, "empty matrix file"));
    }
    let data = bytes
        .chunks_exact(2)
        .map(|c| {
            let v = if big_endian {
                i16::from_be_bytes([c[0], c[1]])
            } else {
                i16::from_le_bytes([c[0], c[1]])
            };
            f32::from(v) / 32767.0
        })
        .collect();
    Ok(DistMatrix { n, data })
}

/// Encodes as a 2-D `<f4` `.npy`.
pub fn to_npy(m: &DistMatrix) -> Vec<u8> {
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}",
        m.n, m.n
    );
    // Pad so that magic(6)+version(2)+len(2)+header is a multiple of 64, ending in '\n'.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + m.data.len() * 4);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for &d in &m.data {
        out.extend_from_slice(&d.to_le_bytes());
    }
    out
}

/// Decodes a 2-D square `.npy` of `<f4`, `<f8` or `<i2`, C order.
pub fn from_npy(bytes: &[u8], path: &Path) -> Res<DistMatrix> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(ferr(path, "not a .npy file (bad magic)"));
    }
    let (hlen, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(ferr(path, format!("unsupported .npy version {v}"))),
    };
    if bytes.len() < start + hlen {
        return Err(ferr(path, "truncated .npy header"));
    }
    let header = std::str::from_utf8(&bytes[start..start + hlen])
        .map_err(|_| ferr(path, "bad .npy header"))?;
    let field = |key: &str| -> Option<&str> {
        let at = header.find(&format!("'{key}'"))? + key.len() + 2;
        let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
        Some(rest)
    };
    let descr = field("descr")
        .and_then(|r| r.strip_prefix('\''))
        .and_then(|r| r.split('\'').next());
    let width = match descr {
        Some("<f4") => 4,
        Some("<f8") => 8,
        Some("<i2") => 2,
        Some(d) => {
            return Err(ferr(
                path,
                format!("unsupported .npy dtype {d}: use <f4, <f8 or <i2"),
            ))
        }
        None => return Err(ferr(path, "no dtype in .npy header")),
    };
    if field("fortran_order").is_some_and(|r| r.starts_with("True")) {
        return Err(ferr(path, "Fortran-order .npy is not supported"));
    }
    let shape: Vec<usize> = field("shape")
        .and_then(|r| r.strip_prefix('('))
        .and_then(|r| r.split(')').next())
        .map(|s| {
            s.split(',')
                .filter(|x| !x.trim().is_empty())
                .filter_map(|x| x.trim().parse().ok())
                .collect()
        })
        .ok_or_else(|| ferr(path, "no shape in .npy header"))?;
    if shape.len() != 2 || shape[0] != shape[1] {
        return Err(ferr(
            path,
            format!("wrong size: a distance matrix must be square and 2-D, shape is {shape:?}"),
        ));
    }
    let n = shape[0];
    let body = &bytes[start + hlen..];
    let want = n * n * width;
    if body.len() < want {
        return Err(ferr(
            path,
            format!(
                "truncated: shape ({n}, {n}) needs {want} data bytes, the file has {}",
                body.len()
            ),
        ));
    }
    if body.len() > want {
        return Err(ferr(
            path,
            format!(
                "wrong size: shape ({n}, {n}) needs {want} data bytes, the file has {}",
                body.len()
            ),
        ));
    }
    let data: Vec<f32> = match width {
        4 => body
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        8 => body
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")) as f32)
            .collect(),
        _ => body
            .chunks_exact(2)
            .map(|c| f32::from(i16::from_le_bytes([c[0], c[1]])) / 32767.0)
            .collect(),
    };
    Ok(DistMatrix { n, data })
}

/// Encodes as CSV.
pub fn to_csv(m: &DistMatrix) -> String {
    let mut s = String::new();
    for i in 0..m.n {
        for (j, d) in m.row(i).iter().enumerate() {
            if j > 0 {
                s.push(',');
            }
            let _ = write!(s, "{d}");
        }
        s.push('\n');
    }
    s
}

/// Decodes CSV (commas, or white space), checking that it is square.
pub fn from_csv(text: &str, path: &Path) -> Res<DistMatrix> {
    let mut data = Vec::new();
    let mut n = 0usize;
    let mut rows = 0usize;
    for (k, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let mut count = 0;
        for tok in line
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|t| !t.is_empty())
        {
            let v: f32 = tok
                .parse()
                .map_err(|_| ferr(path, format!("line {}: not a number: {tok:?}", k + 1)))?;
            data.push(v);
            count += 1;
        }
        if rows == 0 {
            n = count;
        } else if count != n {
            return Err(ferr(
                path,
                format!(
                    "line {}: wrong size: {count} values, the first row has {n}",
                    k + 1
                ),
            ));
        }
        rows += 1;
    }
    if rows == 0 {
        return Err(ferr(path, "empty matrix file"));
    }
    if rows != n {
        return Err(ferr(
            path,
            format!("wrong size: {rows} rows of {n} values is not square (truncated?)"),
        ));
    }
    Ok(DistMatrix { n, data })
}

/// Writes a matrix in the format implied by the path.
pub fn write(path: &Path, m: &DistMatrix, big_endian: bool) -> Res<()> {
    let bytes = match Format::from_path(path, big_endian) {
        Format::SpidalLe => to_spidal(m, false),
        Format::SpidalBe => to_spidal(m, true),
        Format::Npy => to_npy(m),
        Format::Csv => to_csv(m).into_bytes(),
    };
    std::fs::write(path, bytes).map_err(|e| crate::Error::io(path, "writing", e))
}

/// Reads a matrix in the format implied by the path; `expect_n` checks the size of SPIDAL files.
pub fn read(path: &Path, big_endian: bool, expect_n: Option<usize>) -> Res<DistMatrix> {
    let bytes = std::fs::read(path).map_err(|e| crate::Error::io(path, "reading", e))?;
    let m = match Format::from_path(path, big_endian) {
        Format::SpidalLe => from_spidal(&bytes, false, expect_n, path)?,
        Format::SpidalBe => from_spidal(&bytes, true, expect_n, path)?,
        Format::Npy => from_npy(&bytes, path)?,
        Format::Csv => from_csv(&String::from_utf8_lossy(&bytes), path)?,
    };
    if let Some(n) = expect_n {
        if m.n != n {
            return Err(ferr(
                path,
                format!(
                    "wrong size: expected {n}x{n}, the file holds {}x{}",
                    m.n, m.n
                ),
            ));
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> DistMatrix {
        let n = 5;
        let mut d = vec![0f32; n * n];
        for i in 0..n {
            for j in 0..n {
                d[i * n + j] = if i == j {
                    0.0
                } else {
                    ((i + j) as f32 * 0.137) % 1.0
                };
            }
        }
        DistMatrix::new(n, d)
    }

    #[test]
    fn round_trips() {
        let dir = std::env::temp_dir().join(format!("tiers-apps-matrix-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m = sample();
        for (name, be, tol) in [
            ("m.bin", false, 0.6 / 32767.0),
            ("m.bin", true, 0.6 / 32767.0),
            ("m.npy", false, 0.0),
            ("m.csv", false, 0.0),
        ] {
            let p = dir.join(name);
            write(&p, &m, be).unwrap();
            let r = read(&p, be, Some(5)).unwrap();
            assert_eq!(r.n, 5);
            for (a, b) in m.data.iter().zip(&r.data) {
                assert!((a - b).abs() <= tol as f32, "{name} be={be}: {a} vs {b}");
            }
        }
        // Endianness matters: reading big-endian bytes as little-endian gives other values.
        let p = dir.join("be.bin");
        write(&p, &m, true).unwrap();
        let wrong = read(&p, false, None).unwrap();
        assert_ne!(wrong.data, read(&p, true, None).unwrap().data);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn clear_errors() {
        let p = Path::new("d.bin");
        let bytes = to_spidal(&sample(), false);
        let e = from_spidal(&bytes[..bytes.len() - 2], false, Some(5), p)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("d.bin: truncated"), "{e}");
        let e = from_spidal(&bytes[..bytes.len() - 2], false, None, p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("d.bin: wrong size") && e.contains("square"),
            "{e}"
        );
        let e = from_spidal(&bytes[..bytes.len() - 1], false, None, p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("truncated"), "{e}");
        let e = from_spidal(&bytes, false, Some(4), p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("wrong size"), "{e}");
        let q = Path::new("d.npy");
        let npy = to_npy(&sample());
        let e = from_npy(&npy[..npy.len() - 3], q).unwrap_err().to_string();
        assert!(e.starts_with("d.npy: truncated"), "{e}");
        let mut long = npy.clone();
        long.extend_from_slice(&[0; 4]);
        let e = from_npy(&long, q).unwrap_err().to_string();
        assert!(e.starts_with("d.npy: wrong size"), "{e}");
        let e = from_npy(b"hello world", q).unwrap_err().to_string();
        assert!(e.contains("bad magic"), "{e}");
        let c = Path::new("d.csv");
        let e = from_csv("0,1\n1,0,2\n", c).unwrap_err().to_string();
        assert!(e.contains("d.csv: line 2: wrong size"), "{e}");
        let e = from_csv("0,1,2\n1,0,2\n", c).unwrap_err().to_string();
        assert!(e.contains("not square"), "{e}");
        let e = from_csv("0,x\n1,0\n", c).unwrap_err().to_string();
        assert!(e.contains("not a number"), "{e}");
    }
}

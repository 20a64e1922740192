//! Distance matrix storage and file formats.
//!
//! In memory a matrix is N×N `f32`, row-major: half the memory of `f64` (a 35339² matrix is
//! 5 GB instead of 10) and more than the precision of SPIDAL's int16 files. On disk:
//! - SPIDAL binary (`.bin`): N² int16 values `round(d · 32767)`,
//!   little-endian by default or big-endian (SPIDAL's `IsBigEndian`); distances are clamped to
//!   [0, 1] on writing, as the format cannot hold more. N comes from the file size.
//! - NumPy `.npy`: written as 2-D `<f4`; read as `<f4`, `<f8`, `<i2` (scaled like SPIDAL's).
//! - CSV (`.csv`, `.txt`): N lines of N comma-separated numbers.
//!
//! Any other extension is an error: a typo must not turn a FASTA file into a matrix. Every
//! matrix read is [validated](DistMatrix::validate): a distance matrix has finite,
//! non-negative entries, a zero diagonal and is symmetric; the first entry that is not is
//! named.

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
    /// Wraps row-major data; panics unless it is N×N (a programming error, not an input
    /// error: files go through [`read`], which checks).
    pub fn new(n: usize, data: Vec<f32>) -> DistMatrix {
        assert_eq!(data.len(), n * n, "matrix data is not {n}x{n}");
        DistMatrix { n, data }
    }

    /// Checks that this is a distance matrix: at least 1×1, every entry finite and
    /// non-negative, a zero diagonal and symmetric (to a relative 1e-6, the precision of
    /// `f32` text). `file` names the input in the error, which gives the first offending entry.
    pub fn validate(&self, file: &str) -> crate::Result<()> {
        let n = self.n;
        if n == 0 {
            return Err(crate::Error::format(file, 0, "empty matrix (0x0)"));
        }
        let bad = |i: usize, j: usize, what: &str| {
            crate::Error::format(
                file,
                0,
                format!("entry ({i}, {j}) = {} {what}", self.data[i * n + j]),
            )
        };
        for i in 0..n {
            let row = self.row(i);
            for (j, &v) in row.iter().enumerate() {
                if v.is_infinite() {
                    // Also what a finite number of the file beyond f32's range reads as.
                    return Err(bad(
                        i,
                        j,
                        "is not a finite number, or the file's number is beyond the largest 32-bit float (3.4e38)",
                    ));
                }
                if v.is_nan() {
                    return Err(bad(i, j, "is not a number"));
                }
                if v < 0.0 {
                    return Err(bad(i, j, "is negative: distances are at least 0"));
                }
            }
            if row[i] != 0.0 {
                return Err(bad(
                    i,
                    i,
                    "is on the diagonal: a point's distance to itself is 0",
                ));
            }
        }
        if let Some((i, j)) = self.asymmetry() {
            return Err(crate::Error::format(
                file,
                0,
                format!(
                    "not symmetric: entry ({i}, {j}) = {} but ({j}, {i}) = {} (--symmetrize averages the two)",
                    self.get(i, j),
                    self.get(j, i)
                ),
            ));
        }
        Ok(())
    }

    /// The first pair (i < j) whose two entries differ by more than a relative 1e-6.
    pub fn asymmetry(&self) -> Option<(usize, usize)> {
        let n = self.n;
        (0..n)
            .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
            .find(|&(i, j)| {
                let (a, b) = (self.get(i, j), self.get(j, i));
                (a - b).abs() > 1e-6 * a.abs().max(b.abs()).max(1.0)
            })
    }

    /// Replaces d(i, j) and d(j, i) by their mean; returns how many pairs differed.
    pub fn symmetrize(&mut self) -> usize {
        let n = self.n;
        let mut changed = 0;
        for i in 0..n {
            for j in i + 1..n {
                let (a, b) = (self.data[i * n + j], self.data[j * n + i]);
                if a != b {
                    let m = 0.5 * (a + b);
                    self.data[i * n + j] = m;
                    self.data[j * n + i] = m;
                    changed += 1;
                }
            }
        }
        changed
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
    ///
    /// # Panics
    ///
    /// When `d` is 0 or the points are not whole (`len % d != 0`): a fault of the caller
    /// (the commands pass points they made), which would otherwise drop coordinates silently.
    pub fn euclidean(points: &[f64], d: usize) -> DistMatrix {
        crate::compare::whole_points(points.len(), d);
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
    /// The format named by a path's extension: `.bin` (SPIDAL int16, `big_endian` chooses the
    /// byte order), `.npy`, `.csv` or `.txt`; anything else is an error.
    pub fn from_path(path: &Path, big_endian: bool) -> crate::Result<Format> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .as_deref()
        {
            Some("bin") if big_endian => Ok(Format::SpidalBe),
            Some("bin") => Ok(Format::SpidalLe),
            Some("npy") => Ok(Format::Npy),
            Some("csv" | "txt") => Ok(Format::Csv),
            _ => Err(crate::Error::Invalid(format!(
                "{}: unknown matrix format: name it .bin (SPIDAL int16), .npy or .csv",
                path.display()
            ))),
        }
    }
}

type Res<T> = crate::Result<T>;

fn ferr(path: &Path, msg: impl std::fmt::Display) -> crate::Error {
    crate::Error::format(path.display(), 0, msg.to_string())
}

/// Encodes as SPIDAL int16.
pub fn to_spidal(m: &DistMatrix, big_endian: bool) -> Vec<u8> {
    spidal_values(&m.data, big_endian)
}

/// SPIDAL int16 bytes of distances (a whole matrix, or some of its rows).
pub fn spidal_values(values: &[f32], big_endian: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * 2);
    for &d in values {
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
        let want = n
            .checked_mul(n)
            .and_then(|c| c.checked_mul(2))
            .ok_or_else(|| ferr(path, format!("a {n}x{n} matrix is too large")))?;
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
    let mut data = Vec::with_capacity(count);
    for (k, c) in bytes.chunks_exact(2).enumerate() {
        let v = if big_endian {
            i16::from_be_bytes([c[0], c[1]])
        } else {
            i16::from_le_bytes([c[0], c[1]])
        };
        if v < 0 {
            return Err(ferr(
                path,
                format!(
                    "entry ({}, {}) is the negative int16 {v}: not a SPIDAL distance file of this byte order ({}; try {})",
                    k / n,
                    k % n,
                    if big_endian { "big-endian" } else { "little-endian" },
                    if big_endian { "without --big-endian" } else { "--big-endian" }
                ),
            ));
        }
        data.push(f32::from(v) / 32767.0);
    }
    Ok(DistMatrix { n, data })
}

/// Encodes as a 2-D `<f4` `.npy`.
pub fn to_npy(m: &DistMatrix) -> Vec<u8> {
    let mut out = npy_header(m.n);
    out.extend(npy_values(&m.data));
    out
}

/// The header of an N×N `<f4` `.npy` (its data follows, row-major).
pub fn npy_header(n: usize) -> Vec<u8> {
    crate::npy::header("<f4", false, &[n, n])
}

/// Little-endian `<f4` bytes of distances.
pub fn npy_values(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|d| d.to_le_bytes()).collect()
}

/// Decodes a 2-D square `.npy` of `<f4`, `<f8` or `<i2`, in C or Fortran order.
pub fn from_npy(bytes: &[u8], path: &Path) -> Res<DistMatrix> {
    let NpyLayout {
        data,
        n,
        width,
        fortran,
    } = npy_layout(bytes, path)?;
    let body = &bytes[data..];
    let want = n
        .checked_mul(n)
        .and_then(|c| c.checked_mul(width))
        .ok_or_else(|| ferr(path, format!("shape ({n}, {n}) is too large")))?;
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
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32)
            .collect(),
        _ => body
            .chunks_exact(2)
            .map(|c| f32::from(i16::from_le_bytes([c[0], c[1]])) / 32767.0)
            .collect(),
    };
    let data = if fortran {
        // Stored by columns: entry (i, j) is data[j·n + i].
        let mut rows = vec![0f32; data.len()];
        for (j, col) in data.chunks_exact(n.max(1)).enumerate() {
            for (i, &v) in col.iter().enumerate() {
                rows[i * n + j] = v;
            }
        }
        rows
    } else {
        data
    };
    Ok(DistMatrix { n, data })
}

/// How a square 2-D `.npy` holds its matrix, from the file's leading bytes (the whole file,
/// or at least its header).
struct NpyLayout {
    /// Where the data starts.
    data: usize,
    /// N.
    n: usize,
    /// Bytes per element: 2, 4 or 8.
    width: usize,
    /// Column-major (`fortran_order: True`): entry (i, j) is element j·N + i.
    fortran: bool,
}

fn npy_layout(bytes: &[u8], path: &Path) -> Res<NpyLayout> {
    let h = crate::npy::parse(bytes).map_err(|e| ferr(path, e))?;
    let width = match h.descr.as_str() {
        "<f4" => 4,
        "<f8" => 8,
        "<i2" => 2,
        d => {
            return Err(ferr(
                path,
                format!("unsupported .npy dtype {d}: use <f4, <f8 or <i2"),
            ))
        }
    };
    let shape = h.shape;
    if shape.len() != 2 || shape[0] != shape[1] {
        return Err(ferr(
            path,
            format!("wrong size: a distance matrix must be square and 2-D, shape is {shape:?}"),
        ));
    }
    Ok(NpyLayout {
        data: h.data,
        n: shape[0],
        width,
        fortran: h.fortran,
    })
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
        // Comma-separated when the line has a comma (each field trimmed; an empty field is an
        // error, not skipped: skipping it would shift the columns after it), else separated
        // by white space.
        let toks: Vec<&str> = if line.contains(',') {
            // One comma ending the line is a common export's, not an empty field.
            let line = line.strip_suffix(',').unwrap_or(line);
            line.split(',').map(str::trim).collect()
        } else {
            line.split_whitespace().collect()
        };
        if let Some(i) = toks.iter().position(|t| t.is_empty()) {
            return Err(ferr(
                path,
                format!("line {}: field {} is empty", k + 1, i + 1),
            ));
        }
        for tok in toks {
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

/// The bytes of a matrix in the format named by the path's extension.
pub fn encode(path: &Path, m: &DistMatrix, big_endian: bool) -> Res<Vec<u8>> {
    Ok(match Format::from_path(path, big_endian)? {
        Format::SpidalLe => to_spidal(m, false),
        Format::SpidalBe => to_spidal(m, true),
        Format::Npy => to_npy(m),
        Format::Csv => to_csv(m).into_bytes(),
    })
}

/// Writes a matrix in the format named by the path's extension, atomically (see
/// [`files::write_atomic`](crate::files::write_atomic)).
pub fn write(path: &Path, m: &DistMatrix, big_endian: bool) -> Res<()> {
    crate::files::write_atomic(path, &encode(path, m, big_endian)?)
}

/// Reads a matrix in the format named by the path's extension and [validates](DistMatrix::validate)
/// it; `expect_n` checks the size when the caller knows N.
pub fn read(path: &Path, big_endian: bool, expect_n: Option<usize>) -> Res<DistMatrix> {
    let m = read_unchecked(path, big_endian, expect_n)?;
    m.validate(&path.display().to_string())?;
    Ok(m)
}

/// [`read`], averaging d(i, j) and d(j, i) where they differ before validating; also returns
/// how many pairs were averaged.
pub fn read_symmetrized(
    path: &Path,
    big_endian: bool,
    expect_n: Option<usize>,
) -> Res<(DistMatrix, usize)> {
    let mut m = read_unchecked(path, big_endian, expect_n)?;
    let changed = m.symmetrize();
    m.validate(&path.display().to_string())?;
    Ok((m, changed))
}

fn read_unchecked(path: &Path, big_endian: bool, expect_n: Option<usize>) -> Res<DistMatrix> {
    let format = Format::from_path(path, big_endian)?;
    let bytes = crate::files::read_input(path)?;
    let m = match format {
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

/// Reads rows `rows` of an N×N matrix file without reading the others (SPIDAL `.bin` or
/// `.npy`, by offset): a rank of a job holds O(N²/p) of a matrix, never all of it. N comes
/// from the file (its size, or the `.npy` header); the rows read are checked as far as they
/// go (finite, non-negative, zero on the diagonal); symmetry needs the whole matrix, so
/// [`read`] checks it and this does not.
pub fn read_rows(
    path: &Path,
    big_endian: bool,
    rows: std::ops::Range<usize>,
) -> Res<crate::distance::RowBlock> {
    use std::io::{Read, Seek, SeekFrom};
    let format = Format::from_path(path, big_endian)?;
    let io = |e| crate::Error::io(path, "reading", e);
    let mut f = std::fs::File::open(path).map_err(io)?;
    let size = f.metadata().map_err(io)?.len();
    let (start, elem, n, fortran) = match format {
        Format::Csv => {
            // Text has no offsets: the whole matrix is read (CSV is for small matrices)
            // and the rows taken from it.
            let m = read(path, big_endian, None)?;
            if rows.end > m.n || rows.start > rows.end {
                return Err(crate::Error::Invalid(format!(
                    "{}: rows {rows:?} of a {n}x{n} matrix",
                    path.display(),
                    n = m.n
                )));
            }
            let data = (rows.clone()).flat_map(|i| m.row(i).to_vec()).collect();
            return Ok(crate::distance::RowBlock { n: m.n, rows, data });
        }
        Format::SpidalLe | Format::SpidalBe => {
            let count = size / 2;
            let n = (count as f64).sqrt().round() as u64;
            if size % 2 != 0 || n * n != count || n == 0 {
                return Err(ferr(
                    path,
                    format!("wrong size: {size} bytes are not a square int16 matrix"),
                ));
            }
            (0u64, 2u64, n as usize, false)
        }
        Format::Npy => {
            // The header is small: read it and judge it as from_npy does.
            let head = crate::npy::read_head(&mut f).map_err(io)?;
            let l = npy_layout(&head, path)?;
            (l.data as u64, l.width as u64, l.n, l.fortran)
        }
    };
    if rows.end > n || rows.start > rows.end {
        return Err(crate::Error::Invalid(format!(
            "{}: rows {rows:?} of a {n}x{n} matrix",
            path.display()
        )));
    }
    if n == 0 {
        return Err(ferr(path, "empty matrix (0x0)"));
    }
    let want = (n as u64)
        .checked_mul(n as u64)
        .and_then(|x| x.checked_mul(elem))
        .and_then(|x| x.checked_add(start));
    if want != Some(size) {
        let needs = want.map_or("more bytes than a file can hold".to_string(), |w| {
            format!("{w} bytes")
        });
        return Err(ferr(
            path,
            format!("wrong size: a {n}x{n} matrix needs {needs}, the file has {size}"),
        ));
    }
    let len = rows.len();
    crate::limits::check_alloc(
        "the rows",
        crate::limits::mul("rows x n", len, n)?,
        4 + elem as usize,
    )?;
    let mut bytes = vec![0u8; len * n * elem as usize];
    if fortran {
        // Row i of a column-major matrix is strided: read each column's part of the rows
        // (one read of len elements per column) and lay it out row by row.
        let e = elem as usize;
        let mut part = vec![0u8; len * e];
        for c in 0..n {
            let at = start + (c as u64 * n as u64 + rows.start as u64) * elem;
            f.seek(SeekFrom::Start(at)).map_err(io)?;
            f.read_exact(&mut part).map_err(io)?;
            for (k, v) in part.chunks_exact(e).enumerate() {
                bytes[(k * n + c) * e..][..e].copy_from_slice(v);
            }
        }
    } else {
        f.seek(SeekFrom::Start(start + rows.start as u64 * n as u64 * elem))
            .map_err(io)?;
        f.read_exact(&mut bytes).map_err(io)?;
    }
    // The values as `from_npy` reads them: <f4 as is, <f8 narrowed, <i2 scaled to [0, 1].
    let data: Vec<f32> = match (format, elem) {
        (Format::Npy, 4) => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        (Format::Npy, 8) => bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32)
            .collect(),
        (Format::Npy, _) => bytes
            .chunks_exact(2)
            .map(|c| f32::from(i16::from_le_bytes([c[0], c[1]])) / 32767.0)
            .collect(),
        _ => from_spidal_rows(&bytes, format == Format::SpidalBe, n, rows.start, path)?,
    };
    for (k, row) in data.chunks(n.max(1)).enumerate() {
        let i = rows.start + k;
        for (j, &v) in row.iter().enumerate() {
            if !(v.is_finite() && v >= 0.0) || (i == j && v != 0.0) {
                return Err(ferr(
                    path,
                    format!("entry ({i}, {j}) = {v} is not a distance (finite, non-negative, 0 on the diagonal)"),
                ));
            }
        }
    }
    Ok(crate::distance::RowBlock { n, rows, data })
}

/// SPIDAL int16 rows (starting at row `first` of `n`) as distances; a negative value is
/// reported as a wrong byte order.
fn from_spidal_rows(
    bytes: &[u8],
    big_endian: bool,
    n: usize,
    first: usize,
    path: &Path,
) -> Res<Vec<f32>> {
    let mut out = Vec::with_capacity(bytes.len() / 2);
    for (k, c) in bytes.chunks_exact(2).enumerate() {
        let v = if big_endian {
            i16::from_be_bytes([c[0], c[1]])
        } else {
            i16::from_le_bytes([c[0], c[1]])
        };
        if v < 0 {
            return Err(ferr(
                path,
                format!(
                    "entry ({}, {}) is the negative int16 {v}: not a SPIDAL distance file of this byte order (try {})",
                    first + k / n,
                    k % n,
                    if big_endian { "without --big-endian" } else { "--big-endian" }
                ),
            ));
        }
        out.push(f32::from(v) / 32767.0);
    }
    Ok(out)
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
        match read(&p, false, None) {
            Err(e) => assert!(e.to_string().contains("--big-endian"), "{e}"),
            Ok(wrong) => assert_ne!(wrong.data, read(&p, true, None).unwrap().data),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_distance_matrices_pass() {
        let ok = sample();
        assert!(ok.validate("m").is_ok());
        let at = |i: usize, j: usize, v: f32| {
            let mut m = ok.clone();
            m.data[i * m.n + j] = v;
            m.validate("m.csv").unwrap_err().to_string()
        };
        let e = at(1, 2, f32::NAN);
        assert!(e.contains("(1, 2)") && e.contains("not a number"), "{e}");
        let e = at(3, 0, f32::INFINITY);
        assert!(e.contains("(3, 0)") && e.contains("finite"), "{e}");
        // A number beyond f32's range in a file reads as infinite: the message says so.
        let big = from_csv("0,1e39\n1e39,0\n", Path::new("d.csv")).unwrap();
        let e = big.validate("d.csv").unwrap_err().to_string();
        assert!(
            e.contains("(0, 1)") && e.contains("beyond the largest"),
            "{e}"
        );
        let e = at(0, 4, -0.5);
        assert!(e.contains("(0, 4)") && e.contains("negative"), "{e}");
        let e = at(2, 2, 0.1);
        assert!(e.contains("(2, 2)") && e.contains("diagonal"), "{e}");
        let e = at(1, 3, 0.99);
        assert!(e.contains("not symmetric") && e.contains("(1, 3)"), "{e}");
        let e = DistMatrix::new(0, vec![])
            .validate("z")
            .unwrap_err()
            .to_string();
        assert!(e.contains("empty"), "{e}");
        let mut m = ok.clone();
        m.data[3] = 0.9;
        assert_eq!(m.symmetrize(), 1);
        assert!(m.validate("m").is_ok());
        assert_eq!(m.get(0, 3), m.get(3, 0));
    }

    #[test]
    fn fortran_order_npy_reads_as_the_same_matrix_whole_and_by_rows() {
        // Asymmetric on purpose, so that a missed transpose shows.
        let n = 6;
        let entry = |i: usize, j: usize| if i == j { 0.0 } else { (i * 7 + j) as f32 };
        let mut bytes = crate::npy::header("<f4", true, &[n, n]);
        for j in 0..n {
            for i in 0..n {
                bytes.extend(entry(i, j).to_le_bytes());
            }
        }
        let p = Path::new("f.npy");
        let m = from_npy(&bytes, p).unwrap();
        for i in 0..n {
            for j in 0..n {
                assert_eq!(m.get(i, j), entry(i, j), "({i}, {j})");
            }
        }
        let dir = std::env::temp_dir().join(format!("tiers-apps-fortran-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f.npy");
        std::fs::write(&file, &bytes).unwrap();
        for rows in [0..6, 0..0, 2..5, 5..6] {
            let b = read_rows(&file, false, rows.clone()).unwrap();
            assert_eq!(b.data, m.data[rows.start * n..rows.end * n], "{rows:?}");
        }
        assert!(read_rows(&file, false, 4..7).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rows_read_by_offset_are_the_matrix_rows() {
        let dir = std::env::temp_dir().join(format!("tiers-apps-rows-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m = sample();
        for (name, be) in [("m.bin", false), ("b.bin", true), ("m.npy", false)] {
            let p = dir.join(name);
            write(&p, &m, be).unwrap();
            let whole = read(&p, be, None).unwrap();
            for rows in [0..5, 0..0, 1..3, 4..5] {
                let b = read_rows(&p, be, rows.clone()).unwrap();
                assert_eq!(b.n, 5);
                assert_eq!(
                    b.data,
                    whole.data[rows.start * 5..rows.end * 5],
                    "{name} {rows:?}"
                );
            }
            assert!(read_rows(&p, be, 3..6).is_err());
        }
        // A CSV (read whole), and <f8 and <i2 .npy files (by offset) give the rows that one
        // process reads from them.
        let csv = dir.join("m.csv");
        write(&csv, &m, false).unwrap();
        let mut f8 = crate::npy::header("<f8", false, &[5, 5]);
        let mut i2 = crate::npy::header("<i2", false, &[5, 5]);
        for v in &m.data {
            f8.extend_from_slice(&f64::from(*v).to_le_bytes());
            i2.extend_from_slice(&((v * 32767.0).round() as i16).to_le_bytes());
        }
        std::fs::write(dir.join("f8.npy"), f8).unwrap();
        std::fs::write(dir.join("i2.npy"), i2).unwrap();
        for name in ["m.csv", "f8.npy", "i2.npy"] {
            let p = dir.join(name);
            let whole = read(&p, false, None).unwrap();
            for rows in [0..5, 0..0, 1..3, 4..5] {
                let b = read_rows(&p, false, rows.clone()).unwrap();
                assert_eq!(b.n, 5);
                assert_eq!(
                    b.data,
                    whole.data[rows.start * 5..rows.end * 5],
                    "{name} {rows:?}"
                );
            }
            assert!(read_rows(&p, false, 3..6).is_err(), "{name}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn formats_are_named_not_guessed() {
        for name in ["seq.fa", "d", "d.fasta", "d.png"] {
            let e = Format::from_path(Path::new(name), false).unwrap_err();
            assert!(e.to_string().contains("unknown matrix format"), "{e}");
        }
        assert_eq!(
            Format::from_path(Path::new("a.BIN"), true).unwrap(),
            Format::SpidalBe
        );
        assert_eq!(
            Format::from_path(Path::new("a.txt"), false).unwrap(),
            Format::Csv
        );
    }

    #[test]
    fn sizes_that_overflow_are_errors() {
        let header =
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }";
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&(header.len() as u16).to_le_bytes());
        b.extend_from_slice(header.as_bytes());
        let e = from_npy(&b, Path::new("big.npy")).unwrap_err().to_string();
        assert!(e.contains("too large"), "{e}");
        let e = from_spidal(&[0; 8], false, Some(usize::MAX / 2), Path::new("x.bin"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("too large"), "{e}");
        // Read by rows: shapes whose byte counts wrap, and the empty matrix.
        let dir = std::env::temp_dir().join(format!("tiers-rows-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (shape, want) in [
            (
                "(4294967296, 4294967296)",
                "more bytes than a file can hold",
            ),
            (
                "(10000000000, 10000000000)",
                "more bytes than a file can hold",
            ),
            ("(0, 0)", "empty matrix"),
        ] {
            let path = dir.join("m.npy");
            let mut f = crate::npy::header("<f4", false, &[0, 0]);
            let h = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
            f.truncate(10);
            f[8..10].copy_from_slice(&(h.len() as u16).to_le_bytes());
            f.extend_from_slice(h.as_bytes());
            std::fs::write(&path, &f).unwrap();
            let e = read_rows(&path, false, 0..0).unwrap_err().to_string();
            assert!(e.contains(want), "{shape}: {e}");
        }
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
        // An empty field is an error (skipped, it would shift the columns after it); one
        // comma ending a line, and white space around fields, are not.
        let e = from_csv("0,,1\n1,,0\n", c).unwrap_err().to_string();
        assert!(e.contains("line 1: field 2 is empty"), "{e}");
        let m = from_csv("0, 1,\n1 ,0,\n", c).unwrap();
        assert_eq!(m.data, vec![0.0, 1.0, 1.0, 0.0]);
        let m = from_csv("0 1\n1 0\n", c).unwrap();
        assert_eq!(m.data, vec![0.0, 1.0, 1.0, 0.0]);
    }
}

//! FASTA reading and writing.
//!
//! Sequences are kept as upper-case ASCII bytes. Errors name the file and the line, since the
//! inputs come from other tools and a bad line among thousands is otherwise hard to find.

use crate::{Error, Result};
use std::path::Path;

/// One FASTA record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The header line without the leading `>`.
    pub id: String,
    /// The sequence, upper case, no white space.
    pub seq: Vec<u8>,
}

/// Parses FASTA text. `file` is only used in error messages. Accepts IUPAC nucleotide codes
/// and `-`/`.` gaps (which are dropped), upper or lower case; anything else is an error.
pub fn parse(text: &str, file: &str) -> Result<Vec<Record>> {
    let err = |line: usize, msg: String| Error::format(file, line, msg);
    let mut out: Vec<Record> = Vec::new();
    let mut header_line = 0;
    for (k, raw) in text.lines().enumerate() {
        let line_no = k + 1;
        let line = raw.trim_end_matches('\r').trim();
        if line.is_empty() || line.starts_with(';') {
            continue;
        }
        if let Some(h) = line.strip_prefix('>') {
            if let Some(prev) = out.last() {
                if prev.seq.is_empty() {
                    return Err(err(
                        header_line,
                        format!("record {:?} has no sequence", prev.id),
                    ));
                }
            }
            out.push(Record {
                id: h.trim().to_string(),
                seq: Vec::new(),
            });
            header_line = line_no;
            continue;
        }
        let Some(rec) = out.last_mut() else {
            return Err(err(
                line_no,
                "sequence data before the first '>' header".into(),
            ));
        };
        for (col, c) in line.bytes().enumerate() {
            let u = c.to_ascii_uppercase();
            match u {
                b'A' | b'C' | b'G' | b'T' | b'U' | b'N' | b'R' | b'Y' | b'K' | b'M' | b'S'
                | b'W' | b'B' | b'D' | b'H' | b'V' => {
                    rec.seq.push(if u == b'U' { b'T' } else { u })
                }
                b'-' | b'.' | b' ' | b'\t' => {}
                _ => {
                    return Err(err(
                        line_no,
                        format!(
                            "invalid character {:?} in sequence at column {}",
                            c as char,
                            col + 1
                        ),
                    ))
                }
            }
        }
    }
    match out.last() {
        None => Err(err(0, "no FASTA records found".into())),
        Some(r) if r.seq.is_empty() => Err(err(
            header_line,
            format!("record {:?} has no sequence", r.id),
        )),
        _ => Ok(out),
    }
}

/// Reads and parses a FASTA file.
pub fn read(path: &Path) -> Result<Vec<Record>> {
    let name = path.display().to_string();
    let text = crate::files::read_input_text(path)?;
    parse(&text, &name)
}

/// Formats records as FASTA with 70-column lines.
pub fn format(records: &[Record]) -> String {
    let mut s = String::new();
    for r in records {
        s.push('>');
        s.push_str(&r.id);
        s.push('\n');
        for chunk in r.seq.chunks(70) {
            s.push_str(std::str::from_utf8(chunk).unwrap_or("N"));
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_multiline_and_lowercase() {
        let r = parse(">a one\nacgt\nNNu\n\n>b\nGG-A\n", "x.fa").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].id, "a one");
        assert_eq!(r[0].seq, b"ACGTNNT");
        assert_eq!(r[1].seq, b"GGA");
        let again = parse(&format(&r), "y").unwrap();
        assert_eq!(again, r);
    }

    #[test]
    fn errors_name_file_and_line() {
        let line = |e: Error| match e {
            Error::Format { line, .. } => line,
            e => panic!("not a format error: {e}"),
        };
        let e = parse(">a\nACGT\nAC*T\n", "bad.fa").unwrap_err();
        let s = e.to_string();
        assert_eq!(line(e), 3);
        assert!(s.starts_with("bad.fa:3:"), "{s}");
        assert!(s.contains('*'), "{s}");
        let e = parse("ACGT\n>a\nAC\n", "f.fa").unwrap_err();
        assert!(e.to_string().contains("before the first"));
        assert_eq!(line(e), 1);
        let e = parse(">a\n>b\nAC\n", "f.fa").unwrap_err();
        assert!(e.to_string().contains("no sequence"));
        assert_eq!(line(e), 1);
        let e = parse("\n\n", "empty.fa").unwrap_err();
        assert!(e.to_string().contains("empty.fa: no FASTA records"));
    }
}

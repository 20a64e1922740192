//! CPU lists: the kernel's `0-3,8-11` form and Charm++'s `+pemap` grammar, which adds strides
//! and runs: `L[-U[:S[.R]]]` takes, from L to U, a run of R processors every S (so `0-15:4.2`
//! is 0,1,4,5,8,9,12,13). Items are separated by commas; order and repeats are kept, because a
//! map lists processors in the order threads take them.

use std::fmt;

/// A malformed CPU list, with the text that failed and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuListError {
    /// The whole list as given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for CpuListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad cpu list {:?}: {}", self.input, self.reason)
    }
}

impl std::error::Error for CpuListError {}

/// The highest processor number a list may name (Linux's `NR_CPUS` is at most 8192; this
/// leaves room while keeping every sum in the parser far from overflow).
pub const MAX_CPU: usize = 1 << 20;
/// The most entries a list may expand to (repeats included).
pub const MAX_LIST: usize = 1 << 22;

/// Parses a processor map in the `+pemap` grammar (which includes the kernel's list form).
pub fn parse(input: &str) -> Result<Vec<usize>, CpuListError> {
    let err = |reason: String| CpuListError {
        input: input.to_string(),
        reason,
    };
    let num = |s: &str, what: &str| -> Result<usize, CpuListError> {
        s.trim()
            .parse::<usize>()
            .map_err(|_| err(format!("{what} {s:?} is not a number")))
    };
    let mut out = Vec::new();
    for item in input.trim().split(',') {
        let item = item.trim();
        if item.is_empty() {
            if input.trim().is_empty() {
                return Ok(out);
            }
            return Err(err("empty item".into()));
        }
        let (range, step) = match item.split_once(':') {
            Some((r, s)) => (r, Some(s)),
            None => (item, None),
        };
        let (lo, hi) = match range.split_once('-') {
            Some((l, h)) => (num(l, "start")?, num(h, "end")?),
            None => {
                let v = num(range, "processor")?;
                (v, v)
            }
        };
        if hi < lo {
            return Err(err(format!("range {lo}-{hi} runs backwards")));
        }
        let (stride, run) = match step {
            None => (1, 1),
            Some(s) => match s.split_once('.') {
                Some((st, r)) => (num(st, "stride")?, num(r, "run")?),
                None => (num(s, "stride")?, 1),
            },
        };
        if stride == 0 || run == 0 {
            return Err(err("stride and run must be at least 1".into()));
        }
        if run > stride {
            return Err(err(format!("run {run} is longer than stride {stride}")));
        }
        if hi > MAX_CPU {
            return Err(err(format!(
                "processor {hi} is beyond any machine (at most {MAX_CPU})"
            )));
        }
        // lo <= hi <= MAX_CPU and stride, run <= the input's numbers: no sum below overflows
        // once stride is bounded too.
        let stride = stride.min(MAX_CPU + 1);
        let mut base = lo;
        while base <= hi {
            for c in base..(base + run.min(stride)).min(hi + 1) {
                out.push(c);
            }
            if out.len() > MAX_LIST {
                return Err(err(format!("more than {MAX_LIST} processors")));
            }
            base += stride;
        }
    }
    Ok(out)
}

/// Formats processors as the kernel's compact list (`0-3,8`), sorted and without repeats.
pub fn format(cpus: &[usize]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_lists() {
        assert_eq!(parse("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse("5").unwrap(), vec![5]);
        assert_eq!(parse("").unwrap(), Vec::<usize>::new());
        assert_eq!(parse("0-3,8-9\n").unwrap(), vec![0, 1, 2, 3, 8, 9]);
    }

    #[test]
    fn strides_and_runs() {
        assert_eq!(parse("0-10:2").unwrap(), vec![0, 2, 4, 6, 8, 10]);
        assert_eq!(parse("0-15:4.2").unwrap(), vec![0, 1, 4, 5, 8, 9, 12, 13]);
        assert_eq!(parse("1-2:4.2").unwrap(), vec![1, 2]);
        assert_eq!(parse("3,1,2").unwrap(), vec![3, 1, 2]);
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert!(parse("3-1").unwrap_err().reason.contains("backwards"));
        assert!(parse("0-4:0").unwrap_err().reason.contains("at least 1"));
        assert!(parse("0-4:2.3").unwrap_err().reason.contains("longer"));
        assert!(parse("a-b")
            .unwrap_err()
            .to_string()
            .contains("not a number"));
        assert!(parse("1,,2").is_err());
    }

    #[test]
    fn format_round_trips() {
        for s in ["0-3,8", "1", "0,2,4", "0-1,3-5"] {
            assert_eq!(format(&parse(s).unwrap()), s);
        }
    }
}

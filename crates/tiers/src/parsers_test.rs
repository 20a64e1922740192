//! Every parser a user's input reaches, fed arbitrary and mutated input: each call returns a
//! value or a typed error, never a panic, an abort or a huge allocation.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

/// xorshift64*: a seeded generator, so a failure names a reproducible case.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[self.below(v.len())]
    }
    /// Random bytes, biased towards the characters the grammars use.
    fn bytes(&mut self, max: usize) -> Vec<u8> {
        const ALPHABET: &[u8] = b"0123456789,-:.; \n\t>ACGTNacgtu*'(){}[]eE+xX_\"";
        let n = self.below(max + 1);
        (0..n)
            .map(|_| {
                if self.below(4) == 0 {
                    self.next() as u8
                } else {
                    ALPHABET[self.below(ALPHABET.len())]
                }
            })
            .collect()
    }
    /// A valid input with a few bytes replaced, inserted or removed.
    fn mutate(&mut self, good: &[u8]) -> Vec<u8> {
        let mut v = good.to_vec();
        for _ in 0..=self.below(4) {
            match self.below(3) {
                0 if !v.is_empty() => {
                    let i = self.below(v.len());
                    v[i] = self.next() as u8;
                }
                1 => {
                    let i = self.below(v.len() + 1);
                    let extra = self.bytes(8);
                    v.splice(i..i, extra);
                }
                _ if !v.is_empty() => {
                    let i = self.below(v.len());
                    let j = (i + self.below(8)).min(v.len());
                    v.drain(i..j);
                }
                _ => {}
            }
        }
        v
    }
    fn number(&mut self) -> String {
        self.pick(&[
            "0",
            "1",
            "3",
            "-1",
            "65535",
            "4294967296",
            "18446744073709551615",
            "99999999999999999999999",
            "1e308",
            "NaN",
            "inf",
            "",
        ])
        .to_string()
    }
}

/// Runs `f` on `input`, failing with the input when it panics.
fn never_panics(what: &str, input: &[u8], f: impl FnOnce(&[u8])) {
    if catch_unwind(AssertUnwindSafe(|| f(input))).is_err() {
        panic!(
            "{what} panicked on input {:?}",
            String::from_utf8_lossy(input)
        );
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const CASES: usize = 20_000;

#[test]
fn file_parsers_never_panic() {
    use tiers_apps::{clustering, fasta, matrix, mds};
    let mut g = Gen(0x5eed_0001);
    let m = matrix::DistMatrix::new(3, vec![0.0, 0.5, 0.25, 0.5, 0.0, 1.0, 0.25, 1.0, 0.0]);
    let spidal = matrix::to_spidal(&m, false);
    let npy = matrix::to_npy(&m);
    let csv = matrix::to_csv(&m).into_bytes();
    let fa = b">a one\nACGTNNT\n>b\nGG-A\n".to_vec();
    let points = b"0 0.1 0.2 0.3 1\n1 1 2 3 0\n".to_vec();
    let labels = b"0\t1\n1\t0\n2\t1\n".to_vec();
    for case in 0..CASES {
        let pick = g.below(2);
        let input = |g: &mut Gen, good: &[u8]| {
            if pick == 0 {
                g.bytes(64)
            } else {
                g.mutate(good)
            }
        };
        let b = input(&mut g, &fa);
        never_panics("fasta::parse", &b, |b| {
            let _ = fasta::parse(&text(b), "f.fa");
        });
        let b = input(&mut g, &spidal);
        let be = case % 2 == 0;
        let n = [None, Some(3), Some(usize::MAX / 3), Some(0)][case % 4];
        never_panics("matrix::from_spidal", &b, |b| {
            let _ = matrix::from_spidal(b, be, n, Path::new("d.bin"));
        });
        let b = input(&mut g, &npy);
        never_panics("matrix::from_npy", &b, |b| {
            if let Ok(m) = matrix::from_npy(b, Path::new("d.npy")) {
                let _ = m.validate("d.npy");
            }
        });
        // A .npy header with chosen shape numbers (overflowing products included).
        let header = format!(
            "{{'descr': '{}', 'fortran_order': False, 'shape': ({}, {}), }}",
            g.pick(&["<f4", "<f8", "<i2", "<u1", ""]),
            g.number(),
            g.number()
        );
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&(header.len() as u16).to_le_bytes());
        b.extend_from_slice(header.as_bytes());
        b.extend(g.bytes(16));
        never_panics("matrix::from_npy (header)", &b, |b| {
            let _ = matrix::from_npy(b, Path::new("d.npy"));
        });
        // fft2d's own .npy reader (complex128, square), with chosen shape numbers.
        let header = format!(
            "{{'descr': '{}', 'fortran_order': {}, 'shape': ({}, {}), }}",
            g.pick(&["<c16", "<f8", ""]),
            g.pick(&["False", "True", ""]),
            g.number(),
            g.number()
        );
        let mut b = b"\x93NUMPY".to_vec();
        b.push(g.pick(&["\x01", "\x02", "\x03", "\x07"]).as_bytes()[0]);
        b.push(0);
        b.extend_from_slice(&(header.len() as u16).to_le_bytes());
        if b[6] != 1 {
            b.extend_from_slice(&[0, 0]);
        }
        b.extend_from_slice(header.as_bytes());
        let b = if g.below(2) == 0 { g.mutate(&b) } else { b };
        never_panics("fft2d::npy_layout", &b, |b| {
            let _ = tiers_apps::fft2d::npy_layout(b, Path::new("z.npy"));
        });
        let b = input(&mut g, &csv);
        never_panics("matrix::from_csv", &b, |b| {
            if let Ok(m) = matrix::from_csv(&text(b), Path::new("d.csv")) {
                let _ = m.validate("d.csv");
            }
        });
        let b = input(&mut g, &points);
        let dims = g.below(5);
        never_panics("mds::parse_points", &b, |b| {
            let _ = mds::parse_points(&text(b), dims, "p.txt");
        });
        let b = input(&mut g, &labels);
        never_panics("clustering::parse_labels", &b, |b| {
            let _ = clustering::parse_labels(&text(b), "c.txt");
        });
        let runs = format!(
            r#"{{"runs": [{{"app": "a", "threads": {}, "nodes": {}, "size": {}, "seconds": {}}}]}}"#,
            g.number(),
            g.number(),
            g.number(),
            g.number()
        );
        let b = input(&mut g, runs.as_bytes());
        never_panics("runs::parse", &b, |b| {
            if let Ok(r) = crate::runs::parse(&text(b), "r.json") {
                let pts = tiers_apps::model::analyse(&r.runs);
                let _ = tiers_apps::model::all_fits(&pts);
            }
        });
    }
}

#[test]
fn grammar_parsers_never_panic() {
    let mut g = Gen(0x5eed_0002);
    for _ in 0..CASES {
        let s = if g.below(2) == 0 {
            text(&g.bytes(24))
        } else {
            format!(
                "{}{}{}{}{}",
                g.number(),
                g.pick(&["-", ",", ":", "-:", ""]),
                g.number(),
                g.pick(&[":", ",", "-", ""]),
                g.number()
            )
        };
        let b = s.as_bytes();
        never_panics("cpulist::parse", b, |_| {
            let _ = tiers_node::cpulist::parse(&s);
        });
        never_panics("Placement::parse", b, |_| {
            let _ = tiers_node::Placement::parse(&s);
        });
        never_panics("parse_duration", b, |_| {
            let _ = crate::cmd::run::parse_duration(&s);
        });
        never_panics("parse_counts", b, |_| {
            let _ = tiers_bench::parse_counts(&s);
        });
        never_panics("redblack --irr", b, |_| {
            let _ = crate::cmd::redblack::parse_irr(&s, 1 + g.below(17));
        });
        // The launcher's --hosts list: ADDR:N items separated by commas.
        let hosts = if g.below(2) == 0 {
            s.clone()
        } else {
            format!(
                "{}:{},{}{}",
                g.pick(&["127.0.0.1", "10.0.0.2", "::1", "[::1]", "host", ""]),
                g.number(),
                g.pick(&["127.0.0.2", "", "a:b:c"]),
                g.pick(&["", ":", ":0", ":4"])
            )
        };
        never_panics("launch::Hosts::parse", hosts.as_bytes(), |_| {
            let _ = tiers_cluster::launch::Hosts::parse(&hosts, g.below(4), 0);
        });
        never_panics("word parsers", b, |_| {
            let _ = tiers_apps::distance::Metric::parse(&s);
            let _ = tiers_apps::render::TileSchedule::parse(&s);
            let _ = tiers_apps::model::parse_factors(&s);
            let _ = tiers_node::WaitPolicy::parse(&s);
            let _ = tiers_node::BarrierKind::parse(&s);
            let _ = tiers_node::Schedule::parse(&s);
        });
    }
}

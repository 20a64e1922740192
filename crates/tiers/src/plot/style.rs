//! How a series looks, the same in every figure: colour and marker keyed by implementation
//! name, so that a reader who learned that `openmp` is a purple triangle in one figure finds it
//! so in the next. Names measured today have a fixed place ([`KNOWN`], ordered so that those
//! that share a figure get different colours); other names are placed by a hash of the name,
//! and a clash inside one figure moves the later series to the next free look. A figure of more
//! series than there are looks ([`SLOTS`]) starts over with every look again, its lines dashed
//! (then dotted, then long-dashed) so that each series can still be told from the others and
//! found in the legend; from the fourth round on the line patterns repeat.

use plotters::coord::Shift;
use plotters::prelude::*;

/// Colours that stay apart on white and for most colour-blind readers (Tableau 10 plus two).
pub const PALETTE: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 128),
    RGBColor(128, 64, 0),
];

/// The colour of the `limit` series (dashed, no marker).
pub const LIMIT: RGBColor = RGBColor(40, 40, 40);

/// Marker shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// Filled circle.
    Circle,
    /// Filled square.
    Square,
    /// Filled triangle.
    Triangle,
    /// Filled diamond.
    Diamond,
    /// Hollow circle.
    Ring,
}

const MARKERS: [Marker; 5] = [
    Marker::Circle,
    Marker::Square,
    Marker::Triangle,
    Marker::Diamond,
    Marker::Ring,
];

/// Implementations with a fixed look, grouped by the benchmark that shows them together.
const KNOWN: &[&str] = &[
    // barrier
    "tiers-active",
    "tiers-passive",
    "tiers-hier",
    "tiers-adaptive",
    "tiers-central",
    "tiers-relaxed",
    "std",
    "pthread",
    "openmp",
    // lock (beside std, pthread, openmp)
    "tiers-mcs",
    "tiers-ticket",
    "tiers-ttas",
    "parking_lot",
    // private
    "tiers-local",
    "tiers-padded",
    "array",
    "thread-local",
    // queue
    "tiers",
    "tiers-batch",
    "crossbeam-channel",
    "crossbeam-segqueue",
    "std-mpsc",
    "arrayqueue-per-producer",
    // put, ranks, latency
    "tiers-shm",
    "tiers-mpi",
    "mpi",
    "memcpy",
    // kneighbor
    "tiers-process",
    "tiers-smp",
    "tiers-smp-nobypass",
    // mds (beside tiers)
    "tiers-smacof",
    "scikit-learn",
    // render
    "tiers-static",
    "tiers-dynamic",
    // distances
    "tiers-hamming",
    "tiers-kmer:5",
    "tiers-swg",
    "tiers-swg:native",
    // alloc
    "mimalloc",
    "system",
    // scaling
    "cluster",
    "distances",
    "mds",
    "render",
];

/// A series' look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Look {
    /// Colour index into [`PALETTE`].
    pub colour: usize,
    /// Marker.
    pub marker: Marker,
    /// Which pass over the [`SLOTS`] looks this is in its figure: 0 for the first 60 series
    /// (solid lines), 1 and on for those after, whose lines [`Look::dashes`] breaks up.
    pub round: usize,
}

impl Look {
    /// The look of slot `slot` (colours first, then markers; wraps after 60).
    pub fn of_slot(slot: usize) -> Look {
        Look::from_slot(slot % SLOTS)
    }

    fn from_slot(slot: usize) -> Look {
        Look {
            colour: slot % PALETTE.len(),
            marker: MARKERS[(slot / PALETTE.len()) % MARKERS.len()],
            round: 0,
        }
    }

    /// The colour.
    pub fn rgb(&self) -> RGBColor {
        PALETTE[self.colour]
    }

    /// The series' line pattern in pixels (drawn, skipped), or `None` for a solid line: what
    /// tells a series of a later round from the one of the first that has its colour and marker.
    pub fn dashes(&self) -> Option<(f64, f64)> {
        match self.round {
            0 => None,
            r => Some([(8.0, 5.0), (2.0, 4.0), (16.0, 4.0)][(r - 1) % 3]),
        }
    }
}

/// Distinct colour-and-marker looks: one figure's first [`SLOTS`] series never share one.
pub const SLOTS: usize = PALETTE.len() * MARKERS.len();

fn slot_of(name: &str) -> usize {
    if let Some(i) = KNOWN.iter().position(|k| *k == name) {
        return i % SLOTS;
    }
    // FNV-1a: stable across runs and platforms, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (h % SLOTS as u64) as usize
}

/// The looks of `names` in one figure: each name's own look, unless an earlier name of the
/// figure has it already. Any number of names gets looks: after every [`SLOTS`] names the
/// looks are handed out again in a new round (see [`Look::dashes`]).
pub fn looks(names: &[String]) -> Vec<Look> {
    let mut used: Vec<usize> = Vec::new();
    let mut round = 0;
    names
        .iter()
        .map(|n| {
            // Every slot is taken: the search below would find none.
            if used.len() >= SLOTS {
                used.clear();
                round += 1;
            }
            let mut s = slot_of(n);
            // Prefer a free colour first, then a free colour-and-marker.
            if used.iter().any(|u| u % 12 == s % 12) {
                if let Some(free) = (0..12)
                    .map(|k| (s + k) % 12 + 12 * (s / 12))
                    .find(|c| !used.iter().any(|u| u % 12 == c % 12))
                {
                    s = free;
                }
            }
            while used.contains(&s) {
                s = (s + 1) % SLOTS;
            }
            used.push(s);
            Look {
                round,
                ..Look::from_slot(s)
            }
        })
        .collect()
}

/// Draws a marker centred on pixel `at`.
pub fn mark<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    at: (i32, i32),
    look: Look,
    r: i32,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let c = look.rgb();
    let (x, y) = at;
    match look.marker {
        Marker::Circle => area.draw(&Circle::new(at, r, c.filled())),
        Marker::Ring => area.draw(&Circle::new(at, r, c.stroke_width(2))),
        Marker::Square => area.draw(&Rectangle::new(
            [(x - r + 1, y - r + 1), (x + r - 1, y + r - 1)],
            c.filled(),
        )),
        Marker::Triangle => area.draw(&Polygon::new(
            vec![(x, y - r - 1), (x + r + 1, y + r), (x - r - 1, y + r)],
            c.filled(),
        )),
        Marker::Diamond => area.draw(&Polygon::new(
            vec![
                (x, y - r - 1),
                (x + r + 1, y),
                (x, y + r + 1),
                (x - r - 1, y),
            ],
            c.filled(),
        )),
    }
}

/// Draws a dashed polyline through pixel points (dash 8, gap 5).
pub fn dashed<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    pts: &[(i32, i32)],
    style: ShapeStyle,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    dashed_as(area, pts, style, (8.0, 5.0))
}

/// Draws a polyline through pixel points, `on` pixels drawn and `off` skipped in turn.
pub fn dashed_as<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    pts: &[(i32, i32)],
    style: ShapeStyle,
    (on, off): (f64, f64),
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    for w in pts.windows(2) {
        let (a, b) = (w[0], w[1]);
        // In f64: far apart pixels (a point plotters mapped outside the area) would overflow
        // an i32 difference.
        let (dx, dy) = (
            f64::from(b.0) - f64::from(a.0),
            f64::from(b.1) - f64::from(a.1),
        );
        let len = (dx * dx + dy * dy).sqrt();
        if len < 1.0 {
            continue;
        }
        let mut t = 0.0;
        while t < len {
            let e = (t + on).min(len);
            let p = |s: f64| {
                (
                    a.0.saturating_add((dx * s / len).round() as i32),
                    a.1.saturating_add((dy * s / len).round() as i32),
                )
            };
            area.draw(&PathElement::new(vec![p(t), p(e)], style))?;
            // A pattern of no length would never move on.
            t += (on + off).max(1.0);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_looks_the_same_in_every_figure() {
        let a = looks(&["tiers".into(), "openmp".into()]);
        let b = looks(&["openmp".into(), "pthread".into(), "tiers".into()]);
        assert_eq!(a[0], b[2]);
        assert_eq!(a[1], b[0]);
    }

    #[test]
    fn series_of_one_figure_look_different() {
        let names: Vec<String> = (0..30).map(|i| format!("peer-{i}")).collect();
        let l = looks(&names);
        for i in 0..l.len() {
            for j in 0..i {
                assert_ne!(l[i], l[j], "{} and {}", names[i], names[j]);
            }
        }
        // Up to 12 series, the colours alone differ.
        let l = looks(&names[..12]);
        let mut c: Vec<usize> = l.iter().map(|x| x.colour).collect();
        c.sort();
        c.dedup();
        assert_eq!(c.len(), 12);
    }

    #[test]
    fn more_series_than_looks_start_a_new_round_with_dashed_lines() {
        let names: Vec<String> = (0..1000).map(|i| format!("a{i}")).collect();
        let l = crate::plot::figures_test::within("1000 looks", {
            let names = names.clone();
            move || looks(&names)
        });
        assert_eq!(l.len(), 1000);
        // The first rounds' series still differ, by line pattern once colour and marker repeat.
        let key = |x: &Look| (x.colour, x.marker as u8, x.dashes().map(|d| d.0.to_bits()));
        for i in 0..4 * SLOTS {
            for j in 0..i {
                assert_ne!(key(&l[i]), key(&l[j]), "{} and {}", names[i], names[j]);
            }
        }
        assert!(l[..SLOTS].iter().all(|x| x.dashes().is_none()));
        assert!(l[SLOTS..].iter().all(|x| x.dashes().is_some()));
        // The first round is the figure of its names alone.
        assert_eq!(&l[..SLOTS], &looks(&names[..SLOTS])[..]);
    }

    #[test]
    fn the_known_names_of_one_benchmark_differ_in_colour() {
        let barrier: Vec<String> = KNOWN[..9].iter().map(|s| s.to_string()).collect();
        let mut c: Vec<usize> = looks(&barrier).iter().map(|x| x.colour).collect();
        c.sort();
        c.dedup();
        assert_eq!(c.len(), 9);
    }
}

//! Where a report figure's legend entries go (see [`LegendGrid`]).

/// Where a legend's entries go: rows `pitch` pixels apart, in as many columns as the entries
/// need and the width allows, closer rows (and smaller text) before entries are left out; those
/// left out are counted in a last line, so that a figure of any number of series draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LegendGrid {
    /// Pixels from one row to the next.
    pub(super) pitch: u32,
    /// Rows in a column.
    pub(super) rows: usize,
    /// Width of a column.
    pub(super) col_w: u32,
    /// Entries drawn; the rest are counted.
    pub(super) shown: usize,
}

impl LegendGrid {
    /// The grid of `n` entries whose longest name has `chars` characters, in at most `max_w`
    /// by `h` pixels.
    pub(super) fn of(n: usize, chars: usize, max_w: u32, h: u32) -> LegendGrid {
        // 8 pixels a character of 14-pixel text, after a 44-pixel sample.
        let col_w = u32::try_from(chars)
            .unwrap_or(u32::MAX)
            .saturating_mul(8)
            .saturating_add(50)
            .max(100)
            .min(max_w.max(1));
        let cols = (max_w / col_w).max(1) as usize;
        let rows = |pitch: u32| (h.saturating_sub(12) / pitch).max(1) as usize;
        for pitch in [22, 14] {
            if n <= rows(pitch).saturating_mul(cols) {
                return LegendGrid {
                    pitch,
                    rows: rows(pitch),
                    col_w,
                    shown: n,
                };
            }
        }
        LegendGrid {
            pitch: 14,
            rows: rows(14),
            col_w,
            // The last place says how many are left out.
            shown: (rows(14) * cols).saturating_sub(1),
        }
    }

    /// The width the legend takes for `n` entries: the columns it fills.
    pub(super) fn width(&self, n: usize) -> u32 {
        let places = self.shown + usize::from(self.shown < n);
        let cols = places.div_ceil(self.rows).max(1);
        self.col_w
            .saturating_mul(u32::try_from(cols).unwrap_or(u32::MAX))
    }

    /// Where entry `k`'s sample is centred.
    pub(super) fn at(&self, k: usize) -> (i32, i32) {
        let (col, row) = (k / self.rows, k % self.rows);
        let x = i64::from(self.col_w) * col as i64;
        let y = 20 + i64::from(self.pitch) * row as i64;
        (
            i32::try_from(x).unwrap_or(i32::MAX),
            i32::try_from(y).unwrap_or(i32::MAX),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_legend_fits_its_place_whatever_the_series() {
        for (n, chars, w, h) in [
            (3, 8, 333, 560),
            (100, 3, 333, 560),
            (100, 40, 333, 560),
            (5000, 12, 333, 560),
            (10, 1_000_000, 66, 150),
            (1, 0, 0, 0),
        ] {
            let g = LegendGrid::of(n, chars, w, h);
            let places = g.shown + usize::from(g.shown < n);
            assert!(g.shown <= n, "{n} {chars} {w} {h}: {g:?}");
            assert!(g.width(n) <= w.max(1), "{n} {chars} {w} {h}: {g:?}");
            let (x, y) = g.at(places - 1);
            assert!(x as u32 + g.col_w <= w.max(1), "{n} {chars} {w} {h}: {g:?}");
            assert!(y as u32 <= h.max(20), "{n} {chars} {w} {h}: {g:?}");
        }
        // A few series: one column of the usual pitch; 100 short names: all shown.
        assert_eq!(LegendGrid::of(3, 8, 333, 560).pitch, 22);
        assert_eq!(LegendGrid::of(100, 3, 333, 560).shown, 100);
        assert!(LegendGrid::of(5000, 12, 333, 560).shown < 5000);
    }
}

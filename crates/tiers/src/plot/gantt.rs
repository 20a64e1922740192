//! The render schedule as a Gantt chart ([GPI-MCTP] Fig. 8): one row per worker,
//! one bar per tile from when it started to when it was drawn, coloured by the tile's row of
//! the image, so a static schedule shows each worker's contiguous band and a dynamic one the
//! interleaved claims.

use super::style::PALETTE;
use super::{axes, frame, Axes, Error, Figure, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use tiers_apps::render::TileSpan;

/// A Gantt chart of tiles.
pub struct Gantt {
    /// Title.
    pub title: String,
    /// Caption lines.
    pub caption: Vec<String>,
    /// The tiles.
    pub spans: Vec<TileSpan>,
    /// Workers (rows).
    pub workers: usize,
    /// Tiles per image row (to colour by tile row).
    pub tiles_x: usize,
}

impl Gantt {
    /// Checks that there is something to draw.
    pub fn new(
        title: String,
        spans: Vec<TileSpan>,
        workers: usize,
        tiles_x: usize,
    ) -> Result<Gantt> {
        if spans.is_empty() || workers == 0 || tiles_x == 0 {
            return Err(Error("no tile timings to draw".into()));
        }
        Ok(Gantt {
            title,
            caption: Vec::new(),
            spans,
            workers,
            tiles_x,
        })
    }
}

impl Figure for Gantt {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()> {
        let mut caption = self.caption.clone();
        caption.push(format!(
            "{} tiles; colour: the tile's row of the image (cycling through {} colours)",
            self.spans.len(),
            PALETTE.len()
        ));
        let mid = frame(area, &self.title, &caption)?;
        let end = self
            .spans
            .iter()
            .map(|s| s.end)
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1e3;
        let w = self.workers as f64;
        let px = axes(
            &mid,
            &Axes {
                x: (0.0, end * 1.02),
                y: (-0.5, w - 0.5),
                xlog: false,
                ylog: false,
                x_desc: "time since the render started (ms)".into(),
                y_desc: "worker (thread index)".into(),
                caption: None,
                whole: (false, true),
                x_names: None,
            },
        )?;
        for s in &self.spans {
            let c = PALETTE[(s.tile / self.tiles_x) % PALETTE.len()];
            let row = s.worker as f64;
            let (a, b) = (px(s.start * 1e3, row + 0.38), px(s.end * 1e3, row - 0.38));
            // At least one pixel wide, so that a fast tile still shows.
            // A pixel of gap between consecutive tiles of one worker.
            let b = (
                if b.0 - a.0 > 2 {
                    b.0 - 1
                } else {
                    b.0.max(a.0 + 1)
                },
                b.1,
            );
            mid.draw(&Rectangle::new([a, b], c.filled()))
                .map_err(Error::drawing)?;
        }
        Ok(())
    }
}

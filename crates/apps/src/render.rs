//! Tile rendering of a Mandelbrot image, the uneven workload of [GPI-MCTP] (Fig. 8).
//!
//! The image is cut into S×S-pixel tiles. Points inside the set cost the full iteration limit
//! and points far outside a few iterations, so tiles differ in cost by orders of magnitude. The
//! static schedule gives each worker one contiguous run of tiles; the dynamic schedule lets
//! workers claim the next tile from one shared atomic counter. The default view is off-centre
//! (mostly the upper half-plane) so that a static split by rows is visibly unbalanced. Each
//! pixel depends only on its coordinates, so the image is the same bytes whatever the schedule
//! or thread count.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Instant;
use tiers_cluster::{SegId, Timeout, World};
use tiers_node::{partition, Pool};

/// How tiles are shared among workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileSchedule {
    /// Contiguous runs of tiles, one per worker.
    Static,
    /// Next tile from one atomic counter.
    Dynamic,
}

impl TileSchedule {
    /// Parses `static` or `dynamic`.
    pub fn parse(s: &str) -> crate::Result<TileSchedule> {
        match s {
            "static" => Ok(TileSchedule::Static),
            "dynamic" => Ok(TileSchedule::Dynamic),
            _ => Err(crate::Error::Invalid(format!(
                "unknown schedule {s:?}: use static or dynamic"
            ))),
        }
    }
}

/// What to render.
#[derive(Clone, Debug)]
pub struct RenderSpec {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// Tile edge in pixels.
    pub tile: usize,
    /// Iteration limit per pixel.
    pub max_iter: u32,
    /// View: x range.
    pub x: (f64, f64),
    /// View: y range (top, bottom).
    pub y: (f64, f64),
}

impl RenderSpec {
    /// Checks the spec: at least one pixel each way, a tile and an iteration, finite view, and
    /// an image that fits in memory.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |m: String| Err(crate::Error::Invalid(m));
        if self.width == 0 || self.height == 0 || self.tile == 0 || self.max_iter == 0 {
            return bad(format!(
                "width, height, tile and iterations must be at least 1 (width {}, height {}, tile {}, iterations {})",
                self.width, self.height, self.tile, self.max_iter
            ));
        }
        if ![self.x.0, self.x.1, self.y.0, self.y.1]
            .iter()
            .all(|v| v.is_finite())
        {
            return bad("the view must be finite".into());
        }
        // The pixels, and the PNG encoding of them.
        crate::limits::check_alloc(
            "the image",
            crate::limits::mul("width x height", self.width, self.height)?,
            6,
        )?;
        Ok(())
    }
}

impl Default for RenderSpec {
    fn default() -> Self {
        RenderSpec {
            width: 1024,
            height: 768,
            tile: 32,
            max_iter: 1000,
            x: (-2.2, 0.8),
            y: (1.4, -0.85),
        }
    }
}

/// A rendered image.
#[derive(Clone, Debug)]
pub struct Image {
    /// Width.
    pub width: usize,
    /// Height.
    pub height: usize,
    /// RGB bytes, row-major.
    pub rgb: Vec<u8>,
    /// Seconds spent by each worker on its tiles (the imbalance shows here).
    pub busy: Vec<f64>,
    /// Wall seconds.
    pub seconds: f64,
    /// When each tile this rank drew was drawn and by which of its workers, in tile order:
    /// the schedule made visible (static runs against dynamic claims).
    pub tiles: Vec<TileSpan>,
}

/// One tile's drawing: which worker, from when to when (seconds since the render started).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TileSpan {
    /// Tile index (row-major over the tiles).
    pub tile: usize,
    /// Worker of this rank's pool that drew it.
    pub worker: usize,
    /// Start, seconds after the render began.
    pub start: f64,
    /// End, seconds after the render began.
    pub end: f64,
}

/// The spans that were recorded, in tile order.
fn spans(cells: &[OnceLock<TileSpan>]) -> Vec<TileSpan> {
    cells.iter().filter_map(|c| c.get().copied()).collect()
}

impl Image {
    /// FNV-1a 64-bit checksum of the pixels.
    pub fn checksum(&self) -> u64 {
        self.rgb.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
    }
}

fn pixel(spec: &RenderSpec, px: usize, py: usize) -> [u8; 3] {
    let cx = spec.x.0 + (spec.x.1 - spec.x.0) * (px as f64 + 0.5) / spec.width as f64;
    let cy = spec.y.0 + (spec.y.1 - spec.y.0) * (py as f64 + 0.5) / spec.height as f64;
    let (mut zx, mut zy) = (0.0f64, 0.0f64);
    let mut it = 0;
    while it < spec.max_iter && zx * zx + zy * zy <= 4.0 {
        let t = zx * zx - zy * zy + cx;
        zy = 2.0 * zx * zy + cy;
        zx = t;
        it += 1;
    }
    if it >= spec.max_iter {
        return [0, 0, 0];
    }
    let v = (it as f64).sqrt() / (spec.max_iter as f64).sqrt();
    [
        (9.0 * (1.0 - v) * v * v * v * 255.0) as u8,
        (15.0 * (1.0 - v).powi(2) * v * v * 255.0) as u8,
        (8.5 * (1.0 - v).powi(3) * v * 255.0) as u8,
    ]
}

fn render_tile(spec: &RenderSpec, t: usize) -> Vec<u8> {
    let tiles_x = spec.width.div_ceil(spec.tile);
    let (tx, ty) = (t % tiles_x, t / tiles_x);
    let x0 = tx * spec.tile;
    let y0 = ty * spec.tile;
    let x1 = (x0 + spec.tile).min(spec.width);
    let y1 = (y0 + spec.tile).min(spec.height);
    let mut out = Vec::with_capacity((x1 - x0) * (y1 - y0) * 3);
    for py in y0..y1 {
        for px in x0..x1 {
            out.extend_from_slice(&pixel(spec, px, py));
        }
    }
    out
}

/// Renders the image with the given schedule.
///
/// # Panics
///
/// When a size of the spec is zero (`tiers render` checks them first).
pub fn render(pool: &Pool, spec: &RenderSpec, schedule: TileSchedule) -> Image {
    assert!(spec.width > 0 && spec.height > 0 && spec.tile > 0);
    let tiles_x = spec.width.div_ceil(spec.tile);
    let tiles_y = spec.height.div_ceil(spec.tile);
    let ntiles = tiles_x * tiles_y;
    let done: Vec<OnceLock<Vec<u8>>> = (0..ntiles).map(|_| OnceLock::new()).collect();
    let busy: Vec<OnceLock<f64>> = (0..pool.threads()).map(|_| OnceLock::new()).collect();
    let next = AtomicUsize::new(0);
    let timed: Vec<OnceLock<TileSpan>> = (0..ntiles).map(|_| OnceLock::new()).collect();
    let t0 = Instant::now();
    pool.spmd(|w| {
        let start = Instant::now();
        let mut claim = |t: usize| {
            let from = t0.elapsed().as_secs_f64();
            let _ = done[t].set(render_tile(spec, t));
            let _ = timed[t].set(TileSpan {
                tile: t,
                worker: w.index(),
                start: from,
                end: t0.elapsed().as_secs_f64(),
            });
        };
        match schedule {
            TileSchedule::Static => partition(ntiles, w.count(), w.index()).for_each(&mut claim),
            TileSchedule::Dynamic => loop {
                let t = next.fetch_add(1, Ordering::Relaxed);
                if t >= ntiles {
                    break;
                }
                claim(t);
            },
        }
        let _ = busy[w.index()].set(start.elapsed().as_secs_f64());
    });
    let seconds = t0.elapsed().as_secs_f64();
    let mut rgb = vec![0u8; spec.width * spec.height * 3];
    for (t, cell) in done.iter().enumerate() {
        let tile = cell.get().expect("every tile rendered");
        let (tx, ty) = (t % tiles_x, t / tiles_x);
        let x0 = tx * spec.tile;
        let w = (x0 + spec.tile).min(spec.width) - x0;
        for (r, line) in tile.chunks(w * 3).enumerate() {
            let at = ((ty * spec.tile + r) * spec.width + x0) * 3;
            rgb[at..at + w * 3].copy_from_slice(line);
        }
    }
    Image {
        width: spec.width,
        height: spec.height,
        rgb,
        busy: busy
            .iter()
            .map(|b| b.get().copied().unwrap_or(0.0))
            .collect(),
        seconds,
        tiles: spans(&timed),
    }
}

/// The segments [`render_ranks`] uses: the tile counter (8 bytes, at rank 0) and the image.
pub const COUNTER_SEG: SegId = SegId(0);
/// See [`COUNTER_SEG`]: every rank's copy of the image; rank 0's is the assembled one.
pub const IMAGE_SEG: SegId = SegId(1);

/// Renders the image on every thread of every rank of `world` ([GPI-MCTP] Fig. 8): with the
/// dynamic schedule each worker takes the next tile from one global counter at rank 0
/// (`fetch_add`, shared by all the threads of all the ranks); with the static one worker `k`
/// of the `ranks × threads` takes the `k`-th contiguous run of tiles. Each rank draws its
/// tiles into its own copy of the image, then writes their rows into rank 0's copy; rank 0
/// gets the assembled image (the same bytes as [`render`]), the others `None`. Collective:
/// every rank calls it with the same spec and schedule.
///
/// # Errors
///
/// A cluster-tier error (a rank that failed, a segment that cannot be made).
pub fn render_ranks(
    world: &World,
    pool: &Pool,
    spec: &RenderSpec,
    schedule: TileSchedule,
) -> tiers_cluster::Result<Option<Image>> {
    spec.validate()
        .map_err(|e| tiers_cluster::Error::Setup(format!("render: {e}")))?;
    let tiles_x = spec.width.div_ceil(spec.tile);
    let ntiles = tiles_x * spec.height.div_ceil(spec.tile);
    let bytes = spec.width * spec.height * 3;
    let counter = world.segment(COUNTER_SEG, 8)?;
    let image = world.segment(IMAGE_SEG, bytes)?;
    let (rank, threads) = (world.rank(), pool.threads());
    let workers = world.size() * threads;
    let busy: Vec<OnceLock<f64>> = (0..threads).map(|_| OnceLock::new()).collect();
    let failed: OnceLock<tiers_cluster::Error> = OnceLock::new();
    let timed: Vec<OnceLock<TileSpan>> = (0..ntiles).map(|_| OnceLock::new()).collect();
    world.barrier(Timeout::Block)?;
    let t0 = Instant::now();
    pool.spmd(|w| {
        let start = Instant::now();
        let q = match world.queue(w.index() % tiers_cluster::QUEUES) {
            Ok(q) => q,
            Err(e) => {
                let _ = failed.set(e);
                return;
            }
        };
        let mut draw = |t: usize| -> tiers_cluster::Result<()> {
            let from = t0.elapsed().as_secs_f64();
            let tile = render_tile(spec, t);
            let _ = timed[t].set(TileSpan {
                tile: t,
                worker: w.index(),
                start: from,
                end: t0.elapsed().as_secs_f64(),
            });
            let (tx, ty) = (t % tiles_x, t / tiles_x);
            let x0 = tx * spec.tile;
            let w = (x0 + spec.tile).min(spec.width) - x0;
            for (r, line) in tile.chunks(w * 3).enumerate() {
                let at = ((ty * spec.tile + r) * spec.width + x0) * 3;
                image.write(at, line)?;
                if rank != 0 {
                    q.write(IMAGE_SEG.at(at), IMAGE_SEG.on(0, at), line.len())?;
                    // Keep well inside the queue's depth however tall the tiles are.
                    if r % 256 == 255 {
                        q.wait(Timeout::Block)?;
                    }
                }
            }
            if rank != 0 {
                q.wait(Timeout::Block)?;
            }
            Ok(())
        };
        let res = match schedule {
            TileSchedule::Static => {
                partition(ntiles, workers, rank * threads + w.index()).try_for_each(&mut draw)
            }
            TileSchedule::Dynamic => loop {
                let t = match world.atomic_fetch_add(COUNTER_SEG, 0, 0, 1) {
                    Ok(t) => t as usize,
                    Err(e) => break Err(e),
                };
                if t >= ntiles {
                    break Ok(());
                }
                if let Err(e) = draw(t) {
                    break Err(e);
                }
            },
        };
        if let Err(e) = res {
            let _ = failed.set(e);
        }
        let _ = busy[w.index()].set(start.elapsed().as_secs_f64());
    });
    if let Some(e) = failed.into_inner() {
        return Err(e);
    }
    // Every rank's rows have landed at rank 0 once every rank has waited for its queues.
    world.barrier(Timeout::Block)?;
    let seconds = t0.elapsed().as_secs_f64();
    let out = (rank == 0).then(|| {
        let mut rgb = vec![0u8; bytes];
        image.read(0, &mut rgb).map(|()| Image {
            width: spec.width,
            height: spec.height,
            rgb,
            busy: busy
                .iter()
                .map(|b| b.get().copied().unwrap_or(0.0))
                .collect(),
            seconds,
            tiles: spans(&timed),
        })
    });
    drop((counter, image));
    world.segment_delete(IMAGE_SEG, Timeout::Block)?;
    world.segment_delete(COUNTER_SEG, Timeout::Block)?;
    out.transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_bytes_whatever_the_schedule() {
        // Odd sizes so edge tiles are partial.
        let spec = RenderSpec {
            width: 203,
            height: 131,
            tile: 16,
            max_iter: 200,
            ..Default::default()
        };
        let one = render(
            &Pool::builder().threads(1).build().unwrap(),
            &spec,
            TileSchedule::Static,
        );
        let p2 = Pool::builder().threads(2).build().unwrap();
        let st = render(&p2, &spec, TileSchedule::Static);
        let dy = render(&p2, &spec, TileSchedule::Dynamic);
        let p3 = Pool::builder().threads(3).build().unwrap();
        let dy3 = render(&p3, &spec, TileSchedule::Dynamic);
        assert_eq!(one.checksum(), st.checksum());
        assert_eq!(one.checksum(), dy.checksum());
        assert_eq!(one.checksum(), dy3.checksum());
        assert_eq!(one.rgb, dy3.rgb);
        // Across ranks (threads of this process as ranks), each with a pool of its own.
        for (ranks, threads) in [(1, 1), (2, 1), (2, 2), (3, 1)] {
            for schedule in [TileSchedule::Static, TileSchedule::Dynamic] {
                let imgs = tiers_cluster::run_local(ranks, |w| {
                    let pool = Pool::builder().threads(threads).build().unwrap();
                    render_ranks(w, &pool, &spec, schedule).unwrap()
                })
                .unwrap();
                assert_eq!(
                    imgs[0].as_ref().map(|i| &i.rgb),
                    Some(&one.rgb),
                    "{ranks} ranks x {threads} threads, {schedule:?}"
                );
                assert!(imgs[1..].iter().all(Option::is_none));
            }
        }
        // The image is not trivial: it has set (black) and non-set pixels.
        let black = one.rgb.chunks(3).filter(|p| p == &[0, 0, 0]).count();
        assert!(black > 100 && black < 203 * 131 - 100, "{black}");
        // A pixel computed alone matches the assembled image.
        let (x, y) = (150, 77);
        assert_eq!(
            &one.rgb[(y * 203 + x) * 3..(y * 203 + x) * 3 + 3],
            &pixel(&spec, x, y)
        );
    }
}

#[cfg(test)]
mod span_tests {
    use super::*;

    #[test]
    fn every_tile_has_its_span_and_static_runs_are_contiguous() {
        let spec = RenderSpec {
            width: 70,
            height: 50,
            tile: 16,
            max_iter: 50,
            ..Default::default()
        };
        let ntiles = 5 * 4;
        let p2 = Pool::builder().threads(2).build().unwrap();
        for schedule in [TileSchedule::Static, TileSchedule::Dynamic] {
            let img = render(&p2, &spec, schedule);
            assert_eq!(img.tiles.len(), ntiles);
            for (t, s) in img.tiles.iter().enumerate() {
                assert_eq!(s.tile, t);
                assert!(s.worker < 2 && s.start <= s.end && s.end <= img.seconds);
            }
            if schedule == TileSchedule::Static {
                // Worker k draws the k-th contiguous run of tiles.
                let workers: Vec<usize> = img.tiles.iter().map(|s| s.worker).collect();
                assert!(workers.windows(2).all(|w| w[0] <= w[1]), "{workers:?}");
            }
        }
        let imgs = tiers_cluster::run_local(2, |w| {
            let pool = Pool::builder().threads(2).build().unwrap();
            render_ranks(w, &pool, &spec, TileSchedule::Dynamic).unwrap()
        })
        .unwrap();
        let rank0 = imgs[0].as_ref().unwrap();
        // Rank 0 knows the spans of the tiles its own workers drew.
        assert!(rank0.tiles.len() <= ntiles);
        assert!(rank0.tiles.iter().all(|s| s.worker < 2));
    }
}

//! Figures: every picture `tiers` draws, on `plotters` (SVG or PNG by the output's extension).
//!
//! Text goes through plotters' pure-Rust `ab_glyph` path with DejaVu Sans shipped beside this
//! file (Bitstream Vera licence, `LICENSE-DejaVu.txt`), so drawing needs no system library
//! (no fontconfig, no freetype); SVG output keeps its text as `<text>` elements. Series look
//! the same in every figure: [`style`] keys colour and marker by implementation name.
//!
//! - [`report`]: any benchmark report (`tiers plot`, `tiers bench --plot`).
//! - [`scatter`]: MDS points on their two principal axes, coloured by cluster.
//! - [`model`]: the overhead model's efficiency and overhead with their fits.
//! - [`gantt`]: which worker rendered which tile when.
//! - [`anneal`]: the clustering's annealing trace (clusters and uncertainty against T).

pub mod anneal;
#[cfg(test)]
mod figures_test;
pub mod gantt;
mod legend;
pub mod model;
pub mod report;
pub mod scatter;
pub mod stacked;
pub mod style;

use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// The font every figure's text is set in.
static FONT: &[u8] = include_bytes!("DejaVuSans.ttf");

/// The font family name figures ask for (registered as [`FONT`]).
pub const FAMILY: &str = "sans-serif";

/// Default figure size in pixels.
pub const WIDTH: u32 = 1000;
/// Default figure height in pixels.
pub const HEIGHT: u32 = 620;

/// Largest figure side: a bitmap of 8192² RGB pixels is 192 MiB, which is plenty.
pub(crate) const MAX_SIDE: u32 = 8192;
/// Smallest figure side that still leaves room for axes, legend and caption.
const MIN_SIDE: u32 = 200;

/// Why a figure could not be drawn.
#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl Error {
    fn drawing(e: impl std::fmt::Display) -> Error {
        Error(format!("drawing the figure failed: {e}"))
    }
}

/// Result of drawing.
pub type Result<T> = std::result::Result<T, Error>;

/// Output format, from the file name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Scalable vector graphics (text stays text).
    Svg,
    /// A PNG bitmap.
    Png,
}

impl Format {
    /// The format a path's extension names (`.svg` or `.png`).
    pub fn of(path: &Path) -> Result<Format> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .as_deref()
        {
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            _ => Err(Error(format!(
                "{}: a figure is written as .svg or .png",
                path.display()
            ))),
        }
    }
}

/// Figure size in pixels, range-checked.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
}

impl Size {
    /// A size, or an error naming the allowed range.
    pub fn new(width: u32, height: u32) -> Result<Size> {
        for (what, v) in [("width", width), ("height", height)] {
            if !(MIN_SIDE..=MAX_SIDE).contains(&v) {
                return Err(Error(format!(
                    "figure {what} {v} is outside {MIN_SIDE}..={MAX_SIDE} pixels"
                )));
            }
        }
        Ok(Size { width, height })
    }
}

impl Default for Size {
    fn default() -> Self {
        Size {
            width: WIDTH,
            height: HEIGHT,
        }
    }
}

/// A figure: draws itself on any plotters backend.
pub trait Figure {
    /// Draws on `area` (the whole figure, white already).
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()>;
}

fn register_font() -> Result<()> {
    static ONCE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *ONCE
        .get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(Error("the shipped font does not load".into()))
    }
}

/// The figure's bytes in `format`.
pub fn render<F: Figure>(fig: &F, format: Format, size: Size) -> Result<Vec<u8>> {
    register_font()?;
    let (w, h) = (size.width, size.height);
    match format {
        Format::Svg => {
            let mut s = String::new();
            {
                let root = SVGBackend::with_string(&mut s, (w, h)).into_drawing_area();
                root.fill(&WHITE).map_err(Error::drawing)?;
                fig.draw(&root)?;
                root.present().map_err(Error::drawing)?;
            }
            Ok(s.into_bytes())
        }
        Format::Png => {
            let len = (w as usize)
                .checked_mul(h as usize)
                .and_then(|n| n.checked_mul(3))
                .ok_or_else(|| Error("figure too large".into()))?;
            let mut rgb = vec![255u8; len];
            {
                let root = BitMapBackend::<plotters::backend::RGBPixel>::with_buffer_and_format(
                    &mut rgb,
                    (w, h),
                )
                .map_err(Error::drawing)?
                .into_drawing_area();
                fig.draw(&root)?;
                root.present().map_err(Error::drawing)?;
            }
            encode_png(w as usize, h as usize, &rgb)
        }
    }
}

/// Draws `fig` into `path` (SVG or PNG by its extension), replacing it atomically.
pub fn write<F: Figure>(
    path: &Path,
    fig: &F,
    size: Size,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let bytes = render(fig, Format::of(path)?, size)?;
    Ok(tiers_apps::files::write_atomic(path, &bytes)?)
}

/// Encodes RGB8 pixels as PNG (figures and `tiers render`'s images).
pub fn encode_png(width: usize, height: usize, rgb: &[u8]) -> Result<Vec<u8>> {
    let too_big = |_| Error(format!("image {width}x{height} is too large for PNG"));
    let (w, h) = (
        u32::try_from(width).map_err(too_big)?,
        u32::try_from(height).map_err(too_big)?,
    );
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut wr = enc
            .write_header()
            .map_err(|e| Error(format!("encoding PNG: {e}")))?;
        wr.write_image_data(rgb)
            .map_err(|e| Error(format!("encoding PNG: {e}")))?;
    }
    Ok(out)
}

/// Text style of the shipped font.
pub(crate) fn font(size: f64) -> TextStyle<'static> {
    (FAMILY, size).into_font().color(&BLACK)
}

/// Splits off a title band at the top and a caption band at the bottom; returns the middle.
pub(crate) fn frame<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    caption: &[String],
) -> Result<DrawingArea<DB, Shift>> {
    let (_, h) = area.dim_in_pixel();
    let cap_h = (14 * caption.len() as u32 + 8).min(h / 3);
    let (top, rest) = area.split_vertically(38);
    let (mid, bottom) = rest.split_vertically(rest.dim_in_pixel().1.saturating_sub(cap_h));
    top.draw(&Text::new(title.to_string(), (12, 10), font(20.0)))
        .map_err(Error::drawing)?;
    for (i, line) in caption.iter().enumerate() {
        bottom
            .draw(&Text::new(
                line.clone(),
                (12, 2 + 14 * i as i32),
                font(12.0).color(&RGBColor(70, 70, 70)),
            ))
            .map_err(Error::drawing)?;
    }
    Ok(mid)
}

/// One panel's axes: ranges in drawing space (log10 of the value on a log axis).
pub(crate) struct Axes {
    /// x range.
    pub x: (f64, f64),
    /// y range.
    pub y: (f64, f64),
    /// Whether x is drawn as log10.
    pub xlog: bool,
    /// Whether y is drawn as log10.
    pub ylog: bool,
    /// x label, with its unit.
    pub x_desc: String,
    /// y label, with its unit.
    pub y_desc: String,
    /// The panel's own title.
    pub caption: Option<String>,
    /// Ticks at whole numbers only (x, y): counts such as workers or threads.
    pub whole: (bool, bool),
    /// Categories on x: the tick at whole number k is named `x_names[k]` (and no other tick
    /// is labelled).
    pub x_names: Option<Vec<String>>,
}

/// The smallest and largest finite values of `vals`, if any.
pub(crate) fn finite_bounds(vals: &[f64]) -> Option<(f64, f64)> {
    let finite = || vals.iter().copied().filter(|v| v.is_finite());
    let lo = finite().fold(f64::INFINITY, f64::min);
    let hi = finite().fold(f64::NEG_INFINITY, f64::max);
    (lo.is_finite() && hi.is_finite()).then_some((lo, hi))
}

/// The range of `vals` for an axis: padded, from zero for non-negative linear values, log10
/// where positive values span two decades or more. Returns (low, high, log).
pub(crate) fn span(vals: &[f64], from_zero: bool) -> (f64, f64, bool) {
    let Some((lo, hi)) = finite_bounds(vals) else {
        return (0.0, 1.0, false);
    };
    if lo > 0.0 && hi / lo >= 100.0 {
        let (a, b) = (lo.log10(), hi.log10());
        let pad = (b - a) * 0.06;
        return (a - pad, b + pad, true);
    }
    let lo = if from_zero && lo >= 0.0 { 0.0 } else { lo };
    let pad = if hi > lo {
        (hi - lo) * 0.06
    } else {
        hi.abs().max(1.0) * 0.5
    };
    (if lo == 0.0 { 0.0 } else { lo - pad }, hi + pad, false)
}

/// Largest value, and largest distance between two values, that a linear axis shows. plotters
/// places ticks at a power of ten of an axis's span (and tries ten times that), and its search
/// never ends once that is infinite; 1e306 leaves room for the padding around the data and
/// that factor of ten well inside `f64`.
pub(crate) const MAX_LINEAR: f64 = 1e306;

/// Checks that data from `lo` to `hi` fit on a linear axis; the error says what does.
pub(crate) fn linear_fits(lo: f64, hi: f64) -> Result<()> {
    let fits = lo.is_finite()
        && hi.is_finite()
        && lo.abs() <= MAX_LINEAR
        && hi.abs() <= MAX_LINEAR
        && (hi - lo).abs() <= MAX_LINEAR;
    if fits {
        Ok(())
    } else {
        Err(Error(format!(
            "values from {} to {} cannot be drawn on a linear axis: it shows values within {} of zero and of each other",
            tick(lo),
            tick(hi),
            tick(MAX_LINEAR)
        )))
    }
}

/// The axis range `r` as plotters can tick it, or an error naming the axis (`what`): both ends
/// finite and well inside `f64` (see [`MAX_LINEAR`]), in order, and at least a billionth of
/// their size apart, since a span of a few rounding steps at 1e300 keeps plotters' tick search
/// from ending just as an infinite one does (it is widened around its middle).
pub(crate) fn tickable(what: &str, r: (f64, f64)) -> Result<(f64, f64)> {
    let (lo, hi) = (r.0.min(r.1), r.0.max(r.1));
    let limit = 10.0 * MAX_LINEAR;
    if !(r.0.is_finite() && r.1.is_finite()) || lo.abs().max(hi.abs()) > limit || hi - lo > limit {
        return Err(Error(format!(
            "the {what} axis would run from {} to {}: an axis spans at most {}",
            tick(r.0),
            tick(r.1),
            tick(limit)
        )));
    }
    // Below f64's smallest normal numbers the search would divide its step down to zero.
    let least = (lo.abs().max(hi.abs()) * 1e-9).max(1e-290);
    if hi - lo < least {
        let mid = lo / 2.0 + hi / 2.0;
        return Ok((mid - least, mid + least));
    }
    Ok((lo, hi))
}

/// Draws a panel's axes, grid and labels on `cell`; returns the map from drawing-space
/// coordinates to the cell's pixels.
pub(crate) fn axes<'a, DB: DrawingBackend + 'a>(
    cell: &'a DrawingArea<DB, Shift>,
    a: &Axes,
) -> Result<impl Fn(f64, f64) -> (i32, i32) + 'a> {
    let mut cb = ChartBuilder::on(cell);
    cb.margin(8).x_label_area_size(44).y_label_area_size(70);
    if let Some(c) = &a.caption {
        cb.caption(c.clone(), font(15.0));
    }
    let (x, y) = (tickable("x", a.x)?, tickable("y", a.y)?);
    let mut chart = cb
        .build_cartesian_2d(x.0..x.1, y.0..y.1)
        .map_err(Error::drawing)?;
    let label = |log: bool, whole: bool, v: f64| -> String {
        if whole && (v - v.round()).abs() > 1e-6 {
            return String::new();
        }
        if log {
            if (v - v.round()).abs() > 1e-6 {
                return String::new();
            }
            tick(10f64.powf(v))
        } else {
            tick(v)
        }
    };
    let (xl, yl) = (a.xlog, a.ylog);
    let n_log = |r: (f64, f64)| ((r.1 - r.0).ceil() as usize).saturating_add(1).clamp(2, 10);
    let named = |v: f64| -> String {
        match &a.x_names {
            Some(names) if (v - v.round()).abs() < 1e-6 && v >= 0.0 => {
                names.get(v.round() as usize).cloned().unwrap_or_default()
            }
            Some(_) => String::new(),
            None => label(xl, a.whole.0, v),
        }
    };
    // One tick per category (plotters picks "nice" values: asking for one per unit of the
    // range puts them on the whole numbers).
    let x_ticks = match &a.x_names {
        Some(_) => ((x.1 - x.0).round() as usize)
            .saturating_add(1)
            .clamp(2, 40),
        None if xl => n_log(x),
        None => 8,
    };
    chart
        .configure_mesh()
        .x_desc(a.x_desc.clone())
        .y_desc(a.y_desc.clone())
        .x_labels(x_ticks)
        .y_labels(if yl { n_log(y) } else { 8 })
        .x_label_formatter(&|v| named(*v))
        .y_label_formatter(&|v| label(yl, a.whole.1, *v))
        .label_style(font(12.0))
        .axis_desc_style(font(14.0))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(215, 215, 215))
        .draw()
        .map_err(Error::drawing)?;
    let base = cell.get_base_pixel();
    Ok(move |x: f64, y: f64| {
        let p = chart.backend_coord(&(x, y));
        (p.0 - base.0, p.1 - base.1)
    })
}

/// A value in drawing space: log10 on a log axis.
pub(crate) fn on(log: bool, v: f64) -> f64 {
    if log {
        v.log10()
    } else {
        v
    }
}

/// The caption line of a figure drawn from a run made now: the machine (processor model,
/// cores, host, cache-line round trip where measurable) and today's date, as a report's figure
/// shows them.
pub fn run_caption() -> String {
    let m = tiers_bench::machine();
    let rt = m["round_trip_ns"]
        .as_f64()
        .map(|r| format!(", cache-line round trip {} ns", tick(r)))
        .unwrap_or_default();
    format!(
        "machine: {}, {} cores, host {}{rt}, {}",
        m["cpu"].as_str().unwrap_or("unknown"),
        m["cores"].as_u64().unwrap_or(0),
        m["hostname"].as_str().unwrap_or(""),
        today()
    )
}

pub use tiers_bench::{date_of, today};

/// A number for axis ticks: short, without trailing zeros.
pub(crate) fn tick(v: f64) -> String {
    let a = v.abs();
    // Zero, and the rounding residue of a tick computed as a sum (−5.6e-17).
    if a < 1e-12 {
        return "0".into();
    }
    if v.fract() == 0.0 && a < 1e9 {
        return format!("{v:.0}");
    }
    if !(1e-3..1e6).contains(&a) {
        return format!("{v:.1e}");
    }
    let s = if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        assert_eq!(date_of(0), "1970-01-01");
        assert_eq!(date_of(951_782_400), "2000-02-29");
        assert_eq!(date_of(1_795_564_800), "2026-11-25");
    }

    #[test]
    fn sizes_and_formats_are_checked() {
        assert!(Size::new(10, 600).is_err());
        assert!(Size::new(800, 100_000).is_err());
        assert!(Format::of(Path::new("a.jpg")).is_err());
        assert_eq!(Format::of(Path::new("a.SVG")).unwrap(), Format::Svg);
    }

    #[test]
    fn axis_ranges_are_finite_ordered_and_wide_enough_to_tick() {
        for r in [
            (0.0, f64::INFINITY),
            (f64::NAN, 1.0),
            (-1e308, 1e308),
            (0.0, 1.7e308),
            (f64::MAX, f64::MAX),
        ] {
            let e = tickable("y", r).unwrap_err().to_string();
            assert!(e.contains("the y axis would run from"), "{e}");
        }
        assert_eq!(tickable("x", (0.0, 2.0)).unwrap(), (0.0, 2.0));
        assert_eq!(tickable("x", (2.0, 0.0)).unwrap(), (0.0, 2.0));
        for r in [(1e300, 1e300), (0.0, 5e-324), (-1.0, -1.0)] {
            let (a, b) = tickable("x", r).unwrap();
            assert!(a < r.0.min(r.1) && b > r.0.max(r.1), "{r:?}: {a}, {b}");
            assert!(
                b - a >= 1e-290 && (b - a) >= 1e-9 * r.1.abs(),
                "{r:?}: {a}, {b}"
            );
        }
        assert!(linear_fits(0.0, 1e306).is_ok());
        assert!(linear_fits(-1e306, 1e306).is_err());
        assert!(linear_fits(0.0, f64::INFINITY).is_err());
    }

    #[test]
    fn ticks_are_short() {
        assert_eq!(tick(1000.0), "1000");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(0.125), "0.125");
        assert_eq!(tick(3e7), "30000000");
        assert_eq!(tick(3.5e9), "3.5e9");
    }
}

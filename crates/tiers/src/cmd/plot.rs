//! `tiers plot RESULTS.json --out FIG.svg|png`: the figure of a benchmark report.

use crate::plot::{self, report::ReportFigure, report::Table};
use clap::Args;
use std::path::{Path, PathBuf};

/// Arguments of `tiers plot`.
#[derive(Args, Debug)]
pub struct PlotArgs {
    /// A benchmark report, as `tiers bench NAME --json` prints it.
    pub input: PathBuf,
    /// The figure to write (.svg or .png).
    #[arg(long)]
    pub out: PathBuf,
    /// Width in pixels.
    #[arg(long, default_value_t = plot::WIDTH)]
    pub width: u32,
    /// Height in pixels (default: 620, or more when the report needs more than two rows of
    /// panels).
    #[arg(long)]
    pub height: Option<u32>,
    /// The row field to draw on y instead of the report's value (`efficiency`, `speedup`,
    /// `overhead`, `peak_rss_mib`, …; `value` for the raw value where the report names
    /// another field for its figure).
    #[arg(long)]
    pub value: Option<String>,
    /// When the report was measured, for the caption, where the report carries no date
    /// (otherwise the file's modification date is shown as such).
    #[arg(long)]
    pub date: Option<String>,
}

/// Runs `tiers plot`.
pub fn run(a: PlotArgs) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(h) = a.height {
        plot::Size::new(a.width, h)?;
    }
    plot::Format::of(&a.out)?;
    let mut table = read(&a.input, a.value.as_deref())?;
    if let Some(d) = &a.date {
        table.date = Some(d.clone());
    }
    let fig = ReportFigure::new(table).map_err(|e| format!("{}: {e}", a.input.display()))?;
    let size = plot::Size::new(a.width, a.height.unwrap_or_else(|| fig.layout().height()))?;
    plot::write(&a.out, &fig, size)?;
    let l = fig.layout();
    eprintln!(
        "wrote {}: x = {}, {} series, {} panel(s)",
        a.out.display(),
        l.x().unwrap_or("none"),
        l.series().len(),
        l.panels()
    );
    Ok(())
}

/// Reads a report; a report without a date of its own is dated by its file.
fn read(path: &Path, value: Option<&str>) -> Result<Table, Box<dyn std::error::Error>> {
    let text =
        std::fs::read_to_string(path).map_err(|e| tiers_apps::Error::io(path, "reading", e))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    let mut t = Table::from_json_as(&doc, value).map_err(|e| format!("{}: {e}", path.display()))?;
    if t.date.is_none() {
        t.date = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| format!("file of {}", plot::date_of(d.as_secs())));
    }
    Ok(t)
}

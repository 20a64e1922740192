//! `tiers plot RESULTS.json --out FIG.svg|png`: the figure of a benchmark report.

use super::outputs::{self, Output};
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

/// Runs `tiers plot`. What the arguments alone decide is refused before the report is read:
/// the size, the figure's format, a figure that would replace the report itself (by any name:
/// a link, `./`), and a directory where no file can be written.
pub fn run(a: PlotArgs) -> Result<(), Box<dyn std::error::Error>> {
    plot::Size::new(a.width, a.height.unwrap_or(plot::HEIGHT))?;
    plot::Format::of(&a.out)?;
    outputs::check(
        &[&a.input],
        &[Output {
            path: &a.out,
            option: "--out",
            extensions: &["svg", "png"],
        }],
    )?;
    if let Some(d) = &a.date {
        check_date(d)?;
    }
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
    let text = tiers_apps::files::read_input_text(path)?;
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

/// `--date`: a calendar date, YYYY-MM-DD (it goes under the figure as the run's date).
fn check_date(d: &str) -> Result<(), String> {
    let parts: Vec<&str> = d.split('-').collect();
    let num = |s: &str, len: usize| {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
    };
    let ok = match parts[..] {
        [y, m, day] => matches!(
            (num(y, 4), num(m, 2), num(day, 2)),
            (Some(_), Some(1..=12), Some(1..=31))
        ),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("--date {d:?}: a date as YYYY-MM-DD"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"{"bench": "b", "unit": "ns", "lower_is_better": true, "results": [
        {"impl": "a", "threads": 1, "value": 1.0}, {"impl": "a", "threads": 2, "value": 2.5}]}"#;

    fn args(input: &Path, out: &Path) -> PlotArgs {
        PlotArgs {
            input: input.to_path_buf(),
            out: out.to_path_buf(),
            width: plot::WIDTH,
            height: None,
            value: None,
            date: None,
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tiers-plot-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_figure_never_replaces_its_report() {
        let d = scratch("self");
        // A report named like a figure, as after `cp rep.json rep.svg`.
        let rep = d.join("rep.svg");
        std::fs::write(&rep, REPORT).unwrap();
        let link = d.join("link.svg");
        std::os::unix::fs::symlink(&rep, &link).unwrap();
        std::fs::create_dir_all(d.join("sub")).unwrap();
        for out in [
            rep.clone(),
            d.join("./rep.svg"),
            d.join("sub/../rep.svg"),
            link.clone(),
        ] {
            let e = run(args(&rep, &out)).unwrap_err().to_string();
            assert!(e.contains("is an input"), "{}: {e}", out.display());
            // The report read through the link, the figure named as the file.
            let e = run(args(&link, &out)).unwrap_err().to_string();
            assert!(e.contains("is an input"), "{}: {e}", out.display());
        }
        assert_eq!(std::fs::read_to_string(&rep).unwrap(), REPORT);
        let fig = d.join("fig.svg");
        run(args(&rep, &fig)).unwrap();
        assert!(std::fs::read_to_string(&fig).unwrap().contains("<svg"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_figure_nowhere_to_write_is_refused_before_drawing() {
        let d = scratch("dir");
        let rep = d.join("rep.json");
        std::fs::write(&rep, REPORT).unwrap();
        let e = run(args(&rep, &d.join("no/such/fig.png")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot write in its directory"), "{e}");
        std::fs::create_dir_all(d.join("fig.svg")).unwrap();
        let e = run(args(&rep, &d.join("fig.svg"))).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        // Sizes and formats are refused before the report is read (there is none here).
        let none = d.join("none.json");
        let mut a = args(&none, &d.join("f.svg"));
        a.width = 100_000;
        let e = run(a).unwrap_err().to_string();
        assert!(e.contains("width 100000"), "{e}");
        let e = run(args(&none, &d.join("f.jpg"))).unwrap_err().to_string();
        assert!(e.contains(".svg or .png"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}

//! Runs files of the overhead model (`--runs FILE`, `tiers model FILE`): JSON documents
//! `{"runs": [{"app", "threads", "nodes", "size", "seconds"}, ...]}` of [`Run`]s.

use std::path::Path;
use tiers_apps::model::{Run, Runs};

/// Appends a run to a runs file, creating it if needed.
pub fn append(path: &Path, run: Run) -> Result<(), Box<dyn std::error::Error>> {
    let mut runs = if path.exists() {
        read(path)?
    } else {
        Runs::default()
    };
    runs.runs.push(run);
    std::fs::write(path, serde_json::to_string_pretty(&runs)?)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(())
}

/// Reads a runs file.
pub fn read(path: &Path) -> Result<Runs, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a runs file: {e}", path.display()).into())
}

/// Writes a runs file.
pub fn write(path: &Path, runs: Vec<Run>) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::write(path, serde_json::to_string_pretty(&Runs { runs })?)
        .map_err(|e| format!("{}: {e}", path.display()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(threads: usize, size: usize, seconds: f64) -> Run {
        Run {
            app: "x".into(),
            threads,
            nodes: 1,
            size,
            seconds,
        }
    }

    #[test]
    fn runs_file_round_trip() {
        let path =
            std::env::temp_dir().join(format!("tiers-apps-runs-{}.json", std::process::id()));
        let _ = std::fs::remove_file(&path);
        append(&path, run(1, 10, 2.0)).unwrap();
        append(&path, run(2, 10, 1.0)).unwrap();
        assert_eq!(
            read(&path).unwrap().runs,
            vec![run(1, 10, 2.0), run(2, 10, 1.0)]
        );
        std::fs::write(&path, "{").unwrap();
        assert!(read(&path)
            .unwrap_err()
            .to_string()
            .contains("not a runs file"));
        std::fs::remove_file(&path).unwrap();
    }
}

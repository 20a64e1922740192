//! Runs files of the overhead model (`--runs FILE`, `tiers model FILE`): JSON documents
//! `{"runs": [{"app", "threads", "nodes", "size", "seconds"}, ...]}` of [`Run`]s.
//!
//! Many processes may append to one file at once (every rank of a job, runs started side by
//! side): an append holds an exclusive `flock` on the file while it reads, adds and replaces
//! it, so no entry is lost, and the replacement is atomic, so a failure leaves the old file.

use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use tiers_apps::model::{Run, Runs};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Parses a runs file's text; `name` is used in errors. Every run is validated.
pub fn parse(text: &str, name: &str) -> Res<Runs> {
    let runs: Runs = if text.trim().is_empty() {
        Runs::default()
    } else {
        serde_json::from_str(text).map_err(|e| format!("{name}: not a runs file: {e}"))?
    };
    for r in &runs.runs {
        r.validate().map_err(|e| format!("{name}: {e}"))?;
    }
    Ok(runs)
}

/// Reads a runs file.
pub fn read(path: &Path) -> Res<Runs> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&text, &path.display().to_string())
}

/// Appends a run to a runs file, creating it if needed (see the module's documentation).
pub fn append(path: &Path, run: Run) -> Res<()> {
    run.validate()?;
    let name = path.display().to_string();
    loop {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| format!("{name}: {e}"))?;
        // SAFETY: flock on a descriptor this function owns; it is released when `f` closes.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(format!("{name}: locking: {}", std::io::Error::last_os_error()).into());
        }
        // Another writer may have replaced the file while this one waited for the lock on the
        // old one: lock again the file the path names now.
        let held = f.metadata()?;
        match std::fs::metadata(path) {
            Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => {}
            _ => continue,
        }
        let text = std::io::read_to_string(&f).map_err(|e| format!("{name}: {e}"))?;
        let mut runs = parse(&text, &name)?;
        runs.runs.push(run);
        runs.machine.get_or_insert_with(machine);
        tiers_apps::files::write_atomic(path, serde_json::to_string_pretty(&runs)?.as_bytes())?;
        return Ok(());
    }
}

/// Where and when runs are made now: the machine and the date, as figures caption them.
fn machine() -> String {
    crate::plot::run_caption()
        .trim_start_matches("machine: ")
        .to_string()
}

/// Writes a runs file of runs made now on this machine.
pub fn write(path: &Path, runs: Vec<Run>) -> Res<()> {
    let bytes = serde_json::to_string_pretty(&Runs {
        runs,
        machine: Some(machine()),
    })?;
    Ok(tiers_apps::files::write_atomic(path, bytes.as_bytes())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(threads: usize, size: usize, seconds: f64) -> Run {
        Run {
            app: "x".into(),
            threads,
            processes: 1,
            nodes: 1,
            size,
            seconds,
        }
    }

    fn temp(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("tiers-runs-{name}-{}.json", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn runs_file_round_trip() {
        let path = temp("rt");
        append(&path, run(1, 10, 2.0)).unwrap();
        append(&path, run(2, 10, 1.0)).unwrap();
        let back = read(&path).unwrap();
        assert_eq!(back.runs, vec![run(1, 10, 2.0), run(2, 10, 1.0)]);
        // The first append says where the runs were made.
        let m = back.machine.expect("the machine");
        assert!(m.contains("cores") && m.contains("20"), "{m}");
        std::fs::write(&path, "{").unwrap();
        assert!(read(&path)
            .unwrap_err()
            .to_string()
            .contains("not a runs file"));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn impossible_runs_are_refused() {
        for bad in [
            run(0, 10, 1.0),
            run(1, 10, 0.0),
            run(1, 10, -1.0),
            run(1, 10, f64::NAN),
        ] {
            assert!(append(&temp("bad"), bad.clone()).is_err(), "{bad:?}");
        }
        let text = r#"{"runs": [{"app": "a", "threads": 2, "size": 5, "seconds": -3}]}"#;
        let e = parse(text, "r.json").unwrap_err().to_string();
        assert!(e.contains("r.json") && e.contains("from 1e-9"), "{e}");
        let text =
            r#"{"runs": [{"app": "a", "threads": 2, "processes": 0, "size": 5, "seconds": 1}]}"#;
        let e = parse(text, "r.json").unwrap_err().to_string();
        assert!(e.contains("2x0x1"), "{e}");
    }

    #[test]
    fn runs_files_without_processes_read_as_one_per_node() {
        // Written before the pattern had three tiers: every rank counted as a node.
        let text = r#"{"runs": [{"app": "a", "threads": 2, "nodes": 3, "size": 5, "seconds": 1}]}"#;
        let runs = parse(text, "old.json").unwrap();
        assert_eq!((runs.runs[0].processes, runs.runs[0].p()), (1, 6));
        assert_eq!(runs.machine, None);
    }

    #[test]
    fn concurrent_appends_lose_nothing() {
        let path = temp("many");
        let writers = 50;
        std::thread::scope(|s| {
            for t in 0..writers {
                let path = &path;
                s.spawn(move || append(path, run(t + 1, 10, 1.0)).unwrap());
            }
        });
        let mut threads: Vec<usize> = read(&path)
            .unwrap()
            .runs
            .iter()
            .map(|r| r.threads)
            .collect();
        threads.sort_unstable();
        assert_eq!(threads, (1..=writers).collect::<Vec<_>>());
        std::fs::remove_file(&path).unwrap();
    }
}

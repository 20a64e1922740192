//! Checks on the files a command will write, made before any work starts: the extension names
//! a format the command writes, no output is one of the inputs (or another output), and the
//! directory accepts a new file. Writing itself is atomic (`tiers_apps::files::write_atomic`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

type Res = Result<(), Box<dyn std::error::Error>>;

/// One file a command will write, with the extensions it may have.
pub struct Output<'a> {
    /// The path given.
    pub path: &'a Path,
    /// The option that named it (`--out`, `--plot`, …), for messages.
    pub option: &'static str,
    /// Accepted extensions, lower case, without the dot.
    pub extensions: &'static [&'static str],
}

/// (device, inode) of an existing file.
fn identity(p: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

/// The absolute form of a path that may not exist yet: its directory resolved, its name kept.
fn absolute(p: &Path) -> PathBuf {
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    match p.file_name() {
        Some(n) => dir.join(n),
        None => dir,
    }
}

/// Checks every output against the inputs and each other; see the module's documentation.
pub fn check(inputs: &[&Path], outputs: &[Output<'_>]) -> Res {
    for (k, o) in outputs.iter().enumerate() {
        let ext = o
            .path
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase());
        let bare = o
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| {
                o.extensions
                    .iter()
                    .any(|e| n.eq_ignore_ascii_case(&format!(".{e}")))
            });
        if bare {
            return Err(format!(
                "{} {}: the file needs a name before its extension (a name that starts with a dot is a hidden file without one)",
                o.option,
                o.path.display()
            )
            .into());
        }
        if !ext.as_deref().is_some_and(|e| o.extensions.contains(&e)) {
            return Err(format!(
                "{} {}: unknown output format: name it {}",
                o.option,
                o.path.display(),
                o.extensions
                    .iter()
                    .map(|e| format!(".{e}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
            .into());
        }
        let id = identity(o.path);
        for i in inputs {
            let same = match (id, identity(i)) {
                (Some(a), Some(b)) => a == b,
                _ => absolute(o.path) == absolute(i),
            };
            if same {
                return Err(format!(
                    "{} {} is an input of this command: refusing to overwrite it",
                    o.option,
                    o.path.display()
                )
                .into());
            }
        }
        for p in &outputs[..k] {
            if absolute(p.path) == absolute(o.path) {
                return Err(format!(
                    "{} and {} both name {}",
                    p.option,
                    o.option,
                    o.path.display()
                )
                .into());
            }
        }
        if std::fs::metadata(o.path).is_ok_and(|m| m.is_dir()) {
            return Err(format!("{} {} is a directory", o.option, o.path.display()).into());
        }
        // Through symbolic links to the file they name (its directory takes the temporary
        // file); a device or a FIFO is written into, with nothing beside it.
        match tiers_cluster::output_target(o.path)
            .map_err(|e| format!("{} {}: {e}", o.option, o.path.display()))?
        {
            tiers_cluster::OutputTarget::Replace(p) => writable_dir(&Output { path: &p, ..*o })?,
            tiers_cluster::OutputTarget::Stream(_) => {}
        }
    }
    Ok(())
}

/// Whether a new file can be created beside the output (where the atomic write puts its
/// temporary file).
fn writable_dir(o: &Output<'_>) -> Res {
    // Unique per call: the ranks of a job on the local engine are threads of one process,
    // and may probe one directory at the same moment.
    let probe = tiers_apps::files::temporary_beside(&absolute(o.path));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(format!(
            "{} {}: cannot write in its directory: {e}",
            o.option,
            o.path.display()
        )
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out<'a>(p: &'a Path, ext: &'static [&'static str]) -> Output<'a> {
        Output {
            path: p,
            option: "--out",
            extensions: ext,
        }
    }

    #[test]
    fn outputs_are_checked_before_work() {
        let dir = std::env::temp_dir().join(format!("tiers-outputs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let input = dir.join("seq.fa");
        std::fs::write(&input, ">a\nACGT\n").unwrap();
        let e = check(&[&input], &[out(&input, &["bin"])])
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown output format"), "{e}");
        let e = check(&[&input], &[out(&input, &["fa"])])
            .unwrap_err()
            .to_string();
        assert!(e.contains("is an input"), "{e}");
        // The same file by another name.
        let alias = dir.join("./sub/../seq.fa");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let e = check(&[&input], &[out(&alias, &["fa"])])
            .unwrap_err()
            .to_string();
        assert!(e.contains("is an input"), "{e}");
        let d = dir.join("d.bin");
        assert!(check(&[&input], &[out(&d, &["bin"])]).is_ok());
        let e = check(&[&input], &[out(&d, &["bin"]), out(&d, &["bin"])])
            .unwrap_err()
            .to_string();
        assert!(e.contains("both name"), "{e}");
        let missing = dir.join("no/such/dir/d.bin");
        let e = check(&[], &[out(&missing, &["bin"])])
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot write"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Writing output files so that a failure loses nothing: the bytes go to a temporary file in
//! the same directory, which replaces the target only once it is complete and on disk.

use crate::{Error, Result};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Reads input file `path` whole, refusing what cannot be an input before holding it: a
/// device (`/dev/zero` never ends) and a file larger than memory; a pipe is read up to the
/// memory it may take.
pub fn read_input(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::FileTypeExt as _;
    let io = |e| Error::io(path, "reading", e);
    let f = std::fs::File::open(path).map_err(io)?;
    let meta = f.metadata().map_err(io)?;
    let t = meta.file_type();
    if t.is_char_device() || t.is_block_device() || t.is_socket() {
        return Err(Error::format(
            path.display(),
            0,
            "a device or socket, not a file (an input is read whole)",
        ));
    }
    if t.is_dir() {
        return Err(Error::io(
            path,
            "reading",
            std::io::Error::from_raw_os_error(libc::EISDIR),
        ));
    }
    let what = format!("reading {}", path.display());
    if t.is_file() {
        let len = usize::try_from(meta.len()).unwrap_or(usize::MAX);
        crate::limits::check_alloc(&what, len, 1)?;
        let mut out = Vec::with_capacity(len);
        f.take(meta.len()).read_to_end(&mut out).map_err(io)?;
        return Ok(out);
    }
    // A pipe: as much as memory allows, and an error past it.
    let cap = [
        crate::limits::physical_memory(),
        crate::limits::address_space_limit(),
        crate::limits::cgroup_memory_limit(),
    ]
    .into_iter()
    .flatten()
    .min()
    .unwrap_or(u64::MAX);
    let mut out = Vec::new();
    f.take(cap.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(io)?;
    if out.len() as u64 > cap {
        return Err(Error::Invalid(format!(
            "{what}: more bytes than this machine's memory holds"
        )));
    }
    Ok(out)
}

/// [`read_input`] of a text file (UTF-8).
pub fn read_input_text(path: &Path) -> Result<String> {
    String::from_utf8(read_input(path)?).map_err(|e| {
        Error::io(
            path,
            "reading",
            std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
        )
    })
}

/// A temporary name beside `path`, unique within this host (process id and a counter, so the
/// threads of one process never share one either).
pub fn temporary_beside(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    path.with_file_name(format!(
        ".{name}.tiers-{}-{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Writes `bytes` to `path` atomically: either the old file stays whole or the new one is
/// there whole, never a mixture or a truncated file.
///
/// Symbolic links are followed (the link stays and names the new file); a target that is not
/// a regular file (`/dev/null`, `/dev/stdout`, a FIFO) is written straight into, since
/// renaming over it would destroy it ([`tiers_cluster::output_target`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, |f| f.write_all(bytes))
}

/// [`write_atomic`] of what `fill` writes, streamed (through a buffer) rather than held whole
/// first: for outputs as large as the data they come from.
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<()> {
    let path =
        &match tiers_cluster::output_target(path).map_err(|e| Error::io(path, "writing", e))? {
            tiers_cluster::OutputTarget::Replace(p) => p,
            tiers_cluster::OutputTarget::Stream(p) => {
                return std::fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .and_then(|f| {
                        let mut b = std::io::BufWriter::new(f);
                        fill(&mut b)?;
                        b.flush()
                    })
                    .map_err(|e| Error::io(&p, "writing", e));
            }
        };
    let tmp = temporary_beside(path);
    let res = (|| {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        let mut b = std::io::BufWriter::new(f);
        fill(&mut b)?;
        let f = b
            .into_inner()
            .map_err(std::io::IntoInnerError::into_error)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    res.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(path, "writing", e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_or_not_at_all() {
        let dir = std::env::temp_dir().join(format!("tiers-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("out.txt");
        write_atomic(&p, b"first").unwrap();
        write_atomic(&p, b"second").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second");
        // Through a symbolic link: the link stays and names the new bytes.
        let link = dir.join("link.txt");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("out.txt", &link).unwrap();
        write_atomic(&link, b"third").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&p).unwrap(), b"third");
        // Into a FIFO (read by a thread), which stays a FIFO.
        use std::os::unix::fs::FileTypeExt;
        let fifo = dir.join("fifo.txt");
        let _ = std::fs::remove_file(&fifo);
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        write_atomic(&fifo, b"streamed").unwrap();
        assert_eq!(reader.join().unwrap(), b"streamed");
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        std::fs::remove_file(&fifo).unwrap();
        std::fs::remove_file(&link).unwrap();
        // A target that cannot be replaced (a directory) leaves no temporary file behind.
        let sub = dir.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        assert!(matches!(write_atomic(&sub, b"x"), Err(Error::Io { .. })));
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

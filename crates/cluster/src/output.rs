//! Output files of a rank that may be replicated: whatever the replicas do, the file ends up
//! written whole, with the bytes of one replica, and never torn.
//!
//! Every replica of a logical rank computes the same bytes (`twosided::Comm`'s replicated
//! mode is deterministic), so each writes its own temporary file beside the target
//! (`.NAME.tiers-PID.tmp`) and, once it is complete and synced, [`RankFile::commit`] renames
//! it over the target, unless a sibling replica has already done so in this job: the first
//! replica to commit leaves a claim (a shared-memory object named after the job and the
//! target, removed with the job's other objects when the launcher ends), and a replica that
//! finds the claim drops its own copy. A replica that dies while writing leaves only its
//! temporary file, which the next commit of the same target on this host removes; the file
//! itself is never half-written, because a rename is atomic. Two replicas that commit at the
//! same instant may both rename: the target is then replaced by identical bytes, which no
//! reader can tell apart.
//!
//! Without replicas (or outside a launcher) a commit is the usual temporary file renamed over
//! the target, so a failed run leaves the previous file whole.
//!
//! A target that is a stream (a FIFO, a device: see [`output_target`]) is written into, not
//! replaced. A replica holds its bytes until its commit, and only the first to claim the
//! stream writes them, so a reader gets one copy; but a stream cannot be replaced whole, so
//! should that replica die while writing, the reader keeps what it got and no other copy
//! follows.
//!
//! ```no_run
//! use std::io::Write;
//! let mut f = tiers_cluster::RankFile::create("report.txt")?;
//! writeln!(f, "result")?;
//! f.commit()?;
//! # Ok::<(), std::io::Error>(())
//! ```

use crate::config::{env, env_str, env_usize};
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Where the bytes written "to" a path go ([`output_target`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputTarget {
    /// A regular file (or none yet) at this path, with symbolic links followed: replaced
    /// whole by a temporary file renamed over it, the links left in place.
    Replace(PathBuf),
    /// Something that is not a regular file and cannot be replaced (a device such as
    /// `/dev/null` or `/dev/stdout`, a FIFO, a socket): written straight into, as a shell's
    /// redirection would, since renaming over it would destroy it.
    Stream(PathBuf),
}

/// Resolves the output path `path`: follows symbolic links (a dangling one names the file it
/// would create), and tells a regular file from a device or a FIFO. A directory is
/// `Replace` (the rename then fails with a clear error, and the callers check for one first).
///
/// # Errors
///
/// A loop of links, or a link that cannot be read.
pub fn output_target(path: &Path) -> io::Result<OutputTarget> {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&p)?;
                p = match p.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            Ok(m) if m.is_file() || m.is_dir() => return Ok(OutputTarget::Replace(p)),
            Ok(_) => return Ok(OutputTarget::Stream(p)),
            Err(_) => return Ok(OutputTarget::Replace(p)),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{}: too many levels of symbolic links", path.display()),
    ))
}

/// What [`RankFile::commit`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commit {
    /// This process's bytes are the file's.
    Written,
    /// A sibling replica had already written the file in this job; this copy was dropped.
    AlreadyWritten,
}

/// A file being written by (a replica of) a rank; see the [module](self) notes.
#[derive(Debug)]
pub struct RankFile {
    path: PathBuf,
    tmp: PathBuf,
    file: Option<File>,
    /// A replica's output to a stream (a FIFO, a device), held here until the commit: only
    /// the replica that claims the stream first writes it, so it gets one copy of the bytes.
    held: Option<Held>,
}

/// The bytes of a replica's output to a stream, and the claim that decides who writes them.
#[derive(Debug)]
struct Held {
    claim: String,
    bytes: Vec<u8>,
}

/// The name of this process's temporary file for `path`, and its prefix for any process.
fn tmp_names(path: &Path) -> io::Result<(PathBuf, String)> {
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a file name", path.display()),
        )
    })?;
    let prefix = format!(".{name}.tiers-");
    let tmp = path.with_file_name(format!("{prefix}{}.tmp", std::process::id()));
    Ok((tmp, prefix))
}

impl RankFile {
    /// Starts writing `path` (its directory must exist and be writable).
    ///
    /// # Errors
    ///
    /// When `path` has no file name or the temporary file cannot be created.
    pub fn create(path: impl AsRef<Path>) -> io::Result<RankFile> {
        let claim = claim_name(path.as_ref());
        RankFile::create_claimed(path.as_ref(), claim)
    }

    /// [`create`](Self::create) with the claim of a replicated rank's output (`None` when
    /// the process is not a replica).
    fn create_claimed(path: &Path, claim: Option<String>) -> io::Result<RankFile> {
        let path = match output_target(path)? {
            OutputTarget::Replace(p) => p,
            OutputTarget::Stream(p) => {
                // Nothing to rename over: the bytes go straight in, once they are complete
                // and claimed where the rank is replicated (see `commit`).
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
                return Ok(RankFile {
                    tmp: PathBuf::new(),
                    path: p,
                    file: Some(file),
                    held: claim.map(|claim| Held {
                        claim,
                        bytes: Vec::new(),
                    }),
                });
            }
        };
        let (tmp, _) = tmp_names(&path)?;
        let file = File::create(&tmp).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "{}: cannot write a file in its directory ({e}; the temporary file {} beside it)",
                    path.display(),
                    tmp.display()
                ),
            )
        })?;
        Ok(RankFile {
            path,
            tmp,
            file: Some(file),
            held: None,
        })
    }

    /// Finishes the file: syncs it and renames it over the target, unless a sibling replica
    /// already did in this job.
    ///
    /// # Errors
    ///
    /// When the data cannot be synced or the rename fails (the temporary file is removed).
    pub fn commit(mut self) -> io::Result<Commit> {
        let mut file = self.file.take().expect("a RankFile is committed once");
        if self.tmp.as_os_str().is_empty() {
            // A stream (see `create`): written in place; a replica's bytes only by the first
            // replica to claim it. (A stream cannot be replaced whole: should that replica die
            // while writing, the reader has part of the bytes and no other copy follows.)
            if let Some(h) = self.held.take() {
                if let Err(e) = crate::sys::Mapping::create(&h.claim, 1) {
                    if e.kind() == io::ErrorKind::AlreadyExists {
                        return Ok(Commit::AlreadyWritten);
                    }
                    return Err(e);
                }
                file.write_all(&h.bytes)?;
            }
            file.flush()?;
            return Ok(Commit::Written);
        }
        file.sync_all()?;
        drop(file);
        sweep_dead_replicas(&self.path);
        let claim = claim_name(&self.path);
        if let Some(c) = &claim {
            if crate::sys::shm_exists(c) {
                let _ = std::fs::remove_file(&self.tmp);
                return Ok(Commit::AlreadyWritten);
            }
        }
        if let Err(e) = std::fs::rename(&self.tmp, &self.path) {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "renaming {} to {}: {e}",
                    self.tmp.display(),
                    self.path.display()
                ),
            ));
        }
        if let Some(c) = &claim {
            // Later replicas of this job drop their copies; the launcher removes the claim.
            let _ = crate::sys::Mapping::create(c, 1);
        }
        Ok(Commit::Written)
    }
}

impl Write for RankFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(h) = self.held.as_mut() {
            h.bytes.extend_from_slice(buf);
            return Ok(buf.len());
        }
        self.file.as_mut().expect("not committed").write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        if self.held.is_some() {
            return Ok(());
        }
        self.file.as_mut().expect("not committed").flush()
    }
}

impl Drop for RankFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// The claim of `path` in this job, when this process is one of several replicas of a rank
/// started by the launcher.
fn claim_name(path: &Path) -> Option<String> {
    let replicas = env_usize(env::REPLICAS).ok().flatten().unwrap_or(1);
    let job = env_str(env::JOB)?;
    if replicas <= 1 {
        return None;
    }
    let rank = env_usize(env::RANK).ok().flatten()? / replicas;
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    // A fingerprint of the absolute path and the logical rank: a name the shared-memory file
    // system takes whatever the path's length or bytes.
    let mut f = crate::Fingerprint::new();
    std::hash::Hasher::write(&mut f, abs.as_os_str().as_encoded_bytes());
    std::hash::Hasher::write(&mut f, &rank.to_le_bytes());
    let h = std::hash::Hasher::finish(&f);
    Some(format!("/tiers-{job}-out-{h:016x}"))
}

/// Removes the temporary files of `path` left by replicas that died while writing it.
fn sweep_dead_replicas(path: &Path) {
    let Ok((_, prefix)) = tmp_names(path) else {
        return;
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|n| n.strip_suffix(".tmp"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !crate::sys::pid_alive(pid) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Symbolic links are followed (and stay links); a FIFO is written into, and stays one.
    #[test]
    fn links_are_followed_and_fifos_written_into() {
        use std::os::unix::fs::FileTypeExt;
        let dir = std::env::temp_dir().join(format!("tiers-target-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("real")).unwrap();
        let file = dir.join("real/out.txt");
        std::fs::write(&file, b"old").unwrap();
        let link = dir.join("link.txt");
        std::os::unix::fs::symlink("real/out.txt", &link).unwrap();
        assert_eq!(
            output_target(&link).unwrap(),
            OutputTarget::Replace(dir.join("real/out.txt"))
        );
        let mut f = RankFile::create(&link).unwrap();
        f.write_all(b"through the link").unwrap();
        f.commit().unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&file).unwrap(), b"through the link");
        // A dangling link names the file it would create.
        let dangling = dir.join("dangling.txt");
        std::os::unix::fs::symlink("real/new.txt", &dangling).unwrap();
        assert_eq!(
            output_target(&dangling).unwrap(),
            OutputTarget::Replace(dir.join("real/new.txt"))
        );
        // A loop of links is an error, not a hang.
        std::os::unix::fs::symlink("b", dir.join("a")).unwrap();
        std::os::unix::fs::symlink("a", dir.join("b")).unwrap();
        assert!(output_target(&dir.join("a")).is_err());
        // A FIFO: read by a thread while the file is written.
        let fifo = dir.join("fifo.txt");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(
            output_target(&fifo).unwrap(),
            OutputTarget::Stream(_)
        ));
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        let mut f = RankFile::create(&fifo).unwrap();
        f.write_all(b"into the fifo").unwrap();
        assert_eq!(f.commit().unwrap(), Commit::Written);
        assert_eq!(reader.join().unwrap(), b"into the fifo");
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        assert_eq!(
            output_target(Path::new("/dev/null")).unwrap(),
            OutputTarget::Stream("/dev/null".into())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Two replicas of a rank writing to one FIFO: the reader gets one copy of the bytes,
    /// from the replica that committed first; the other's are dropped.
    #[test]
    fn replicas_write_a_stream_once() {
        let dir = std::env::temp_dir().join(format!("tiers-stream-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo.txt");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let claim = format!("/tiers-test-{}-out-stream", std::process::id());
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        let mut a = RankFile::create_claimed(&fifo, Some(claim.clone())).unwrap();
        let mut b = RankFile::create_claimed(&fifo, Some(claim.clone())).unwrap();
        a.write_all(b"the rank's ").unwrap();
        b.write_all(b"the rank's ").unwrap();
        a.write_all(b"bytes").unwrap();
        b.write_all(b"bytes").unwrap();
        assert_eq!(b.commit().unwrap(), Commit::Written);
        assert_eq!(a.commit().unwrap(), Commit::AlreadyWritten);
        assert_eq!(reader.join().unwrap(), b"the rank's bytes");
        crate::sys::shm_unlink(&claim).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_commit_replaces_the_file_whole_and_an_abandoned_one_leaves_it() {
        let dir = std::env::temp_dir().join(format!("tiers-rankfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("out.txt");
        std::fs::write(&p, b"old").unwrap();
        let mut f = RankFile::create(&p).unwrap();
        f.write_all(b"new bytes").unwrap();
        // Abandoned (a failed run): the old file stays, no temporary file is left.
        let mut g = RankFile::create(dir.join("other.txt")).unwrap();
        g.write_all(b"x").unwrap();
        drop(g);
        assert_eq!(f.commit().unwrap(), Commit::Written);
        assert_eq!(std::fs::read(&p).unwrap(), b"new bytes");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("out.txt")]);
        // A temporary file of a process that no longer exists is swept at the next commit.
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let dead = c.id();
        c.wait().unwrap();
        let stale = dir.join(format!(".out.txt.tiers-{dead}.tmp"));
        std::fs::write(&stale, b"half").unwrap();
        let mut f = RankFile::create(&p).unwrap();
        f.write_all(b"again").unwrap();
        f.commit().unwrap();
        assert!(!stale.exists());
        assert!(RankFile::create("/").is_err(), "a path without a file name");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

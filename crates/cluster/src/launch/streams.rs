//! The launcher's streams: the ranks' output forwarded (prefixed, or merged across the
//! replicas of a rank), the launcher's input forwarded to the ranks that read it, and the
//! program found on `PATH` as a shell finds it.

use crate::config::PREFIX_LINE_MAX;
use std::io::{self, BufRead, Read, Write};
use std::path::PathBuf;
use std::process::ChildStdin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Forwards a rank's output line by line with a `[rank] ` prefix; when the launcher's own
/// output is closed, flags it and stops (the rank then gets SIGPIPE on its next write).
pub(super) fn pump(src: impl Read, rank: usize, err: bool, closed: &AtomicBool) {
    let mut r = io::BufReader::new(src);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut r)
            .take(PREFIX_LINE_MAX as u64)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if !line.ends_with(b"\n") {
                    line.push(b'\n');
                }
                let mut buf = format!("[{rank}] ").into_bytes();
                buf.extend_from_slice(&line);
                if !write_out(err, &buf, closed) {
                    return;
                }
            }
        }
    }
}

/// Forwards a replica's output: line `i` goes out only when no replica of the same logical
/// rank has forwarded line `i` yet (`merged` counts the lines forwarded); an unfinished last
/// line is dropped. A line longer than [`PREFIX_LINE_MAX`] is taken in pieces of that length,
/// each forwarded as a line of its own (the replicas cut their copies alike), so that a rank
/// that writes without newlines does not make the launcher hold its output whole.
/// `tag`: prefix lines with `[rank] `.
pub(super) fn pump_merged(
    src: impl Read,
    tag: Option<usize>,
    err: bool,
    merged: &Mutex<u64>,
    closed: &AtomicBool,
) {
    let mut r = io::BufReader::new(src);
    let mut line = Vec::new();
    let mut mine = 0u64;
    loop {
        line.clear();
        match (&mut r)
            .take(PREFIX_LINE_MAX as u64)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return,
            Ok(n) if n == PREFIX_LINE_MAX && !line.ends_with(b"\n") => line.push(b'\n'),
            Ok(_) if !line.ends_with(b"\n") => return,
            Ok(_) => {}
        }
        let mut fwd = merged.lock().unwrap_or_else(|p| p.into_inner());
        if mine == *fwd {
            let mut buf = tag.map_or_else(Vec::new, |t| format!("[{t}] ").into_bytes());
            buf.extend_from_slice(&line);
            if !write_out(err, &buf, closed) {
                return;
            }
            *fwd += 1;
        }
        mine += 1;
    }
}

/// Writes `buf` to the launcher's standard error or output; false (and `closed` raised) when
/// that is closed.
fn write_out(err: bool, buf: &[u8], closed: &AtomicBool) -> bool {
    let res = if err {
        io::stderr().lock().write_all(buf)
    } else {
        io::stdout().lock().write_all(buf)
    };
    if res.is_err() {
        closed.store(true, Ordering::Relaxed);
    }
    res.is_ok()
}

/// Forwards the launcher's input to `to` (the replicas of rank 0 on this host: every one gets
/// every byte, so that they compute alike), until the input ends or no reader is left. Each
/// reader has a writer thread of its own behind a bounded queue, so that a reader that stops
/// taking input (a stopped replica, its pipe full) holds up no other: one that falls more than
/// [`INPUT_BEHIND`] pieces behind the others, or is gone (a dead replica), is dropped and the
/// others go on (when all are that far behind, the input waits for them). Not joined: the
/// threads end with the input, or with the launcher.
pub(super) fn forward_input(to: Vec<ChildStdin>) {
    if to.is_empty() {
        return;
    }
    let mut queues: Vec<std::sync::mpsc::SyncSender<std::sync::Arc<[u8]>>> = to
        .into_iter()
        .map(|mut w| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<std::sync::Arc<[u8]>>(INPUT_BEHIND);
            std::thread::spawn(move || {
                // Ends when its reader is gone or the input ends (every sender dropped).
                while let Ok(piece) = rx.recv() {
                    if w.write_all(&piece).is_err() {
                        return;
                    }
                }
            });
            tx
        })
        .collect();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        let mut input = io::stdin().lock();
        loop {
            let n = match input.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            let piece: std::sync::Arc<[u8]> = buf[..n].into();
            let (mut full, mut gone) = (Vec::new(), Vec::new());
            for (i, q) in queues.iter().enumerate() {
                match q.try_send(piece.clone()) {
                    Ok(()) => {}
                    Err(std::sync::mpsc::TrySendError::Full(_)) => full.push(i),
                    Err(std::sync::mpsc::TrySendError::Disconnected(_)) => gone.push(i),
                }
            }
            if !full.is_empty() && full.len() + gone.len() == queues.len() {
                // Nobody took it: every reader is slow (one rank reading at its own pace), so
                // the input waits for them rather than leaving any behind.
                for &i in &full {
                    if queues[i].send(piece.clone()).is_err() {
                        gone.push(i);
                    }
                }
            } else {
                gone.extend(full);
            }
            gone.sort_unstable();
            for i in gone.into_iter().rev() {
                queues.swap_remove(i);
            }
            if queues.is_empty() {
                return;
            }
        }
    });
}

/// Pieces of input (64 KiB at most each) a reader may fall behind the others before it is
/// dropped: 64 MiB.
const INPUT_BEHIND: usize = 1024;

/// Whether the launcher may read its input: not when the input is a terminal that another
/// process group holds (the launcher runs in the background of an interactive shell), where
/// a read would stop the launcher (`SIGTTIN`) and the whole job with it.
pub(super) fn input_readable() -> bool {
    // SAFETY: isatty, tcgetpgrp and getpgrp only read the process's and descriptor's state.
    unsafe { libc::isatty(0) == 0 || libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// Finds `prog` like a shell would (the first executable file of that name on `PATH`);
/// `tiers` falls back to the running executable.
pub fn resolve(prog: &str) -> PathBuf {
    if prog.contains('/') {
        return PathBuf::from(prog);
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&paths) {
            let p = d.join(prog);
            if executable(&p) {
                return p;
            }
        }
    }
    if let Ok(me) = std::env::current_exe() {
        if me.file_name().and_then(|s| s.to_str()) == Some(prog) {
            return me;
        }
    }
    PathBuf::from(prog)
}

/// A file this process may execute.
fn executable(p: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path; access only reads it.
    p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
}

//! One output file written by every rank of a job, each at the offset of its rows: a
//! distance matrix (SPIDAL `.bin` or `.npy`) computed by row blocks across ranks. Rank 0
//! creates a temporary file of the full size beside the output, every rank writes its rows
//! into it, and rank 0 renames it over the output once all have: readers never see a partial
//! matrix, and a failed job leaves the previous output whole.

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use tiers_apps::distance::RowBlock;
use tiers_apps::matrix::{self, Format};
use tiers_cluster::{Op, Timeout, World};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The temporary file's name, the same on every rank: rank 0 picks a token and the others
/// learn it from a maximum over the ranks.
fn temporary(world: &World, out: &Path) -> Res<PathBuf> {
    let mine = if world.rank() == 0 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() as u64);
        (u64::from(std::process::id()) << 32) | t
    } else {
        0
    };
    let mut token = [0u64];
    world.allreduce(&[mine], &mut token, Op::Max, Timeout::Block)?;
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "matrix".into());
    Ok(out.with_file_name(format!(".{name}.tiers-{:x}.tmp", token[0])))
}

/// Removes the temporary file unless it was renamed over the output (rank 0 only): a job that
/// fails midway leaves neither a partial output nor a temporary file.
struct Cleanup<'a> {
    tmp: &'a Path,
    armed: bool,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = std::fs::remove_file(self.tmp);
        }
    }
}

/// Writes `block` (this rank's rows) into `out` with every other rank (collective).
pub fn write(world: &World, out: &Path, format: Format, block: &RowBlock) -> Res<()> {
    // Through symbolic links to the file they name; a device or a FIFO takes no rows at
    // offsets (every rank would have to write it in order).
    let out = &match tiers_cluster::output_target(out)? {
        tiers_cluster::OutputTarget::Replace(p) => p,
        tiers_cluster::OutputTarget::Stream(p) => {
            return Err(format!(
                "{}: not a regular file: a matrix written by rows across ranks needs one (write a file, or run on one rank)",
                p.display()
            )
            .into())
        }
    };
    let n = block.n;
    let (header, elem) = match format {
        Format::SpidalLe | Format::SpidalBe => (Vec::new(), 2u64),
        Format::Npy => (matrix::npy_header(n), 4u64),
        Format::Csv => return Err("CSV cannot be written by rows in place".into()),
    };
    let tmp = temporary(world, out)?;
    let total = header.len() as u64 + (n as u64) * (n as u64) * elem;
    let mut cleanup = Cleanup {
        tmp: &tmp,
        armed: false,
    };
    let created = if world.rank() == 0 {
        (|| -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)?;
            f.set_len(total)?;
            f.write_all(&header)
        })()
        .map_err(|e| format!("{}: creating: {e}", tmp.display()))
    } else {
        Ok(())
    };
    cleanup.armed = world.rank() == 0 && created.is_ok();
    // Every rank learns whether the file exists before writing into it.
    let mut ok = [0u64];
    world.allreduce(
        &[u64::from(created.is_err())],
        &mut ok,
        Op::Max,
        Timeout::Block,
    )?;
    created?;
    if ok[0] != 0 {
        return Err("rank 0 could not create the output".into());
    }
    let bytes = match format {
        Format::SpidalLe => matrix::spidal_values(&block.data, false),
        Format::SpidalBe => matrix::spidal_values(&block.data, true),
        _ => matrix::npy_values(&block.data),
    };
    let wrote = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).open(&tmp)?;
        f.seek(SeekFrom::Start(
            header.len() as u64 + (block.rows.start as u64) * (n as u64) * elem,
        ))?;
        f.write_all(&bytes)?;
        f.sync_all()
    })()
    .map_err(|e| format!("{}: writing rows {:?}: {e}", tmp.display(), block.rows));
    let mut bad = [0u64];
    world.allreduce(
        &[u64::from(wrote.is_err())],
        &mut bad,
        Op::Max,
        Timeout::Block,
    )?;
    if bad[0] != 0 {
        wrote?;
        return Err("another rank could not write its rows".into());
    }
    if world.rank() == 0 {
        std::fs::rename(&tmp, out).map_err(|e| format!("{}: {e}", out.display()))?;
        cleanup.armed = false;
    }
    world.barrier(Timeout::Block)?;
    Ok(())
}

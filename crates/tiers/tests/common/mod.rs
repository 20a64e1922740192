//! What the command-line tests share: running the `tiers` binary as a user does, and a
//! scratch directory removed at the end of the test. Each test file uses part of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// Runs `tiers args` outside any job (`TIERS_RANK` removed) and returns whether it succeeded,
/// its standard output and its standard error.
pub fn tiers(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tiers"))
        .args(args)
        .env_remove("TIERS_RANK")
        .output()
        .expect("tiers runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A scratch directory of this test process, named after the test file and `tag`, empty at
/// the start and removed when dropped.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(tag: &str) -> Dir {
        // `cli_apps::common` names the test file the module is compiled into.
        let file = module_path!().split("::").next().unwrap_or("cli");
        let p = std::env::temp_dir().join(format!("tiers-{file}-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }

    /// The path of `f` in the directory, as a string for a command line.
    pub fn path(&self, f: &str) -> String {
        self.0.join(f).display().to_string()
    }

    /// Writes `text` into `f` and returns its path.
    pub fn write(&self, f: &str, text: &str) -> String {
        std::fs::write(self.0.join(f), text).unwrap();
        self.path(f)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

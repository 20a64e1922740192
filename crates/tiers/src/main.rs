//! The `tiers` command: machine topology, benchmarks, the launcher and the applications.
//!
//! The libraries (`tiers-node`, `tiers-cluster`, `tiers-apps`) hold the runtime and the
//! algorithms; everything a user types lives here: the commands in [`cmd`], every benchmark
//! in [`bench`](mod@bench), the pictures in [`plot`] and the runs files of the overhead model in [`runs`].

use clap::{CommandFactory, FromArgMatches, Parser};
use std::process::ExitCode;

/// `print!` that returns an error ([`cmd::Stdout`]) where the standard output is closed or
/// full, instead of panicking as `print!` does.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*).map_err($crate::cmd::Stdout)
    }};
}

/// `println!` that returns an error ([`cmd::Stdout`]) where the standard output is closed or
/// full, instead of panicking as `println!` does.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*).map_err($crate::cmd::Stdout)
    }};
}

mod bench;
mod cmd;
mod plot;
mod runs;

#[cfg(test)]
mod parsers_test;

#[derive(Parser)]
#[command(
    name = "tiers",
    version,
    about = "tiers: a hybrid, multi-tier parallel runtime for multicore clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: cmd::Command,
}

/// Lets every command take a negative number as an option's value (`--dt -0.1`), so that the
/// value's own check names what is wrong with it, rather than the parser taking `-0.1` for an
/// unknown option `-0`.
fn with_negative_numbers(c: clap::Command) -> clap::Command {
    c.allow_negative_numbers(true)
        .mut_subcommands(with_negative_numbers)
}

fn main() -> ExitCode {
    // Installed as `gaspi_run` (`tiers gaspi install`), tiers is GPI-2's launcher.
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let called = args.first().map(std::path::Path::new);
    if called.and_then(|p| p.file_name()) == Some("gaspi_run".as_ref()) {
        args.splice(0..1, ["tiers", "gaspi", "run"].map(Into::into));
    }
    let matches = with_negative_numbers(Cli::command()).get_matches_from(args);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    match cli.command.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A reader that stopped reading (`tiers model … | head`) is not a failure.
            if e.downcast_ref::<cmd::Stdout>()
                .is_some_and(|o| o.0.kind() == std::io::ErrorKind::BrokenPipe)
            {
                return ExitCode::SUCCESS;
            }
            eprintln!("tiers: error: {e}");
            match e.downcast_ref::<cmd::Exit>() {
                Some(x) => ExitCode::from(x.code),
                None => ExitCode::FAILURE,
            }
        }
    }
}

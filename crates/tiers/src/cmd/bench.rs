//! `tiers bench NAME`: looks the benchmark up in the registry and runs it.

use crate::bench;
use clap::Args;
use tiers_bench::Opts;

/// Arguments of `tiers bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Benchmark name (`list` to see them all).
    pub name: String,
    /// What the benchmark runs, for those that take one (`tiers bench scaling mds`).
    pub target: Option<String>,
    /// Thread counts, e.g. `1,2` or `1-16` (each benchmark has its own default).
    #[arg(long)]
    pub threads: Option<String>,
    /// Minimum measured seconds per implementation and configuration.
    #[arg(long, default_value_t = 0.5)]
    pub min_time: f64,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also draw the run's figure into this file (.svg or .png).
    #[arg(long)]
    pub plot: Option<std::path::PathBuf>,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Arguments for the benchmark itself (after `--`).
    #[arg(last = true)]
    pub rest: Vec<String>,
}

/// Runs `tiers bench`.
pub fn run(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    if args.name == "list" {
        out!("{}", bench::list())?;
        return Ok(());
    }
    // At most a day: the benchmarks' own timeouts grow with it.
    if !(args.min_time > 0.0 && args.min_time <= 86_400.0) {
        return Err(format!(
            "--min-time must be a positive number of seconds up to 86400, not {}",
            args.min_time
        )
        .into());
    }
    if let Some(p) = &args.plot {
        // Before the run: a wrong extension or directory should not cost a whole measurement.
        crate::plot::Format::of(p)?;
        super::outputs::check(
            &[],
            &[super::outputs::Output {
                path: p,
                option: "--plot",
                extensions: &["svg", "png"],
            }],
        )?;
    }
    let Some(b) = bench::find(&args.name) else {
        return Err(format!(
            "unknown benchmark {:?}; `tiers bench list` names them",
            args.name
        )
        .into());
    };
    let opts = Opts {
        threads: match &args.threads {
            Some(s) => tiers_bench::parse_counts(s)?,
            None => vec![1, 2],
        },
        min_time: args.min_time,
        json: args.json,
        progress: !args.quiet,
    };
    let rest: Vec<String> = args.target.iter().chain(&args.rest).cloned().collect();
    let ctx = bench::Ctx {
        opts,
        threads_given: args.threads.is_some(),
        args: &rest,
    };
    if let Some(report) = (b.run)(&ctx)? {
        report.print(ctx.opts.json).map_err(super::Stdout)?;
        if let Some(p) = &args.plot {
            let table = crate::plot::report::Table::from_report(&report);
            let fig = crate::plot::report::ReportFigure::new(table)?;
            let size = crate::plot::Size::new(crate::plot::WIDTH, fig.layout().height())?;
            crate::plot::write(p, &fig, size)?;
            tiers_bench::progress(&ctx.opts, format!("wrote {}", p.display()));
        }
    }
    Ok(())
}

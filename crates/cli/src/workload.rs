//! `shortfirst workload`: generate a synthetic workload (docroot + trace) or
//! print the size statistics of any trace.

use anyhow::Context;
use shortfirst_load::{generate, stats, trace, workload};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Write DIR/docroot/ (the files) and DIR/trace.csv.
    Generate(GenerateArgs),
    /// Print request-size statistics of a trace (min, max, mean, median, p90,
    /// Hill tail index, share of bytes in the largest 3% of requests).
    Stats(StatsArgs),
}

#[derive(clap::Args, Debug)]
struct GenerateArgs {
    /// wc98like, surge, bpareto:ALPHA,MIN,MAX, exp:MEAN or fixed:BYTES (sizes take units: 100K, 2M).
    #[arg(long)]
    kind: String,
    /// Number of distinct files.
    #[arg(long, default_value_t = 5000)]
    files: usize,
    /// Number of requests in the trace.
    #[arg(long, default_value_t = 100_000)]
    requests: u64,
    /// Mean arrival rate of the trace (requests/s); `shortfirst load` rescales it.
    #[arg(long, default_value_t = 100.0)]
    request_rate: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Cap of the Surge tail: 10M, 500K or bytes (the paper's 1e10 cannot be served).
    #[arg(long, value_parser = crate::units::size_bytes_f64)]
    max_bytes: Option<f64>,
    /// Refuse to write a docroot larger than this (apparent size; files are sparse):
    /// 50G, 500M or bytes.
    #[arg(long, default_value_t = generate::DEFAULT_MAX_TOTAL_BYTES, value_parser = crate::units::size_bytes)]
    max_total_bytes: u64,
    /// Replace an existing DIR/docroot and DIR/trace.csv.
    #[arg(long)]
    force: bool,
}

#[derive(clap::Args, Debug)]
struct StatsArgs {
    /// Trace file.
    trace: PathBuf,
    /// csv, clf or wc98 (default: guessed from the file name).
    #[arg(long)]
    format: Option<trace::TraceFormat>,
    /// Count and skip malformed records instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Command::Generate(a) => {
            if a.max_bytes.is_some() && !a.kind.starts_with("surge") {
                anyhow::bail!("--max-bytes applies to --kind surge only");
            }
            let spec = workload::WorkloadSpec::new(&a.kind, a.max_bytes, a.files, a.requests, a.request_rate, a.seed)?;
            let g = generate::generate(&spec, &a.out, a.max_total_bytes, a.force)?;
            eprintln!(
                "wrote {} ({} files, {} bytes) and {} ({} requests)",
                g.docroot.display(),
                g.files,
                g.docroot_bytes,
                g.trace.display(),
                g.requests
            );
            Ok(())
        }
        Command::Stats(a) => {
            let records = trace::open(&a.trace, a.format)?;
            let (iter, skipped): (trace::TraceIter, _) = if a.skip_bad {
                let (it, count) = trace::SkipBad::new(records);
                (Box::new(it), count)
            } else {
                (records, trace::SkipCount::default())
            };
            let mut s = stats::SizeStats::new();
            for r in iter {
                let r = r?;
                s.add(r.size_bytes, r.time_s)
                    .map_err(anyhow::Error::msg)
                    .with_context(|| a.trace.display().to_string())?;
            }
            if skipped.skipped() > 0 {
                eprintln!(
                    "skipped {} malformed records (first: {})",
                    skipped.skipped(),
                    skipped.first_error().unwrap_or_default()
                );
            }
            let report = s.report().with_context(|| format!("{}: no requests", a.trace.display()))?;
            let text = if a.json { report.to_json() + "\n" } else { report.to_text() };
            // A closed pipe (`| head`) is not an error.
            match std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(()),
            }
        }
    }
}

//! `shortfirst netem`: the user-space WAN emulator (the work is in the
//! `shortfirst-netem` crate). Run it in the namespace that routes client
//! traffic into the TUN device named in the config.

use std::path::PathBuf;

use anyhow::Context;
use shortfirst_netem::{Config, Options};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// TOML file: tun, seed, jitter_mode, down_fraction, queue limits and one
    /// [[group]] per client group (name, subnets, rtt_ms, jitter_ms, loss, ...).
    #[arg(long)]
    config: PathBuf,
    /// Write the counters here as JSON (replaced atomically): at exit, on
    /// SIGUSR1, and every --stats-interval-s.
    #[arg(long)]
    stats: Option<PathBuf>,
    /// Also write the counters every this many seconds.
    #[arg(long)]
    stats_interval_s: Option<f64>,
    /// Stop after this many seconds (default: run until SIGTERM/SIGINT).
    #[arg(long)]
    duration_s: Option<f64>,
    /// Override the config's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Check the config, print the resolved delay lines as JSON, and exit.
    #[arg(long)]
    check: bool,
}

fn seconds_to_ns(what: &str, s: Option<f64>) -> anyhow::Result<Option<u64>> {
    match s {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 && s <= 1e7 => Ok(Some((s * 1e9) as u64)),
        Some(s) => anyhow::bail!("--{what} {s}: expected a number of seconds in (0, 1e7]"),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut config = Config::load(&args.config)?;
    if let Some(seed) = args.seed {
        config.seed = seed;
    }
    if args.check {
        println!("{}", serde_json::to_string_pretty(&config)?);
        return Ok(());
    }
    let opts = Options {
        stats_path: args.stats,
        stats_interval_ns: seconds_to_ns("stats-interval-s", args.stats_interval_s)?,
        duration_ns: seconds_to_ns("duration-s", args.duration_s)?,
    };
    shortfirst_netem::run(&config, &opts).with_context(|| format!("netem with {}", args.config.display()))?;
    Ok(())
}

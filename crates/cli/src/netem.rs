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
    /// SIGUSR1, and every --stats-interval.
    #[arg(long)]
    stats: Option<PathBuf>,
    /// Also write the counters this often (`5s`, `500ms`; a plain number is seconds).
    #[arg(long, value_parser = crate::units::positive_duration_s)]
    stats_interval: Option<f64>,
    /// Stop after this long (`60s`, `10m`; default: run until SIGTERM/SIGINT).
    #[arg(long, value_parser = crate::units::positive_duration_s)]
    duration: Option<f64>,
    /// Override the config's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Run under SCHED_FIFO (priority 20; root or CAP_SYS_NICE), so releases
    /// are not late on a busy machine. The emulator sleeps between packets,
    /// so it takes only the CPU its packets need.
    #[arg(long)]
    realtime: bool,
    /// Check the config, print the resolved delay lines as JSON, and exit.
    #[arg(long)]
    check: bool,
}

/// Above the load generator's (`shortfirst load --realtime`), so that the
/// path's delay is kept even while the generator is busy.
const REALTIME_PRIORITY: i32 = 20;

fn seconds_to_ns(what: &str, s: Option<f64>) -> anyhow::Result<Option<u64>> {
    match s {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 && s <= 1e7 => Ok(Some((s * 1e9) as u64)),
        Some(s) => anyhow::bail!("--{what} {s}s: expected at most 1e7 seconds"),
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
        stats_interval_ns: seconds_to_ns("stats-interval", args.stats_interval)?,
        duration_ns: seconds_to_ns("duration", args.duration)?,
        realtime_priority: args.realtime.then_some(REALTIME_PRIORITY),
    };
    shortfirst_netem::run(&config, &opts).with_context(|| format!("netem with {}", args.config.display()))?;
    Ok(())
}

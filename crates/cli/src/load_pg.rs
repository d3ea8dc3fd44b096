//! `shortfirst load-pg`: a pgbench-style script's transactions against PostgreSQL, open or
//! closed loop, with one row per transaction (`shortfirst_load::pg`).

use anyhow::Context;
use shortfirst_load::pg::run::DEFAULT_BACKLOG;
use shortfirst_load::pg::{self, Script};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The server (or the proxy in front of it): postgres://USER[:PASSWORD]@HOST:PORT/DB or
    /// libpq's `host=… port=… user=… dbname=…` form. Connections are plain TCP (no TLS).
    #[arg(long)]
    url: String,
    /// The transaction: pgbench's script form, limited to `\set NAME random(LO, HI)`,
    /// `\set NAME INTEGER` and SQL statements with `:NAME` (sent with the simple query protocol).
    #[arg(long)]
    script: PathBuf,
    /// Open loop: start transactions as a Poisson process at this rate (per second) whether or
    /// not earlier ones have finished, each waiting for a free connection. Without it, closed
    /// loop: each connection runs transactions back to back.
    #[arg(long, value_name = "PER_S")]
    rate: Option<f64>,
    /// Connections, opened before the schedule starts.
    #[arg(long, default_value_t = 16)]
    clients: u32,
    /// How long to schedule transactions: 12s, 2m (a plain number is seconds). Those under way
    /// at the end are waited for.
    #[arg(long, value_parser = crate::units::positive_duration_s)]
    duration: f64,
    /// Give up a transaction this long after its scheduled start: a running one is cancelled
    /// (CancelRequest) and logged `timeout`, one still waiting for a connection is skipped.
    /// Without it, every transaction is waited for.
    #[arg(long, value_parser = crate::units::positive_duration_s)]
    timeout: Option<f64>,
    /// Most arrivals waiting for a free connection; one past it is logged `dropped`.
    #[arg(long, default_value_t = DEFAULT_BACKLOG)]
    backlog: usize,
    /// Seed of the arrival times and of the script's random values.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Longest wait for one connection to open: 10s, 500ms.
    #[arg(long, default_value = "10s", value_parser = crate::units::positive_duration_s)]
    connect_timeout: f64,
    /// Output directory: transactions.csv (one row per transaction) and summary.json.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let pg: pg::ConnectConfig = a.url.parse().with_context(|| "--url: not a PostgreSQL connection string")?;
    let script = Script::read(&a.script)?;
    let summary = pg::run(pg::Config {
        pg,
        script,
        script_path: a.script,
        rate_per_s: a.rate,
        clients: a.clients,
        duration_s: a.duration,
        timeout_s: a.timeout,
        backlog_max: a.backlog,
        seed: a.seed,
        connect_timeout_s: a.connect_timeout,
        out_dir: a.out.clone(),
    })?;
    let outcomes: Vec<String> =
        summary.outcomes.iter().filter(|(_, n)| **n > 0).map(|(o, n)| format!("{o} {n}")).collect();
    eprintln!(
        "load-pg: {} transactions scheduled ({}); {:.1} ok/s, ok p50 {} ms, p99 {} ms; {}",
        summary.scheduled,
        outcomes.join(", "),
        summary.ok_per_s,
        summary.ok_latency.p50_s.map_or("-".into(), |v| format!("{:.2}", v * 1e3)),
        summary.ok_latency.p99_s.map_or("-".into(), |v| format!("{:.2}", v * 1e3)),
        a.out.display()
    );
    Ok(())
}

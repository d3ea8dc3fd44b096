//! `bookstore`: command-line entry of the TPC-W-style bookstore — generate a
//! database, serve the shop over HTTP, measure per-interaction costs, list
//! the routes. Argument parsing and error reporting only; the work is in the
//! library.

// The wall clock: it reports how long real database work took.
#![allow(clippy::disallowed_types)]

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use shortfirst_bookstore::error::{Error, Result};
use shortfirst_bookstore::interactions::{Interaction, Options, Store};
use shortfirst_bookstore::{costs, db, gen, reqlog, server};

#[derive(Parser)]
#[command(name = "bookstore", version, about = "A TPC-W-style online bookstore on PostgreSQL")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create the schema and load a deterministic database (drops existing bookstore tables).
    Gen {
        /// PostgreSQL URL, e.g. postgres://bookstore@127.0.0.1:54329/bookstore
        #[arg(long, env = "BOOKSTORE_DB")]
        db: String,
        /// Number of items (TPC-W: 1,000 … 10,000,000); authors = items/4.
        #[arg(long, default_value_t = 10_000)]
        items: u32,
        /// Number of customers (TPC-W: 2,880 per emulated browser); orders = 0.9 × customers.
        #[arg(long, default_value_t = 28_800)]
        customers: u32,
        /// Seed of the generator: same seed and scale, same database.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Serve the 14 interactions over HTTP/1.1.
    Serve {
        #[arg(long, env = "BOOKSTORE_DB")]
        db: String,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Database connections at most (the application tier's concurrency).
        #[arg(long, default_value_t = 128)]
        pool: usize,
        /// How long a request may wait for a free connection before a 503.
        #[arg(long, default_value_t = 60_000)]
        pool_wait_ms: u64,
        /// Open HTTP connections at most; further connections wait in the backlog.
        #[arg(long, default_value_t = 4_096)]
        max_connections: usize,
        /// Seed of the random defaults (items, subjects, customers) drawn for requests without them.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Write one CSV row per request here (arrival wall-clock time, path, status, service
        /// time, whether the connection closed first), flushed at shutdown.
        #[arg(long, value_name = "FILE")]
        request_log: Option<PathBuf>,
        /// Most rows the request log takes; later requests are not logged (a warning says so).
        #[arg(long, default_value_t = reqlog::DEFAULT_MAX_ROWS)]
        request_log_max_rows: u64,
        /// Run Best Sellers' ranking query this many times per request (TPC-W: 1; 1 to 100):
        /// the same page for that much more database work. A declared deviation, for giving Best
        /// Sellers the share of the work it had on the Gatekeeper paper's MySQL.
        #[arg(long, default_value_t = 1, value_name = "N")]
        best_sellers_repeat: u32,
        /// Tag every statement with its interaction's route in a sqlcommenter comment
        /// (`/*route='%2Fbest_sellers'*/`), as web frameworks' sqlcommenter middleware does:
        /// `shortfirst gatekeeper` in front of PostgreSQL types transactions by it.
        #[arg(long)]
        sql_route_comments: bool,
    },
    /// Measure each interaction's no-load cost and print it next to the Gatekeeper paper's Table 1.
    Costs {
        #[arg(long, env = "BOOKSTORE_DB")]
        db: String,
        /// Recorded rounds of all 14 interactions (after one warm-up round).
        #[arg(long, default_value_t = 50)]
        rounds: usize,
        /// Stop after this many seconds even if fewer rounds ran (at least one always runs).
        #[arg(long, default_value_t = 120.0)]
        budget_s: f64,
        /// Table 1 CSV to compare with (default: the vendored copy of the paper's table).
        #[arg(long)]
        paper: Option<PathBuf>,
        /// Also write the comparison as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Runs of Best Sellers' query per request, as for `serve`.
        #[arg(long, default_value_t = 1, value_name = "N")]
        best_sellers_repeat: u32,
    },
    /// Print the route table (page code, interaction, path) as CSV.
    Routes,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never in a log file.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bookstore: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli.cmd)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = format!("bookstore: error: {e}");
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(&format!("\n  caused by: {s}"));
                src = s.source();
            }
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Gen { db, items, customers, seed } => {
            let scale = gen::Scale::new(items, customers)?;
            let mut client = gen::connect(&db).await?;
            let t0 = Instant::now();
            let loaded = gen::generate(&mut client, scale, seed).await?;
            for (table, rows) in &loaded.rows {
                println!("{table:<20} {rows:>10}");
            }
            eprintln!(
                "bookstore gen: {items} items, {customers} customers, seed {seed}: {:.1} s",
                t0.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Cmd::Serve {
            db,
            listen,
            pool,
            pool_wait_ms,
            max_connections,
            seed,
            request_log,
            request_log_max_rows,
            best_sellers_repeat,
            sql_route_comments,
        } => {
            let request_log = match &request_log {
                Some(p) => Some(Arc::new(reqlog::RequestLog::create(p, request_log_max_rows)?)),
                None => None,
            };
            let pool = db::pool(&db, pool, Duration::from_millis(pool_wait_ms))?;
            let options = Options { best_sellers_repeat, route_comments: sql_route_comments };
            let store = Store::open_options(pool, seed, options).await?;
            let listener = tokio::net::TcpListener::bind(listen).await.map_err(Error::io(format!("bind {listen}")))?;
            let local = listener.local_addr().map_err(Error::io("local address"))?;
            tracing::info!(
                "bookstore serving on http://{local} ({} items, {} customers, Best Sellers query run {}x)",
                store.items(),
                store.customers(),
                store.best_sellers_repeat()
            );
            let opts = server::ServeOptions { max_connections, request_log: request_log.clone(), ..Default::default() };
            server::serve(listener, store, opts, shutdown_signal()).await?;
            if let Some(log) = &request_log {
                log.flush()?;
                if log.skipped() > 0 {
                    tracing::warn!("request log: {} requests not logged (limit)", log.skipped());
                }
            }
            tracing::info!("bookstore: shut down");
            Ok(())
        }
        Cmd::Costs { db, rounds, budget_s, paper, json, seed, best_sellers_repeat } => {
            costs_cmd(&db, rounds, budget_s, paper, json, seed, best_sellers_repeat).await
        }
        Cmd::Routes => {
            println!("code,interaction,path");
            for i in Interaction::ALL {
                println!("{},{},{}", i.code(), i.name(), i.path());
            }
            Ok(())
        }
    }
}

/// `bookstore costs`: measures each interaction's no-load cost, prints it
/// beside the paper's Table 1, and writes the JSON when asked.
async fn costs_cmd(
    db: &str,
    rounds: usize,
    budget_s: f64,
    paper: Option<PathBuf>,
    json: Option<PathBuf>,
    seed: u64,
    best_sellers_repeat: u32,
) -> Result<()> {
    if !(budget_s.is_finite() && budget_s > 0.0) {
        return Err(Error::Config(format!("--budget-s must be positive, got {budget_s}")));
    }
    let paper_rows = match &paper {
        Some(p) => costs::read_paper_table(p)?,
        None => costs::parse_paper_table(costs::PAPER_TABLE1_CSV, "vendored Table 1")?,
    };
    let pool = db::pool(db, 2, Duration::from_secs(30))?;
    let store = Store::open_with(pool, seed, best_sellers_repeat).await?;
    let measured = costs::measure(&store, rounds, Duration::from_secs_f64(budget_s)).await?;
    let rows = costs::compare(&measured, &paper_rows);
    println!(
        "# no-load cost per interaction: ours ({} items, {} customers, PostgreSQL, {} samples each) vs the paper's Table 1 (MySQL, 10,000 items)",
        store.items(),
        store.customers(),
        measured.first().map(|m| m.samples).unwrap_or(0)
    );
    print!("{}", costs::render(&rows));
    if let Some(path) = json {
        let doc = serde_json::json!({
            "items": store.items(),
            "customers": store.customers(),
            "measured": measured,
            "comparison": rows,
        });
        let text = serde_json::to_string_pretty(&doc).map_err(|e| Error::Config(format!("json: {e}")))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text + "\n").map_err(Error::io(tmp.display()))?;
        std::fs::rename(&tmp, &path).map_err(Error::io(path.display()))?;
    }
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

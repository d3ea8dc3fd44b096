//! The `shortfirst` binary: argument parsing, logging set-up and error reporting only.
//!
//! Each subcommand lives in its own module with an `Args` struct and a `run`
//! function that hands over to its library crate. `anyhow` is allowed here and
//! nowhere else: this is the binary's edge. Logging is set up here, once, for every
//! subcommand (`logging`).

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod farm;
mod gatekeeper;
mod help;
mod load;
mod load_pg;
mod logging;
mod netem;
mod serve;
mod sim;
mod spelling;
mod units;
mod uplink;
mod vocabulary;
mod workload;

#[derive(Parser, Debug)]
#[command(name = "shortfirst", version, about = "Serve the shortest remaining work first.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How log lines are written to stderr: `text` for people (coloured only on a terminal
    /// without NO_COLOR), `json` for machines (one object a line). RUST_LOG picks which.
    #[arg(long = logging::FORMAT_FLAG, global = true, value_enum, default_value_t, value_name = "FORMAT")]
    log_format: logging::Format,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Static-file HTTP/1.1 server with size-based connection scheduling.
    Serve(serve::Args),
    /// Install, show or remove the HTB priority-band tree on an uplink.
    Uplink(uplink::Args),
    /// Admission-control and shortest-job-first proxy for dynamic backends.
    Gatekeeper(gatekeeper::Args),
    /// Trace-driven load generator with per-request logs.
    Load(Box<load::Args>),
    /// PostgreSQL load from a pgbench-style script, open or closed loop, one row per transaction.
    LoadPg(load_pg::Args),
    /// Generate workloads (files + trace) and print trace statistics.
    Workload(workload::Args),
    /// Discrete-event simulator running the same policy code as the server.
    Sim(sim::Args),
    /// User-space WAN emulator: per-client-group delay, jitter, loss, rate on a TUN.
    Netem(netem::Args),
    /// HAProxy map and configurations for a farm dispatched by response size.
    Farm(farm::Args),
    /// Print, as JSON, the names this build takes for policies, schedulers and other choices.
    Vocabulary(vocabulary::Args),
}

/// The command line as users get it: the derived command with each setting's default shown
/// in `serve --help` and `gatekeeper --help` (their flags are optional, see `help`).
fn command() -> clap::Command {
    Cli::command().mut_subcommand("serve", serve::show_defaults).mut_subcommand("gatekeeper", gatekeeper::show_defaults)
}

fn main() -> std::process::ExitCode {
    let (argv, warnings) = spelling::modernize(std::env::args_os().collect());
    let cli = match command().try_get_matches_from(argv).and_then(|m| Cli::from_arg_matches(&m)) {
        Ok(cli) => cli,
        Err(e) => {
            for w in warnings {
                eprintln!("shortfirst: warning: {w}");
            }
            e.exit()
        }
    };
    let format = cli.log_format;
    let filter = cli.command.log_filter();
    logging::init(format, filter.as_ref().map_or(logging::DEFAULT_FILTER, |f| f));
    for w in &warnings {
        tracing::warn!("{w}");
    }
    let result = filter.and_then(|_| cli.command.run());
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            logging::report_error(format, &e);
            std::process::ExitCode::FAILURE
        }
    }
}

impl Command {
    /// The log filter when RUST_LOG is unset: the gatekeeper's depends on its `access-log`
    /// setting (which its configuration file may hold), every other command logs `info`.
    fn log_filter(&self) -> anyhow::Result<&'static str> {
        match self {
            Command::Gatekeeper(a) => gatekeeper::log_filter(a),
            _ => Ok(logging::DEFAULT_FILTER),
        }
    }

    fn run(self) -> anyhow::Result<()> {
        match self {
            Command::Serve(a) => serve::run(a),
            Command::Uplink(a) => uplink::run(a),
            Command::Gatekeeper(a) => gatekeeper::run(a),
            Command::Load(a) => load::run(*a),
            Command::LoadPg(a) => load_pg::run(a),
            Command::Workload(a) => workload::run(a),
            Command::Sim(a) => sim::run(a),
            Command::Netem(a) => netem::run(a),
            Command::Farm(a) => farm::run(a),
            Command::Vocabulary(a) => vocabulary::run(a),
        }
    }
}

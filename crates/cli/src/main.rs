//! The `shortfirst` binary: argument parsing and error reporting only.
//!
//! Each subcommand lives in its own module with an `Args` struct and a `run`
//! function that hands over to its library crate. `anyhow` is allowed here and
//! nowhere else: this is the binary's edge.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod farm;
mod gatekeeper;
mod help;
mod load;
mod netem;
mod serve;
mod sim;
mod spelling;
mod units;
mod uplink;
mod workload;

#[derive(Parser, Debug)]
#[command(name = "shortfirst", version, about = "Serve the shortest remaining work first.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
    /// Generate workloads (files + trace) and print trace statistics.
    Workload(workload::Args),
    /// Discrete-event simulator running the same policy code as the server.
    Sim(sim::Args),
    /// User-space WAN emulator: per-client-group delay, jitter, loss, rate on a TUN.
    Netem(netem::Args),
    /// HAProxy map and configurations for a farm dispatched by response size.
    Farm(farm::Args),
}

/// The command line as users get it: the derived command with each setting's default shown
/// in `serve --help` and `gatekeeper --help` (their flags are optional, see `help`).
fn command() -> clap::Command {
    Cli::command().mut_subcommand("serve", serve::show_defaults).mut_subcommand("gatekeeper", gatekeeper::show_defaults)
}

fn main() -> std::process::ExitCode {
    let (argv, warnings) = spelling::modernize(std::env::args_os().collect());
    for w in warnings {
        eprintln!("shortfirst: {w}");
    }
    let cli = Cli::from_arg_matches(&command().get_matches_from(argv)).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Command::Serve(a) => serve::run(a),
        Command::Uplink(a) => uplink::run(a),
        Command::Gatekeeper(a) => gatekeeper::run(a),
        Command::Load(a) => load::run(*a),
        Command::Workload(a) => workload::run(a),
        Command::Sim(a) => sim::run(a),
        Command::Netem(a) => netem::run(a),
        Command::Farm(a) => farm::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shortfirst: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

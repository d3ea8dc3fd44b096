//! `shortfirst load`: trace-driven load generation with per-request logs.

use anyhow::Context;
use shortfirst_load::http::Target;
use shortfirst_load::run::{self, Config, Model, Source};
use shortfirst_load::scale::Scaling;
use shortfirst_load::schedule::{LoadSchedule, MAX_MULTIPLIER, MAX_PHASES, PRESETS};
use shortfirst_load::source_addrs::SourceAddrs;
use shortfirst_load::trace::TraceFormat;
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Server URL: http://HOST[:PORT][/PREFIX].
    #[arg(long)]
    target: String,
    /// Trace to replay (our CSV, CLF/Combined access log or WC98 binary).
    #[arg(long, required_unless_present = "session", conflicts_with = "session")]
    trace: Option<PathBuf>,
    /// Session model (TOML Markov chain of pages) for closed-model users.
    #[arg(long)]
    session: Option<PathBuf>,
    /// Trace format: csv, clf or wc98 (default: guessed from the file name).
    #[arg(long)]
    format: Option<TraceFormat>,
    /// Count and skip malformed trace records (the run is then marked invalid
    /// in summary.json, with the count) instead of stopping.
    #[arg(long)]
    skip_bad: bool,
    /// Output directory: requests.csv, received.csv (body bytes per 100 ms),
    /// summary.json, response-times.hlog.
    #[arg(long)]
    out: PathBuf,
    /// open | partly-open:K | closed:N[,think=DIST] (DIST: SECONDS (exponential
    /// mean), exp:MEAN, exp:MEAN:MAX, const:S, uniform:A:B).
    #[arg(long, default_value = "open")]
    model: Model,
    /// Scale interarrival times so requested bits/s = RHO × --link-rate.
    #[arg(long, requires = "link_rate", conflicts_with_all = ["speed", "request_rate"])]
    load: Option<f64>,
    /// The link's rate (10mbit, 1gbit, …): for --load, and to report the offered load.
    #[arg(long, value_name = "RATE", value_parser = crate::units::rate_bits_per_s)]
    link_rate: Option<f64>,
    /// Replay X times faster than the trace's timestamps.
    #[arg(long, conflicts_with = "request_rate")]
    speed: Option<f64>,
    /// Scale the trace to this mean request rate (requests per second).
    #[arg(long, value_name = "PER_S")]
    request_rate: Option<f64>,
    /// Time-varying load: multiply the rate of --load/--request-rate/--speed phase by phase,
    /// repeating the phases (e.g. 25s@0.2,25s@1.2; const@1.4; file:PATH; w1..w10).
    #[arg(long, value_name = "SPEC", value_parser = parse_load_schedule, long_help = load_schedule_help())]
    load_schedule: Option<Box<LoadSchedule>>,
    /// Stop starting requests after this long: 150s, 2m, 1m30s (a plain number is seconds).
    #[arg(long, value_parser = crate::units::positive_duration_s)]
    duration: Option<f64>,
    /// Up to K requests per connection (keep-alive); default one connection per request.
    #[arg(long)]
    persistent: Option<u32>,
    /// User abort: give up an attempt after this long: 3s, 500ms (a plain number is seconds).
    #[arg(long, value_parser = crate::units::positive_duration_s)]
    abort_after: Option<f64>,
    /// Retries after an abort (needs --abort-after).
    #[arg(long, default_value_t = 0)]
    retries: u32,
    /// Hard time limit of one attempt when no --abort-after is given: 30s, 2m (a plain
    /// number is seconds).
    #[arg(long, default_value = "30s", value_parser = crate::units::positive_duration_s)]
    timeout: f64,
    /// Client identities for requests whose trace gives none (assigned
    /// round-robin; a client's kept-alive connections are reused only by it).
    #[arg(long, default_value_t = 64)]
    clients: u32,
    /// Bind each connection to a source address chosen by its client id, so
    /// one process can stand for several client groups (subnets):
    /// ADDR[,ADDR...] gives client c the address number c mod n;
    /// file:PATH reads CSV rows `client,addr` (optional header `client,addr`,
    /// `#` comments), where a row `*,ADDR` serves every client not listed;
    /// without it, a request of an unlisted client stops the run before it is
    /// sent. Every address must be on this host and of the target's family
    /// (checked once, before the run). Absent: the kernel chooses.
    #[arg(long, value_name = "SPEC", value_parser = parse_source_addrs)]
    source_addrs: Option<Box<SourceAddrs>>,
    /// Worker threads (default: the number of CPUs).
    #[arg(long)]
    threads: Option<usize>,
    /// Most requests (open) or sessions (partly-open) outstanding at once; a
    /// request due at the limit is not sent, logged as failed, and the run is
    /// marked invalid.
    #[arg(long, default_value_t = 10_000)]
    max_in_flight: usize,
    /// Seed of every random choice (think times, session walks).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run the dispatcher and workers under SCHED_FIFO (root or CAP_SYS_NICE)
    /// so other processes on a shared machine cannot delay sends.
    #[arg(long)]
    realtime: bool,
    /// Requests due within this many microseconds of a worker's wake-up are
    /// sent together at it (one timer wake-up for all, fewer per request at
    /// high rates); their lateness, measured per request, includes the wait.
    /// 0: wake for every request.
    #[arg(long, default_value_t = run::DEFAULT_BATCH_WINDOW_US)]
    batch_window_us: u64,
    /// Open and partly-open models: never sleep through a wait of at most
    /// this many microseconds, and wake this long before the end of longer
    /// ones; busy-wait the rest (the thread keeps serving its sockets
    /// meanwhile). Dispatching and worker 0's requests then run on one thread
    /// (with --threads > 1 the other workers' requests are handed over as
    /// without it). For machines whose idle CPUs wake late (VMs: an idle vCPU
    /// halts, and its next timer interrupt can come milliseconds late): set it
    /// above that wake-up latency, e.g. 2000. Cost: that thread keeps a CPU
    /// busy for up to N µs per wait, min(1, rate × N µs) of a core besides the
    /// requests' own work (at 20,000/s a whole core, as any load generator at
    /// that rate; at 100/s with N = 2000, a fifth of one). While other tasks
    /// wait for a CPU (the kernel's CPU pressure, /proc/pressure/cpu, read
    /// every 10 ms) it does not spin but sleeps until each send is due: the
    /// CPU is not idle then anyway, and a spinner would starve them. Under
    /// --realtime that thread is SCHED_FIFO only while it sleeps that way and
    /// SCHED_OTHER while it spins (a SCHED_FIFO thread that never sleeps is
    /// stopped ~50 ms a second by the kernel's RT throttling); it then wakes
    /// at most once per --batch-window-us. 0: off (default). At most 5000.
    #[arg(long, default_value_t = 0)]
    spin_us: u64,
    /// No progress line on stderr. Without it the line is drawn only when stderr is a
    /// terminal: redirected to a file or a pipe, a line rewritten every second is noise.
    #[arg(long)]
    quiet: bool,
}

/// Parses (and reads the file of) a `--load-schedule` spec; boxed to keep
/// the arguments small.
pub(crate) fn parse_load_schedule(spec: &str) -> Result<Box<LoadSchedule>, String> {
    LoadSchedule::parse(spec).map(Box::new).map_err(|e| e.to_string())
}

/// `--load-schedule`'s long help, with the presets' table from the code that defines them.
fn load_schedule_help() -> String {
    let mut h = String::from(
        "Time-varying load (open and partly-open models): multiply the request rate set by \
         --load/--request-rate/--speed (or the trace's own rate) phase by phase, repeating the phases until \
         the trace or --duration ends.\n\n\
         SPEC is one of:\n  \
         DURATION@MULT[,DURATION@MULT...]  phases in order, e.g. 25s@0.2,25s@1.2 (25 s at 0.2×, \
         then 25 s at 1.2×); durations as everywhere (25s, 500ms, 1m30s, a plain number is seconds)\n  \
         const@MULT   persistent load, e.g. const@1.4 with --load 1: ρ = 1.4 throughout\n  \
         file:PATH    one `DURATION MULTIPLIER` per line (or DURATION@MULT); `#` starts a comment\n  \
         w1 … w10     the transient-overload workloads of Schroeder & Harchol-Balter, \"Web \
         servers under overload\" (2006), Table 1: a low-load phase, then an overload phase. \
         Their multipliers are the table's loads ρ, so run them with --load 1 --link-rate RATE:\n",
    );
    for p in &PRESETS {
        h.push_str(&format!(
            "      {:<4} {:<12} {:>5} s at {:<5} then {:>3} s at {:<4} (mean {})\n",
            p.name, p.kind, p.low_s, p.low_load, p.high_s, p.high_load, p.mean_load
        ));
    }
    h.push_str(&format!(
        "\nPhases are wall-clock time from the run's start. Within a phase the trace's \
         inter-arrival gaps are divided by its multiplier (the trace's order and request mix are \
         kept), so a request's scheduled time is a fixed function of its trace time, never of \
         earlier responses, and lateness is measured against it as without a schedule. \
         requests.csv gains the columns `phase` (index from 0) and `load_multiplier` of the phase \
         at each request's scheduled time; summary.json gets `load_schedule` (phases, requests \
         and scheduled rate per phase). Every multiplier must be positive and at most \
         {MAX_MULTIPLIER}, every phase at least 1 ms, a period at most 100 days; at most {MAX_PHASES} \
         phases (more is refused). Not with the closed model."
    ));
    h
}

/// Parses (and reads the file of) a `--source-addrs` spec; boxed to keep
/// the arguments small.
fn parse_source_addrs(spec: &str) -> Result<Box<SourceAddrs>, String> {
    SourceAddrs::parse(spec).map(Box::new).map_err(|e| e.to_string())
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let uplink = a.link_rate;
    let scaling = match (a.load, a.speed, a.request_rate) {
        (Some(rho), _, _) => {
            anyhow::ensure!(rho > 0.0, "--load must be positive");
            Scaling::Load { rho, uplink_bits_per_s: uplink.context("--load needs --link-rate")? }
        }
        (_, Some(x), _) => Scaling::Speed(x),
        (_, _, Some(r)) => Scaling::Rate { req_per_s: r },
        _ => Scaling::AsIs,
    };
    let source = match (a.trace, a.session) {
        (Some(path), None) => Source::Trace { path, format: a.format, skip_bad: a.skip_bad },
        (None, Some(path)) => Source::Session { path },
        _ => anyhow::bail!("give exactly one of --trace or --session"),
    };
    let cfg = Config {
        target: Target::parse(&a.target)?,
        out_dir: a.out.clone(),
        model: a.model,
        source,
        scaling,
        load_schedule: a.load_schedule.map(|s| *s),
        uplink_bits_per_s: uplink,
        duration_s: a.duration,
        persistent: a.persistent,
        abort_after_s: a.abort_after,
        retries: a.retries,
        timeout_s: a.timeout,
        clients: a.clients,
        threads: a.threads.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)),
        max_in_flight: a.max_in_flight,
        seed: a.seed,
        progress: !a.quiet && std::io::stderr().is_terminal(),
        realtime: a.realtime,
        batch_window_us: a.batch_window_us,
        spin_us: a.spin_us,
        command_line: std::env::args().collect(),
    };
    let source_addrs = a.source_addrs.map(|s| *s).unwrap_or_default();
    run::stop_on_signals();
    let s = run::run_with(cfg, source_addrs)?;
    let ms = |v: Option<f64>| v.map(|x| format!("{:.3} ms", x * 1e3)).unwrap_or_else(|| "-".into());
    eprintln!(
        "{} requests: {} ok, {} http_error, {} failed, {} aborted, {} timeout; mean response {}, p99 {}; \
         lateness p99 {}; {} → {}",
        s.requests,
        s.ok,
        s.http_error,
        s.failed,
        s.aborted,
        s.timeout,
        ms(s.mean_response_s),
        ms(s.p99_response_s),
        s.lateness_p99_ms.map(|l| format!("{l:.3} ms")).unwrap_or_else(|| "-".into()),
        if s.valid { "valid" } else { "INVALID" },
        a.out.display()
    );
    if let Some(ls) = &s.load_schedule {
        let phases: Vec<String> = ls
            .phases
            .iter()
            .map(|p| match p.scheduled_req_per_s {
                Some(r) => format!("{}× {:.1}/s", p.multiplier, r),
                None => format!("{}× -", p.multiplier),
            })
            .collect();
        eprintln!("  load schedule {}: scheduled per phase {}", ls.spec, phases.join(", "));
    }
    for r in &s.invalid_reasons {
        eprintln!("  invalid: {r}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn args(extra: &[&str]) -> Args {
        let base = ["load", "--target", "http://127.0.0.1:9", "--trace", "t.csv", "--out", "o"];
        Cli::try_parse_from(base.iter().chain(extra)).unwrap().args
    }

    #[test]
    fn load_schedule_flag() {
        assert!(args(&[]).load_schedule.is_none());
        let a = args(&["--load-schedule", "25s@0.2,25s@1.2"]);
        let s = a.load_schedule.unwrap();
        assert_eq!(s.phases(), LoadSchedule::parse("w1").unwrap().phases());
        assert_eq!(args(&["--load-schedule", "W7"]).load_schedule.unwrap().spec(), "w7");
        // The long help lists every preset with the paper's numbers.
        let help = load_schedule_help();
        for p in &PRESETS {
            assert!(help.contains(&format!("{:<4} {:<12}", p.name, p.kind)), "{}", p.name);
        }
        assert!(help.contains("w10  intermittent  13.3 s at 0.735 then   2 s at 2    (mean 0.9)"), "{help}");
        let base = ["load", "--target", "http://127.0.0.1:9", "--trace", "t.csv", "--out", "o"];
        let e = Cli::try_parse_from(base.iter().chain(&["--load-schedule", "25s@0.2,25s@0"])).err().unwrap();
        let e = e.to_string();
        assert!(e.contains("--load-schedule") && e.contains("phase 2 `25s@0`"), "{e}");
    }

    #[test]
    fn source_addrs_flag() {
        assert_eq!(args(&[]).source_addrs, None);
        let a = args(&["--source-addrs", "10.10.1.2,10.10.2.2"]);
        let want = SourceAddrs::RoundRobin(vec!["10.10.1.2".parse().unwrap(), "10.10.2.2".parse().unwrap()]);
        assert_eq!(a.source_addrs.as_deref(), Some(&want));
        // A bad spec is a usage error naming the option and the item.
        let base = ["load", "--target", "http://127.0.0.1:9", "--trace", "t.csv", "--out", "o"];
        let e = Cli::try_parse_from(base.iter().chain(&["--source-addrs", "10.10.1.2,nohost"])).err().unwrap();
        let e = e.to_string();
        assert!(e.contains("--source-addrs") && e.contains("`nohost` (address 2)"), "{e}");
    }
}

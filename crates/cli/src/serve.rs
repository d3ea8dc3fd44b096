//! `shortfirst serve`: flags (and an optional TOML file with the same keys) →
//! `shortfirst_server::ServerConfig`, then run until SIGTERM/SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;

use shortfirst_server::{
    AccessLogFormat, AtMaxConnections, ConfigFile, Dotfiles, PolicySpec, Scheduling, ServerConfig,
};

use crate::units::{positive_duration_s, rate_bits_per_s};

/// Boxed: the flags are many, and `Command` (in main.rs) holds every
/// subcommand's `Args` inline.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    flags: Box<Flags>,
}

/// Flags mirror the config file keys; a flag overrides the file.
#[derive(clap::Args, Debug)]
#[command(after_help = "Config file keys are the long flag names without dashes in front \
    (e.g. `max-connections = 100`); flags override the file; an unknown key is an error.\n\
    SO_PRIORITY values above 6 need CAP_NET_ADMIN (root). SIGTERM/SIGINT: graceful shutdown; \
    SIGHUP: reopen the access log.")]
struct Flags {
    /// Directory to serve.
    #[arg(long)]
    root: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// fair: one data band (user space: round robin by bytes); srpt-classes:CUTOFFS: size
    /// bands with those cutoffs, as in `sim` (e.g. `srpt-classes:1K,2K,5K,20K,50K`);
    /// srpt-classes: the cutoffs of --cutoffs; srpt: exact SRPT with --scheduler user, else
    /// = srpt-classes; srpt2: two bands split at the median (kernel); las: least attained
    /// service (user); srrt: bands by estimated remaining response time from TCP_INFO
    /// (--rrt-cutoffs, kernel) [default: srpt-classes].
    #[arg(long, value_name = "POLICY")]
    policy: Option<PolicySpec>,
    /// Who orders the uplink: kernel (SO_PRIORITY bands under `shortfirst uplink setup`'s HTB,
    /// needs CAP_NET_ADMIN), user (the server's own pacer and scheduler: no qdisc, no
    /// capability; needs --uplink-rate) or crovella (user, but only --write-concurrency
    /// connections may write: Crovella 1999's baseline) [default: kernel].
    #[arg(long, value_name = "SCHEDULER")]
    scheduler: Option<Scheduling>,
    /// The uplink's rate on the wire, e.g. `10mbit`, `1gbit`: the user-space pacer releases
    /// bytes at just under it. Required by --scheduler user and crovella.
    #[arg(long, value_name = "RATE", value_parser = rate_bits_per_s)]
    uplink_rate: Option<f64>,
    /// --scheduler crovella: connections that may write at once [default: 35].
    #[arg(long, value_name = "N")]
    write_concurrency: Option<usize>,
    /// User-space schedulers: link time granted ahead of now; covers the pacer's wake-up
    /// lateness, bounds a new short response's wait behind granted bytes [default: one
    /// segment of link time + 1ms, at least two segments: 2.5ms at 10mbit, 1.1ms at 100mbit].
    #[arg(long, value_name = "DURATION", value_parser = positive_duration_s)]
    pacer_lookahead: Option<f64>,
    /// User-space schedulers: the pacer releases wire bytes at this fraction of --uplink-rate,
    /// 0.5 to 1; below 1 the queue forms in the application rather than in a FIFO under it,
    /// at the price of that much of the link when it is saturated [default: 0.98].
    #[arg(long, value_name = "FRACTION")]
    pacer_rate_fraction: Option<f64>,
    /// User-space schedulers: wire bytes of credit an idle link banks, granted at once after an
    /// idle spell. Give the burst of the token bucket that shapes the link below (HTB/TBF
    /// `burst`), which lets such a burst out at line rate; 0 on a link with no bucket [default: 0].
    #[arg(long, value_name = "BYTES")]
    pacer_burst_bytes: Option<u32>,
    /// Cutoffs of srpt-classes / srpt, e.g. `1K,2K,5K,20K,50K` (the default), or `auto`
    /// (learned from observed sizes). Not with --policy srpt-classes:CUTOFFS.
    #[arg(long)]
    cutoffs: Option<String>,
    /// Response-time cutoffs of srrt, e.g. `50ms,100ms,200ms,500ms,1s` (the default; a plain
    /// number is milliseconds), or `auto` (learned from the estimates at response start).
    #[arg(long, value_name = "LIST|auto")]
    rrt_cutoffs: Option<String>,
    /// srrt's estimate: path (min_rtt, slow start, loss and timeout terms) or paper
    /// (srtt·(1 + remaining/(cwnd·mss)), Al-Sadeh and Yahya 2008) [default: path].
    #[arg(long, value_name = "ESTIMATOR")]
    rrt_estimator: Option<shortfirst_core::srrt::Estimator>,
    /// srrt: re-estimate (one getsockopt(TCP_INFO)) after a write crossing a multiple of
    /// this many bytes written [default: 65536].
    #[arg(long, value_name = "BYTES")]
    rrt_step_bytes: Option<u64>,
    /// Admin listener serving Prometheus metrics at /metrics.
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// TOML file with the same keys as these flags.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Worker threads [default: one per CPU].
    #[arg(long)]
    threads: Option<usize>,
    /// Open connections at most; beyond, see --at-max-connections [default: 4096].
    #[arg(long)]
    max_connections: Option<usize>,
    /// At --max-connections: refuse (accept, answer 503 with Retry-After: 1, close) or wait
    /// (stop accepting until a connection closes: new connections wait in the kernel's accept
    /// queue, then the kernel drops their SYNs, as Apache at MaxClients) [default: refuse].
    #[arg(long, value_name = "refuse|wait")]
    at_max_connections: Option<AtMaxConnections>,
    /// Listen backlog: connections the kernel completes and holds until accepted (capped at
    /// net.core.somaxconn) [default: 4096].
    #[arg(long, value_name = "N")]
    backlog: Option<u32>,
    /// Longest request line; longer → 414 [default: 8192].
    #[arg(long)]
    max_request_line_bytes: Option<usize>,
    /// Largest request head; larger → 431 [default: 16384].
    #[arg(long)]
    max_header_bytes: Option<usize>,
    /// Most header fields per request; more → 431 [default: 64, at most 128].
    #[arg(long)]
    max_headers: Option<usize>,
    /// Largest request body (read and discarded); larger → 413 [default: 65536].
    #[arg(long)]
    max_body_bytes: Option<u64>,
    /// First byte to end of request head; exceeded → 408 and close. A new connection
    /// that sends nothing is closed after it too. Units: `10s`, `500ms`; plain = seconds [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = positive_duration_s, conflicts_with = "header_timeout_ms")]
    header_timeout: Option<f64>,
    /// Keep-alive idle time before closing [default: 60s].
    #[arg(long, value_name = "DURATION", value_parser = positive_duration_s, conflicts_with = "idle_timeout_ms")]
    idle_timeout: Option<f64>,
    /// Longest time a write may make no progress before closing [default: 60s].
    #[arg(long, value_name = "DURATION", value_parser = positive_duration_s, conflicts_with = "send_timeout_ms")]
    send_timeout: Option<f64>,
    /// On SIGTERM/SIGINT, time given to in-flight responses [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = positive_duration_s, conflicts_with = "drain_timeout_ms")]
    drain_timeout: Option<f64>,
    /// --header-timeout in plain milliseconds (older spelling).
    #[arg(long, value_name = "MS")]
    header_timeout_ms: Option<u64>,
    /// --idle-timeout in plain milliseconds (older spelling).
    #[arg(long, value_name = "MS")]
    idle_timeout_ms: Option<u64>,
    /// --send-timeout in plain milliseconds (older spelling).
    #[arg(long, value_name = "MS")]
    send_timeout_ms: Option<u64>,
    /// --drain-timeout in plain milliseconds (older spelling).
    #[arg(long, value_name = "MS")]
    drain_timeout_ms: Option<u64>,
    /// Requests per connection before closing it [default: 10000].
    #[arg(long)]
    max_requests_per_connection: Option<u64>,
    /// Largest sendfile call, so band crossings are noticed at least this often [default: 262144].
    #[arg(long)]
    sendfile_chunk_bytes: Option<usize>,
    /// SO_SNDBUF of client sockets [default: kernel autotuning].
    #[arg(long)]
    send_buffer_bytes: Option<usize>,
    /// TCP_NOTSENT_LOWAT of client sockets: unsent bytes the kernel may hold, so
    /// bands track what is really left to transmit; 0 = kernel default [default: 16384].
    #[arg(long)]
    notsent_lowat_bytes: Option<u32>,
    /// Access log file (`-` for stdout) [default: none].
    #[arg(long)]
    access_log: Option<PathBuf>,
    /// combined (CLF + rt= band=) or json [default: combined].
    #[arg(long)]
    access_log_format: Option<AccessLogFormat>,
    /// Set SO_PRIORITY per band (needs CAP_NET_ADMIN); false disables kernel scheduling [default: true].
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    socket_priority: Option<bool>,
    /// Serve through symlinks that lead outside the root [default: false].
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    follow_symlinks_outside_root: Option<bool>,
    /// Requests for dotfiles (`/.git/config`, `/.env`; not `/.well-known/`): ignore answers 404,
    /// deny 403, allow serves them [default: ignore].
    #[arg(long)]
    dotfiles: Option<Dotfiles>,
    /// Auto cutoffs: response sizes remembered [default: 10000].
    #[arg(long)]
    auto_window: Option<usize>,
    /// Auto cutoffs: recompute every this many responses [default: 1000].
    #[arg(long)]
    auto_recompute_every: Option<usize>,
}

impl Flags {
    fn into_config(self) -> anyhow::Result<ServerConfig> {
        let file = match &self.config {
            Some(path) => ConfigFile::load(path)?,
            None => ConfigFile::default(),
        };
        let flags = ConfigFile {
            root: self.root,
            listen: self.listen,
            policy: self.policy,
            cutoffs: self.cutoffs,
            rrt_cutoffs: self.rrt_cutoffs,
            rrt_estimator: self.rrt_estimator,
            rrt_step_bytes: self.rrt_step_bytes,
            admin: self.admin,
            threads: self.threads,
            max_connections: self.max_connections,
            at_max_connections: self.at_max_connections,
            backlog: self.backlog,
            max_request_line_bytes: self.max_request_line_bytes,
            max_header_bytes: self.max_header_bytes,
            max_headers: self.max_headers,
            max_body_bytes: self.max_body_bytes,
            header_timeout: self.header_timeout,
            idle_timeout: self.idle_timeout,
            send_timeout: self.send_timeout,
            drain_timeout: self.drain_timeout,
            header_timeout_ms: self.header_timeout_ms,
            idle_timeout_ms: self.idle_timeout_ms,
            send_timeout_ms: self.send_timeout_ms,
            drain_timeout_ms: self.drain_timeout_ms,
            max_requests_per_connection: self.max_requests_per_connection,
            sendfile_chunk_bytes: self.sendfile_chunk_bytes,
            send_buffer_bytes: self.send_buffer_bytes,
            notsent_lowat_bytes: self.notsent_lowat_bytes,
            access_log: self.access_log,
            access_log_format: self.access_log_format,
            socket_priority: self.socket_priority,
            follow_symlinks_outside_root: self.follow_symlinks_outside_root,
            dotfiles: self.dotfiles,
            auto_window: self.auto_window,
            auto_recompute_every: self.auto_recompute_every,
            scheduler: self.scheduler,
            uplink_rate: self.uplink_rate.map(|r| r as u64),
            write_concurrency: self.write_concurrency,
            pacer_lookahead: self.pacer_lookahead,
            pacer_rate_fraction: self.pacer_rate_fraction,
            pacer_burst_bytes: self.pacer_burst_bytes,
        };
        let merged = file.overlay(flags);
        if merged.root.is_none() {
            anyhow::bail!("--root DIR is required (or `root = \"DIR\"` in the --config file)");
        }
        Ok(ServerConfig::from_file(merged)?)
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let config = args.flags.into_config()?;
    // Every ServerError names what failed (root, address, log path); no extra context needed.
    Ok(shortfirst_server::run_until_signal(config)?)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use clap::Parser;
    use shortfirst_server::{CutoffsSpec, Policy};

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(extra: &[&str]) -> Result<Args, String> {
        let base = ["serve", "--root", "/srv"];
        Cli::try_parse_from(base.iter().chain(extra)).map(|c| c.args).map_err(|e| e.to_string())
    }

    fn config(extra: &[&str]) -> ServerConfig {
        parse(extra).unwrap().flags.into_config().unwrap()
    }

    #[test]
    fn srrt_flags() {
        use shortfirst_core::srrt::Estimator;
        use shortfirst_server::RrtCutoffsSpec;
        let c = config(&[
            "--policy",
            "srrt",
            "--rrt-cutoffs",
            "auto",
            "--rrt-estimator",
            "paper",
            "--rrt-step-bytes",
            "8192",
        ]);
        assert_eq!(
            (c.policy, c.rrt_cutoffs, c.rrt_estimator, c.rrt_step_bytes),
            (Policy::Srrt, RrtCutoffsSpec::Auto, Estimator::Paper, 8192)
        );
        let c = config(&["--policy", "srrt", "--rrt-cutoffs", "40ms,400ms"]);
        assert_eq!(c.rrt_cutoffs, "40ms,400ms".parse::<RrtCutoffsSpec>().unwrap());
        let err = parse(&["--policy", "fair", "--rrt-cutoffs", "40ms"]).unwrap().flags.into_config().unwrap_err();
        assert!(format!("{err:#}").contains("only srrt"), "{err:#}");
        assert!(parse(&["--rrt-estimator", "guess"]).unwrap_err().contains("path or paper"));
    }

    /// Which timeout of the config a case checks.
    type Field = fn(&ServerConfig) -> Duration;

    #[test]
    fn timeout_flags_take_units_and_the_ms_flags_still_work() {
        let ms = Duration::from_millis;
        let cases: &[(&[&str], Field, Duration)] = &[
            (&[], |c| c.header_timeout, ms(10_000)),
            (&["--header-timeout", "5s"], |c| c.header_timeout, ms(5_000)),
            (&["--header-timeout", "500ms"], |c| c.header_timeout, ms(500)),
            (&["--header-timeout", "2"], |c| c.header_timeout, ms(2_000)),
            (&["--header-timeout-ms", "1500"], |c| c.header_timeout, ms(1_500)),
            (&["--idle-timeout", "1m"], |c| c.idle_timeout, ms(60_000)),
            (&["--idle-timeout-ms", "250"], |c| c.idle_timeout, ms(250)),
            (&["--send-timeout", "0.5"], |c| c.send_timeout, ms(500)),
            (&["--send-timeout-ms", "42"], |c| c.send_timeout, ms(42)),
            (&["--drain-timeout", "30s"], |c| c.drain_timeout, ms(30_000)),
            (&["--drain-timeout-ms", "0"], |c| c.drain_timeout, ms(0)),
        ];
        for (flags, field, want) in cases {
            assert_eq!(field(&config(flags)), *want, "{flags:?}");
        }
    }

    #[test]
    fn bad_timeout_flags_are_usage_errors_naming_the_flag() {
        let cases: &[(&[&str], &[&str])] = &[
            (&["--header-timeout", "5s", "--header-timeout-ms", "5000"], &["--header-timeout", "--header-timeout-ms"]),
            (&["--idle-timeout-ms", "5", "--idle-timeout", "5s"], &["--idle-timeout", "--idle-timeout-ms"]),
            (&["--send-timeout", "1s", "--send-timeout-ms", "1"], &["--send-timeout-ms"]),
            (&["--drain-timeout", "1s", "--drain-timeout-ms", "1"], &["--drain-timeout-ms"]),
            (&["--header-timeout", "0s"], &["--header-timeout", "above 0"]),
            (&["--idle-timeout", "ten"], &["--idle-timeout", "ten"]),
            (&["--send-timeout=-1"], &["--send-timeout"]),
            (&["--header-timeout-ms", "5s"], &["--header-timeout-ms"]),
        ];
        for (flags, needles) in cases {
            let err = parse(flags).err().unwrap_or_else(|| panic!("{flags:?} accepted"));
            for n in *needles {
                assert!(err.contains(n), "{flags:?}: {err} lacks {n}");
            }
        }
    }

    #[test]
    fn policy_flag_names_match_sim() {
        let paper = CutoffsSpec::List(shortfirst_core::bands::Cutoffs::paper_default());
        let list = |t: &str| CutoffsSpec::List(shortfirst_core::bands::Cutoffs::parse(t).unwrap());
        let cases: Vec<(&[&str], Policy, CutoffsSpec)> = vec![
            (&[], Policy::Srpt, paper.clone()),
            (&["--policy", "srpt-classes:1K,2K"], Policy::Srpt, list("1K,2K")),
            (&["--policy", "srpt-classes"], Policy::Srpt, paper.clone()),
            (&["--policy", "srpt-classes", "--cutoffs", "4K"], Policy::Srpt, list("4K")),
            (&["--policy", "srpt", "--cutoffs", "4K"], Policy::Srpt, list("4K")),
            (&["--policy", "srpt", "--cutoffs", "auto"], Policy::Srpt, CutoffsSpec::Auto),
            (&["--policy", "fair"], Policy::Fair, paper.clone()),
            (&["--policy", "srpt2"], Policy::Srpt2, paper.clone()),
        ];
        for (flags, policy, cutoffs) in cases {
            let c = config(flags);
            assert_eq!((c.policy, &c.cutoffs), (policy, &cutoffs), "{flags:?}");
        }
        // Same spelling, same bands as the simulator's policy.
        let sim = shortfirst_core::policy::Policy::parse("srpt-classes:1K,2K").unwrap();
        let shortfirst_core::policy::Policy::SrptClasses(sim_cutoffs) = sim else { panic!("{sim}") };
        assert_eq!(config(&["--policy", "srpt-classes:1K,2K"]).cutoffs, CutoffsSpec::List(sim_cutoffs));
    }

    #[test]
    fn scheduler_flags() {
        let c = config(&[]);
        assert_eq!((c.scheduler, c.uplink_rate_bits_per_s, c.socket_priority), (Scheduling::Kernel, None, true));
        let c = config(&["--scheduler", "user", "--uplink-rate", "10mbit", "--policy", "srpt"]);
        assert_eq!((c.scheduler, c.uplink_rate_bits_per_s), (Scheduling::User, Some(10_000_000)));
        assert!(!c.socket_priority, "no SO_PRIORITY (no CAP_NET_ADMIN) unless asked for");
        assert_eq!(c.user_policy().unwrap(), shortfirst_core::policy::Policy::Srpt);
        let c = config(&["--scheduler", "user", "--uplink-rate", "1gbit", "--policy", "srpt-classes:1K"]);
        assert_eq!(c.user_policy().unwrap().to_string(), "srpt-classes:1000");
        let c = config(&["--scheduler", "crovella", "--uplink-rate", "5mbit", "--write-concurrency", "8"]);
        assert_eq!((c.scheduler, c.write_concurrency), (Scheduling::Crovella, 8));
        let c = config(&["--scheduler", "user", "--uplink-rate", "5mbit", "--pacer-lookahead", "5ms"]);
        assert_eq!(c.pacer_lookahead, Some(Duration::from_millis(5)));
        assert_eq!(config(&[]).pacer_lookahead, None, "derived from the rate");
        let c = config(&["--scheduler", "user", "--uplink-rate", "5mbit", "--pacer-rate-fraction", "0.995"]);
        assert_eq!(c.pacer_rate_fraction, 0.995);
        assert_eq!(config(&[]).pacer_rate_fraction, 0.98, "the pacer's default");
        let c = config(&["--scheduler", "user", "--uplink-rate", "5mbit", "--pacer-burst-bytes", "6056"]);
        assert_eq!((c.pacer_burst_bytes, config(&[]).pacer_burst_bytes), (6056, 0));
        let c = config(&["--scheduler", "user", "--uplink-rate", "5mbit", "--policy", "las", "--socket-priority"]);
        assert!(c.socket_priority, "hybrid: bands as well, when asked for");
        for (flags, needles) in [
            (&["--scheduler", "user"][..], &["uplink-rate", "10mbit"][..]),
            (&["--uplink-rate", "10mbit"], &["uplink-rate", "uplink setup"]),
            (&["--scheduler", "user", "--uplink-rate", "10mbit", "--write-concurrency", "3"], &["write-concurrency"]),
            (&["--policy", "las"], &["las", "--scheduler user"]),
            (&["--scheduler", "user", "--uplink-rate", "10mbit", "--policy", "srpt2"], &["srpt2", "user"]),
            (&["--scheduler", "user", "--uplink-rate", "10mbit", "--cutoffs", "auto"], &["auto"]),
            (&["--scheduler", "user", "--uplink-rate", "10mbit", "--notsent-lowat-bytes", "0"], &["notsent-lowat"]),
            (&["--scheduler", "user", "--uplink-rate", "10mbit", "--pacer-lookahead", "2s"], &["pacer-lookahead"]),
            (
                &["--scheduler", "user", "--uplink-rate", "10mbit", "--pacer-rate-fraction", "1.2"],
                &["pacer-rate-fraction", "0.5..=1"],
            ),
            (
                &["--scheduler", "user", "--uplink-rate", "10mbit", "--pacer-burst-bytes", "20000000"],
                &["pacer-burst-bytes", "16777216"],
            ),
            (
                &["--scheduler", "user", "--uplink-rate", "10mbit", "--pacer-rate-fraction", "0.3"],
                &["pacer-rate-fraction"],
            ),
            (
                &["--scheduler", "user", "--uplink-rate", "10mbit", "--pacer-rate-fraction", "NaN"],
                &["pacer-rate-fraction"],
            ),
        ] {
            let err = parse(flags).unwrap().flags.into_config().unwrap_err();
            let msg = format!("{err:#}");
            for n in needles {
                assert!(msg.contains(n), "{flags:?}: {msg} lacks {n}");
            }
        }
        for (flags, needles) in [
            (&["--scheduler", "users"][..], &["--scheduler", "kernel, user or crovella"][..]),
            (&["--scheduler", "user", "--uplink-rate", "10mbps"], &["--uplink-rate", "bits"]),
            (&["--scheduler", "user", "--uplink-rate", "0"], &["--uplink-rate", "above 0"]),
        ] {
            let err = parse(flags).err().unwrap_or_else(|| panic!("{flags:?} accepted"));
            for n in needles {
                assert!(err.contains(n), "{flags:?}: {err} lacks {n}");
            }
        }
    }

    #[test]
    fn connection_limit_flags() {
        let c = config(&[]);
        assert_eq!((c.max_connections, c.at_max_connections, c.backlog), (4096, AtMaxConnections::Refuse, 4096));
        let c = config(&["--max-connections", "350", "--at-max-connections", "wait", "--backlog", "512"]);
        assert_eq!((c.max_connections, c.at_max_connections, c.backlog), (350, AtMaxConnections::Wait, 512));
        let err = parse(&["--at-max-connections", "queue"]).expect_err("accepted");
        assert!(err.contains("--at-max-connections") && err.contains("refuse or wait"), "{err}");
        let err = parse(&["--backlog", "0"]).unwrap().flags.into_config().unwrap_err();
        assert!(format!("{err:#}").contains("backlog"), "{err:#}");
    }

    #[test]
    fn bad_policy_flags_are_named() {
        for (flags, needles) in [
            (&["--policy", "sjf"][..], &["--policy", "sjf"][..]),
            (&["--policy", "srpt-classes:2K,1K"], &["--policy", "increasing"]),
            (&["--policy", "fair:1K"], &["--policy", "srpt-classes:CUTOFFS"]),
        ] {
            let err = parse(flags).err().unwrap_or_else(|| panic!("{flags:?} accepted"));
            for n in needles {
                assert!(err.contains(n), "{flags:?}: {err} lacks {n}");
            }
        }
        let err = parse(&["--policy", "srpt-classes:1K", "--cutoffs", "2K"]).unwrap().flags.into_config().unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("cutoffs") && msg.contains("srpt-classes"), "{msg}");
    }
}

//! `shortfirst gatekeeper`: the admission-control / SJF reverse proxy, its capacity
//! calibration (`calibrate`) and the synthetic backend used by tests and benchmarks
//! (`synthetic-upstream`). Argument parsing only; the work is in `shortfirst_gatekeeper`,
//! the proxy's flags, file keys, merge and checks too (`shortfirst_gatekeeper::settings`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use shortfirst_core::admission::calibration::{CapacityChoice, ChoiceRule};
use shortfirst_gatekeeper::calibrate::{self, CalibrateConfig, Trial};
use shortfirst_gatekeeper::classify::Rule;
use shortfirst_gatekeeper::config::{self, CapacitySetting, ProxyConfig, Upstream};
use shortfirst_gatekeeper::pg::PgGatekeeper;
use shortfirst_gatekeeper::synthetic::{self, SyntheticConfig};
use shortfirst_gatekeeper::{settings, Gatekeeper, ProxySettings};

mod model;

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Sub>,
    #[command(flatten)]
    proxy: Box<ProxySettings>,
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    /// Search for the capacity with peak throughput against a driven closed-loop load.
    Calibrate(Box<CalibrateArgs>),
    /// Run the synthetic TPC-W-like backend (known per-type costs, collapse past C).
    SyntheticUpstream(SyntheticArgs),
    /// Simulate the gatekeeper's admission code in a closed loop against the synthetic
    /// backend's service model (virtual time, seeded): calibrate, then direct vs policies.
    Model(Box<model::ModelArgs>),
}

#[derive(clap::Args, Debug)]
struct CalibrateArgs {
    /// The application server to calibrate.
    #[arg(long, value_name = "URL")]
    upstream: String,
    /// CSV `path,weight` of the request mix to drive.
    #[arg(long, value_name = "FILE")]
    mix: Option<PathBuf>,
    /// A path of the mix with an optional weight, repeatable: `/t/home:16`.
    #[arg(long = "path", value_name = "PATH[:WEIGHT]")]
    paths: Vec<String>,
    /// Closed-loop clients (enough to overload the backend).
    #[arg(long, default_value_t = 64)]
    clients: usize,
    #[arg(long, default_value = "3s", value_name = "DURATION")]
    warmup: String,
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    measure: String,
    /// Smallest candidate capacity.
    #[arg(long, default_value = "10ms", value_name = "UNITS")]
    min: String,
    /// Largest candidate capacity.
    #[arg(long, default_value = "600s", value_name = "UNITS")]
    max: String,
    /// Step factor of the incremental phase.
    #[arg(long, default_value_t = 2.0)]
    growth: f64,
    /// Relative throughput drop below the best that counts as past the peak: the steps stop
    /// when the last two are both that far below the best, and not before the capacity
    /// holds 4 of the most expensive requests. A negative value (`--tolerance=-1`) sweeps
    /// every step up to --max.
    #[arg(long, default_value_t = 0.1, allow_negative_numbers = true)]
    tolerance: f64,
    /// Refinement steps after the incremental ones (each halfway between the chosen
    /// capacity and the measured step below it).
    #[arg(long, default_value_t = 2)]
    refine_steps: usize,
    /// Measurement windows per capacity step (their spread is the noise the decision
    /// accounts for; 1 measures none).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// The capacity must hold this many of the costliest type's requests unless a smaller
    /// step was measured better.
    #[arg(long, default_value_t = 2.0)]
    floor_multiple: f64,
    /// Capacity steps in all (each of --repeats windows).
    #[arg(long, default_value_t = 30)]
    max_trials: usize,
    #[arg(long, default_value = "fifo")]
    policy: String,
    /// As for the proxy: also cap admitted requests at N while calibrating.
    #[arg(long, value_name = "N")]
    max_in_flight: Option<usize>,
    /// As for the proxy: what a request's cost sample is while calibrating.
    #[arg(long, value_name = "wall|share|serial")]
    estimate_basis: Option<String>,
    #[arg(long, value_name = "RULE")]
    classify: Vec<String>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the trials and the answer as JSON here (also printed).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// The synthetic backend's service model: TPC-W's types and costs on processor-sharing
/// CPUs that thrash past C. One set of flags for `synthetic-upstream` (the real backend)
/// and `model` (the same backend in virtual time); each command sets its own default
/// `--scale` with `mut_arg` (1 for the upstream, 0.25 for the model, as the bench runs it).
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct BackendArgs {
    /// Multiply every TPC-W type's cost (1 ms … 2 s) by this.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Processors: requests served at full speed at once.
    #[arg(long, default_value_t = 4)]
    pub cpus: usize,
    /// C: more requests than this running at once make the backend thrash.
    #[arg(long, default_value_t = 32)]
    pub slots: usize,
    /// Thrashing per request beyond C: service rate divided by 1 + thrash × (n − C).
    #[arg(long, default_value_t = 0.1)]
    pub thrash: f64,
}

impl BackendArgs {
    pub fn synthetic_config(&self) -> anyhow::Result<SyntheticConfig> {
        Ok(SyntheticConfig::tpcw(self.scale, self.cpus, self.slots, self.thrash)?)
    }
}

#[derive(clap::Args, Debug)]
struct SyntheticArgs {
    #[arg(long, value_name = "ADDR:PORT")]
    listen: SocketAddr,
    #[command(flatten)]
    backend: BackendArgs,
    /// Write the mix (`path,weight` CSV) for load generators and `calibrate`, then serve.
    #[arg(long, value_name = "FILE")]
    write_mix: Option<PathBuf>,
}

/// `gatekeeper`'s command with each proxy setting's default (from `ProxyConfig::new`, the
/// one place defaults are written) appended to its help, as clap shows `default_value`s.
pub fn show_defaults(cmd: clap::Command) -> clap::Command {
    crate::help::show_defaults(cmd, ProxyConfig::defaults_shown())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(Sub::Model(m)) = args.command {
        return model::run(*m);
    }
    let settings = match &args.command {
        None => args.proxy.clone().with_file()?,
        Some(_) => ProxySettings::default(),
    };
    let threads = match &args.command {
        None => settings.threads.unwrap_or(settings::DEFAULT_THREADS),
        Some(_) => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    // Before the runtime starts its threads: they inherit the slice.
    if let (None, Some(us)) = (&args.command, settings.cpu_slice_us.or(settings::DEFAULT_CPU_SLICE_US)) {
        use shortfirst_gatekeeper::cpu_slice::{self, SliceError};
        match cpu_slice::set(std::time::Duration::from_micros(us)) {
            Ok(()) => {}
            Err(SliceError::Invalid(e)) => return Err(e.into()),
            Err(e @ SliceError::Unsupported { .. }) => tracing::warn!("{e}; the kernel's slice stays"),
        }
    }
    // One thread: a current-thread runtime, so accepting, the handlers, the upstream
    // connections and the timer all run on the thread that waits in epoll. A multi-thread
    // runtime with one worker still runs `block_on` (the accept loop) on a second thread and
    // pays the work-stealing scheduler's bookkeeping on every task wake-up.
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    let rt = builder.enable_all().build().context("starting tokio")?;
    match args.command {
        Some(Sub::Calibrate(c)) => rt.block_on(run_calibrate(*c)),
        Some(Sub::SyntheticUpstream(s)) => rt.block_on(run_synthetic(s)),
        Some(Sub::Model(_)) => unreachable!("handled above"),
        None => rt.block_on(run_proxy(*args.proxy)),
    }
}

/// The log filter when `RUST_LOG` is unset (`crate::logging` sets it up): warnings and
/// errors, start-up and shutdown notes, and with `access-log` (a flag, or a key of the
/// `--config` file) the access log, the `access` target. The subcommands have no access log.
pub fn log_filter(args: &Args) -> anyhow::Result<&'static str> {
    let access_log = match &args.command {
        None => args.proxy.clone().with_file()?.access_log,
        Some(_) => None,
    };
    Ok(if access_log.unwrap_or(settings::DEFAULT_ACCESS_LOG) { "info" } else { "info,access=off" })
}

/// Resolves at the first SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot watch SIGTERM ({e}); only SIGINT stops the gatekeeper");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT"),
    }
}

/// On every SIGHUP, re-read the configuration (file and flags, flags winning as at start)
/// and apply its classifier rules, capacity and policy. A configuration that does not
/// parse is refused with the reason, and the running one stays.
async fn reload_on_sighup(
    args: ProxySettings,
    apply: impl Fn(&ProxyConfig) -> Result<(), shortfirst_gatekeeper::GatekeeperError>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot watch SIGHUP: no configuration reload");
        return;
    };
    while hup.recv().await.is_some() {
        let applied = ProxyConfig::from_flags(args.clone())
            .map_err(anyhow::Error::from)
            .and_then(|cfg| Ok(apply(&cfg).map(|()| cfg)?));
        match applied {
            Ok(cfg) => tracing::info!("SIGHUP: configuration reloaded ({})", summary(&cfg)),
            Err(e) => tracing::error!("SIGHUP: configuration refused, keeping the running one: {e:#}"),
        }
    }
}

/// The settings a user checks at start-up and after a reload, readable.
fn summary(cfg: &ProxyConfig) -> String {
    let mut rules: Vec<String> = cfg.rules.iter().map(ToString::to_string).collect();
    if rules.is_empty() {
        rules.push("route".into()); // the classifier's default
    }
    if cfg.upstream.protocol == config::Protocol::Postgres {
        return format!(
            "upstream postgres://{}, capacity {}, policy {}",
            cfg.upstream.authority, cfg.capacity, cfg.policy
        );
    }
    format!(
        "upstream http://{}{}, capacity {}, policy {}, classify [{}]{}",
        cfg.upstream.authority,
        cfg.upstream.prefix,
        cfg.capacity,
        cfg.policy,
        rules.join(", "),
        if cfg.rewrite_host { ", Host rewritten to the upstream's" } else { "" }
    )
}

async fn run_proxy(a: ProxySettings) -> anyhow::Result<()> {
    let cfg = ProxyConfig::from_flags(a.clone())?;
    if cfg.upstream.protocol == config::Protocol::Postgres {
        return run_pg(a, cfg).await;
    }
    let summary = summary(&cfg);
    let gk = Gatekeeper::bind(cfg).await?;
    tracing::info!(listen = %gk.local_addr(), "listening ({summary})");
    if let Some(a) = gk.admin_addr() {
        tracing::info!(admin_listen = %a, "metrics at http://{a}/metrics, health at http://{a}/healthz");
    }
    let handle = gk.handle();
    let reload =
        tokio::spawn(reload_on_sighup(a, move |cfg| handle.reload(cfg.rules.clone(), &cfg.capacity, cfg.policy)));
    gk.run(shutdown_signal()).await?;
    reload.abort();
    tracing::info!("stopped");
    Ok(())
}

/// The PostgreSQL gatekeeper (a postgres:// upstream): the same lifecycle as the proxy's.
async fn run_pg(a: ProxySettings, cfg: ProxyConfig) -> anyhow::Result<()> {
    let summary = summary(&cfg);
    let gk = PgGatekeeper::bind(&cfg).await?;
    tracing::info!(listen = %gk.local_addr(), "listening ({summary})");
    if let Some(a) = gk.admin_addr() {
        tracing::info!(admin_listen = %a, "metrics at http://{a}/metrics, health at http://{a}/healthz");
    }
    let reloader = gk.reloader();
    let reload = tokio::spawn(reload_on_sighup(a, move |cfg| reloader.reload(cfg)));
    gk.run(shutdown_signal()).await?;
    reload.abort();
    tracing::info!("stopped");
    Ok(())
}

fn read_mix(c: &CalibrateArgs) -> anyhow::Result<Vec<(String, f64)>> {
    let mut mix = match &c.mix {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading --mix {}", p.display()))?;
            calibrate::parse_mix(&text, &p.display().to_string())?
        }
        None => Vec::new(),
    };
    for p in &c.paths {
        let (path, w) = match p.rsplit_once(':') {
            Some((path, w)) if w.parse::<f64>().is_ok() => (path.to_string(), w.parse()?),
            _ => (p.clone(), 1.0),
        };
        mix.push((path, w));
    }
    if mix.is_empty() {
        bail!("calibrate needs a request mix: --mix FILE or --path PATH[:WEIGHT]");
    }
    Ok(mix)
}

/// Calibrate against the upstream through a gatekeeper of our own, print the result as
/// JSON (and write it to --out) and the steps and the choice to stderr.
async fn run_calibrate(c: CalibrateArgs) -> anyhow::Result<()> {
    let ccfg = calibrate_config(&c)?;
    let gk = Gatekeeper::bind(trial_proxy_config(&c, &ccfg)?).await?;
    let url = format!("http://{}", gk.local_addr());
    let handle = gk.handle();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(gk.run(async {
        let _ = stop_rx.await;
    }));
    let result = calibrate::calibrate(&handle, &url, &ccfg, print_trials).await?;
    let _ = stop_tx.send(());
    let _ = server.await;
    let json = serde_json::to_string_pretty(&result)?;
    println!("{json}");
    print_choice(&result.choice, &ccfg);
    if let Some(out) = &c.out {
        write_atomic(out, json.as_bytes())?;
    }
    Ok(())
}

/// The search's settings from the flags, validated.
fn calibrate_config(c: &CalibrateArgs) -> anyhow::Result<CalibrateConfig> {
    let ccfg = CalibrateConfig {
        mix: read_mix(c)?,
        clients: c.clients,
        warmup: config::parse_duration(&c.warmup, "warmup")?,
        measure: config::parse_duration(&c.measure, "measure")?,
        min_capacity_us: config::parse_cost_us(&c.min, "min")?,
        max_capacity_us: config::parse_cost_us(&c.max, "max")?,
        growth: c.growth,
        tolerance: c.tolerance,
        refine_steps: c.refine_steps,
        repeats: c.repeats,
        max_trials: c.max_trials,
        rule: ChoiceRule { floor_multiple: c.floor_multiple, ..ChoiceRule::default() },
        seed: c.seed,
    };
    ccfg.validate()?;
    Ok(ccfg)
}

/// The gatekeeper the trials run through: on a free local port, at the smallest capacity
/// (each trial sets its own).
fn trial_proxy_config(c: &CalibrateArgs, ccfg: &CalibrateConfig) -> anyhow::Result<ProxyConfig> {
    let mut pcfg = ProxyConfig::new("127.0.0.1:0".parse()?, Upstream::parse(&c.upstream)?);
    pcfg.capacity = CapacitySetting::Fixed { capacity_us: ccfg.min_capacity_us };
    pcfg.policy = c.policy.parse()?;
    pcfg.max_in_flight = c.max_in_flight;
    if let Some(b) = &c.estimate_basis {
        pcfg.estimator.basis = b.parse().with_context(|| format!("--estimate-basis {b:?}"))?;
    }
    pcfg.rules = c.classify.iter().map(|r| Rule::parse(r)).collect::<Result<_, _>>()?;
    // The trials' clients are gone when calibration ends: nothing to wait for.
    pcfg.shutdown_timeout = std::time::Duration::from_secs(1);
    Ok(pcfg)
}

/// A step's trials, as they finish.
fn print_trials(step: &[Trial]) {
    for t in step {
        eprintln!(
            "calibrate: {:>6} capacity {:>10.1} ms #{} → {:>6.3} work/s, {:>8.1} req/s, mean {:>8.1} ms, {} errors",
            t.phase,
            t.capacity_us as f64 / 1e3,
            t.repeat,
            t.work_per_s,
            t.throughput_per_s,
            t.mean_response_ms,
            t.errors
        );
    }
}

/// Each capacity's work rate over its repeats, then the capacity chosen and why.
fn print_choice(ch: &CapacityChoice, ccfg: &CalibrateConfig) {
    eprintln!("calibrate: work rate per step (mean ± 95% half-width over the repeats, backends busy):");
    for s in &ch.summaries {
        let mark = if s.capacity_us == ch.capacity_us { " ← chosen" } else { "" };
        eprintln!(
            "calibrate: {:>10.1} ms  {:.3} ± {:.3} (sd {:.3}, n {}){mark}",
            s.capacity_us as f64 / 1e3,
            s.mean_work_per_s,
            s.half_width_work_per_s,
            s.stddev_work_per_s,
            s.repeats
        );
    }
    eprintln!(
        "calibrate: capacity {:.1} ms ({:?}; floor {:.1} ms = {} × the costliest type, best step {:.1} ms, as good from {:.3} work/s{}); use --capacity {:.1}ms",
        ch.capacity_us as f64 / 1e3,
        ch.reason,
        ch.floor_us as f64 / 1e3,
        ccfg.rule.floor_multiple,
        ch.best_capacity_us as f64 / 1e3,
        ch.threshold_work_per_s,
        if ch.measured { "" } else { "; the floor was not measured: raise --max" },
        ch.capacity_us as f64 / 1e3
    );
}

/// Write via a temporary file and rename, so a reader never sees half a file.
fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

async fn run_synthetic(s: SyntheticArgs) -> anyhow::Result<()> {
    let cfg = s.backend.synthetic_config()?;
    if let Some(p) = &s.write_mix {
        let mut text = String::from("path,weight\n");
        for t in &cfg.types {
            text.push_str(&format!("/t/{},{}\n", t.name, t.weight));
        }
        write_atomic(p, text.as_bytes())?;
    }
    let listener =
        tokio::net::TcpListener::bind(s.listen).await.with_context(|| format!("binding --listen {}", s.listen))?;
    tracing::info!(
        listen = %listener.local_addr()?,
        "synthetic upstream listening ({} types, mean cost {:.2} ms, {} cpus, collapse past {}, thrash {}, peak {:.1} req/s)",
        cfg.types.len(),
        cfg.mean_cost_us() / 1e3,
        cfg.cpus,
        cfg.slots,
        cfg.thrash,
        cfg.throughput_at(cfg.cpus)
    );
    synthetic::serve(listener, cfg, shutdown_signal()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::time::Duration;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: ProxySettings,
    }

    fn config(extra: &[&str]) -> anyhow::Result<ProxyConfig> {
        let base = ["gatekeeper", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9"];
        let cli = Cli::try_parse_from(base.iter().chain(extra))?;
        Ok(ProxyConfig::from_flags(cli.args)?)
    }

    /// Which timeout of the config a case checks.
    type Field = fn(&ProxyConfig) -> Duration;

    #[test]
    fn timeout_flags_take_units() {
        let ms = Duration::from_millis;
        let cases: &[(&[&str], Field, Duration)] = &[
            (&[], |c| c.upstream_timeout, ms(60_000)),
            (&[], |c| c.upstream_body_timeout, ms(60_000)),
            (&[], |c| c.header_timeout, ms(30_000)),
            (&[], |c| c.shutdown_timeout, ms(30_000)),
            (&["--upstream-timeout", "5s"], |c| c.upstream_timeout, ms(5_000)),
            (&["--upstream-body-timeout", "250ms"], |c| c.upstream_body_timeout, ms(250)),
            (&["--upstream-body-timeout", "2"], |c| c.upstream_body_timeout, ms(2_000)),
            (&["--header-timeout", "10s"], |c| c.header_timeout, ms(10_000)),
            (&["--shutdown-timeout", "0"], |c| c.shutdown_timeout, ms(0)),
        ];
        for (flags, field, want) in cases {
            assert_eq!(field(&config(flags).unwrap()), *want, "{flags:?}");
        }
    }

    #[test]
    fn waits_take_every_duration_the_units_parser_takes() {
        for (value, want) in [("2m", 120), ("1m30s", 90), ("45", 45), ("1h", 3600)] {
            let c = config(&["--max-queue-wait", value, "--max-wait", value]).unwrap();
            assert_eq!((c.max_queue_wait, c.max_wait), (Some(secs(want)), Some(secs(want))), "{value}");
        }
        let c = config(&["--upstream-timeout", "1m30s", "--shutdown-timeout", "2m"]).unwrap();
        assert_eq!((c.upstream_timeout, c.shutdown_timeout), (secs(90), secs(120)));
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// What `gatekeeper --help` says a setting defaults to is what `ProxyConfig::new` sets
    /// (`shortfirst_gatekeeper::settings` checks each shown value configures the default).
    #[test]
    fn help_shows_each_default_of_the_config() {
        use crate::help::testing::{assert_shows_defaults, entry, help_of};
        let help = help_of("gatekeeper");
        assert_shows_defaults(&help, ProxyConfig::defaults_shown());
        let d = ProxyConfig::new("127.0.0.1:1".parse().unwrap(), Upstream::parse("http://127.0.0.1:1").unwrap());
        for (flag, value) in [
            ("policy", d.policy.to_string()),
            ("max-queue-len", d.max_queue_len.to_string()),
            ("max-connections", d.max_connections.to_string()),
            ("upstream-timeout", config::format_us(d.upstream_timeout.as_micros() as u64)),
            ("threads", settings::DEFAULT_THREADS.to_string()),
        ] {
            assert!(entry(&help, flag).contains(&format!("[default: {value}]")), "--{flag}: {}", entry(&help, flag));
        }
    }

    /// An unset flag must stay unset, or it would win over the `--config` file's key.
    #[test]
    fn no_flags_leave_every_setting_to_the_file() {
        use clap::FromArgMatches;
        let matches = crate::command().try_get_matches_from(["shortfirst", "gatekeeper"]).unwrap();
        let crate::Command::Gatekeeper(args) = crate::Cli::from_arg_matches(&matches).unwrap().command else {
            panic!("not the gatekeeper")
        };
        assert_eq!(args.proxy.keys_set(), Vec::<String>::new());
    }

    #[test]
    fn zero_or_malformed_timeouts_are_errors_naming_the_flag() {
        for (flag, value) in [
            ("--upstream-timeout", "0"),
            ("--upstream-body-timeout", "0s"),
            ("--header-timeout", "0ms"),
            ("--header-timeout", "soon"),
            ("--upstream-body-timeout", "1d"),
        ] {
            let err = format!("{:#}", config(&[flag, value]).unwrap_err());
            assert!(err.contains(flag.trim_start_matches('-')), "{flag} {value}: {err}");
        }
    }
}

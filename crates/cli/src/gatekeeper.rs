//! `shortfirst gatekeeper`: the admission-control / SJF reverse proxy, its capacity
//! calibration (`calibrate`) and the synthetic backend used by tests and benchmarks
//! (`synthetic-upstream`). Argument parsing and merging with the TOML file only; the work
//! is in `shortfirst_gatekeeper`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use shortfirst_core::admission::calibration::{CapacityChoice, ChoiceRule};
use shortfirst_gatekeeper::calibrate::{self, CalibrateConfig, Trial};
use shortfirst_gatekeeper::classify::Rule;
use shortfirst_gatekeeper::config::{self, CapacitySetting, FileConfig, ProxyConfig, Upstream};
use shortfirst_gatekeeper::synthetic::{self, SyntheticConfig};
use shortfirst_gatekeeper::Gatekeeper;

mod model;

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Sub>,
    #[command(flatten)]
    proxy: Box<ProxyArgs>,
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

#[derive(clap::Args, Debug, Clone)]
struct ProxyArgs {
    /// Address to accept clients on, e.g. 0.0.0.0:8080.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
    /// The application server, e.g. http://127.0.0.1:9000 (an optional path is a prefix).
    #[arg(long, value_name = "URL")]
    upstream: Option<String>,
    /// Admission capacity in cost units (time of upstream service: 800us, 25ms, 2s; bare
    /// number = ms), or `auto` to adapt online. Default: auto.
    #[arg(long, value_name = "UNITS|auto")]
    capacity: Option<String>,
    /// Admission queue order. Default: sjf.
    #[arg(long, value_name = "fifo|sjf|sjf-aging:X")]
    policy: Option<String>,
    /// Classification rule, repeatable, first match wins: `route`, `header:NAME`, or
    /// `NAME=REGEX` (matched against "METHOD /path?query"). Default: route.
    #[arg(long, value_name = "RULE")]
    classify: Vec<String>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics and a liveness check at
    /// http://ADDR:PORT/healthz (200 "ok" while the gatekeeper runs).
    #[arg(long, value_name = "ADDR:PORT")]
    admin: Option<SocketAddr>,
    /// TOML configuration file; flags override its keys, which are the flags' names
    /// without `--` (crates/gatekeeper/gatekeeper.example.toml lists them all). SIGHUP
    /// re-reads it and applies classify, capacity and policy without dropping connections.
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
    /// Most request types tracked, including the shared overflow type. Default: 64.
    #[arg(long)]
    max_types: Option<usize>,
    /// Longest admission queue; arrivals beyond get 503 + Retry-After. Default: 100000.
    #[arg(long)]
    max_queue_len: Option<usize>,
    /// Longest wait for admission before 503 + Retry-After (e.g. 10s). Default: none.
    #[arg(long, value_name = "DURATION")]
    max_queue_wait: Option<String>,
    /// Under sjf, a request that has waited this long is admitted before every other,
    /// oldest first (a starvation bound on the wait to start, e.g. 5s). Default: none.
    #[arg(long, value_name = "DURATION")]
    max_wait: Option<String>,
    /// Under sjf with --max-wait and under sjf-aging, requests past their bound go first
    /// only while the requests admitted so have had at most this share of the backend's
    /// recent busy time; beyond it they wait in cost order, so cheap requests keep the rest in an
    /// overload (e.g. 0.6). Default: 1 (always first).
    #[arg(long, value_name = "FRACTION")]
    overdue_share: Option<f64>,
    /// Also cap the number of admitted requests (beyond the paper: for backends that
    /// collapse on concurrency, e.g. their connection or process limit). Default: none.
    #[arg(long, value_name = "N")]
    max_in_flight: Option<usize>,
    /// Time allowed for the upstream's response head before 504 (also the connect
    /// timeout). Default: 60s.
    #[arg(long, value_name = "DURATION")]
    upstream_timeout: Option<String>,
    /// Longest silence of the upstream within a response body (e.g. 30s): past it the
    /// response is cut (its status has gone out), the connection closed and the charge
    /// released. Default: 60s.
    #[arg(long, value_name = "DURATION")]
    upstream_body_timeout: Option<String>,
    /// Time a client has to send a whole request head, and the longest idle time of a
    /// kept-alive client connection (e.g. 10s): past it the connection is closed
    /// (slowloris). Default: 30s.
    #[arg(long, value_name = "DURATION")]
    header_timeout: Option<String>,
    /// What a request's cost sample is: `wall` (its upstream service time, the paper),
    /// `share` (service time divided, moment by moment, by the requests in flight: its
    /// share of a processor-sharing backend) or `serial` (the time since the later of its
    /// start and the previous completion: its own time on a backend that serves one request
    /// at a time in arrival order, e.g. one event loop, at any --max-in-flight).
    /// Default: wall.
    #[arg(long, value_name = "wall|share|serial")]
    estimate_basis: Option<String>,
    /// Worker threads of the proxy's runtime. One thread serves tens of thousands of
    /// requests per second and saves the cross-thread wake-ups that dominate a request's
    /// latency at low load; more add throughput on many cores. Default: 1.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Charge no request more than this fraction of the capacity, so a costly request at
    /// the head of the queue never waits for a full drain (beyond the paper). Default: 1.
    #[arg(long, value_name = "FRACTION")]
    max_charge_share: Option<f64>,
    /// While a request waits for the upstream's response head, keep polling for I/O instead
    /// of blocking, for at most N µs after it was sent (1..=10000; 0 = off): the thread stays
    /// on a running CPU, for hosts whose idle CPUs wake late; costs up to N µs of CPU per
    /// request. Default: off.
    #[arg(long, value_name = "N")]
    busy_poll_us: Option<u64>,
    /// When a request that waited is charged: `admission` (its type's estimate then, so a
    /// charge is never stale by its wait) or `arrival` (the estimate it arrived with, kept
    /// while it waits and runs). Default: admission.
    #[arg(long, value_name = "admission|arrival")]
    charge_at: Option<String>,
    /// Send the upstream's address as `Host` instead of the client's (which is kept by
    /// default; `Forwarded` and `X-Forwarded-Host` carry it either way).
    #[arg(long)]
    rewrite_host: bool,
    /// On SIGTERM or SIGINT: stop accepting, answer queued requests 503 + Retry-After,
    /// give admitted ones this long to finish, exit. Default: 30s.
    #[arg(long, value_name = "DURATION")]
    shutdown_timeout: Option<String>,
    /// `Retry-After` seconds on 503. Default: 1.
    #[arg(long, value_name = "SECONDS")]
    retry_after: Option<u32>,
    /// Client connections served at once; beyond, a new connection gets 503 +
    /// Retry-After and is closed. Default: 10000.
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Log one line per request on stderr (as RUST_LOG=access=info). Errors (a 502 and
    /// why) are logged in any case; RUST_LOG overrides both (e.g. RUST_LOG=debug).
    #[arg(long)]
    access_log: bool,
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

pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(Sub::Model(m)) = args.command {
        return model::run(*m);
    }
    let file = match (&args.command, &args.proxy.config) {
        (None, Some(p)) => FileConfig::load(p)?,
        _ => FileConfig::default(),
    };
    init_logging(args.proxy.access_log || file.access_log.unwrap_or(false));
    let threads = match &args.command {
        None => args.proxy.threads.or(file.threads).unwrap_or(1),
        Some(_) => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    if threads == 0 {
        bail!("--threads must be at least 1");
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

/// Log to stderr; `RUST_LOG` picks what (tracing's env-filter syntax), by default
/// warnings and errors, start-up and shutdown notes, and with `access` the access log.
fn init_logging(access_log: bool) {
    let default = if access_log { "info" } else { "info,access=off" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).try_init();
}

/// Merge the flags over the file's keys, validated.
fn proxy_config(a: ProxyArgs) -> anyhow::Result<ProxyConfig> {
    let file = match &a.config {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    let listen: SocketAddr = match (a.listen, &file.listen) {
        (Some(l), _) => l,
        (None, Some(s)) => s.parse().with_context(|| format!("config listen {s:?}"))?,
        (None, None) => bail!("--listen ADDR:PORT is required (or `listen` in --config)"),
    };
    let upstream = a
        .upstream
        .clone()
        .or(file.upstream.clone())
        .context("--upstream URL is required (or `upstream` in --config)")?;
    let mut cfg = ProxyConfig::new(listen, Upstream::parse(&upstream)?);
    timeouts(&mut cfg, &a, &file)?;
    admission(&mut cfg, &a, &file)?;
    cfg.admin = match (a.admin, &file.admin) {
        (Some(x), _) => Some(x),
        (None, Some(s)) => Some(s.parse().with_context(|| format!("config admin {s:?}"))?),
        (None, None) => None,
    };
    cfg.max_types = a.max_types.or(file.max_types).unwrap_or(cfg.max_types);
    cfg.declared_types = file.types.clone().unwrap_or_default();
    limits(&mut cfg, &a, &file)?;
    cfg.rewrite_host = a.rewrite_host || file.rewrite_host.unwrap_or(false);
    estimation(&mut cfg, &a, &file)?;
    Ok(cfg)
}

/// Capacity, policy and classification rules, flag over file key.
fn admission(cfg: &mut ProxyConfig, a: &ProxyArgs, file: &FileConfig) -> anyhow::Result<()> {
    if let Some(c) = a.capacity.as_ref().or(file.capacity.as_ref()) {
        cfg.capacity = CapacitySetting::parse(c)?;
    }
    if let CapacitySetting::Auto(auto) = &cfg.capacity {
        cfg.capacity = CapacitySetting::Auto(file.auto(auto.clone())?);
    }
    if let Some(p) = a.policy.as_ref().or(file.policy.as_ref()) {
        cfg.policy = p.parse()?;
    }
    let rules = if a.classify.is_empty() { file.classify.as_deref().unwrap_or_default() } else { &a.classify };
    cfg.rules = rules.iter().map(|r| Rule::parse(r)).collect::<Result<_, _>>()?;
    Ok(())
}

/// Limits on the queue, the requests in flight, the waits and the connections; when a
/// request is charged; busy polling; a 503's Retry-After. Flag over file key.
fn limits(cfg: &mut ProxyConfig, a: &ProxyArgs, file: &FileConfig) -> anyhow::Result<()> {
    if let Some(n) = a.max_queue_len.or(file.max_queue_len) {
        if n == 0 {
            bail!("--max-queue-len must be at least 1");
        }
        cfg.max_queue_len = n;
    }
    if let Some(n) = a.max_in_flight.or(file.max_in_flight) {
        if n == 0 {
            bail!("--max-in-flight must be at least 1");
        }
        cfg.max_in_flight = Some(n);
    }
    match a.charge_at.as_deref().or(file.charge_at.as_deref()) {
        None | Some("admission") => cfg.recharge_at_admission = true,
        Some("arrival") => cfg.recharge_at_admission = false,
        Some(other) => bail!("--charge-at {other:?}: expected admission or arrival"),
    }
    if let Some(us) = a.busy_poll_us.or(file.busy_poll_us) {
        cfg.busy_poll = (us > 0).then(|| std::time::Duration::from_micros(us));
    }
    if let Some(w) = a.max_queue_wait.as_ref().or(file.max_queue_wait.as_ref()) {
        cfg.max_queue_wait = Some(config::parse_duration(w, "max-queue-wait")?);
    }
    if let Some(w) = a.max_wait.as_ref().or(file.max_wait.as_ref()) {
        cfg.max_wait = Some(config::parse_duration(w, "max-wait")?);
    }
    if let Some(r) = a.retry_after.or(file.retry_after) {
        cfg.retry_after_s = r;
    }
    if let Some(m) = a.max_connections.or(file.max_connections) {
        if m == 0 {
            bail!("--max-connections must be at least 1");
        }
        cfg.max_connections = m;
    }
    Ok(())
}

/// The estimator, the largest share of the capacity one charge may take and the share of
/// busy time overdue requests may have first, flag over file key.
fn estimation(cfg: &mut ProxyConfig, a: &ProxyArgs, file: &FileConfig) -> anyhow::Result<()> {
    cfg.estimator = file.estimator()?;
    if let Some(b) = &a.estimate_basis {
        cfg.estimator.basis = b.parse().with_context(|| format!("--estimate-basis {b:?}"))?;
    }
    if let Some(s) = a.max_charge_share.or(file.max_charge_share) {
        if !(s > 0.0 && s <= 1.0) {
            bail!("--max-charge-share must be in (0, 1], got {s}");
        }
        cfg.max_charge_share = s;
    }
    if let Some(s) = a.overdue_share.or(file.overdue_share) {
        if !(s > 0.0 && s <= 1.0) {
            bail!("--overdue-share must be in (0, 1], got {s}");
        }
        cfg.overdue_share = s;
    }
    Ok(())
}

/// The timeouts, flag over file key. Those that bound a wait must be above zero: a zero
/// would fail every request (504, a cut body, a closed connection) rather than disable it.
fn timeouts(cfg: &mut ProxyConfig, a: &ProxyArgs, file: &FileConfig) -> anyhow::Result<()> {
    let pick = |flag: &Option<String>, key: &Option<String>, name: &str, positive: bool| {
        let Some(t) = flag.as_ref().or(key.as_ref()) else { return Ok(None) };
        let d = config::parse_duration(t, name)?;
        if positive && d.is_zero() {
            bail!("--{name} {t:?}: must be above 0");
        }
        anyhow::Ok(Some(d))
    };
    if let Some(d) = pick(&a.upstream_timeout, &file.upstream_timeout, "upstream-timeout", true)? {
        cfg.upstream_timeout = d;
    }
    if let Some(d) = pick(&a.upstream_body_timeout, &file.upstream_body_timeout, "upstream-body-timeout", true)? {
        cfg.upstream_body_timeout = d;
    }
    if let Some(d) = pick(&a.header_timeout, &file.header_timeout, "header-timeout", true)? {
        cfg.header_timeout = d;
    }
    if let Some(d) = pick(&a.shutdown_timeout, &file.shutdown_timeout, "shutdown-timeout", false)? {
        cfg.shutdown_timeout = d;
    }
    Ok(())
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
async fn reload_on_sighup(args: ProxyArgs, handle: shortfirst_gatekeeper::Handle) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot watch SIGHUP: no configuration reload");
        return;
    };
    while hup.recv().await.is_some() {
        let applied = proxy_config(args.clone())
            .and_then(|cfg| Ok(handle.reload(cfg.rules.clone(), &cfg.capacity, cfg.policy).map(|()| cfg)?));
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

async fn run_proxy(a: ProxyArgs) -> anyhow::Result<()> {
    let cfg = proxy_config(a.clone())?;
    let summary = summary(&cfg);
    let gk = Gatekeeper::bind(cfg).await?;
    eprintln!("shortfirst gatekeeper: listening on {} ({summary})", gk.local_addr());
    if let Some(a) = gk.admin_addr() {
        eprintln!("shortfirst gatekeeper: metrics at http://{a}/metrics, health at http://{a}/healthz");
    }
    let reload = tokio::spawn(reload_on_sighup(a, gk.handle()));
    gk.run(shutdown_signal()).await?;
    reload.abort();
    eprintln!("shortfirst gatekeeper: stopped");
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
    eprintln!(
        "shortfirst gatekeeper synthetic-upstream: listening on {} ({} types, mean cost {:.2} ms, {} cpus, collapse past {}, thrash {}, peak {:.1} req/s)",
        listener.local_addr()?,
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
        args: ProxyArgs,
    }

    fn config(extra: &[&str]) -> anyhow::Result<ProxyConfig> {
        let base = ["gatekeeper", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9"];
        let cli = Cli::try_parse_from(base.iter().chain(extra))?;
        proxy_config(cli.args)
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
    fn zero_or_malformed_timeouts_are_errors_naming_the_flag() {
        for (flag, value) in [
            ("--upstream-timeout", "0"),
            ("--upstream-body-timeout", "0s"),
            ("--header-timeout", "0ms"),
            ("--header-timeout", "soon"),
            ("--upstream-body-timeout", "1h"),
        ] {
            let err = format!("{:#}", config(&[flag, value]).unwrap_err());
            assert!(err.contains(flag.trim_start_matches('-')), "{flag} {value}: {err}");
        }
    }
}

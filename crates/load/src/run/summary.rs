//! `summary.json`: what a run measured ([`Summary`]), and whether it is
//! valid, i.e. describes the server under the load asked for rather than the
//! generator's limits.

use super::collect::Collected;
use super::config::Config;
use super::dispatch::{Dispatched, NOT_SENT_REASON};
use super::spin::SpinStats;
use super::sys::stopped;
use super::worker::{NO_LOCAL_PORT, REFUSALS};
use super::LoadError;
use crate::record::RequestOutcome;
use crate::scale::offered_load;
use crate::schedule::ScheduleSummary;
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A run whose lateness p99 exceeds this is marked invalid.
pub const LATENESS_P99_LIMIT_MS: f64 = 5.0;
/// A run in which more than this share of the requests sent broke off
/// (closed or reset mid-response, malformed response, an i/o error) is marked
/// invalid: the response-time statistics cover completed requests only, and
/// once more than 1% of them are missing for reasons nobody measured, even
/// the p99 is not known (all of the missing ones could lie above it).
/// Refusals (see [`Summary::refused`]), timeouts, aborts and HTTP errors are
/// measured outcomes, counted on their own, and do not count here.
pub const MAX_FAILED_SHARE: f64 = 0.01;
/// Failure reasons that are the generator's own fault (not the server's):
/// any one of them makes the run invalid, like the in-flight limit.
const GENERATOR_FAILURES: &[&str] = &[NO_LOCAL_PORT];

/// Response-time statistics in seconds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Latencies {
    pub mean_s: Option<f64>,
    pub p50_s: Option<f64>,
    pub p90_s: Option<f64>,
    pub p99_s: Option<f64>,
    pub max_s: Option<f64>,
}

/// `summary.json`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    /// Rows in requests.csv (every request due, sent or not).
    pub requests: u64,
    pub sent: u64,
    /// Complete responses (ok + http_error).
    pub completed: u64,
    pub ok: u64,
    pub http_error: u64,
    pub failed: u64,
    /// Of `failed`: requests the server turned away before any byte of a
    /// response (connection refused, reset, or closed before the response).
    /// What an overloaded server does with the work it cannot take (full SYN
    /// or accept queue, a half-open connection given up, a connection
    /// limit): a measured outcome, like a timeout, not a fault of the run.
    pub refused: u64,
    pub aborted: u64,
    pub timeout: u64,
    pub not_sent_in_flight_limit: u64,
    /// Attempts beyond the first (user retries).
    pub retries: u64,
    pub failures_by_reason: BTreeMap<String, u64>,
    /// Requested bits/s over the sending span ÷ uplink rate (None without --uplink).
    pub offered_load: Option<f64>,
    pub offered_bits_per_s: Option<f64>,
    pub uplink_bits_per_s: Option<f64>,
    pub requested_bytes: u64,
    pub bytes_received: u64,
    pub wire_bytes_received: u64,
    pub throughput_bytes_per_s: Option<f64>,
    pub achieved_req_per_s: Option<f64>,
    /// Response time of completed requests from the scheduled send (free of
    /// coordinated omission).
    pub mean_response_s: Option<f64>,
    pub p50_response_s: Option<f64>,
    pub p90_response_s: Option<f64>,
    pub p99_response_s: Option<f64>,
    /// The same from the actual first send.
    pub response_from_start: Latencies,
    pub lateness_p50_ms: Option<f64>,
    pub lateness_p99_ms: Option<f64>,
    pub lateness_max_ms: Option<f64>,
    pub lateness_samples: u64,
    /// Where lateness goes (see [`LatenessBreakdown`]).
    pub lateness_breakdown: LatenessBreakdown,
    /// The statistics above describe the server under the load asked for:
    /// generator lateness p99 ≤ [`LATENESS_P99_LIMIT_MS`], no request refused
    /// at the in-flight limit or failed on the generator's side (no local
    /// port), no malformed trace record skipped, not interrupted, at least
    /// one request succeeded (2xx/3xx), and at most [`MAX_FAILED_SHARE`] of
    /// the requests sent broke off mid-response or malformed. Refusals,
    /// timeouts, aborts and HTTP errors are measured outcomes and do not
    /// make a run invalid.
    pub valid: bool,
    /// Why not, one sentence each.
    pub invalid_reasons: Vec<String>,
    /// Stopped early by SIGINT/SIGTERM.
    pub interrupted: bool,
    pub trace_records_skipped: u64,
    pub trace_records_out_of_order: u64,
    /// The base speed factor: replay time = trace time / speed (before a
    /// load schedule's multipliers).
    pub speed: f64,
    /// `--load-schedule`: the phases, and per phase the requests scheduled
    /// in it and the rate that makes (None without a schedule).
    pub load_schedule: Option<ScheduleSummary>,
    pub model: String,
    pub target: String,
    pub seed: u64,
    pub command_line: Vec<String>,
    pub started_unix_s: f64,
    pub run_s: f64,
    pub threads: usize,
    pub max_in_flight: usize,
    pub realtime: bool,
    pub batch_window_us: u64,
    pub spin_us: u64,
    /// With `--spin-us`: how the dispatcher waited and what it cost.
    pub spin: Option<SpinStats>,
    /// Commit the binary was built from (`git describe --always --dirty`
    /// at build time; "unknown" outside a git checkout).
    pub git_commit: String,
    pub kernel: String,
    pub cpus: usize,
    pub version: String,
}

/// Percentiles of one component of lateness, in microseconds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Spread {
    pub samples: u64,
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub max_us: Option<u64>,
}

impl Spread {
    pub(super) fn of(h: &Histogram<u64>) -> Spread {
        if h.is_empty() {
            return Spread::default();
        }
        Spread {
            samples: h.len(),
            p50_us: Some(h.value_at_quantile(0.5)),
            p99_us: Some(h.value_at_quantile(0.99)),
            max_us: Some(h.max()),
        }
    }
}

/// Where the lateness of open-model (and session-first) requests goes:
/// lateness = `dispatch` + `handoff`; `send` follows the start (it is not
/// lateness, but it delays the request on the wire all the same).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LatenessBreakdown {
    /// Scheduled time → the dispatcher hands the request over: the batch
    /// window, the dispatcher's wake-up error and its work for the requests
    /// before it in the same batch.
    pub dispatch: Spread,
    /// Handed over → the worker starts the request (a worker that was asleep
    /// has to be woken and scheduled).
    pub handoff: Spread,
    /// Start → request written to the socket (includes connect for a new
    /// connection).
    pub send: Spread,
    /// Per dispatcher wake-up: how long after its target time the dispatcher
    /// actually resumed (timer and CPU wake-up latency; with `--spin-us`, the
    /// error of the spin's end).
    pub dispatcher_wake_error: Spread,
}

impl LatenessBreakdown {
    /// The workers' components from what the collector gathered, and the
    /// dispatcher's own `dispatcher_wake_error`.
    fn of(c: &Collected, dispatcher_wake_error: Spread) -> LatenessBreakdown {
        LatenessBreakdown {
            dispatch: Spread::of(&c.dispatch),
            handoff: Spread::of(&c.handoff),
            send: Spread::of(&c.send),
            dispatcher_wake_error,
        }
    }
}

/// The statistics of a histogram of microseconds whose values sum to `sum_us`.
pub(crate) fn latencies(h: &Histogram<u64>, sum_us: f64) -> Latencies {
    if h.is_empty() {
        return Latencies::default();
    }
    let s = |v: u64| Some(v as f64 / 1e6);
    Latencies {
        mean_s: Some(sum_us / h.len() as f64 / 1e6),
        p50_s: s(h.value_at_quantile(0.5)),
        p90_s: s(h.value_at_quantile(0.9)),
        p99_s: s(h.value_at_quantile(0.99)),
        max_s: s(h.max()),
    }
}

/// Why the run does not describe the server under the load asked for, one
/// sentence each (empty: valid); see [`Summary::valid`].
fn invalid_reasons(
    cfg: &Config,
    c: &Collected,
    lateness_p99_ms: Option<f64>,
    skipped: u64,
    refused: u64,
) -> Vec<String> {
    let get = |o| c.by_outcome.get(&o).copied().unwrap_or(0);
    let sent = c.rows - c.not_sent;
    let mut invalid = Vec::new();
    if let Some(l) = lateness_p99_ms {
        if l > LATENESS_P99_LIMIT_MS {
            invalid.push(format!("generator lateness p99 {l:.3} ms > {LATENESS_P99_LIMIT_MS} ms"));
        }
    }
    if c.not_sent > 0 {
        invalid.push(format!("{} requests not sent: in-flight limit {} reached", c.not_sent, cfg.max_in_flight));
    }
    if skipped > 0 {
        invalid.push(format!("{skipped} malformed trace records skipped"));
    }
    if stopped() {
        invalid.push("interrupted by a signal before the end of the trace/duration".into());
    }
    let ok = get(RequestOutcome::Ok);
    if c.rows == 0 {
        invalid.push("no request was due: nothing was measured".into());
    } else if ok == 0 {
        invalid.push(format!(
            "no request succeeded (2xx/3xx) of {}: nothing of the server's service was measured",
            c.rows
        ));
    }
    // Rows refused at the in-flight limit are `failed` too, but counted
    // above; the server's refusals are a measured outcome.
    let broken = get(RequestOutcome::Failed).saturating_sub(c.not_sent).saturating_sub(refused);
    if sent > 0 && broken as f64 > MAX_FAILED_SHARE * sent as f64 {
        invalid.push(format!(
            "{broken} of {sent} requests sent ({:.1}%) broke off without a complete response (more than {:.0}%): {}",
            100.0 * broken as f64 / sent as f64,
            100.0 * MAX_FAILED_SHARE,
            failure_list(&c.failures)
        ));
    }
    for reason in GENERATOR_FAILURES {
        if let Some(n) = c.failures.get(*reason) {
            invalid.push(format!("{n} requests failed on the generator's side: {reason}"));
        }
    }
    invalid
}

/// The summary of a run from what the collector gathered and what the
/// dispatcher reported. Long because it fills `summary.json`'s flat list of
/// fields, one line each.
pub(super) fn summarize(
    cfg: &Config,
    c: Collected,
    speed: f64,
    started_unix_s: f64,
    dispatched: Dispatched,
) -> Summary {
    let get = |o| c.by_outcome.get(&o).copied().unwrap_or(0);
    let sched = latencies(&c.resp_sched, c.resp_sched_sum_us);
    let lat = |q: f64| (!c.lateness.is_empty()).then(|| c.lateness.value_at_quantile(q) as f64 / 1000.0);
    let lateness_p99_ms = lat(0.99);
    let (send_span, busy_span) = (c.send_span_s(), c.busy_span_s());
    let sent = c.rows - c.not_sent;
    let refused = refusals(&c.failures);
    let skipped = dispatched.skipped.skipped();
    let invalid = invalid_reasons(cfg, &c, lateness_p99_ms, skipped, refused);
    let ok = get(RequestOutcome::Ok);
    let lateness_breakdown = LatenessBreakdown::of(&c, dispatched.wake_error);
    Summary {
        requests: c.rows,
        sent,
        completed: ok + get(RequestOutcome::HttpError),
        ok,
        http_error: get(RequestOutcome::HttpError),
        failed: get(RequestOutcome::Failed),
        refused,
        aborted: get(RequestOutcome::Aborted),
        timeout: get(RequestOutcome::Timeout),
        not_sent_in_flight_limit: c.not_sent,
        retries: c.retries,
        failures_by_reason: c.failures,
        offered_load: cfg
            .uplink_bits_per_s
            .and_then(|u| offered_load(u128::from(c.requested_bytes_sent), send_span, u)),
        offered_bits_per_s: (send_span > 0.0).then(|| c.requested_bytes_sent as f64 * 8.0 / send_span),
        uplink_bits_per_s: cfg.uplink_bits_per_s,
        requested_bytes: c.requested_bytes_sent,
        bytes_received: c.bytes_received,
        wire_bytes_received: c.wire_bytes,
        throughput_bytes_per_s: (busy_span > 0.0).then(|| c.bytes_received as f64 / busy_span),
        achieved_req_per_s: (send_span > 0.0 && sent > 1).then(|| (sent - 1) as f64 / send_span),
        mean_response_s: sched.mean_s,
        p50_response_s: sched.p50_s,
        p90_response_s: sched.p90_s,
        p99_response_s: sched.p99_s,
        response_from_start: latencies(&c.resp_start, c.resp_start_sum_us),
        lateness_p50_ms: lat(0.5),
        lateness_p99_ms,
        lateness_max_ms: (!c.lateness.is_empty()).then(|| c.lateness.max() as f64 / 1000.0),
        lateness_samples: c.lateness.len(),
        lateness_breakdown,
        valid: invalid.is_empty(),
        invalid_reasons: invalid,
        interrupted: stopped(),
        trace_records_skipped: skipped,
        trace_records_out_of_order: dispatched.out_of_order,
        speed,
        load_schedule: cfg.load_schedule.as_ref().map(|s| s.summary(&c.by_phase, c.last_scheduled_s)),
        model: format!("{:?}", cfg.model),
        target: format!("http://{}{}", cfg.target.host, cfg.target.base_path),
        seed: cfg.seed,
        command_line: cfg.command_line.clone(),
        started_unix_s,
        run_s: busy_span,
        threads: cfg.threads,
        max_in_flight: cfg.max_in_flight,
        realtime: cfg.realtime,
        batch_window_us: cfg.batch_window_us,
        spin_us: cfg.spin_us,
        spin: dispatched.spin,
        git_commit: env!("SHORTFIRST_GIT_COMMIT").to_string(),
        kernel: kernel_release(),
        cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

/// The running kernel's release (`uname -r`), empty when unknown.
fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// Requests the server turned away before any byte of a response.
fn refusals(failures: &BTreeMap<String, u64>) -> u64 {
    REFUSALS.iter().filter_map(|r| failures.get(*r)).sum()
}

/// "closed mid-response ×3, malformed response ×1": the failures that break
/// a run (the in-flight limit's rows are reported on their own, refusals are
/// measured outcomes).
fn failure_list(failures: &BTreeMap<String, u64>) -> String {
    let mut v: Vec<_> =
        failures.iter().filter(|(r, _)| r.as_str() != NOT_SENT_REASON && !REFUSALS.contains(&r.as_str())).collect();
    v.sort_by(|a, b| b.1.cmp(a.1));
    v.iter().map(|(r, n)| format!("{r} ×{n}")).collect::<Vec<_>>().join(", ")
}

/// Writes JSON to `path.tmp`, then renames it onto `path`.
pub fn write_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), LoadError> {
    let io = |source| LoadError::Io { path: path.to_path_buf(), source };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let text = serde_json::to_string_pretty(value).expect("summary serialises");
    std::fs::write(&tmp, text + "\n").map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

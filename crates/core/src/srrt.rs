//! SRRT: rank a response by its estimated *remaining response time* instead of its
//! remaining size (Al-Sadeh and Yahya 2008, eq. 1), from a `TCP_INFO` snapshot.
//!
//! Pure: the driver reads `TCP_INFO` into a [`TcpSnapshot`] and counts the bytes it
//! has not yet written; this module turns both into an [`Estimate`] and a band.
//!
//! # Remaining bytes
//! `B = unwritten + notsent`: the response's bytes the application has not yet handed
//! to the kernel, plus `tcpi_notsent_bytes` (written but never transmitted). Bytes
//! already transmitted and not yet acknowledged (`tcpi_unacked`) are *not* counted:
//! they are on the wire and arrive within about half a round trip whatever the
//! server does next, which the estimate's path term covers. On a keep-alive
//! connection `notsent` may still hold the previous response's tail; it drains
//! first, so it belongs in this response's remaining time too.
//!
//! # Estimators
//! With `W = cwnd · mss` (bytes per round trip now) and `rtt` the round-trip time:
//!
//! - [`Estimator::Paper`] (eq. 1): `srtt · (1 + B / W)`.
//! - [`Estimator::Path`] (the default), the paper's model with four corrections:
//!   1. **Path delay from `min_rtt`, not `srtt`.** `srtt` includes queueing in the
//!      server's own band queues: a connection waiting behind better bands would
//!      see its estimate grow and be pushed further down (positive feedback toward
//!      starvation). `min_rtt` is the path's propagation delay. `srtt` is used only
//!      when the kernel reports no `min_rtt`.
//!   2. **Half a round trip, not a whole one, for the last byte to arrive**: the
//!      estimate is to the client's last byte, which is one-way. `rtt/2 + B·rtt/W`
//!      in congestion avoidance.
//!   3. **Slow start** while `cwnd < ssthresh` (and the connection is in `Open`):
//!      the window doubles every round trip, so `B` bytes take `rtt · log2(1 + B/W)`
//!      (continuous form of Cardwell et al. 2000's `⌈log2(1 + B/W)⌉` rounds) until
//!      the window reaches `ssthresh`, then `rtt/ssthresh_bytes` per byte. Without
//!      it a fresh connection (cwnd = 10) looks like a long flow and a 100 KB
//!      response is overestimated several-fold.
//!   4. **Loss**: a rate cap from Mathis et al. 1997, `(mss / rtt) · 1.22 / √p` with
//!      `p = bytes_retrans / bytes_sent` once at least [`LOSS_MIN_SAMPLE_SEGMENTS`]
//!      segments were sent (fewer are noise); in `Loss` (an RTO fired) the pending
//!      timeout `rto` is added, in `Recovery` one round trip (the repair).
//!
//!   5. **Restart after idle**: a kept-alive connection idle for longer than its RTO
//!      with nothing in flight restarts from the initial window when it next sends
//!      (`tcp_slow_start_after_idle`, on by default; the kernel's `tcp_cwnd_restart`
//!      halves cwnd per RTO idle, down to 10 segments, and keeps `ssthresh` at least
//!      3/4 of the old window). `TCP_INFO` still shows the old window until then, so
//!      the estimate applies the restart itself ([`TcpSnapshot::after_idle_restart`]).
//!
//!   The window is also capped by the peer's receive window when the kernel reports
//!   it (`tcpi_snd_wnd`). `tcpi_delivery_rate` is not used: under a priority
//!   scheduler most connections are application- or band-limited, so it measures
//!   the share we gave the connection, not what its path could do.
//!
//! Both estimators are non-decreasing in `B` at a fixed TCP state, so more
//! remaining bytes never give a better band (property-tested below).
//!
//! # Bands
//! [`RrtCutoffs`] are durations; `k` cutoffs make `k + 1` data bands exactly as size
//! cutoffs do, and band 0 (connection set-up) is never returned. `auto` derives them
//! from a bounded window of start estimates by the same rules of thumb as size
//! cutoffs ([`crate::bands::AutoCutoffs`]).
//!
//! # A response's band over its life ([`RrtResponse`])
//! The band is set from the estimate at the response's start; then, as bytes drain,
//! a re-evaluation is due each time the bytes written cross a multiple of
//! `step_bytes` (at most one per write, never on the write that empties the
//! response). A re-evaluation may only move the response to a *better* band: a
//! worse estimate mid-response comes from a collapsed window or a timeout, which
//! a low band itself causes (queueing → spurious RTO → cwnd 1), so acting on it
//! would starve the response further; it is counted as held instead.

use serde::{Deserialize, Serialize};

use crate::bands::{cutoffs_from_sorted, AutoCutoffs, Band, Cutoffs, CutoffsError, MAX_DATA_BANDS};
use crate::units::{parse_duration_s, BareUnit};

/// Below this many segments sent, `bytes_retrans / bytes_sent` is noise: no loss cap.
pub const LOSS_MIN_SAMPLE_SEGMENTS: u64 = 100;
/// Mathis et al.'s constant `sqrt(3/2)` (no delayed ACKs).
pub const MATHIS_C: f64 = 1.22;
/// Largest estimate: 100 days in µs. Beyond, every estimate is "very long" alike.
pub const MAX_ESTIMATE_US: u64 = 100 * 86_400 * 1_000_000;
/// The window a connection restarts from after idle (`TCP_INIT_CWND`, segments).
pub const RESTART_WINDOW_SEGMENTS: u32 = 10;
/// The kernel's "no ssthresh yet" (`TCP_INFINITE_SSTHRESH`).
pub const INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

/// `tcpi_ca_state`: the congestion-avoidance state machine (`enum tcp_ca_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum CaState {
    #[default]
    Open,
    Disorder,
    Cwr,
    Recovery,
    Loss,
    Unknown(u8),
}

impl CaState {
    pub fn from_kernel(value: u8) -> CaState {
        match value {
            0 => CaState::Open,
            1 => CaState::Disorder,
            2 => CaState::Cwr,
            3 => CaState::Recovery,
            4 => CaState::Loss,
            v => CaState::Unknown(v),
        }
    }
}

/// What SRRT reads from `TCP_INFO`, as plain values. `None`: the kernel did not
/// report the field (an older kernel returns a shorter struct).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TcpSnapshot {
    /// Smoothed RTT (`tcpi_rtt`), µs; 0 before the first sample.
    pub srtt_us: u32,
    /// Windowed minimum RTT (`tcpi_min_rtt`), µs; `None` if absent or not yet sampled.
    pub min_rtt_us: Option<u32>,
    /// Retransmission timeout now (`tcpi_rto`, already backed off), µs.
    pub rto_us: u32,
    /// Congestion window (`tcpi_snd_cwnd`), segments.
    pub cwnd_segments: u32,
    /// Sender MSS (`tcpi_snd_mss`), bytes.
    pub mss_bytes: u32,
    /// Slow-start threshold (`tcpi_snd_ssthresh`), segments; [`INFINITE_SSTHRESH`] before a loss.
    pub ssthresh_segments: u32,
    pub ca_state: CaState,
    /// Consecutive RTO backoffs (`tcpi_backoff`).
    pub backoff: u8,
    /// Retransmissions of the current head segment (`tcpi_retransmits`).
    pub retransmits: u8,
    /// Segments in flight (`tcpi_unacked`).
    pub unacked_segments: u32,
    /// Written but not yet transmitted (`tcpi_notsent_bytes`), bytes.
    pub notsent_bytes: Option<u32>,
    /// `tcpi_delivery_rate`, bytes/s (reported, not used by the estimators; see the module docs).
    pub delivery_rate_bytes_per_s: Option<u64>,
    pub delivery_rate_app_limited: bool,
    /// Data bytes transmitted, retransmissions included (`tcpi_bytes_sent`).
    pub bytes_sent: Option<u64>,
    /// Data bytes retransmitted (`tcpi_bytes_retrans`).
    pub bytes_retrans: Option<u64>,
    /// The peer's receive window after scaling (`tcpi_snd_wnd`), bytes.
    pub snd_wnd_bytes: Option<u32>,
    /// Milliseconds since data was last sent (`tcpi_last_data_sent`).
    pub last_data_sent_ms: u32,
    /// Whether the kernel restarts the window after idle: `net.ipv4.tcp_slow_start_after_idle`
    /// set and a congestion control without its own `cong_control` (reno, cubic; not
    /// BBR). The driver decides once.
    pub restarts_after_idle: bool,
}

impl TcpSnapshot {
    /// The round-trip time the path estimator uses: `min_rtt`, else `srtt`, µs.
    pub fn path_rtt_us(&self) -> u32 {
        match self.min_rtt_us {
            Some(m) if m > 0 => m,
            _ => self.srtt_us,
        }
    }

    /// Bytes the window lets out per round trip: `cwnd · mss`, capped by the peer's
    /// receive window when known; at least one segment.
    pub fn window_bytes(&self) -> f64 {
        let mss = f64::from(self.mss_bytes.max(1));
        let cwnd = f64::from(self.cwnd_segments.max(1)) * mss;
        match self.snd_wnd_bytes {
            Some(w) if w > 0 => cwnd.min(f64::from(w)).max(mss),
            _ => cwnd,
        }
    }

    /// Per-connection loss rate `bytes_retrans / bytes_sent`, once enough was sent.
    pub fn loss_rate(&self) -> Option<f64> {
        let (sent, retrans) = (self.bytes_sent?, self.bytes_retrans?);
        let min_sent = LOSS_MIN_SAMPLE_SEGMENTS.saturating_mul(u64::from(self.mss_bytes.max(1)));
        (sent >= min_sent && retrans > 0).then(|| (retrans as f64 / sent as f64).min(1.0))
    }

    /// The state the connection will send in: after an idle spell longer than the
    /// RTO with nothing in flight, the kernel's window restart applied (module docs).
    pub fn after_idle_restart(&self) -> TcpSnapshot {
        let idle_us = u64::from(self.last_data_sent_ms) * 1_000;
        let rto_us = u64::from(self.rto_us.max(1));
        if !self.restarts_after_idle || self.unacked_segments > 0 || idle_us <= rto_us {
            return *self;
        }
        let restart = RESTART_WINDOW_SEGMENTS;
        let mut cwnd = self.cwnd_segments;
        let mut left_us = idle_us;
        while left_us > rto_us && cwnd > restart {
            left_us -= rto_us;
            cwnd >>= 1;
        }
        let cwnd = cwnd.max(restart);
        // tcp_current_ssthresh(): at least 3/4 of the window before the restart.
        let three_quarters = (self.cwnd_segments >> 1) + (self.cwnd_segments >> 2);
        let ssthresh = self.ssthresh_segments.max(three_quarters);
        TcpSnapshot { cwnd_segments: cwnd, ssthresh_segments: ssthresh, ..*self }
    }

    fn in_slow_start(&self) -> bool {
        self.ca_state == CaState::Open && self.cwnd_segments < self.ssthresh_segments
    }
}

/// How the remaining response time is estimated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Estimator {
    /// Al-Sadeh and Yahya 2008, eq. 1: `srtt · (1 + B / (cwnd · mss))`.
    Paper,
    /// `min_rtt` path delay, slow start, loss and timeout terms (module docs).
    #[default]
    Path,
}

impl std::str::FromStr for Estimator {
    type Err = String;
    fn from_str(s: &str) -> Result<Estimator, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "paper" => Ok(Estimator::Paper),
            "path" => Ok(Estimator::Path),
            _ => Err(format!("unknown RRT estimator {s:?}: expected path or paper")),
        }
    }
}

impl std::fmt::Display for Estimator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Estimator::Paper => "paper",
            Estimator::Path => "path",
        })
    }
}

/// An estimate of the remaining response time and the terms it is made of (µs).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Estimate {
    /// Time until the client has the last byte, µs (at most [`MAX_ESTIMATE_US`]).
    pub remaining_us: u64,
    /// The bytes still to transmit: unwritten + `notsent`.
    pub remaining_bytes: u64,
    /// The path term (one-way delay; the whole `srtt` for the paper's estimator), µs.
    pub path_us: f64,
    /// Time to transmit the remaining bytes, µs.
    pub transfer_us: f64,
    /// Timeout or repair penalty, µs.
    pub penalty_us: f64,
}

/// The remaining bytes `B` for `unwritten_bytes` not yet handed to the kernel.
pub fn remaining_bytes(unwritten_bytes: u64, tcp: &TcpSnapshot) -> u64 {
    unwritten_bytes.saturating_add(u64::from(tcp.notsent_bytes.unwrap_or(0)))
}

/// The estimated remaining response time of a response with `unwritten_bytes`
/// not yet written, on a connection in state `tcp`.
pub fn estimate(estimator: Estimator, unwritten_bytes: u64, tcp: &TcpSnapshot) -> Estimate {
    let b = remaining_bytes(unwritten_bytes, tcp);
    let bytes = b as f64;
    let (path_us, transfer_us, penalty_us) = match estimator {
        Estimator::Paper => {
            let rtt = f64::from(tcp.srtt_us);
            (rtt, rtt * bytes / f64::from(tcp.cwnd_segments.max(1)).max(1.0) / f64::from(tcp.mss_bytes.max(1)), 0.0)
        }
        Estimator::Path => {
            let tcp = &tcp.after_idle_restart();
            let w = tcp.window_bytes();
            let rtt = f64::from(tcp.path_rtt_us());
            let mut transfer = if tcp.in_slow_start() { slow_start_us(bytes, w, tcp, rtt) } else { rtt * bytes / w };
            if let Some(p) = tcp.loss_rate() {
                // Mathis cap: never faster than the loss rate allows.
                let mathis_bytes_per_us = f64::from(tcp.mss_bytes.max(1)) / rtt.max(1.0) * MATHIS_C / p.sqrt();
                transfer = transfer.max(bytes / mathis_bytes_per_us);
            }
            let penalty = match tcp.ca_state {
                CaState::Loss => f64::from(tcp.rto_us),
                CaState::Recovery => rtt,
                _ => 0.0,
            };
            (rtt / 2.0, transfer, penalty)
        }
    };
    let total = path_us + transfer_us + penalty_us;
    let remaining_us = if total.is_finite() { (total.round() as u64).min(MAX_ESTIMATE_US) } else { MAX_ESTIMATE_US };
    Estimate { remaining_us, remaining_bytes: b, path_us, transfer_us, penalty_us }
}

/// Time to transmit `bytes` from window `w` doubling per round trip up to
/// `ssthresh`, then at `ssthresh` per round trip (a lower bound on congestion
/// avoidance's slowly growing window).
fn slow_start_us(bytes: f64, w: f64, tcp: &TcpSnapshot, rtt: f64) -> f64 {
    let ss_cap = if tcp.ssthresh_segments >= INFINITE_SSTHRESH {
        f64::INFINITY
    } else {
        f64::from(tcp.ssthresh_segments) * f64::from(tcp.mss_bytes.max(1))
    };
    // Bytes sent while the window grows from w to the cap: w·(2^n − 1) = cap − w.
    let ss_bytes = (ss_cap - w).max(0.0);
    if bytes <= ss_bytes {
        rtt * (1.0 + bytes / w).log2()
    } else {
        rtt * (ss_cap / w).log2() + rtt * (bytes - ss_bytes) / ss_cap
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RrtCutoffsError {
    #[error("RRT cutoff #{position} {text:?}: expected a duration such as 50ms, 1.5s or 200us")]
    Syntax { position: usize, text: String },
    #[error("RRT cutoffs: {0}")]
    Invalid(String),
}

/// Strictly increasing response-time cutoffs; `k` cutoffs make `k + 1` data bands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RrtCutoffs {
    /// The same band arithmetic as size cutoffs, in microseconds.
    us: Cutoffs,
}

impl RrtCutoffs {
    /// 50 ms, 100 ms, 200 ms, 500 ms, 1 s: six bands spanning the one-way delays
    /// and first round trips of the paper's client groups (RTT 50–350 ms) up to
    /// transfers of many round trips. `auto` learns the mix instead.
    pub fn default_list() -> RrtCutoffs {
        RrtCutoffs::from_us(vec![50_000, 100_000, 200_000, 500_000, 1_000_000]).expect("valid")
    }

    pub fn from_us(us: Vec<u64>) -> Result<RrtCutoffs, RrtCutoffsError> {
        Cutoffs::new(us).map(|us| RrtCutoffs { us }).map_err(|e| RrtCutoffsError::Invalid(describe(&e)))
    }

    /// Wraps cutoffs in microseconds (e.g. from [`AutoCutoffs`] over estimates).
    pub fn from_cutoffs_us(us: Cutoffs) -> RrtCutoffs {
        RrtCutoffs { us }
    }

    /// Parses `50ms,100ms,1s` (a plain number is milliseconds). Empty: one band.
    pub fn parse(text: &str) -> Result<RrtCutoffs, RrtCutoffsError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(RrtCutoffs { us: Cutoffs::fair() });
        }
        let us = text
            .split(',')
            .enumerate()
            .map(|(i, part)| {
                let syntax = || RrtCutoffsError::Syntax { position: i + 1, text: part.trim().to_string() };
                let s = parse_duration_s(part, BareUnit::Milliseconds).map_err(|_| syntax())?;
                Ok((s * 1e6).round() as u64)
            })
            .collect::<Result<Vec<_>, _>>()?;
        RrtCutoffs::from_us(us)
    }

    pub fn as_us(&self) -> &[u64] {
        self.us.as_slice()
    }

    pub fn as_cutoffs_us(&self) -> &Cutoffs {
        &self.us
    }

    pub fn data_bands(&self) -> usize {
        self.us.data_bands()
    }

    /// The band of an estimate: 1 plus the cutoffs below it; never band 0.
    pub fn band_for(&self, remaining_us: u64) -> Band {
        self.us.band_for_remaining(remaining_us)
    }
}

impl std::fmt::Display for RrtCutoffs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.us.as_slice().iter().map(|&us| format!("{}ms", us as f64 / 1e3)).collect();
        write!(f, "{}", parts.join(","))
    }
}

/// A size-cutoff error re-worded for durations (the positions carry over).
fn describe(e: &CutoffsError) -> String {
    match e {
        CutoffsError::TooMany { count } => {
            format!("{count} given, at most {} (one fewer than the {MAX_DATA_BANDS} data bands)", MAX_DATA_BANDS - 1)
        }
        CutoffsError::Zero { position, .. } => format!("cutoff #{position} is 0: must be at least 1 µs"),
        CutoffsError::TooLarge { position, .. } => format!("cutoff #{position} is too large"),
        CutoffsError::NotIncreasing { position, .. } => {
            format!("cutoff #{position} is not above the one before it: cutoffs must be strictly increasing")
        }
        CutoffsError::Syntax { position, text } => format!("cutoff #{position} {text:?}"),
    }
}

/// RRT cutoffs learned from a bounded window of start estimates, by the rules of
/// thumb of size cutoffs (first near the median, last with 1% above, log spacing).
#[derive(Clone, Debug)]
pub struct AutoRrtCutoffs {
    window: AutoCutoffs,
}

impl AutoRrtCutoffs {
    /// See [`AutoCutoffs::new`] for the limits on `data_bands` and `window_len`.
    pub fn new(data_bands: usize, window_len: usize) -> AutoRrtCutoffs {
        AutoRrtCutoffs { window: AutoCutoffs::new(data_bands, window_len) }
    }

    pub fn observe(&mut self, estimate_us: u64) {
        self.window.observe(estimate_us.max(1));
    }

    pub fn observations(&self) -> usize {
        self.window.observations()
    }

    /// Cutoffs for the window, or `None` with too few observations. O(n log n).
    pub fn compute(&self) -> Option<RrtCutoffs> {
        self.window.compute().map(RrtCutoffs::from_cutoffs_us)
    }
}

/// [`crate::bands::cutoffs_from_sorted`] for sorted estimates in µs.
pub fn rrt_cutoffs_from_sorted(sorted_us: &[u64], data_bands: usize) -> RrtCutoffs {
    RrtCutoffs::from_cutoffs_us(cutoffs_from_sorted(sorted_us, data_bands))
}

/// Why a response changed band.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Cause {
    /// The response's first band, from the estimate at its start.
    Start,
    /// Bytes drained: the same TCP state as the last evaluation gives the new band.
    Drain,
    /// The TCP state improved (window grew, loss repaired) beyond what draining explains.
    TcpState,
}

impl Cause {
    pub const ALL: [Cause; 3] = [Cause::Start, Cause::Drain, Cause::TcpState];

    pub fn name(self) -> &'static str {
        match self {
            Cause::Start => "start",
            Cause::Drain => "drain",
            Cause::TcpState => "tcp_state",
        }
    }
}

/// What a re-evaluation decided.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// Same band.
    Stay,
    /// A better band.
    Promote { band: Band, cause: Cause },
    /// The estimate asks for a worse band; the response keeps its band (module docs).
    HeldDemotion { wanted: Band },
}

/// One response under SRRT: its band, the bytes not yet written, and when the next
/// re-evaluation is due.
#[derive(Clone, Debug)]
pub struct RrtResponse {
    estimator: Estimator,
    band: Band,
    unwritten_bytes: u64,
    written_bytes: u64,
    step_bytes: u64,
    /// `written_bytes / step_bytes` at the last evaluation.
    evaluated_step: u64,
    last_tcp: TcpSnapshot,
    start: Estimate,
}

impl RrtResponse {
    /// A response of `size_bytes` starting on a connection in state `tcp`;
    /// re-evaluations are due every `step_bytes` written (at least 1).
    pub fn start(
        cutoffs: &RrtCutoffs,
        estimator: Estimator,
        size_bytes: u64,
        step_bytes: u64,
        tcp: TcpSnapshot,
    ) -> RrtResponse {
        let start = estimate(estimator, size_bytes, &tcp);
        RrtResponse {
            estimator,
            band: cutoffs.band_for(start.remaining_us),
            unwritten_bytes: size_bytes,
            written_bytes: 0,
            step_bytes: step_bytes.max(1),
            evaluated_step: 0,
            last_tcp: tcp,
            start,
        }
    }

    pub fn band(&self) -> Band {
        self.band
    }

    pub fn unwritten_bytes(&self) -> u64 {
        self.unwritten_bytes
    }

    /// The estimate at the response's start.
    pub fn start_estimate(&self) -> Estimate {
        self.start
    }

    /// The TCP state of the last evaluation.
    pub fn last_tcp(&self) -> &TcpSnapshot {
        &self.last_tcp
    }

    /// Records `sent_bytes` more written. Returns `true` when a re-evaluation is
    /// due: the bytes written crossed a multiple of `step_bytes` since the last one
    /// and the response is not yet fully written (the write that empties it never
    /// moves it, as for size bands: the bytes still queued are its tail).
    pub fn sent(&mut self, sent_bytes: u64) -> bool {
        self.unwritten_bytes = self.unwritten_bytes.saturating_sub(sent_bytes);
        self.written_bytes = self.written_bytes.saturating_add(sent_bytes);
        self.unwritten_bytes > 0 && self.written_bytes / self.step_bytes > self.evaluated_step
    }

    /// Re-evaluates with a fresh snapshot; the band only improves.
    pub fn reevaluate(&mut self, cutoffs: &RrtCutoffs, tcp: TcpSnapshot) -> Verdict {
        self.evaluated_step = self.written_bytes / self.step_bytes;
        let now = estimate(self.estimator, self.unwritten_bytes, &tcp);
        let wanted = cutoffs.band_for(now.remaining_us);
        let previous_tcp = std::mem::replace(&mut self.last_tcp, tcp);
        if wanted > self.band {
            return Verdict::HeldDemotion { wanted };
        }
        if wanted == self.band {
            return Verdict::Stay;
        }
        // Would draining alone, at the previous TCP state, have given this band?
        let drained = estimate(self.estimator, self.unwritten_bytes, &previous_tcp);
        let cause = if cutoffs.band_for(drained.remaining_us) <= wanted { Cause::Drain } else { Cause::TcpState };
        self.band = wanted;
        Verdict::Promote { band: wanted, cause }
    }
}

#[cfg(test)]
mod tests;

//! A response's band as its bytes drain, for every policy: size bands
//! (`core::bands::Response`) or, under `srrt`, bands of estimated remaining
//! response time (`core::srrt::RrtResponse`) fed by `TCP_INFO`.
//!
//! Re-evaluation under `srrt`: at the response's start (one `getsockopt(TCP_INFO)`)
//! and after any write that takes the bytes written across a multiple of
//! `rrt-step-bytes` (default 64 KiB), except the write that empties the response.
//! Cost bound: at most one `getsockopt` per write and at most `1 + size /
//! rrt-step-bytes` per response (≈ 1 µs each on this machine kind); at most one
//! `setsockopt(SO_PRIORITY)` per band change, which only ever improves a band
//! within a response, so at most `data bands − 1` changes after the start.
//!
//! Metrics (`shortfirst_srrt_*` on the admin endpoint): band changes by cause,
//! demotions held, `TCP_INFO` reads and failures, and the estimate's error as a
//! histogram of *estimated at start / measured*, where measured is the time from
//! the response's start to its last byte written plus half the path's `min_rtt`
//! (the last byte's one-way trip). Bytes still queued in the socket at the last
//! write (at most `notsent-lowat-bytes` plus a window) are not seen by the server,
//! so measured is a slight underestimate of what the client sees.

use std::fmt::Write as _;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
// The wall clock: the measured response time is added to the kernel's path RTT, a real
// time, to judge the estimate.
#[allow(clippy::disallowed_types)]
use std::time::Instant;

use shortfirst_core::bands::{Band, Cutoffs, Response};
use shortfirst_core::srrt::{Cause, RrtCutoffs, RrtResponse, TcpSnapshot, Verdict};

use crate::metrics::{write_buckets, write_family, write_metric};
use crate::sched::CutoffsCache;
use crate::server::Shared;
use crate::tcpinfo;

/// Upper bounds of the estimate-ratio histogram (estimated / measured).
pub const RATIO_BUCKETS: [f64; 9] = [0.125, 0.25, 0.5, 0.8, 1.0, 1.25, 2.0, 4.0, 8.0];

/// `srrt`'s counters: plain atomics, constant memory.
#[derive(Default)]
pub struct SrrtMetrics {
    band_changes: [AtomicU64; Cause::ALL.len()],
    demotions_held: AtomicU64,
    tcp_info_reads: AtomicU64,
    tcp_info_errors: AtomicU64,
    /// Non-cumulative; the last slot is above every bound.
    ratio: [AtomicU64; RATIO_BUCKETS.len() + 1],
    estimated_sum_us: AtomicU64,
    measured_sum_us: AtomicU64,
}

fn cause_slot(cause: Cause) -> usize {
    Cause::ALL.iter().position(|&c| c == cause).expect("every cause is listed")
}

impl SrrtMetrics {
    pub fn band_change(&self, cause: Cause) {
        self.band_changes[cause_slot(cause)].fetch_add(1, Relaxed);
    }

    /// A completed response: its estimate at start against the measured time.
    pub fn estimate_error(&self, estimated_us: u64, measured_us: u64) {
        let ratio = estimated_us as f64 / measured_us.max(1) as f64;
        let bucket = RATIO_BUCKETS.partition_point(|&bound| bound < ratio);
        self.ratio[bucket].fetch_add(1, Relaxed);
        self.estimated_sum_us.fetch_add(estimated_us, Relaxed);
        self.measured_sum_us.fetch_add(measured_us, Relaxed);
    }

    /// The `srrt` series and the response-time cutoffs in force (µs in `cutoffs_us`).
    pub fn render(&self, out: &mut String, cutoffs_us: &Cutoffs) {
        write_family(
            out,
            "shortfirst_rrt_cutoff_seconds",
            "gauge",
            "Response-time cutoffs in force: band b holds estimates up to cutoff b.",
        );
        for (i, us) in cutoffs_us.as_slice().iter().enumerate() {
            let _ = writeln!(out, "shortfirst_rrt_cutoff_seconds{{band=\"{}\"}} {}", i + 1, *us as f64 / 1e6);
        }
        write_family(
            out,
            "shortfirst_srrt_band_changes_total",
            "counter",
            "Band changes under srrt by cause: start (a response's first band differs from the socket's), drain \
             (bytes drained), tcp_state (the connection's TCP state improved).",
        );
        for cause in Cause::ALL {
            let n = self.band_changes[cause_slot(cause)].load(Relaxed);
            let _ = writeln!(out, "shortfirst_srrt_band_changes_total{{cause=\"{}\"}} {n}", cause.name());
        }
        let counters = [
            (
                "shortfirst_srrt_demotions_held_total",
                "Re-evaluations whose estimate asked for a worse band; the response kept its band.",
                &self.demotions_held,
            ),
            ("shortfirst_srrt_tcp_info_reads_total", "getsockopt(TCP_INFO) calls.", &self.tcp_info_reads),
            (
                "shortfirst_srrt_tcp_info_errors_total",
                "getsockopt(TCP_INFO) failures (the estimate then uses the last snapshot).",
                &self.tcp_info_errors,
            ),
        ];
        for (name, help, value) in counters {
            write_metric(out, name, "counter", help, value.load(Relaxed));
        }
        write_family(
            out,
            "shortfirst_srrt_estimate_ratio",
            "histogram",
            "Remaining response time estimated at a response's start over the measured time (start to last byte \
             written plus min_rtt/2).",
        );
        let cumulative = write_buckets(out, "shortfirst_srrt_estimate_ratio", &RATIO_BUCKETS, &self.ratio);
        let _ = writeln!(out, "shortfirst_srrt_estimate_ratio_count {cumulative}");
        for (name, help, value) in [
            ("shortfirst_srrt_estimated_seconds_sum", "Sum of the estimates at start.", &self.estimated_sum_us),
            ("shortfirst_srrt_measured_seconds_sum", "Sum of the measured times.", &self.measured_sum_us),
        ] {
            write_metric(out, name, "counter", help, value.load(Relaxed) as f64 / 1e6);
        }
    }
}

/// The band tracker: one response's band as it is written (by bytes sent, or under srrt
/// by re-estimated remaining time). It lives in the
/// connection's future for one response; boxing the larger variant would cost an
/// allocation per response to save a couple of hundred bytes of stack.
#[allow(clippy::large_enum_variant)]
pub(crate) enum BandTracker<'a> {
    Size { response: Response, cutoffs: Arc<Cutoffs> },
    Rrt(RrtBandTracker<'a>),
}

pub(crate) struct RrtBandTracker<'a> {
    response: RrtResponse,
    cutoffs: Arc<RrtCutoffs>,
    fd: RawFd,
    shared: &'a Shared,
    #[allow(clippy::disallowed_types)] // wall clock: see the import
    started: Instant,
}

/// Whether this network namespace's TCP restarts a window after idle
/// (`tcp_slow_start_after_idle`, and not BBR, whose own `cong_control` skips the
/// restart), read once: the server's sockets all live in one namespace and use
/// its default congestion control. Unreadable: the kernel's default, on.
fn restarts_after_idle() -> bool {
    static VALUE: OnceLock<bool> = OnceLock::new();
    *VALUE.get_or_init(|| {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let on = read("/proc/sys/net/ipv4/tcp_slow_start_after_idle").as_deref().map(str::trim) != Some("0");
        let bbr = read("/proc/sys/net/ipv4/tcp_congestion_control").is_some_and(|v| v.trim() == "bbr");
        on && !bbr
    })
}

/// One `getsockopt(TCP_INFO)`, counted; `None` (and counted) if it fails.
fn read_snapshot(shared: &Shared, fd: RawFd) -> Option<TcpSnapshot> {
    let m = &shared.metrics.srrt;
    m.tcp_info_reads.fetch_add(1, Relaxed);
    match tcpinfo::read(fd) {
        Ok(info) => Some(TcpSnapshot { restarts_after_idle: restarts_after_idle(), ..info.snapshot() }),
        Err(e) => {
            m.tcp_info_errors.fetch_add(1, Relaxed);
            tracing::debug!(error = %e, "getsockopt(TCP_INFO) failed");
            None
        }
    }
}

impl<'a> BandTracker<'a> {
    /// A response of `total_bytes` (head + body) about to be written on `socket`,
    /// whose band is `socket_band` now. Feeds the auto cutoffs what it ranks by.
    pub(crate) fn start(
        shared: &'a Shared,
        cache: &CutoffsCache,
        socket: &impl AsRawFd,
        socket_band: Band,
        total_bytes: u64,
    ) -> BandTracker<'a> {
        let Some(rrt) = &cache.rrt else {
            shared.cutoff_chooser.observe(total_bytes);
            return BandTracker::Size {
                response: Response::start(&cache.cutoffs, total_bytes),
                cutoffs: cache.cutoffs.clone(),
            };
        };
        let fd = socket.as_raw_fd();
        // A connected TCP socket always answers; if not, the zero snapshot puts the
        // response in band 1 (as FAIR would) rather than guessing a band.
        let tcp = read_snapshot(shared, fd).unwrap_or_default();
        let config = &shared.config;
        let response = RrtResponse::start(rrt, config.rrt_estimator, total_bytes, config.rrt_step_bytes, tcp);
        shared.cutoff_chooser.observe(response.start_estimate().remaining_us);
        if response.band() != socket_band {
            shared.metrics.srrt.band_change(Cause::Start);
        }
        #[allow(clippy::disallowed_types)] // wall clock: see the import
        let started = Instant::now();
        BandTracker::Rrt(RrtBandTracker { response, cutoffs: rrt.clone(), fd, shared, started })
    }

    pub(crate) fn band(&self) -> Band {
        match self {
            BandTracker::Size { response, .. } => response.band(),
            BandTracker::Rrt(p) => p.response.band(),
        }
    }

    /// Records `sent_bytes` more written; `Some(band)` when the response moves to a
    /// better band (the caller sets the socket's priority).
    pub(crate) fn sent(&mut self, sent_bytes: u64) -> Option<Band> {
        match self {
            BandTracker::Size { response, cutoffs } => response.sent(cutoffs, sent_bytes),
            BandTracker::Rrt(p) => {
                if !p.response.sent(sent_bytes) {
                    return None;
                }
                let tcp = read_snapshot(p.shared, p.fd)?;
                match p.response.reevaluate(&p.cutoffs, tcp) {
                    Verdict::Stay => None,
                    Verdict::HeldDemotion { .. } => {
                        p.shared.metrics.srrt.demotions_held.fetch_add(1, Relaxed);
                        None
                    }
                    Verdict::Promote { band, cause } => {
                        p.shared.metrics.srrt.band_change(cause);
                        Some(band)
                    }
                }
            }
        }
    }

    /// The response's last byte is written: records the estimate's error.
    pub(crate) fn finish(&self) {
        if let BandTracker::Rrt(p) = self {
            let one_way_us = u64::from(p.response.last_tcp().path_rtt_us()) / 2;
            let measured_us = u64::try_from(p.started.elapsed().as_micros()).unwrap_or(u64::MAX);
            let estimated_us = p.response.start_estimate().remaining_us;
            p.shared.metrics.srrt.estimate_error(estimated_us, measured_us.saturating_add(one_way_us));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_render_causes_and_a_cumulative_ratio_histogram() {
        let m = SrrtMetrics::default();
        m.band_change(Cause::Start);
        m.band_change(Cause::Drain);
        m.band_change(Cause::Drain);
        m.estimate_error(100_000, 100_000); // ratio 1.0
        m.estimate_error(50_000, 400_000); // 0.125
        m.estimate_error(900_000, 100_000); // 9: above every bound
        let mut out = String::new();
        m.render(&mut out, RrtCutoffs::default_list().as_cutoffs_us());
        for line in [
            "shortfirst_rrt_cutoff_seconds{band=\"1\"} 0.05",
            "shortfirst_rrt_cutoff_seconds{band=\"5\"} 1",
            "shortfirst_srrt_band_changes_total{cause=\"start\"} 1",
            "shortfirst_srrt_band_changes_total{cause=\"drain\"} 2",
            "shortfirst_srrt_band_changes_total{cause=\"tcp_state\"} 0",
            "shortfirst_srrt_estimate_ratio_bucket{le=\"0.125\"} 1",
            "shortfirst_srrt_estimate_ratio_bucket{le=\"0.8\"} 1",
            "shortfirst_srrt_estimate_ratio_bucket{le=\"1\"} 2",
            "shortfirst_srrt_estimate_ratio_bucket{le=\"8\"} 2",
            "shortfirst_srrt_estimate_ratio_bucket{le=\"+Inf\"} 3",
            "shortfirst_srrt_estimate_ratio_count 3",
            "shortfirst_srrt_estimated_seconds_sum 1.05",
            "shortfirst_srrt_measured_seconds_sum 0.6",
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
        }
    }
}

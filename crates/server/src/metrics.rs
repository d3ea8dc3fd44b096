//! Prometheus metrics: requests, bytes and open connections per band, a
//! response-time histogram per band, status classes, and the cutoffs in force.
//!
//! Plain atomics with fixed-size arrays (one slot per possible band, 8), so
//! recording is lock-free and memory is constant whatever the traffic.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use shortfirst_core::bands::{Band, Cutoffs, MAX_DATA_BANDS};
use tokio::time::Instant;

use crate::limit::{PauseClock, PauseSnapshot};

/// Slots: band 0 (set-up / between responses) and every data band.
pub const BAND_SLOTS: usize = MAX_DATA_BANDS + 1;

/// Upper bounds of the response-time histogram buckets, in seconds.
pub const BUCKETS_S: [f64; 14] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

fn zeros<T: Default, const N: usize>() -> [T; N] {
    std::array::from_fn(|_| T::default())
}

pub struct Metrics {
    requests: [AtomicU64; BAND_SLOTS],
    bytes: [AtomicU64; BAND_SLOTS],
    open: [AtomicI64; BAND_SLOTS],
    /// Per band, per bucket (non-cumulative); the last slot is above every bound.
    histogram: [[AtomicU64; BUCKETS_S.len() + 1]; BAND_SLOTS],
    histogram_sum_us: [AtomicU64; BAND_SLOTS],
    /// Responses by status class: index 1 = 1xx … 5 = 5xx.
    status_classes: [AtomicU64; 6],
    pub connections_accepted: AtomicU64,
    /// Connections answered 503 and closed because `max-connections` was reached.
    pub connections_refused: AtomicU64,
    /// `at-max-connections = wait`: the accept loop's pauses at the limit. A lock
    /// taken once per pause, resume and scrape, so the time read is consistent.
    accept_pauses: Mutex<PauseClock>,
    pub priority_changes: AtomicU64,
    /// `srrt`'s band changes by cause, `TCP_INFO` reads, estimate error.
    pub srrt: crate::srrt::SrrtMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: zeros(),
            bytes: zeros(),
            open: zeros(),
            histogram: std::array::from_fn(|_| zeros()),
            histogram_sum_us: zeros(),
            status_classes: zeros(),
            connections_accepted: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
            accept_pauses: Mutex::new(PauseClock::default()),
            priority_changes: AtomicU64::new(0),
            srrt: crate::srrt::SrrtMetrics::default(),
        }
    }
}

fn slot(band: Band) -> usize {
    usize::from(band.index()).min(BAND_SLOTS - 1)
}

impl Metrics {
    /// A completed response that started in `band`.
    pub fn response(&self, band: Band, status_code: u16, elapsed: Duration) {
        let b = slot(band);
        self.requests[b].fetch_add(1, Relaxed);
        self.status_classes[usize::from(status_code / 100).min(5)].fetch_add(1, Relaxed);
        let secs = elapsed.as_secs_f64();
        let bucket = BUCKETS_S.partition_point(|&bound| bound < secs);
        self.histogram[b][bucket].fetch_add(1, Relaxed);
        self.histogram_sum_us[b].fetch_add(elapsed.as_micros() as u64, Relaxed);
    }

    /// Bytes written while the socket was in `band`.
    pub fn bytes(&self, band: Band, n: u64) {
        self.bytes[slot(band)].fetch_add(n, Relaxed);
    }

    pub fn connection_opened(&self) {
        self.open[0].fetch_add(1, Relaxed);
    }

    pub fn connection_moved(&self, from: Band, to: Band) {
        if from != to {
            self.open[slot(from)].fetch_sub(1, Relaxed);
            self.open[slot(to)].fetch_add(1, Relaxed);
        }
    }

    pub fn connection_closed(&self, band: Band) {
        self.open[slot(band)].fetch_sub(1, Relaxed);
    }

    /// The accept loop stopped accepting at `now` (the limit is reached).
    pub fn accept_paused(&self, now: Instant) {
        self.pauses().pause(now);
    }

    /// The accept loop accepts again at `now`.
    pub fn accept_resumed(&self, now: Instant) {
        self.pauses().resume(now);
    }

    pub fn accept_pauses(&self, now: Instant) -> PauseSnapshot {
        self.pauses().snapshot(now)
    }

    fn pauses(&self) -> std::sync::MutexGuard<'_, PauseClock> {
        // The clock is plain counters: a panic elsewhere cannot leave it inconsistent.
        self.accept_pauses.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn open_connections(&self) -> i64 {
        self.open.iter().map(|o| o.load(Relaxed)).sum()
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self, out: &mut String, cutoffs: &Cutoffs, policy: &str, access_log_dropped: u64) {
        self.render_bands(out, cutoffs.data_bands());
        write_family(out, "shortfirst_responses_total", "counter", "Responses by status class.");
        for (class, n) in self.status_classes.iter().enumerate().skip(1) {
            let _ = writeln!(out, "shortfirst_responses_total{{code=\"{class}xx\"}} {}", n.load(Relaxed));
        }
        if policy == "srrt" {
            // The cutoffs are response times in µs under srrt.
            self.srrt.render(out, cutoffs);
        } else {
            render_size_cutoffs(out, cutoffs, policy);
        }
        let counters = [
            ("shortfirst_connections_accepted_total", "Connections accepted.", &self.connections_accepted),
            (
                "shortfirst_connections_refused_total",
                "Connections answered 503 at the max-connections limit.",
                &self.connections_refused,
            ),
            (
                "shortfirst_priority_changes_total",
                "setsockopt(SO_PRIORITY) calls on connections.",
                &self.priority_changes,
            ),
        ];
        for (name, help, value) in counters {
            write_metric(out, name, "counter", help, value.load(Relaxed));
        }
        self.render_accept_pauses(out, Instant::now());
        write_metric(
            out,
            "shortfirst_access_log_dropped_total",
            "counter",
            "Access log lines dropped because the log buffer was full.",
            access_log_dropped,
        );
    }

    /// Per-band families: completions, bytes, open connections and response times.
    fn render_bands(&self, out: &mut String, bands: usize) {
        let data = 1..=bands;
        write_family(out, "shortfirst_requests_total", "counter", "Responses completed, by the band they started in.");
        for b in data.clone() {
            let _ = writeln!(out, "shortfirst_requests_total{{band=\"{b}\"}} {}", self.requests[b].load(Relaxed));
        }
        write_family(
            out,
            "shortfirst_sent_bytes_total",
            "counter",
            "Bytes written (headers and bodies), by the band the socket was in.",
        );
        for b in data.clone() {
            let _ = writeln!(out, "shortfirst_sent_bytes_total{{band=\"{b}\"}} {}", self.bytes[b].load(Relaxed));
        }
        write_family(
            out,
            "shortfirst_open_connections",
            "gauge",
            "Open connections by the band of their response in flight; band 0: between responses.",
        );
        for b in 0..=bands {
            let _ = writeln!(out, "shortfirst_open_connections{{band=\"{b}\"}} {}", self.open[b].load(Relaxed));
        }
        write_family(
            out,
            "shortfirst_response_seconds",
            "histogram",
            "Time from the request's first byte to the response's last byte written.",
        );
        for b in data {
            let mut cumulative = 0;
            for (i, bound) in BUCKETS_S.iter().enumerate() {
                cumulative += self.histogram[b][i].load(Relaxed);
                let _ = writeln!(out, "shortfirst_response_seconds_bucket{{band=\"{b}\",le=\"{bound}\"}} {cumulative}");
            }
            cumulative += self.histogram[b][BUCKETS_S.len()].load(Relaxed);
            let _ = writeln!(out, "shortfirst_response_seconds_bucket{{band=\"{b}\",le=\"+Inf\"}} {cumulative}");
            let sum = self.histogram_sum_us[b].load(Relaxed) as f64 / 1e6;
            let _ = writeln!(out, "shortfirst_response_seconds_sum{{band=\"{b}\"}} {sum}");
            let _ = writeln!(out, "shortfirst_response_seconds_count{{band=\"{b}\"}} {cumulative}");
        }
    }
}

/// The size cutoffs in force (every policy but srrt, whose cutoffs are response times).
fn render_size_cutoffs(out: &mut String, cutoffs: &Cutoffs, policy: &str) {
    write_family(
        out,
        "shortfirst_cutoff_bytes",
        "gauge",
        "Size cutoffs in force: band b holds remaining sizes up to cutoff b.",
    );
    for (i, c) in cutoffs.as_slice().iter().enumerate() {
        let _ = writeln!(out, "shortfirst_cutoff_bytes{{band=\"{}\",policy=\"{policy}\"}} {c}", i + 1);
    }
}

impl Metrics {
    fn render_accept_pauses(&self, out: &mut String, now: Instant) {
        let p = self.accept_pauses(now);
        write_metric(
            out,
            "shortfirst_accept_paused",
            "gauge",
            "1 while the accept loop waits at max-connections (at-max-connections wait): new connections wait in \
             the kernel's accept queue.",
            u8::from(p.paused),
        );
        write_metric(
            out,
            "shortfirst_accept_pauses_total",
            "counter",
            "Times the accept loop stopped accepting at max-connections.",
            p.pauses,
        );
        write_metric(
            out,
            "shortfirst_accept_paused_seconds_total",
            "counter",
            "Time the accept loop spent not accepting at max-connections, the pause in progress included.",
            p.paused_total.as_secs_f64(),
        );
    }
}

/// Writes the `# HELP` and `# TYPE` lines of the metric family `name` (`kind`:
/// `counter`, `gauge` or `histogram`); its samples follow.
pub(crate) fn write_family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Writes a metric family of one unlabelled sample: `name value`.
pub(crate) fn write_metric(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    write_family(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

/// Writes the cumulative `_bucket` lines of an unlabelled histogram `name`
/// (one per bound, then `+Inf`) from per-bucket counts (`counts` has one more
/// entry than `bounds`: the overflow), and returns the total count.
pub(crate) fn write_buckets(out: &mut String, name: &str, bounds: &[f64], counts: &[AtomicU64]) -> u64 {
    debug_assert_eq!(counts.len(), bounds.len() + 1, "{name}: one count per bound and the overflow");
    let mut cumulative = 0;
    for (bound, count) in bounds.iter().zip(counts) {
        cumulative += count.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    cumulative += counts[bounds.len()].load(Relaxed);
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
    cumulative
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative_and_counts_match() {
        let m = Metrics::default();
        let b2 = Band::new(2).unwrap();
        m.response(b2, 200, Duration::from_micros(300));
        m.response(b2, 404, Duration::from_millis(3));
        m.response(b2, 200, Duration::from_secs(60));
        m.bytes(b2, 1234);
        m.connection_opened();
        m.connection_moved(Band::SETUP, b2);
        let mut out = String::new();
        m.render(&mut out, &Cutoffs::paper(), "srpt", 0);
        for line in [
            "shortfirst_requests_total{band=\"2\"} 3",
            "shortfirst_sent_bytes_total{band=\"2\"} 1234",
            "shortfirst_open_connections{band=\"2\"} 1",
            "shortfirst_open_connections{band=\"0\"} 0",
            "shortfirst_response_seconds_bucket{band=\"2\",le=\"0.0005\"} 1",
            "shortfirst_response_seconds_bucket{band=\"2\",le=\"0.005\"} 2",
            "shortfirst_response_seconds_bucket{band=\"2\",le=\"10\"} 2",
            "shortfirst_response_seconds_bucket{band=\"2\",le=\"+Inf\"} 3",
            "shortfirst_response_seconds_count{band=\"2\"} 3",
            "shortfirst_responses_total{code=\"4xx\"} 1",
            "shortfirst_cutoff_bytes{band=\"5\",policy=\"srpt\"} 50000",
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
        }
    }

    #[test]
    fn accept_pauses_are_rendered_with_the_pause_in_progress() {
        let m = Metrics::default();
        let t0 = Instant::now();
        m.accept_paused(t0);
        m.accept_resumed(t0 + Duration::from_millis(250));
        m.accept_paused(t0 + Duration::from_secs(1));
        let mut out = String::new();
        m.render_accept_pauses(&mut out, t0 + Duration::from_millis(1_500));
        for line in [
            "shortfirst_accept_paused 1",
            "shortfirst_accept_pauses_total 2",
            "shortfirst_accept_paused_seconds_total 0.75",
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
        }
        let mut full = String::new();
        m.render(&mut full, &Cutoffs::paper(), "srpt", 0);
        assert!(full.contains("# TYPE shortfirst_accept_paused_seconds_total counter"), "{full}");
    }
}

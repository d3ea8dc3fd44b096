//! Prometheus metrics for the gatekeeper, rendered in the text exposition format.
//!
//! Per type (label `type`, bounded by the classifier's type limit): estimated cost,
//! requests by outcome, queue-wait and upstream-time histograms, and the spread of the
//! type's measured costs (a type that mixes cheap and costly requests shows a large
//! spread: its rule is too coarse). Global: load, capacity, queue length, in-flight,
//! admitted and rejected counts, requests put in the overflow type because the type table
//! was full, open client and upstream connections (a count that does not return to its
//! baseline once traffic stops is a leak). Counters are atomics updated on
//! the request path without locks; the registry is fixed-size, so memory is bounded.

use std::fmt::{Display, Write as _};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// A count of open things (connections): [`OpenCount::open`] counts one until its guard is
/// dropped, so every path out of a connection's task, a panic's unwinding included, counts
/// it closed.
#[derive(Debug, Default, Clone)]
pub struct OpenCount(Arc<AtomicUsize>);

/// Counts one in its [`OpenCount`] while it lives.
#[derive(Debug)]
pub struct OpenGuard(Arc<AtomicUsize>);

impl OpenCount {
    pub fn open(&self) -> OpenGuard {
        self.0.fetch_add(1, Relaxed);
        OpenGuard(self.0.clone())
    }

    pub fn get(&self) -> usize {
        self.0.load(Relaxed)
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// Histogram bucket upper bounds in seconds (Prometheus `le`).
pub const BUCKETS_S: [f64; 18] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS_S.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn observe_us(&self, us: u64) {
        let s = us as f64 / 1e6;
        if let Some(i) = BUCKETS_S.iter().position(|&b| s <= b) {
            self.buckets[i].fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cum = 0;
        for (i, b) in BUCKETS_S.iter().enumerate() {
            cum += self.buckets[i].load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b}\"}} {cum}");
        }
        let count = self.count.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum_us.load(Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
    }
}

/// How a request through the gatekeeper ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyOutcome {
    /// Response fully relayed.
    Ok,
    /// Upstream refused/reset/broke: 502.
    UpstreamError,
    /// Upstream too slow: 504.
    Timeout,
    /// Queue full or waited too long: 503.
    Rejected,
    /// Client went away (while queued or while the response streamed).
    ClientGone,
}

impl ProxyOutcome {
    pub const ALL: [ProxyOutcome; 5] = [
        ProxyOutcome::Ok,
        ProxyOutcome::UpstreamError,
        ProxyOutcome::Timeout,
        ProxyOutcome::Rejected,
        ProxyOutcome::ClientGone,
    ];
    pub fn label(self) -> &'static str {
        match self {
            ProxyOutcome::Ok => "ok",
            ProxyOutcome::UpstreamError => "upstream_error",
            ProxyOutcome::Timeout => "timeout",
            ProxyOutcome::Rejected => "rejected",
            ProxyOutcome::ClientGone => "client_gone",
        }
    }
}

/// Mean and variance of a type's measured costs (Welford's update, numerically stable).
#[derive(Debug, Default, Clone, Copy)]
pub struct Spread {
    pub count: u64,
    pub mean_us: f64,
    m2: f64,
}

impl Spread {
    pub fn observe_us(&mut self, us: u64) {
        let x = us as f64;
        self.count += 1;
        let d = x - self.mean_us;
        self.mean_us += d / self.count as f64;
        self.m2 += d * (x - self.mean_us);
    }

    /// Standard deviation, µs (0 below two samples).
    pub fn stddev_us(&self) -> f64 {
        if self.count < 2 {
            return 0.0;
        }
        (self.m2 / (self.count - 1) as f64).sqrt()
    }

    /// Standard deviation over mean: about 0 for a type of one cost; above 1 for a type
    /// that mixes costs an order of magnitude apart.
    pub fn ratio(&self) -> f64 {
        if self.mean_us > 0.0 {
            self.stddev_us() / self.mean_us
        } else {
            0.0
        }
    }
}

#[derive(Debug, Default)]
pub struct TypeMetrics {
    outcomes: [AtomicU64; 5],
    /// Requests admitted as probes: a type's first sample or a re-sampling one
    /// (core::admission, "First sample", "Re-sampling"; ahead of the order only under sjf).
    pub probes: AtomicU64,
    pub queue_wait: Histogram,
    pub upstream: Histogram,
    /// The spread of the upstream times of the type's successful requests.
    pub spread: Mutex<Spread>,
}

impl TypeMetrics {
    /// A successful request's upstream time: the histogram and the spread.
    pub fn observe_upstream_us(&self, us: u64) {
        self.upstream.observe_us(us);
        self.spread.lock().unwrap_or_else(|p| p.into_inner()).observe_us(us);
    }

    pub fn spread(&self) -> Spread {
        *self.spread.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn count(&self, o: ProxyOutcome) {
        self.outcomes[o as usize].fetch_add(1, Relaxed);
    }
    pub fn outcome_count(&self, o: ProxyOutcome) -> u64 {
        self.outcomes[o as usize].load(Relaxed)
    }
}

#[derive(Debug)]
pub struct Metrics {
    pub types: Vec<TypeMetrics>,
    pub admitted: AtomicU64,
    pub rejected_queue_full: AtomicU64,
    pub rejected_queue_wait: AtomicU64,
    /// Refused because they would not finish before their client gives up.
    pub rejected_would_not_finish: AtomicU64,
    pub rejected_shutting_down: AtomicU64,
    pub cancelled_while_queued: AtomicU64,
    /// Requests put in the overflow type because the type table was full.
    pub type_table_overflow: AtomicU64,
    /// Client connections open now.
    pub client_connections: OpenCount,
    /// Client connections answered 503 and closed at once because `max_connections` were open.
    pub connections_refused: AtomicU64,
}

/// Values read from the gate and estimator at scrape time.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub load_us: u64,
    pub capacity_us: u64,
    pub queue_len: usize,
    /// How long the longest-waiting request has waited (PgBouncer's `maxwait`); 0 when
    /// nothing waits.
    pub oldest_wait_us: u64,
    pub in_flight: usize,
    /// The charge of the waiting request the policy looks at first (`Gate::head_cost_us`).
    pub head_cost_us: Option<u64>,
    /// (type index, name, estimated cost µs, successful samples).
    pub types: Vec<(usize, String, u64, u64)>,
    /// Waiting requests per type index.
    pub queued_by_type: Vec<usize>,
    /// Admitted, unfinished requests per type index.
    pub in_flight_by_type: Vec<usize>,
    /// The clients' patience per type index, when known (`core::admission::patience`).
    pub patience_us: Vec<Option<u64>>,
    /// Clients that left before their response head, queued or in flight.
    pub give_ups: u64,
    /// Client connections open.
    pub client_connections: usize,
    /// Upstream connections open (in use or idle), and of them idle in the pool.
    pub upstream_connections: usize,
    pub upstream_idle: usize,
    /// Requests sent once more on a new upstream connection (the keep-alive race).
    pub upstream_retries: u64,
}

/// A snapshot's row of a type: (type index, name, estimated cost µs, successful samples).
type TypeRow = (usize, String, u64, u64);

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

impl Metrics {
    pub fn new(max_types: usize) -> Self {
        Metrics {
            types: (0..max_types).map(|_| TypeMetrics::default()).collect(),
            admitted: AtomicU64::new(0),
            rejected_queue_full: AtomicU64::new(0),
            rejected_queue_wait: AtomicU64::new(0),
            rejected_would_not_finish: AtomicU64::new(0),
            rejected_shutting_down: AtomicU64::new(0),
            cancelled_while_queued: AtomicU64::new(0),
            type_table_overflow: AtomicU64::new(0),
            client_connections: OpenCount::default(),
            connections_refused: AtomicU64::new(0),
        }
    }

    /// The whole exposition, families in a fixed order: the gate's state, connections,
    /// admission counts, then the per-type families.
    pub fn render(&self, snap: &Snapshot) -> String {
        let mut o = String::with_capacity(4096 + snap.types.len() * 4096);
        render_gate(&mut o, snap);
        self.render_connections(&mut o, snap);
        self.render_admissions(&mut o, snap);
        self.render_type_costs(&mut o, &snap.types);
        self.render_type_patience(&mut o, snap);
        self.render_type_counts(&mut o, snap);
        self.render_type_histograms(&mut o, &snap.types);
        o
    }

    /// Client and upstream connections: open, refused, idle, requests retried.
    fn render_connections(&self, o: &mut String, snap: &Snapshot) {
        single(o, "gatekeeper_client_connections", "Client connections open.", "gauge", snap.client_connections as f64);
        single(
            o,
            "gatekeeper_connections_refused_total",
            "Client connections answered 503 and closed at once because --max-connections were open.",
            "counter",
            self.connections_refused.load(Relaxed) as f64,
        );
        single(
            o,
            "gatekeeper_upstream_connections",
            "Upstream connections open, in use or idle.",
            "gauge",
            snap.upstream_connections as f64,
        );
        single(
            o,
            "gatekeeper_upstream_idle_connections",
            "Upstream connections idle in the pool, kept for reuse.",
            "gauge",
            snap.upstream_idle as f64,
        );
        single(
            o,
            "gatekeeper_upstream_retries_total",
            "Requests sent once more on a new upstream connection: the reused one was closing, or closed before answering a safe, bodiless request.",
            "counter",
            snap.upstream_retries as f64,
        );
    }

    /// The queue's head, then requests admitted, rejected, cancelled and put in the overflow type.
    fn render_admissions(&self, o: &mut String, snap: &Snapshot) {
        single(
            o,
            "gatekeeper_queue_head_cost_seconds",
            "Charge of the waiting request the policy looks at first (fifo: oldest; sjf: a probe, else the cheapest; sjf-aging: the cheapest); 0 when none waits.",
            "gauge",
            snap.head_cost_us.unwrap_or(0) as f64 / 1e6,
        );
        single(
            o,
            "gatekeeper_admitted_total",
            "Requests admitted to the upstream.",
            "counter",
            self.admitted.load(Relaxed) as f64,
        );
        family(o, "gatekeeper_rejected_total", "Requests answered 503 by the gatekeeper.", "counter");
        for (reason, n) in [
            ("queue_full", &self.rejected_queue_full),
            ("queue_wait", &self.rejected_queue_wait),
            ("would_not_finish", &self.rejected_would_not_finish),
            ("shutting_down", &self.rejected_shutting_down),
        ] {
            let _ = writeln!(o, "gatekeeper_rejected_total{{reason=\"{reason}\"}} {}", n.load(Relaxed));
        }
        single(
            o,
            "gatekeeper_cancelled_while_queued_total",
            "Requests whose client went away while they waited.",
            "counter",
            self.cancelled_while_queued.load(Relaxed) as f64,
        );
        single(
            o,
            "gatekeeper_client_give_ups_total",
            "Clients that left before their response head, while queued or while the upstream worked: what the patience is learned from.",
            "counter",
            snap.give_ups as f64,
        );
        single(
            o,
            "gatekeeper_type_table_overflow_total",
            "Requests put in the type (other) because the type table (--max-types) was full: raise it or coarsen --classify.",
            "counter",
            self.type_table_overflow.load(Relaxed) as f64,
        );
    }

    /// Per type: the spread of its measured costs and its estimate.
    fn render_type_costs(&self, o: &mut String, types: &[TypeRow]) {
        per_type(
            o,
            types,
            "gatekeeper_type_cost_spread_ratio",
            "Standard deviation over mean of a type's measured upstream times: near 0 for a type of one cost, above 1 when it mixes costs (refine --classify).",
            "gauge",
            |&(i, ..)| self.types[i].spread().ratio(),
        );
        per_type(
            o,
            types,
            "gatekeeper_type_cost_stddev_seconds",
            "Standard deviation of a type's measured upstream times.",
            "gauge",
            |&(i, ..)| self.types[i].spread().stddev_us() / 1e6,
        );
        per_type(
            o,
            types,
            "gatekeeper_type_estimated_cost_seconds",
            "Current cost estimate of a request type.",
            "gauge",
            |&(_, _, est_us, _)| est_us as f64 / 1e6,
        );
    }

    /// Per type: how long its clients are taken to wait (absent while unknown).
    fn render_type_patience(&self, o: &mut String, snap: &Snapshot) {
        let known: Vec<TypeRow> = snap
            .types
            .iter()
            .filter(|(i, ..)| snap.patience_us.get(*i).copied().flatten().is_some())
            .cloned()
            .collect();
        per_type(
            o,
            &known,
            "gatekeeper_type_patience_seconds",
            "How long the clients of a request type wait before they give up, learned from their give-ups (or --patience); requests that would finish later are refused. Absent while unknown.",
            "gauge",
            |&(i, ..)| snap.patience_us[i].unwrap_or(0) as f64 / 1e6,
        );
    }

    /// Per type: requests waiting and in flight, samples, probes, and requests by outcome.
    fn render_type_counts(&self, o: &mut String, snap: &Snapshot) {
        let types = &snap.types;
        for (name, help, counts) in [
            ("gatekeeper_type_queued", "Requests of a type waiting for admission.", &snap.queued_by_type),
            ("gatekeeper_type_in_flight", "Admitted, unfinished requests of a type.", &snap.in_flight_by_type),
        ] {
            per_type(o, types, name, help, "gauge", |&(i, ..)| counts.get(i).copied().unwrap_or(0));
        }
        per_type(
            o,
            types,
            "gatekeeper_type_cost_samples_total",
            "Successful measurements behind the estimate.",
            "counter",
            |&(.., samples)| samples,
        );
        per_type(
            o,
            types,
            "gatekeeper_type_probes_total",
            "Requests admitted as probes: their type had no sample yet, or had gone resample_after without one (under sjf they go ahead of the order).",
            "counter",
            |&(i, ..)| self.types[i].probes.load(Relaxed),
        );
        family(o, "gatekeeper_type_requests_total", "Requests by type and outcome.", "counter");
        for (i, name, _, _) in types {
            for out in ProxyOutcome::ALL {
                let _ = writeln!(
                    o,
                    "gatekeeper_type_requests_total{{type=\"{}\",outcome=\"{}\"}} {}",
                    escape(name),
                    out.label(),
                    self.types[*i].outcome_count(out)
                );
            }
        }
    }

    /// Per type: histograms of the queue wait and of the upstream time.
    fn render_type_histograms(&self, o: &mut String, types: &[TypeRow]) {
        let queue_wait: fn(&TypeMetrics) -> &Histogram = |t| &t.queue_wait;
        let upstream: fn(&TypeMetrics) -> &Histogram = |t| &t.upstream;
        for (name, help, histogram) in [
            ("gatekeeper_type_queue_wait_seconds", "Time from arrival to admission.", queue_wait),
            ("gatekeeper_type_upstream_seconds", "Time from admission to the response's last byte.", upstream),
        ] {
            family(o, name, help, "histogram");
            for (i, type_name, _, _) in types {
                histogram(&self.types[*i]).render(o, name, &format!("type=\"{}\"", escape(type_name)));
            }
        }
    }
}

/// The gate's state: load against capacity, requests waiting and in flight.
fn render_gate(o: &mut String, snap: &Snapshot) {
    single(
        o,
        "gatekeeper_load_seconds",
        "Sum of the estimated costs of admitted, unfinished requests.",
        "gauge",
        snap.load_us as f64 / 1e6,
    );
    single(
        o,
        "gatekeeper_capacity_seconds",
        "Admission capacity in cost units (seconds of expected service time).",
        "gauge",
        snap.capacity_us as f64 / 1e6,
    );
    single(o, "gatekeeper_queue_length", "Requests waiting for admission.", "gauge", snap.queue_len as f64);
    single(
        o,
        "gatekeeper_oldest_wait_seconds",
        "How long the longest-waiting request has waited for admission (0 when none waits).",
        "gauge",
        snap.oldest_wait_us as f64 / 1e6,
    );
    single(o, "gatekeeper_in_flight", "Admitted, unfinished requests.", "gauge", snap.in_flight as f64);
}

/// Writes the `# HELP` and `# TYPE` lines that open a metric family.
pub(crate) fn family(o: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Writes a family of one unlabelled sample.
fn single(o: &mut String, name: &str, help: &str, kind: &str, value: f64) {
    family(o, name, help, kind);
    let _ = writeln!(o, "{name} {value}");
}

/// Writes a family of one sample per type, labelled with the type's name; `value` reads
/// a type's sample from its row.
fn per_type<V: Display>(
    o: &mut String,
    types: &[TypeRow],
    name: &str,
    help: &str,
    kind: &str,
    value: impl Fn(&TypeRow) -> V,
) {
    family(o, name, help, kind);
    for row in types {
        let _ = writeln!(o, "{name}{{type=\"{}\"}} {}", escape(&row.1), value(row));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        for us in [50, 900, 1_000, 2_000_000, 100_000_000] {
            h.observe_us(us);
        }
        let mut s = String::new();
        h.render(&mut s, "x", "type=\"a\"");
        assert!(s.contains("x_bucket{type=\"a\",le=\"0.0001\"} 1\n"), "{s}");
        assert!(s.contains("x_bucket{type=\"a\",le=\"0.001\"} 3\n"), "{s}");
        assert!(s.contains("x_bucket{type=\"a\",le=\"2.5\"} 4\n"), "{s}");
        assert!(s.contains("x_bucket{type=\"a\",le=\"60\"} 4\n"), "{s}");
        assert!(s.contains("x_bucket{type=\"a\",le=\"+Inf\"} 5\n"), "{s}");
        assert!(s.contains("x_count{type=\"a\"} 5\n"), "{s}");
    }

    #[test]
    fn spread_shows_a_type_that_mixes_costs() {
        let one = TypeMetrics::default();
        let mixed = TypeMetrics::default();
        for i in 0..100 {
            one.observe_upstream_us(10_000 + i % 3);
            mixed.observe_upstream_us(if i % 2 == 0 { 4_000 } else { 234_000 });
        }
        assert!(one.spread().ratio() < 0.01, "{:?}", one.spread());
        assert!(mixed.spread().ratio() > 0.9, "{:?}", mixed.spread());
        let m = Metrics::new(2);
        m.types[0].observe_upstream_us(4_000);
        m.types[0].observe_upstream_us(234_000);
        m.type_table_overflow.fetch_add(3, Relaxed);
        let snap = Snapshot {
            load_us: 0,
            capacity_us: 1,
            queue_len: 0,
            oldest_wait_us: 0,
            in_flight: 0,
            head_cost_us: None,
            types: vec![(0, "GET /s".into(), 1, 2), (1, "(other)".into(), 1, 0)],
            queued_by_type: vec![0, 0],
            in_flight_by_type: vec![0, 0],
            patience_us: vec![None, None],
            give_ups: 0,
            client_connections: 0,
            upstream_connections: 0,
            upstream_idle: 0,
            upstream_retries: 0,
        };
        let s = m.render(&snap);
        assert!(s.contains("gatekeeper_type_table_overflow_total 3\n"), "{s}");
        let ratio: f64 = s
            .lines()
            .find_map(|l| l.strip_prefix("gatekeeper_type_cost_spread_ratio{type=\"GET /s\"} "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(ratio > 1.0, "{ratio}");
    }

    #[test]
    fn render_escapes_labels_and_lists_globals() {
        let m = Metrics::new(2);
        m.types[0].count(ProxyOutcome::Ok);
        m.types[1].probes.fetch_add(2, Relaxed);
        let snap = Snapshot {
            load_us: 1_500,
            capacity_us: 20_000,
            queue_len: 3,
            oldest_wait_us: 2_500_000,
            in_flight: 1,
            head_cost_us: Some(2_000),
            types: vec![(0, "GET /a\"b".into(), 2_000, 7), (1, "(other)".into(), 10_000, 0)],
            queued_by_type: vec![3, 0],
            in_flight_by_type: vec![0, 1],
            patience_us: vec![Some(20_000_000), None],
            give_ups: 9,
            client_connections: 4,
            upstream_connections: 2,
            upstream_idle: 1,
            upstream_retries: 5,
        };
        let s = m.render(&snap);
        assert!(s.contains("gatekeeper_load_seconds 0.0015\n"));
        assert!(s.contains("gatekeeper_capacity_seconds 0.02\n"));
        assert!(s.contains("gatekeeper_queue_length 3\n"));
        assert!(s.contains("gatekeeper_oldest_wait_seconds 2.5\n"), "{s}");
        assert!(s.contains("gatekeeper_client_connections 4\n"), "{s}");
        assert!(s.contains("gatekeeper_upstream_connections 2\n"), "{s}");
        assert!(s.contains("gatekeeper_upstream_idle_connections 1\n"), "{s}");
        assert!(s.contains("gatekeeper_connections_refused_total 0\n"), "{s}");
        assert!(s.contains("gatekeeper_upstream_retries_total 5\n"), "{s}");
        assert!(s.contains("gatekeeper_queue_head_cost_seconds 0.002\n"), "{s}");
        assert!(s.contains("gatekeeper_type_queued{type=\"GET /a\\\"b\"} 3\n"), "{s}");
        assert!(s.contains("gatekeeper_type_in_flight{type=\"(other)\"} 1\n"), "{s}");
        assert!(s.contains("gatekeeper_type_requests_total{type=\"GET /a\\\"b\",outcome=\"ok\"} 1\n"), "{s}");
        assert!(s.contains("gatekeeper_type_estimated_cost_seconds{type=\"(other)\"} 0.01\n"));
        assert!(s.contains("gatekeeper_type_probes_total{type=\"(other)\"} 2\n"), "{s}");
        assert!(s.contains("gatekeeper_type_probes_total{type=\"GET /a\\\"b\"} 0\n"), "{s}");
    }
}

//! Every group's two lines behind one classifier, and the counters the driver
//! reports. Still pure: packets (bytes + a handle) and times in, decisions out.

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::classify::{Class, Classifier, Direction};
use crate::config::Config;
use crate::line::{DelayLine, DropCause, Dropped, Released};

/// Lateness is recorded in ns up to this bound (larger values are clamped).
const LATENESS_MAX_NS: u64 = 60_000_000_000;

/// What happened to one packet on arrival.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict<T> {
    /// Held in `line` until `release_ns`.
    Queued { line: usize, release_ns: u64 },
    /// Dropped by `line`, counted there; the handle comes back.
    Dropped { line: usize, dropped: Dropped<T> },
    /// Belongs to no group (or is not IPv4): to be forwarded now, counted.
    Forward(T),
}

/// Packets and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub packets: u64,
    pub bytes: u64,
}

impl Tally {
    fn add(&mut self, bytes: usize) {
        self.packets += 1;
        self.bytes += bytes as u64;
    }
}

pub struct Emulator<T> {
    names: Vec<String>,
    classifier: Classifier,
    /// Group g's down line is `2g`, its up line `2g + 1`.
    lines: Vec<DelayLine<T>>,
    lateness_ns: Vec<Histogram<u64>>,
    /// Released by the line but the write failed (counted as a drop cause).
    write_failed: Vec<Tally>,
    pub unmatched: Tally,
    pub not_ipv4: Tally,
}

impl<T> Emulator<T> {
    pub fn new(config: &Config) -> Emulator<T> {
        let mut lines = Vec::with_capacity(config.groups.len() * 2);
        for (g, group) in config.groups.iter().enumerate() {
            // Streams 4g..4g+3: (loss, jitter) for down, then for up.
            lines.push(DelayLine::new(group.down.clone(), config.seed, 4 * g as u64));
            lines.push(DelayLine::new(group.up.clone(), config.seed, 4 * g as u64 + 2));
        }
        let hist = || Histogram::new_with_bounds(1, LATENESS_MAX_NS, 3).expect("valid histogram bounds");
        Emulator {
            names: config.groups.iter().map(|g| g.name.clone()).collect(),
            classifier: Classifier::new(&config.groups.iter().map(|g| g.subnets.clone()).collect::<Vec<_>>()),
            lateness_ns: (0..lines.len()).map(|_| hist()).collect(),
            write_failed: vec![Tally::default(); lines.len()],
            lines,
            unmatched: Tally::default(),
            not_ipv4: Tally::default(),
        }
    }

    pub fn line_index(group: usize, direction: Direction) -> usize {
        2 * group
            + match direction {
                Direction::Down => 0,
                Direction::Up => 1,
            }
    }

    /// Classifies `packet` (its bytes) and offers `payload` to its line.
    pub fn ingest(&mut self, now_ns: u64, packet: &[u8], payload: T) -> Verdict<T> {
        let (group, direction) = match self.classifier.classify(packet) {
            Class::Group { group, direction } => (group, direction),
            Class::Unmatched => {
                self.unmatched.add(packet.len());
                return Verdict::Forward(payload);
            }
            Class::NotIpv4 => {
                self.not_ipv4.add(packet.len());
                return Verdict::Forward(payload);
            }
        };
        let line = Self::line_index(group, direction);
        let size = u32::try_from(packet.len()).unwrap_or(u32::MAX);
        match self.lines[line].offer(now_ns, size, payload) {
            Ok(release_ns) => Verdict::Queued { line, release_ns },
            Err(dropped) => Verdict::Dropped { line, dropped },
        }
    }

    /// The earliest release time over all lines.
    pub fn next_release_ns(&self) -> Option<u64> {
        self.lines.iter().filter_map(|l| l.next_release_ns()).min()
    }

    /// The next due packet of any line (line by line; order across lines is free).
    pub fn pop_due(&mut self, now_ns: u64) -> Option<(usize, Released<T>)> {
        self.lines.iter_mut().enumerate().find_map(|(i, l)| l.pop_due(now_ns).map(|r| (i, r)))
    }

    /// The driver wrote a released packet `lateness_ns` after its release time.
    pub fn record_lateness(&mut self, line: usize, lateness_ns: u64) {
        self.lateness_ns[line].saturating_record(lateness_ns.clamp(1, LATENESS_MAX_NS));
    }

    /// The driver could not write a released packet.
    pub fn record_write_failed(&mut self, line: usize, size_bytes: u32) {
        self.write_failed[line].add(size_bytes as usize);
    }

    /// Takes every queued packet out (shutdown); they stay counted as queued
    /// in the report taken before.
    pub fn drain(&mut self) -> Vec<T> {
        self.lines.iter_mut().flat_map(|l| l.drain()).collect()
    }

    pub fn queued_packets(&self) -> u64 {
        self.lines.iter().map(|l| l.queued_packets() as u64).sum()
    }

    /// The counters as reported (see [`Report`]).
    pub fn report(&self) -> Report {
        let mut lines = Vec::with_capacity(self.lines.len());
        let mut totals = Totals::default();
        for (i, l) in self.lines.iter().enumerate() {
            let c = *l.counters();
            let h = &self.lateness_ns[i];
            let q = |x: f64| if h.is_empty() { 0.0 } else { h.value_at_quantile(x) as f64 / 1e3 };
            let r = LineReport {
                group: self.names[i / 2].clone(),
                direction: if i % 2 == 0 { Direction::Down } else { Direction::Up },
                delay_ms: l.params().delay_ns as f64 / 1e6,
                jitter_ms: l.params().jitter_ns as f64 / 1e6,
                loss: l.params().loss.mean(),
                rx_packets: c.rx_packets,
                rx_bytes: c.rx_bytes,
                tx_packets: c.tx_packets - self.write_failed[i].packets,
                tx_bytes: c.tx_bytes - self.write_failed[i].bytes,
                dropped: Drops {
                    loss: c.dropped_loss,
                    queue_packets: c.dropped_queue_packets,
                    queue_bytes: c.dropped_queue_bytes,
                    write_failed: self.write_failed[i].packets,
                },
                queued_packets: l.queued_packets() as u64,
                queued_bytes: l.queued_bytes(),
                max_queued_packets: c.max_queued_packets,
                max_queued_bytes: c.max_queued_bytes,
                measured_loss: if c.rx_packets == 0 { 0.0 } else { c.dropped_loss as f64 / c.rx_packets as f64 },
                lateness_us: Lateness { count: h.len(), p50: q(0.5), p99: q(0.99), max: h.max() as f64 / 1e3 },
            };
            totals.add(&r);
            lines.push(r);
        }
        Report { totals, unmatched: self.unmatched, not_ipv4: self.not_ipv4, lines }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Drops {
    pub loss: u64,
    /// The line held `queue_packets` already.
    pub queue_packets: u64,
    /// The line held `queue_bytes` already.
    pub queue_bytes: u64,
    /// Released, but the TUN write failed.
    pub write_failed: u64,
}

impl Drops {
    pub fn total(&self) -> u64 {
        self.loss + self.queue_packets + self.queue_bytes + self.write_failed
    }
    pub fn of(cause: DropCause) -> &'static str {
        match cause {
            DropCause::Loss => "loss",
            DropCause::QueuePackets => "queue_packets",
            DropCause::QueueBytes => "queue_bytes",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Lateness {
    pub count: u64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// One line's counters. Invariant: `rx_packets == tx_packets + dropped.total() + queued_packets`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LineReport {
    pub group: String,
    pub direction: Direction,
    pub delay_ms: f64,
    pub jitter_ms: f64,
    /// Configured long-run loss probability.
    pub loss: f64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub dropped: Drops,
    pub queued_packets: u64,
    pub queued_bytes: u64,
    pub max_queued_packets: u64,
    pub max_queued_bytes: u64,
    /// dropped.loss / rx_packets.
    pub measured_loss: f64,
    /// Actual write time minus scheduled release, microseconds.
    pub lateness_us: Lateness,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub dropped: Drops,
    pub queued_packets: u64,
}

impl Totals {
    fn add(&mut self, r: &LineReport) {
        self.rx_packets += r.rx_packets;
        self.tx_packets += r.tx_packets;
        self.dropped.loss += r.dropped.loss;
        self.dropped.queue_packets += r.dropped.queue_packets;
        self.dropped.queue_bytes += r.dropped.queue_bytes;
        self.dropped.write_failed += r.dropped.write_failed;
        self.queued_packets += r.queued_packets;
    }
}

/// Everything the emulator counted; the driver adds process figures around it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub totals: Totals,
    pub unmatched: Tally,
    pub not_ipv4: Tally,
    pub lines: Vec<LineReport>,
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn emulator() -> Emulator<u32> {
        let text = r#"
            seed = 3
            [[group]]
            name = "near"
            subnets = ["10.78.1.0/24"]
            rtt_ms = 40
            [[group]]
            name = "far"
            subnets = ["10.78.2.0/24"]
            rtt_ms = 200
            loss_down = 0.5
        "#;
        Emulator::new(&Config::parse(text, Path::new("t.toml")).unwrap())
    }

    fn packet(src: [u8; 4], dst: [u8; 4], len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p
    }

    const SERVER: [u8; 4] = [10, 77, 0, 1];

    #[test]
    fn routes_each_packet_to_its_group_and_direction() {
        let mut e = emulator();
        let ms = 1_000_000;
        assert_eq!(
            e.ingest(0, &packet([10, 78, 1, 10], SERVER, 60), 1),
            Verdict::Queued { line: 1, release_ns: 20 * ms }
        );
        assert_eq!(
            e.ingest(0, &packet(SERVER, [10, 78, 2, 10], 1500), 2),
            Verdict::Queued { line: 2, release_ns: 100 * ms }
        );
        assert_eq!(e.ingest(0, &packet(SERVER, [10, 99, 0, 1], 60), 3), Verdict::Forward(3));
        assert_eq!(e.ingest(0, &[0x60; 40], 4), Verdict::Forward(4));
        assert_eq!(e.next_release_ns(), Some(20 * ms));
        assert_eq!(e.pop_due(20 * ms).map(|(l, r)| (l, r.payload)), Some((1, 1)));
        assert!(e.pop_due(20 * ms).is_none());
        e.record_lateness(1, 30_000);
        let r = e.report();
        assert_eq!(r.unmatched, Tally { packets: 1, bytes: 60 });
        assert_eq!(r.not_ipv4.packets, 1);
        assert_eq!(r.lines[1].lateness_us.count, 1);
        assert!((r.lines[1].lateness_us.p50 - 30.0).abs() < 0.1);
        assert_eq!((r.totals.rx_packets, r.totals.tx_packets, r.totals.queued_packets), (2, 1, 1));
        assert_eq!(r.lines[2].queued_packets, 1);
    }

    #[test]
    fn every_packet_is_out_dropped_or_queued() {
        let mut e = emulator();
        for i in 0..10_000u32 {
            let now = u64::from(i) * 100_000;
            let p = if i % 2 == 0 { packet(SERVER, [10, 78, 2, 7], 1500) } else { packet([10, 78, 1, 7], SERVER, 52) };
            if let Verdict::Dropped { line, dropped } = e.ingest(now, &p, i) {
                assert_eq!((line, dropped.cause), (2, DropCause::Loss));
            }
            while let Some((line, r)) = e.pop_due(now) {
                if i % 1000 == 0 {
                    e.record_write_failed(line, r.size_bytes);
                }
            }
        }
        let r = e.report();
        for l in &r.lines {
            assert_eq!(l.rx_packets, l.tx_packets + l.dropped.total() + l.queued_packets, "{l:?}");
        }
        assert!((r.lines[2].measured_loss - 0.5).abs() < 0.03);
        assert_eq!(r.totals.rx_packets, r.totals.tx_packets + r.totals.dropped.total() + r.totals.queued_packets);
        assert_eq!(e.drain().len() as u64, r.totals.queued_packets);
        assert_eq!(e.queued_packets(), 0);
    }
}

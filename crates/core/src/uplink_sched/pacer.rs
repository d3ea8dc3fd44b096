//! The aggregate pacer: a token bucket on link time, just under the uplink's rate.
//!
//! The pacer keeps one clock, `link_free_at_ns`: the instant at which the link
//! will have sent every byte granted so far, at the paced rate. A grant is
//! allowed while that instant is less than `depth_ns` (the look-ahead) past now,
//! so at most `depth_ns` of link time is ever queued below the application, and
//! over any window of length `w` the granted bytes fit in `w + depth_ns` of link
//! time. An idle link banks at most `burst_bytes` of credit (0 by default: the
//! clock restarts at `now`): the clock may lag `now` by that much link time, so
//! after an idle spell a burst of that size plus the look-ahead may be granted
//! at once. Give it the burst of the token bucket that shapes the link below
//! (an HTB or TBF `burst`), whose idle credit lets such a burst out at line
//! rate; on a link that is its rate with no bucket, leave it 0.
//!
//! Bytes are costed as they leave on the wire: each segment of up to `mss_bytes`
//! of payload carries `overhead_bytes` of headers (IP, TCP with timestamps,
//! Ethernet: 66 by default), which a shaper below counts too.
//!
//! Releases are batched: one is due when a *release quantum* of link time fits
//! (`release_ns`, at least one segment), so each wake-up of the driver grants
//! that much at once rather than a segment at a time. The look-ahead is what
//! the driver's wake-up lateness may cost before the link idles: a wake-up up
//! to `depth − release quantum` late still grants before the booked link time
//! runs out. [`PacerConfig::with_defaults`] sizes both from that rule; the
//! look-ahead is also the longest a new short response waits behind bytes
//! already granted, so it should be no larger than the driver's timer needs.

/// The pacer's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PacerConfig {
    /// The uplink's rate, bits per second (on the wire, headers included).
    pub rate_bits_per_s: u64,
    /// The pacer runs at this fraction of the rate, so the queue forms in the
    /// application, not in a FIFO below it (0.5..=1).
    pub rate_fraction: f64,
    /// Link time that may be granted ahead of now.
    pub lookahead_ns: u64,
    /// Link time that must fit before a release is due (the release quantum).
    /// [`Pacer::new`] keeps it between one segment and the look-ahead less one
    /// segment; 0 means one segment.
    pub release_ns: u64,
    /// TCP payload per segment.
    pub mss_bytes: u32,
    /// Header bytes per segment on the wire.
    pub overhead_bytes: u32,
    /// Wire bytes a connection costs beyond its segments of payload: the
    /// packets that carry none (SYN-ACK, bare ACKs, FIN), charged once per
    /// connection by [`Pacer::charge_wire`]. 0 leaves them uncounted.
    pub control_bytes_per_connection: u32,
    /// Wire bytes of credit an idle link banks (the shaping token bucket's
    /// burst); 0: none.
    pub burst_bytes: u32,
}

/// The largest idle burst accepted, wire bytes (16 MiB).
pub const MAX_BURST_BYTES: u32 = 1 << 24;

/// The wire bytes of a connection's payload-free packets on Ethernet/IPv4: a
/// SYN-ACK with options (74) and about three bare segments (66 each: the
/// request's ACK, the FIN, the ACK of the peer's FIN), rounded down to what
/// fitted a 10 Mbit/s testbed's shaper counters (about 250 a connection).
/// Uncounted, they make a pacer at 0.98 of the rate offer the link ~1.03 of
/// it under short responses, and the queue grows below the application.
pub const CONTROL_BYTES_PER_CONNECTION: u32 = 250;

/// Wake-up lateness the default look-ahead absorbs without idling the link:
/// well above the p99 measured for the server's pacer thread (tens of
/// microseconds on an idle CPU, a few hundred on a contended one).
pub const LATENESS_ALLOWANCE_NS: u64 = 1_000_000;

/// Link time a release waits for on links where a segment takes less: fewer,
/// larger grants on fast links (a grant per segment cost the server 5× the CPU
/// at 100 Mbit/s), at the price of this much more look-ahead.
pub const RELEASE_QUANTUM_NS: u64 = 600_000;

impl PacerConfig {
    /// One full segment's link time at the paced rate.
    fn segment_ns(&self) -> u64 {
        let p = Pacer::new(&PacerConfig { lookahead_ns: 0, release_ns: 0, ..*self });
        p.wire_ns(p.mss_bytes)
    }

    /// The release quantum when none is given: [`RELEASE_QUANTUM_NS`] of link
    /// time, and at least one segment.
    pub fn default_release_ns(&self) -> u64 {
        self.segment_ns().max(RELEASE_QUANTUM_NS)
    }

    /// The look-ahead when none is given: the default release quantum (a
    /// release is due when it fits) plus `allowance_ns` of wake-up lateness,
    /// and at least two segments. Slow links get two segments; fast ones the
    /// quantum plus the allowance.
    pub fn default_lookahead_ns(&self, allowance_ns: u64) -> u64 {
        (self.default_release_ns() + allowance_ns).max(2 * self.segment_ns())
    }

    /// This configuration with the look-ahead given (`None`: the default for
    /// `allowance_ns`) and the release quantum that leaves `allowance_ns` of
    /// the look-ahead for lateness: the default quantum, less where a given
    /// look-ahead is too short for both (never below a segment).
    pub fn with_defaults(self, lookahead_ns: Option<u64>, allowance_ns: u64) -> PacerConfig {
        let lookahead_ns = lookahead_ns.unwrap_or_else(|| self.default_lookahead_ns(allowance_ns));
        let release_ns = self.default_release_ns().min(lookahead_ns.saturating_sub(allowance_ns));
        PacerConfig { lookahead_ns, release_ns: release_ns.max(self.segment_ns()), ..self }
    }
}

impl Default for PacerConfig {
    fn default() -> Self {
        PacerConfig {
            rate_bits_per_s: 10_000_000,
            rate_fraction: 0.98,
            lookahead_ns: 3_000_000,
            release_ns: 0,
            mss_bytes: 1448,
            overhead_bytes: 66,
            control_bytes_per_connection: 0,
            burst_bytes: 0,
        }
    }
}

/// A timer wake-up of the driver for a release: how late it came, and how much
/// of that lateness the link spent idle while the release waited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wake {
    pub late_ns: u64,
    /// Link time lost: from when the booked link time ran out (or the release
    /// was due, if later) to the wake-up.
    pub link_idle_ns: u64,
}

/// Token bucket on link time (see the module docs). Time is in nanoseconds
/// from any origin the driver chooses, never decreasing.
#[derive(Clone, Debug)]
pub struct Pacer {
    /// Paced rate, wire bits per second.
    paced_bits_per_s: f64,
    depth_ns: u64,
    /// Payload bytes whose link time is the release quantum.
    release_bytes: u64,
    mss_bytes: u64,
    overhead_bytes: u64,
    /// Link time of the idle burst: how far the clock may lag now.
    burst_ns: u64,
    link_free_at_ns: u64,
}

impl Pacer {
    /// A pacer; the look-ahead is at least two full segments of link time, so a
    /// segment can always be granted while the previous one is on the wire,
    /// and the release quantum at least one segment and at most the look-ahead
    /// less one segment.
    pub fn new(config: &PacerConfig) -> Pacer {
        let paced_bits_per_s = config.rate_bits_per_s as f64 * config.rate_fraction;
        let mut p = Pacer {
            paced_bits_per_s,
            depth_ns: 0,
            release_bytes: 0,
            mss_bytes: u64::from(config.mss_bytes),
            overhead_bytes: u64::from(config.overhead_bytes),
            burst_ns: (f64::from(config.burst_bytes) * 8e9 / paced_bits_per_s).floor() as u64,
            link_free_at_ns: 0,
        };
        let segment_ns = p.wire_ns(p.mss_bytes);
        p.depth_ns = config.lookahead_ns.max(2 * segment_ns);
        let release_ns = config.release_ns.min(p.depth_ns - segment_ns);
        p.release_bytes = p.payload_in_ns(release_ns).max(p.mss_bytes);
        p
    }

    /// The paced rate, wire bits per second (the uplink's rate × the rate fraction).
    pub fn paced_bits_per_s(&self) -> f64 {
        self.paced_bits_per_s
    }

    /// The idle burst in force, nanoseconds of link time at the paced rate.
    pub fn burst_ns(&self) -> u64 {
        self.burst_ns
    }

    /// The look-ahead in force, nanoseconds of link time.
    pub fn depth_ns(&self) -> u64 {
        self.depth_ns
    }

    /// The release quantum in force, payload bytes: a release is due when this
    /// much (or all the best connection has left, if less) fits.
    pub fn release_bytes(&self) -> u64 {
        self.release_bytes
    }

    /// Link time of `payload_bytes` sent as full segments plus one partial, rounded up.
    pub fn wire_ns(&self, payload_bytes: u64) -> u64 {
        let segments = payload_bytes.div_ceil(self.mss_bytes);
        self.wire_bytes_ns(payload_bytes + segments * self.overhead_bytes)
    }

    /// Link time of `wire_bytes` on the wire (headers included), rounded up.
    fn wire_bytes_ns(&self, wire_bytes: u64) -> u64 {
        (wire_bytes as f64 * 8.0 * 1e9 / self.paced_bits_per_s).ceil() as u64
    }

    /// The link clock as seen at `now_ns`: at least `now_ns` less the idle burst.
    fn clock_ns(&self, now_ns: u64) -> u64 {
        self.link_free_at_ns.max(now_ns.saturating_sub(self.burst_ns))
    }

    /// Link time still free for grants at `now_ns`.
    fn free_ns(&self, now_ns: u64) -> u64 {
        (now_ns + self.depth_ns).saturating_sub(self.clock_ns(now_ns))
    }

    /// Payload bytes that may be granted at `now_ns`.
    pub fn budget_bytes(&self, now_ns: u64) -> u64 {
        self.payload_in_ns(self.free_ns(now_ns))
    }

    /// The most payload bytes whose link time fits in `free_ns`.
    pub fn payload_in_ns(&self, free_ns: u64) -> u64 {
        if free_ns == 0 {
            return 0;
        }
        let wire_bytes = (free_ns as f64 * self.paced_bits_per_s / 8e9).floor() as u64;
        let per_segment = self.mss_bytes + self.overhead_bytes;
        let mut payload =
            wire_bytes / per_segment * self.mss_bytes + (wire_bytes % per_segment).saturating_sub(self.overhead_bytes);
        // Rounding of the estimate: step down until it really fits (a step or two).
        while payload > 0 && self.wire_ns(payload) > free_ns {
            payload -= 1;
        }
        payload
    }

    /// The first instant at or after `now_ns` at which `payload_bytes` fit.
    pub fn ready_at_ns(&self, now_ns: u64, payload_bytes: u64) -> u64 {
        let need_ns = self.wire_ns(payload_bytes).min(self.depth_ns);
        let at = self.clock_ns(now_ns) + need_ns;
        at.saturating_sub(self.depth_ns).max(now_ns)
    }

    /// Charges a grant of `payload_bytes` at `now_ns`; the caller checked the budget.
    pub fn charge(&mut self, now_ns: u64, payload_bytes: u64) {
        debug_assert!(payload_bytes <= self.budget_bytes(now_ns), "grant beyond the budget");
        self.link_free_at_ns = self.clock_ns(now_ns) + self.wire_ns(payload_bytes);
    }

    /// Charges `wire_bytes` sent outside any grant (a connection's control
    /// packets) at `now_ns`: the link clock moves on by their wire time, even
    /// past the look-ahead, since they are sent whatever the pacer says.
    pub fn charge_wire(&mut self, now_ns: u64, wire_bytes: u64) {
        self.link_free_at_ns = self.clock_ns(now_ns) + self.wire_bytes_ns(wire_bytes);
    }

    /// Charges `payload_bytes` of TCP payload sent outside any grant (a TLS
    /// handshake's flights) at `now_ns`, in segments like a grant's bytes; like
    /// [`Pacer::charge_wire`], past the look-ahead if need be.
    pub fn charge_payload(&mut self, now_ns: u64, payload_bytes: u64) {
        self.link_free_at_ns = self.clock_ns(now_ns) + self.wire_ns(payload_bytes);
    }

    /// Gives back the link time of bytes granted but not written (`granted` →
    /// `written`). Never moves the clock before `now_ns` less the idle burst:
    /// link time already past is not handed out again beyond the burst.
    pub fn refund(&mut self, now_ns: u64, granted_bytes: u64, written_bytes: u64) {
        debug_assert!(written_bytes <= granted_bytes);
        let back_ns = self.wire_ns(granted_bytes) - self.wire_ns(written_bytes.min(granted_bytes));
        let floor_ns = now_ns.saturating_sub(self.burst_ns).min(self.link_free_at_ns);
        self.link_free_at_ns = self.link_free_at_ns.saturating_sub(back_ns).max(floor_ns);
    }

    /// A wake-up due at `due_ns` (from [`Pacer::ready_at_ns`]) came at `now_ns`;
    /// call before granting anything at `now_ns`.
    /// Idle link time within the burst is banked, not lost.
    pub fn wake(&self, due_ns: u64, now_ns: u64) -> Wake {
        Wake {
            late_ns: now_ns.saturating_sub(due_ns),
            link_idle_ns: now_ns.saturating_sub((self.link_free_at_ns + self.burst_ns).max(due_ns)),
        }
    }

    /// How far ahead of `now_ns` the link is booked (0 when idle or in credit).
    pub fn backlog_ns(&self, now_ns: u64) -> u64 {
        self.link_free_at_ns.saturating_sub(now_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pacer(rate: u64, lookahead_ns: u64) -> Pacer {
        Pacer::new(&PacerConfig { rate_bits_per_s: rate, rate_fraction: 1.0, lookahead_ns, ..Default::default() })
    }

    #[test]
    fn wire_time_counts_headers_per_segment() {
        let p = pacer(8_000_000, 0); // one byte per microsecond
        let table: &[(u64, u64)] = &[(0, 0), (1, 67_000), (1448, 1_514_000), (1449, 1_581_000), (2896, 3_028_000)];
        for &(payload, ns) in table {
            assert_eq!(p.wire_ns(payload), ns, "{payload}");
        }
        assert_eq!(p.depth_ns(), 3_028_000, "at least two segments of look-ahead");
    }

    #[test]
    fn control_bytes_take_link_time_outside_the_budget() {
        let mut p = pacer(8_000_000, 10_000_000); // one byte per microsecond, 10 ms ahead
        p.charge_wire(1_000_000, 250);
        assert_eq!(p.backlog_ns(1_000_000), 250_000);
        // Booked after what is already booked, and a full look-ahead may overflow by them.
        p.charge(1_000_000, p.budget_bytes(1_000_000));
        p.charge_wire(1_000_000, 250);
        assert_eq!(p.backlog_ns(1_000_000), 10_250_000);
        assert_eq!(p.budget_bytes(1_000_000), 0);
        // An idle link books them from now.
        p.charge_wire(50_000_000, 100);
        assert_eq!(p.backlog_ns(50_000_000), 100_000);
    }

    #[test]
    fn budget_fills_the_look_ahead_and_refills_with_time() {
        let mut p = pacer(8_000_000, 10_000_000); // 10 ms = 10,000 wire bytes
        let b = p.budget_bytes(0);
        assert!(p.wire_ns(b) <= 10_000_000 && p.wire_ns(b + 1) > 10_000_000, "{b}");
        p.charge(0, b);
        assert_eq!(p.budget_bytes(0), 0);
        assert_eq!(p.budget_bytes(1_000_000), 1000 - 66, "1 ms later: one segment's worth of wire bytes");
        assert!(p.ready_at_ns(0, 1448) <= 1_514_000 + 1_000);
        // Idle: no banked credit beyond the look-ahead.
        assert_eq!(p.budget_bytes(1_000_000_000), b);
    }

    /// One segment's link time at 0.98 of these rates (mss 1448, 66 overhead).
    const SEGMENT_1M: u64 = 12_359_184;
    const SEGMENT_10M: u64 = 1_235_919;
    const SEGMENT_100M: u64 = 123_592;

    #[test]
    fn default_release_quantum_is_the_constant_and_at_least_a_segment() {
        // (rate, mss) → release quantum, at the default 0.98 of the rate.
        let table: &[(u64, u32, u64)] = &[
            (1_000_000, 1448, SEGMENT_1M),
            (10_000_000, 1448, SEGMENT_10M),
            (10_000_000, 8948, 7_358_368),
            (20_000_000, 1448, 617_960),
            (30_000_000, 1448, RELEASE_QUANTUM_NS),
            (100_000_000, 1448, RELEASE_QUANTUM_NS),
            (100_000_000, 8948, 735_837),
            (1_000_000_000, 1448, RELEASE_QUANTUM_NS),
            (10_000_000_000, 1448, RELEASE_QUANTUM_NS),
        ];
        assert_eq!(RELEASE_QUANTUM_NS, 600_000);
        for &(rate, mss, want_ns) in table {
            let c = PacerConfig { rate_bits_per_s: rate, mss_bytes: mss, ..Default::default() };
            assert_eq!(c.default_release_ns(), want_ns, "{rate} bit/s, mss {mss}");
        }
    }

    #[test]
    fn default_lookahead_is_the_release_quantum_plus_the_allowance_and_at_least_two_segments() {
        // (rate, mss, overhead, allowance) → look-ahead, at the default 0.98 of the rate.
        let table: &[(u64, u32, u32, u64, u64)] = &[
            (1_000_000, 1448, 66, LATENESS_ALLOWANCE_NS, 2 * SEGMENT_1M),
            (10_000_000, 1448, 66, LATENESS_ALLOWANCE_NS, 2 * SEGMENT_10M),
            (20_000_000, 1448, 66, LATENESS_ALLOWANCE_NS, 1_617_960),
            (30_000_000, 1448, 66, LATENESS_ALLOWANCE_NS, 1_600_000),
            (100_000_000, 1448, 66, LATENESS_ALLOWANCE_NS, 1_600_000),
            (1_000_000_000, 1448, 66, LATENESS_ALLOWANCE_NS, 1_600_000),
            (10_000_000_000, 1448, 66, LATENESS_ALLOWANCE_NS, 1_600_000),
            (10_000_000, 8948, 66, LATENESS_ALLOWANCE_NS, 14_716_736),
            (100_000_000, 536, 66, LATENESS_ALLOWANCE_NS, 1_600_000),
            (100_000_000, 1448, 66, 200_000, 800_000),
            (100_000_000, 1448, 66, 0, 600_000),
        ];
        for &(rate, mss, overhead, allowance, want_ns) in table {
            let c =
                PacerConfig { rate_bits_per_s: rate, mss_bytes: mss, overhead_bytes: overhead, ..Default::default() };
            assert_eq!(c.default_lookahead_ns(allowance), want_ns, "{rate} bit/s, mss {mss}, allowance {allowance}");
        }
    }

    #[test]
    fn a_given_look_ahead_keeps_the_allowance_out_of_the_release_quantum() {
        // (rate, look-ahead given) → (look-ahead, release quantum), allowance 1 ms.
        let table: &[(u64, Option<u64>, u64, u64)] = &[
            (100_000_000, None, 1_600_000, RELEASE_QUANTUM_NS),
            (100_000_000, Some(8_000_000), 8_000_000, RELEASE_QUANTUM_NS),
            (100_000_000, Some(1_400_000), 1_400_000, 400_000),
            (100_000_000, Some(1_100_000), 1_100_000, SEGMENT_100M), // never below a segment
            (10_000_000, None, 2 * SEGMENT_10M, SEGMENT_10M),
            (10_000_000, Some(1_000_000), 1_000_000, SEGMENT_10M),
        ];
        for &(rate, given, lookahead_ns, release_ns) in table {
            let c =
                PacerConfig { rate_bits_per_s: rate, ..Default::default() }.with_defaults(given, LATENESS_ALLOWANCE_NS);
            assert_eq!((c.lookahead_ns, c.release_ns), (lookahead_ns, release_ns), "{rate} bit/s, {given:?}");
        }
    }

    #[test]
    fn the_release_quantum_is_between_a_segment_and_the_look_ahead_less_a_segment() {
        // (look-ahead, release quantum) → payload bytes per release, one wire byte per µs.
        let table: &[(u64, u64, u64)] = &[
            (10_000_000, 0, 1448),
            (10_000_000, 1_000_000, 1448),
            (10_000_000, 5_000_000, 3 * 1448 + 392),  // 5,000 wire bytes
            (10_000_000, 20_000_000, 5 * 1448 + 850), // 10 ms − one segment: 8,486
            (0, 20_000_000, 1448),                    // the two-segment floor of the look-ahead
        ];
        for &(lookahead_ns, release_ns, bytes) in table {
            let c = PacerConfig {
                rate_bits_per_s: 8_000_000,
                rate_fraction: 1.0,
                lookahead_ns,
                release_ns,
                ..Default::default()
            };
            assert_eq!(Pacer::new(&c).release_bytes(), bytes, "{lookahead_ns} ns, {release_ns} ns");
        }
    }

    #[test]
    fn a_late_wake_counts_the_link_time_lost() {
        let mut p = pacer(8_000_000, 4_000_000);
        p.charge(0, 2896); // booked until 3.028 ms
        let due = p.ready_at_ns(0, 1448);
        assert_eq!(due, 3_028_000 + 1_514_000 - 4_000_000);
        assert_eq!(p.wake(due, due + 1_000_000), Wake { late_ns: 1_000_000, link_idle_ns: 0 });
        assert_eq!(p.wake(due, 3_528_000), Wake { late_ns: 3_528_000 - due, link_idle_ns: 500_000 });
        assert_eq!(p.wake(due, due), Wake::default(), "on time");
        assert_eq!(pacer(8_000_000, 0).wake(5, 9), Wake { late_ns: 4, link_idle_ns: 4 }, "idle since due, not before");
    }

    fn bursty(burst_bytes: u32) -> Pacer {
        // One wire byte per microsecond, 4 ms ahead.
        Pacer::new(&PacerConfig {
            rate_bits_per_s: 8_000_000,
            rate_fraction: 1.0,
            lookahead_ns: 4_000_000,
            burst_bytes,
            ..Default::default()
        })
    }

    #[test]
    fn an_idle_link_banks_at_most_the_burst() {
        // (burst, idle spell before the first grant) → link time grantable at once.
        let table: &[(u32, u64, u64)] = &[
            (0, 100_000_000, 4_000_000),
            (6_000, 100_000_000, 10_000_000),
            (6_000, 2_000_000, 6_000_000), // credit accrues with idle time
            (6_000, 0, 4_000_000),
        ];
        for &(burst, idle_ns, free_ns) in table {
            let mut p = bursty(burst);
            p.charge(0, 0);
            assert_eq!(p.budget_bytes(idle_ns), p.payload_in_ns(free_ns), "burst {burst}, idle {idle_ns}");
            // The credit is spent by grants and comes back only with idle time.
            p.charge(idle_ns, p.budget_bytes(idle_ns));
            assert_eq!(p.budget_bytes(idle_ns), 0);
            assert_eq!(p.backlog_ns(idle_ns), 4_000_000 - (free_ns - p.wire_ns(p.payload_in_ns(free_ns))));
        }
        assert_eq!(bursty(6_000).burst_ns(), 6_000_000);
    }

    #[test]
    fn a_late_wake_within_the_burst_loses_no_link_time() {
        let mut p = bursty(2_000);
        p.charge(0, 1448); // booked until 1.514 ms
        assert_eq!(p.wake(0, 3_000_000).link_idle_ns, 0, "1.5 ms idle: banked");
        assert_eq!(p.wake(0, 4_514_000).link_idle_ns, 1_000_000, "beyond the 2 ms burst: lost");
    }

    #[test]
    fn refund_returns_unused_link_time_but_not_the_past() {
        let mut p = pacer(8_000_000, 10_000_000);
        p.charge(0, 4000);
        p.refund(0, 4000, 1000);
        assert_eq!(p.backlog_ns(0), p.wire_ns(1000));
        p.charge(0, 4000);
        p.refund(9_000_000, 4000, 0); // past the booked time: nothing to give back
        assert_eq!(p.backlog_ns(9_000_000), 0);
    }

    proptest::proptest! {
        /// With an idle burst, the bytes granted over any window fit in the
        /// window's link time plus the look-ahead plus the burst.
        #[test]
        fn never_more_than_the_link_plus_the_burst(
            burst in 0u32..20_000,
            steps in proptest::collection::vec((0u64..5_000_000, 0u64..20_000), 1..100),
        ) {
            let mut p = bursty(burst);
            let mut now = 0;
            let mut log: Vec<(u64, u64)> = Vec::new();
            for (dt, want) in steps {
                now += dt;
                let bytes = want.min(p.budget_bytes(now));
                p.charge(now, bytes);
                log.push((now, bytes));
            }
            for i in 0..log.len() {
                let mut wire = 0;
                for &(at, bytes) in &log[i..] {
                    wire += p.wire_ns(bytes);
                    let limit = at - log[i].0 + p.depth_ns() + p.burst_ns() + 1;
                    proptest::prop_assert!(wire <= limit, "{wire} ns granted, {limit} allowed");
                }
            }
        }
    }
}

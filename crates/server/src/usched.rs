//! The driver of `shortfirst_core::uplink_sched`: the server's own uplink
//! scheduler (`--scheduler user` or `crovella`), with no qdisc and no capability.
//!
//! One [`UserScheduler`] per server holds the core scheduler under a mutex
//! (never held across I/O or an await). A connection sending a response
//! [`UserScheduler::register`]s it; before a write it waits until its socket
//! is writable (tokio readiness; `TCP_NOTSENT_LOWAT` keeps that false while
//! the kernel holds enough unsent bytes), says so, and waits for a grant; it
//! writes at most the grant with one non-blocking `send`/`sendfile` and reports
//! what it wrote, the kernel's unsent bytes (`SIOCOUTQNSD`, not read once the
//! response is all written) and whether the socket still takes bytes. A grant
//! larger than the piece written (the head, before the body) is kept for the
//! next piece, so a response shorter than the quantum costs one grant. Grants
//! are handed out by whoever changes the state (a connection becoming writable
//! or reporting) and, when the pacer has no budget yet, by the one pacer task,
//! which sleeps until the next release.
//!
//! An HTTP/2 connection is a group of the core scheduler ([`group`]): each
//! stream a member ranked with every other response, the connection granted
//! one stream's chunk at a time.
//!
//! The pacer is a thread of its own with microsecond wake-ups ([`pacer`]); it
//! wakes when a release quantum of link time fits (0.6 ms, at least one
//! segment), and the look-ahead (`pacer-lookahead`, by default the release
//! quantum plus 1 ms, at least two segments) must cover its lateness or the
//! link idles. The lateness, and the link time it cost, are measured and
//! exported.

// The wall clock: the scheduler's epoch is shared with the pacer thread, which runs off
// tokio and waits on a condition variable with a real deadline.
#![allow(clippy::disallowed_types)]

mod group;
mod pacer;

pub(crate) use group::{GrantSignal, GroupReg, Member, MemberReport};
pub(crate) use pacer::PacerThread;

use std::fmt::Write as _;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use shortfirst_core::bands::{Band, Cutoffs};
use shortfirst_core::uplink_sched::{
    ConnId, Mode, Pacer, PacerConfig, SchedConfig, SchedError, SchedStats, UplinkScheduler,
    CONTROL_BYTES_PER_CONNECTION, LATENESS_ALLOWANCE_NS,
};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::config::{ConfigError, Scheduling, ServerConfig};
use crate::io::unsent_bytes;
use crate::metrics::{write_family, write_metric, BAND_SLOTS};

/// Where a connection's grants are delivered (a group's: every member's).
struct Slot {
    /// Bytes granted and not yet taken (0: none).
    grant: AtomicU64,
    /// The slot index (`ConnId::index`) of the response granted: in a group, which member.
    who: AtomicU64,
    notify: Notify,
}

impl Slot {
    fn new() -> Slot {
        Slot { grant: AtomicU64::new(0), who: AtomicU64::new(0), notify: Notify::new() }
    }
}

struct State {
    core: UplinkScheduler,
    /// Indexed by `ConnId::index`, at most `max-connections` long.
    slots: Vec<Option<Arc<Slot>>>,
    /// The pacer thread waits for a notification (nothing was ready when it last looked).
    pacer_idle: bool,
    /// The pacer thread is to end.
    pacer_stop: bool,
}

/// The server-wide scheduler (see the module docs).
pub(crate) struct UserScheduler {
    state: Mutex<State>,
    /// Wakes the pacer thread; waited on with `state`.
    wake_pacer: Condvar,
    epoch: Instant,
    scheduler: Scheduling,
    policy_name: String,
    rate_bits_per_s: u64,
    lowat_bytes: u64,
    granted_by_band: [AtomicU64; BAND_SLOTS],
    pacer_metrics: pacer::PacerMetrics,
}

impl UserScheduler {
    /// `None` in kernel mode.
    pub(crate) fn new(config: &ServerConfig) -> Result<Option<Arc<UserScheduler>>, ConfigError> {
        let mode = match config.scheduler {
            Scheduling::Kernel => return Ok(None),
            Scheduling::User => Mode::WorkConserving,
            Scheduling::Crovella => Mode::LimitedConcurrency { writers: config.write_concurrency },
        };
        let policy = config.user_policy()?;
        let rate_bits_per_s = config.link_rate_bits_per_s.unwrap_or(0);
        let pacer = PacerConfig {
            rate_bits_per_s,
            rate_fraction: config.pacer_rate_fraction,
            burst_bytes: config.pacer_burst_bytes,
            control_bytes_per_connection: CONTROL_BYTES_PER_CONNECTION,
            ..PacerConfig::default()
        };
        let lookahead_ns = config.pacer_lookahead.map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let sched_config = SchedConfig {
            pacer: pacer.with_defaults(lookahead_ns, LATENESS_ALLOWANCE_NS),
            max_connections: max_responses(config),
            max_groups: config.max_connections,
            mode,
            ..SchedConfig::default()
        };
        let policy_name = policy.to_string();
        let core = UplinkScheduler::new(policy, sched_config)
            .map_err(|e| ConfigError::Invalid { key: "link-rate", reason: e.to_string() })?;
        Ok(Some(Arc::new(UserScheduler {
            state: Mutex::new(State { core, slots: Vec::new(), pacer_idle: false, pacer_stop: false }),
            wake_pacer: Condvar::new(),
            epoch: Instant::now(),
            scheduler: config.scheduler,
            policy_name,
            rate_bits_per_s,
            lowat_bytes: u64::from(config.notsent_lowat_bytes),
            granted_by_band: std::array::from_fn(|_| AtomicU64::new(0)),
            pacer_metrics: pacer::PacerMetrics::default(),
        })))
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("uplink scheduler lock poisoned")
    }

    /// A response of `size_bytes` starts on a connection; the first on a
    /// connection also charges the link time of the connection's control
    /// packets. At the scheduler's limit (`max-connections`, which also bounds
    /// open connections, so only a bug gets there) the response fails with an
    /// error and the connection closes.
    pub(crate) fn register(self: &Arc<Self>, size_bytes: u64, first_on_connection: bool) -> io::Result<Registration> {
        let now_ns = self.now_ns();
        let mut st = self.lock();
        let id = st.core.register(size_bytes).map_err(|e: SchedError| io::Error::other(e.to_string()))?;
        if first_on_connection {
            st.core.charge_connection(now_ns);
        }
        let slot = Arc::new(Slot::new());
        if st.slots.len() <= id.index() {
            st.slots.resize(id.index() + 1, None);
        }
        st.slots[id.index()] = Some(slot.clone());
        Ok(Registration { sched: self.clone(), id, slot, left_bytes: size_bytes, held: None })
    }

    /// Bytes of one grant (the quantum): TLS records are sized to fit in one.
    pub(crate) fn quantum_bytes(&self) -> u64 {
        self.lock().core.quantum_bytes()
    }

    /// A TLS handshake put `payload_bytes` on the wire outside any grant: charged to
    /// the pacer like a connection's control packets.
    pub(crate) fn charge_handshake(&self, payload_bytes: u64) {
        let now_ns = self.now_ns();
        let mut st = self.lock();
        st.core.charge_handshake(now_ns, payload_bytes);
        self.dispatch(&mut st, now_ns);
    }

    /// Hands out every grant the pacer allows now; wakes the pacer if
    /// connections are left waiting while it sleeps with nothing to do.
    fn dispatch(&self, st: &mut State, now_ns: u64) {
        while let Some(g) = st.core.next_grant(now_ns) {
            let slot = st.slots[g.id.index()].as_ref().expect("granted connection has a slot");
            slot.who.store(g.id.index() as u64, Relaxed);
            slot.grant.store(g.bytes, Release);
            slot.notify.notify_one();
        }
        if st.pacer_idle && st.core.stats().ready > 0 {
            st.pacer_idle = false;
            self.wake_pacer.notify_one();
        }
    }

    /// The scheduler's part of `/metrics`; `cutoffs` name the bands.
    pub(crate) fn render(&self, out: &mut String, cutoffs: &Cutoffs) {
        let (stats, pacer, now_ns) = {
            let st = self.lock();
            (st.core.stats(), st.core.pacer().clone(), self.now_ns())
        };
        let (lookahead_ns, release_ns) = (pacer.depth_ns(), pacer.wire_ns(pacer.release_bytes()));
        let name = "shortfirst_uplink_scheduler_info";
        write_family(out, name, "gauge", "The user-space uplink scheduler in force.");
        let _ = writeln!(
            out,
            "{name}{{scheduler=\"{}\",policy=\"{}\",rate_bits_per_s=\"{}\"}} 1",
            self.scheduler, self.policy_name, self.rate_bits_per_s
        );
        render_gauges(out, &stats, &pacer, now_ns);
        render_counters(out, &stats);
        let name = "shortfirst_uplink_granted_bytes_total";
        write_family(out, name, "counter", "Bytes granted, by the band of the response's remaining size.");
        for b in 1..=cutoffs.data_bands() {
            let _ = writeln!(out, "{name}{{band=\"{b}\"}} {}", self.granted_by_band[b].load(Relaxed));
        }
        self.pacer_metrics.render(out, lookahead_ns, release_ns);
    }
}

/// Responses the scheduler holds at once: one per connection, and under HTTP/2 every
/// stream a connection may have open (within the core's limit).
fn max_responses(config: &ServerConfig) -> usize {
    let per_connection = if config.http2 { config.http2_max_concurrent_streams as usize } else { 1 };
    config.max_connections.saturating_mul(per_connection).min(shortfirst_core::uplink_sched::MAX_CONNECTIONS_LIMIT)
}

/// The scheduler's gauges in `/metrics`: its queues and the pacer's state at `now_ns`.
fn render_gauges(out: &mut String, stats: &SchedStats, pacer: &Pacer, now_ns: u64) {
    let gauges = [
        ("shortfirst_uplink_queue_length", "Writable responses waiting for a grant.", stats.ready as f64),
        ("shortfirst_uplink_registered", "Responses registered with the scheduler.", stats.registered as f64),
        (
            "shortfirst_uplink_groups",
            "HTTP/2 connections registered, each a group of its streams.",
            stats.groups as f64,
        ),
        (
            "shortfirst_uplink_waiting",
            "Responses not admitted to write (crovella: beyond write-concurrency).",
            stats.waiting as f64,
        ),
        (
            "shortfirst_uplink_pacer_backlog_seconds",
            "Link time granted ahead of now.",
            pacer.backlog_ns(now_ns) as f64 / 1e9,
        ),
        (
            "shortfirst_uplink_pacer_rate_bits_per_s",
            "The pacer's rate on the wire: the uplink's rate times --pacer-rate-fraction.",
            pacer.paced_bits_per_s(),
        ),
        (
            "shortfirst_uplink_pacer_burst_seconds",
            "Link time an idle link banks (--pacer-burst-bytes at the paced rate).",
            pacer.burst_ns() as f64 / 1e9,
        ),
    ];
    for (name, help, v) in gauges {
        write_metric(out, name, "gauge", help, v);
    }
}

/// The scheduler's unlabelled counters in `/metrics`.
fn render_counters(out: &mut String, stats: &SchedStats) {
    let counters = [
        ("shortfirst_uplink_grants_total", "Grants handed out.", stats.grants),
        (
            "shortfirst_uplink_control_bytes_total",
            "Wire bytes of connections' control packets (SYN-ACK, bare ACKs, FIN) charged to the pacer.",
            stats.control_bytes,
        ),
        (
            "shortfirst_uplink_refunded_bytes_total",
            "Bytes granted but not written (socket full, response ended), given back to the pacer.",
            stats.refunded_bytes,
        ),
    ];
    for (name, help, v) in counters {
        write_metric(out, name, "counter", help, v);
    }
}

/// One response registered with the scheduler; finished when dropped (an
/// outstanding grant is then given back).
pub(crate) struct Registration {
    sched: Arc<UserScheduler>,
    id: ConnId,
    slot: Arc<Slot>,
    /// Bytes of the response not yet written.
    left_bytes: u64,
    /// A grant not used up by the write that took it, kept for the next one.
    held: Option<Held>,
}

/// A grant in use across writes (the head and then the body of one response).
#[derive(Clone, Copy)]
struct Held {
    granted_bytes: u64,
    written_bytes: u64,
    band: Band,
}

impl Registration {
    /// Waits until the socket is writable (at most `timeout`: a client that
    /// stops reading) and a grant arrives (no limit: waiting behind better
    /// responses is the schedule, not a fault). Returns the granted bytes.
    async fn grant(&self, stream: &TcpStream, timeout: Duration) -> io::Result<u64> {
        tokio::time::timeout(timeout, stream.writable())
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "send timeout: client is not reading"))??;
        {
            let mut st = self.sched.lock();
            st.core.set_writable(self.id, true);
            let now = self.sched.now_ns();
            self.sched.dispatch(&mut st, now);
        }
        loop {
            let g = self.slot.grant.swap(0, Acquire);
            if g > 0 {
                return Ok(g);
            }
            self.slot.notify.notified().await;
        }
    }

    /// The response has `more_bytes` beyond what it registered.
    fn extend(&mut self, more_bytes: u64) {
        self.sched.lock().core.extend(self.id, more_bytes);
        self.left_bytes += more_bytes;
    }

    /// Ends the grant in use: what was written under it, the kernel's unsent
    /// bytes and whether the socket still takes bytes go to the scheduler.
    fn report(&mut self, held: Held, unsent: u64, writable: bool) {
        self.held = None;
        let slot = usize::from(held.band.index()).min(BAND_SLOTS - 1);
        self.sched.granted_by_band[slot].fetch_add(held.granted_bytes, Relaxed);
        let mut st = self.sched.lock();
        let now = self.sched.now_ns();
        st.core.report(now, self.id, held.written_bytes, unsent, writable);
        self.sched.dispatch(&mut st, now);
    }

    /// One scheduled write: uses the rest of the grant in hand or waits for a
    /// new one, then calls `op(n)` once (n = at most `max` and the grant) as a
    /// non-blocking write; retries after `EAGAIN`. A grant outlives the write
    /// only if that write took all it was offered and `max` was the limit, so
    /// a head and the body after it cost one grant. Returns what `op` wrote (0
    /// only if `op` wrote nothing without an error, e.g. `sendfile` at the end
    /// of a file).
    pub(crate) async fn write(
        &mut self,
        stream: &TcpStream,
        timeout: Duration,
        band: Band,
        max: usize,
        mut op: impl FnMut(usize) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let fd = stream.as_raw_fd();
        loop {
            let mut held = match self.held {
                Some(h) => h,
                None => {
                    if self.left_bytes == 0 {
                        // More to write than registered (an estimate fell short): the
                        // scheduler never grants a response with nothing left.
                        self.extend(max as u64);
                    }
                    Held { granted_bytes: self.grant(stream, timeout).await?, written_bytes: 0, band }
                }
            };
            let offered = held.granted_bytes - held.written_bytes;
            let want = max.min(usize::try_from(offered).unwrap_or(usize::MAX));
            let result = stream.try_io(Interest::WRITABLE, || op(want));
            let n = *result.as_ref().unwrap_or(&0) as u64;
            held.written_bytes += n;
            self.left_bytes = self.left_bytes.saturating_sub(n);
            if result.is_ok() && n == want as u64 && n < offered && self.left_bytes > 0 {
                self.held = Some(held);
                return Ok(n as usize);
            }
            // The response is out: its unsent bytes no longer rank it.
            let unsent = if self.left_bytes == 0 { 0 } else { unsent_bytes(fd).unwrap_or(0) };
            match result {
                Ok(n) => {
                    // Full write and room below the watermark: more may follow at once.
                    let room = self.sched.lowat_bytes == 0 || unsent < self.sched.lowat_bytes;
                    self.report(held, unsent, n == want && room);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.report(held, unsent, false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => self.report(held, unsent, true),
                Err(e) => {
                    self.report(held, unsent, false);
                    return Err(e);
                }
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            self.report(held, 0, false);
        }
        let mut st = self.sched.lock();
        let now = self.sched.now_ns();
        st.core.finish(now, self.id);
        st.slots[self.id.index()] = None;
        self.sched.dispatch(&mut st, now);
    }
}

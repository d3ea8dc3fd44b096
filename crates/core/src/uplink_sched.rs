//! The user-space uplink scheduler: which connection may put bytes into the
//! kernel next, and how many. Pure: time and events in, grants out.
//!
//! A server without kernel priority bands orders its own writes. Every response
//! socket keeps a small `TCP_NOTSENT_LOWAT`, so unsent data stays in the
//! application where it can be ordered; one [`Pacer`] for the whole server
//! releases bytes at just under the uplink's rate with a few ms of look-ahead,
//! so the queue forms here rather than in a FIFO below; and at each release the
//! budget goes to the best-ranked connection among those whose socket can take
//! bytes *now*. A connection held back by its own congestion or receive window
//! is not writable and never holds the link (work-conserving). A grant is at
//! most a quantum: `quantum_bytes`, or `quantum_ns` of link time where the link
//! carries more in it, so the wait behind one grant is short on a slow link
//! and a fast one is not cut into small writes, each a syscall and a wake-up.
//!
//! The driver's loop, per connection: [`UplinkScheduler::register`] a response
//! with its size; when the socket is writable, [`UplinkScheduler::set_writable`];
//! take grants from [`UplinkScheduler::next_grant`] (the pacer's task calls it
//! until it returns `None`, and again at [`UplinkScheduler::next_release_ns`]);
//! write at most the grant and [`UplinkScheduler::report`] what was written, the
//! bytes still unsent in the kernel and whether the socket still takes bytes;
//! [`UplinkScheduler::finish`] at the end.
//!
//! Ranking is [`crate::policy::Policy::rank`] on the response's state:
//! remaining = bytes the application has not written + bytes unsent in the
//! kernel; attained = bytes written − unsent. Policies whose equal ranks share
//! ([`TieShare::Fair`]: `ps`/fair, `srpt-classes`, `size-classes`, `las`) break
//! ties by bytes served (start-time fair queueing: a connection's tag grows by
//! what it writes, and one returning from a blocked spell resumes at the system's
//! virtual time, so it neither starves nor bursts to catch up); exclusive ones
//! (`srpt`, `fifo`, `sjf`) by arrival.
//!
//! [`Mode::LimitedConcurrency`] is Crovella et al. 1999's design, as a baseline:
//! only `writers` connections may write at all (the best-ranked at the moment a
//! slot frees; a connection keeps its slot until its response ends, as a thread
//! of a blocking pool does), whether or not they can send. Its throughput loss is
//! what the work-conserving mode is built to avoid.
//!
//! Responses may share a connection (the streams of an HTTP/2 connection): a
//! *group* ([`UplinkScheduler::open_group`], [`UplinkScheduler::register_in`])
//! is writable as one ([`UplinkScheduler::set_group_writable`]: its socket can
//! take bytes and its writer holds nothing unwritten), holds at most one grant
//! at a time, and each member has its own flow-control window
//! ([`UplinkScheduler::set_writable`] on a member). A grant goes to the
//! best-ranked member, among every response of every connection, whose group
//! is writable and holds no grant and whose window is open: ranking is per
//! response across the whole uplink, so a short stream on one connection goes
//! before the rest of a long stream on another, and before a long stream of its
//! own connection ([`group`]). A response registered alone is a group of one.
//!
//! Limits: at most `max_connections` responses (streams included) are
//! registered, and at most `max_groups` groups are open; beyond,
//! [`UplinkScheduler::register`] and [`UplinkScheduler::open_group`] return
//! [`SchedError::Full`] and the caller must not write (the server sizes both to
//! its connection and stream limits). Every set here holds at most one entry
//! per registered response.

use std::collections::BTreeSet;

use crate::policy::{OrdF64, Policy, TieShare};

mod group;
pub mod pacer;

pub use group::GroupId;

pub use pacer::{
    Pacer, PacerConfig, Wake, CONTROL_BYTES_PER_CONNECTION, LATENESS_ALLOWANCE_NS, MAX_BURST_BYTES, RELEASE_QUANTUM_NS,
};

/// Most responses the scheduler can hold (a bound on `max_connections`).
pub const MAX_CONNECTIONS_LIMIT: usize = 1 << 20;

/// Which connections may be granted bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Any connection whose socket can take bytes (ours).
    WorkConserving,
    /// Only `writers` admitted connections, writable or not (Crovella 1999).
    LimitedConcurrency { writers: usize },
}

/// The scheduler's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedConfig {
    pub pacer: PacerConfig,
    /// Largest grant, bytes, at low rates: bounds how long a newly arrived short
    /// response can wait behind one grant to a worse one.
    pub quantum_bytes: u64,
    /// Largest grant in link time: where the paced link carries more than
    /// `quantum_bytes` in this time, a grant may be that large (the wait behind
    /// it stays this short). Fewer, larger writes on a fast link; the same
    /// `quantum_bytes` on a slow one.
    pub quantum_ns: u64,
    /// Responses registered at once, at most (the streams of groups included).
    pub max_connections: usize,
    /// Groups open at once, at most (connections carrying several responses).
    pub max_groups: usize,
    pub mode: Mode,
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            pacer: PacerConfig::default(),
            quantum_bytes: 16 * 1024,
            quantum_ns: 1_000_000,
            max_connections: 4096,
            max_groups: 4096,
            mode: Mode::WorkConserving,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchedError {
    #[error("uplink rate must be above 0 bit/s")]
    ZeroRate,
    #[error("pacer rate fraction {0} must be in 0.5..=1")]
    RateFraction(f64),
    #[error("pacer look-ahead must be at most 1 s (got {0} ns)")]
    Lookahead(u64),
    #[error("mss must be in 536..=65535 bytes and the per-segment overhead at most 1024 (got {mss}, {overhead})")]
    Segment { mss: u32, overhead: u32 },
    #[error("quantum {quantum} bytes must be at least one segment ({mss} bytes)")]
    Quantum { quantum: u64, mss: u32 },
    #[error("control bytes per connection must be at most 65536 (got {0})")]
    ControlBytes(u32),
    #[error("pacer burst must be at most {MAX_BURST_BYTES} bytes (got {0})")]
    Burst(u32),
    #[error("quantum must be at most 1 s of link time (got {0} ns)")]
    QuantumTime(u64),
    #[error("max connections must be in 1..={MAX_CONNECTIONS_LIMIT} (got {0})")]
    MaxConnections(usize),
    #[error("max groups must be in 1..={MAX_CONNECTIONS_LIMIT} (got {0})")]
    MaxGroups(usize),
    #[error("write concurrency must be at least 1")]
    Writers,
    #[error("scheduler full: {max} responses registered")]
    Full { max: usize },
    #[error("scheduler full: {max} groups open")]
    GroupsFull { max: usize },
    #[error("the group is closed")]
    GroupClosed,
}

impl SchedConfig {
    pub fn validate(&self) -> Result<(), SchedError> {
        let p = &self.pacer;
        if p.rate_bits_per_s == 0 {
            return Err(SchedError::ZeroRate);
        }
        if !(0.5..=1.0).contains(&p.rate_fraction) {
            return Err(SchedError::RateFraction(p.rate_fraction));
        }
        if p.lookahead_ns > 1_000_000_000 {
            return Err(SchedError::Lookahead(p.lookahead_ns));
        }
        if p.burst_bytes > MAX_BURST_BYTES {
            return Err(SchedError::Burst(p.burst_bytes));
        }
        if p.control_bytes_per_connection > 65_536 {
            return Err(SchedError::ControlBytes(p.control_bytes_per_connection));
        }
        if !(536..=65535).contains(&p.mss_bytes) || p.overhead_bytes > 1024 {
            return Err(SchedError::Segment { mss: p.mss_bytes, overhead: p.overhead_bytes });
        }
        if self.quantum_bytes < u64::from(p.mss_bytes) {
            return Err(SchedError::Quantum { quantum: self.quantum_bytes, mss: p.mss_bytes });
        }
        if self.quantum_ns > 1_000_000_000 {
            return Err(SchedError::QuantumTime(self.quantum_ns));
        }
        if !(1..=MAX_CONNECTIONS_LIMIT).contains(&self.max_connections) {
            return Err(SchedError::MaxConnections(self.max_connections));
        }
        if !(1..=MAX_CONNECTIONS_LIMIT).contains(&self.max_groups) {
            return Err(SchedError::MaxGroups(self.max_groups));
        }
        if self.mode == (Mode::LimitedConcurrency { writers: 0 }) {
            return Err(SchedError::Writers);
        }
        Ok(())
    }
}

/// A registered response. Ids are reused after [`UplinkScheduler::finish`]; the
/// generation tells a stale id from the new holder of its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnId {
    index: u32,
    generation: u32,
}

impl ConnId {
    /// Dense index (below `max_connections`), for the driver's own tables.
    pub fn index(self) -> usize {
        self.index as usize
    }
}

/// Permission to write up to `bytes` on connection `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub id: ConnId,
    pub bytes: u64,
}

/// Counters for the driver's metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedStats {
    pub grants: u64,
    pub granted_bytes: u64,
    /// Granted but not written (socket full, response ended), given back.
    pub refunded_bytes: u64,
    /// Wire bytes of connections' control packets charged to the link.
    pub control_bytes: u64,
    pub registered: usize,
    /// Writable responses waiting for a grant.
    pub ready: usize,
    /// Limited-concurrency mode: registered but not admitted.
    pub waiting: usize,
    /// Groups open (connections carrying several responses).
    pub groups: usize,
    pub full_refusals: u64,
}

/// Ready-set key: rank, tie-break, slot index (lower first).
type Key = (OrdF64, u64, u32);

#[derive(Clone, Debug)]
struct Conn {
    generation: u32,
    arrival_seq: u64,
    size_bytes: u64,
    written_bytes: u64,
    kernel_unsent_bytes: u64,
    /// Can take bytes as far as the response itself goes: alone, its socket;
    /// in a group, its flow-control window (the socket is the group's).
    writable: bool,
    outstanding: Option<u64>,
    /// Start-time fair-queueing tag, bytes.
    fair_tag: u64,
    admitted: bool,
    /// The key under which it sits in `ready` (its group's, in a group) or
    /// `waiting`, if it does.
    key: Option<Key>,
    /// Its group's slot, if it shares a connection.
    group: Option<u32>,
}

impl Conn {
    fn app_remaining(&self) -> u64 {
        self.size_bytes - self.written_bytes
    }
}

/// The scheduler (see the module docs).
#[derive(Debug)]
pub struct UplinkScheduler {
    policy: Policy,
    fair_ties: bool,
    config: SchedConfig,
    pacer: Pacer,
    /// Largest grant in force: `quantum_bytes`, or `quantum_ns` of link time if more.
    quantum_bytes: u64,
    conns: Vec<Option<Conn>>,
    free: Vec<u32>,
    generations: Vec<u32>,
    ready: BTreeSet<Key>,
    waiting: BTreeSet<Key>,
    /// Indexed by `GroupId::index`, at most `max_groups` long.
    groups: Vec<Option<group::Group>>,
    free_groups: Vec<u32>,
    group_generations: Vec<u32>,
    /// Members re-keyed when a group comes back (reused, at most one group's members).
    scratch: Vec<u32>,
    admitted: usize,
    arrivals: u64,
    virtual_bytes: u64,
    stats: SchedStats,
}

impl UplinkScheduler {
    pub fn new(policy: Policy, config: SchedConfig) -> Result<UplinkScheduler, SchedError> {
        config.validate()?;
        let pacer = Pacer::new(&config.pacer);
        Ok(UplinkScheduler {
            fair_ties: policy.ties() == TieShare::Fair,
            policy,
            quantum_bytes: config.quantum_bytes.max(pacer.payload_in_ns(config.quantum_ns)),
            pacer,
            config,
            conns: Vec::new(),
            free: Vec::new(),
            generations: Vec::new(),
            ready: BTreeSet::new(),
            waiting: BTreeSet::new(),
            groups: Vec::new(),
            free_groups: Vec::new(),
            group_generations: Vec::new(),
            scratch: Vec::new(),
            admitted: 0,
            arrivals: 0,
            virtual_bytes: 0,
            stats: SchedStats::default(),
        })
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn config(&self) -> &SchedConfig {
        &self.config
    }

    pub fn pacer(&self) -> &Pacer {
        &self.pacer
    }

    /// The largest grant: `quantum_bytes`, or what the paced link carries in
    /// `quantum_ns` where that is more.
    pub fn quantum_bytes(&self) -> u64 {
        self.quantum_bytes
    }

    pub fn stats(&self) -> SchedStats {
        SchedStats {
            registered: self.conns.len() - self.free.len(),
            ready: self.ready.len(),
            waiting: self.waiting.len(),
            groups: self.groups.len() - self.free_groups.len(),
            ..self.stats
        }
    }

    /// A response of `size_bytes` (head and body) starts; it is not writable
    /// until [`UplinkScheduler::set_writable`] says so.
    pub fn register(&mut self, size_bytes: u64) -> Result<ConnId, SchedError> {
        self.register_entry(size_bytes, None)
    }

    fn register_entry(&mut self, size_bytes: u64, group: Option<u32>) -> Result<ConnId, SchedError> {
        let index = match self.free.pop() {
            Some(i) => i,
            None if self.conns.len() < self.config.max_connections => {
                self.conns.push(None);
                self.generations.push(0);
                (self.conns.len() - 1) as u32
            }
            None => {
                self.stats.full_refusals += 1;
                return Err(SchedError::Full { max: self.config.max_connections });
            }
        };
        let generation = self.generations[index as usize];
        let admitted = match self.config.mode {
            Mode::WorkConserving => true,
            Mode::LimitedConcurrency { writers } => self.admitted < writers,
        };
        self.admitted += usize::from(admitted && self.limited());
        self.conns[index as usize] = Some(Conn {
            generation,
            arrival_seq: self.arrivals,
            size_bytes,
            written_bytes: 0,
            kernel_unsent_bytes: 0,
            // A stream's window is open at its start; a socket says when it is.
            writable: group.is_some(),
            outstanding: None,
            fair_tag: self.virtual_bytes,
            admitted,
            key: None,
            group,
        });
        self.arrivals += 1;
        if !admitted {
            let key = self.key(index);
            self.conn_mut(index).key = Some(key);
            self.waiting.insert(key);
        } else if group.is_some() {
            self.place(index);
        }
        Ok(ConnId { index, generation })
    }

    fn limited(&self) -> bool {
        matches!(self.config.mode, Mode::LimitedConcurrency { .. })
    }

    fn conn_mut(&mut self, index: u32) -> &mut Conn {
        self.conns[index as usize].as_mut().expect("live slot")
    }

    fn live(&self, id: ConnId) -> bool {
        matches!(&self.conns.get(id.index()), Some(Some(c)) if c.generation == id.generation)
    }

    fn key(&self, index: u32) -> Key {
        let c = self.conns[index as usize].as_ref().expect("live slot");
        let unsent = c.kernel_unsent_bytes.min(c.written_bytes);
        let job = crate::policy::JobState {
            arrival_s: c.arrival_seq as f64,
            size: c.size_bytes as f64,
            remaining: (c.app_remaining() + unsent) as f64,
            attained: (c.written_bytes - unsent) as f64,
            fair_tag: c.fair_tag as f64,
        };
        let tie = if self.fair_ties { c.fair_tag } else { c.arrival_seq };
        (OrdF64(self.policy.rank(&job)), tie, index)
    }

    /// Puts a connection in `ready` (a member: its group's) or takes it out,
    /// as its state says.
    fn place(&mut self, index: u32) {
        let c = self.conns[index as usize].as_ref().expect("live slot");
        if !c.admitted {
            return; // stays in `waiting` under its arrival key
        }
        let group = c.group;
        let old = c.key;
        let eligible = c.writable && c.outstanding.is_none() && c.app_remaining() > 0;
        let key = eligible.then(|| self.key(index));
        self.conn_mut(index).key = key;
        match group {
            None => {
                if let Some(old) = old {
                    self.ready.remove(&old);
                }
                if let Some(key) = key {
                    self.ready.insert(key);
                }
            }
            Some(g) => self.place_member(g, old, key),
        }
    }

    /// The socket can (or cannot) take bytes now; for a member of a group, its
    /// flow-control window is open (or closed). A connection with a grant
    /// outstanding reports through [`UplinkScheduler::report`] instead.
    pub fn set_writable(&mut self, id: ConnId, writable: bool) {
        if !self.live(id) {
            debug_assert!(false, "stale id {id:?}");
            return;
        }
        let virtual_bytes = self.virtual_bytes;
        let c = self.conn_mut(id.index);
        if c.outstanding.is_some() || c.writable == writable {
            return;
        }
        c.writable = writable;
        if writable {
            // Back from a blocked spell: resume at the system's virtual time.
            c.fair_tag = c.fair_tag.max(virtual_bytes);
        }
        self.place(id.index);
    }

    /// A new connection's control packets (SYN-ACK, bare ACKs, FIN) go out on
    /// the link whatever is granted: charge their wire time at `now_ns`
    /// (`control_bytes_per_connection`; nothing when 0). The driver calls it
    /// once per connection, with its first response.
    pub fn charge_connection(&mut self, now_ns: u64) {
        let bytes = u64::from(self.config.pacer.control_bytes_per_connection);
        if bytes > 0 {
            self.pacer.charge_wire(now_ns, bytes);
            self.stats.control_bytes += bytes;
        }
    }

    /// Payload bytes a connection sent outside any grant (a TLS handshake's
    /// flights, before its first response) went out at `now_ns`: charged like
    /// control packets, counted in `control_bytes`.
    pub fn charge_handshake(&mut self, now_ns: u64, payload_bytes: u64) {
        if payload_bytes > 0 {
            self.pacer.charge_payload(now_ns, payload_bytes);
            self.stats.control_bytes += payload_bytes;
        }
    }

    /// The next grant at `now_ns`, if a connection is ready and the pacer has
    /// budget for at least a release quantum (or for all the best one has left).
    pub fn next_grant(&mut self, now_ns: u64) -> Option<Grant> {
        let &key @ (_, _, index) = self.ready.first()?;
        let budget = self.pacer.budget_bytes(now_ns);
        let c = self.conns[index as usize].as_ref().expect("ready slot is live");
        let remaining = c.app_remaining();
        let need = remaining.min(self.pacer.release_bytes());
        if budget < need {
            return None;
        }
        let bytes = budget.min(self.quantum_bytes).min(remaining);
        self.ready.remove(&key);
        if let Some(g) = c.group {
            self.granted_member(g, key);
        }
        Some(self.grant(now_ns, index, bytes))
    }

    /// `bytes` to the entry at `index`, already out of every ready set: its grant
    /// outstanding, the pacer charged.
    fn grant(&mut self, now_ns: u64, index: u32, bytes: u64) -> Grant {
        let c = self.conn_mut(index);
        debug_assert!(c.outstanding.is_none() && bytes > 0 && bytes <= c.app_remaining());
        c.outstanding = Some(bytes);
        c.key = None;
        let (generation, fair_tag) = (c.generation, c.fair_tag);
        self.virtual_bytes = self.virtual_bytes.max(fair_tag);
        self.pacer.charge(now_ns, bytes);
        self.stats.grants += 1;
        self.stats.granted_bytes += bytes;
        Grant { id: ConnId { index, generation }, bytes }
    }

    /// When [`UplinkScheduler::next_grant`] will next have something to give,
    /// if a connection is ready (`now_ns` if it has already).
    pub fn next_release_ns(&self, now_ns: u64) -> Option<u64> {
        let &(_, _, index) = self.ready.first()?;
        let c = self.conns[index as usize].as_ref().expect("ready slot is live");
        Some(self.pacer.ready_at_ns(now_ns, c.app_remaining().min(self.pacer.release_bytes())))
    }

    /// The outcome of a grant: `written_bytes` (≤ the grant) went into the
    /// socket, `kernel_unsent_bytes` are still unsent there (`SIOCOUTQNSD`), and
    /// whether the socket still takes bytes. For a member of a group the last is
    /// the group's: whether its connection takes bytes again at once (the
    /// member's window stays as it was).
    pub fn report(&mut self, now_ns: u64, id: ConnId, written_bytes: u64, kernel_unsent_bytes: u64, writable: bool) {
        if !self.live(id) {
            debug_assert!(false, "stale id {id:?}");
            return;
        }
        let c = self.conn_mut(id.index);
        let Some(granted) = c.outstanding.take() else {
            debug_assert!(false, "report without a grant");
            return;
        };
        let written = written_bytes.min(granted).min(c.app_remaining());
        c.written_bytes += written;
        c.kernel_unsent_bytes = kernel_unsent_bytes;
        c.fair_tag += written;
        match c.group {
            None => c.writable = writable,
            Some(g) => self.group_reported(g, writable),
        }
        self.pacer.refund(now_ns, granted, written);
        self.stats.refunded_bytes += granted - written;
        self.place(id.index);
    }

    /// The response turned out longer than registered by `more_bytes` (a driver's
    /// estimate fell short: TLS records it could not foresee): its size grows, so it
    /// is granted the rest (an entry with nothing left is never granted), and it is
    /// ranked by the new size.
    pub fn extend(&mut self, id: ConnId, more_bytes: u64) {
        if !self.live(id) {
            debug_assert!(false, "stale id {id:?}");
            return;
        }
        let c = self.conn_mut(id.index);
        c.size_bytes = c.size_bytes.saturating_add(more_bytes);
        if c.outstanding.is_none() {
            self.place(id.index);
        }
    }

    /// The response ended (sent, or the connection failed); an outstanding
    /// grant's bytes count as unwritten. In limited-concurrency mode the
    /// best-ranked waiting response takes the freed slot.
    pub fn finish(&mut self, now_ns: u64, id: ConnId) {
        if !self.live(id) {
            debug_assert!(false, "stale id {id:?}");
            return;
        }
        let c = self.conns[id.index()].take().expect("live slot");
        if let Some(granted) = c.outstanding {
            self.pacer.refund(now_ns, granted, 0);
            self.stats.refunded_bytes += granted;
        }
        match (c.key, c.admitted, c.group) {
            (Some(key), false, _) => {
                self.waiting.remove(&key);
            }
            (Some(key), true, None) => {
                self.ready.remove(&key);
            }
            _ => {}
        }
        if let Some(g) = c.group {
            self.member_gone(g, c.key.filter(|_| c.admitted), c.outstanding.is_some());
        }
        self.generations[id.index()] = self.generations[id.index()].wrapping_add(1);
        self.free.push(id.index);
        if c.admitted && self.limited() {
            self.admitted -= 1;
            if let Some(key @ (_, _, next)) = self.waiting.pop_first() {
                debug_assert_eq!(self.conns[next as usize].as_ref().map(|c| c.key), Some(Some(key)));
                let n = self.conn_mut(next);
                n.admitted = true;
                n.key = None;
                self.admitted += 1;
                self.place(next);
            }
        }
    }

    /// Bytes the response still has to write (tests, diagnostics).
    pub fn app_remaining(&self, id: ConnId) -> Option<u64> {
        self.conns.get(id.index())?.as_ref().filter(|c| c.generation == id.generation).map(Conn::app_remaining)
    }
}

#[cfg(test)]
mod group_tests;
#[cfg(test)]
mod tests;

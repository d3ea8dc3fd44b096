//! One delay line (a client group in one direction): the pure decisions.
//! A packet arrives at a time (ns, any monotonic clock) with a size; the line
//! either drops it (with a cause) or queues it with a release time. No I/O.
//!
//! Per packet, in this order:
//! 1. loss: i.i.d. Bernoulli, or a two-state Gilbert-Elliott chain, from the
//!    line's own seeded stream (netem also decides loss at enqueue);
//! 2. the queue limit (packets and bytes): beyond it the packet is dropped and
//!    counted as overflow, never silently;
//! 3. the optional rate: the packet starts serialising when the previous one is
//!    done, `link_free = max(arrival, link_free) + size / rate`;
//! 4. delay + jitter: `release = start + delay + jitter`, and in `fifo` mode
//!    `max(that, last release)`, so packets leave in arrival order whatever the
//!    jitter (netem with `rate`, rattan's DelayCell). In `reorder` mode each
//!    packet keeps its own jittered time (netem's tfifo) and may overtake.
//!
//! Invariants (property-tested): every packet offered is released once or
//! counted dropped; no packet is released before `arrival + delay - jitter`
//! (before `arrival + delay` when jitter is 0); in fifo mode releases come
//! out in arrival order.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JitterMode {
    /// Release no earlier than the previous packet: never reorders.
    Fifo,
    /// Independent jittered release times (netem's default): may reorder.
    Reorder,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JitterDist {
    /// Uniform in `[-jitter, +jitter]`.
    Uniform,
    /// Normal with standard deviation `jitter`, cut at zero total delay.
    Normal,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "model", rename_all = "lowercase")]
pub enum LossModel {
    Bernoulli {
        p: f64,
    },
    /// Gilbert-Elliott: per packet the chain moves good->bad with `p`,
    /// bad->good with `r`, then the packet is lost with the state's probability.
    Gilbert {
        p: f64,
        r: f64,
        loss_good: f64,
        loss_bad: f64,
    },
}

impl LossModel {
    pub fn bernoulli(p: f64) -> LossModel {
        LossModel::Bernoulli { p }
    }

    /// The long-run loss probability.
    pub fn mean(&self) -> f64 {
        match *self {
            LossModel::Bernoulli { p } => p,
            LossModel::Gilbert { p, r, loss_good, loss_bad } => {
                let bad = p / (p + r);
                bad * loss_bad + (1.0 - bad) * loss_good
            }
        }
    }
}

/// What one line does to every packet.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LineParams {
    pub delay_ns: u64,
    pub jitter_ns: u64,
    pub jitter_dist: JitterDist,
    pub mode: JitterMode,
    pub loss: LossModel,
    pub rate_bits_per_s: Option<u64>,
    pub queue_packets: usize,
    pub queue_bytes: u64,
}

impl LineParams {
    /// A plain delay, no loss, no jitter, no rate; generous limits.
    pub fn delay(delay_ns: u64) -> LineParams {
        LineParams {
            delay_ns,
            jitter_ns: 0,
            jitter_dist: JitterDist::Uniform,
            mode: JitterMode::Fifo,
            loss: LossModel::bernoulli(0.0),
            rate_bits_per_s: None,
            queue_packets: 100_000,
            queue_bytes: 1 << 30,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropCause {
    /// The loss model chose this packet.
    Loss,
    /// The line already held `queue_packets` packets.
    QueuePackets,
    /// Queuing it would exceed `queue_bytes`.
    QueueBytes,
}

/// A dropped packet, handed back with its cause.
#[derive(Debug, PartialEq, Eq)]
pub struct Dropped<T> {
    pub cause: DropCause,
    pub payload: T,
}

/// A packet whose release time has come.
#[derive(Debug, PartialEq, Eq)]
pub struct Released<T> {
    pub release_ns: u64,
    pub size_bytes: u32,
    pub payload: T,
}

/// Cumulative counters of one line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LineCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub dropped_loss: u64,
    pub dropped_queue_packets: u64,
    pub dropped_queue_bytes: u64,
    pub max_queued_packets: u64,
    pub max_queued_bytes: u64,
}

impl LineCounters {
    pub fn dropped(&self) -> u64 {
        self.dropped_loss + self.dropped_queue_packets + self.dropped_queue_bytes
    }
}

struct Entry<T> {
    release_ns: u64,
    seq: u64,
    size_bytes: u32,
    payload: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, o: &Self) -> bool {
        (self.release_ns, self.seq) == (o.release_ns, o.seq)
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.release_ns, self.seq).cmp(&(o.release_ns, o.seq))
    }
}

enum Queue<T> {
    /// Release times never decrease, so a ring suffices.
    Fifo(VecDeque<Entry<T>>),
    /// Earliest release first; ties by arrival.
    Heap(BinaryHeap<Reverse<Entry<T>>>),
}

/// One delay line. `T` is whatever the driver keeps per packet (a buffer).
pub struct DelayLine<T> {
    params: LineParams,
    loss_rng: ChaCha8Rng,
    jitter_rng: ChaCha8Rng,
    gilbert_bad: bool,
    last_release_ns: u64,
    link_free_ns: u64,
    seq: u64,
    queue: Queue<T>,
    queued_bytes: u64,
    counters: LineCounters,
}

impl<T> DelayLine<T> {
    /// A line whose random streams are `(seed, stream)` and `(seed, stream + 1)`
    /// of ChaCha8: loss and jitter draw from separate streams, so turning
    /// jitter on does not change which packets are lost.
    pub fn new(params: LineParams, seed: u64, stream: u64) -> DelayLine<T> {
        let mut loss_rng = ChaCha8Rng::seed_from_u64(seed);
        loss_rng.set_stream(stream);
        let mut jitter_rng = ChaCha8Rng::seed_from_u64(seed);
        jitter_rng.set_stream(stream + 1);
        let queue = match params.mode {
            JitterMode::Fifo => Queue::Fifo(VecDeque::new()),
            JitterMode::Reorder => Queue::Heap(BinaryHeap::new()),
        };
        DelayLine {
            params,
            loss_rng,
            jitter_rng,
            gilbert_bad: false,
            last_release_ns: 0,
            link_free_ns: 0,
            seq: 0,
            queue,
            queued_bytes: 0,
            counters: LineCounters::default(),
        }
    }

    pub fn params(&self) -> &LineParams {
        &self.params
    }

    pub fn counters(&self) -> &LineCounters {
        &self.counters
    }

    pub fn queued_packets(&self) -> usize {
        match &self.queue {
            Queue::Fifo(q) => q.len(),
            Queue::Heap(h) => h.len(),
        }
    }

    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// A packet of `size_bytes` arrives at `now_ns`: its release time, or the
    /// packet back with the reason it was dropped.
    pub fn offer(&mut self, now_ns: u64, size_bytes: u32, payload: T) -> Result<u64, Dropped<T>> {
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += u64::from(size_bytes);
        if self.lose() {
            self.counters.dropped_loss += 1;
            return Err(Dropped { cause: DropCause::Loss, payload });
        }
        if self.queued_packets() >= self.params.queue_packets {
            self.counters.dropped_queue_packets += 1;
            return Err(Dropped { cause: DropCause::QueuePackets, payload });
        }
        if self.queued_bytes + u64::from(size_bytes) > self.params.queue_bytes {
            self.counters.dropped_queue_bytes += 1;
            return Err(Dropped { cause: DropCause::QueueBytes, payload });
        }
        let start_ns = match self.params.rate_bits_per_s {
            Some(rate) => {
                let tx_ns = (u128::from(size_bytes) * 8 * 1_000_000_000).div_ceil(u128::from(rate)) as u64;
                self.link_free_ns = self.link_free_ns.max(now_ns) + tx_ns;
                self.link_free_ns
            }
            None => now_ns,
        };
        let mut release_ns = start_ns.saturating_add_signed(self.jittered_delay_ns());
        if self.params.mode == JitterMode::Fifo {
            release_ns = release_ns.max(self.last_release_ns);
        }
        self.last_release_ns = self.last_release_ns.max(release_ns);
        let entry = Entry { release_ns, seq: self.seq, size_bytes, payload };
        self.seq += 1;
        match &mut self.queue {
            Queue::Fifo(q) => q.push_back(entry),
            Queue::Heap(h) => h.push(Reverse(entry)),
        }
        self.queued_bytes += u64::from(size_bytes);
        let queued = self.queued_packets() as u64;
        self.counters.max_queued_packets = self.counters.max_queued_packets.max(queued);
        self.counters.max_queued_bytes = self.counters.max_queued_bytes.max(self.queued_bytes);
        Ok(release_ns)
    }

    /// The earliest release time queued.
    pub fn next_release_ns(&self) -> Option<u64> {
        match &self.queue {
            Queue::Fifo(q) => q.front().map(|e| e.release_ns),
            Queue::Heap(h) => h.peek().map(|e| e.0.release_ns),
        }
    }

    /// The next packet due at `now_ns`, if any.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<Released<T>> {
        if self.next_release_ns()? > now_ns {
            return None;
        }
        let e = match &mut self.queue {
            Queue::Fifo(q) => q.pop_front()?,
            Queue::Heap(h) => h.pop()?.0,
        };
        self.queued_bytes -= u64::from(e.size_bytes);
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += u64::from(e.size_bytes);
        Some(Released { release_ns: e.release_ns, size_bytes: e.size_bytes, payload: e.payload })
    }

    /// Removes every queued packet (at shutdown), without counting them as sent.
    pub fn drain(&mut self) -> Vec<T> {
        self.queued_bytes = 0;
        match &mut self.queue {
            Queue::Fifo(q) => q.drain(..).map(|e| e.payload).collect(),
            Queue::Heap(h) => h.drain().map(|e| e.0.payload).collect(),
        }
    }

    fn lose(&mut self) -> bool {
        match self.params.loss {
            LossModel::Bernoulli { p } => p > 0.0 && self.loss_rng.gen::<f64>() < p,
            LossModel::Gilbert { p, r, loss_good, loss_bad } => {
                let flip = if self.gilbert_bad { r } else { p };
                if self.loss_rng.gen::<f64>() < flip {
                    self.gilbert_bad = !self.gilbert_bad;
                }
                let loss = if self.gilbert_bad { loss_bad } else { loss_good };
                loss > 0.0 && self.loss_rng.gen::<f64>() < loss
            }
        }
    }

    /// delay + jitter in ns, never below zero in total.
    fn jittered_delay_ns(&mut self) -> i64 {
        let d = self.params.delay_ns as i64;
        let j = self.params.jitter_ns as i64;
        if j == 0 {
            return d;
        }
        let offset = match self.params.jitter_dist {
            JitterDist::Uniform => self.jitter_rng.gen_range(-j..=j),
            JitterDist::Normal => {
                let z: f64 = self.jitter_rng.sample(StandardNormal);
                (z * j as f64) as i64
            }
        };
        (d + offset).max(0)
    }
}

#[cfg(test)]
#[path = "line_tests.rs"]
mod tests;

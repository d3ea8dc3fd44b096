//! Which stream of one HTTP/2 connection sends its next chunk. Pure: streams in, a pick out.
//!
//! An HTTP/2 connection carries many responses at once; the codec would interleave their
//! bytes frame by frame (round robin) if it were given data for several at a time. The
//! server instead gives data to one stream at a time, a bounded chunk per turn, and asks
//! this module whose turn it is. The driver reports each stream's size when its response
//! starts ([`StreamScheduler::add`]), what it sent ([`StreamScheduler::sent`]) and whether
//! the stream's flow-control window is open ([`StreamScheduler::set_window_open`]);
//! [`StreamScheduler::pick`] returns the best-ranked stream with bytes left whose window
//! is open, so a stream the client holds back by its window never holds the connection
//! (work-conserving).
//!
//! Ranking is [`Policy::rank`] on the stream's state (remaining = size − sent, attained =
//! sent): `srpt` sends the stream with the fewest bytes left, `ps` (fair) ranks every
//! stream alike, `las` the least served. Equal ranks go by [`Policy::ties`]: exclusive
//! policies to the earlier stream, fair ones to the stream whose last turn is oldest
//! (round robin; a new stream joins the end of the round).
//!
//! Limits: at most `max_streams` streams (the connection's concurrent-stream limit, at
//! most [`MAX_STREAMS_LIMIT`]); beyond, [`StreamScheduler::add`] refuses. A pick looks at
//! every stream: O(streams) per chunk, bounded by the limit.

use std::cmp::Ordering;

use crate::policy::{compare_ranks, JobState, Policy, TieShare};

/// Most streams one scheduler holds (a bound on the concurrent-stream setting).
pub const MAX_STREAMS_LIMIT: usize = 1 << 16;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamSchedError {
    #[error("stream {id}: already scheduled")]
    Duplicate { id: u32 },
    #[error("stream scheduler full: {max} streams")]
    Full { max: usize },
}

#[derive(Clone, Debug)]
struct Entry {
    id: u32,
    size_bytes: u64,
    sent_bytes: u64,
    window_open: bool,
    /// Order of arrival (exclusive ties).
    arrival_seq: u64,
    /// When it last had a turn, or arrived (fair ties: oldest first).
    last_turn_seq: u64,
}

impl Entry {
    fn remaining_bytes(&self) -> u64 {
        self.size_bytes - self.sent_bytes
    }

    fn state(&self) -> JobState {
        JobState {
            arrival_s: self.arrival_seq as f64,
            size: self.size_bytes as f64,
            remaining: self.remaining_bytes() as f64,
            attained: self.sent_bytes as f64,
            fair_tag: self.arrival_seq as f64,
        }
    }
}

/// The streams of one connection with bytes to send (see the module docs).
#[derive(Clone, Debug)]
pub struct StreamScheduler {
    policy: Policy,
    fair_ties: bool,
    max_streams: usize,
    entries: Vec<Entry>,
    next_seq: u64,
}

impl StreamScheduler {
    /// `max_streams` is clamped to 1..=[`MAX_STREAMS_LIMIT`].
    pub fn new(policy: Policy, max_streams: usize) -> StreamScheduler {
        let fair_ties = policy.ties() == TieShare::Fair;
        let max_streams = max_streams.clamp(1, MAX_STREAMS_LIMIT);
        StreamScheduler { policy, fair_ties, max_streams, entries: Vec::new(), next_seq: 0 }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Streams held (with bytes left or not yet removed).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A response of `size_bytes` starts on stream `id`, its window open.
    pub fn add(&mut self, id: u32, size_bytes: u64) -> Result<(), StreamSchedError> {
        if self.entries.iter().any(|e| e.id == id) {
            return Err(StreamSchedError::Duplicate { id });
        }
        if self.entries.len() >= self.max_streams {
            return Err(StreamSchedError::Full { max: self.max_streams });
        }
        let seq = self.seq();
        self.entries.push(Entry {
            id,
            size_bytes,
            sent_bytes: 0,
            window_open: true,
            arrival_seq: seq,
            last_turn_seq: seq,
        });
        Ok(())
    }

    /// The stream is gone (finished, reset by the client, failed); unknown ids are ignored.
    pub fn remove(&mut self, id: u32) {
        self.entries.retain(|e| e.id != id);
    }

    /// Whether the stream can take bytes now (its flow-control window, as the codec sees it).
    pub fn set_window_open(&mut self, id: u32, open: bool) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.id == id) {
            e.window_open = open;
        }
    }

    /// The stream sent `bytes` (one turn); at most its remaining bytes count.
    pub fn sent(&mut self, id: u32, bytes: u64) {
        let seq = self.seq();
        if let Some(e) = self.entries.iter_mut().find(|e| e.id == id) {
            e.sent_bytes += bytes.min(e.remaining_bytes());
            e.last_turn_seq = seq;
        }
    }

    /// Bytes the stream has left, `None` if unknown.
    pub fn remaining_bytes(&self, id: u32) -> Option<u64> {
        self.entries.iter().find(|e| e.id == id).map(Entry::remaining_bytes)
    }

    /// The stream whose turn it is: the best-ranked one with bytes left and its window open.
    pub fn pick(&self) -> Option<u32> {
        self.entries
            .iter()
            .filter(|e| e.window_open && e.remaining_bytes() > 0)
            .min_by(|a, b| self.order(a, b))
            .map(|e| e.id)
    }

    fn order(&self, a: &Entry, b: &Entry) -> Ordering {
        let by_rank = compare_ranks(self.policy.rank(&a.state()), self.policy.rank(&b.state()));
        let tie = if self.fair_ties { (a.last_turn_seq, b.last_turn_seq) } else { (a.arrival_seq, b.arrival_seq) };
        by_rank.then(tie.0.cmp(&tie.1)).then(a.id.cmp(&b.id))
    }

    fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }
}

#[cfg(test)]
mod tests;

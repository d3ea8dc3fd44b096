//! HTTP/2 under the user-space pacer (`--scheduler user|crovella`): the connection is a
//! group of the server's uplink scheduler ([`crate::usched::GroupReg`]) and each stream
//! with a body one of its members, so streams are ranked with every response of every
//! connection on the uplink, not only with their own connection's.
//!
//! The connection takes a turn when the scheduler grants it, not when
//! [`shortfirst_core::stream_sched`] picks: once the codec has written every DATA byte it
//! was given and the socket is writable (its readiness checked against the kernel's, so
//! `TCP_NOTSENT_LOWAT` holds it back as it does an HTTP/1.1 connection) the connection is
//! offered; a grant names the member (the best-ranked stream of the best connection whose
//! window is open) and its bytes; that stream's chunk, at most the grant on the wire (DATA
//! payload, the 9-byte frame headers, under TLS the record overhead) and at most
//! [`super::TURN_BYTES`], is handed to the codec, and the report says how many of the
//! granted bytes it took. A stream whose window is closed takes nothing: it is reported so
//! and skipped until the client opens it, the connection still offered.
//!
//! A stream whose body ends in one frame within its grant (or whose window is closed)
//! passes the rest of the turn on: the scheduler grants the connection's next best stream at once
//! (`UplinkScheduler::grant_in_group`, within the quantum), so the answers to a page's small
//! requests cost one grant and one write, not one each. The turn ends at a stream that
//! still has bytes, at [`super::TURN_BYTES`], or when the scheduler says so.
//!
//! The socket's readiness comes from a second descriptor of it (`dup`), registered with
//! tokio for writability only: the codec owns the first. Frames other than DATA (headers,
//! settings, window updates) go out when the codec writes them and are charged to the
//! pacer as control bytes with the next report.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::time::Instant;

use super::wire::Written;
use super::{Chunk, Driver, FRAME_BYTES, TURN_BYTES};
use crate::tls::RECORD_OVERHEAD_BYTES;
use crate::usched::{GrantSignal, GroupReg, MemberReport, UserScheduler};

/// An HTTP/2 frame's header, bytes.
const FRAME_HEADER_BYTES: u64 = 9;
/// Readiness events looked at in one poll before yielding (each a `poll(2)` call).
const MAX_READINESS_CHECKS: usize = 8;

/// Where the connection is in its cycle with the scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// Not offered: the codec is writing a chunk, the socket is full, or nothing is to send.
    Idle,
    /// Offered: the next grant of one of its streams is the connection's turn.
    Offered,
}

/// The connection's part in the user-space scheduler (see the module docs).
pub(super) struct Paced {
    group: GroupReg,
    fd: AsyncFd<OwnedFd>,
    pub(super) state: State,
    /// TLS: the record payload size; `None` in cleartext.
    record: Option<usize>,
    /// Bytes of non-DATA frames already charged.
    control_charged: u64,
}

impl Paced {
    /// Opens the connection's group; `fd` is its socket.
    pub(super) fn new(user: &Arc<UserScheduler>, fd: RawFd, record: Option<usize>) -> std::io::Result<Paced> {
        // SAFETY: `fd` is the socket of the transport the caller owns, open for this call.
        let dup = unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()?;
        // SAFETY: the `OwnedFd` is a valid descriptor, open and the same until the
        // `AsyncFd` (which owns it) is dropped.
        let fd = unsafe { AsyncFd::register_with_interest(dup, Interest::WRITABLE) }?;
        Ok(Paced { group: user.open_group()?, fd, state: State::Idle, record, control_charged: 0 })
    }

    pub(super) fn signal(&self) -> GrantSignal {
        self.group.signal()
    }

    pub(super) fn register(&self, body_bytes: u64) -> std::io::Result<crate::usched::Member> {
        self.group.register(wire_bytes(body_bytes, self.record))
    }

    /// Whether the socket takes bytes now; if not, the task is woken when it may.
    pub(super) fn poll_writable(&mut self, cx: &mut Context<'_>) -> bool {
        for _ in 0..MAX_READINESS_CHECKS {
            match self.fd.poll_write_ready(cx) {
                Poll::Pending => return false,
                // The codec meets the error on its own writes.
                Poll::Ready(Err(_)) => return false,
                Poll::Ready(Ok(mut guard)) => {
                    if writable_now(self.fd.get_ref().as_raw_fd()) {
                        return true;
                    }
                    // Stale readiness: wait for the next edge.
                    guard.clear_ready();
                }
            }
        }
        cx.waker().wake_by_ref();
        false
    }

    /// Offers the connection to the scheduler.
    pub(super) fn offer(&mut self) {
        self.group.offer();
        self.state = State::Offered;
    }

    /// Bytes of non-DATA frames written since the last call.
    fn control_bytes(&mut self, written: &Written) -> u64 {
        let other = written.all.load(Relaxed).saturating_sub(written.data.load(Relaxed));
        let new = other.saturating_sub(self.control_charged);
        self.control_charged = other;
        new
    }
}

/// Wire bytes of `body_bytes` of DATA in frames of at most [`FRAME_BYTES`]: the payload, a
/// frame header per frame, under TLS (`record`: the record payload size) the records' overhead.
pub(super) fn wire_bytes(body_bytes: u64, record: Option<usize>) -> u64 {
    let plain = body_bytes + FRAME_HEADER_BYTES * body_bytes.div_ceil(FRAME_BYTES as u64);
    match record {
        None => plain,
        Some(r) => crate::tls::ciphertext_bytes(plain, r),
    }
}

/// The largest DATA payload (at least 1, at most a turn) whose frames fit in a grant of
/// `grant_bytes` on the wire.
pub(super) fn payload_for_grant(grant_bytes: u64, record: Option<usize>) -> usize {
    let frames = grant_bytes.div_ceil(FRAME_BYTES as u64 + FRAME_HEADER_BYTES).max(1);
    let records = record.map_or(0, |r| grant_bytes.div_ceil(r.max(1) as u64));
    let framing = frames * FRAME_HEADER_BYTES + records * RECORD_OVERHEAD_BYTES;
    usize::try_from(grant_bytes.saturating_sub(framing)).unwrap_or(usize::MAX).clamp(1, TURN_BYTES)
}

/// Whether the socket takes bytes now, as `poll(2)` says (`TCP_NOTSENT_LOWAT` included);
/// an error or hang-up counts as writable, so the codec's next write meets it.
fn writable_now(fd: RawFd) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
    // SAFETY: one valid `pollfd`; a zero timeout does not block.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & (libc::POLLOUT | libc::POLLERR | libc::POLLHUP) != 0
}

impl Driver {
    /// A grant arrived (or may have): the granted stream's chunk goes to the codec, the
    /// grant's outcome to the scheduler, and the rest of the turn, if it is passed on, to
    /// the streams the scheduler names next (see the module docs).
    pub(super) fn paced_turn(&mut self) {
        let Some(p) = &mut self.pace else { return };
        let Some(mut grant) = p.group.take_grant() else { return };
        self.last_progress = Instant::now();
        // Wire bytes the turn's chunks took so far; whether any was handed to the codec.
        let (mut turn_bytes, mut handed) = (0u64, false);
        loop {
            let (who, grant_bytes) = grant;
            let Some(step) = self.paced_chunk(who, grant_bytes, turn_bytes, handed) else {
                // The stream ended with its member, which gave the grant back.
                break;
            };
            turn_bytes += step.took_bytes;
            handed |= step.took_bytes > 0;
            let next = if step.pass_on { self.continue_turn(turn_bytes) } else { None };
            if step.last {
                self.end_stream(step.id, true);
            }
            match next {
                Some(g) => grant = g,
                None => break,
            }
        }
        if let Some(p) = &mut self.pace {
            // Nothing handed: the connection still takes bytes, still offered.
            p.state = if handed { State::Idle } else { State::Offered };
        }
    }

    /// Member `who`'s chunk of at most `grant_bytes` on the wire (and what is left of the
    /// turn), reported; `None` if its stream is gone.
    fn paced_chunk(&mut self, who: usize, grant_bytes: u64, turn_bytes: u64, handed: bool) -> Option<PacedStep> {
        let p = self.pace.as_mut()?;
        let record = p.record;
        let control_bytes = p.control_bytes(&self.written);
        let found = self.streams.iter().find(|(_, s)| s.member.as_ref().is_some_and(|m| m.index() == who));
        let id = found.map(|(&id, _)| id)?;
        let room = (TURN_BYTES as u64).saturating_sub(turn_bytes).max(1);
        let (took_bytes, window_open, last, one_frame) =
            match self.send_chunk(id, payload_for_grant(grant_bytes.min(room), record)) {
                Chunk::Sent { bytes, last } => {
                    let s = self.streams.get_mut(&id).expect("the stream just sent");
                    let left = wire_bytes(self.sched.remaining_bytes(id).unwrap_or(0), record);
                    let took = s.wire_left_bytes.saturating_sub(left);
                    s.wire_left_bytes = left;
                    (took, true, last, bytes <= FRAME_BYTES)
                }
                Chunk::Blocked => (0, false, false, true),
                // Ended with its member: the grant went back with it.
                Chunk::Gone => return None,
            };
        let band = self.gauge_band;
        let member = self.streams.get(&id).and_then(|s| s.member.as_ref())?;
        member.report(MemberReport {
            written_bytes: took_bytes,
            granted_bytes: grant_bytes,
            band,
            group_writable: !handed && took_bytes == 0,
            window_open,
            control_bytes,
        });
        // Only a chunk of one frame may have another stream's behind it in the codec (see
        // the parent module's docs).
        Some(PacedStep { id, took_bytes, last, pass_on: (last && one_frame) || !window_open })
    }

    /// The rest of the turn, if the scheduler grants it: the member and its bytes.
    fn continue_turn(&mut self, turn_bytes: u64) -> Option<(usize, u64)> {
        if turn_bytes >= TURN_BYTES as u64 {
            return None;
        }
        self.pace.as_ref()?.group.grant_in_group(turn_bytes)
    }
}

/// What one stream's part of a turn did.
struct PacedStep {
    id: u32,
    /// Wire bytes its chunk took.
    took_bytes: u64,
    /// Its body is all handed: the caller ends it.
    last: bool,
    /// It leaves the rest of the turn to the next stream (its body ended in one frame, or
    /// its window is closed).
    pass_on: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_carries_the_frames_whose_wire_bytes_fit_in_it() {
        for record in [None, Some(16_355), Some(1_000)] {
            for grant in [1_448u64, 2_000, 16_384, 16_393, 16_422, 40_000, 65_600, 117_000] {
                let n = payload_for_grant(grant, record) as u64;
                assert!(wire_bytes(n, record) <= grant, "{grant} {record:?}: payload {n}");
                assert!(n <= TURN_BYTES as u64);
                if grant < 60_000 {
                    assert!(wire_bytes(n + 100, record) > grant, "{grant} {record:?}: {n} leaves too much");
                }
            }
        }
        // A grant of a frame and its header carries the whole frame; a large one, a turn.
        assert_eq!(payload_for_grant(16_384 + 9, None), FRAME_BYTES);
        assert_eq!(payload_for_grant(1 << 20, Some(16_355)), TURN_BYTES);
        assert_eq!(payload_for_grant(1, None), 1, "never nothing");
    }

    #[test]
    fn a_body_is_counted_on_the_wire_with_its_framing() {
        assert_eq!(wire_bytes(0, None), 0);
        assert_eq!(wire_bytes(100, None), 109);
        assert_eq!(wire_bytes(FRAME_BYTES as u64 + 1, None), FRAME_BYTES as u64 + 1 + 18);
        assert_eq!(wire_bytes(100, Some(16_355)), 109 + RECORD_OVERHEAD_BYTES);
        // What is left never grows as a body is sent, so a report never takes back bytes.
        let mut last = u64::MAX;
        for left in (0..100_000u64).rev().step_by(997) {
            let w = wire_bytes(left, Some(16_355));
            assert!(w <= last);
            last = w;
        }
    }
}

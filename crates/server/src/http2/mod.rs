//! HTTP/2: over TLS when ALPN picks `h2`, and in cleartext with prior knowledge (h2c: the
//! connection preface on the plaintext listener). The `h2` crate is the codec; which
//! stream's bytes go next is decided here, by [`shortfirst_core::stream_sched`].
//!
//! One task per connection drives the codec and its streams:
//! - a request (a new stream) is answered by the same code as over HTTP/1.1
//!   ([`crate::conn::Responder`], through [`request`]) once the client has ended its
//!   stream: a request body is read and discarded first (at most
//!   [`MAX_DISCARDED_BODY_BYTES`]), so the codec checks what follows the request's HEADERS
//!   (its DATA against `content-length`, trailers) while the stream is still open; the
//!   answer's HEADERS go out at once; its body joins the stream scheduler with its size;
//! - bodies go out in turns of at most [`TURN_BYTES`]: each turn, the best-ranked stream
//!   whose flow-control window is open (fewest bytes left under SRPT, the oldest turn under
//!   fair) gets a chunk; a stream whose window is closed is skipped until the client opens
//!   it (work-conserving). A stream whose body ends in one frame within the turn leaves the
//!   rest of the turn to the next best, as long as it is in the same kernel band: the
//!   answers to a page's small requests leave together, in one write;
//! - the next turn waits until the codec has written every DATA byte of the last one
//!   ([`wire`]). Within a turn only its last stream can have more than one frame, and the
//!   codec sends one frame of each stream in turn (a stream with more goes to the back of
//!   its queue), so its own round robin has nothing to interleave: the order on the wire
//!   is the scheduler's. The socket's `TCP_NOTSENT_LOWAT` bounds what waits below it;
//! - while the task works through what is ready, the codec's writes are held, up to one
//!   TLS record's payload, and written together before it waits ([`batch`]): the answers to
//!   requests that arrived together leave together, in the scheduler's order;
//! - the connection's kernel band follows the stream being written (the band of its
//!   remaining bytes): a connection carries one band at a time, so a small stream behind a
//!   large one on the same connection shares its band for the length of one turn;
//! - under the user-space pacer the turn is the uplink scheduler's instead ([`paced`]):
//!   the connection is a group, each stream a member ranked with every response of every
//!   connection, and a grant names the stream whose chunk goes next.
//!
//! Limits (each bounded, see the constants): streams open at once
//! (`http2-max-concurrent-streams`, refused beyond with `REFUSED_STREAM` by the codec),
//! the header list (`max-header-bytes`; a longer one is refused, CONTINUATION frames beyond
//! it end the connection), streams reset by the client before they were answered (rapid
//! reset), resets the server had to send, DATA frames that are mostly framing, and a
//! connection that makes no progress for `send-timeout` while it has bytes to send (a
//! client that never reads or keeps every window closed). SETTINGS and PING floods are
//! bounded by the codec itself: it reads the next frame only once the acknowledgement of
//! the previous one is written, so a client that floods and never reads stalls itself.
//!
//! Shutdown sends GOAWAY: streams in progress finish (within the drain timeout), new
//! ones are refused.

pub mod batch;
pub mod metrics;
mod paced;
pub mod request;
pub mod wire;

pub use metrics::Http2Metrics;

use std::collections::HashMap;
use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::server::{Connection, SendResponse};
use h2::{Reason, RecvStream, SendStream};
use shortfirst_core::bands::Band;
use shortfirst_core::policy::Policy as CorePolicy;
use shortfirst_core::stream_sched::StreamScheduler;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::access_log::{self, Entry};
use crate::config::{Policy, ServerConfig};
use crate::conn::{Body, Responder};
use crate::http::Status;
use crate::live::ConnSettings;
use crate::sched::{BandSocket, CutoffsCache};
use crate::server::Shared;
use batch::{Batched, Hold};
use wire::{Counted, Written};

/// A DATA frame's payload, at most: every peer takes frames of 16 KiB.
pub const FRAME_BYTES: usize = 16 * 1024;
/// DATA bytes one turn gives the codec, at most: four frames, so a large body is not cut
/// into a wake-up and a write per frame, and a turn's wait on a better stream of the same
/// connection stays short. What the codec holds per connection is bounded by one turn.
pub const TURN_BYTES: usize = 4 * FRAME_BYTES;
/// Streams the client reset before the server answered them, pending at once; beyond,
/// the connection ends with `ENHANCE_YOUR_CALM` (rapid reset).
pub const MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 20;
/// Streams the server had to reset because of the client's errors, over the connection's
/// life; beyond, the connection ends with `ENHANCE_YOUR_CALM`.
pub const MAX_LOCAL_ERROR_RESET_STREAMS: usize = 256;
/// Reset streams remembered (to tell late frames for them from protocol errors).
pub const MAX_CONCURRENT_RESET_STREAMS: usize = 10;
/// How long a reset stream is remembered.
pub const RESET_STREAM_DURATION: Duration = Duration::from_secs(1);
/// Bytes of DATA-frame framing (headers, padding, empty frames) the client may send beyond
/// its data before the connection ends with `ENHANCE_YOUR_CALM`.
pub const DATA_FRAME_BUDGET_BYTES: usize = 64 * 1024;
/// The codec's own send buffer per stream: one turn (it never holds more, see the module docs).
pub const MAX_SEND_BUFFER_BYTES: usize = TURN_BYTES;

/// The ALPN protocol name and the cleartext preface (RFC 9113 §3.4).
pub const ALPN: &[u8] = b"h2";
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether `serve` speaks HTTP/2: the `http2` setting (under the kernel's bands and the
/// user-space pacer alike).
pub fn enabled(config: &ServerConfig) -> bool {
    config.http2
}

/// How a connection's streams are ranked: fair → round robin, las → least served, every
/// size-based policy → exact SRPT (within one connection nothing stands between the
/// server and the order of its own frames, so the kernel's classes are not needed).
pub fn stream_policy(policy: Policy) -> CorePolicy {
    match policy {
        Policy::Fair => CorePolicy::Ps,
        Policy::Las => CorePolicy::Las,
        Policy::Srpt | Policy::Srpt2 | Policy::Srrt => CorePolicy::Srpt,
    }
}

fn builder(config: &ServerConfig) -> h2::server::Builder {
    let mut b = h2::server::Builder::new();
    b.max_concurrent_streams(config.http2_max_concurrent_streams)
        .max_header_list_size(u32::try_from(config.max_header_bytes).unwrap_or(u32::MAX))
        .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESET_STREAMS)
        .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESET_STREAMS))
        .max_concurrent_reset_streams(MAX_CONCURRENT_RESET_STREAMS)
        .reset_stream_duration(RESET_STREAM_DURATION)
        .data_frame_budget(DATA_FRAME_BUDGET_BYTES)
        .max_send_buffer_size(MAX_SEND_BUFFER_BYTES);
    b
}

/// What one HTTP/2 connection needs from its accept path.
pub(crate) struct Accepted {
    pub peer: SocketAddr,
    /// `TLSv1.3`, `TLSv1.2`; `None` for h2c.
    pub tls: Option<&'static str>,
    /// The socket's band (created before the socket moved under the codec).
    pub band: BandSocket,
}

/// A response body still to send.
enum Source {
    Memory(Bytes),
    File { file: Arc<File>, offset: u64 },
}

/// A stream whose body is being sent.
struct Stream {
    send: SendStream<Bytes>,
    source: Source,
    status: Status,
    sent_bytes: u64,
    /// Waiting for the client to open its window (capacity reserved, none assigned).
    blocked: bool,
    /// Under the user-space pacer: its registration, and its wire bytes left as registered.
    member: Option<crate::usched::Member>,
    wire_left_bytes: u64,
    started: Instant,
    first_band: Band,
    log: LogFields,
}

/// What the access log shows of a request.
#[derive(Default)]
struct LogFields {
    request_line: Vec<u8>,
    referer: Option<Vec<u8>>,
    user_agent: Option<Vec<u8>>,
}

/// A request body read and discarded beyond this ends the stream with `CANCEL` unanswered:
/// a static server has no use for one.
pub(crate) const MAX_DISCARDED_BODY_BYTES: u64 = 1 << 20;

/// A request waiting for the end of its body, and how much of it was discarded.
struct Unread {
    request: Box<(http::Request<RecvStream>, SendResponse<Bytes>)>,
    discarded_bytes: u64,
}

/// What one chunk of a stream did.
enum Chunk {
    /// `bytes` handed to the codec; `last`: the stream's body is all handed (the caller
    /// ends it).
    Sent { bytes: usize, last: bool },
    /// Its window (or the connection's) is closed: skipped until the client opens it.
    Blocked,
    /// The stream is gone (reset, failed) and ended.
    Gone,
}

enum Event {
    Request(Box<(http::Request<RecvStream>, SendResponse<Bytes>)>),
    Turn,
    /// Under the pacer: the codec wrote its last chunk and the socket takes bytes.
    Writable,
    /// Under the pacer: a grant may be in the connection's slot.
    Granted,
    Closed,
    Stop,
    Stalled,
}

/// One HTTP/2 connection (see the module docs).
struct Driver {
    shared: Arc<Shared>,
    accepted: Accepted,
    remote: Vec<u8>,
    responder: Responder,
    sched: StreamScheduler,
    streams: HashMap<u32, Stream>,
    cutoffs: CutoffsCache,
    /// DATA bytes given to the codec, and what it wrote (shared with [`wire::Counted`]).
    handed_bytes: u64,
    written: Arc<Written>,
    /// Under the user-space pacer: the connection's group.
    pace: Option<paced::Paced>,
    /// The stream given the last chunk (its chunk may be dropped if it is reset).
    last_stream: Option<u32>,
    gauge_band: Band,
    last_progress: Instant,
    last_written: u64,
    req_buf: Vec<u8>,
    /// Requests whose body the client is still sending (bounded by the stream limit).
    unread: Vec<Unread>,
    log_line: Vec<u8>,
    chunk_buf: Vec<u8>,
    /// Timeouts and head limits as configured when the connection started.
    settings: ConnSettings,
    /// Whether the codec's writes are held now ([`batch`]).
    hold: Hold,
}

/// Serves one HTTP/2 connection on `io` until it closes, fails, or the server shuts down.
pub(crate) async fn serve<T>(shared: Arc<Shared>, io: T, accepted: Accepted, mut stop: watch::Receiver<bool>)
where
    T: AsyncRead + AsyncWrite + AsRawFd + Unpin,
{
    let pace = match &shared.user {
        None => None,
        Some(user) => {
            let record = accepted.tls.is_some().then_some(shared.record_payload_bytes);
            match paced::Paced::new(user, io.as_raw_fd(), record) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!(peer = %accepted.peer, error = %e, "HTTP/2 connection not scheduled: closed");
                    return;
                }
            }
        }
    };
    let written = Arc::new(Written::default());
    let hold = Hold::default();
    let io = Counted::new(Batched::new(io, hold.clone()), written.clone(), &shared.http2_metrics.error_frames);
    let live = shared.live();
    let settings = live.conn_settings();
    let handshake = tokio::time::timeout(settings.header_timeout, builder(&live.config).handshake(io));
    drop(live);
    let conn = tokio::select! {
        r = handshake => r,
        _ = stop.changed() => return,
    };
    let mut conn: Connection<Counted<Batched<T>>, Bytes> = match conn {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!(peer = %accepted.peer, error = %e, "HTTP/2 handshake failed");
            return;
        }
        Err(_elapsed) => return,
    };
    shared.metrics.connection_opened();
    shared.http2_metrics.connections.fetch_add(1, Relaxed);
    let mut d = Driver::new(shared, accepted, written, settings, hold);
    d.pace = pace;
    d.run(&mut conn, &mut stop).await;
    d.shared.metrics.connection_closed(d.gauge_band);
}

impl Driver {
    fn new(
        shared: Arc<Shared>,
        accepted: Accepted,
        written: Arc<Written>,
        settings: ConnSettings,
        hold: Hold,
    ) -> Driver {
        let max_streams = shared.config.http2_max_concurrent_streams as usize;
        Driver {
            remote: accepted.peer.ip().to_string().into_bytes(),
            responder: Responder::new(shared.clone()),
            sched: StreamScheduler::new(stream_policy(shared.config.policy), max_streams),
            streams: HashMap::new(),
            cutoffs: CutoffsCache::new(&shared.cutoff_chooser),
            handed_bytes: 0,
            written,
            pace: None,
            last_stream: None,
            gauge_band: Band::SETUP,
            last_progress: Instant::now(),
            last_written: 0,
            req_buf: Vec::with_capacity(1024),
            unread: Vec::new(),
            log_line: Vec::with_capacity(512),
            chunk_buf: Vec::new(),
            accepted,
            shared,
            settings,
            hold,
        }
    }

    async fn run<T: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        conn: &mut Connection<Counted<T>, Bytes>,
        stop: &mut watch::Receiver<bool>,
    ) {
        let mut stopping = *stop.borrow();
        if stopping {
            conn.graceful_shutdown();
        }
        let signal = self.pace.as_ref().map(paced::Paced::signal);
        loop {
            let idle = self.streams.is_empty();
            let deadline =
                self.last_progress + if idle { self.settings.idle_timeout } else { self.settings.send_timeout };
            let offered = self.pace.as_ref().is_some_and(|p| p.state == paced::State::Offered);
            // Waiting behind better responses is the schedule, not a stall.
            let scheduled = offered && self.sched.pick().is_some();
            let event = tokio::select! {
                e = std::future::poll_fn(|cx| self.poll_event(cx, conn)) => e,
                _ = stop.changed(), if !stopping => Event::Stop,
                _ = tokio::time::sleep_until(deadline), if !scheduled => Event::Stalled,
                () = wait_grant(signal.as_ref()), if offered => Event::Granted,
            };
            match event {
                Event::Request(accepted) if !accepted.0.body().is_end_stream() => {
                    self.last_progress = Instant::now();
                    self.unread.push(Unread { request: accepted, discarded_bytes: 0 });
                }
                Event::Request(accepted) => {
                    self.last_progress = Instant::now();
                    let (req, respond) = *accepted;
                    self.on_request(req, respond).await;
                }
                Event::Turn => self.turn(),
                Event::Writable => {
                    if let Some(p) = &mut self.pace {
                        p.offer();
                    }
                }
                Event::Granted => self.paced_turn(),
                Event::Stop => {
                    stopping = true;
                    conn.graceful_shutdown();
                }
                Event::Stalled if idle && !stopping => {
                    // Idle for the idle timeout: GOAWAY; the codec closes once the client
                    // acknowledges it, or the connection is dropped after another timeout.
                    stopping = true;
                    conn.graceful_shutdown();
                    self.shared.http2_metrics.idle_goaways.fetch_add(1, Relaxed);
                    self.last_progress = Instant::now();
                }
                Event::Stalled => {
                    tracing::debug!(peer = %self.accepted.peer, idle, "HTTP/2 connection made no progress: closed");
                    if !idle {
                        self.shared.http2_metrics.stalled.fetch_add(1, Relaxed);
                    }
                    conn.abrupt_shutdown(Reason::NO_ERROR);
                    self.cut_all();
                    return;
                }
                Event::Closed => {
                    self.cut_all();
                    return;
                }
            }
        }
    }

    /// Drives the codec (reads frames, writes what it holds), then the streams; the next
    /// thing to do, if any. What the codec writes meanwhile is held ([`batch`]) and written
    /// before it returns `Pending`.
    fn poll_event<T: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        conn: &mut Connection<Counted<T>, Bytes>,
    ) -> Poll<Event> {
        self.hold.hold();
        if let Poll::Ready(event) = self.poll_ready_event(cx, conn) {
            return Poll::Ready(event);
        }
        // Nothing left to do: one more poll of the codec writes what it was given.
        self.hold.release();
        self.poll_codec(cx, conn)
    }

    /// The codec's next event: a request, or its end.
    fn poll_codec<T: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        conn: &mut Connection<Counted<T>, Bytes>,
    ) -> Poll<Event> {
        match conn.poll_accept(cx) {
            Poll::Ready(Some(Ok(accepted))) => Poll::Ready(Event::Request(Box::new(accepted))),
            Poll::Ready(Some(Err(e))) => {
                tracing::debug!(peer = %self.accepted.peer, error = %e, "HTTP/2 connection failed");
                Poll::Ready(Event::Closed)
            }
            Poll::Ready(None) => Poll::Ready(Event::Closed),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_ready_event<T: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        conn: &mut Connection<Counted<T>, Bytes>,
    ) -> Poll<Event> {
        if let Poll::Ready(event) = self.poll_codec(cx, conn) {
            return Poll::Ready(event);
        }
        if let Some(ended) = self.poll_unread(cx) {
            return Poll::Ready(Event::Request(ended));
        }
        let written = self.written.data.load(Relaxed);
        if written != self.last_written {
            self.last_written = written;
            self.last_progress = Instant::now();
        }
        self.poll_streams(cx);
        if written >= self.handed_bytes && self.sched.pick().is_some() {
            match &mut self.pace {
                None => return Poll::Ready(Event::Turn),
                Some(p) if p.state == paced::State::Idle => {
                    if p.poll_writable(cx) {
                        return Poll::Ready(Event::Writable);
                    }
                }
                Some(_) => {}
            }
        }
        Poll::Pending
    }

    /// Reads (and discards) the bodies and trailers of the requests still being sent; the
    /// first request whose stream the client ended, if any. A body the codec finds malformed (it resets the
    /// stream), or one past [`MAX_DISCARDED_BODY_BYTES`], ends its request unanswered.
    fn poll_unread(&mut self, cx: &mut Context<'_>) -> Option<Box<(http::Request<RecvStream>, SendResponse<Bytes>)>> {
        let mut i = 0;
        while i < self.unread.len() {
            let u = &mut self.unread[i];
            let body = u.request.0.body_mut();
            let outcome = loop {
                match body.poll_data(cx) {
                    Poll::Ready(Some(Ok(chunk))) => {
                        let _ = body.flow_control().release_capacity(chunk.len());
                        u.discarded_bytes = u.discarded_bytes.saturating_add(chunk.len() as u64);
                        if u.discarded_bytes > MAX_DISCARDED_BODY_BYTES {
                            u.request.1.send_reset(Reason::CANCEL);
                            break Some(false);
                        }
                    }
                    Poll::Ready(Some(Err(_))) => break Some(false),
                    // The DATA ended; trailers, if the client sends any, end the stream.
                    Poll::Ready(None) => match body.poll_trailers(cx) {
                        Poll::Ready(Ok(_)) => break Some(true),
                        Poll::Ready(Err(_)) => break Some(false),
                        Poll::Pending => break None,
                    },
                    Poll::Pending => break None,
                }
            };
            match outcome {
                None => i += 1,
                Some(false) => drop(self.unread.swap_remove(i)),
                Some(true) => return Some(self.unread.swap_remove(i).request),
            }
        }
        None
    }

    /// Streams the client reset are dropped; blocked ones whose window opened are unblocked.
    fn poll_streams(&mut self, cx: &mut Context<'_>) {
        let mut gone = Vec::new();
        for (&id, s) in &mut self.streams {
            if s.send.poll_reset(cx).is_ready() {
                gone.push(id);
                continue;
            }
            if s.blocked {
                match s.send.poll_capacity(cx) {
                    Poll::Ready(Some(Ok(n))) if n > 0 => {
                        s.blocked = false;
                        self.sched.set_window_open(id, true);
                        if let Some(m) = &s.member {
                            m.set_window_open(true);
                        }
                    }
                    Poll::Ready(None | Some(Err(_))) => gone.push(id),
                    _ => {}
                }
            }
        }
        for id in gone {
            self.end_stream(id, false);
        }
    }

    /// A new stream: answered by the HTTP/1.1 machinery, its head sent, its body scheduled.
    async fn on_request(&mut self, req: http::Request<RecvStream>, mut respond: SendResponse<Bytes>) {
        let started = Instant::now();
        let id = respond.stream_id().as_u32();
        let (parts, _body) = req.into_parts();
        let mut log = LogFields::default();
        request::log_line(&parts, &mut log.request_line);
        let field = |name| parts.headers.get(name).map(|v: &http::HeaderValue| v.as_bytes().to_vec());
        log.referer = field(http::header::REFERER);
        log.user_agent = field(http::header::USER_AGENT);
        let plaintext = self.accepted.tls.is_none();
        let answer = match request::to_http1(&parts, &mut self.req_buf, &self.settings.parse) {
            Ok(r) => self.responder.answer(&self.req_buf, &r, true, plaintext).await,
            Err(status) => self.responder.error(status, None, true),
        };
        let head = &self.responder.head;
        let (head_len, source, len) = match answer.body {
            Body::None => (head.len(), None, 0),
            Body::InHead { len } => {
                let at = head.len() - len;
                (at, Some(Source::Memory(Bytes::copy_from_slice(&head[at..]))), len as u64)
            }
            Body::File { file, offset, len } => (head.len(), Some(Source::File { file, offset }), len),
        };
        let response = match request::from_http1(&head[..head_len]) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "HTTP/2 response head");
                respond.send_reset(Reason::INTERNAL_ERROR);
                return;
            }
        };
        self.shared.cutoff_chooser.refresh(&mut self.cutoffs);
        let first_band = self.cutoffs.cutoffs.band_for_remaining(len);
        let send = match respond.send_response(response, source.is_none()) {
            Ok(send) => send,
            Err(e) => {
                tracing::debug!(error = %e, "HTTP/2 stream gone before its response");
                return;
            }
        };
        let mut s = Stream {
            send,
            source: source.unwrap_or(Source::Memory(Bytes::new())),
            status: answer.status,
            sent_bytes: 0,
            blocked: false,
            member: None,
            wire_left_bytes: 0,
            started,
            first_band,
            log,
        };
        // No body, or no room (impossible within the codec's stream limit, and the
        // scheduler's sized to it): done.
        let scheduled = len > 0 && self.sched.add(id, len).is_ok() && self.register_member(&mut s, len);
        if !scheduled {
            if len > 0 {
                self.sched.remove(id);
                s.send.send_reset(Reason::REFUSED_STREAM);
            }
            self.log(id, &s, len == 0);
            return;
        }
        self.streams.insert(id, s);
    }

    /// Under the user-space pacer, registers the stream's body with the uplink scheduler;
    /// false if it is full.
    fn register_member(&mut self, s: &mut Stream, body_bytes: u64) -> bool {
        let Some(p) = &self.pace else { return true };
        match p.register(body_bytes) {
            Ok(m) => {
                s.wire_left_bytes = paced::wire_bytes(
                    body_bytes,
                    self.accepted.tls.is_some().then_some(self.shared.record_payload_bytes),
                );
                s.member = Some(m);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "HTTP/2 stream not scheduled: refused");
                false
            }
        }
    }

    /// A turn: chunks to the best streams whose windows are open, at most [`TURN_BYTES`],
    /// the next stream only after one whose body ended in one frame, and in its band (see
    /// the module docs).
    fn turn(&mut self) {
        let mut turn_bytes = 0;
        let mut turn_band = None;
        while turn_bytes < TURN_BYTES {
            let Some(id) = self.sched.pick() else { return };
            let band = self.cutoffs.cutoffs.band_for_remaining(self.sched.remaining_bytes(id).unwrap_or(0));
            if turn_band.is_some_and(|b| b != band) {
                return;
            }
            match self.send_chunk(id, TURN_BYTES - turn_bytes) {
                Chunk::Sent { bytes, last: true } if bytes <= FRAME_BYTES => {
                    turn_bytes += bytes;
                    turn_band = Some(band);
                    self.end_stream(id, true);
                }
                Chunk::Sent { last: true, .. } => {
                    self.end_stream(id, true);
                    return;
                }
                Chunk::Sent { last: false, .. } => return,
                Chunk::Blocked | Chunk::Gone => {}
            }
        }
    }

    /// At most `max` bytes of stream `id`'s body to the codec, as its window allows.
    fn send_chunk(&mut self, id: u32, max: usize) -> Chunk {
        let remaining = self.sched.remaining_bytes(id).unwrap_or(0);
        let Some(s) = self.streams.get_mut(&id) else {
            self.sched.remove(id);
            return Chunk::Gone;
        };
        let want = usize::try_from(remaining).unwrap_or(usize::MAX).min(max);
        s.send.reserve_capacity(want);
        let capacity = s.send.capacity();
        if capacity == 0 {
            // Its window (or the connection's) is closed: skip it until it opens.
            s.blocked = true;
            self.sched.set_window_open(id, false);
            return Chunk::Blocked;
        }
        let n = capacity.min(want);
        let chunk = match read_chunk(&mut s.source, s.sent_bytes, n, &mut self.chunk_buf) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "HTTP/2 response body could not be read: stream reset");
                s.send.send_reset(Reason::INTERNAL_ERROR);
                self.end_stream(id, false);
                return Chunk::Gone;
            }
        };
        let last = n as u64 == remaining;
        if s.send.send_data(chunk, last).is_err() {
            self.end_stream(id, false);
            return Chunk::Gone;
        }
        s.sent_bytes += n as u64;
        self.handed_bytes += n as u64;
        self.last_stream = Some(id);
        self.sched.sent(id, n as u64);
        // The connection's band follows the stream being written.
        let band = self.cutoffs.cutoffs.band_for_remaining(remaining);
        self.set_band(band);
        self.shared.metrics.bytes(band, n as u64);
        Chunk::Sent { bytes: n, last }
    }

    fn set_band(&mut self, band: Band) {
        self.accepted.band.set(band);
        self.shared.metrics.connection_moved(self.gauge_band, band);
        self.gauge_band = band;
    }

    /// The stream is done (`complete`) or cut: logged and forgotten.
    fn end_stream(&mut self, id: u32, complete: bool) {
        self.sched.remove(id);
        let Some(s) = self.streams.remove(&id) else { return };
        if self.streams.is_empty() {
            // Nothing to send: shown in the set-up band, as an idle HTTP/1.1 connection is.
            self.shared.metrics.connection_moved(self.gauge_band, Band::SETUP);
            self.gauge_band = Band::SETUP;
        }
        if !complete {
            self.shared.http2_metrics.streams_cut.fetch_add(1, Relaxed);
        }
        if !complete && self.last_stream == Some(id) {
            // Its last chunk may never be written (a reset stream's data is dropped).
            self.handed_bytes = self.handed_bytes.min(self.written.data.load(Relaxed));
        }
        self.log(id, &s, complete);
    }

    /// The connection ended: every stream still sending is cut.
    fn cut_all(&mut self) {
        let ids: Vec<u32> = self.streams.keys().copied().collect();
        for id in ids {
            self.end_stream(id, false);
        }
    }

    fn log(&mut self, id: u32, s: &Stream, complete: bool) {
        let elapsed = s.started.elapsed();
        if complete {
            self.shared.metrics.response(s.first_band, s.status.code, elapsed);
        }
        self.shared.tls_metrics.response_h2(self.accepted.tls);
        let live = self.shared.live();
        let Some(log) = &live.access_log else { return };
        let entry = Entry {
            remote: &self.remote,
            request_line: &s.log.request_line,
            status: s.status.code,
            body_bytes: s.sent_bytes,
            referer: s.log.referer.as_deref(),
            user_agent: s.log.user_agent.as_deref(),
            response_time: elapsed,
            band: s.first_band,
            tls: self.accepted.tls,
            protocol: access_log::Protocol::Http2 { stream: id },
        };
        access_log::format_line(&mut self.log_line, log.format(), &entry);
        log.push(&self.log_line);
    }
}

/// Until a grant may be in the connection's slot; never without a pacer.
async fn wait_grant(signal: Option<&crate::usched::GrantSignal>) {
    match signal {
        Some(s) => s.wait().await,
        None => std::future::pending().await,
    }
}

/// The next `n` bytes of a body, `sent` of which have gone.
fn read_chunk(source: &mut Source, sent: u64, n: usize, buf: &mut Vec<u8>) -> std::io::Result<Bytes> {
    match source {
        Source::Memory(bytes) => Ok(bytes.split_to(n.min(bytes.len()))),
        Source::File { file, offset } => {
            buf.resize(n, 0);
            let mut got = 0;
            while got < n {
                match file.read_at(&mut buf[got..n], *offset + sent + got as u64)? {
                    0 => {
                        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "file shrank while sending"))
                    }
                    k => got += k,
                }
            }
            Ok(Bytes::copy_from_slice(&buf[..n]))
        }
    }
}

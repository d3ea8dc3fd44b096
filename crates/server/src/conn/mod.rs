//! One client connection: the HTTP/1.1 state machine.
//!
//! ```text
//!   ┌──────────────┐ bytes  ┌──────────┐ head  ┌─────────┐ size known ┌────────────┐
//!   │ Idle (band 0)│──────▶│ ReadHead │──────▶│ Resolve │───────────▶│ Send       │
//!   └──────────────┘        └──────────┘       └─────────┘ set band   │ head+body, │
//!         ▲   idle timeout /     │ header timeout → 408, limits →       │ 1 setsockopt│
//!         │   shutdown → close   │ 414/431/400/501/505, then close      │ per crossing│
//!         └──────────────────────┴──── keep-alive ◀─────────────────────┴────────────┘
//! ```
//!
//! A new connection gets the header timeout, not the idle timeout, for its
//! first byte: the idle timeout is for keep-alive between requests, and a
//! client that connects and never speaks must not hold a slot any longer than
//! one that speaks slowly (slowloris).
//!
//! Request bodies mean nothing to GET and HEAD (RFC 9110 §9.3.1) but are read
//! and discarded to find the next request: a `Content-Length` body after the
//! response, a chunked one before it (so that a body too large or malformed
//! is answered 413 or 400 instead of the file).
//!
//! Pipelined requests are parsed one after another from the read buffer and
//! answered in order. The read buffer is `max-header-bytes` long and reused;
//! the head, path and log buffers are reused too, so a request allocates
//! nothing. Every response's band is set before its first byte is written,
//! from its own size (head + body): no response data ever leaves in band 0.
//!
//! Over TLS (`Transport::Tls`, after the handshake) the same machine runs; a
//! response is then ranked by its ciphertext bytes (`tls::ciphertext_bytes`) and
//! written by `tls_send` instead of `send`/`sendfile`.

mod dir_listing;
mod heads;
mod representation;
mod respond;
mod tls_send;
mod transport;

pub(crate) use respond::Responder;
pub(crate) use transport::Transport;

use std::fs::File;
use std::net::SocketAddr;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::Duration;

use shortfirst_core::bands::Band;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::access_log::{self, Entry};
use crate::http::chunked::{self, Decoder};
use crate::http::parse::{self, FieldLines, Method, Request, MAX_LIST_LINES};
use crate::http::precondition::{self, Conditions, Validators, Verdict};
use crate::http::response::FileVersion;
use crate::http::Status;
use crate::io;
use crate::live::ConnSettings;
use crate::resolve::Refusal;
use crate::sched::{BandSocket, CutoffsCache};
use crate::server::Shared;
use crate::srrt::BandTracker;

/// After the last response of a closing connection, how long unread client
/// bytes are drained so the close does not reset the response away (lingering close).
const LINGER: Duration = Duration::from_secs(2);
/// Lingering once shutdown has begun.
const LINGER_SHUTDOWN: Duration = Duration::from_millis(200);
/// At most this many bytes are drained while lingering.
const LINGER_MAX_BYTES: usize = 256 * 1024;

/// What one request produced, for the log and the metrics.
struct Outcome_ {
    status: Status,
    body_bytes: u64,
    band: Band,
}

/// A response being written: its band as it drains, its user-space registration.
struct Sending<'a> {
    progress: BandTracker<'a>,
    user: Option<crate::usched::Registration>,
}

/// The connection's band, borrowed apart from its transport while a response is written.
struct BandState<'c> {
    shared: &'c Shared,
    socket: &'c mut BandSocket,
    /// Band shown in `shortfirst_open_connections`.
    gauge: &'c mut Band,
}

impl BandState<'_> {
    fn set(&mut self, band: Band) {
        if band != self.socket.band() && self.shared.config.socket_priority {
            self.shared.metrics.priority_changes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.socket.set(band);
        self.shared.metrics.connection_moved(*self.gauge, band);
        *self.gauge = band;
    }

    /// `n` bytes more are on the socket: counted, and the band follows.
    fn account(&mut self, out: &mut Sending<'_>, n: u64) {
        self.shared.metrics.bytes(self.socket.band(), n);
        if let Some(band) = out.progress.sent(n) {
            self.set(band);
        }
    }
}

/// The body of a response.
pub(crate) enum Body {
    None,
    /// The last `len` bytes of the head buffer are the body (error pages).
    InHead {
        len: usize,
    },
    File {
        file: Arc<File>,
        offset: u64,
        len: u64,
    },
}

pub(crate) struct Conn {
    shared: Arc<Shared>,
    transport: Transport,
    /// TLS: one record's plaintext read from the file (allocated on the first body).
    tls_buf: Vec<u8>,
    remote: Vec<u8>,
    shutdown: watch::Receiver<bool>,
    rbuf: Box<[u8]>,
    rstart: usize,
    rend: usize,
    /// Request-body bytes still to skip before the next request.
    discard_bytes: u64,
    /// When the connection was accepted: the first request's head is due
    /// within the header timeout of it.
    accepted_at: Instant,
    /// A chunked body's bytes read past the buffer's end, and what of them
    /// follows the body (the next request); allocated on the first chunked
    /// body, at most as long as the read buffer.
    body_buf: Vec<u8>,
    body_rest: Range<usize>,
    /// The last chunked body ran past the read buffer (see `body_rest`).
    body_spilled: bool,
    responder: Responder,
    log_line: Vec<u8>,
    socket_band: BandSocket,
    /// Band shown in `shortfirst_open_connections` (0 between responses).
    gauge_band: Band,
    cutoffs: CutoffsCache,
    served: u64,
    /// Timeouts and head limits as configured when the connection started.
    settings: ConnSettings,
}

enum Next {
    Continue,
    Close,
}

impl Conn {
    pub(crate) fn new(
        shared: Arc<Shared>,
        transport: Transport,
        peer: SocketAddr,
        shutdown: watch::Receiver<bool>,
    ) -> Conn {
        let socket_band = BandSocket::accepted(
            transport.tcp(),
            shared.cutoff_chooser.band_map(),
            shared.config.socket_priority,
            shared.observer.clone(),
        );
        let cutoffs = CutoffsCache::new(&shared.cutoff_chooser);
        let settings = shared.live().conn_settings();
        let rbuf = vec![0u8; settings.parse.max_header_bytes].into_boxed_slice();
        shared.metrics.connection_opened();
        Conn {
            remote: peer.ip().to_string().into_bytes(),
            responder: Responder::new(shared.clone()),
            shared,
            transport,
            tls_buf: Vec::new(),
            shutdown,
            rbuf,
            rstart: 0,
            rend: 0,
            discard_bytes: 0,
            accepted_at: Instant::now(),
            body_buf: Vec::new(),
            body_rest: 0..0,
            body_spilled: false,
            log_line: Vec::with_capacity(512),
            socket_band,
            gauge_band: Band::SETUP,
            cutoffs,
            served: 0,
            settings,
        }
    }

    /// `bytes` were read from the connection before it became this HTTP/1.1 one (to tell
    /// it from HTTP/2): they start the read buffer, which they fit (the caller reads no more).
    pub(crate) fn with_buffered(mut self, bytes: &[u8]) -> Conn {
        self.rbuf[..bytes.len()].copy_from_slice(bytes);
        self.rend = bytes.len();
        self
    }

    /// Serves requests until the client leaves, a limit or timeout closes the
    /// connection, or the server shuts down.
    pub(crate) async fn run(mut self) {
        loop {
            match self.next_request().await {
                Ok(Some((req, started))) => match self.serve(&req, started).await {
                    Next::Continue => {}
                    Next::Close => break,
                },
                Ok(None) => {
                    // Closed, idle or shutting down: nothing owed but, over TLS, a close_notify.
                    self.transport.close_quietly(LINGER_SHUTDOWN).await;
                    return;
                }
                Err(status) => {
                    let started = Instant::now();
                    if let Ok(o) = self.send_error(status, None, false).await {
                        self.log_unparsed(&o, started);
                    }
                    break;
                }
            }
        }
        self.linger().await;
    }

    fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Reads until a complete request head is buffered. `Ok(None)`: the
    /// connection ended quietly. `Err(status)`: answer it and close.
    async fn next_request(&mut self) -> Result<Option<(Request, Instant)>, Status> {
        let settings = self.settings;
        let limits = settings.parse;
        let mut first_byte_at = None;
        loop {
            // Skip what is left of the previous request's body.
            let buffered = self.rend - self.rstart;
            let skip = buffered.min(self.discard_bytes.min(usize::MAX as u64) as usize);
            self.rstart += skip;
            self.discard_bytes -= skip as u64;
            if self.rstart == self.rend {
                self.rstart = 0;
                self.rend = 0;
            }
            if self.rend > self.rstart && self.discard_bytes == 0 {
                let started = *first_byte_at.get_or_insert_with(Instant::now);
                if let Some(req) = parse::parse(&mut self.rbuf[self.rstart..self.rend], &limits)? {
                    return Ok(Some((req, started)));
                }
            }
            if self.rstart > 0 {
                self.rbuf.copy_within(self.rstart..self.rend, 0);
                self.rend -= self.rstart;
                self.rstart = 0;
            }
            if self.rend == self.rbuf.len() {
                return Err(Status::HEADER_FIELDS_TOO_LARGE);
            }
            let idle = first_byte_at.is_none() && self.discard_bytes == 0;
            if idle && self.shutting_down() {
                return Ok(None);
            }
            let read = self.transport.read(&mut self.rbuf[self.rend..]);
            let result = if idle {
                // Before the first request, silence is held to the header timeout.
                let deadline = if self.served == 0 {
                    self.accepted_at + settings.header_timeout
                } else {
                    Instant::now() + settings.idle_timeout
                };
                tokio::select! {
                    r = tokio::time::timeout_at(deadline, read) => r,
                    _ = self.shutdown.changed() => return Ok(None),
                }
            } else {
                let started = first_byte_at.unwrap_or_else(Instant::now);
                let deadline = started + settings.header_timeout;
                tokio::time::timeout_at(deadline, read).await
            };
            match result {
                Err(_elapsed) if idle => return Ok(None),
                Err(_elapsed) => return Err(Status::REQUEST_TIMEOUT),
                Ok(Ok(0)) | Ok(Err(_)) => return Ok(None),
                Ok(Ok(n)) => {
                    self.rend += n;
                    if self.discard_bytes > 0 {
                        first_byte_at.get_or_insert_with(Instant::now);
                    }
                }
            }
        }
    }

    /// Answers one parsed request and decides whether the connection goes on.
    async fn serve(&mut self, req: &Request, started: Instant) -> Next {
        self.served += 1;
        let base = self.rstart;
        // Reloadable limits: as the configuration in force says when the request starts.
        let (max_body_bytes, max_requests) = {
            let live = self.shared.live();
            (live.config.max_body_bytes, live.config.max_requests_per_connection)
        };
        let mut keep_alive = req.wants_keep_alive() && self.served < max_requests && !self.shutting_down();
        // Request bodies (see the module docs): a chunked one is read now.
        let mut chunked_in_buf = 0;
        let body_status = if req.chunked {
            match self.skip_chunked_body(req).await {
                Ok(n) => {
                    chunked_in_buf = n;
                    None
                }
                Err(status) => Some(status),
            }
        } else if req.content_length.unwrap_or(0) > max_body_bytes {
            Some(Status::CONTENT_TOO_LARGE)
        } else {
            None
        };
        let outcome = match body_status {
            Some(status) => {
                keep_alive = false;
                self.send_error(status, Some(req), false).await
            }
            None => {
                let plaintext = matches!(self.transport, Transport::Plain(_));
                let answer = self.responder.answer(&self.rbuf[base..], req, keep_alive, plaintext).await;
                self.send(answer.status, answer.body).await
            }
        };
        self.rstart = base + req.head_len + chunked_in_buf;
        self.discard_bytes = req.content_length.unwrap_or(0);
        if std::mem::take(&mut self.body_spilled) {
            // The chunked body ran past the buffer: what followed it is the next request.
            let rest = std::mem::replace(&mut self.body_rest, 0..0);
            let len = rest.len();
            self.rbuf[..len].copy_from_slice(&self.body_buf[rest]);
            self.rstart = 0;
            self.rend = len;
        }
        match outcome {
            Ok(o) => {
                self.log(req, base, &o, started);
                if keep_alive && !closes_connection(o.status) {
                    Next::Continue
                } else {
                    Next::Close
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "connection ended during a response");
                Next::Close
            }
        }
    }

    /// Reads and discards a chunked request body (RFC 9112 §7.1), which must end
    /// within the header timeout and carry at most `max-body-bytes` of data.
    /// Returns how many bytes after the head in the read buffer it took; when it
    /// runs past them, what follows it is left in `body_rest`.
    async fn skip_chunked_body(&mut self, req: &Request) -> Result<usize, Status> {
        let status = |e: chunked::Error| match e {
            chunked::Error::Malformed => Status::BAD_REQUEST,
            chunked::Error::TooLarge => Status::CONTENT_TOO_LARGE,
        };
        let settings = self.settings;
        let mut decoder = Decoder::new(self.shared.live().config.max_body_bytes, settings.parse.max_header_bytes);
        let body_start = self.rstart + req.head_len;
        let (used, done) = decoder.feed(&self.rbuf[body_start..self.rend]).map_err(status)?;
        if done {
            return Ok(used);
        }
        let in_buf = self.rend - body_start;
        // No longer than the read buffer, so what follows the body fits back in it.
        if self.body_buf.len() != self.rbuf.len() {
            self.body_buf = vec![0; self.rbuf.len()];
        }
        let deadline = Instant::now() + settings.header_timeout;
        loop {
            let n = match tokio::time::timeout_at(deadline, self.transport.read(&mut self.body_buf)).await {
                Err(_elapsed) => return Err(Status::REQUEST_TIMEOUT),
                Ok(Ok(0) | Err(_)) => return Err(Status::BAD_REQUEST), // cut off inside the body
                Ok(Ok(n)) => n,
            };
            let (used, done) = decoder.feed(&self.body_buf[..n]).map_err(status)?;
            if done {
                self.body_rest = used..n;
                self.body_spilled = true;
                return Ok(in_buf);
            }
        }
    }

    /// Writes an error response with a short text body.
    async fn send_error(
        &mut self,
        status: Status,
        req: Option<&Request>,
        keep_alive: bool,
    ) -> std::io::Result<Outcome_> {
        let answer = self.responder.error(status, req, keep_alive);
        self.send(answer.status, answer.body).await
    }

    /// Sends the head in `self.responder.head` and the body, in the band of the
    /// response's size, moving to better bands as cutoffs are crossed.
    async fn send(&mut self, status: Status, body: Body) -> std::io::Result<Outcome_> {
        let shared = self.shared.clone();
        let (head_only_len, file_part) = match &body {
            Body::None => (self.responder.head.len(), None),
            Body::InHead { len } => (self.responder.head.len() - len, None),
            Body::File { file, offset, len } => (self.responder.head.len(), Some((&**file, *offset, *len))),
        };
        let (head_bytes, file_bytes) = (self.responder.head.len() as u64, file_part.map_or(0, |(_, _, len)| len));
        // Over TLS the response is ranked by what crosses the wire: its ciphertext, in the
        // records `write_tls` makes (the head's, then the body's).
        let total = match self.transport {
            Transport::Plain(_) => head_bytes + file_bytes,
            Transport::Tls(_) => {
                let record = shared.record_payload_bytes;
                crate::tls::ciphertext_bytes(head_bytes, record) + crate::tls::ciphertext_bytes(file_bytes, record)
            }
        };

        shared.cutoff_chooser.refresh(&mut self.cutoffs);
        let progress = BandTracker::start(&shared, &self.cutoffs, self.transport.tcp(), self.socket_band.band(), total);
        let first_band = progress.band();
        self.set_band(first_band);
        // User-space scheduling: every write waits for a grant (see `usched`).
        let user = match &shared.user {
            Some(u) => Some(u.register(total, self.served == 1)?),
            None => None,
        };
        let mut out = Sending { progress, user };
        let sent_plain = match self.transport {
            Transport::Plain(_) => self.write_plain(&mut out, file_part).await?,
            Transport::Tls(_) => self.write_tls(&mut out, file_part).await?,
        };
        out.progress.finish();
        let body_bytes = sent_plain.saturating_sub(head_only_len as u64);
        shared.metrics.connection_moved(self.gauge_band, Band::SETUP);
        self.gauge_band = Band::SETUP;
        Ok(Outcome_ { status, body_bytes, band: first_band })
    }

    /// Plaintext: the head by `send(MSG_MORE)`, the body by `sendfile`. Returns the bytes written.
    async fn write_plain(
        &mut self,
        out: &mut Sending<'_>,
        file_part: Option<(&File, u64, u64)>,
    ) -> std::io::Result<u64> {
        let timeout = self.settings.send_timeout;
        let Conn { transport, responder, socket_band, gauge_band, shared, .. } = self;
        let head = &responder.head;
        let mut bands = BandState { shared, socket: socket_band, gauge: gauge_band };
        let Transport::Plain(stream) = transport else { unreachable!("write_plain on a TLS connection") };
        let stream = &*stream;
        let mut sent_total = 0u64;
        let mut written = 0;
        while written < head.len() {
            let more = file_part.is_some();
            let n = match &mut out.user {
                None => io::send(stream, &head[written..], more, timeout).await?,
                Some(reg) => {
                    let (fd, head) = (stream.as_raw_fd(), &head[written..]);
                    let band = bands.socket.band();
                    reg.write(stream, timeout, band, head.len(), |n| io::raw_send(fd, &head[..n], more)).await?
                }
            };
            written += n;
            sent_total += n as u64;
            bands.account(out, n as u64);
        }
        let Some((file, offset, len)) = file_part else { return Ok(sent_total) };
        let mut off = offset as i64;
        let end = (offset + len) as i64;
        let chunk = bands.shared.config.sendfile_chunk_bytes;
        while off < end {
            let want = ((end - off) as usize).min(chunk);
            let n = match &mut out.user {
                None => io::sendfile(stream, file, &mut off, want, timeout).await?,
                Some(reg) => {
                    let (out_fd, in_fd) = (stream.as_raw_fd(), file.as_raw_fd());
                    let band = bands.socket.band();
                    reg.write(stream, timeout, band, want, |n| io::raw_sendfile(out_fd, in_fd, &mut off, n)).await?
                }
            };
            if n == 0 {
                // The file shrank under us: the promised length cannot be kept.
                return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "file shrank while sending"));
            }
            sent_total += n as u64;
            bands.account(out, n as u64);
        }
        Ok(sent_total)
    }

    fn set_band(&mut self, band: Band) {
        BandState { shared: &self.shared, socket: &mut self.socket_band, gauge: &mut self.gauge_band }.set(band);
    }

    fn log(&mut self, req: &Request, base: usize, o: &Outcome_, started: Instant) {
        let elapsed = started.elapsed();
        self.shared.metrics.response(o.band, o.status.code, elapsed);
        self.shared.tls_metrics.response(self.transport.tls_version());
        let live = self.shared.live();
        let Some(log) = &live.access_log else { return };
        let buf = &self.rbuf[base..];
        let field = |r: &Option<std::ops::Range<usize>>| r.as_ref().map(|r| &buf[r.clone()]);
        let entry = Entry {
            remote: &self.remote,
            request_line: &buf[req.request_line.clone()],
            status: o.status.code,
            body_bytes: o.body_bytes,
            referer: field(&req.referer),
            user_agent: field(&req.user_agent),
            response_time: elapsed,
            band: o.band,
            tls: self.transport.tls_version(),
            protocol: access_log::Protocol::Http1,
        };
        access_log::format_line(&mut self.log_line, log.format(), &entry);
        log.push(&self.log_line);
    }

    /// Logs a response to a request that could not be parsed.
    fn log_unparsed(&mut self, o: &Outcome_, started: Instant) {
        let elapsed = started.elapsed();
        self.shared.metrics.response(o.band, o.status.code, elapsed);
        self.shared.tls_metrics.response(self.transport.tls_version());
        let live = self.shared.live();
        let Some(log) = &live.access_log else { return };
        let entry = Entry {
            remote: &self.remote,
            request_line: b"",
            status: o.status.code,
            body_bytes: o.body_bytes,
            referer: None,
            user_agent: None,
            response_time: elapsed,
            band: o.band,
            tls: self.transport.tls_version(),
            protocol: access_log::Protocol::Http1,
        };
        access_log::format_line(&mut self.log_line, log.format(), &entry);
        log.push(&self.log_line);
    }

    /// Half-closes, then drains what the client still sends for a moment, so
    /// the kernel does not answer unread bytes with a reset that destroys the
    /// response in flight.
    async fn linger(&mut self) {
        if self.transport.shutdown().await.is_err() {
            return;
        }
        // Shutting down: the response is out; do not hold the drain up for long.
        let linger = if self.shutting_down() { LINGER_SHUTDOWN } else { LINGER };
        let deadline = Instant::now() + linger;
        let mut drained = 0;
        while drained < LINGER_MAX_BYTES {
            tokio::select! {
                r = tokio::time::timeout_at(deadline, self.transport.read(&mut self.rbuf[..])) => match r {
                    Ok(Ok(n)) if n > 0 => drained += n,
                    _ => break,
                },
                _ = self.shutdown.changed() => break,
            }
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.shared.metrics.connection_closed(self.gauge_band);
    }
}

fn refusal_status(refusal: Refusal) -> Status {
    match refusal {
        Refusal::BadRequest => Status::BAD_REQUEST,
        Refusal::Forbidden => Status::FORBIDDEN,
        Refusal::NotFound => Status::NOT_FOUND,
        Refusal::Internal => Status::INTERNAL_SERVER_ERROR,
    }
}

/// The file's version (its ETag's input) and its modification time in whole seconds.
fn file_version(meta: &std::fs::Metadata) -> (FileVersion, u64) {
    let mtime_secs = u64::try_from(meta.mtime()).unwrap_or(0);
    let version = FileVersion {
        inode: meta.ino(),
        mtime_ns: mtime_secs
            .saturating_mul(1_000_000_000)
            .saturating_add(meta.mtime_nsec().clamp(0, 999_999_999) as u64),
        size_bytes: meta.len(),
    };
    (version, mtime_secs)
}

/// The verdict of the request's preconditions and range on a file of `len`
/// bytes; `buf` starts with the request's head.
fn evaluate_conditions(buf: &[u8], req: &Request, validators: &Validators<'_>, len: u64) -> Verdict {
    let field = |r: Option<Range<usize>>| r.map(|r| &buf[r]);
    let (mut if_match, mut if_none_match) = ([&b""[..]; MAX_LIST_LINES], [&b""[..]; MAX_LIST_LINES]);
    let if_match_len = field_lines(buf, &req.if_match, &mut if_match);
    let if_none_match_len = field_lines(buf, &req.if_none_match, &mut if_none_match);
    let conditions = Conditions {
        if_match: &if_match[..if_match_len],
        if_none_match: &if_none_match[..if_none_match_len],
        if_modified_since: field(req.if_modified_since.value()),
        if_unmodified_since: field(req.if_unmodified_since.value()),
        range: field(req.range.clone()),
        // A repeated If-Range is no validator: an empty one never matches.
        if_range: if req.if_range.is_present() { Some(field(req.if_range.value()).unwrap_or(b"")) } else { None },
        is_get: req.method() == Method::Get,
    };
    precondition::evaluate(&conditions, validators, len)
}

/// The values of a list header's lines, into `out`; returns how many.
fn field_lines<'a>(buf: &'a [u8], f: &FieldLines, out: &mut [&'a [u8]; MAX_LIST_LINES]) -> usize {
    for (slot, r) in out.iter_mut().zip(f.lines()) {
        *slot = &buf[r.clone()];
    }
    f.lines().len()
}

/// Errors after which the connection cannot be trusted to stay in sync.
fn closes_connection(status: Status) -> bool {
    matches!(status.code, 400 | 408 | 411 | 413 | 414 | 431 | 500 | 503 | 505)
}

/// Splits a request target into its path and query. Origin form (`/p?q`) and
/// absolute form (`http://host/p?q`, RFC 9112 §3.2.2) are accepted; `None`
/// for anything else (`*`, authority form).
pub fn split_target(target: &[u8]) -> Option<(&[u8], Option<&[u8]>)> {
    let path_and_query = if target.first() == Some(&b'/') {
        target
    } else {
        let lower_scheme_end = target.windows(3).position(|w| w == b"://")?;
        let scheme = &target[..lower_scheme_end];
        if !scheme.eq_ignore_ascii_case(b"http") && !scheme.eq_ignore_ascii_case(b"https") {
            return None;
        }
        let rest = &target[lower_scheme_end + 3..];
        match rest.iter().position(|&b| b == b'/' || b == b'?') {
            Some(i) if rest[i] == b'/' => &rest[i..],
            _ => b"/",
        }
    };
    let path_end = path_and_query.iter().position(|&b| b == b'?' || b == b'#').unwrap_or(path_and_query.len());
    let query = match path_and_query.get(path_end) {
        Some(b'?') => {
            let q = &path_and_query[path_end + 1..];
            Some(&q[..q.iter().position(|&b| b == b'#').unwrap_or(q.len())])
        }
        _ => None,
    };
    Some((&path_and_query[..path_end], query))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_target_table() {
        type Split<'a> = Option<(&'a str, Option<&'a str>)>;
        let cases: &[(&str, Split<'_>)] = &[
            ("/", Some(("/", None))),
            ("/a/b?x=1", Some(("/a/b", Some("x=1")))),
            ("/a#frag", Some(("/a", None))),
            ("http://example.com/a?q", Some(("/a", Some("q")))),
            ("HTTP://example.com", Some(("/", None))),
            ("https://h:8080/x/y", Some(("/x/y", None))),
            ("*", None),
            ("example.com:443", None),
            ("ftp://h/x", None),
        ];
        for (target, want) in cases {
            let got = split_target(target.as_bytes())
                .map(|(p, q)| (std::str::from_utf8(p).unwrap(), q.map(|q| std::str::from_utf8(q).unwrap())));
            assert_eq!(got, *want, "{target}");
        }
    }
}

//! The relay of one client connection to its upstream connection, after the startup
//! message: two loops, one per direction, run together until either ends. Each frames
//! its input, asks the connection's [`Tracker`] what to do with every message, and
//! forwards the frames as received (batched into one write when several are ready).
//!
//! The directions run independently (a client pipelining queries while the server sends
//! large results must not deadlock the proxy); they share the tracker (a `std` mutex held
//! only for a step, never across an await), the permit of the open transaction, and the
//! client's write half (the gatekeeper's own answers go to the client too).

use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use shortfirst_core::admission::Refusal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::io::{ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use super::conn::ClientStream;

/// The client's side: plain TCP or TLS over it.
type ClientRd = ReadHalf<ClientStream>;
type ClientWr = WriteHalf<ClientStream>;

use super::backend_cpu::BackendCpu;
use super::cancel::{CancelSlot, KeyGuard};
use super::frame::next_frame;
use super::gate::{NotAdmitted, TxnGate};
use super::message::{backend_key_data, client, encode_error, server};
use super::reqtype::RequestType;
use super::txn::{ClientStep, Mark, ServerStep, Tracker};
use super::{refusal_message, refusal_sqlstate, ConnError, Shared};

/// What both directions share.
struct Conn<G: TxnGate> {
    shared: Arc<Shared<G>>,
    conn_id: u64,
    /// The tracker and the open transaction's permit, under one lock: the step that ends a
    /// transaction takes its permit before a new transaction can store its own.
    state: Mutex<State<G::Permit>>,
    client_wr: tokio::sync::Mutex<ClientWr>,
    /// The client's cancel key while connected.
    key: Mutex<Option<KeyGuard>>,
    /// Armed while a transaction waits for admission: a CancelRequest withdraws it.
    cancel: Arc<CancelSlot>,
    /// Signalled after each batch of server messages (the idle-in-transaction timer).
    server_progress: tokio::sync::Notify,
    /// The client sent Terminate: the server closing is the expected end, not a failure.
    terminated: std::sync::atomic::AtomicBool,
    /// The upstream connection's local port, which names it in its backend's command line.
    upstream_port: u16,
    /// The backend's processor-time counter, when the gate wants it and it could be opened
    /// (set at BackendKeyData).
    backend_cpu: std::sync::OnceLock<BackendCpu>,
}

struct State<P> {
    tracker: Tracker,
    /// The open transaction's permit and its backend's processor time at admission.
    permit: Option<(P, Option<u64>)>,
}

impl<G: TxnGate> Conn<G> {
    fn state(&self) -> std::sync::MutexGuard<'_, State<G::Permit>> {
        // Every step is one call that either completes or panics (ending the connection):
        // a poisoned lock is never observed by a live connection.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Writes and flushes: over TLS, `write_all` can leave encrypted records buffered when
    /// the socket is full, and nothing would send them until the next write (a large
    /// result, then silence, hung the client).
    async fn to_client(&self, bytes: &[u8]) -> Result<(), ConnError> {
        let mut w = self.client_wr.lock().await;
        w.write_all(bytes).await.map_err(|e| ConnError::io("write to the client", e))?;
        w.flush().await.map_err(|e| ConnError::io("write to the client", e))
    }
}

pub(crate) async fn relay<G: TxnGate>(
    client: ClientStream,
    upstream: TcpStream,
    client_buf: BytesMut,
    shared: Arc<Shared<G>>,
    conn_id: u64,
    app_name: Option<String>,
) -> Result<(), ConnError> {
    let (client_rd, client_wr) = tokio::io::split(client);
    // Only the processor-time basis needs it (a getsockname per connection otherwise).
    let wants_cpu = shared.gate.wants_backend_cpu();
    let upstream_port = if wants_cpu { upstream.local_addr().map_or(0, |a| a.port()) } else { 0 };
    let (up_rd, up_wr) = upstream.into_split();
    let limits = &shared.config.limits;
    let tracker = Tracker::new(shared.config.types.clone(), app_name, limits.max_prepared);
    let conn = Arc::new(Conn {
        shared: shared.clone(),
        conn_id,
        state: Mutex::new(State { tracker, permit: None }),
        client_wr: tokio::sync::Mutex::new(client_wr),
        key: Mutex::new(None),
        cancel: Arc::default(),
        server_progress: tokio::sync::Notify::new(),
        terminated: std::sync::atomic::AtomicBool::new(false),
        upstream_port,
        backend_cpu: std::sync::OnceLock::new(),
    });
    let to_server = client_to_server(&conn, client_rd, client_buf, up_wr);
    tokio::pin!(to_server);
    let result = tokio::select! {
        r = &mut to_server => r,
        r = server_to_client(&conn, up_rd) => {
            // The server side ended first. A transaction still waiting for admission is
            // withdrawn as a CancelRequest withdraws it, in one more poll of the client
            // side: its client did not give up, and the controller must not learn a
            // patience from a wait the server cut short (it would refuse the next ones).
            if conn.cancel.fire() {
                tokio::select! {
                    biased;
                    _ = &mut to_server => {}
                    () = std::future::ready(()) => {}
                }
            }
            r
        }
    };
    if let Err(e) = &result {
        if e.tell_client() {
            let (code, hint) = e.sqlstate();
            let _ = conn.to_client(&encode_error("FATAL", code, &format!("gatekeeper: {e}"), hint)).await;
        }
    }
    let _ = conn.client_wr.lock().await.shutdown().await;
    // The permit of a transaction cut short is dropped here, with the connection.
    result
}

/// An extended-protocol batch outside a transaction, held back until its `Sync` (or a
/// `Flush`, or past one message's size limit): it is admitted as a whole before any of it
/// is forwarded, so nothing of a refused batch reaches the server.
struct Batch {
    /// The tracker before the batch (restored if it is refused).
    mark: Mark,
    /// The transaction the batch starts: its type and a deferred BEGIN to send first.
    start: Option<(RequestType, Option<Bytes>)>,
    bytes: BytesMut,
}

/// Where the client-to-server loop goes on after a step.
enum Flow {
    Go,
    /// The client left while its transaction waited.
    Gone,
}

async fn client_to_server<G: TxnGate>(
    conn: &Conn<G>,
    mut rd: ClientRd,
    mut buf: BytesMut,
    mut up: OwnedWriteHalf,
) -> Result<(), ConnError> {
    let limits = &conn.shared.config.limits;
    let mut out = BytesMut::new();
    let mut batch: Option<Batch> = None;
    loop {
        while let Some(frame) = next_frame(&mut buf, limits.max_message_bytes)? {
            let tag = frame.tag();
            let (mark, step) = {
                let mut st = conn.state();
                let mark = st.tracker.mark();
                if batch.is_none() && !st.tracker.in_transaction() && EXTENDED.contains(&tag) {
                    batch = Some(Batch { mark: mark.clone(), start: None, bytes: BytesMut::new() });
                }
                (mark, st.tracker.on_client(tag, frame.body(), &frame.bytes)?)
            };
            let step = match (batch.as_mut(), step) {
                (Some(b), ClientStep::Forward) => {
                    b.bytes.extend_from_slice(&frame.bytes);
                    None
                }
                (Some(b), ClientStep::Start { ty, held }) => {
                    b.start = Some((ty, held));
                    b.bytes.extend_from_slice(&frame.bytes);
                    None
                }
                (_, step) => Some(step),
            };
            let ends_batch = step.is_some()
                || tag == client::SYNC
                || tag == client::FLUSH
                || batch.as_ref().is_some_and(|b| b.bytes.len() > limits.max_message_bytes);
            if let Some(b) = batch.take_if(|_| ends_batch) {
                let to_sync = tag == client::SYNC && step.is_none();
                if let Flow::Gone = end_batch(conn, b, to_sync, &mut rd, &mut buf, &mut up, &mut out).await? {
                    return Ok(());
                }
            }
            match step {
                None | Some(ClientStep::Drop) => {}
                Some(ClientStep::Forward) => out.extend_from_slice(&frame.bytes),
                Some(ClientStep::Answer(bytes)) => {
                    flush(&mut up, &mut out).await?;
                    conn.to_client(&bytes).await?;
                }
                Some(ClientStep::Start { ty, held }) => {
                    flush(&mut up, &mut out).await?;
                    let b = Batch { mark, start: Some((ty, held)), bytes: BytesMut::from(&frame.bytes[..]) };
                    if let Flow::Gone = end_batch(conn, b, true, &mut rd, &mut buf, &mut up, &mut out).await? {
                        return Ok(());
                    }
                }
            }
            if tag == client::TERMINATE {
                conn.terminated.store(true, std::sync::atomic::Ordering::Relaxed);
                flush(&mut up, &mut out).await?;
                return Ok(());
            }
        }
        flush(&mut up, &mut out).await?;
        if read_client(conn, &mut rd, &mut buf).await? == 0 {
            return Ok(());
        }
    }
}

/// The extended-protocol messages that open a batch outside a transaction.
const EXTENDED: [u8; 5] = [client::PARSE, client::BIND, client::EXECUTE, client::DESCRIBE, client::CLOSE];

/// A held batch (or one Query or FunctionCall) is complete: forward it, after admission if
/// it starts a transaction; refused, answer the client instead (`to_sync`: the batch ends
/// with its Sync, or is one message answered with ReadyForQuery).
async fn end_batch<G: TxnGate>(
    conn: &Conn<G>,
    batch: Batch,
    to_sync: bool,
    rd: &mut ClientRd,
    buf: &mut BytesMut,
    up: &mut OwnedWriteHalf,
    out: &mut BytesMut,
) -> Result<Flow, ConnError> {
    let Some((ty, held)) = batch.start else {
        out.extend_from_slice(&batch.bytes);
        return Ok(Flow::Go);
    };
    flush(up, out).await?;
    match admit_watching(conn, &ty, rd, buf).await? {
        Admitted::Permit(permit) => {
            let cpu_ns = conn.backend_cpu.get().and_then(BackendCpu::used_ns);
            conn.state().permit = Some((permit, cpu_ns));
            if let Some(h) = held {
                out.extend_from_slice(&h);
            }
            out.extend_from_slice(&batch.bytes);
        }
        Admitted::Gone => return Ok(Flow::Gone),
        Admitted::Refused(reason) => {
            tracing::info!(conn = conn.conn_id, ty = %ty.name(), "transaction refused: {}", refusal_message(reason));
            let (code, hint) = refusal_sqlstate(reason);
            let error = encode_error("ERROR", code, &format!("gatekeeper: {}", refusal_message(reason)), hint);
            let answer = conn.state().tracker.refuse(batch.mark, error, to_sync);
            conn.to_client(&answer).await?;
        }
        Admitted::Cancelled => {
            tracing::info!(conn = conn.conn_id, ty = %ty.name(), "transaction cancelled while waiting for admission");
            let error = encode_error("ERROR", "57014", "canceling statement due to user request", None);
            let answer = conn.state().tracker.refuse(batch.mark, error, to_sync);
            conn.to_client(&answer).await?;
        }
    }
    Ok(Flow::Go)
}

/// Reads from the client; while the client owes the next move inside a transaction, for
/// at most the idle-in-transaction limit. The limit is re-armed whenever the server side
/// reports progress (the tracker's state may have changed).
async fn read_client<G: TxnGate>(conn: &Conn<G>, rd: &mut ClientRd, buf: &mut BytesMut) -> Result<usize, ConnError> {
    loop {
        let idle = conn.state().tracker.waiting_on_client();
        let limit = conn.shared.config.limits.idle_in_transaction.filter(|_| idle);
        tokio::select! {
            r = rd.read_buf(buf) => return r.map_err(|e| ConnError::io("read from the client", e)),
            _ = conn.server_progress.notified() => {}
            _ = tokio::time::sleep(limit.unwrap_or_default()), if limit.is_some() => {
                return Err(ConnError::IdleInTransaction(limit.unwrap_or_default()));
            }
        }
    }
}

/// What came of a wait for admission.
enum Admitted<P> {
    Permit(P),
    Refused(Refusal),
    /// A CancelRequest withdrew the wait.
    Cancelled,
    /// The client went away meanwhile (the wait is abandoned).
    Gone,
}

/// Awaits admission while watching the client: bytes it sends meanwhile are buffered
/// (up to one message's limit), and its going away abandons the wait.
async fn admit_watching<G: TxnGate>(
    conn: &Conn<G>,
    ty: &RequestType,
    rd: &mut ClientRd,
    buf: &mut BytesMut,
) -> Result<Admitted<G::Permit>, ConnError> {
    let max = conn.shared.config.limits.max_message_bytes;
    let admit = conn.shared.gate.admit(ty, conn.cancel.arm());
    tokio::pin!(admit);
    loop {
        tokio::select! {
            p = &mut admit => {
                // A cancel that fired as the wait ended still withdraws the transaction
                // (the client was told nothing yet; nothing of it was forwarded).
                return Ok(match (p, conn.cancel.disarm()) {
                    (Ok(_), true) | (Err(NotAdmitted::Cancelled), _) => Admitted::Cancelled,
                    (Ok(permit), false) => Admitted::Permit(permit),
                    (Err(NotAdmitted::Refused(r)), _) => Admitted::Refused(r),
                });
            }
            r = rd.read_buf(buf), if buf.len() < max => {
                if r.map_err(|e| ConnError::io("read from the client", e))? == 0 {
                    tracing::debug!(conn = conn.conn_id, "client left while waiting for admission");
                    return Ok(Admitted::Gone);
                }
            }
        }
    }
}

async fn flush(w: &mut OwnedWriteHalf, out: &mut BytesMut) -> Result<(), ConnError> {
    if !out.is_empty() {
        w.write_all(out).await.map_err(|e| ConnError::io("write upstream", e))?;
        out.clear();
    }
    Ok(())
}

async fn server_to_client<G: TxnGate>(conn: &Conn<G>, mut rd: OwnedReadHalf) -> Result<(), ConnError> {
    let max = conn.shared.config.limits.max_server_message_bytes;
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut out = BytesMut::new();
    let mut ended = Vec::new();
    loop {
        while let Some(frame) = next_frame(&mut buf, max).map_err(ConnError::UpstreamFrame)? {
            if frame.tag() == server::BACKEND_KEY_DATA {
                let (pid, secret) = backend_key_data(frame.body())?;
                let guard = conn.shared.keys.insert(pid, secret, conn.conn_id, conn.cancel.clone());
                *conn.key.lock().unwrap_or_else(|e| e.into_inner()) = Some(guard);
                if conn.shared.gate.wants_backend_cpu() {
                    open_backend_cpu(conn, pid);
                }
            }
            let mut st = conn.state();
            match st.tracker.on_server(frame.tag(), frame.body())? {
                ServerStep::Forward => out.extend_from_slice(&frame.bytes),
                ServerStep::Swallow => {}
                ServerStep::ForwardAndEnd => {
                    out.extend_from_slice(&frame.bytes);
                    ended.extend(st.permit.take());
                }
            }
        }
        if !out.is_empty() {
            conn.to_client(&out).await?;
            out.clear();
        }
        for (p, cpu_at_admission_ns) in ended.drain(..) {
            let now_ns = conn.backend_cpu.get().and_then(BackendCpu::used_ns);
            let cpu_us = cpu_at_admission_ns.zip(now_ns).map(|(a, b)| b.saturating_sub(a) / 1_000);
            conn.shared.gate.finish(p, cpu_us);
        }
        conn.server_progress.notify_one();
        let n = rd.read_buf(&mut buf).await.map_err(|e| ConnError::io("read from the upstream", e))?;
        if n == 0 {
            if conn.terminated.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(());
            }
            let in_txn = conn.state().tracker.in_transaction();
            let state = if in_txn { "inside a transaction" } else { "outside a transaction" };
            return Err(ConnError::UpstreamClosed { state });
        }
    }
}

/// Opens the processor-time counter of the connection's backend `pid`; where that fails
/// (another host, PgBouncer upstream, no /proc), the connection's transactions are sampled
/// at their wall time: counted, and logged (a warning for the first connection).
fn open_backend_cpu<G: TxnGate>(conn: &Conn<G>, pid: i32) {
    match BackendCpu::open(std::path::Path::new("/proc"), pid, conn.upstream_port) {
        Ok(cpu) => {
            let _ = conn.backend_cpu.set(cpu);
        }
        Err(why) => {
            let before = conn.shared.stats.backend_cpu_unmeasured.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if before == 0 {
                tracing::warn!(conn = conn.conn_id, "--estimate-basis cpu: sampling wall time instead: {why}");
            } else {
                tracing::debug!(conn = conn.conn_id, "backend processor time not measured: {why}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
    use tokio::net::TcpListener;

    use super::super::{AdmitAll, CancelKeys, Limits, PgConfig, ServeStats, Shared, TypeSource};
    use super::*;

    /// A client stream that sends nothing until flushed, as TLS leaves records buffered
    /// when its socket is full: every write of the relay to the client is flushed, so a
    /// server message reaches the client with nothing written after it.
    #[tokio::test]
    async fn every_write_to_the_client_is_flushed() {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up_addr = upstream.local_addr().unwrap();
        let (client_side, mut client) = tokio::io::duplex(1 << 16);
        let config = PgConfig {
            upstream_addr: up_addr.to_string(),
            limits: Limits::default(),
            types: TypeSource::default(),
            tls: None,
        };
        let stats = Arc::new(ServeStats::default());
        let shared = Arc::new(Shared { config, gate: Arc::new(AdmitAll::new()), keys: CancelKeys::default(), stats });
        let to_upstream = TcpStream::connect(up_addr).await.unwrap();
        let (mut server, _) = upstream.accept().await.unwrap();
        let buffered: ClientStream = Box::new(BufWriter::with_capacity(1 << 20, client_side));
        let relay = tokio::spawn(relay(buffered, to_upstream, BytesMut::new(), shared, 1, None));
        // A ParameterStatus from the server, and nothing after it.
        let status = [b'S', 0, 0, 0, 8, b'a', 0, b'b', 0];
        server.write_all(&status).await.unwrap();
        let mut got = [0u8; 9];
        let read = tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut got)).await;
        assert!(read.is_ok(), "the message stayed in the client stream's buffer");
        assert_eq!(got, status);
        drop(client);
        drop(server);
        let _ = relay.await;
    }
}

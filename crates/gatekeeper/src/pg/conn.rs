//! One client connection, top to bottom: the startup phase (SSLRequest answered `S` and
//! the connection wrapped in TLS when a certificate is configured, else refused with `N`
//! as GSSENCRequest always is; CancelRequest matched and forwarded, StartupMessage
//! forwarded to a new upstream connection), then the relay of both directions until
//! either side closes.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::frame::{next_startup, StartupFrame};
use super::gate::TxnGate;
use super::message::encode_error;
use super::relay::relay;
use super::{CancelOutcome, ConnError, Shared};

/// Any stream a client speaks over.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// A client's connection: plain TCP, or TLS over it.
pub(crate) type ClientStream = Box<dyn Stream>;

/// Serves one accepted client connection.
pub(crate) async fn serve_client<G: TxnGate>(
    client: TcpStream,
    shared: Arc<Shared<G>>,
    conn_id: u64,
) -> Result<(), ConnError> {
    let _ = client.set_nodelay(true);
    let mut client: ClientStream = Box::new(client);
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let limits = &shared.config.limits;
    let startup = match tokio::time::timeout(limits.startup_timeout, startup_phase(client, &mut buf, &shared)).await {
        Ok((c, Ok(Some(s)))) => {
            client = c;
            s
        }
        Ok((_, Ok(None))) => return Ok(()),
        Ok((mut c, Err(e))) => {
            refuse(&mut c, &e).await;
            return Err(e);
        }
        Err(_) => return Err(ConnError::StartupTimeout(limits.startup_timeout)),
    };
    let (bytes, app_name) = startup;
    let upstream = match connect(&shared).await {
        Ok(u) => u,
        Err(e) => {
            refuse(&mut client, &e).await;
            return Err(e);
        }
    };
    let mut upstream = upstream;
    upstream.write_all(&bytes).await.map_err(|e| ConnError::io("write the startup message upstream", e))?;
    relay(client, upstream, buf, shared, conn_id, app_name).await
}

/// The startup phase over `client` (which it hands back, TLS-wrapped if it negotiated
/// TLS), with its outcome.
async fn startup_phase<G: TxnGate>(
    mut client: ClientStream,
    buf: &mut BytesMut,
    shared: &Shared<G>,
) -> (ClientStream, Result<Option<(Bytes, Option<String>)>, ConnError>) {
    let mut tls_done = false;
    loop {
        match startup_messages(&mut client, buf, shared, tls_done).await {
            Err(StartTls) => {
                let Some(acceptor) = shared.config.tls.as_ref().map(|t| t.acceptor().clone()) else {
                    unreachable!("StartTls only with a configured acceptor")
                };
                if !buf.is_empty() {
                    // Bytes sent after the SSLRequest, before the handshake, would be read as
                    // if they came over TLS: refuse (PostgreSQL does too).
                    let e = ConnError::ClientFrame(super::frame::FrameError::BadStartup(
                        "bytes sent after SSLRequest, before the TLS handshake".into(),
                    ));
                    return (client, Err(e));
                }
                if let Err(e) = client.write_all(b"S").await {
                    return (client, Err(ConnError::io("answer an SSL request", e)));
                }
                match acceptor.accept(client).await {
                    Ok(tls) => client = Box::new(tls),
                    Err(e) => {
                        let closed: ClientStream = Box::new(tokio::io::empty());
                        return (closed, Err(ConnError::io("the TLS handshake with the client", e)));
                    }
                }
                tls_done = true;
            }
            Ok(r) => return (client, r),
        }
    }
}

/// The client asked for TLS and the gatekeeper has a certificate.
struct StartTls;

/// Reads until a StartupMessage (its bytes and `application_name`); answers SSL/GSSENC
/// requests; handles a cancel, or a client closing, with `None`.
async fn startup_messages<G: TxnGate>(
    client: &mut ClientStream,
    buf: &mut BytesMut,
    shared: &Shared<G>,
    tls_done: bool,
) -> Result<Result<Option<(Bytes, Option<String>)>, ConnError>, StartTls> {
    loop {
        let frame = match next_startup(buf) {
            Ok(f) => f,
            Err(e) => return Ok(Err(e.into())),
        };
        match frame {
            Some(StartupFrame::SslRequest) if shared.config.tls.is_some() && !tls_done => return Err(StartTls),
            Some(StartupFrame::SslRequest) | Some(StartupFrame::GssEncRequest) => {
                // No TLS (or already in it) and no GSSAPI encryption: refuse as PostgreSQL
                // does; the client goes on as it is (or gives up, by its sslmode).
                if let Err(e) = async {
                    client.write_all(b"N").await?;
                    client.flush().await
                }
                .await
                {
                    return Ok(Err(ConnError::io("answer an SSL/GSSENC request", e)));
                }
            }
            Some(StartupFrame::Cancel { bytes, pid, secret }) => {
                forward_cancel(shared, bytes, pid, &secret).await;
                return Ok(Ok(None));
            }
            Some(StartupFrame::Startup { bytes, params, .. }) => {
                let app_name = params.into_iter().find(|(k, _)| k == "application_name").map(|(_, v)| v);
                return Ok(Ok(Some((bytes, app_name))));
            }
            None => match client.read_buf(buf).await {
                Ok(0) => return Ok(Ok(None)),
                Ok(_) => {}
                Err(e) => return Ok(Err(ConnError::io("read the startup message", e))),
            },
        }
    }
}

async fn forward_cancel<G: TxnGate>(shared: &Shared<G>, bytes: Bytes, pid: i32, secret: &Bytes) {
    let stats = &shared.stats;
    let Some((owner, slot)) = shared.keys.find(pid, secret) else {
        tracing::info!(pid, "cancel request with an unknown key dropped");
        stats.count_cancel(CancelOutcome::UnknownKey);
        return;
    };
    if slot.fire() {
        tracing::info!(pid, owner, "cancel request withdrew a transaction waiting for admission");
        stats.count_cancel(CancelOutcome::WithdrewQueued);
        return;
    }
    tracing::debug!(pid, owner, "cancel request forwarded");
    match connect(shared).await {
        Ok(mut up) => {
            if let Err(e) = up.write_all(&bytes).await {
                tracing::warn!(pid, "cancel request not forwarded: {e}");
                stats.count_cancel(CancelOutcome::NotForwarded);
                return;
            }
            stats.count_cancel(CancelOutcome::Forwarded);
            // The server closes the connection once it has read the request.
            let mut sink = [0u8; 16];
            let _ = tokio::time::timeout(shared.config.limits.startup_timeout, up.read(&mut sink)).await;
        }
        Err(e) => {
            tracing::warn!(pid, "cancel request not forwarded: {e}");
            stats.count_cancel(CancelOutcome::NotForwarded);
        }
    }
}

async fn connect<G: TxnGate>(shared: &Shared<G>) -> Result<TcpStream, ConnError> {
    let addr = &shared.config.upstream_addr;
    let timeout = shared.config.limits.connect_timeout;
    match tokio::time::timeout(timeout, TcpStream::connect(addr.as_str())).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(e)) => Err(ConnError::Upstream { addr: addr.clone(), why: e.to_string() }),
        Err(_) => Err(ConnError::Upstream { addr: addr.clone(), why: format!("no connection within {timeout:?}") }),
    }
}

/// Longest the gatekeeper waits for a refused client to close, and most it reads from it.
const REFUSE_DRAIN: Duration = Duration::from_secs(1);
const REFUSE_DRAIN_BYTES: usize = 64 * 1024;

/// Tells the client why its connection ends (best effort: it may be gone already), then
/// reads what it still sends until it closes (bounded), so that closing with unread bytes
/// does not reset the connection before the client has read the error.
pub(crate) async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(client: &mut S, e: &ConnError) {
    let (code, hint) = e.sqlstate();
    let msg = encode_error("FATAL", code, &format!("gatekeeper: {e}"), hint);
    let _ = client.write_all(&msg).await;
    let _ = client.shutdown().await;
    let drain = async {
        let mut sink = vec![0u8; 8192];
        let mut total = 0;
        while let Ok(n @ 1..) = client.read(&mut sink).await {
            total += n;
            if total > REFUSE_DRAIN_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(REFUSE_DRAIN, drain).await;
}

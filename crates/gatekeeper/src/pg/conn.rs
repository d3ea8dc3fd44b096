//! One client connection, top to bottom: the startup phase (SSLRequest and GSSENCRequest
//! refused with `N`, CancelRequest matched and forwarded, StartupMessage forwarded to a
//! new upstream connection), then the relay of both directions until either side closes.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::frame::{next_startup, StartupFrame};
use super::gate::TxnGate;
use super::message::encode_error;
use super::relay::relay;
use super::{ConnError, Shared};

/// Serves one accepted client connection.
pub(crate) async fn serve_client<G: TxnGate>(
    client: TcpStream,
    shared: Arc<Shared<G>>,
    conn_id: u64,
) -> Result<(), ConnError> {
    let _ = client.set_nodelay(true);
    let mut client = client;
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let limits = &shared.config.limits;
    let startup =
        match tokio::time::timeout(limits.startup_timeout, startup_phase(&mut client, &mut buf, &shared)).await {
            Ok(Ok(Some(s))) => s,
            Ok(Ok(None)) => return Ok(()),
            Ok(Err(e)) => {
                refuse(&mut client, &e).await;
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

/// Reads until a StartupMessage (its bytes and `application_name`); answers SSL/GSSENC
/// requests; handles a cancel, or a client closing, with `None`.
async fn startup_phase<G: TxnGate>(
    client: &mut TcpStream,
    buf: &mut BytesMut,
    shared: &Shared<G>,
) -> Result<Option<(Bytes, Option<String>)>, ConnError> {
    loop {
        match next_startup(buf)? {
            Some(StartupFrame::SslRequest) | Some(StartupFrame::GssEncRequest) => {
                // No TLS or GSSAPI encryption configured: refuse as PostgreSQL does; the
                // client goes on in plaintext (or gives up, by its sslmode).
                client.write_all(b"N").await.map_err(|e| ConnError::io("answer an SSL/GSSENC request", e))?;
            }
            Some(StartupFrame::Cancel { bytes, pid, secret }) => {
                forward_cancel(shared, bytes, pid, &secret).await;
                return Ok(None);
            }
            Some(StartupFrame::Startup { bytes, params, .. }) => {
                let app_name = params.into_iter().find(|(k, _)| k == "application_name").map(|(_, v)| v);
                return Ok(Some((bytes, app_name)));
            }
            None => {
                if client.read_buf(buf).await.map_err(|e| ConnError::io("read the startup message", e))? == 0 {
                    return Ok(None);
                }
            }
        }
    }
}

async fn forward_cancel<G: TxnGate>(shared: &Shared<G>, bytes: Bytes, pid: i32, secret: &Bytes) {
    let Some((owner, slot)) = shared.keys.find(pid, secret) else {
        tracing::info!(pid, "cancel request with an unknown key dropped");
        return;
    };
    if slot.fire() {
        tracing::info!(pid, owner, "cancel request withdrew a transaction waiting for admission");
        return;
    }
    tracing::debug!(pid, owner, "cancel request forwarded");
    match connect(shared).await {
        Ok(mut up) => {
            if let Err(e) = up.write_all(&bytes).await {
                tracing::warn!(pid, "cancel request not forwarded: {e}");
            }
            // The server closes the connection once it has read the request.
            let mut sink = [0u8; 16];
            let _ = tokio::time::timeout(shared.config.limits.startup_timeout, up.read(&mut sink)).await;
        }
        Err(e) => tracing::warn!(pid, "cancel request not forwarded: {e}"),
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
pub(crate) async fn refuse(client: &mut TcpStream, e: &ConnError) {
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

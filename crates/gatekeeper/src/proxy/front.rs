//! The client side: HTTP/1.1 of our own on each client connection, one request at a time
//! (pipelined requests wait in the read buffer).
//!
//! Why not hyper's server: measured against nginx's `proxy_pass`, the gatekeeper's CPU per
//! request was 1.3× nginx's, spread over hyper's dispatcher (its service future, its
//! buffers and flushes), building a header map of every request and hashing its names,
//! and the allocations of both. Here a request head is parsed in place ([`head`]) and
//! forwarded from its own bytes; the response head is written with whatever of the body
//! is already read, in one write ([`respond`]).
//!
//! A connection's loop: read a head (within `--header-timeout`, counted from when the
//! wait for it starts, so it bounds an idle kept-alive connection too); hand it to
//! [`route::handle`]; write the reply; go on while both sides keep the connection. While a
//! request is handled, the connection is watched (once its body, if any, has been read:
//! until then a client that leaves is noticed by the body's read): a client that closes it
//! (or resets it) is gone, and the request's future is dropped, which takes it out of the
//! queue or lets its exchange go on alone ([`super::detach`]). Bytes a client sends
//! meanwhile (the next pipelined request) are buffered, up to
//! [`head::MAX_REQUEST_HEAD_BYTES`]; past that the watch stops until the reply is written.
//!
//! Shutdown: a connection waiting for a head closes at once; one in the middle of a
//! request finishes it, answers with `connection: close` and closes.
//!
//! Closing: after the last response the proxy closes its side first, then reads and drops
//! what the client still sends (an unread request body, say) for at most
//! [`body::LINGER`]: closing with unread bytes would reset the connection, and a reset can
//! destroy the response before the client reads it.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use bytes::BytesMut;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use super::route;
use super::Shared;
use crate::metrics::OpenGuard;

pub(super) mod body;
pub mod head;
pub(super) mod respond;

use body::{ClientBody, ReadSide, Slot};
use head::{BodyFraming, RequestHead};
use respond::Reply;

/// Serve one client connection to its end (see the module docs). `stop` turns true at
/// shutdown.
pub(super) async fn serve(
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    mut stop: watch::Receiver<bool>,
    _open: OpenGuard,
) {
    let (rd, mut wr) = stream.into_split();
    let mut side = Some(ReadSide { rd, buf: BytesMut::with_capacity(body::READ_CHUNK_BYTES / 4) });
    let mut out = BytesMut::with_capacity(4096);
    let mut timer = Box::pin(tokio::time::sleep_until(Instant::now()));
    let mut slot: Option<Slot> = None;
    let mut spare_fields = Vec::new();
    while let Some(mut rs) = side.take() {
        let read = read_head(&mut rs, &mut spare_fields, &mut timer, shared.cfg.header_timeout, &mut stop);
        let head = match read.await {
            Ok(Some(h)) => h,
            Ok(None) => return,
            Err(refused) => {
                tracing::debug!("client connection {peer}: {} ({})", refused.reason, refused.status);
                let reply = Reply::Own { status: refused.status, msg: refused.reason, retry_after_s: None };
                if respond::write_reply(&mut wr, &mut out, reply, &unparsed_head(), false, None).await.is_ok() {
                    close(wr, Some(rs)).await;
                }
                return;
            }
        };
        let body = match head.body {
            BodyFraming::None => {
                side = Some(rs);
                None
            }
            framing => {
                let s = slot.get_or_insert_with(Arc::default);
                Some(ClientBody::new(framing, rs, s.clone(), head.expect_continue))
            }
        };
        let reply = {
            // Pinned where it is made: the select holds a reference, not a copy of the future.
            let handling = std::pin::pin!(route::handle(&shared, peer, &head, body));
            tokio::select! {
                biased;
                reply = handling => reply,
                () = watch_gone(&mut side, slot.as_ref()) => return,
            }
        };
        if let Some(s) = slot.as_ref().filter(|_| side.is_none()) {
            side = s.take();
        }
        let body_read = head.body == BodyFraming::None || slot.as_ref().is_some_and(|s| s.complete());
        let keep = head.keep_alive && body_read && side.is_some() && !*stop.borrow();
        let written = respond::write_reply(&mut wr, &mut out, reply, &head, keep, side.as_mut()).await;
        spare_fields = head.fields;
        match written {
            Ok(true) => {}
            Ok(false) => return close(wr, side).await,
            Err(e) => {
                tracing::debug!("client connection {peer}: {e}");
                return;
            }
        }
    }
}

/// Close after the last response: the write side first (the client sees the end), then
/// what the client still sends is read and dropped for a while ([`ReadSide::linger`]).
async fn close(mut wr: OwnedWriteHalf, side: Option<ReadSide>) {
    let _ = tokio::io::AsyncWriteExt::shutdown(&mut wr).await;
    if let Some(mut rs) = side {
        rs.linger().await;
    }
}

/// Read until a whole request head is buffered, and take it. `Ok(None)`: the connection
/// is over (closed, failed, silent past the header timeout, or shutdown between requests).
async fn read_head(
    rs: &mut ReadSide,
    spare_fields: &mut Vec<head::FieldAt>,
    timer: &mut Pin<Box<Sleep>>,
    timeout: std::time::Duration,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<RequestHead>, head::Refused> {
    let mut armed = false;
    loop {
        if let Some(h) = head::parse_request_head(&mut rs.buf, spare_fields)? {
            return Ok(Some(h));
        }
        if rs.buf.is_empty() && *stop.borrow() {
            return Ok(None);
        }
        let between_requests = rs.buf.is_empty();
        let read = std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = rs.poll_read(cx) {
                return Poll::Ready(Some(r));
            }
            // Armed only when a wait is needed: a head that is already there costs no timer.
            if !armed {
                timer.as_mut().reset(Instant::now() + timeout);
                armed = true;
            }
            timer.as_mut().poll(cx).map(|()| None)
        });
        let read = tokio::select! {
            biased;
            r = read => r,
            _ = stop.changed(), if between_requests => return Ok(None),
        };
        match read {
            Some(Ok(0)) | Some(Err(_)) | None => return Ok(None),
            Some(Ok(_)) => {}
        }
    }
}

/// Resolves when the client closes or resets the connection; bytes it sends meanwhile are
/// kept for the next request (bounded; see the module docs). Without the read side (a
/// body has it), first waits for the body to hand it back into `side`.
async fn watch_gone(side: &mut Option<ReadSide>, slot: Option<&Slot>) {
    let rs = match side {
        Some(rs) => rs,
        None => match slot {
            Some(slot) => side.insert(slot.wait().await),
            None => return std::future::pending().await,
        },
    };
    rs.closed(head::MAX_REQUEST_HEAD_BYTES).await
}

/// The head a refusal of an unparsable request is written against: HTTP/1.1, not HEAD.
fn unparsed_head() -> RequestHead {
    RequestHead {
        bytes: bytes::Bytes::from_static(b"GET"),
        method: 0..3,
        path_and_query: 0..0,
        http10: false,
        fields: Vec::new(),
        body: BodyFraming::None,
        keep_alive: false,
        expect_continue: false,
    }
}

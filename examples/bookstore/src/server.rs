//! The bookstore's HTTP/1.1 front: routes each path to an interaction,
//! decodes query/form parameters and the session cookies, and answers with
//! the rendered page. Connections are persistent (an emulated browser keeps
//! one for its whole session) and bounded in number.
//!
//! Session protocol (what a load generator must send): nothing is required —
//! every page works from a bare `GET /path`. A client that stores cookies
//! gets real sessions: pages that create or change session state answer with
//! `Set-Cookie: sc_id=N` (shopping cart) and `Set-Cookie: c_id=N` (customer),
//! and later requests carrying them reuse that cart and customer. The same
//! values may be given as query parameters (`?sc_id=N&c_id=N`), which win
//! over cookies. Every response names its interaction in the
//! `X-Bookstore-Interaction` header (the TPC-W page code).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, COOKIE, SET_COOKIE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::error::{Error, Result};
use crate::html::{esc, Page};
use crate::interactions::{Interaction, Request, Session, Store};
use crate::reqlog::RequestLog;

/// Limits of the HTTP front.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Open connections at most; at the limit, accepting pauses and new
    /// connections wait in the kernel's listen backlog.
    pub max_connections: usize,
    /// Largest accepted form body (POST); larger bodies get 413.
    pub max_body_bytes: usize,
    /// Where to log every request (see [`crate::reqlog`]); `None`: no log.
    pub request_log: Option<Arc<RequestLog>>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions { max_connections: 4_096, max_body_bytes: 64 * 1024, request_log: None }
    }
}

/// Serves until `shutdown` resolves; connections still open then are closed
/// when the caller's runtime ends.
pub async fn serve(
    listener: TcpListener,
    store: Arc<Store>,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    if opts.max_connections == 0 {
        return Err(Error::Config("--max-connections must be at least 1".into()));
    }
    let slots = Arc::new(Semaphore::new(opts.max_connections));
    let opts = Arc::new(opts);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            p = slots.clone().acquire_owned() => p.map_err(|_| Error::Config("connection limiter closed".into()))?,
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Transient (e.g. EMFILE): back off briefly instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let store = store.clone();
        let opts = opts.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let store = store.clone();
                let opts = opts.clone();
                async move {
                    // Dropped with the handler if the connection closes first: then the row
                    // says `dropped`.
                    let mut entry = opts.request_log.as_ref().map(|l| l.begin(req.uri().path()));
                    let resp = respond(&store, &opts, req).await;
                    if let Some(e) = entry.as_mut() {
                        e.done(resp.status().as_u16());
                    }
                    Ok::<_, Infallible>(resp)
                }
            });
            if let Err(e) = http1::Builder::new().keep_alive(true).serve_connection(TokioIo::new(stream), service).await
            {
                tracing::debug!("connection from {peer}: {e}");
            }
            drop(permit);
        });
    }
}

fn html_response(status: u16, code: Option<&str>, html: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(html)));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(code) = code {
        if let Ok(v) = HeaderValue::from_str(code) {
            h.insert("x-bookstore-interaction", v);
        }
    }
    resp
}

fn error_page(err: &Error) -> String {
    let mut page = Page::new("Error");
    page.raw(&format!("<p class=\"error\">{}</p>\n", esc(&err.to_string())));
    page.finish()
}

/// Reads the session cookies (`sc_id`, `c_id`); malformed values are ignored
/// (a stale or foreign cookie must not break browsing).
pub fn parse_cookies<'a>(headers: impl Iterator<Item = &'a HeaderValue>) -> Session {
    let mut s = Session::default();
    for v in headers {
        let Ok(v) = v.to_str() else { continue };
        for pair in v.split(';') {
            let Some((k, val)) = pair.trim().split_once('=') else { continue };
            match k.trim() {
                "sc_id" => s.sc_id = val.trim().parse().ok(),
                "c_id" => s.c_id = val.trim().parse().ok(),
                _ => {}
            }
        }
    }
    s
}

async fn respond(store: &Store, opts: &ServeOptions, req: hyper::Request<Incoming>) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let path = req.uri().path().to_string();
    if path == "/healthz" {
        return html_response(200, None, "ok\n".into());
    }
    let Some(which) = Interaction::from_path(&path) else {
        return html_response(404, None, error_page(&Error::NotFound(format!("no page at {path}"))));
    };
    let code = Some(which.code());
    let method = req.method().clone();
    if method != Method::GET && method != Method::HEAD && method != Method::POST {
        let mut r = html_response(405, code, error_page(&Error::BadRequest(format!("method {method} not allowed"))));
        r.headers_mut().insert("allow", HeaderValue::from_static("GET, HEAD, POST"));
        return r;
    }
    let cookies = parse_cookies(req.headers().get_all(COOKIE).iter());
    let mut params: Vec<(String, String)> =
        req.uri().query().map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect()).unwrap_or_default();
    if method == Method::POST {
        match Limited::new(req.into_body(), opts.max_body_bytes).collect().await {
            Ok(body) => params.extend(form_urlencoded::parse(&body.to_bytes()).into_owned()),
            Err(e) => {
                let status = if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() { 413 } else { 400 };
                return html_response(status, code, error_page(&Error::BadRequest(format!("request body: {e}"))));
            }
        }
    }
    let request = match Request::new(params, cookies) {
        Ok(r) => r,
        Err(e) => return html_response(e.status(), code, error_page(&e)),
    };
    let result = store.handle(which, &request).await;
    let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    match result {
        Ok(outcome) => {
            let mut resp = html_response(200, code, outcome.html);
            for (name, new, old) in
                [("sc_id", outcome.session.sc_id, cookies.sc_id), ("c_id", outcome.session.c_id, cookies.c_id)]
            {
                if let Some(v) = new.filter(|v| Some(*v) != old) {
                    if let Ok(h) = HeaderValue::from_str(&format!("{name}={v}; Path=/; HttpOnly; SameSite=Lax")) {
                        resp.headers_mut().append(SET_COOKIE, h);
                    }
                }
            }
            if method == Method::HEAD {
                *resp.body_mut() = Full::new(Bytes::new());
            }
            tracing::debug!(interaction = which.code(), elapsed_ms, "ok");
            resp
        }
        Err(e) => {
            if e.status() >= 500 {
                tracing::warn!(interaction = which.code(), elapsed_ms, "{e}");
            } else {
                tracing::debug!(interaction = which.code(), elapsed_ms, "{e}");
            }
            html_response(e.status(), code, error_page(&e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_parsed_leniently() {
        let a = HeaderValue::from_static("foo=1; sc_id=42; c_id=x");
        let b = HeaderValue::from_static("c_id=7");
        let s = parse_cookies([&a, &b].into_iter());
        assert_eq!(s, Session { sc_id: Some(42), c_id: Some(7) });
        let s = parse_cookies([&HeaderValue::from_static("garbage")].into_iter());
        assert_eq!(s, Session::default());
    }
}

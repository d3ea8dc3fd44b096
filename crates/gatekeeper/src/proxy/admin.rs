//! The admin listener: `/metrics` (Prometheus text) and `/healthz`, for every protocol
//! (the caller renders the metrics).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::reply::text_response;

/// Renders `/metrics` at each request.
pub(crate) type Render = Arc<dyn Fn() -> String + Send + Sync>;

pub(crate) async fn admin_loop(listener: TcpListener, render: Render) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let render = render.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let render = render.clone();
                async move {
                    let r = match req.uri().path() {
                        "/metrics" => {
                            let mut r = text_response(StatusCode::OK, "");
                            *r.body_mut() = Full::new(Bytes::from(render())).map_err(|e| match e {}).boxed_unsync();
                            r.headers_mut()
                                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
                            r
                        }
                        "/healthz" => text_response(StatusCode::OK, "ok"),
                        _ => text_response(StatusCode::NOT_FOUND, "try /metrics"),
                    };
                    Ok::<_, Infallible>(r)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

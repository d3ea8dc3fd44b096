//! The gatekeeper's own answers (errors, 503 with `Retry-After`).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

use super::ProxyBody;
use super::Shared;

pub(super) fn text_response(status: StatusCode, msg: &str) -> Response<ProxyBody> {
    let mut r = Response::new(Full::new(Bytes::from(format!("{msg}\n"))).map_err(|e| match e {}).boxed_unsync());
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

pub(super) fn unavailable(shared: &Shared, msg: &str) -> Response<ProxyBody> {
    let mut r = text_response(StatusCode::SERVICE_UNAVAILABLE, msg);
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(shared.cfg.retry_after_s));
    r
}

//! What a request is answered with, whatever the protocol carrying it: the status, the
//! head (in HTTP/1.1 form, in [`Responder::head`]) and the body. HTTP/1.1 connections
//! ([`super::Conn`]) write it as it is; HTTP/2 streams ([`crate::http2`]) hand their request
//! over in the same parsed form and convert the head into their own frames.
//!
//! The status is decided in RFC 9110's order, top to bottom: method, resolution,
//! preconditions, range. Nothing here writes to a socket.

use std::ops::Range;
use std::sync::Arc;

use super::heads::{redirect_head, FileHead, HttpsTarget};
use super::{evaluate_conditions, file_version, refusal_status, representation, split_target, Body};
use crate::http::parse::{Method, Request};
use crate::http::precondition::{Validators, Verdict};
use crate::http::{response, Status};
use crate::live::Live;
use crate::resolve::{self, Resolved};
use crate::server::Shared;
use crate::site::Site;

/// The answer to one request: its status and body; its head is in [`Responder::head`].
pub(crate) struct Answer {
    pub status: Status,
    pub body: Body,
}

/// The buffers answering a request needs, reused from one request to the next.
pub(crate) struct Responder {
    pub shared: Arc<Shared>,
    /// The response head, HTTP/1.1 wire form (with an error page's body at its end).
    pub head: Vec<u8>,
    pub(super) path: Vec<u8>,
    pub(super) scratch: Vec<u8>,
    pub(super) etag: Vec<u8>,
    /// The indices of the `cache-control` rules matching a path (at most their number).
    pub(super) glob_matches: Vec<usize>,
}

impl Responder {
    pub(crate) fn new(shared: Arc<Shared>) -> Responder {
        Responder {
            shared,
            head: Vec::with_capacity(512),
            path: Vec::with_capacity(256),
            scratch: Vec::with_capacity(256),
            etag: Vec::with_capacity(40),
            glob_matches: Vec::new(),
        }
    }

    /// The site `req` is for (`crate::site`), or what it is answered instead: the
    /// `redirect-https` redirect, or the `unknown-host` error.
    fn site(
        &mut self,
        live: &Live,
        buf: &[u8],
        req: &Request,
        keep_alive: bool,
        plaintext: bool,
    ) -> Result<Arc<Site>, Answer> {
        let field = |r: &Range<usize>| &buf[r.clone()];
        if let (true, true, Some(tls)) = (live.config.redirect_https, plaintext, &self.shared.tls) {
            let https = HttpsTarget { host: req.host.as_ref().map(field), target: field(&req.target), port: tls.port };
            https.redirect_head(&mut self.head, &mut self.scratch, keep_alive, req.version_minor);
            return Err(Answer { status: Status::PERMANENT_REDIRECT, body: Body::None });
        }
        match live.sites.choose(crate::site::request_host(field(&req.target), req.host.as_ref().map(field))) {
            Ok(site) => Ok(Arc::clone(site)),
            Err(status) => Err(self.error(status, Some(req), keep_alive)),
        }
    }

    /// Answers `req`, parsed from `buf` (its ranges index `buf`). `plaintext`: it came
    /// over a plaintext connection (`redirect-https` applies). The configuration in force
    /// when it starts (`crate::live`) answers it throughout.
    pub(crate) async fn answer(&mut self, buf: &[u8], req: &Request, keep_alive: bool, plaintext: bool) -> Answer {
        let live = self.shared.live();
        let site = match self.site(&live, buf, req, keep_alive, plaintext) {
            Ok(site) => site,
            Err(answer) => return answer,
        };
        let method = req.method();
        match method {
            Method::Get | Method::Head => {}
            Method::NotAllowed => return self.error(Status::METHOD_NOT_ALLOWED, Some(req), keep_alive),
            Method::Unknown => return self.error(Status::NOT_IMPLEMENTED, Some(req), keep_alive),
        }
        let target = &buf[req.target.clone()];
        let Some((path, query)) = split_target(target) else {
            return self.error(Status::BAD_REQUEST, Some(req), keep_alive);
        };
        let resolved = resolve::normalize(path, &mut self.path).and_then(|slash| {
            resolve::check_dotfiles(&self.path, live.config.dotfiles)?;
            site.root.resolve(&self.path, slash, &mut self.scratch)
        });
        let (file, meta, index) = match resolved {
            Ok(Resolved::File { file, meta, index }) => (file, meta, index),
            Ok(Resolved::AddSlash) => {
                redirect_head(&mut self.head, &mut self.scratch, &self.path, query, keep_alive, req.version_minor);
                return Answer { status: Status::MOVED_PERMANENTLY, body: Body::None };
            }
            Ok(Resolved::Directory { dir }) => {
                let max_entries = live.config.listing_max_entries;
                return self.listing(buf, req, (site, max_entries), dir, keep_alive).await;
            }
            Err(refusal) => return self.error(refusal_status(refusal), Some(req), keep_alive),
        };
        let precompressed = live.config.precompressed;
        let (file, meta, coding) = self.representation(buf, req, (&site.root, precompressed), file, meta, index);

        let (version, mtime_secs) = file_version(&meta);
        let len = version.size_bytes;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        response::etag(&mut self.etag, version, u64::try_from(now.as_nanos()).unwrap_or(u64::MAX));
        representation::tag_coding(&mut self.etag, coding);
        let validators = Validators {
            etag: &self.etag,
            mtime_secs,
            last_modified_strong: mtime_secs.saturating_add(1) <= now.as_secs(),
        };
        let (status, offset, body_len) = match evaluate_conditions(buf, req, &validators, len) {
            Verdict::PreconditionFailed => return self.error(Status::PRECONDITION_FAILED, Some(req), keep_alive),
            Verdict::NotModified => (Status::NOT_MODIFIED, 0, 0),
            Verdict::Full => (Status::OK, 0, len),
            Verdict::Partial { start, end } => (Status::PARTIAL_CONTENT, start, end - start + 1),
            Verdict::Unsatisfiable => (Status::RANGE_NOT_SATISFIABLE, 0, 0),
        };
        let cache_control = representation::cache_control(
            &site.cache_control,
            &self.path,
            index,
            &mut self.scratch,
            &mut self.glob_matches,
        );
        let head = FileHead {
            status,
            name: if index { b"index.html" } else { &self.path },
            offset,
            body_len,
            file_len: len,
            mtime_secs,
            etag: &self.etag,
            coding,
            vary: precompressed.is_on(),
            cache_control,
        };
        head.write(&mut self.head, keep_alive, req.version_minor);
        let body = if method == Method::Head || body_len == 0 {
            Body::None
        } else {
            Body::File { file, offset, len: body_len }
        };
        Answer { status, body }
    }

    /// An error response with a short text body (none to HEAD).
    pub(crate) fn error(&mut self, status: Status, req: Option<&Request>, keep_alive: bool) -> Answer {
        let keep_alive = keep_alive && !super::closes_connection(status);
        let version_minor = req.map_or(1, |r| r.version_minor);
        let with_body = !matches!(req.map(Request::method), Some(Method::Head));
        let len = response::error(&mut self.head, status, keep_alive, version_minor, with_body);
        let body = if with_body { Body::InHead { len } } else { Body::None };
        Answer { status, body }
    }
}

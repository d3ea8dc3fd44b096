//! A directory without `index.html`: 403, or its listing (`crate::listing`), read and
//! rendered off the worker so its length, and its band, is known before it is sent.

use std::fs::File;
use std::sync::Arc;

use super::respond::{Answer, Responder};
use super::{field_lines, refusal_status, Body};
use crate::config::Listings;
use crate::http::parse::{Method, Request, MAX_LIST_LINES};
use crate::http::Status;
use crate::listing::{self, Answer as Decision, Ask};
use crate::site::Site;

impl Responder {
    /// Lists `dir` of `site`, at most `max_entries` entries.
    pub(super) async fn listing(
        &mut self,
        buf: &[u8],
        req: &Request,
        (site, max_entries): (Arc<Site>, usize),
        dir: File,
        keep_alive: bool,
    ) -> Answer {
        let mut accept = [&b""[..]; MAX_LIST_LINES];
        let mut if_match = [&b""[..]; MAX_LIST_LINES];
        let mut if_none_match = [&b""[..]; MAX_LIST_LINES];
        let accept_len = field_lines(buf, &req.accept, &mut accept);
        let if_match_len = field_lines(buf, &req.if_match, &mut if_match);
        let if_none_match_len = field_lines(buf, &req.if_none_match, &mut if_none_match);
        let ask = Ask {
            accept: &accept[..accept_len],
            if_match: &if_match[..if_match_len],
            if_none_match: &if_none_match[..if_none_match_len],
        };
        let setting = site.listings;
        let vary = setting == Listings::Auto;
        let http = (keep_alive, req.version_minor);
        let format = match listing::decide(setting, &ask) {
            Decision::Forbidden => return self.error(Status::FORBIDDEN, Some(req), keep_alive),
            Decision::PreconditionFailed => return self.error(Status::PRECONDITION_FAILED, Some(req), keep_alive),
            Decision::NotModified(format) => {
                listing::write_head(&mut self.head, Status::NOT_MODIFIED, format, 0, vary, http);
                return Answer { status: Status::NOT_MODIFIED, body: Body::None };
            }
            Decision::List(format) => format,
        };
        let (file, len) = match listing::build(site, max_entries, self.path.clone(), dir, format).await {
            Ok(page) => page,
            Err(refusal) => return self.error(refusal_status(refusal), Some(req), keep_alive),
        };
        listing::write_head(&mut self.head, Status::OK, format, len, vary, http);
        let body = if req.method() == Method::Head || len == 0 {
            Body::None
        } else {
            Body::File { file: Arc::new(file), offset: 0, len }
        };
        Answer { status: Status::OK, body }
    }
}

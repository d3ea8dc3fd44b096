//! Which representation of a resolved file is sent: the file, or the precompressed sidecar
//! [`encoding::rank`] prefers among those that exist; and the headers that follow from the
//! choice (`Content-Encoding`, `Vary`, the ETag's coding suffix, `Cache-Control`).
//!
//! Once chosen, the sidecar *is* the file for the rest of the request: its size, its
//! validators, its ranges, and the band of the bytes actually sent. Only the name the
//! `Content-Type` comes from stays the original's.
//!
//! `Vary: Accept-Encoding` goes on every file response (`200`, `206`, `304`, `416`) while
//! `precompressed` is on, not only on paths that have a sidecar: the selection reads
//! `Accept-Encoding` on every request (RFC 9110 §12.5.5: a server SHOULD send `Vary` when
//! its selection algorithm varies on a request header), and a sidecar the operator adds
//! later must not leave a cache serving a stored identity response to every client.

use std::fs::{File, Metadata};
use std::sync::Arc;

use super::field_lines;
use super::respond::Responder;
use crate::cache_control::CacheControl;
use crate::encoding::{self, Coding, Precompressed};
use crate::http::parse::{Request, MAX_LIST_LINES};
use crate::resolve::Root;

impl Responder {
    /// The representation of the file resolved for `self.path` (`index`: its `index.html`)
    /// under `root` the request gets, among the `offered` codings: a sidecar and its
    /// coding, or the file itself and `None`.
    pub(super) fn representation(
        &mut self,
        buf: &[u8],
        req: &Request,
        (root, offered): (&Root, Precompressed),
        file: Arc<File>,
        meta: Metadata,
        index: bool,
    ) -> (Arc<File>, Metadata, Option<Coding>) {
        let mut lines = [&b""[..]; MAX_LIST_LINES];
        let n = field_lines(buf, &req.accept_encoding, &mut lines);
        let ranked = encoding::rank(&lines[..n], offered);
        for &coding in ranked.codings() {
            if let Some((file, meta)) = root.sidecar(&self.path, index, coding.suffix(), &mut self.scratch) {
                return (Arc::new(file), meta, Some(coding));
            }
        }
        (file, meta, None)
    }
}

/// Makes a representation's ETag its own: `"…-gzip"` for the gzip sidecar (its version
/// alone already differs from the file's; the suffix says which coding it is).
pub(super) fn tag_coding(etag: &mut Vec<u8>, coding: Option<Coding>) {
    if let Some(coding) = coding {
        if etag.pop() == Some(b'"') {
            etag.push(b'-');
            etag.extend_from_slice(coding.token().as_bytes());
            etag.push(b'"');
        }
    }
}

/// The `Cache-Control` value the `rules` give the file at `rel` (`index`: its
/// `index.html`); `path` and `matches` are scratch.
pub(super) fn cache_control<'s>(
    rules: &'s CacheControl,
    rel: &[u8],
    index: bool,
    path: &mut Vec<u8>,
    matches: &mut Vec<usize>,
) -> Option<&'s [u8]> {
    if rules.is_empty() {
        return None;
    }
    path.clear();
    path.push(b'/');
    path.extend_from_slice(rel);
    if index {
        if !rel.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(b"index.html");
    }
    rules.value_for(path, matches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_name_their_coding() {
        let mut tag = b"\"2a-5-100\"".to_vec();
        tag_coding(&mut tag, None);
        assert_eq!(tag, b"\"2a-5-100\"");
        tag_coding(&mut tag, Some(Coding::Br));
        assert_eq!(tag, b"\"2a-5-100-br\"");
        let mut weak = b"W/\"2a-5-100\"".to_vec();
        tag_coding(&mut weak, Some(Coding::Gzip));
        assert_eq!(weak, b"W/\"2a-5-100-gzip\"");
    }
}

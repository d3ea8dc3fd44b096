//! Conditional and range requests (RFC 9110 §13 and §14): what a GET or HEAD of
//! a file with a given validator and length should get.

use std::time::{Duration, UNIX_EPOCH};

use super::parse::{parse_u64, trim};

/// The outcome for a representation of `len` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 304: the client's copy is current.
    NotModified,
    /// 200 with the whole body.
    Full,
    /// 206 with bytes `start..=end`.
    Partial { start: u64, end: u64 },
    /// 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// What a request said about validators and ranges (raw header values).
#[derive(Clone, Copy, Debug, Default)]
pub struct Conditions<'a> {
    pub if_none_match: Option<&'a [u8]>,
    pub if_modified_since: Option<&'a [u8]>,
    pub range: Option<&'a [u8]>,
    pub if_range: Option<&'a [u8]>,
    /// Ranges apply to GET only (RFC 9110 §14.2).
    pub is_get: bool,
}

/// Evaluates the preconditions for a file whose strong ETag is `etag` (quoted)
/// and whose modification time is `mtime_secs`.
pub fn evaluate(c: &Conditions<'_>, etag: &[u8], mtime_secs: u64, len: u64) -> Outcome {
    // §13.2.2: If-None-Match takes precedence; If-Modified-Since only without it.
    if let Some(inm) = c.if_none_match {
        if none_match_fails(inm, etag) {
            return Outcome::NotModified;
        }
    } else if let Some(ims) = c.if_modified_since.and_then(parse_http_date) {
        if mtime_secs <= ims {
            return Outcome::NotModified;
        }
    }
    let Some(range) = c.range.filter(|_| c.is_get) else { return Outcome::Full };
    if let Some(if_range) = c.if_range {
        if !if_range_matches(trim(if_range), etag, mtime_secs) {
            return Outcome::Full;
        }
    }
    parse_range(range, len)
}

/// True when some entity-tag in the If-None-Match list matches weakly (§13.1.2).
fn none_match_fails(list: &[u8], etag: &[u8]) -> bool {
    let list = trim(list);
    if list == b"*" {
        return true;
    }
    let ours = strip_weak(etag);
    list.split(|&b| b == b',').any(|tag| strip_weak(trim(tag)) == ours)
}

fn strip_weak(tag: &[u8]) -> &[u8] {
    tag.strip_prefix(b"W/").unwrap_or(tag)
}

/// If-Range: a strong ETag must match exactly; a date must equal Last-Modified.
fn if_range_matches(value: &[u8], etag: &[u8], mtime_secs: u64) -> bool {
    if value.starts_with(b"\"") {
        value == etag
    } else if value.starts_with(b"W/") {
        false
    } else {
        parse_http_date(value) == Some(mtime_secs)
    }
}

/// Unix seconds of an HTTP date (any of the three RFC 9110 formats).
pub fn parse_http_date(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(trim(value)).ok()?;
    let time = httpdate::parse_http_date(text).ok()?;
    time.duration_since(UNIX_EPOCH).ok().map(|d: Duration| d.as_secs())
}

/// A single byte range; anything else (several ranges, other units, bad
/// syntax) is ignored and the whole representation sent, as §14.2 allows.
fn parse_range(value: &[u8], len: u64) -> Outcome {
    let value = trim(value);
    let Some(spec) = value.get(..6).filter(|p| p.eq_ignore_ascii_case(b"bytes=")).map(|_| trim(&value[6..])) else {
        return Outcome::Full;
    };
    if spec.contains(&b',') {
        return Outcome::Full;
    }
    let Some(dash) = spec.iter().position(|&b| b == b'-') else { return Outcome::Full };
    let (first, last) = (trim(&spec[..dash]), trim(&spec[dash + 1..]));
    match (first.is_empty(), last.is_empty()) {
        (true, true) => Outcome::Full,
        // suffix: the last N bytes
        (true, false) => match parse_u64(last) {
            None => Outcome::Full,
            Some(0) => Outcome::Unsatisfiable,
            Some(_) if len == 0 => Outcome::Unsatisfiable,
            Some(n) => Outcome::Partial { start: len - n.min(len), end: len - 1 },
        },
        (false, _) => {
            let Some(start) = parse_u64(first) else { return Outcome::Full };
            let end = if last.is_empty() {
                u64::MAX
            } else {
                match parse_u64(last) {
                    Some(end) if end >= start => end,
                    _ => return Outcome::Full, // invalid range-spec: ignore the header
                }
            };
            if start >= len {
                Outcome::Unsatisfiable
            } else {
                Outcome::Partial { start, end: end.min(len - 1) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ETAG: &[u8] = b"\"5f-100\"";
    const MTIME: u64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT

    fn with(range: &str) -> Outcome {
        evaluate(&Conditions { range: Some(range.as_bytes()), is_get: true, ..Default::default() }, ETAG, MTIME, 1000)
    }

    #[test]
    fn range_table() {
        use Outcome::*;
        let cases: &[(&str, Outcome)] = &[
            ("bytes=0-99", Partial { start: 0, end: 99 }),
            ("bytes=900-", Partial { start: 900, end: 999 }),
            ("bytes=900-5000", Partial { start: 900, end: 999 }),
            ("bytes=-100", Partial { start: 900, end: 999 }),
            ("bytes=-5000", Partial { start: 0, end: 999 }),
            ("bytes=999-999", Partial { start: 999, end: 999 }),
            ("bytes=1000-", Unsatisfiable),
            ("bytes=-0", Unsatisfiable),
            ("bytes=5-1", Full),
            ("bytes=0-1,5-6", Full),
            ("items=0-1", Full),
            ("bytes=a-b", Full),
            ("bytes=-", Full),
            ("BYTES= 1 - 2 ", Partial { start: 1, end: 2 }),
        ];
        for (range, want) in cases {
            assert_eq!(with(range), *want, "{range}");
        }
    }

    #[test]
    fn conditionals_table() {
        use Outcome::*;
        let c = |inm: Option<&'static str>, ims: Option<&'static str>, if_range: Option<&'static str>| Conditions {
            if_none_match: inm.map(str::as_bytes),
            if_modified_since: ims.map(str::as_bytes),
            range: Some(b"bytes=0-0"),
            if_range: if_range.map(str::as_bytes),
            is_get: true,
        };
        let part = Partial { start: 0, end: 0 };
        let cases: &[(Conditions<'_>, Outcome)] = &[
            (c(Some("\"5f-100\""), None, None), NotModified),
            (c(Some("W/\"5f-100\""), None, None), NotModified),
            (c(Some("\"x\", \"5f-100\""), None, None), NotModified),
            (c(Some("*"), None, None), NotModified),
            (c(Some("\"other\""), Some("Sun, 06 Nov 1994 08:49:37 GMT"), None), part),
            (c(None, Some("Sun, 06 Nov 1994 08:49:37 GMT"), None), NotModified),
            (c(None, Some("Sun, 06 Nov 1994 08:49:36 GMT"), None), part),
            (c(None, Some("garbage"), None), part),
            (c(None, None, Some("\"5f-100\"")), part),
            (c(None, None, Some("\"nope\"")), Full),
            (c(None, None, Some("W/\"5f-100\"")), Full),
            (c(None, None, Some("Sun, 06 Nov 1994 08:49:37 GMT")), part),
            (c(None, None, Some("Sun, 06 Nov 1994 08:49:38 GMT")), Full),
        ];
        for (i, (conditions, want)) in cases.iter().enumerate() {
            assert_eq!(evaluate(conditions, ETAG, MTIME, 1000), *want, "case {i}");
        }
        let head = Conditions { range: Some(b"bytes=0-0"), is_get: false, ..Default::default() };
        assert_eq!(evaluate(&head, ETAG, MTIME, 1000), Full, "HEAD ignores Range");
    }
}

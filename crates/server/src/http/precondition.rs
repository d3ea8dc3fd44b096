//! Conditional and range requests (RFC 9110 §13 and §14): what a GET or HEAD of
//! a file with given validators and length should get.
//!
//! Preconditions are evaluated in the order of §13.2.2: `If-Match`, else
//! `If-Unmodified-Since` (412 when false); `If-None-Match`, else
//! `If-Modified-Since` (304 when false); then `Range` under `If-Range`.

use std::time::{Duration, UNIX_EPOCH};

use super::parse::{parse_u64, trim};

/// The outcome for a representation of `len` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// 412: `If-Match` or `If-Unmodified-Since` is false.
    PreconditionFailed,
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
    /// Every `If-Match` line: together one list (RFC 9110 §5.3).
    pub if_match: &'a [&'a [u8]],
    /// Every `If-None-Match` line: together one list.
    pub if_none_match: &'a [&'a [u8]],
    /// `None` when absent or repeated (a repeated date is ignored, §13.1.3).
    pub if_modified_since: Option<&'a [u8]>,
    /// `None` when absent or repeated (§13.1.4).
    pub if_unmodified_since: Option<&'a [u8]>,
    pub range: Option<&'a [u8]>,
    /// A repeated `If-Range` is passed as an empty value, which never matches.
    pub if_range: Option<&'a [u8]>,
    /// Ranges apply to GET only (RFC 9110 §14.2).
    pub is_get: bool,
}

/// The validators of the selected representation.
#[derive(Clone, Copy, Debug)]
pub struct Validators<'a> {
    /// The ETag as sent: quoted, with `W/` in front when weak.
    pub etag: &'a [u8],
    pub mtime_secs: u64,
    /// Whether `Last-Modified` is a strong validator: at least a second before
    /// the response's date (RFC 9110 §8.8.2.2), so no later change can share it.
    pub last_modified_strong: bool,
}

/// Evaluates the preconditions and the range for a representation of `len` bytes.
pub fn evaluate(c: &Conditions<'_>, v: &Validators<'_>, len: u64) -> Verdict {
    if !c.if_match.is_empty() {
        if !any_tag_matches(c.if_match, v.etag, Comparison::Strong) {
            return Verdict::PreconditionFailed;
        }
    } else if let Some(since) = c.if_unmodified_since.and_then(parse_http_date) {
        if v.mtime_secs > since {
            return Verdict::PreconditionFailed;
        }
    }
    if !c.if_none_match.is_empty() {
        if any_tag_matches(c.if_none_match, v.etag, Comparison::Weak) {
            return Verdict::NotModified;
        }
    } else if let Some(since) = c.if_modified_since.and_then(parse_http_date) {
        if v.mtime_secs <= since {
            return Verdict::NotModified;
        }
    }
    let Some(range) = c.range.filter(|_| c.is_get) else { return Verdict::Full };
    if let Some(if_range) = c.if_range {
        if !if_range_matches(trim(if_range), v) {
            return Verdict::Full;
        }
    }
    parse_range(range, len)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Comparison {
    /// §8.8.3.2: both strong and identical.
    Strong,
    /// Identical opaque tags, weak or not.
    Weak,
}

/// One entity-tag of a list: `Some((weak, opaque-tag with quotes))`; `*` is
/// `(false, b"*")`.
type Tag<'a> = (bool, &'a [u8]);

/// The entity-tags of one `If-Match` / `If-None-Match` line
/// (`"*" / #entity-tag`, §13.1.1). Parsing stops at the first malformed member:
/// what came before it still counts, nothing after it does.
fn tags(mut line: &[u8]) -> impl Iterator<Item = Tag<'_>> {
    std::iter::from_fn(move || loop {
        line = trim(line);
        match line {
            [] => return None,
            [b',', rest @ ..] => line = rest,
            [b'*', rest @ ..] => {
                line = rest;
                return Some((false, b"*".as_slice()));
            }
            _ => {
                let (weak, rest) = match line.strip_prefix(b"W/") {
                    Some(rest) => (true, rest),
                    None => (false, line),
                };
                if rest.first() != Some(&b'"') {
                    line = &[];
                    return None;
                }
                let Some(close) = rest[1..].iter().position(|&b| b == b'"') else {
                    line = &[];
                    return None;
                };
                let tag = &rest[..close + 2];
                line = &rest[close + 2..];
                return Some((weak, tag));
            }
        }
    })
}

fn split_tag(etag: &[u8]) -> Tag<'_> {
    match etag.strip_prefix(b"W/") {
        Some(rest) => (true, rest),
        None => (false, etag),
    }
}

/// True when `*` or some entity-tag in the lines matches ours.
fn any_tag_matches(lines: &[&[u8]], etag: &[u8], how: Comparison) -> bool {
    let (ours_weak, ours) = split_tag(etag);
    lines
        .iter()
        .flat_map(|line| tags(line))
        .any(|(weak, tag)| tag == b"*" || tag == ours && (how == Comparison::Weak || !weak && !ours_weak))
}

/// If-Range (§13.1.5): an entity-tag must match strongly; a date must equal a
/// strong Last-Modified.
fn if_range_matches(value: &[u8], v: &Validators<'_>) -> bool {
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        let (ours_weak, ours) = split_tag(v.etag);
        let (theirs_weak, theirs) = split_tag(value);
        !ours_weak && !theirs_weak && theirs == ours
    } else {
        v.last_modified_strong && parse_http_date(value) == Some(v.mtime_secs)
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
fn parse_range(value: &[u8], len: u64) -> Verdict {
    let value = trim(value);
    let Some(spec) = value.get(..6).filter(|p| p.eq_ignore_ascii_case(b"bytes=")).map(|_| trim(&value[6..])) else {
        return Verdict::Full;
    };
    if spec.contains(&b',') {
        return Verdict::Full;
    }
    let Some(dash) = spec.iter().position(|&b| b == b'-') else { return Verdict::Full };
    let (first, last) = (trim(&spec[..dash]), trim(&spec[dash + 1..]));
    match (first.is_empty(), last.is_empty()) {
        (true, true) => Verdict::Full,
        // suffix: the last N bytes
        (true, false) => match parse_position(last) {
            None => Verdict::Full,
            Some(0) => Verdict::Unsatisfiable,
            Some(_) if len == 0 => Verdict::Unsatisfiable,
            Some(n) => Verdict::Partial { start: len - n.min(len), end: len - 1 },
        },
        (false, _) => {
            let Some(start) = parse_position(first) else { return Verdict::Full };
            let end = if last.is_empty() {
                u64::MAX
            } else {
                match parse_position(last) {
                    Some(end) if end >= start => end,
                    _ => return Verdict::Full, // invalid range-spec: ignore the header
                }
            };
            if start >= len {
                Verdict::Unsatisfiable
            } else {
                Verdict::Partial { start, end: end.min(len - 1) }
            }
        }
    }
}

/// A byte position: digits only, any length; past `u64::MAX` it saturates
/// (a position beyond any file is still a position: `bytes=99999999999999999999-`
/// is unsatisfiable, not malformed).
fn parse_position(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let digits = &s[s.iter().position(|&b| b != b'0').unwrap_or(s.len())..];
    match digits.len() {
        0 => Some(0),
        1..=19 => parse_u64(digits),
        _ => Some(u64::MAX), // every file is shorter than this
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ETAG: &[u8] = b"\"5f-100\"";
    const MTIME: u64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT
    const V: Validators<'static> = Validators { etag: ETAG, mtime_secs: MTIME, last_modified_strong: true };

    fn with(range: &str) -> Verdict {
        evaluate(&Conditions { range: Some(range.as_bytes()), is_get: true, ..Default::default() }, &V, 1000)
    }

    #[test]
    fn range_table() {
        use Verdict::*;
        let cases: &[(&str, Verdict)] = &[
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
            // Positions past u64: beyond the file, not malformed.
            ("bytes=18446744073709551615-", Unsatisfiable),
            ("bytes=99999999999999999999999-", Unsatisfiable),
            ("bytes=0-99999999999999999999999", Partial { start: 0, end: 999 }),
            ("bytes=-99999999999999999999999", Partial { start: 0, end: 999 }),
            ("bytes=0000000000000000000000010-11", Partial { start: 10, end: 11 }),
        ];
        for (range, want) in cases {
            assert_eq!(with(range), *want, "{range}");
        }
    }

    #[test]
    fn conditionals_table() {
        use Verdict::*;
        let c = |inm: Option<&'static str>, ims: Option<&'static str>, if_range: Option<&'static str>| Conditions {
            if_none_match: inm.map_or(&[][..], |v| Box::leak(Box::new([v.as_bytes()]))),
            if_modified_since: ims.map(str::as_bytes),
            range: Some(b"bytes=0-0"),
            if_range: if_range.map(str::as_bytes),
            is_get: true,
            ..Default::default()
        };
        let part = Partial { start: 0, end: 0 };
        let cases: &[(Conditions<'_>, Verdict)] = &[
            (c(Some("\"5f-100\""), None, None), NotModified),
            (c(Some("W/\"5f-100\""), None, None), NotModified),
            (c(Some("\"x\", \"5f-100\""), None, None), NotModified),
            (c(Some("\"a,b\", \"5f-100\""), None, None), NotModified),
            (c(Some("*"), None, None), NotModified),
            (c(Some("\"other\""), Some("Sun, 06 Nov 1994 08:49:37 GMT"), None), part),
            (c(Some("garbage, \"5f-100\""), None, None), part),
            (c(None, Some("Sun, 06 Nov 1994 08:49:37 GMT"), None), NotModified),
            (c(None, Some("Sun, 06 Nov 1994 08:49:36 GMT"), None), part),
            (c(None, Some("garbage"), None), part),
            (c(None, None, Some("\"5f-100\"")), part),
            (c(None, None, Some("\"nope\"")), Full),
            (c(None, None, Some("W/\"5f-100\"")), Full),
            (c(None, None, Some("")), Full),
            (c(None, None, Some("Sun, 06 Nov 1994 08:49:37 GMT")), part),
            (c(None, None, Some("Sun, 06 Nov 1994 08:49:38 GMT")), Full),
        ];
        for (i, (conditions, want)) in cases.iter().enumerate() {
            assert_eq!(evaluate(conditions, &V, 1000), *want, "case {i}");
        }
        let head = Conditions { range: Some(b"bytes=0-0"), is_get: false, ..Default::default() };
        assert_eq!(evaluate(&head, &V, 1000), Full, "HEAD ignores Range");
    }

    /// If-Match / If-Unmodified-Since (§13.1.1, §13.1.4), their precedence
    /// over If-None-Match and Range (§13.2.2), and lists spread over lines.
    #[test]
    fn preconditions_table() {
        use Verdict::*;
        const LM: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
        const BEFORE: &str = "Sun, 06 Nov 1994 08:49:36 GMT";
        struct Case {
            if_match: &'static [&'static str],
            ius: Option<&'static str>,
            inm: &'static [&'static str],
            range: Option<&'static str>,
            etag: &'static str,
            want: Verdict,
        }
        let case = |if_match, ius, inm, range, etag, want| Case { if_match, ius, inm, range, etag, want };
        let cases = [
            case(&["\"5f-100\""], None, &[], None, "\"5f-100\"", Full),
            case(&["\"x\", \"5f-100\""], None, &[], None, "\"5f-100\"", Full),
            case(&["\"x\"", "\"5f-100\""], None, &[], None, "\"5f-100\"", Full),
            case(&["*"], None, &[], None, "\"5f-100\"", Full),
            case(&["\"stale\""], None, &[], None, "\"5f-100\"", PreconditionFailed),
            case(&["\"stale\""], None, &[], Some("bytes=0-9"), "\"5f-100\"", PreconditionFailed),
            case(&["W/\"5f-100\""], None, &[], None, "\"5f-100\"", PreconditionFailed),
            case(&["\"5f-100\""], None, &[], None, "W/\"5f-100\"", PreconditionFailed),
            case(&["garbage"], None, &[], None, "\"5f-100\"", PreconditionFailed),
            // If-Match decides; If-Unmodified-Since is then not looked at.
            case(&["\"5f-100\""], Some(BEFORE), &[], None, "\"5f-100\"", Full),
            case(&[], Some(LM), &[], Some("bytes=0-9"), "\"5f-100\"", Partial { start: 0, end: 9 }),
            case(&[], Some(BEFORE), &[], Some("bytes=0-9"), "\"5f-100\"", PreconditionFailed),
            case(&[], Some("not a date"), &[], None, "\"5f-100\"", Full),
            // 412 comes before 304.
            case(&["\"stale\""], None, &["\"5f-100\""], None, "\"5f-100\"", PreconditionFailed),
            case(&["\"5f-100\""], None, &["\"5f-100\""], None, "\"5f-100\"", NotModified),
            // If-None-Match lines combine into one list.
            case(&[], None, &["\"a\"", "\"5f-100\""], None, "\"5f-100\"", NotModified),
            case(&[], None, &["\"5f-100\"", "\"a\""], None, "\"5f-100\"", NotModified),
            case(&[], None, &["\"a\"", "\"b\""], None, "\"5f-100\"", Full),
        ];
        for (i, c) in cases.iter().enumerate() {
            let if_match: Vec<&[u8]> = c.if_match.iter().map(|s| s.as_bytes()).collect();
            let inm: Vec<&[u8]> = c.inm.iter().map(|s| s.as_bytes()).collect();
            let conditions = Conditions {
                if_match: &if_match,
                if_none_match: &inm,
                if_unmodified_since: c.ius.map(str::as_bytes),
                range: c.range.map(str::as_bytes),
                is_get: true,
                ..Default::default()
            };
            let v = Validators { etag: c.etag.as_bytes(), ..V };
            assert_eq!(evaluate(&conditions, &v, 1000), c.want, "case {i}");
        }
    }

    #[test]
    fn if_range_date_needs_a_strong_last_modified() {
        let c = Conditions {
            range: Some(b"bytes=0-0"),
            if_range: Some(b"Sun, 06 Nov 1994 08:49:37 GMT"),
            is_get: true,
            ..Default::default()
        };
        assert_eq!(evaluate(&c, &V, 10), Verdict::Partial { start: 0, end: 0 });
        let weak = Validators { last_modified_strong: false, ..V };
        assert_eq!(evaluate(&c, &weak, 10), Verdict::Full);
    }
}

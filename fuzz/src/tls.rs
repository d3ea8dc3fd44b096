//! `shortfirst serve`'s HTTPS configuration: the server names of a `[[tls]]` table.

use shortfirst_server::tls::names::{NamePattern, MAX_NAME_BYTES};

use crate::{fields, text};

/// Input: a name as written in a `[[tls]]` table, NUL, a client's SNI name.
/// Invariants: an accepted name is at most 253 bytes of letters, digits, hyphens and dots
/// (a `*.` only in front); written back it parses to itself; it matches itself in upper
/// case (a wildcard: one label in front of its suffix) and never a name with one more or
/// one fewer label; matching any SNI name is total.
pub fn tls_names(data: &[u8]) {
    let [name, sni] = fields::<2>(data);
    let (name, sni) = (text(name), text(sni));
    let Ok(pattern) = NamePattern::parse(&name) else {
        let _ = NamePattern::parse(&sni).map(|p| p.matches(&name));
        return;
    };
    let written = pattern.to_string();
    assert_eq!(NamePattern::parse(&written).as_ref(), Ok(&pattern), "{written:?} does not parse back");
    let bare = written.strip_prefix("*.").unwrap_or(&written);
    assert!(bare.len() <= MAX_NAME_BYTES, "{written:?} too long");
    assert!(bare.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'));
    let own = match &pattern {
        NamePattern::Exact(n) => n.to_ascii_uppercase(),
        NamePattern::Wildcard(suffix) => format!("X.{}", suffix.to_ascii_uppercase()),
    };
    assert!(pattern.matches(&own), "{written:?} does not match {own:?}");
    assert!(!pattern.matches(&format!("y.{own}")), "{written:?} matches a name one label longer");
    if let Some((_, shorter)) = own.split_once('.') {
        assert!(!pattern.matches(shorter), "{written:?} matches {shorter:?}, one label shorter");
    }
    let _ = pattern.matches(&sni);
}

//! The server names a certificate is chosen for (`names` in a `[[tls]]` table), and how a
//! client's SNI name matches them. Pure: no I/O, fuzzed (`fuzz/fuzz_targets/tls_names.rs`).
//!
//! A name is a DNS name of letters, digits and hyphens in dot-separated labels (1 to 63
//! bytes each, no hyphen first or last, 253 bytes at most), compared without case; or
//! `*.` and such a name, matching exactly one more label in front (`*.example.com`
//! matches `a.example.com`, not `example.com` nor `a.b.example.com`, as RFC 6125 §6.4.3).

use std::fmt;

/// Longest DNS name (RFC 1035 §2.3.4, without the final dot).
pub const MAX_NAME_BYTES: usize = 253;
/// Longest label.
pub const MAX_LABEL_BYTES: usize = 63;

/// One name a certificate is chosen for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamePattern {
    /// The name itself, lower case.
    Exact(String),
    /// `*.` + this suffix (lower case): any one label in front of it.
    Wildcard(String),
}

/// Why a name was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("empty name")]
    Empty,
    #[error("longer than {MAX_NAME_BYTES} bytes")]
    TooLong,
    #[error("an empty label (two dots, or a dot first or last)")]
    EmptyLabel,
    #[error("a label longer than {MAX_LABEL_BYTES} bytes")]
    LabelTooLong,
    #[error("byte {0:?} is not a letter, digit, hyphen or dot (a `*` only as the whole first label)")]
    BadByte(char),
    #[error("a label begins or ends with a hyphen")]
    Hyphen,
}

impl NamePattern {
    pub fn parse(text: &str) -> Result<NamePattern, NameError> {
        match text.strip_prefix("*.") {
            Some(suffix) => check_name(suffix).map(|()| NamePattern::Wildcard(suffix.to_ascii_lowercase())),
            None => check_name(text).map(|()| NamePattern::Exact(text.to_ascii_lowercase())),
        }
    }

    /// Whether the client's SNI name (any case) is one this pattern covers.
    pub fn matches(&self, sni: &str) -> bool {
        match self {
            NamePattern::Exact(name) => sni.eq_ignore_ascii_case(name),
            NamePattern::Wildcard(suffix) => match sni.split_once('.') {
                Some((label, rest)) => !label.is_empty() && rest.eq_ignore_ascii_case(suffix),
                None => false,
            },
        }
    }
}

impl fmt::Display for NamePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NamePattern::Exact(name) => f.write_str(name),
            NamePattern::Wildcard(suffix) => write!(f, "*.{suffix}"),
        }
    }
}

fn check_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(NameError::TooLong);
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(NameError::EmptyLabel);
        }
        if label.len() > MAX_LABEL_BYTES {
            return Err(NameError::LabelTooLong);
        }
        if let Some(c) = label.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-')) {
            return Err(NameError::BadByte(c));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(NameError::Hyphen);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let ok = [
            ("Example.COM", NamePattern::Exact("example.com".into())),
            ("*.example.com", NamePattern::Wildcard("example.com".into())),
            ("a-b.c1", NamePattern::Exact("a-b.c1".into())),
            ("localhost", NamePattern::Exact("localhost".into())),
        ];
        for (text, want) in ok {
            assert_eq!(NamePattern::parse(text), Ok(want), "{text}");
        }
        let long_label = format!("{}.com", "a".repeat(64));
        let long_name = ["abcdefghi"; 26].join(".");
        let bad = [
            ("", NameError::Empty),
            ("*.", NameError::Empty),
            ("a..b", NameError::EmptyLabel),
            (".a", NameError::EmptyLabel),
            ("a.", NameError::EmptyLabel),
            ("*", NameError::BadByte('*')),
            ("a.*.com", NameError::BadByte('*')),
            ("**.a", NameError::BadByte('*')),
            ("exa mple.com", NameError::BadByte(' ')),
            ("-a.com", NameError::Hyphen),
            ("a-.com", NameError::Hyphen),
            (long_label.as_str(), NameError::LabelTooLong),
            (long_name.as_str(), NameError::TooLong),
        ];
        for (text, want) in bad {
            assert_eq!(NamePattern::parse(text), Err(want), "{text}");
        }
    }

    #[test]
    fn matching_table() {
        let exact = NamePattern::parse("example.com").unwrap();
        let wild = NamePattern::parse("*.example.com").unwrap();
        assert!(exact.matches("EXAMPLE.com"));
        assert!(!exact.matches("a.example.com"));
        assert!(wild.matches("A.Example.com"));
        assert!(!wild.matches("example.com"));
        assert!(!wild.matches("a.b.example.com"));
        assert!(!wild.matches(".example.com"));
        assert!(!wild.matches("aexample.com"));
    }

    #[test]
    fn display_round_trips() {
        for text in ["example.com", "*.example.com"] {
            assert_eq!(NamePattern::parse(text).unwrap().to_string(), text);
        }
    }
}

//! `Cache-Control` by path: rules `GLOB=VALUE` (`--cache-control`, repeatable, or the
//! file's `cache-control` list), the first whose glob matches a file's path giving the
//! header of its `200`, `206` and `304` responses (a `304` carries what the `200` would,
//! RFC 9110 §15.4.5). Errors, redirects and files no rule matches get none.
//!
//! The path matched is the served file's, decoded and normalised, from the root with a
//! leading `/` (`/assets/app.js`; a directory's index is `/docs/index.html`). Globs are
//! `globset`'s with `*` and `?` inside one segment and `**` across them
//! (`/assets/**/*.js`), `{a,b}` and `[a-z]`; case-sensitive.
//!
//! At most [`MAX_RULES`] rules: all are compiled into one set at start-up, and a request
//! costs one match of that set.

use std::fmt;
use std::os::unix::ffi::OsStrExt;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// Most `cache-control` rules.
pub const MAX_RULES: usize = 256;

/// Longest `Cache-Control` value a rule may give.
pub const MAX_VALUE_BYTES: usize = 1024;

/// The compiled rules, in the order given.
#[derive(Clone, Default)]
pub struct CacheControl {
    /// The rules as written (for `Debug` and errors).
    rules: Vec<String>,
    set: GlobSet,
    /// The header value of each rule, by index.
    values: Vec<Box<[u8]>>,
}

impl CacheControl {
    /// Compiles `rules` (`GLOB=VALUE` each); the error says which rule and what is wrong.
    pub fn new(rules: &[String]) -> Result<CacheControl, String> {
        if rules.len() > MAX_RULES {
            return Err(format!("{} rules: at most {MAX_RULES}", rules.len()));
        }
        let mut set = GlobSetBuilder::new();
        let mut values = Vec::with_capacity(rules.len());
        for (i, rule) in rules.iter().enumerate() {
            let bad = |why: String| format!("rule {} {rule:?}: {why}", i + 1);
            let Some((glob, value)) = rule.split_once('=') else {
                return Err(bad("expected GLOB=VALUE, e.g. `/assets/*.js=public, max-age=31536000`".into()));
            };
            let (glob, value) = (glob.trim(), value.trim());
            if !glob.starts_with('/') {
                return Err(bad(format!("glob {glob:?} must start with `/` (it matches paths from the root)")));
            }
            let compiled = GlobBuilder::new(glob)
                .literal_separator(true)
                .build()
                .map_err(|e| bad(format!("glob {glob:?}: {}", e.kind())))?;
            if value.is_empty() || value.len() > MAX_VALUE_BYTES {
                return Err(bad(format!("the value must be 1 to {MAX_VALUE_BYTES} bytes")));
            }
            if !value.bytes().all(|b| b == b' ' || b == b'\t' || b.is_ascii_graphic()) {
                return Err(bad("the value must be visible ASCII, spaces and tabs (a header field value)".into()));
            }
            set.add(compiled);
            values.push(value.as_bytes().into());
        }
        let set = set.build().map_err(|e| format!("compiling the globs: {e}"))?;
        Ok(CacheControl { rules: rules.to_vec(), set, values })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The value of the first rule matching `path` (`/a/b.js`); `matches` is reused scratch.
    pub fn value_for(&self, path: &[u8], matches: &mut Vec<usize>) -> Option<&[u8]> {
        if self.is_empty() {
            return None;
        }
        self.set.matches_into(std::ffi::OsStr::from_bytes(path), matches);
        // globset returns the matching rules' indices in ascending order.
        matches.iter().min().map(|&i| &*self.values[i])
    }
}

impl fmt::Debug for CacheControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CacheControl").field(&self.rules).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(list: &[&str]) -> Result<CacheControl, String> {
        CacheControl::new(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn first_matching_rule_wins() {
        let cc = rules(&[
            "/assets/*.js=public, max-age=31536000, immutable",
            "/assets/**=public, max-age=3600",
            "/*.{html,htm} = no-cache",
            "/**/*.css=max-age=60",
        ])
        .unwrap();
        let mut scratch = Vec::new();
        let cases: &[(&str, Option<&str>)] = &[
            ("/assets/app.js", Some("public, max-age=31536000, immutable")),
            ("/assets/lib/x.js", Some("public, max-age=3600")),
            ("/assets/a.css", Some("public, max-age=3600")),
            ("/index.html", Some("no-cache")),
            ("/docs/index.html", None),
            ("/docs/site.css", Some("max-age=60")),
            ("/site.css", Some("max-age=60")),
            ("/app.js", None),
            ("/ASSETS/app.js", None),
        ];
        for (path, want) in cases {
            let got = cc.value_for(path.as_bytes(), &mut scratch).map(|v| std::str::from_utf8(v).unwrap());
            assert_eq!(got, *want, "{path}");
        }
        assert_eq!(rules(&[]).unwrap().value_for(b"/a", &mut scratch), None);
    }

    #[test]
    fn bad_rules_are_named() {
        let cases: &[(&str, &str)] = &[
            ("/a/*.js", "GLOB=VALUE"),
            ("assets/*.js=public", "must start with `/`"),
            ("/a/[z-a].js=public", "\"/a/[z-a].js\""),
            ("/a/{b.js=public", "\"/a/{b.js\""),
            ("/a=", "1 to 1024"),
            ("/a=public\u{7f}", "visible ASCII"),
        ];
        for (rule, want) in cases {
            let err = rules(&["/ok=x", rule]).unwrap_err();
            assert!(err.contains("rule 2") && err.contains(want), "{rule}: {err}");
        }
        let many: Vec<String> = (0..=MAX_RULES).map(|i| format!("/{i}=x")).collect();
        assert!(CacheControl::new(&many).unwrap_err().contains("at most 256"));
        assert!(CacheControl::new(&many[..MAX_RULES]).is_ok());
    }
}

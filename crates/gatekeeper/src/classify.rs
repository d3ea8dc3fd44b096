//! Request classification: which *type* a request belongs to, so its cost can be learned.
//!
//! A classifier is an ordered list of rules; the first rule that yields a name wins:
//! - `NAME=REGEX`: the regex is matched against `"METHOD PATH"` (path with query string,
//!   e.g. `GET /search?q=x`); on a match the type is `NAME`.
//! - `header:NAME`: the value of request header `NAME` (trimmed, at most
//!   [`MAX_TYPE_NAME_BYTES`] bytes) is the type; no rule result if the header is absent.
//! - `route`: method + route template, the path with id-like segments replaced by `{id}`
//!   (`GET /product/123` → `GET /product/{id}`); the query string is dropped. Always yields.
//!
//! If no rule yields, the request belongs to the overflow type. With no rules at all the
//! classifier is `route`.
//!
//! The number of types is bounded by `max_types`: names get indexes in order of first
//! sight, and once `max_types - 1` names are known, every new name shares the overflow
//! type ([`OVERFLOW_TYPE`], index `max_types - 1`). The bound keeps metrics cardinality and
//! estimator memory fixed whatever the clients send. Names declared up front (the config
//! file's `types`) take the first indexes, so they always get their own slot.

use std::collections::HashMap;
use std::sync::RwLock;

use regex::Regex;

use crate::GatekeeperError;

/// Name of the shared bucket for requests beyond the type limit.
pub const OVERFLOW_TYPE: &str = "(other)";
/// Longest type name taken from a header; longer values are truncated.
pub const MAX_TYPE_NAME_BYTES: usize = 128;
/// Bound on the configurable type count.
pub const MAX_TYPES_LIMIT: usize = 10_000;

#[derive(Debug, Clone)]
pub enum Rule {
    Regex { name: String, re: Regex },
    Header(hyper::header::HeaderName),
    Route,
}

impl Rule {
    /// Parse one rule (`route`, `header:NAME`, `NAME=REGEX`).
    pub fn parse(spec: &str) -> Result<Rule, GatekeeperError> {
        let bad = |why: String| GatekeeperError::Config(format!("classify rule {spec:?}: {why}"));
        let s = spec.trim();
        if s == "route" {
            return Ok(Rule::Route);
        }
        if let Some(h) = s.strip_prefix("header:") {
            let name = hyper::header::HeaderName::from_bytes(h.trim().as_bytes())
                .map_err(|e| bad(format!("bad header name: {e}")))?;
            return Ok(Rule::Header(name));
        }
        let (name, re) =
            s.split_once('=').ok_or_else(|| bad("expected `route`, `header:NAME` or `NAME=REGEX`".into()))?;
        let name = name.trim();
        if name.is_empty() || name.len() > MAX_TYPE_NAME_BYTES {
            return Err(bad(format!("type name must be 1..={MAX_TYPE_NAME_BYTES} bytes")));
        }
        let re = Regex::new(re).map_err(|e| bad(format!("bad regex: {e}")))?;
        Ok(Rule::Regex { name: name.to_string(), re })
    }
}

/// Whether a path segment looks like an identifier: all digits, a UUID, or a long hex string.
pub fn is_id_segment(seg: &str) -> bool {
    if seg.is_empty() {
        return false;
    }
    let b = seg.as_bytes();
    if b.iter().all(u8::is_ascii_digit) {
        return true;
    }
    let is_uuid = b.len() == 36
        && b.iter().enumerate().all(
            |(i, c)| {
                if matches!(i, 8 | 13 | 18 | 23) {
                    *c == b'-'
                } else {
                    c.is_ascii_hexdigit()
                }
            },
        );
    is_uuid || (b.len() >= 16 && b.iter().all(u8::is_ascii_hexdigit))
}

/// `GET /product/123/reviews?x=1` → `GET /product/{id}/reviews`.
pub fn route_template(method: &str, path: &str) -> String {
    let path = path.split(['?', '#']).next().unwrap_or("");
    let mut out = String::with_capacity(method.len() + 1 + path.len());
    out.push_str(method);
    out.push(' ');
    if path.is_empty() {
        out.push('/');
        return out;
    }
    for (i, seg) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        out.push_str(if is_id_segment(seg) { "{id}" } else { seg });
    }
    out
}

/// Rules plus the bounded name → index registry.
#[derive(Debug)]
pub struct Classifier {
    rules: Vec<Rule>,
    max_types: usize,
    names: RwLock<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    index: HashMap<String, usize>,
    names: Vec<String>,
}

impl Classifier {
    /// `max_types` counts the overflow type, so at least 2.
    pub fn new(rules: Vec<Rule>, max_types: usize, declared: &[String]) -> Result<Self, GatekeeperError> {
        if !(2..=MAX_TYPES_LIMIT).contains(&max_types) {
            return Err(GatekeeperError::Config(format!(
                "max_types must be in 2..={MAX_TYPES_LIMIT}, got {max_types}"
            )));
        }
        if declared.len() > max_types - 1 {
            return Err(GatekeeperError::Config(format!(
                "{} declared types do not fit max_types = {max_types} (one slot is the overflow type)",
                declared.len()
            )));
        }
        let rules = if rules.is_empty() { vec![Rule::Route] } else { rules };
        let c = Classifier { rules, max_types, names: RwLock::new(Registry::default()) };
        for d in declared {
            c.intern(d);
        }
        Ok(c)
    }

    pub fn max_types(&self) -> usize {
        self.max_types
    }

    pub fn overflow_index(&self) -> usize {
        self.max_types - 1
    }

    /// The type name a request maps to by the rules (before the type limit applies).
    pub fn name_for(&self, method: &str, path_and_query: &str, headers: &hyper::HeaderMap) -> Option<String> {
        for rule in &self.rules {
            match rule {
                Rule::Regex { name, re } => {
                    let subject = format!("{method} {path_and_query}");
                    if re.is_match(&subject) {
                        return Some(name.clone());
                    }
                }
                Rule::Header(h) => {
                    if let Some(v) = headers.get(h).and_then(|v| v.to_str().ok()) {
                        let v = v.trim();
                        if !v.is_empty() {
                            let mut end = v.len().min(MAX_TYPE_NAME_BYTES);
                            while !v.is_char_boundary(end) {
                                end -= 1;
                            }
                            return Some(v[..end].to_string());
                        }
                    }
                }
                Rule::Route => return Some(route_template(method, path_and_query)),
            }
        }
        None
    }

    /// The type index of a request.
    pub fn classify(&self, method: &str, path_and_query: &str, headers: &hyper::HeaderMap) -> usize {
        match self.name_for(method, path_and_query, headers) {
            Some(name) => self.intern(&name),
            None => self.overflow_index(),
        }
    }

    /// Index of a name, registering it if there is room.
    pub fn intern(&self, name: &str) -> usize {
        if let Some(&i) = self.names.read().expect("registry lock").index.get(name) {
            return i;
        }
        let mut reg = self.names.write().expect("registry lock");
        if let Some(&i) = reg.index.get(name) {
            return i;
        }
        if name == OVERFLOW_TYPE || reg.names.len() >= self.max_types - 1 {
            return self.overflow_index();
        }
        let i = reg.names.len();
        reg.names.push(name.to_string());
        reg.index.insert(name.to_string(), i);
        i
    }

    /// Name of a type index (the overflow index is [`OVERFLOW_TYPE`]).
    pub fn type_name(&self, index: usize) -> Option<String> {
        if index == self.overflow_index() {
            return Some(OVERFLOW_TYPE.to_string());
        }
        self.names.read().expect("registry lock").names.get(index).cloned()
    }

    /// All registered names with their indexes, overflow last.
    pub fn types(&self) -> Vec<(usize, String)> {
        let reg = self.names.read().expect("registry lock");
        let mut v: Vec<(usize, String)> = reg.names.iter().cloned().enumerate().collect();
        v.push((self.overflow_index(), OVERFLOW_TYPE.to_string()));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> hyper::HeaderMap {
        let mut m = hyper::HeaderMap::new();
        for (k, v) in pairs {
            m.insert(hyper::header::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        m
    }

    #[test]
    fn route_template_table() {
        let table = [
            ("GET", "/product/123", "GET /product/{id}"),
            ("GET", "/product/123/reviews?page=2", "GET /product/{id}/reviews"),
            ("POST", "/u/550e8400-e29b-41d4-a716-446655440000/cart", "POST /u/{id}/cart"),
            ("GET", "/blob/deadbeefdeadbeef00", "GET /blob/{id}"),
            ("GET", "/blob/deadbeef", "GET /blob/deadbeef"),
            ("GET", "/v2/items", "GET /v2/items"),
            ("GET", "/", "GET /"),
            ("GET", "", "GET /"),
            ("GET", "/a//1/", "GET /a//{id}/"),
            ("GET", "/search?q=1#frag", "GET /search"),
        ];
        for (m, p, want) in table {
            assert_eq!(route_template(m, p), want, "{m} {p}");
        }
    }

    #[test]
    fn rules_first_match_wins_table() {
        let rules = vec![
            Rule::parse("best=^GET /tpcw/best_sellers").unwrap(),
            Rule::parse("header:X-Request-Type").unwrap(),
            Rule::parse("search=search").unwrap(),
            Rule::parse("route").unwrap(),
        ];
        let c = Classifier::new(rules, 16, &[]).unwrap();
        type Row<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], &'a str);
        let table: &[Row] = &[
            ("GET", "/tpcw/best_sellers?x=1", &[("x-request-type", "ignored")], "best"),
            ("GET", "/tpcw/home", &[("x-request-type", "homepage")], "homepage"),
            ("GET", "/tpcw/search?q=1", &[], "search"),
            ("GET", "/tpcw/search?q=1", &[("x-request-type", "  ")], "search"),
            ("GET", "/item/77", &[], "GET /item/{id}"),
        ];
        for (m, p, hs, want) in table {
            let i = c.classify(m, p, &h(hs));
            assert_eq!(c.type_name(i).unwrap(), *want, "{m} {p}");
        }
    }

    #[test]
    fn no_rule_match_goes_to_overflow() {
        let c = Classifier::new(vec![Rule::parse("a=^GET /a$").unwrap()], 4, &[]).unwrap();
        assert_eq!(c.classify("GET", "/b", &h(&[])), 3);
        assert_eq!(c.type_name(3).unwrap(), OVERFLOW_TYPE);
    }

    #[test]
    fn type_count_is_bounded_with_overflow_bucket() {
        let c = Classifier::new(vec![], 4, &["GET /declared".to_string()]).unwrap();
        assert_eq!(c.classify("GET", "/declared", &h(&[])), 0);
        assert_eq!(c.classify("GET", "/a", &h(&[])), 1);
        assert_eq!(c.classify("GET", "/b", &h(&[])), 2);
        // Full: new names share the overflow bucket, known names keep theirs.
        assert_eq!(c.classify("GET", "/c", &h(&[])), 3);
        assert_eq!(c.classify("GET", "/d", &h(&[])), 3);
        assert_eq!(c.classify("GET", "/a", &h(&[])), 1);
        assert_eq!(c.types().len(), 4);
    }

    #[test]
    fn header_values_are_truncated() {
        let c = Classifier::new(vec![Rule::parse("header:t").unwrap()], 4, &[]).unwrap();
        let long = "x".repeat(500);
        let name = c.name_for("GET", "/", &h(&[("t", &long)])).unwrap();
        assert_eq!(name.len(), MAX_TYPE_NAME_BYTES);
    }

    #[test]
    fn bad_rules_are_named() {
        for bad in ["x=(", "header:bad name", "nonsense", "=abc"] {
            let e = Rule::parse(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
        assert!(Classifier::new(vec![], 1, &[]).is_err());
    }
}

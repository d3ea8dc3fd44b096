//! Request classification: which *type* a request belongs to, so its cost can be learned.
//!
//! A classifier is an ordered list of rules; the first rule that yields a name wins:
//! - `NAME=REGEX`: the regex is matched against `"METHOD PATH"` (path with query string,
//!   e.g. `GET /search?q=x`); on a match the type is `NAME`.
//! - `header:NAME`: the value of request header `NAME` (trimmed, at most
//!   [`MAX_TYPE_NAME_BYTES`] bytes) is the type; no rule result if the header is absent.
//! - `route`: method + route template + the query's parameter names. In the path, ids are
//!   replaced by `{id}`, also inside a segment and before an extension: numbers, UUIDs and
//!   hex hashes (`GET /orders/123.json` → `GET /orders/{id}.json`, `/item-42` →
//!   `/item-{id}`). The query keeps its parameter *names*, sorted and without values, so
//!   a search and a plain page of one path are different types (`GET /s?q=x&page=2` →
//!   `GET /s?page&q`). Always yields. See [`route_template`] and [`route_type`].
//!
//! If no rule yields, the request belongs to the overflow type. With no rules at all the
//! classifier is `route`.
//!
//! The number of types is bounded by `max_types`: names get indexes in order of first
//! sight, and once `max_types - 1` names are known, every new name shares the overflow
//! type ([`OVERFLOW_TYPE`], index `max_types - 1`). The bound keeps metrics cardinality and
//! estimator memory fixed whatever the clients send. Names declared up front (the config
//! file's `types`) take the first indexes, so they always get their own slot. Requests
//! whose name found the table full are counted ([`Classifier::overflowed`], the metric
//! `gatekeeper_type_table_overflow_total`) and the first such name is logged, so a user
//! sees when the table is too small or the rules too fine.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock};

use regex::Regex;

use crate::GatekeeperError;

/// Name of the shared bucket for requests beyond the type limit.
pub const OVERFLOW_TYPE: &str = "(other)";
/// Longest type name taken from a header; longer values are truncated.
pub const MAX_TYPE_NAME_BYTES: usize = 128;
/// Bound on the configurable type count.
pub const MAX_TYPES_LIMIT: usize = 10_000;

/// A request's header fields, looked up by lower-case name (the first value, if text).
pub trait Fields {
    fn field(&self, name: &str) -> Option<&str>;
}

impl Fields for hyper::HeaderMap {
    fn field(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|v| v.to_str().ok())
    }
}

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

impl std::fmt::Display for Rule {
    /// The rule as written on the command line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rule::Regex { name, re } => write!(f, "{name}={}", re.as_str()),
            Rule::Header(h) => write!(f, "header:{h}"),
            Rule::Route => f.write_str("route"),
        }
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

/// Query parameter names kept in a type, at most; further names are dropped (a bound on
/// a type name's length whatever the client sends).
pub const MAX_QUERY_NAMES: usize = 16;
/// Longest query parameter name kept in a type; longer names become `{long}`.
pub const MAX_QUERY_NAME_BYTES: usize = 64;

/// Whether a token inside a segment (between `-`, `_`, `.`, `,`, `~`, `:`, `;`, `+`, `=`,
/// `@`) is an id: all digits, or hex of 16 or more characters, or hex of 7 or more mixing
/// digits and letters (a short hash; `deadbeef` or `cafe` stay words).
fn is_id_token(t: &str) -> bool {
    if t.is_empty() {
        return false;
    }
    let b = t.as_bytes();
    if b.iter().all(u8::is_ascii_digit) {
        return true;
    }
    if !b.iter().all(u8::is_ascii_hexdigit) {
        return false;
    }
    b.len() >= 16 || (b.len() >= 7 && b.iter().any(u8::is_ascii_digit) && b.iter().any(u8::is_ascii_alphabetic))
}

fn uuid_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new("[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}").expect("valid regex")
    })
}

/// One path segment with its ids replaced by `{id}`: the whole segment, a UUID anywhere in
/// it, and id tokens between separators (so `123.json` → `{id}.json`, `item-42` →
/// `item-{id}`, `2024-01-31` → `{id}-{id}-{id}`).
pub fn template_segment(seg: &str) -> Cow<'_, str> {
    if is_id_segment(seg) {
        return Cow::Borrowed("{id}");
    }
    let seg: Cow<str> = if seg.len() >= 36 { uuid_re().replace_all(seg, "{id}") } else { Cow::Borrowed(seg) };
    const SEPARATORS: &[char] = &['-', '_', '.', ',', '~', ':', ';', '+', '=', '@'];
    if !seg.split(SEPARATORS).any(is_id_token) {
        return seg;
    }
    let mut out = String::with_capacity(seg.len());
    let mut rest: &str = &seg;
    while !rest.is_empty() {
        let end = rest.find(SEPARATORS).unwrap_or(rest.len());
        let (token, after) = rest.split_at(end);
        out.push_str(if is_id_token(token) { "{id}" } else { token });
        let mut chars = after.chars();
        if let Some(sep) = chars.next() {
            out.push(sep);
        }
        rest = chars.as_str();
    }
    Cow::Owned(out)
}

/// `GET /product/123/reviews?x=1` → `GET /product/{id}/reviews` (the query is dropped
/// here; [`route_type`] keeps its names).
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
        out.push_str(&template_segment(seg));
    }
    out
}

/// The `route` rule's type: [`route_template`] plus the query's parameter names, sorted,
/// deduplicated, without values (`GET /s?q=x&page=2&q=y` → `GET /s?page&q`). At most
/// [`MAX_QUERY_NAMES`] names, each at most [`MAX_QUERY_NAME_BYTES`] bytes (longer:
/// `{long}`); a name that is itself an id is `{id}`.
pub fn route_type(method: &str, path_and_query: &str) -> String {
    let without_fragment = path_and_query.split('#').next().unwrap_or("");
    let (path, query) = without_fragment.split_once('?').unwrap_or((without_fragment, ""));
    let mut out = route_template(method, path);
    let mut names: Vec<&str> = query
        .split('&')
        .filter_map(|kv| {
            let name = kv.split('=').next().unwrap_or("");
            (!name.is_empty()).then_some(name)
        })
        .map(|n| {
            if n.len() > MAX_QUERY_NAME_BYTES {
                "{long}"
            } else if is_id_segment(n) {
                "{id}"
            } else {
                n
            }
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names.truncate(MAX_QUERY_NAMES);
    for (i, n) in names.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(n);
    }
    out
}

/// Rules plus the bounded name → index registry.
#[derive(Debug)]
pub struct Classifier {
    /// Replaced whole on a configuration reload ([`Classifier::set_rules`]); the names
    /// already known keep their indexes.
    rules: RwLock<Vec<Rule>>,
    max_types: usize,
    names: RwLock<Registry>,
    /// Requests whose type name found the table full (they share the overflow type).
    overflowed: AtomicU64,
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
        let c = Classifier {
            rules: RwLock::new(rules),
            max_types,
            names: RwLock::new(Registry::default()),
            overflowed: AtomicU64::new(0),
        };
        for d in declared {
            c.intern(d);
        }
        Ok(c)
    }

    /// Replace the rules (configuration reload). Types already named keep their indexes,
    /// estimates and metrics; new names take free slots as usual.
    pub fn set_rules(&self, rules: Vec<Rule>) {
        let rules = if rules.is_empty() { vec![Rule::Route] } else { rules };
        *self.rules.write().expect("rules lock") = rules;
    }

    /// Requests so far whose type name found the table full (`max_types`) and were put in
    /// the overflow type.
    pub fn overflowed(&self) -> u64 {
        self.overflowed.load(Ordering::Relaxed)
    }

    pub fn max_types(&self) -> usize {
        self.max_types
    }

    pub fn overflow_index(&self) -> usize {
        self.max_types - 1
    }

    /// The type name a request maps to by the rules (before the type limit applies).
    pub fn name_for(&self, method: &str, path_and_query: &str, headers: &dyn Fields) -> Option<String> {
        for rule in self.rules.read().expect("rules lock").iter() {
            match rule {
                Rule::Regex { name, re } => {
                    let subject = format!("{method} {path_and_query}");
                    if re.is_match(&subject) {
                        return Some(name.clone());
                    }
                }
                Rule::Header(h) => {
                    if let Some(v) = headers.field(h.as_str()) {
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
                Rule::Route => return Some(route_type(method, path_and_query)),
            }
        }
        None
    }

    /// The type index of a request.
    pub fn classify(&self, method: &str, path_and_query: &str, headers: &dyn Fields) -> usize {
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
        if name == OVERFLOW_TYPE {
            return self.overflow_index();
        }
        if reg.names.len() >= self.max_types - 1 {
            if self.overflowed.fetch_add(1, Ordering::Relaxed) == 0 {
                tracing::warn!(
                    "request type table full ({} types): {name:?} and every new type from now on share the type {OVERFLOW_TYPE:?}; raise --max-types or use coarser --classify rules",
                    self.max_types
                );
            }
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
    fn route_type_table_on_real_urls() {
        let table = [
            ("GET", "/orders/123.json", "GET /orders/{id}.json"),
            ("GET", "/api/v1/orders/98765/items/3.xml?fields=a,b", "GET /api/v1/orders/{id}/items/{id}.xml?fields"),
            ("GET", "/users/550e8400-e29b-41d4-a716-446655440000.json", "GET /users/{id}.json"),
            ("GET", "/files/order-550e8400-e29b-41d4-a716-446655440000-v2", "GET /files/order-{id}-v2"),
            ("GET", "/blob/da39a3ee5e6b4b0d3255bfef95601890afd80709/raw", "GET /blob/{id}/raw"),
            ("GET", "/commit/3f2a9c1", "GET /commit/{id}"),
            ("GET", "/product/item-42", "GET /product/item-{id}"),
            ("GET", "/archive/2024-01-31/index.html", "GET /archive/{id}-{id}-{id}/index.html"),
            ("GET", "/img/logo.v2.png", "GET /img/logo.v2.png"),
            ("GET", "/blob/deadbeef", "GET /blob/deadbeef"),
            ("GET", "/static/app.css", "GET /static/app.css"),
            ("GET", "/search?q=shoes&page=2", "GET /search?page&q"),
            ("GET", "/search?page=3&q=hats&q=caps", "GET /search?page&q"),
            ("GET", "/search", "GET /search"),
            ("GET", "/search?", "GET /search"),
            ("GET", "/list?&sort=&", "GET /list?sort"),
            ("GET", "/track?12345=1", "GET /track?{id}"),
            ("POST", "/cart/17/add?item=9#top", "POST /cart/{id}/add?item"),
            ("GET", "/tpcw/product_detail?I_ID=881", "GET /tpcw/product_detail?I_ID"),
        ];
        for (m, p, want) in table {
            assert_eq!(route_type(m, p), want, "{m} {p}");
        }
        // Bounded whatever the client sends.
        let many: Vec<String> = (0..100).map(|i| format!("p{i}=1")).collect();
        let t = route_type("GET", &format!("/x?{}&{}=1", many.join("&"), "n".repeat(500)));
        assert_eq!(t.matches('&').count() + 1, MAX_QUERY_NAMES, "{t}");
        assert!(t.len() < 16 * 70, "{t}");
    }

    #[test]
    fn route_types_of_many_ids_fit_in_one_slot() {
        let c = Classifier::new(vec![], 4, &[]).unwrap();
        let first = c.classify("GET", "/orders/1.json", &h(&[]));
        for i in 2..1_000 {
            assert_eq!(
                c.classify("GET", &format!("/orders/{i}.json?x={i}"), &h(&[])),
                c.classify("GET", "/orders/1.json?x=1", &h(&[]))
            );
            assert_eq!(c.classify("GET", &format!("/orders/{i}.json"), &h(&[])), first);
        }
        assert_eq!(c.overflowed(), 0);
    }

    #[test]
    fn overflow_is_counted() {
        let c = Classifier::new(vec![], 3, &[]).unwrap();
        for p in ["/a", "/b", "/c", "/d", "/a"] {
            c.classify("GET", p, &h(&[]));
        }
        assert_eq!(c.overflowed(), 2, "/c and /d found the table full");
    }

    #[test]
    fn rules_can_be_replaced_keeping_indexes() {
        let c = Classifier::new(vec![Rule::parse("a=^GET /a").unwrap()], 8, &[]).unwrap();
        let a = c.classify("GET", "/a", &h(&[]));
        c.set_rules(vec![Rule::parse("b=^GET /a").unwrap(), Rule::parse("a=^GET /x").unwrap()]);
        assert_eq!(c.type_name(c.classify("GET", "/a", &h(&[]))).unwrap(), "b");
        assert_eq!(c.classify("GET", "/x", &h(&[])), a);
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
    fn rules_print_as_written() {
        for spec in ["route", "header:x-type", "best=^GET /best"] {
            assert_eq!(Rule::parse(spec).unwrap().to_string(), spec);
        }
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

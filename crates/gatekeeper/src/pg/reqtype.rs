//! The request type of a transaction: the application's tag if it gives one, else a
//! fingerprint of its first real statement.
//!
//! Tag: in a sqlcommenter-style comment anywhere in the text, `/*route='best_sellers',
//! traceparent='00-…'*/` (key configurable, values URL-decoded; every other key, such as
//! trace ids, is ignored), or the connection's `application_name` when configured.
//!
//! Fingerprint, the way `pg_stat_statements` groups queries: comments dropped, string and
//! numeric literals (a leading minus sign included) and `$n` parameters replaced by `?`,
//! lists of only those inside `IN (…)` and `ARRAY[…]` collapsed to one, unquoted words
//! lower-cased (quoted identifiers kept), whitespace folded; the result hashed (64-bit
//! FNV-1a). Leading `BEGIN`/`START TRANSACTION` statements are skipped: the first *real*
//! statement decides. Only the first statement is read, up to its `;`.

use super::lexer::{tokens, Kind, Token};

/// Longest tag kept; longer tags are cut (at a char boundary).
pub const MAX_TAG_BYTES: usize = 128;

/// Where a type comes from (set per gatekeeper; see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeSource {
    /// The sqlcommenter key whose value is the tag (`route`); `None` ignores comments.
    pub comment_key: Option<String>,
    /// Use the connection's `application_name` as the tag when it is set and not empty.
    pub application_name: bool,
}

impl Default for TypeSource {
    fn default() -> Self {
        TypeSource { comment_key: Some("route".into()), application_name: false }
    }
}

/// The type of a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RequestType {
    /// Given by the application (comment or `application_name`).
    Tag(String),
    /// The fingerprint of the first real statement.
    Fingerprint(u64),
    /// A transaction whose first message carries no statement the gate can read (an
    /// Execute of an unknown portal, a FunctionCall, a statement name past the table's bound).
    Unknown,
}

impl RequestType {
    /// The type's name, as the type table and the metrics show it.
    pub fn name(&self) -> String {
        match self {
            RequestType::Tag(t) => format!("tag:{t}"),
            RequestType::Fingerprint(h) => format!("fp:{h:016x}"),
            RequestType::Unknown => "(unknown)".into(),
        }
    }
}

/// The type of `sql` for a connection whose `application_name` is `app`.
pub fn classify(sql: &str, source: &TypeSource, app: Option<&str>) -> RequestType {
    if let Some(tag) = source.comment_key.as_deref().and_then(|k| comment_tag(sql, k)) {
        return RequestType::Tag(tag);
    }
    if source.application_name {
        if let Some(a) = app.filter(|a| !a.is_empty()) {
            return RequestType::Tag(cut(a.to_owned()));
        }
    }
    RequestType::Fingerprint(fingerprint(sql))
}

fn cut(mut s: String) -> String {
    if s.len() > MAX_TAG_BYTES {
        let mut end = MAX_TAG_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// The value of `key` in the first sqlcommenter comment of `sql` holding it.
pub fn comment_tag(sql: &str, key: &str) -> Option<String> {
    // A text without `/*` has no such comment: most texts are not lexed for one.
    if !sql.contains("/*") {
        return None;
    }
    tokens(sql).filter(|t| t.kind == Kind::Comment && t.text.starts_with("/*")).find_map(|t| {
        let body = t.text.strip_prefix("/*")?.strip_suffix("*/")?;
        body.split(',').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let v = v.trim().strip_prefix('\'')?.strip_suffix('\'')?;
            (url_decode(k.trim()) == key && !v.is_empty()).then(|| cut(url_decode(v)))
        })
    })
}

fn url_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                // Two hex digits make a value below 256.
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the statement tokens `st` start a transaction block (`BEGIN`, `START
/// TRANSACTION`, with or without modes).
fn is_begin(st: &[Token<'_>]) -> bool {
    match st.first() {
        Some(t) if t.text.eq_ignore_ascii_case("begin") => true,
        Some(t) if t.text.eq_ignore_ascii_case("start") => {
            st.get(1).is_some_and(|t| t.text.eq_ignore_ascii_case("transaction"))
        }
        _ => false,
    }
}

/// The statements of `sql` (comments dropped, empty statements skipped), as token lists.
fn statements(sql: &str) -> impl Iterator<Item = Vec<Token<'_>>> {
    let mut it = tokens(sql).filter(|t| t.kind != Kind::Comment).peekable();
    std::iter::from_fn(move || loop {
        it.peek()?;
        let st: Vec<Token<'_>> = it.by_ref().take_while(|t| !(t.kind == Kind::Punct && t.text == ";")).collect();
        if !st.is_empty() {
            return Some(st);
        }
    })
}

/// What a whole simple-query text does to a transaction, for deferral: `Some(tag)` when
/// it is exactly one statement that opens a block (the tag PostgreSQL answers with).
pub fn lone_begin(sql: &str) -> Option<&'static str> {
    // Most texts are no BEGIN: their first word tells, before a statement is gathered.
    let first = tokens(sql).find(|t| t.kind != Kind::Comment && !(t.kind == Kind::Punct && t.text == ";"))?;
    if !(first.text.eq_ignore_ascii_case("begin") || first.text.eq_ignore_ascii_case("start")) {
        return None;
    }
    let mut sts = statements(sql);
    let first = sts.next()?;
    if sts.next().is_some() || !is_begin(&first) {
        return None;
    }
    Some(if first[0].text.eq_ignore_ascii_case("begin") { "BEGIN" } else { "START TRANSACTION" })
}

/// `Some(tag)` when `sql` is exactly one bare `COMMIT`/`END` (tag `COMMIT`) or
/// `ROLLBACK`/`ABORT` (tag `ROLLBACK`), with at most `WORK`/`TRANSACTION` after it.
pub fn lone_end(sql: &str) -> Option<&'static str> {
    let mut sts = statements(sql);
    let st = sts.next()?;
    if sts.next().is_some() || st.len() > 2 {
        return None;
    }
    if st.len() == 2 && !(st[1].text.eq_ignore_ascii_case("work") || st[1].text.eq_ignore_ascii_case("transaction")) {
        return None;
    }
    let w = st[0].text.to_ascii_lowercase();
    match w.as_str() {
        "commit" | "end" => Some("COMMIT"),
        "rollback" | "abort" => Some("ROLLBACK"),
        _ => None,
    }
}

/// The fingerprint of the first real statement of `sql` (of the first one if all open blocks).
pub fn fingerprint(sql: &str) -> u64 {
    let mut h = Fnv::new();
    for t in normalize(&first_statement(sql)) {
        t.hash_into(&mut h);
        h.write(b" ");
    }
    h.finish()
}

/// The normalised text the fingerprint hashes, words joined by spaces (for logs and tests).
pub fn normalized(sql: &str) -> String {
    normalize(&first_statement(sql)).iter().map(Norm::to_text).collect::<Vec<_>>().join(" ")
}

/// The first statement that does not open a block, else the first statement, else none.
fn first_statement(sql: &str) -> Vec<Token<'_>> {
    let mut first = None;
    for st in statements(sql) {
        if !is_begin(&st) {
            return st;
        }
        first.get_or_insert(st);
    }
    first.unwrap_or_default()
}

const VALUE: &str = "?";

/// Keywords after which a sign starts an expression (a literal), not a subtraction.
const EXPRESSION_KEYWORDS: &[&str] = &[
    "select",
    "where",
    "and",
    "or",
    "not",
    "when",
    "then",
    "else",
    "values",
    "set",
    "limit",
    "offset",
    "between",
    "like",
    "is",
    "return",
    "returning",
    "by",
    "having",
    "on",
    "in",
    "any",
    "all",
    "distinct",
];

/// One token of a normalised statement, borrowed from the text where it can be: the
/// fingerprint of a statement costs no allocation per token.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Norm<'a> {
    /// A literal or parameter: `?`.
    Value,
    /// A token as it is written (operators, punctuation, quoted identifiers).
    Text(&'a str),
    /// An unquoted word of ASCII only, to be read lower-cased.
    AsciiWord(&'a str),
    /// An unquoted word with non-ASCII letters, lower-cased (Unicode rules, final sigma).
    Lowered(String),
}

impl Norm<'_> {
    fn word(text: &str) -> Norm<'_> {
        if text.is_ascii() {
            Norm::AsciiWord(text)
        } else {
            Norm::Lowered(text.to_lowercase())
        }
    }

    /// Whether the token reads as `s` (`s` lower-case, as every constant compared here is).
    fn is(&self, s: &str) -> bool {
        match self {
            Norm::Value => s == VALUE,
            Norm::Text(t) => *t == s,
            Norm::AsciiWord(w) => {
                w.len() == s.len() && w.bytes().zip(s.bytes()).all(|(a, b)| a.to_ascii_lowercase() == b)
            }
            Norm::Lowered(w) => w == s,
        }
    }

    /// Whether a sign after this token is an operator (a value or a name precedes it).
    fn ends_a_value(&self) -> bool {
        let text = match self {
            Norm::Value => return true,
            Norm::AsciiWord(w) => {
                let starts_ident = w.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
                return starts_ident && !EXPRESSION_KEYWORDS.iter().any(|k| self.is(k));
            }
            Norm::Text(t) => *t,
            Norm::Lowered(w) => w.as_str(),
        };
        text == VALUE
            || text == ")"
            || text == "]"
            || text.starts_with('"')
            || (text.starts_with(|c: char| c.is_alphanumeric() || c == '_') && !EXPRESSION_KEYWORDS.contains(&text))
    }

    fn hash_into(&self, h: &mut Fnv) {
        match self {
            Norm::Value => h.write(VALUE.as_bytes()),
            Norm::Text(t) => h.write(t.as_bytes()),
            Norm::AsciiWord(w) => w.bytes().for_each(|b| h.write(&[b.to_ascii_lowercase()])),
            Norm::Lowered(w) => h.write(w.as_bytes()),
        }
    }

    fn to_text(&self) -> String {
        match self {
            Norm::Value => VALUE.to_owned(),
            Norm::Text(t) => (*t).to_owned(),
            Norm::AsciiWord(w) => w.to_ascii_lowercase(),
            Norm::Lowered(w) => w.clone(),
        }
    }
}

fn normalize<'a>(st: &[Token<'a>]) -> Vec<Norm<'a>> {
    let mut out: Vec<Norm<'a>> = Vec::with_capacity(st.len());
    let mut i = 0;
    while i < st.len() {
        let t = st[i];
        let after_value = out.last().is_some_and(Norm::ends_a_value);
        let tok = match t.kind {
            Kind::String | Kind::Number | Kind::Param => Norm::Value,
            // A sign before a number belongs to the literal unless a value precedes it.
            Kind::Operator
                if (t.text == "-" || t.text == "+")
                    && !after_value
                    && st.get(i + 1).is_some_and(|n| n.kind == Kind::Number) =>
            {
                i += 1;
                Norm::Value
            }
            Kind::Word => Norm::word(t.text),
            _ => Norm::Text(t.text),
        };
        i += 1;
        out.push(tok);
        collapse_list(&mut out);
    }
    out
}

/// If `out` ends with `in ( ? , ? … )` or `array [ ? , ? … ]`, keep one `?`.
fn collapse_list(out: &mut Vec<Norm<'_>>) {
    let (open, close, last) = match out.last() {
        Some(t) if t.is(")") => ("(", "in", ")"),
        Some(t) if t.is("]") => ("[", "array", "]"),
        _ => return,
    };
    let n = out.len();
    let mut j = n - 1;
    let mut values = 0;
    while j >= 2 {
        j -= 1;
        let expect_value = (n - 1 - j) % 2 == 1;
        let t = &out[j];
        match expect_value {
            true if t.is(VALUE) => values += 1,
            false if t.is(",") => {}
            false if values > 0 && t.is(open) => {
                if j >= 1 && out[j - 1].is(close) && values > 1 {
                    out.truncate(j + 1);
                    out.push(Norm::Value);
                    out.push(Norm::Text(last));
                }
                return;
            }
            _ => return,
        }
    }
}

/// 64-bit FNV-1a: stable across builds and platforms (the type names it makes are kept).
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests;

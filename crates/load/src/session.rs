//! Session models: a Markov chain of page types with a URL template per page,
//! for closed-model users (e.g. the TPC-W shopping mix driving a bookstore).
//!
//! File format (TOML):
//!
//! ```toml
//! start = "INIT"                          # state each session starts in
//! transitions = "tpcw-shopping-mix.csv"   # CSV `from,to,probability`, path relative to this file
//! max-requests = 200                      # optional: end a session after this many requests
//! session-s = "exp:900:3600"              # optional: session length (time distribution)
//!
//! [pages]                                 # page code → URL path template
//! HOME = "/home?c_id={user}"
//! PROD = "/product_detail?i_id={rand:1:10000}"
//! ```
//!
//! - A session starts in `start`; each step draws the next state from the
//!   transition probabilities of the current one and requests its page. The
//!   start state needs no page (TPC-W's `INIT` is not a page); every other
//!   state reachable by a transition must have one.
//! - Each state's outgoing probabilities must sum to 1 within 0.01 (published
//!   tables are rounded) and are renormalised. A state without outgoing
//!   transitions ends the session after its page.
//! - A session also ends after `max-requests` requests or once its drawn
//!   length `session-s` has elapsed; the user then starts a new one in `start`.
//! - Template placeholders: `{user}` (user index), `{session}` (session
//!   number of this user), `{seq}` (request number within the session, from
//!   1), `{rand:A:B}` (uniform integer in [A, B], from the user's seeded RNG).
//!   Anything else in braces is an error at load time.
//! - Transitions may also be given inline instead of a file:
//!   `transitions-inline = [["INIT", "HOME", 1.0], ...]`.
//! - Keys are kebab-case; the older snake_case spellings (`max_requests`) are still read.

use crate::dist::TimeDist;
use rand::Rng;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A session model could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", file.display())]
pub struct SessionError {
    pub file: PathBuf,
    pub message: String,
}

/// The file; keys are kebab-case (`max-requests`), the older snake_case spellings are still read.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileSpec {
    start: String,
    transitions: Option<String>,
    #[serde(alias = "transitions_inline")]
    transitions_inline: Option<Vec<(String, String, f64)>>,
    #[serde(alias = "max_requests")]
    max_requests: Option<u32>,
    #[serde(alias = "session_s")]
    session_s: Option<String>,
    pages: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Lit(String),
    User,
    Session,
    Seq,
    Rand(u64, u64),
}

/// A loaded session model.
#[derive(Debug, Clone)]
pub struct SessionModel {
    names: Vec<String>,
    start: usize,
    /// Per state: cumulative probabilities and target states.
    next: Vec<Vec<(f64, usize)>>,
    pages: Vec<Option<Vec<Piece>>>,
    pub max_requests: Option<u32>,
    pub session_s: Option<TimeDist>,
}

/// Largest number of states and transitions accepted.
pub const MAX_TRANSITIONS: usize = 100_000;

impl SessionModel {
    pub fn load(path: &Path) -> Result<SessionModel, SessionError> {
        let err = |m: String| SessionError { file: path.to_path_buf(), message: m };
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        SessionModel::parse(&text, path)
    }

    /// A model from the text of its TOML file; `path` names the file in errors
    /// and is where a `transitions` CSV is looked up from.
    pub fn parse(text: &str, path: &Path) -> Result<SessionModel, SessionError> {
        let err = |m: String| SessionError { file: path.to_path_buf(), message: m };
        let spec: FileSpec = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        let rows: Vec<(String, String, f64)> = match (&spec.transitions, spec.transitions_inline) {
            (Some(f), None) => {
                let csv_path = path.parent().unwrap_or(Path::new(".")).join(f);
                read_transitions(&csv_path)?
            }
            (None, Some(rows)) => rows,
            _ => return Err(err("give exactly one of `transitions` (a CSV file) or `transitions-inline`".into())),
        };
        Self::build(&spec.start, &rows, &spec.pages, spec.max_requests, spec.session_s.as_deref()).map_err(err)
    }

    fn build(
        start: &str,
        rows: &[(String, String, f64)],
        pages: &BTreeMap<String, String>,
        max_requests: Option<u32>,
        session_s: Option<&str>,
    ) -> Result<SessionModel, String> {
        if rows.len() > MAX_TRANSITIONS {
            return Err(format!("more than {MAX_TRANSITIONS} transitions"));
        }
        let mut names: Vec<String> = Vec::new();
        let mut index = BTreeMap::new();
        let mut id = |n: &str, names: &mut Vec<String>| -> usize {
            *index.entry(n.to_string()).or_insert_with(|| {
                names.push(n.to_string());
                names.len() - 1
            })
        };
        let start_i = id(start, &mut names);
        let mut raw: Vec<(usize, usize, f64)> = Vec::new();
        for (from, to, p) in rows {
            if !(p.is_finite() && *p >= 0.0 && *p <= 1.0) {
                return Err(format!("transition {from} → {to}: probability {p} not in [0, 1]"));
            }
            let f = id(from, &mut names);
            let t = id(to, &mut names);
            raw.push((f, t, *p));
        }
        for p in pages.keys() {
            id(p, &mut names);
        }
        let n = names.len();
        let mut next: Vec<Vec<(f64, usize)>> = vec![Vec::new(); n];
        for (f, t, p) in raw {
            next[f].push((p, t));
        }
        for (i, edges) in next.iter_mut().enumerate() {
            if edges.is_empty() {
                continue;
            }
            let sum: f64 = edges.iter().map(|e| e.0).sum();
            if (sum - 1.0).abs() > 0.01 {
                return Err(format!("transitions from {} sum to {sum:.4}, expected 1 (± 0.01)", names[i]));
            }
            let mut c = 0.0;
            for e in edges.iter_mut() {
                c += e.0 / sum;
                e.0 = c;
            }
            if let Some(last) = edges.last_mut() {
                last.0 = 1.0;
            }
        }
        if next[start_i].is_empty() {
            return Err(format!("start state {start} has no transitions"));
        }
        let mut page_tpl = vec![None; n];
        for (code, tpl) in pages {
            page_tpl[index[code.as_str()]] = Some(parse_template(tpl).map_err(|m| format!("page {code}: {m}"))?);
        }
        // Every state a transition can reach needs a page.
        for edges in &next {
            for &(_, t) in edges {
                if page_tpl[t].is_none() {
                    return Err(format!("state {} is reachable but has no entry in [pages]", names[t]));
                }
            }
        }
        let session_s = session_s.map(TimeDist::parse).transpose().map_err(|e| format!("session-s: {e}"))?;
        if max_requests == Some(0) {
            return Err("max-requests must be ≥ 1".into());
        }
        Ok(SessionModel { names, start: start_i, next, pages: page_tpl, max_requests, session_s })
    }

    pub fn state_name(&self, s: usize) -> &str {
        &self.names[s]
    }

    /// Index of the state called `name`.
    pub fn state_name_index(&self, name: &str) -> usize {
        self.names.iter().position(|n| n == name).unwrap_or_else(|| panic!("no state {name}"))
    }

    pub fn start(&self) -> usize {
        self.start
    }

    /// Next state after `state`, or None if the session ends there.
    pub fn step<R: Rng + ?Sized>(&self, state: usize, rng: &mut R) -> Option<usize> {
        let edges = &self.next[state];
        if edges.is_empty() {
            return None;
        }
        let u: f64 = rng.gen();
        let i = edges.partition_point(|e| e.0 <= u).min(edges.len() - 1);
        Some(edges[i].1)
    }

    /// The URL path of `state`'s page.
    pub fn path<R: Rng + ?Sized>(&self, state: usize, user: u32, session: u64, seq: u32, rng: &mut R) -> String {
        let mut s = String::new();
        for p in self.pages[state].as_deref().unwrap_or(&[]) {
            match p {
                Piece::Lit(l) => s.push_str(l),
                Piece::User => s.push_str(&user.to_string()),
                Piece::Session => s.push_str(&session.to_string()),
                Piece::Seq => s.push_str(&seq.to_string()),
                Piece::Rand(a, b) => s.push_str(&rng.gen_range(*a..=*b).to_string()),
            }
        }
        s
    }
}

fn parse_template(t: &str) -> Result<Vec<Piece>, String> {
    if !t.starts_with('/') {
        return Err(format!("template `{t}` must start with `/`"));
    }
    let mut out = Vec::new();
    let mut rest = t;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            out.push(Piece::Lit(rest[..open].to_string()));
        }
        let close = rest[open..].find('}').ok_or_else(|| format!("unclosed `{{` in `{t}`"))? + open;
        let name = &rest[open + 1..close];
        out.push(match name {
            "user" => Piece::User,
            "session" => Piece::Session,
            "seq" => Piece::Seq,
            _ => match name.strip_prefix("rand:").and_then(|r| r.split_once(':')) {
                Some((a, b)) => {
                    let a: u64 = a.parse().map_err(|_| format!("bad {{{name}}} in `{t}`"))?;
                    let b: u64 = b.parse().map_err(|_| format!("bad {{{name}}} in `{t}`"))?;
                    if a > b {
                        return Err(format!("{{{name}}}: A > B in `{t}`"));
                    }
                    Piece::Rand(a, b)
                }
                None => {
                    return Err(format!(
                        "unknown placeholder {{{name}}} in `{t}` (expected user, session, seq, rand:A:B)"
                    ))
                }
            },
        });
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        out.push(Piece::Lit(rest.to_string()));
    }
    Ok(out)
}

/// Reads a `from,to,probability` CSV.
fn read_transitions(path: &Path) -> Result<Vec<(String, String, f64)>, SessionError> {
    let err = |m: String| SessionError { file: path.to_path_buf(), message: m };
    let mut rdr = csv::Reader::from_path(path).map_err(|e| err(e.to_string()))?;
    let headers = rdr.headers().map_err(|e| err(e.to_string()))?;
    if headers.iter().map(str::trim).ne(["from", "to", "probability"]) {
        return Err(err("line 1: expected header `from,to,probability`".into()));
    }
    let mut rows = Vec::new();
    for rec in rdr.records() {
        let rec = rec.map_err(|e| err(e.to_string()))?;
        let line = rec.position().map(|p| p.line()).unwrap_or(0);
        if rec.len() != 3 {
            return Err(err(format!("line {line}: expected 3 fields")));
        }
        let p: f64 = rec[2]
            .trim()
            .parse()
            .map_err(|_| err(format!("line {line}: probability: expected a number, found `{}`", &rec[2])))?;
        rows.push((rec[0].trim().to_string(), rec[1].trim().to_string(), p));
        if rows.len() > MAX_TRANSITIONS {
            return Err(err(format!("more than {MAX_TRANSITIONS} transitions")));
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn tpcw_model(dir: &Path) -> PathBuf {
        // The vendored copy of shared/data/tpcw-shopping-mix.csv, so the test
        // does not depend on where the checkout sits.
        std::fs::write(dir.join("mix.csv"), include_str!("../tests/data/tpcw-shopping-mix.csv")).unwrap();
        let codes = [
            "ADMC", "ADMR", "BESS", "BUYC", "BUYR", "CREG", "HOME", "NEWP", "ORDD", "ORDI", "PROD", "SREQ", "SRES",
            "SHOP",
        ];
        let mut toml = String::from("start = \"INIT\"\ntransitions = \"mix.csv\"\nmax-requests = 1000000\n[pages]\n");
        for c in codes {
            toml.push_str(&format!("{c} = \"/tpcw/{}?u={{user}}&i={{rand:1:100}}\"\n", c.to_lowercase()));
        }
        let p = dir.join("tpcw.toml");
        std::fs::write(&p, toml).unwrap();
        p
    }

    /// Walking the TPC-W chain, observed transition frequencies converge to
    /// the table's probabilities.
    #[test]
    fn tpcw_transition_frequencies_converge() {
        let dir = tempfile::tempdir().unwrap();
        let m = SessionModel::load(&tpcw_model(dir.path())).unwrap();
        let rows = read_transitions(&dir.path().join("mix.csv")).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut counts: BTreeMap<(String, String), u64> = BTreeMap::new();
        let mut from_counts: BTreeMap<String, u64> = BTreeMap::new();
        let mut s = m.start();
        for _ in 0..400_000 {
            let t = m.step(s, &mut rng).unwrap();
            *counts.entry((m.state_name(s).into(), m.state_name(t).into())).or_default() += 1;
            *from_counts.entry(m.state_name(s).into()).or_default() += 1;
            s = t;
        }
        for (from, to, p) in rows {
            let n = from_counts.get(&from).copied().unwrap_or(0);
            if from == "INIT" || n < 2000 {
                continue; // INIT is visited once; rare states give noisy estimates
            }
            let f = *counts.get(&(from.clone(), to.clone())).unwrap_or(&0) as f64 / n as f64;
            let sd = (p * (1.0 - p) / n as f64).sqrt();
            assert!((f - p).abs() < 5.0 * sd + 1e-3, "{from}→{to}: {f:.4} vs {p} (n = {n})");
        }
        let path = m.path(m.state_name_index("PROD"), 7, 1, 1, &mut rng);
        assert!(path.starts_with("/tpcw/prod?u=7&i="), "{path}");
    }

    #[test]
    fn bad_models_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("start = \"A\"\ntransitions_inline = [[\"A\",\"B\",0.5]]\n[pages]\nB = \"/b\"\n", "sum to 0.5000"),
            ("start = \"A\"\ntransitions_inline = [[\"A\",\"B\",1.0]]\n[pages]\n", "B is reachable"),
            (
                "start = \"A\"\ntransitions_inline = [[\"A\",\"B\",1.0]]\n[pages]\nB = \"/b{x}\"\n",
                "unknown placeholder",
            ),
            ("start = \"A\"\ntransitions_inline = [[\"A\",\"B\",1.0]]\n[pages]\nB = \"b\"\n", "must start with"),
            ("start = \"A\"\n[pages]\n", "exactly one of"),
            ("start = \"A\"\nbogus = 1\n", "bogus"),
        ];
        for (text, want) in cases {
            let p = dir.path().join("m.toml");
            std::fs::write(&p, text).unwrap();
            let e = SessionModel::load(&p).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("m.toml"), "{e} should mention {want}");
        }
        std::fs::write(dir.path().join("bad.csv"), "from,to,probability\nA,B,x\n").unwrap();
        std::fs::write(dir.path().join("m.toml"), "start = \"A\"\ntransitions = \"bad.csv\"\n[pages]\nB = \"/b\"\n")
            .unwrap();
        let e = SessionModel::load(&dir.path().join("m.toml")).unwrap_err().to_string();
        assert!(e.contains("bad.csv") && e.contains("line 2"), "{e}");
    }

    #[test]
    fn absorbing_state_ends_session() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.toml");
        std::fs::write(
            &p,
            "start = \"S\"\ntransitions_inline = [[\"S\",\"A\",1.0]]\n[pages]\nA = \"/a/{seq}/{session}\"\n",
        )
        .unwrap();
        let m = SessionModel::load(&p).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let a = m.step(m.start(), &mut rng).unwrap();
        assert_eq!(m.path(a, 0, 4, 2, &mut rng), "/a/2/4");
        assert_eq!(m.step(a, &mut rng), None);
    }
}

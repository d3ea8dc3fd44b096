//! The transaction script `shortfirst load-pg` runs: the part of pgbench's script language
//! that a workload of parameterised statements needs, so a pgbench script file runs under
//! either generator unchanged.
//!
//! - `\set NAME random(LO, HI)` draws an integer uniformly from LO..=HI for each
//!   transaction; `\set NAME INTEGER` sets a constant.
//! - Every other line is SQL. A statement ends at a line whose last non-blank character is
//!   `;` (or at the end of the file) and may span lines; lines of only a `--` comment and
//!   blank lines are dropped.
//! - `:NAME` in SQL is replaced by the variable's value, as pgbench does; a `:NAME` that no
//!   `\set` defines and a `::` cast are left as written.
//!
//! Anything else pgbench knows (`\sleep`, `\if`, `\gset`, expressions in `\set`) is refused
//! with the file and line, rather than run differently.

use rand::Rng;
use std::path::{Path, PathBuf};

/// Largest script file read.
pub const MAX_SCRIPT_BYTES: usize = 1 << 20;
/// Most variables and most statements in one script.
pub const MAX_VARIABLES: usize = 64;
pub const MAX_STATEMENTS: usize = 1024;

/// A parsed script: the steps of one transaction, in order.
#[derive(Debug, Clone)]
pub struct Script {
    steps: Vec<Step>,
    names: Vec<String>,
}

#[derive(Debug, Clone)]
enum Step {
    Set { var: usize, value: Value },
    Sql(Vec<Piece>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Value {
    Const(i64),
    Random { lo: i64, hi: i64 },
}

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Var(usize),
}

/// A script that cannot be run, with the file and the line (1-based; 0: the whole file).
#[derive(Debug, thiserror::Error)]
#[error("{}:{line}: {message}", path.display())]
pub struct ScriptError {
    pub path: PathBuf,
    pub line: usize,
    pub message: String,
}

impl Script {
    /// Reads and parses a script file.
    pub fn read(path: &Path) -> Result<Script, ScriptError> {
        let err = |message: String| ScriptError { path: path.to_path_buf(), line: 0, message };
        let bytes = std::fs::read(path).map_err(|e| err(e.to_string()))?;
        if bytes.len() > MAX_SCRIPT_BYTES {
            return Err(err(format!("longer than {MAX_SCRIPT_BYTES} bytes")));
        }
        let text = String::from_utf8(bytes).map_err(|_| err("not UTF-8".into()))?;
        Script::parse(&text, path)
    }

    /// Parses the text of a script; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Script, ScriptError> {
        let mut script = Script { steps: Vec::new(), names: Vec::new() };
        let mut sql = String::new();
        let mut sql_line = 0;
        for (i, line) in text.lines().enumerate() {
            let at = i + 1;
            let err = |message: String| ScriptError { path: path.to_path_buf(), line: at, message };
            let trimmed = line.trim();
            if sql.is_empty() && (trimmed.is_empty() || trimmed.starts_with("--")) {
                continue;
            }
            if sql.is_empty() && trimmed.starts_with('\\') {
                script.meta(trimmed).map_err(err)?;
                continue;
            }
            if sql.is_empty() {
                sql_line = at;
            } else {
                sql.push('\n');
            }
            sql.push_str(line);
            if trimmed.ends_with(';') {
                script.sql(std::mem::take(&mut sql)).map_err(err)?;
            }
        }
        if !sql.trim().is_empty() {
            let message = |m| ScriptError { path: path.to_path_buf(), line: sql_line, message: m };
            script.sql(sql).map_err(message)?;
        }
        if script.statements() == 0 {
            return Err(ScriptError { path: path.to_path_buf(), line: 0, message: "no SQL statement".into() });
        }
        Ok(script)
    }

    /// SQL statements in one transaction of the script.
    pub fn statements(&self) -> usize {
        self.steps.iter().filter(|s| matches!(s, Step::Sql(_))).count()
    }

    /// One transaction's statements, each variable drawn afresh, into `out` (cleared first).
    pub fn render<R: Rng + ?Sized>(&self, rng: &mut R, out: &mut Vec<String>) {
        out.clear();
        let mut values = vec![0i64; self.names.len()];
        for step in &self.steps {
            match step {
                Step::Set { var, value: Value::Const(v) } => values[*var] = *v,
                Step::Set { var, value: Value::Random { lo, hi } } => values[*var] = rng.gen_range(*lo..=*hi),
                Step::Sql(pieces) => {
                    let mut s = String::new();
                    for p in pieces {
                        match p {
                            Piece::Text(t) => s.push_str(t),
                            Piece::Var(v) => s.push_str(&values[*v].to_string()),
                        }
                    }
                    out.push(s);
                }
            }
        }
    }

    fn meta(&mut self, line: &str) -> Result<(), String> {
        let mut words = line.splitn(3, char::is_whitespace);
        let command = words.next().unwrap_or_default();
        if command != "\\set" {
            return Err(format!(
                "unsupported meta-command {command}: this generator takes only \\set NAME random(LO, HI) \
                 and \\set NAME INTEGER"
            ));
        }
        let name = words.next().unwrap_or_default();
        if name.is_empty() || !name.chars().all(is_name_char) {
            return Err(format!("\\set needs a variable name of letters, digits and _, not {name:?}"));
        }
        let value = parse_value(words.next().unwrap_or_default().trim())?;
        let var = match self.names.iter().position(|n| n == name) {
            Some(v) => v,
            None if self.names.len() == MAX_VARIABLES => return Err(format!("more than {MAX_VARIABLES} variables")),
            None => {
                self.names.push(name.to_string());
                self.names.len() - 1
            }
        };
        self.steps.push(Step::Set { var, value });
        Ok(())
    }

    fn sql(&mut self, text: String) -> Result<(), String> {
        if self.statements() == MAX_STATEMENTS {
            return Err(format!("more than {MAX_STATEMENTS} statements"));
        }
        let pieces = substitute(&text, &self.names);
        self.steps.push(Step::Sql(pieces));
        Ok(())
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn parse_value(text: &str) -> Result<Value, String> {
    if let Ok(v) = text.parse::<i64>() {
        return Ok(Value::Const(v));
    }
    let bad = || format!("\\set takes random(LO, HI) or an integer, not {text:?}");
    let args = text.strip_prefix("random(").and_then(|t| t.strip_suffix(')')).ok_or_else(bad)?;
    let (lo, hi) = args.split_once(',').ok_or_else(bad)?;
    let (lo, hi) = (lo.trim().parse::<i64>().map_err(|_| bad())?, hi.trim().parse::<i64>().map_err(|_| bad())?);
    if lo > hi {
        return Err(format!("random({lo}, {hi}): the low end is above the high end"));
    }
    Ok(Value::Random { lo, hi })
}

/// The text with each `:NAME` of a known variable made a [`Piece::Var`].
fn substitute(text: &str, names: &[String]) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut plain = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(':') {
        let (before, after) = rest.split_at(at);
        plain.push_str(before);
        let after = &after[1..];
        let cast = plain.ends_with(':') || after.starts_with(':');
        let len = after.find(|c: char| !is_name_char(c)).unwrap_or(after.len());
        match names.iter().position(|n| *n == after[..len]) {
            Some(var) if !cast && len > 0 => {
                if !plain.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut plain)));
                }
                pieces.push(Piece::Var(var));
                rest = &after[len..];
            }
            _ => {
                plain.push(':');
                rest = after;
            }
        }
    }
    plain.push_str(rest);
    if !plain.is_empty() {
        pieces.push(Piece::Text(plain));
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn parse(text: &str) -> Result<Script, ScriptError> {
        Script::parse(text, Path::new("t.sql"))
    }

    fn render(script: &Script, seed: u64) -> Vec<String> {
        let mut out = Vec::new();
        script.render(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed), &mut out);
        out
    }

    #[test]
    fn the_bench_scripts_render_with_their_variables_drawn() {
        let s = parse(
            "\\set a random(1, 970001)\nSELECT bid, count(*) FROM t\n  WHERE aid BETWEEN :a AND :a + 29999 GROUP BY bid;\n",
        )
        .unwrap();
        assert_eq!(s.statements(), 1);
        for seed in 0..50 {
            let sql = &render(&s, seed)[0];
            let a: i64 = sql.split("BETWEEN ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
            assert!((1..=970_001).contains(&a));
            assert_eq!(
                sql,
                &format!("SELECT bid, count(*) FROM t\n  WHERE aid BETWEEN {a} AND {a} + 29999 GROUP BY bid;")
            );
        }
    }

    #[test]
    fn casts_unknown_names_and_comments_are_left_as_written() {
        let s = parse("-- a comment\n\n\\set n 7\nSELECT :n::int, ':x', a::text FROM t WHERE b = :n\n").unwrap();
        assert_eq!(render(&s, 1), vec!["SELECT 7::int, ':x', a::text FROM t WHERE b = 7"]);
    }

    #[test]
    fn several_statements_run_in_order_each_with_the_same_draw() {
        let s = parse("\\set id random(5, 5)\nBEGIN;\nUPDATE t SET v = v + 1 WHERE id = :id;\nCOMMIT;\n").unwrap();
        assert_eq!(render(&s, 3), vec!["BEGIN;", "UPDATE t SET v = v + 1 WHERE id = 5;", "COMMIT;"]);
    }

    #[test]
    fn what_it_cannot_run_is_refused_with_file_and_line() {
        for (text, line, says) in [
            ("SELECT 1;\n\\sleep 1 ms\n", 2, "unsupported meta-command \\sleep"),
            ("\\set a random(1, :scale)\nSELECT 1;", 1, "random(LO, HI) or an integer"),
            ("\\set a random(9, 1)\nSELECT 1;", 1, "low end is above"),
            ("\\set a-b 1\nSELECT 1;", 1, "variable name"),
            ("-- nothing\n", 0, "no SQL statement"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().contains(says), "{text:?}: {e}");
            assert!(e.to_string().starts_with("t.sql:"), "{e}");
        }
    }

    #[test]
    fn a_last_statement_without_a_semicolon_is_kept() {
        let s = parse("SELECT 1;\nSELECT\n  2").unwrap();
        assert_eq!(render(&s, 0), vec!["SELECT 1;", "SELECT\n  2"]);
    }
}

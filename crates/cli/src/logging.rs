//! The one logging setup of every command: `tracing` events to stderr, filtered by `RUST_LOG`
//! (tracing's env-filter syntax; each command's default when it is unset or empty), in the
//! format `--log-format` picks.
//!
//! - `text` (the default): one line an event for people. Coloured only when stderr is a
//!   terminal and `NO_COLOR` is unset or empty (<https://no-color.org>), so a pipe, a file
//!   or journald never gets escape codes.
//! - `json`: one JSON object a line for machines (journald forwarders, log shippers):
//!   `timestamp`, `level`, `target`, `message` and the event's fields at the top level.
//!
//! A command's reports (tables, summaries on stdout or stderr) are not log events and keep
//! their own layout; a command's fatal error is (see [`report_error`]).

use std::ffi::OsStr;
use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The long name of the global format flag (`--log-format`), also read by `spelling`,
/// which must step over its value.
pub const FORMAT_FLAG: &str = "log-format";

/// The default filter when `RUST_LOG` is unset: informational events and worse.
pub const DEFAULT_FILTER: &str = "info";

/// How log events are written to stderr.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// One human-readable line an event, coloured only on a terminal without NO_COLOR.
    #[default]
    Text,
    /// One JSON object a line: timestamp, level, target, message and the event's fields.
    Json,
}

/// Whether log lines carry ANSI colour: only to a terminal, and never when `NO_COLOR` is set
/// to a non-empty value (an empty `NO_COLOR` counts as unset, as no-color.org says).
pub fn colour(stderr_is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    stderr_is_terminal && no_color.map_or(true, OsStr::is_empty)
}

/// Installs the process's subscriber: `RUST_LOG` if set and not empty, else `default_filter`.
/// Call once, before the first event; a second call changes nothing. A `RUST_LOG` that does
/// not parse is reported (as a warning) and `default_filter` used instead.
pub fn init(format: Format, default_filter: &str) {
    let rust_log = std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty());
    let (filter, refused) = match rust_log.as_deref().map(EnvFilter::try_new) {
        Some(Ok(f)) => (f, None),
        Some(Err(e)) => (EnvFilter::new(default_filter), Some(e)),
        None => (EnvFilter::new(default_filter), None),
    };
    if install(format, filter).is_ok() {
        if let Some(e) = refused {
            tracing::warn!(target: "shortfirst", "RUST_LOG ignored ({e}); logging with the default filter `{default_filter}`");
        }
    }
}

/// A command's fatal error, said on stderr whatever `RUST_LOG` hides: as `shortfirst: error: …`
/// in text, as an `ERROR` event in JSON so every stderr line stays one JSON object.
pub fn report_error(format: Format, error: &anyhow::Error) {
    let text = chain_text(error.chain().map(ToString::to_string));
    match format {
        Format::Text => eprintln!("shortfirst: error: {text}"),
        Format::Json => {
            let sink = subscriber(format, EnvFilter::new("error"));
            tracing::subscriber::with_default(sink, || tracing::error!(target: "shortfirst", "{text}"));
        }
    }
}

/// An error and its causes on one line, `outer: cause: …`, leaving out a cause that its
/// outer message already says: many of our errors name their cause in their own message
/// (so that a library caller's `to_string()` is complete) and also return it as their
/// `source()`, and anyhow's `{:#}` would say it twice.
fn chain_text(messages: impl Iterator<Item = String>) -> String {
    let mut text = String::new();
    for message in messages {
        if text.is_empty() {
            text = message;
        } else if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
    }
    text
}

fn install(format: Format, filter: EnvFilter) -> Result<(), tracing::subscriber::SetGlobalDefaultError> {
    tracing::subscriber::set_global_default(subscriber(format, filter))
}

/// The subscriber for `format`: stderr, colour by [`colour`], JSON events flattened so the
/// message and fields are top-level keys.
fn subscriber(format: Format, filter: EnvFilter) -> Box<dyn tracing::Subscriber + Send + Sync> {
    let ansi = colour(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").as_deref());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        Format::Text => Box::new(builder.with_ansi(ansi).finish()),
        Format::Json => Box::new(builder.with_ansi(false).json().flatten_event(true).finish()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_said_is_not_said_again() {
        let chain = |m: &[&str]| chain_text(m.iter().map(|s| s.to_string()));
        assert_eq!(chain(&["reading config x: not found", "not found"]), "reading config x: not found");
        assert_eq!(chain(&["starting tokio", "too many files"]), "starting tokio: too many files");
        assert_eq!(chain(&["a", "b: c", "c"]), "a: b: c");
        assert_eq!(chain(&["only"]), "only");
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let set = Some(OsStr::new("1"));
        let empty = Some(OsStr::new(""));
        let cases = [
            (true, None, true),
            (true, empty, true),
            (true, set, false),
            (true, Some(OsStr::new("false")), false),
            (false, None, false),
            (false, empty, false),
            (false, set, false),
        ];
        for (terminal, no_color, want) in cases {
            assert_eq!(colour(terminal, no_color), want, "terminal {terminal}, NO_COLOR {no_color:?}");
        }
    }
}

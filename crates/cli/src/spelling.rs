//! Older flag spellings, still accepted with a warning: one concept, one name (the link's
//! rate is `--link-rate` in every command; `load --request-rate` is requests per second).
//!
//! The command line is rewritten before clap reads it, so the old spellings stay out of
//! `--help` and out of every `Args` struct, and this table is the only place they live.

use std::ffi::OsString;

/// One renamed flag: in the subcommand `command` (space-separated path, e.g. `uplink setup`),
/// `old` is read as `new`.
struct Renamed {
    command: &'static str,
    old: &'static str,
    new: &'static str,
}

/// Every older spelling still accepted. Add a row when renaming a flag users may have in scripts.
const RENAMED: &[Renamed] = &[
    Renamed { command: "serve", old: "--uplink-rate", new: "--link-rate" },
    Renamed { command: "load", old: "--uplink", new: "--link-rate" },
    Renamed { command: "load", old: "--rate", new: "--request-rate" },
    Renamed { command: "sim", old: "--rate", new: "--link-rate" },
    Renamed { command: "uplink setup", old: "--rate", new: "--link-rate" },
    Renamed { command: "workload generate", old: "--rate", new: "--request-rate" },
];

/// Subcommands with subcommands of their own (their path has two words).
const NESTED: &[&str] = &["uplink", "gatekeeper", "workload"];

/// Global flags (accepted before or after any command word) whose value is the next
/// argument unless written `--flag=value`: neither is a command word.
const GLOBAL_WITH_VALUE: &[&str] = &[crate::logging::FORMAT_FLAG];

/// `argv` with every older spelling replaced by the current one, and a warning per
/// replacement (`old` → `new`, naming the command) to log.
pub fn modernize(argv: Vec<OsString>) -> (Vec<OsString>, Vec<String>) {
    let mut warnings = Vec::new();
    let mut path: Vec<String> = Vec::new();
    let mut out = Vec::with_capacity(argv.len());
    let mut after_terminator = false;
    // The last argument that is not a global flag or its value, and whether the next
    // argument is a global flag's value (global flags may stand anywhere).
    let mut previous: Option<String> = None;
    let mut global_value_next = false;
    for (i, arg) in argv.into_iter().enumerate() {
        let Some(text) = arg.to_str().filter(|_| i > 0 && !after_terminator) else {
            out.push(arg);
            continue;
        };
        if std::mem::take(&mut global_value_next) {
            out.push(arg);
            continue;
        }
        if text.strip_prefix("--").is_some_and(|name| GLOBAL_WITH_VALUE.contains(&name)) {
            global_value_next = true;
            out.push(arg);
            continue;
        }
        if text == "--" {
            after_terminator = true;
        } else if !text.starts_with('-') && command_word_expected(&path, previous.as_deref()) {
            path.push(text.to_string());
        } else if let Some(new) = rewrite(&path.join(" "), text) {
            warnings.push(format!(
                "`{} {}` is the older spelling of `{}`; it will be removed",
                path.join(" "),
                text.split('=').next().unwrap_or(text),
                new.split('=').next().unwrap_or(&new)
            ));
            previous = Some(new.clone());
            out.push(OsString::from(new));
            continue;
        }
        previous = Some(text.to_string());
        out.push(arg);
    }
    (out, warnings)
}

/// Whether the next bare word names a (sub)command rather than a flag's value: the first
/// word, or the second one after a command that has subcommands, right after it.
fn command_word_expected(path: &[String], previous: Option<&str>) -> bool {
    match path {
        [] => true,
        [first] => NESTED.contains(&first.as_str()) && previous == Some(first.as_str()),
        _ => false,
    }
}

/// The current spelling of `arg` (`--old` or `--old=VALUE`) in `command`, if it is an older one.
fn rewrite(command: &str, arg: &str) -> Option<String> {
    let (name, value) = match arg.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (arg, None),
    };
    let r = RENAMED.iter().find(|r| r.command == command && r.old == name)?;
    Some(match value {
        Some(v) => format!("{}={v}", r.new),
        None => r.new.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> (Vec<String>, Vec<String>) {
        let argv = std::iter::once("shortfirst").chain(args.iter().copied()).map(OsString::from).collect();
        let (out, warnings) = modernize(argv);
        (out.into_iter().skip(1).map(|a| a.into_string().unwrap()).collect(), warnings)
    }

    #[test]
    fn old_spellings_are_rewritten_with_a_warning() {
        let cases: &[(&[&str], &[&str], &str)] = &[
            (&["serve", "--uplink-rate", "10mbit"], &["serve", "--link-rate", "10mbit"], "`serve --uplink-rate`"),
            (&["serve", "--uplink-rate=10mbit"], &["serve", "--link-rate=10mbit"], "`--link-rate`"),
            (&["load", "--uplink", "10mbit"], &["load", "--link-rate", "10mbit"], "`load --uplink`"),
            (&["load", "--rate", "50"], &["load", "--request-rate", "50"], "`--request-rate`"),
            (&["sim", "--rate", "1gbit"], &["sim", "--link-rate", "1gbit"], "`sim --rate`"),
            (
                &["workload", "generate", "--rate", "50"],
                &["workload", "generate", "--request-rate", "50"],
                "`workload generate --rate`",
            ),
            (
                &["uplink", "setup", "--dev", "eth0", "--rate", "10mbit"],
                &["uplink", "setup", "--dev", "eth0", "--link-rate", "10mbit"],
                "`uplink setup --rate`",
            ),
            (
                &["--log-format", "json", "sim", "--rate", "1g"],
                &["--log-format", "json", "sim", "--link-rate", "1g"],
                "`sim --rate`",
            ),
            (
                &["load", "--log-format", "json", "--rate", "5"],
                &["load", "--log-format", "json", "--request-rate", "5"],
                "`load --rate`",
            ),
            (
                &["uplink", "--log-format", "text", "setup", "--rate", "1m"],
                &["uplink", "--log-format", "text", "setup", "--link-rate", "1m"],
                "`uplink setup --rate`",
            ),
            (
                &["--log-format=json", "sim", "--rate", "1g"],
                &["--log-format=json", "sim", "--link-rate", "1g"],
                "`sim --rate`",
            ),
        ];
        for (args, want, warning) in cases {
            let (out, warnings) = run(args);
            assert_eq!(out, *want, "{args:?}");
            assert_eq!(warnings.len(), 1, "{args:?}");
            assert!(warnings[0].contains(warning) && warnings[0].contains("older spelling"), "{warnings:?}");
        }
    }

    #[test]
    fn current_spellings_values_and_other_commands_are_left_alone() {
        for args in [
            &["serve", "--link-rate", "10mbit"][..],
            &["load", "--request-rate", "50", "--link-rate", "1gbit"],
            &["gatekeeper", "--upstream", "http://127.0.0.1:9"],
            &["netem", "--rate", "10mbit"],
            &["serve", "--root", "--uplink-rate-dir"],
            &["sim", "--", "--rate"],
            &["uplink", "show", "--rate"],
        ] {
            let (out, warnings) = run(args);
            assert_eq!(out, args, "{args:?}");
            assert!(warnings.is_empty(), "{args:?}: {warnings:?}");
        }
    }
}

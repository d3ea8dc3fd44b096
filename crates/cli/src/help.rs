//! `--help` for commands whose flags are a partial configuration (`serve`, `gatekeeper`):
//! every flag is optional so that a `--config` file can set what the flags leave unset, so
//! clap's `default_value` cannot be used (it would set them all). Instead each flag's help
//! gets the default its library computes from the one place defaults are written, appended
//! as clap shows a `default_value`.

/// `cmd` with `[default: VALUE]` appended to the help of each flag in `defaults`, which are
/// `(key, value)` with key the long flag's name (`max-connections`). Panics on a key that
/// names no flag of `cmd` (a test renders every command's help).
pub fn show_defaults<K: AsRef<str>>(
    mut cmd: clap::Command,
    defaults: impl IntoIterator<Item = (K, String)>,
) -> clap::Command {
    for (key, value) in defaults {
        let id = key.as_ref().replace('-', "_");
        cmd = cmd.mut_arg(id, |arg| {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            let arg = arg.help(format!("{help} [default: {value}]"));
            match arg.get_long_help().map(ToString::to_string) {
                Some(long) => arg.long_help(format!("{long}\n\n[default: {value}]")),
                None => arg,
            }
        });
    }
    cmd
}

/// Checks on `--help` as users get it, for each command's tests.
#[cfg(test)]
pub(crate) mod testing {
    /// `shortfirst SUB --help` as `main` builds it.
    pub fn help_of(sub: &str) -> String {
        let mut cmd = crate::command();
        let sub = cmd.find_subcommand_mut(sub).unwrap_or_else(|| panic!("no subcommand {sub}"));
        sub.render_long_help().to_string()
    }

    /// The entry of `--flag` in a rendered help: its line and its description's, up to the
    /// next option's, whitespace collapsed.
    pub fn entry<'h>(help: &'h str, flag: &str) -> String {
        let is_option = |line: &&'h str| {
            let text = line.trim_start();
            text.starts_with('-') && line.len() - text.len() < 8
        };
        let names_flag = |line: &&str| line.trim_start().split([' ', ',', '=']).any(|word| word == format!("--{flag}"));
        let mut lines = help.lines().skip_while(|l| !(is_option(l) && names_flag(l)));
        let first = lines.next().unwrap_or_else(|| panic!("--{flag} is not in the help:\n{help}"));
        let rest = lines.take_while(|l| !is_option(l));
        std::iter::once(first).chain(rest).flat_map(str::split_whitespace).collect::<Vec<_>>().join(" ")
    }

    /// `help` shows each `(key, default)` in `--key`'s own entry, once, and no flag states a
    /// default by hand (a "Default:" in its text, or a clap `default_value`, which would also
    /// make the unset flag look set and win over the file).
    pub fn assert_shows_defaults<K: AsRef<str>>(help: &str, defaults: impl IntoIterator<Item = (K, String)>) {
        let mut shown = 0;
        for (key, value) in defaults {
            let entry = entry(help, key.as_ref());
            assert!(
                entry.contains(&format!("[default: {value}]")),
                "--{} lacks [default: {value}]: {entry}",
                key.as_ref()
            );
            shown += 1;
        }
        assert_eq!(help.matches("[default: ").count(), shown, "a default shown twice, or not by its library:\n{help}");
        assert!(!help.contains("Default:"), "a default stated by hand:\n{help}");
    }
}

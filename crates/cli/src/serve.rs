//! `shortfirst serve`: flags (and an optional TOML file with the same keys, both
//! `shortfirst_server::ConfigFile`) → `ServerConfig::from_flags` (merge and validation are
//! the library's), then run until SIGTERM/SIGINT; SIGHUP applies the file again.

use shortfirst_server::{ConfigFile, ServerConfig};

/// Boxed: the flags are many, and `Command` (in main.rs) holds every
/// subcommand's `Args` inline. The flags are the server library's partial configuration,
/// the same struct its `--config` file is read into: one definition per setting.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    flags: Box<ConfigFile>,
}

/// `serve`'s command with each setting's default (from `ServerConfig::new`, the one place
/// defaults are written) appended to its help, as clap shows `default_value`s.
pub fn show_defaults(cmd: clap::Command) -> clap::Command {
    crate::help::show_defaults(cmd, ServerConfig::defaults_shown())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = ServerConfig::from_flags((*args.flags).clone())?;
    // Every ServerError names what failed (root, address, log path); no extra context needed.
    // The flags stay: SIGHUP reads the --config file again and lays them over it.
    Ok(shortfirst_server::run_until_signal(config, *args.flags)?)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use clap::Parser;
    use shortfirst_server::{AtMaxConnections, ConfigError, CutoffsSpec, Policy, Scheduling};

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    impl Args {
        fn resolve(self) -> Result<ServerConfig, ConfigError> {
            ServerConfig::from_flags(*self.flags)
        }
    }

    fn parse(extra: &[&str]) -> Result<Args, String> {
        let base = ["serve", "--root", "/srv"];
        Cli::try_parse_from(base.iter().chain(extra)).map(|c| c.args).map_err(|e| e.to_string())
    }

    fn config(extra: &[&str]) -> ServerConfig {
        parse(extra).unwrap().resolve().unwrap()
    }

    #[test]
    fn srrt_flags() {
        use shortfirst_core::srrt::Estimator;
        use shortfirst_server::RrtCutoffsSpec;
        let c = config(&[
            "--policy",
            "srrt",
            "--rrt-cutoffs",
            "auto",
            "--rrt-estimator",
            "paper",
            "--rrt-step-bytes",
            "8192",
        ]);
        assert_eq!(
            (c.policy, c.rrt_cutoffs, c.rrt_estimator, c.rrt_step_bytes),
            (Policy::Srrt, RrtCutoffsSpec::Auto, Estimator::Paper, 8192)
        );
        let c = config(&["--policy", "srrt", "--rrt-cutoffs", "40ms,400ms"]);
        assert_eq!(c.rrt_cutoffs, "40ms,400ms".parse::<RrtCutoffsSpec>().unwrap());
        let err = parse(&["--policy", "fair", "--rrt-cutoffs", "40ms"]).unwrap().resolve().unwrap_err();
        assert!(format!("{err:#}").contains("only srrt"), "{err:#}");
        assert!(parse(&["--rrt-estimator", "guess"]).unwrap_err().contains("path or paper"));
    }

    /// Which timeout of the config a case checks.
    type Field = fn(&ServerConfig) -> Duration;

    #[test]
    fn timeout_flags_take_units_and_the_ms_flags_still_work() {
        let ms = Duration::from_millis;
        let cases: &[(&[&str], Field, Duration)] = &[
            (&[], |c| c.header_timeout, ms(10_000)),
            (&["--header-timeout", "5s"], |c| c.header_timeout, ms(5_000)),
            (&["--header-timeout", "500ms"], |c| c.header_timeout, ms(500)),
            (&["--header-timeout", "2"], |c| c.header_timeout, ms(2_000)),
            (&["--header-timeout-ms", "1500"], |c| c.header_timeout, ms(1_500)),
            (&["--idle-timeout", "1m"], |c| c.idle_timeout, ms(60_000)),
            (&["--idle-timeout-ms", "250"], |c| c.idle_timeout, ms(250)),
            (&["--send-timeout", "0.5"], |c| c.send_timeout, ms(500)),
            (&["--send-timeout-ms", "42"], |c| c.send_timeout, ms(42)),
            (&["--drain-timeout", "30s"], |c| c.drain_timeout, ms(30_000)),
            (&["--drain-timeout-ms", "0"], |c| c.drain_timeout, ms(0)),
        ];
        for (flags, field, want) in cases {
            assert_eq!(field(&config(flags)), *want, "{flags:?}");
        }
    }

    #[test]
    fn bad_timeout_flags_are_usage_errors_naming_the_flag() {
        let cases: &[(&[&str], &[&str])] = &[
            (&["--header-timeout", "5s", "--header-timeout-ms", "5000"], &["--header-timeout", "--header-timeout-ms"]),
            (&["--idle-timeout-ms", "5", "--idle-timeout", "5s"], &["--idle-timeout", "--idle-timeout-ms"]),
            (&["--send-timeout", "1s", "--send-timeout-ms", "1"], &["--send-timeout-ms"]),
            (&["--drain-timeout", "1s", "--drain-timeout-ms", "1"], &["--drain-timeout-ms"]),
            (&["--header-timeout", "0s"], &["--header-timeout", "above 0"]),
            (&["--idle-timeout", "ten"], &["--idle-timeout", "ten"]),
            (&["--send-timeout=-1"], &["--send-timeout"]),
            (&["--header-timeout-ms", "5s"], &["--header-timeout-ms"]),
        ];
        for (flags, needles) in cases {
            let err = parse(flags).err().unwrap_or_else(|| panic!("{flags:?} accepted"));
            for n in *needles {
                assert!(err.contains(n), "{flags:?}: {err} lacks {n}");
            }
        }
    }

    #[test]
    fn policy_flag_names_match_sim() {
        let default = CutoffsSpec::List(shortfirst_core::bands::Cutoffs::server_default());
        let list = |t: &str| CutoffsSpec::List(shortfirst_core::bands::Cutoffs::parse(t).unwrap());
        let cases: Vec<(&[&str], Policy, CutoffsSpec)> = vec![
            (&[], Policy::Srpt, default.clone()),
            (&["--policy", "srpt-classes:1K,2K"], Policy::Srpt, list("1K,2K")),
            (&["--policy", "srpt-classes"], Policy::Srpt, default.clone()),
            (&["--policy", "srpt-classes", "--cutoffs", "4K"], Policy::Srpt, list("4K")),
            (&["--policy", "srpt", "--cutoffs", "4K"], Policy::Srpt, list("4K")),
            (&["--policy", "srpt", "--cutoffs", "auto"], Policy::Srpt, CutoffsSpec::Auto),
            (&["--policy", "fair"], Policy::Fair, default.clone()),
            (&["--policy", "srpt2"], Policy::Srpt2, default.clone()),
        ];
        for (flags, policy, cutoffs) in cases {
            let c = config(flags);
            assert_eq!((c.policy, &c.cutoffs), (policy, &cutoffs), "{flags:?}");
        }
        // Same spelling, same bands as the simulator's policy.
        let sim = shortfirst_core::policy::Policy::parse("srpt-classes:1K,2K").unwrap();
        let shortfirst_core::policy::Policy::SrptClasses(sim_cutoffs) = sim else { panic!("{sim}") };
        assert_eq!(config(&["--policy", "srpt-classes:1K,2K"]).cutoffs, CutoffsSpec::List(sim_cutoffs));
    }

    #[test]
    fn scheduler_flags() {
        let c = config(&[]);
        assert_eq!((c.scheduler, c.link_rate_bits_per_s, c.socket_priority), (Scheduling::Kernel, None, true));
        let c = config(&["--scheduler", "user", "--link-rate", "10mbit", "--policy", "srpt"]);
        assert_eq!((c.scheduler, c.link_rate_bits_per_s), (Scheduling::User, Some(10_000_000)));
        assert!(!c.socket_priority, "no SO_PRIORITY (no CAP_NET_ADMIN) unless asked for");
        assert_eq!(c.user_policy().unwrap(), shortfirst_core::policy::Policy::Srpt);
        let c = config(&["--scheduler", "user", "--link-rate", "1gbit", "--policy", "srpt-classes:1K"]);
        assert_eq!(c.user_policy().unwrap().to_string(), "srpt-classes:1000");
        let c = config(&["--scheduler", "crovella", "--link-rate", "5mbit", "--write-concurrency", "8"]);
        assert_eq!((c.scheduler, c.write_concurrency), (Scheduling::Crovella, 8));
        let c = config(&["--scheduler", "user", "--link-rate", "5mbit", "--pacer-lookahead", "5ms"]);
        assert_eq!(c.pacer_lookahead, Some(Duration::from_millis(5)));
        assert_eq!(config(&[]).pacer_lookahead, None, "derived from the rate");
        let c = config(&["--scheduler", "user", "--link-rate", "5mbit", "--pacer-rate-fraction", "0.995"]);
        assert_eq!(c.pacer_rate_fraction, 0.995);
        assert_eq!(config(&[]).pacer_rate_fraction, 0.98, "the pacer's default");
        let c = config(&["--scheduler", "user", "--link-rate", "5mbit", "--pacer-burst-bytes", "6056"]);
        assert_eq!((c.pacer_burst_bytes, config(&[]).pacer_burst_bytes), (6056, 0));
        let c = config(&["--scheduler", "user", "--link-rate", "5mbit", "--policy", "las", "--socket-priority"]);
        assert!(c.socket_priority, "hybrid: bands as well, when asked for");
        for (flags, needles) in [
            (&["--scheduler", "user"][..], &["link-rate", "10mbit"][..]),
            (&["--link-rate", "10mbit"], &["link-rate", "uplink setup"]),
            (&["--scheduler", "user", "--link-rate", "10mbit", "--write-concurrency", "3"], &["write-concurrency"]),
            (&["--policy", "las"], &["las", "--scheduler user"]),
            (&["--scheduler", "user", "--link-rate", "10mbit", "--policy", "srpt2"], &["srpt2", "user"]),
            (&["--scheduler", "user", "--link-rate", "10mbit", "--cutoffs", "auto"], &["auto"]),
            (&["--scheduler", "user", "--link-rate", "10mbit", "--notsent-lowat-bytes", "0"], &["notsent-lowat"]),
            (&["--scheduler", "user", "--link-rate", "10mbit", "--pacer-lookahead", "2s"], &["pacer-lookahead"]),
            (
                &["--scheduler", "user", "--link-rate", "10mbit", "--pacer-rate-fraction", "1.2"],
                &["pacer-rate-fraction", "0.5..=1"],
            ),
            (
                &["--scheduler", "user", "--link-rate", "10mbit", "--pacer-burst-bytes", "20000000"],
                &["pacer-burst-bytes", "16777216"],
            ),
            (
                &["--scheduler", "user", "--link-rate", "10mbit", "--pacer-rate-fraction", "0.3"],
                &["pacer-rate-fraction"],
            ),
            (
                &["--scheduler", "user", "--link-rate", "10mbit", "--pacer-rate-fraction", "NaN"],
                &["pacer-rate-fraction"],
            ),
        ] {
            let err = parse(flags).unwrap().resolve().unwrap_err();
            let msg = format!("{err:#}");
            for n in needles {
                assert!(msg.contains(n), "{flags:?}: {msg} lacks {n}");
            }
        }
        for (flags, needles) in [
            (&["--scheduler", "users"][..], &["--scheduler", "kernel, user or crovella"][..]),
            (&["--scheduler", "user", "--link-rate", "10mbps"], &["--link-rate", "bits"]),
            (&["--scheduler", "user", "--link-rate", "0"], &["--link-rate", "above 0"]),
        ] {
            let err = parse(flags).err().unwrap_or_else(|| panic!("{flags:?} accepted"));
            for n in needles {
                assert!(err.contains(n), "{flags:?}: {err} lacks {n}");
            }
        }
    }

    #[test]
    fn connection_limit_flags() {
        let c = config(&[]);
        assert_eq!((c.max_connections, c.at_max_connections, c.backlog), (4096, AtMaxConnections::Refuse, 4096));
        let c = config(&["--max-connections", "350", "--at-max-connections", "wait", "--backlog", "512"]);
        assert_eq!((c.max_connections, c.at_max_connections, c.backlog), (350, AtMaxConnections::Wait, 512));
        let err = parse(&["--at-max-connections", "queue"]).expect_err("accepted");
        assert!(err.contains("--at-max-connections") && err.contains("refuse or wait"), "{err}");
        let err = parse(&["--backlog", "0"]).unwrap().resolve().unwrap_err();
        assert!(format!("{err:#}").contains("backlog"), "{err:#}");
    }

    #[test]
    fn bad_policy_flags_are_named() {
        for (flags, needles) in [
            (&["--policy", "sjf"][..], &["--policy", "sjf"][..]),
            (&["--policy", "srpt-classes:2K,1K"], &["--policy", "increasing"]),
            (&["--policy", "fair:1K"], &["--policy", "srpt-classes:CUTOFFS"]),
        ] {
            let err = parse(flags).err().unwrap_or_else(|| panic!("{flags:?} accepted"));
            for n in needles {
                assert!(err.contains(n), "{flags:?}: {err} lacks {n}");
            }
        }
        let err = parse(&["--policy", "srpt-classes:1K", "--cutoffs", "2K"]).unwrap().resolve().unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("cutoffs") && msg.contains("srpt-classes"), "{msg}");
    }
    /// What `serve --help` says a setting defaults to is what `ServerConfig::new` sets.
    #[test]
    fn help_shows_the_defaults_of_server_config_new() {
        use crate::help::testing::{assert_shows_defaults, entry, help_of};
        let help = help_of("serve");
        assert_shows_defaults(&help, ServerConfig::defaults_shown());
        let d = ServerConfig::new("/srv");
        for (flag, value) in [
            ("max-connections", d.max_connections.to_string()),
            ("listen", d.listen.to_string()),
            ("at-max-connections", d.at_max_connections.to_string()),
            ("header-timeout", format!("{:?}", d.header_timeout)),
            ("scheduler", d.scheduler.to_string()),
            ("pacer-rate-fraction", d.pacer_rate_fraction.to_string()),
        ] {
            assert!(entry(&help, flag).contains(&format!("[default: {value}]")), "--{flag}: {}", entry(&help, flag));
        }
    }

    /// An unset flag must stay unset, or it would win over the `--config` file's key.
    #[test]
    fn no_flags_leave_every_setting_to_the_file() {
        use clap::FromArgMatches;
        let matches = crate::command().try_get_matches_from(["shortfirst", "serve"]).unwrap();
        let crate::Command::Serve(args) = crate::Cli::from_arg_matches(&matches).unwrap().command else {
            panic!("not serve")
        };
        assert_eq!(args.flags.keys_set(), Vec::<String>::new());
    }

    fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(&dir, "s.toml", "max-connections = 7\nbacklog = 99\nidle-timeout = \"1m30s\"\n");
        let c = config(&["--config", &file, "--max-connections", "8"]);
        assert_eq!((c.max_connections, c.backlog, c.idle_timeout), (8, 99, Duration::from_secs(90)));
        assert_eq!(c.send_timeout, ServerConfig::new("/srv").send_timeout);
        // Root from the file alone is enough.
        let file = write(&dir, "r.toml", "root = \"/srv/www\"\n");
        let c = ServerConfig::from_flags(ConfigFile { config: Some(file.into()), ..Default::default() }).unwrap();
        assert_eq!(c.root, std::path::PathBuf::from("/srv/www"));
    }

    #[test]
    fn file_errors_name_the_key_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        for (text, key) in [
            ("max-conections = 3\n", "max-conections"),
            ("max-connections = 0\n", "max-connections"),
            ("idle-timeout = \"soon\"\n", "idle-timeout"),
            ("scheduler = \"user\"\nlink-rate = \"10mbps\"\n", "link-rate"),
        ] {
            let file = write(&dir, "bad.toml", text);
            // As main prints it: the whole chain, each cause once.
            let msg = format!("{:#}", anyhow::Error::from(parse(&["--config", &file]).unwrap().resolve().unwrap_err()));
            assert!(msg.contains(key) && msg.contains("bad.toml"), "{text}: {msg}");
            assert_eq!(msg.matches(&format!("`{key}`")).count().max(1), 1, "{text}: said twice: {msg}");
        }
        // Given by the flag, the fault is the flag's: the file is not blamed.
        let file = write(&dir, "ok.toml", "backlog = 5\n");
        let msg = parse(&["--config", &file, "--backlog", "0"]).unwrap().resolve().unwrap_err().to_string();
        assert!(msg.contains("backlog") && !msg.contains("ok.toml"), "{msg}");
        let err = ServerConfig::from_flags(ConfigFile::default()).unwrap_err().to_string();
        assert!(err.contains("--root"), "{err}");
    }

    #[test]
    fn durations_take_minutes_and_compounds_and_the_old_link_rate_key_still_reads() {
        let c = config(&["--idle-timeout", "2m", "--drain-timeout", "1m30s"]);
        assert_eq!((c.idle_timeout, c.drain_timeout), (Duration::from_secs(120), Duration::from_secs(90)));
        let dir = tempfile::tempdir().unwrap();
        let file = write(&dir, "old.toml", "scheduler = \"user\"\nuplink-rate = \"10mbit\"\n");
        assert_eq!(config(&["--config", &file]).link_rate_bits_per_s, Some(10_000_000));
    }

    #[test]
    fn the_old_link_rate_flag_still_works_with_a_warning() {
        let argv = ["shortfirst", "serve", "--root", "/srv", "--scheduler", "user", "--uplink-rate", "10mbit"];
        let (argv, warnings) = crate::spelling::modernize(argv.iter().map(Into::into).collect());
        assert!(warnings[0].contains("--uplink-rate") && warnings[0].contains("--link-rate"), "{warnings:?}");
        let args = Cli::try_parse_from(argv.into_iter().skip(1)).unwrap().args;
        assert_eq!(args.resolve().unwrap().link_rate_bits_per_s, Some(10_000_000));
    }
}

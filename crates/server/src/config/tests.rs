use super::*;
use std::path::Path;

#[test]
fn file_keys_mirror_flags_and_flags_win() {
    let file = ConfigFile::parse(
        "root = \"/srv\"\npolicy = \"fair\"\nmax-connections = 7\nidle-timeout-ms = 1500\n",
        Path::new("t.toml"),
    )
    .unwrap();
    let flags = ConfigFile { policy: Some(Policy::Srpt.into()), cutoffs: Some("auto".into()), ..Default::default() };
    let c = ServerConfig::from_file(file.overlay(flags)).unwrap();
    assert_eq!(c.root, PathBuf::from("/srv"));
    assert_eq!(c.policy, Policy::Srpt);
    assert_eq!(c.cutoffs, CutoffsSpec::Auto);
    assert_eq!(c.max_connections, 7);
    assert_eq!(c.idle_timeout, Duration::from_millis(1500));
}

#[test]
fn example_file_is_valid_and_states_the_defaults() {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/serve.example.toml"));
    let c = ServerConfig::from_file(ConfigFile::load(path).unwrap()).unwrap();
    let d = ServerConfig::new("/srv/www");
    assert_eq!(format!("{c:?}"), format!("{d:?}"));
}

#[test]
fn unknown_key_is_named() {
    let err = ConfigFile::parse("root = \"/srv\"\nmax-conections = 3\n", Path::new("x.toml")).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("max-conections"), "{msg}");
    assert!(msg.contains("x.toml"), "{msg}");
}

#[test]
fn bad_values_are_named() {
    let cases: &[(&str, &str)] = &[
        ("policy = \"fair\"\ncutoffs = \"1K\"", "cutoffs"),
        ("cutoffs = \"2K,1K\"", "cutoffs"),
        ("max-headers = 1000", "max-headers"),
        ("max-connections = 0", "max-connections"),
        ("backlog = 0", "backlog"),
        ("header-timeout-ms = 0", "header-timeout-ms"),
        ("cache-control = [\"/a/{b=public\"]", "cache-control"),
        ("cache-control = [\"a.js=public\"]", "cache-control"),
        ("listing-max-entries = 0", "listing-max-entries"),
        ("listing-max-entries = 1000001", "listing-max-entries"),
    ];
    for (text, key) in cases {
        let file = ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("t.toml")).unwrap();
        let msg = ServerConfig::from_file(file).unwrap_err().to_string();
        assert!(msg.contains(key), "{text}: {msg}");
    }
    assert!(matches!(ServerConfig::from_file(ConfigFile::default()), Err(ConfigError::Missing("root"))));
    assert_eq!("srpt2".parse::<Policy>(), Ok(Policy::Srpt2));
    assert_eq!("json".parse::<AccessLogFormat>(), Ok(AccessLogFormat::Json));
    assert_eq!("deny".parse::<Dotfiles>(), Ok(Dotfiles::Deny));
    assert!("hide".parse::<Dotfiles>().unwrap_err().contains("ignore, deny or allow"));
    assert_eq!("auto".parse::<Listings>(), Ok(Listings::Auto));
    assert!("on".parse::<Listings>().unwrap_err().contains("off, html, json or auto"));
    let c = parse_ok("listings = \"json\"\nlisting-max-entries = 5");
    assert_eq!((c.listings, c.listing_max_entries), (Listings::Json, 5));
    let err = ConfigFile::parse("root = \"/srv\"\nlistings = \"yes\"\n", Path::new("t.toml")).unwrap_err();
    assert!(err.to_string().contains("listings"), "{err}");
    assert!("queue".parse::<AtMaxConnections>().unwrap_err().contains("refuse or wait"));
    let err = ConfigFile::parse("root = \"/srv\"\nat-max-connections = \"block\"\n", Path::new("t.toml")).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("at-max-connections") && msg.contains("`wait`") && msg.contains("t.toml"), "{msg}");
    assert!("SRPT".parse::<Policy>().unwrap_err().contains("fair, srpt, srpt2, las or srrt"));
}

fn parse_ok(text: &str) -> ServerConfig {
    let file = ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("t.toml")).unwrap();
    ServerConfig::from_file(file).unwrap()
}

/// Which timeout of the config a case checks.
type Field = fn(&ServerConfig) -> Duration;

#[test]
fn timeouts_take_units_and_the_ms_keys_still_work() {
    let ms = Duration::from_millis;
    let cases: &[(&str, Field, Duration)] = &[
        ("header-timeout = \"10s\"", |c| c.header_timeout, ms(10_000)),
        ("header-timeout = \"500ms\"", |c| c.header_timeout, ms(500)),
        ("header-timeout = 3", |c| c.header_timeout, ms(3_000)),
        ("header-timeout = 0.25", |c| c.header_timeout, ms(250)),
        ("header-timeout = \"2\"", |c| c.header_timeout, ms(2_000)),
        ("header-timeout-ms = 1500", |c| c.header_timeout, ms(1_500)),
        ("idle-timeout = \"1m30s\"", |c| c.idle_timeout, ms(90_000)),
        ("idle-timeout-ms = 7", |c| c.idle_timeout, ms(7)),
        ("send-timeout = \"2.5s\"", |c| c.send_timeout, ms(2_500)),
        ("send-timeout-ms = 900", |c| c.send_timeout, ms(900)),
        ("drain-timeout = \"1s\"", |c| c.drain_timeout, ms(1_000)),
        ("drain-timeout-ms = 0", |c| c.drain_timeout, ms(0)),
    ];
    for (text, field, want) in cases {
        assert_eq!(field(&parse_ok(text)), *want, "{text}");
    }
}

#[test]
fn bad_timeouts_are_named() {
    // (file text, what the error must mention)
    let cases: &[(&str, &[&str])] = &[
        ("header-timeout = \"10s\"\nheader-timeout-ms = 10000", &["header-timeout", "header-timeout-ms", "t.toml"]),
        ("idle-timeout = 1\nidle-timeout-ms = 1", &["idle-timeout", "idle-timeout-ms"]),
        ("send-timeout = \"1s\"\nsend-timeout-ms = 5", &["send-timeout-ms"]),
        ("drain-timeout = \"1s\"\ndrain-timeout-ms = 5", &["drain-timeout-ms"]),
        ("header-timeout = \"ten\"", &["header-timeout", "ten"]),
        ("idle-timeout = \"5 parsecs\"", &["idle-timeout"]),
        ("header-timeout = true", &["header-timeout"]),
    ];
    for (text, needles) in cases {
        let err = ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("t.toml")).unwrap_err();
        let msg = err.to_string();
        for n in *needles {
            assert!(msg.contains(n), "{text}: {msg} lacks {n}");
        }
    }
    // Parsed but not a usable timeout: named by the new key.
    for (text, key) in [
        ("header-timeout = 0", "header-timeout"),
        ("send-timeout = \"0s\"", "send-timeout"),
        ("drain-timeout = -1", "drain-timeout"),
        ("idle-timeout = 1e300", "idle-timeout"),
    ] {
        let file = ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("t.toml")).unwrap();
        let msg = ServerConfig::from_file(file).unwrap_err().to_string();
        assert!(msg.contains(key) && msg.contains("above 0"), "{text}: {msg}");
    }
}

#[test]
fn a_flag_in_either_spelling_replaces_the_files_timeout() {
    let file =
        ConfigFile::parse("root = \"/srv\"\nheader-timeout-ms = 9000\nidle-timeout = \"9s\"\n", Path::new("t.toml"))
            .unwrap();
    let flags = ConfigFile { header_timeout: Some(2.0), idle_timeout_ms: Some(300), ..Default::default() };
    let c = ServerConfig::from_file(file.overlay(flags)).unwrap();
    assert_eq!(c.header_timeout, Duration::from_secs(2));
    assert_eq!(c.idle_timeout, Duration::from_millis(300));
}

#[test]
fn every_plain_default_is_shown_once() {
    let shown = ServerConfig::defaults_shown();
    let d = ServerConfig::new("/srv");
    let get = |k: &str| shown.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    assert_eq!(get("max-connections"), Some("4096"));
    assert_eq!(get("listen"), Some("127.0.0.1:8080"));
    assert_eq!(get("idle-timeout"), Some("60s"));
    assert_eq!(get("access-log-format"), Some("combined"));
    assert_eq!(get("dotfiles"), Some("ignore"));
    assert_eq!(get("pacer-rate-fraction"), Some(d.pacer_rate_fraction.to_string().as_str()));
    let mut keys: Vec<&str> = shown.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), shown.len(), "a key shown twice");
    // Every key shown is a key of the file.
    let all = ConfigFile::parse("", Path::new("t.toml")).unwrap();
    assert!(all.keys_set().is_empty());
    for k in keys {
        let err = ConfigFile::parse(&format!("{k} = []\n"), Path::new("t.toml")).unwrap_err().to_string();
        assert!(!err.contains("unknown field"), "{k}: {err}");
    }
}

#[test]
fn policy_names_match_sim() {
    let default = CutoffsSpec::List(Cutoffs::server_default());
    let list = |t: &str| CutoffsSpec::List(Cutoffs::parse(t).unwrap());
    // (file text, policy, cutoffs)
    let cases: Vec<(&str, Policy, CutoffsSpec)> = vec![
        ("policy = \"srpt-classes:1K,5K\"", Policy::Srpt, list("1K,5K")),
        ("policy = \"SRPT-Classes: 2K, 20K\"", Policy::Srpt, list("2K,20K")),
        ("policy = \"srpt-classes\"", Policy::Srpt, default.clone()),
        ("policy = \"srpt-classes\"\ncutoffs = \"3K\"", Policy::Srpt, list("3K")),
        ("policy = \"srpt-classes\"\ncutoffs = \"auto\"", Policy::Srpt, CutoffsSpec::Auto),
        ("policy = \"srpt\"", Policy::Srpt, default.clone()),
        ("policy = \"srpt\"\ncutoffs = \"3K\"", Policy::Srpt, list("3K")),
        ("policy = \"fair\"", Policy::Fair, default.clone()),
        ("policy = \"srpt2\"", Policy::Srpt2, default.clone()),
    ];
    for (text, policy, cutoffs) in cases {
        let c = parse_ok(text);
        assert_eq!((c.policy, &c.cutoffs), (policy, &cutoffs), "{text}");
    }
    // The same string means the same cutoffs in sim's parser.
    let sim = shortfirst_core::policy::Policy::parse("srpt-classes:1K,5K").unwrap();
    let serve: PolicySpec = "srpt-classes:1K,5K".parse().unwrap();
    assert_eq!(sim.to_string(), serve.to_string());
}

#[test]
fn scheduler_keys_in_the_file() {
    let c = parse_ok("scheduler = \"user\"\nlink-rate = \"10mbit\"\npolicy = \"srpt\"");
    assert_eq!((c.scheduler, c.link_rate_bits_per_s, c.socket_priority), (Scheduling::User, Some(10_000_000), false));
    assert_eq!(c.user_policy().unwrap(), shortfirst_core::policy::Policy::Srpt);
    let c = parse_ok("scheduler = \"crovella\"\nuplink-rate = 2500000\nwrite-concurrency = 4\npolicy = \"las\"");
    assert_eq!((c.link_rate_bits_per_s, c.write_concurrency), (Some(2_500_000), 4));
    assert_eq!(c.user_policy().unwrap(), shortfirst_core::policy::Policy::Las);
    let c = parse_ok("scheduler = \"user\"\nlink-rate = \"1gbit\"\npolicy = \"srpt-classes\"\ncutoffs = \"3K\"");
    assert_eq!(c.user_policy().unwrap().to_string(), "srpt-classes:3000");
    assert_eq!(parse_ok("policy = \"fair\"").scheduler, Scheduling::Kernel);
    // (file text, what the error must mention)
    for (text, needles) in [
        ("link-rate = \"10mbps\"", &["link-rate", "bits", "t.toml"][..]),
        ("scheduler = \"usr\"", &["scheduler", "usr"]),
    ] {
        let msg =
            ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("t.toml")).unwrap_err().to_string();
        for n in needles {
            assert!(msg.contains(n), "{text}: {msg} lacks {n}");
        }
    }
    for (text, needles) in [
        ("scheduler = \"user\"", &["link-rate", "10mbit"][..]),
        ("link-rate = \"10mbit\"", &["link-rate", "uplink setup"]),
        ("scheduler = \"user\"\nlink-rate = \"600gbit\"", &["link-rate", "must be in"]),
        ("write-concurrency = 3", &["write-concurrency", "crovella"]),
        ("policy = \"las\"", &["las", "--scheduler user"]),
        ("scheduler = \"user\"\nlink-rate = \"1mbit\"\npolicy = \"srpt2\"", &["srpt2"]),
        ("scheduler = \"user\"\nlink-rate = \"1mbit\"\npolicy = \"srrt\"", &["srrt", "kernel"]),
    ] {
        let file = ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("t.toml")).unwrap();
        let msg = ServerConfig::from_file(file).unwrap_err().to_string();
        for n in needles {
            assert!(msg.contains(n), "{text}: {msg} lacks {n}");
        }
    }
}

#[test]
fn srrt_keys() {
    let c = parse_ok("policy = \"srrt\"");
    assert_eq!(c.policy, Policy::Srrt);
    assert_eq!(c.rrt_cutoffs, RrtCutoffsSpec::List(RrtCutoffs::default_list()));
    assert_eq!((c.rrt_estimator, c.rrt_step_bytes), (Estimator::Path, 65_536));
    let c = parse_ok("policy = \"srrt\"\nrrt-cutoffs = \"auto\"\nrrt-estimator = \"paper\"\nrrt-step-bytes = 4096");
    assert_eq!((c.rrt_cutoffs, c.rrt_estimator, c.rrt_step_bytes), (RrtCutoffsSpec::Auto, Estimator::Paper, 4096));
    let c = parse_ok("policy = \"srrt\"\nrrt-cutoffs = \"30ms, 300ms\"");
    assert_eq!(c.rrt_cutoffs, RrtCutoffsSpec::List(RrtCutoffs::from_us(vec![30_000, 300_000]).unwrap()));
    for (text, needles) in [
        ("policy = \"srpt\"\nrrt-cutoffs = \"50ms\"", &["rrt-cutoffs", "only srrt"][..]),
        ("policy = \"srrt\"\nrrt-cutoffs = \"1s,50ms\"", &["rrt-cutoffs", "increasing"]),
        ("policy = \"srrt\"\nrrt-cutoffs = \"fast\"", &["rrt-cutoffs", "fast"]),
        ("policy = \"srrt\"\nrrt-step-bytes = 10", &["rrt-step-bytes"]),
        ("policy = \"srrt\"\ncutoffs = \"1K\"", &["cutoffs", "only srpt-classes"]),
    ] {
        let file = ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("t.toml")).unwrap();
        let msg = ServerConfig::from_file(file).unwrap_err().to_string();
        for n in needles {
            assert!(msg.contains(n), "{text}: {msg} lacks {n}");
        }
    }
    let err = ConfigFile::parse("rrt-estimator = \"e2\"\n", Path::new("t.toml")).unwrap_err().to_string();
    assert!(err.contains("rrt-estimator") || err.contains("e2"), "{err}");
}

#[test]
fn bad_policies_are_named() {
    for (text, needles) in [
        ("srpt-classes:", &["cutoff"][..]),
        ("srpt-classes:2K,1K", &["increasing"]),
        ("srpt-classes:ten", &["ten"]),
        ("fair:1K", &["fair:1K", "srpt-classes:CUTOFFS"]),
        ("srpt:1K", &["srpt:1K", "only srpt-classes"]),
        ("sjf", &["sjf", "srpt (exact with --scheduler user, else = srpt-classes)"]),
        ("ps", &["ps"]),
    ] {
        let err = text.parse::<PolicySpec>().unwrap_err();
        for n in needles {
            assert!(err.contains(n), "{text}: {err} lacks {n}");
        }
        // In a file, the key and the file are named too.
        let err = ConfigFile::parse(&format!("policy = {text:?}\n"), Path::new("p.toml")).unwrap_err().to_string();
        assert!(err.contains("policy") && err.contains("p.toml"), "{text}: {err}");
    }
    // Cutoffs twice: in the policy name and in `cutoffs`.
    let file =
        ConfigFile::parse("root = \"/srv\"\npolicy = \"srpt-classes:1K\"\ncutoffs = \"2K\"\n", Path::new("t.toml"))
            .unwrap();
    let msg = ServerConfig::from_file(file).unwrap_err().to_string();
    assert!(msg.contains("cutoffs") && msg.contains("srpt-classes:1000"), "{msg}");
    let msg = ServerConfig::from_file(
        ConfigFile::parse("root = \"/srv\"\npolicy = \"fair\"\ncutoffs = \"2K\"\n", Path::new("t.toml")).unwrap(),
    )
    .unwrap_err()
    .to_string();
    assert!(msg.contains("only srpt-classes"), "{msg}");
}

#[test]
fn at_max_connections_and_backlog_from_the_file() {
    let c = parse_ok("max-connections = 350\nat-max-connections = \"wait\"\nbacklog = 512");
    assert_eq!((c.max_connections, c.at_max_connections, c.backlog), (350, AtMaxConnections::Wait, 512));
    let d = parse_ok("");
    assert_eq!((d.at_max_connections, d.backlog), (AtMaxConnections::Refuse, 4096));
    assert_eq!("wait".parse::<AtMaxConnections>(), Ok(AtMaxConnections::Wait));
    assert_eq!(AtMaxConnections::Refuse.to_string(), "refuse");
}

#[test]
fn tls_from_flags_and_tables() {
    let text = "root = \"/srv\"\ntls-listen = \"127.0.0.1:8443\"\nredirect-https = true\n\
        [[tls]]\ncert = \"a.crt\"\nkey = \"a.key\"\nnames = [\"a.example\", \"*.a.example\"]\n";
    let file = ConfigFile::parse(text, Path::new("t.toml")).unwrap();
    let flags = ConfigFile { tls_cert: Some("d.crt".into()), tls_key: Some("d.key".into()), ..Default::default() };
    let c = ServerConfig::from_file(file.overlay(flags)).unwrap();
    let tls = c.tls.unwrap();
    assert_eq!(tls.listen, "127.0.0.1:8443".parse().unwrap());
    // The flags' certificate first, without names (the default), then the tables.
    let certs: Vec<_> = tls.certs.iter().map(|e| (e.cert.to_str().unwrap(), e.names.len())).collect();
    assert_eq!(certs, [("d.crt", 0), ("a.crt", 2)]);
    assert!(c.redirect_https);
}

#[test]
fn tls_mistakes_are_named() {
    let cases: &[(&str, &str)] = &[
        ("tls-cert = \"a.crt\"", "tls-key"),
        ("tls-cert = \"a.crt\"\ntls-key = \"a.key\"", "tls-listen"),
        ("tls-listen = \"127.0.0.1:8443\"", "tls-listen"),
        ("redirect-https = true", "redirect-https"),
        (
            "listen = \"127.0.0.1:8443\"\ntls-listen = \"127.0.0.1:8443\"\n[[tls]]\ncert = \"a\"\nkey = \"b\"",
            "tls-listen",
        ),
        ("tls-listen = \"127.0.0.1:8443\"\n[[tls]]\ncert = \"a\"\nkey = \"b\"\nnames = [\"a..b\"]", "a..b"),
    ];
    for (text, named) in cases {
        let file = ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("t.toml")).unwrap();
        let msg = ServerConfig::from_file(file).unwrap_err().to_string();
        assert!(msg.contains(named), "{text}: {msg}");
    }
    let err =
        ConfigFile::parse("root = \"/srv\"\n[[tls]]\ncert = \"a\"\nkey = \"b\"\nname = [\"x\"]\n", Path::new("t.toml"))
            .unwrap_err()
            .to_string();
    assert!(err.contains("name") && err.contains("t.toml"), "{err}");
}

/// What `--help` says a setting defaults to is what it does unset: each shown default,
/// given as its flag, configures the same server as no flag (with the flags that setting
/// needs to apply at all).
#[test]
fn every_default_shown_given_as_its_flag_configures_the_default() {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        flags: ConfigFile,
    }
    let configured = |args: &[&str]| {
        let cli = Cli::try_parse_from(["serve", "--root", "/srv"].iter().chain(args))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        format!("{:?}", ServerConfig::from_flags(cli.flags).unwrap_or_else(|e| panic!("{args:?}: {e}")))
    };
    for (key, value) in ServerConfig::defaults_shown() {
        let needs: &[&str] = match key.as_str() {
            k if k.starts_with("rrt-") => &["--policy", "srrt"],
            "write-concurrency" => &["--scheduler", "crovella", "--link-rate", "10mbit"],
            k if k.starts_with("pacer-") => &["--scheduler", "user", "--link-rate", "10mbit"],
            _ => &[],
        };
        let flag = format!("--{key}");
        let given: Vec<&str> = needs.iter().copied().chain([flag.as_str(), value.as_str()]).collect();
        assert_eq!(configured(&given), configured(needs), "{flag} {value} is not the default");
    }
}

#[test]
fn precompressed_and_cache_control_from_file_and_flags() {
    use crate::encoding::{Coding, Precompressed};
    let file = ConfigFile::parse(
        "root = \"/srv\"\nprecompressed = \"gzip\"\ncache-control = [\"/*.css=max-age=60\", \"/**=no-cache\"]\n",
        Path::new("t.toml"),
    )
    .unwrap();
    let c = ServerConfig::from_file(file.clone()).unwrap();
    assert_eq!(c.precompressed.codings(), &[Coding::Gzip]);
    let err = ConfigFile::parse("precompressed = \"gzip,deflate\"\n", Path::new("t.toml")).unwrap_err().to_string();
    assert!(err.contains("precompressed") && err.contains("\"deflate\"") && err.contains("t.toml"), "{err}");
    let mut scratch = Vec::new();
    assert_eq!(c.cache_control.value_for(b"/a.css", &mut scratch), Some(&b"max-age=60"[..]));
    assert_eq!(c.cache_control.value_for(b"/d/a.css", &mut scratch), Some(&b"no-cache"[..]));
    // The flags' list replaces the file's; `none` turns sidecars off.
    let flags = ConfigFile {
        precompressed: Some(Precompressed::NONE),
        cache_control: Some(vec!["/d/*=private".into()]),
        ..Default::default()
    };
    let c = ServerConfig::from_file(file.overlay(flags)).unwrap();
    assert!(!c.precompressed.is_on());
    assert_eq!(c.cache_control.value_for(b"/a.css", &mut scratch), None);
    assert_eq!(c.cache_control.value_for(b"/d/a.css", &mut scratch), Some(&b"private"[..]));
}

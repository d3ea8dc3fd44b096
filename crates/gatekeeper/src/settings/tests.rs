use super::*;

fn parse(text: &str) -> Result<ProxySettings, GatekeeperError> {
    ProxySettings::parse(text, Path::new("g.toml"))
}

/// The settings of a command line (the proxy's flags, as `shortfirst gatekeeper` reads them).
fn flags(args: &[&str]) -> ProxySettings {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        settings: ProxySettings,
    }
    Cli::try_parse_from(std::iter::once("gatekeeper").chain(args.iter().copied())).unwrap().settings
}

const REQUIRED: &str = "listen = \"127.0.0.1:0\"\nupstream = \"http://127.0.0.1:9\"\n";

fn write(dir: &tempfile::TempDir, text: &str) -> PathBuf {
    let path = dir.path().join("g.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn example_file_parses_with_every_key() {
    let text = include_str!("../../gatekeeper.example.toml");
    let f = ProxySettings::parse(text, Path::new("gatekeeper.example.toml")).expect("the example parses");
    f.estimator().unwrap();
    f.auto(AutoConfig::default()).unwrap();
    ProxyConfig::from_settings(&f).unwrap();
    // Every key is set in the example (commented-out keys would go stale unseen).
    let table: toml::Table = toml::from_str(text).unwrap();
    for key in ProxySettings::KEYS.iter().filter(|&&k| k != "config") {
        let key = key.replace('_', "-");
        assert!(table.contains_key(&key), "example lacks {key}");
    }
    assert_eq!(f.keys_set().len(), ProxySettings::KEYS.len() - 1, "every key but config is set");
    for (section, keys) in [
        ("estimator", &["alpha", "cold-cost", "max-sample", "basis", "resample-after"][..]),
        ("auto", &["initial", "min", "max", "interval", "min-samples", "high-inflation", "low-inflation"]),
    ] {
        for key in keys {
            assert!(table[section].as_table().unwrap().contains_key(*key), "example lacks [{section}] {key}");
        }
    }
    assert_eq!((f.max_queue_len, f.rewrite_host), (Some(10_000), Some(false)));
}

#[test]
fn snake_case_keys_are_still_accepted() {
    let f = parse("max_queue_len = 5\nretry_after_s = 2\nmax-types = 9\n[estimator]\ncold_cost = \"4ms\"\n").unwrap();
    assert_eq!((f.max_queue_len, f.retry_after, f.max_types), (Some(5), Some(2), Some(9)));
    assert_eq!(f.estimator().unwrap().cold_cost_us, 4_000);
    assert!(parse("max-queue-lenn = 5").is_err());
}

#[test]
fn a_misspelt_key_is_an_error_naming_the_key_and_the_file() {
    for (text, key) in [
        ("max-queue-lenn = 5", "max-queue-lenn"),
        ("capacty = \"1\"", "capacty"),
        ("[estimator]\ncold-cots = \"1ms\"", "cold-cots"),
        ("[auto]\nintervall = \"1s\"", "intervall"),
        ("config = \"other.toml\"", "config"),
    ] {
        let msg = parse(text).unwrap_err().to_string();
        assert!(msg.contains(key) && msg.contains("g.toml"), "{text}: {msg}");
    }
}

#[test]
fn estimator_and_auto_sections() {
    let f = parse(
        "capacity = \"auto\"\npolicy = \"sjf-aging:2\"\nclassify = [\"a=^GET /a\"]\n[estimator]\nalpha = 0.2\ncold-cost = \"5ms\"\nbasis = \"share\"\n[auto]\ninitial = \"20ms\"\n",
    )
    .unwrap();
    assert_eq!(f.estimator().unwrap().cold_cost_us, 5_000);
    assert_eq!(f.estimator().unwrap().basis, shortfirst_core::admission::Basis::Share);
    let bad = parse("[estimator]\nbasis = \"demand\"\n").unwrap();
    assert!(bad.estimator().unwrap_err().to_string().contains("estimator.basis"));
    assert_eq!(f.auto(AutoConfig::default()).unwrap().initial_capacity_us, 20_000);
    // Re-sampling: default 5 s, a duration (bare numbers are seconds), or off.
    let resample = |v: &str| parse(&format!("[estimator]\nresample-after = \"{v}\"\n")).unwrap().estimator();
    assert_eq!(f.estimator().unwrap().resample_after_us, Some(5_000_000));
    assert_eq!(resample("2").unwrap().resample_after_us, Some(2_000_000));
    assert_eq!(resample("750ms").unwrap().resample_after_us, Some(750_000));
    assert_eq!(resample("1m30s").unwrap().resample_after_us, Some(90_000_000));
    assert_eq!(resample("off").unwrap().resample_after_us, None);
    for bad in ["0", "soon"] {
        assert!(resample(bad).unwrap_err().to_string().contains("estimator.resample-after"), "{bad}");
    }
}

#[test]
fn flags_win_over_the_file_and_the_file_over_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, &format!("{REQUIRED}max-queue-len = 7\nmax-queue-wait = \"2m\"\nmax-connections = 9\n"));
    let path = path.to_str().unwrap();
    let c = ProxyConfig::from_flags(flags(&["--config", path, "--max-queue-len", "8"])).unwrap();
    assert_eq!((c.max_queue_len, c.max_queue_wait, c.max_connections), (8, Some(Duration::from_secs(120)), 9));
    let d = ProxyConfig::new(c.listen, c.upstream.clone());
    assert_eq!((c.upstream_timeout, c.retry_after_s), (d.upstream_timeout, d.retry_after_s));
    let c = ProxyConfig::from_flags(flags(&["--config", path, "--max-queue-wait", "1m30s"])).unwrap();
    assert_eq!(c.max_queue_wait, Some(Duration::from_secs(90)));
    // Classification rules from the flags replace the file's, as a whole.
    std::fs::write(path, format!("{REQUIRED}classify = [\"a=^GET /a\", \"route\"]\n")).unwrap();
    let c = ProxyConfig::from_flags(flags(&["--config", path, "--classify", "header:X-Type"])).unwrap();
    assert_eq!(c.rules.len(), 1);
}

#[test]
fn a_bad_value_names_the_key_and_the_file_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    for (text, key) in [
        ("max-queue-wait = \"soon\"", "max-queue-wait"),
        ("max-queue-len = 0", "max-queue-len"),
        ("charge-at = \"exit\"", "charge-at"),
        ("upstream-timeout = \"0s\"", "upstream-timeout"),
        ("overdue-share = 2.0", "overdue-share"),
        ("policy = \"lifo\"", "lifo"),
    ] {
        let path = write(&dir, &format!("{REQUIRED}{text}\n"));
        let err = ProxyConfig::from_flags(flags(&["--config", path.to_str().unwrap()])).unwrap_err();
        assert!(matches!(err, GatekeeperError::InFile { .. }), "{text}: {err:?}");
        let msg = err.to_string();
        assert!(msg.contains(key) && msg.contains("g.toml"), "{text}: {msg}");
    }
    // The same fault given by a flag is the flag's.
    let path = write(&dir, REQUIRED);
    let err = ProxyConfig::from_flags(flags(&["--config", path.to_str().unwrap(), "--max-queue-len", "0"]));
    let msg = err.unwrap_err().to_string();
    assert!(msg.contains("max-queue-len") && !msg.contains("g.toml"), "{msg}");
    let msg = ProxyConfig::from_flags(flags(&["--upstream", "http://127.0.0.1:9"])).unwrap_err().to_string();
    assert!(msg.contains("--listen"), "{msg}");
}

//! Sequencing tests with a scripted runner: which commands run, in which
//! order, and what is left when one fails. The commands themselves are tested
//! in `htb`, the parsing in `stats`; the real thing runs in the lab's
//! namespace tests.

use super::*;

const LINK_1500: &str =
    r#"[{"ifindex":6,"ifname":"sfx0","mtu":1500,"qdisc":"noqueue","gso_max_size":65536,"gso_max_segs":1}]"#;
const QDISC_DEFAULT: &str = r#"[{"kind":"noqueue","handle":"0:","root":true,"refcnt":2,"options":{}}]"#;
const QDISC_OURS: &str = r#"[{"kind":"htb","handle":"1:","root":true,"refcnt":3,"options":{"r2q":10,"default":"0xa","direct_packets_stat":0,"direct_qlen":1000}}]"#;
const QDISC_OTHER_HTB: &str = r#"[{"kind":"htb","handle":"1:","root":true,"options":{"r2q":10,"default":"0x20"}}]"#;
const QDISC_TBF: &str = r#"[{"kind":"tbf","handle":"8001:","root":true,"options":{}}]"#;
const ETHTOOL_OFF: &str = "Features for sfx0:\ntcp-segmentation-offload: off\n\ttx-tcp-segmentation: off\ngeneric-segmentation-offload: off\ngeneric-receive-offload: off\n";
const ETHTOOL_GSO_FIXED_ON: &str = "Features for sfx0:\ntcp-segmentation-offload: off\ngeneric-segmentation-offload: on [fixed]\ngeneric-receive-offload: off\n";

/// Answers commands by the first rule whose text is contained in the joined
/// command line; unmatched commands succeed with empty output.
struct Scripted {
    rules: Vec<(String, CommandOutput)>,
    calls: Vec<String>,
    net_admin: Option<bool>,
}

fn ok(stdout: &str) -> CommandOutput {
    CommandOutput { success: true, status: "exit status: 0".into(), stdout: stdout.into(), stderr: String::new() }
}

fn fail(stderr: &str) -> CommandOutput {
    CommandOutput { success: false, status: "exit status: 2".into(), stdout: String::new(), stderr: stderr.into() }
}

impl Scripted {
    fn new(rules: &[(&str, CommandOutput)]) -> Scripted {
        Scripted {
            rules: rules.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            calls: vec![],
            net_admin: None,
        }
    }

    fn mutating_calls(&self) -> Vec<&str> {
        self.calls
            .iter()
            .map(String::as_str)
            .filter(|c| c.contains(" add ") || c.contains(" del ") || c.starts_with("ethtool -K"))
            .collect()
    }
}

impl Runner for Scripted {
    fn run(&mut self, argv: &[String]) -> std::io::Result<CommandOutput> {
        let line = argv.join(" ");
        self.calls.push(line.clone());
        if let Some((_, out)) = self.rules.iter().find(|(k, _)| line.contains(k.as_str())) {
            if out.status == "ENOENT" {
                return Err(std::io::Error::from(std::io::ErrorKind::NotFound));
            }
            return Ok(out.clone());
        }
        Ok(ok(""))
    }

    fn has_net_admin(&self) -> Option<bool> {
        self.net_admin
    }
}

fn base_rules(qdisc: &str) -> Vec<(&'static str, CommandOutput)> {
    vec![("ip -d -j link show", ok(LINK_1500)), ("tc -j qdisc show", ok(qdisc)), ("ethtool -k", ok(ETHTOOL_OFF))]
}

fn run_setup(runner: &mut Scripted) -> Result<SetupReport, UplinkError> {
    setup(runner, "sfx0", &SetupOptions::new(10_000_000))
}

#[test]
fn setup_on_a_fresh_device() {
    let mut r = Scripted::new(&base_rules(QDISC_DEFAULT));
    let report = run_setup(&mut r).unwrap();
    assert!(!report.replaced);
    assert!(report.offloads_off);
    assert_eq!(report.params.quantum_bytes, 1514);
    let mutating = r.mutating_calls();
    assert_eq!(mutating[0], "ethtool -K sfx0 tso off gso off gro off");
    assert!(r.calls.iter().any(|c| c == "ip link set dev sfx0 gso_max_segs 1"));
    assert_eq!(mutating[1], "tc qdisc add dev sfx0 root handle 1: htb default a");
    // Band 0 and the default cutoffs' data bands, each a class and a queue; the last band is
    // class minor 10 + bands (hex).
    let bands = shortfirst_core::bands::DEFAULT_DATA_BANDS;
    assert_eq!(mutating.len(), 2 + 1 + (1 + bands) * 2, "offloads, qdisc, root class, band classes and queues");
    let last = format!("tc qdisc add dev sfx0 parent 1:{:x} pfifo limit 10000", 10 + bands);
    assert_eq!(mutating.last().copied(), Some(last.as_str()));
}

#[test]
fn setup_replaces_its_own_tree() {
    let mut r = Scripted::new(&base_rules(QDISC_OURS));
    let report = run_setup(&mut r).unwrap();
    assert!(report.replaced);
    let mutating = r.mutating_calls();
    assert_eq!(mutating[1], "tc qdisc del dev sfx0 root");
    assert_eq!(mutating[2], "tc qdisc add dev sfx0 root handle 1: htb default a");
}

#[test]
fn setup_refuses_foreign_qdiscs_without_touching_them() {
    for qdisc in [QDISC_TBF, QDISC_OTHER_HTB] {
        let mut r = Scripted::new(&base_rules(qdisc));
        let err = run_setup(&mut r).unwrap_err();
        assert!(matches!(err, UplinkError::ForeignQdisc { .. }), "{err}");
        assert!(err.to_string().contains("tc qdisc del dev sfx0 root"), "tells how to clear it: {err}");
        assert!(r.mutating_calls().is_empty(), "{:?}", r.calls);
    }
}

#[test]
fn a_failed_class_rolls_the_tree_back() {
    let mut rules = base_rules(QDISC_DEFAULT);
    rules.insert(0, ("classid 1:d ", fail("Error: Invalid argument.")));
    rules.insert(0, ("parent 1:b pfifo", ok("")));
    let mut r = Scripted::new(&rules);
    let err = run_setup(&mut r).unwrap_err();
    assert!(matches!(err, UplinkError::RolledBack { .. }), "{err}");
    assert!(err.to_string().contains("classid 1:d"), "names the failed command: {err}");
    assert!(err.to_string().contains("Invalid argument"), "{err}");
    assert_eq!(r.mutating_calls().last(), Some(&"tc qdisc del dev sfx0 root"));
    assert!(!r.calls.iter().any(|c| c.contains("classid 1:e")), "stops at the first failure");
}

#[test]
fn a_failed_rollback_is_reported() {
    let mut rules = base_rules(QDISC_DEFAULT);
    rules.insert(0, ("classid 1:1 ", fail("Error: Invalid argument.")));
    rules.insert(0, ("qdisc del", fail("Error: something odd.")));
    let mut r = Scripted::new(&rules);
    let err = run_setup(&mut r).unwrap_err();
    assert!(matches!(err, UplinkError::RollbackFailed { .. }), "{err}");
    assert!(err.to_string().contains("tc qdisc show dev sfx0"), "{err}");
}

#[test]
fn a_failed_root_qdisc_needs_no_rollback() {
    let mut rules = base_rules(QDISC_DEFAULT);
    rules.insert(0, ("qdisc add", fail("Error: Specified qdisc kind is unknown.")));
    let mut r = Scripted::new(&rules);
    let err = run_setup(&mut r).unwrap_err();
    assert!(matches!(err, UplinkError::Command { .. }), "{err}");
    assert!(!r.calls.iter().any(|c| c.contains("qdisc del")));
}

#[test]
fn errors_are_named() {
    // Missing device.
    let mut r = Scripted::new(&[("ip -d -j link show", fail("Device \"nope0\" does not exist."))]);
    let err = setup(&mut r, "nope0", &SetupOptions::new(10_000_000)).unwrap_err();
    assert!(matches!(err, UplinkError::NoSuchDevice { ref dev } if dev == "nope0"), "{err}");
    // No CAP_NET_ADMIN, known up front: nothing runs that changes anything.
    let mut r = Scripted::new(&base_rules(QDISC_DEFAULT));
    r.net_admin = Some(false);
    let err = run_setup(&mut r).unwrap_err();
    assert!(matches!(err, UplinkError::PermissionDenied { .. }), "{err}");
    assert!(err.to_string().contains("CAP_NET_ADMIN"));
    assert!(r.mutating_calls().is_empty());
    // No CAP_NET_ADMIN, found out from tc.
    let mut rules = base_rules(QDISC_DEFAULT);
    rules.insert(0, ("ethtool -K", fail("Cannot set device feature settings: Operation not permitted")));
    let err = run_setup(&mut Scripted::new(&rules)).unwrap_err();
    assert!(matches!(err, UplinkError::PermissionDenied { .. }), "{err}");
    // ethtool missing.
    let mut rules = base_rules(QDISC_DEFAULT);
    rules.insert(0, ("ethtool -K", CommandOutput { status: "ENOENT".into(), ..CommandOutput::default() }));
    let err = run_setup(&mut Scripted::new(&rules)).unwrap_err();
    assert!(err.to_string().contains("--offloads keep"), "{err}");
    // Offloads that cannot be turned off.
    let mut rules = base_rules(QDISC_DEFAULT);
    rules.insert(0, ("ethtool -k", ok(ETHTOOL_GSO_FIXED_ON)));
    let mut r = Scripted::new(&rules);
    let err = run_setup(&mut r).unwrap_err();
    assert!(
        matches!(err, UplinkError::OffloadsStillOn { ref still_on, .. } if still_on == "generic-segmentation-offload")
    );
    assert!(!r.calls.iter().any(|c| c.starts_with("tc qdisc add")), "no qdisc installed");
    // Bad device name: nothing runs at all.
    let mut r = Scripted::new(&[]);
    assert!(matches!(setup(&mut r, "bad/name", &SetupOptions::new(10_000_000)), Err(UplinkError::DeviceName { .. })));
    assert!(r.calls.is_empty());
}

#[test]
fn offloads_keep_skips_ethtool() {
    let mut r = Scripted::new(&base_rules(QDISC_DEFAULT));
    let options =
        SetupOptions { data_bands: 3, offloads: Offloads::Keep, queue_packets: 7, ..SetupOptions::new(10_000_000) };
    let report = setup(&mut r, "sfx0", &options).unwrap();
    assert!(!report.offloads_off);
    assert_eq!(report.spec.queue_packets, 7);
    assert!(!r.calls.iter().any(|c| c.starts_with("ethtool")));
    assert_eq!(r.mutating_calls().len(), 1 + 1 + 4 * 2);
}

#[test]
fn teardown_is_idempotent_and_refuses_foreign_qdiscs() {
    let mut r = Scripted::new(&base_rules(QDISC_OURS));
    assert_eq!(teardown(&mut r, "sfx0", BandMap::default()).unwrap(), TeardownOutcome::Removed);
    assert_eq!(r.mutating_calls(), vec!["tc qdisc del dev sfx0 root"]);
    let mut r = Scripted::new(&base_rules(QDISC_DEFAULT));
    assert_eq!(teardown(&mut r, "sfx0", BandMap::default()).unwrap(), TeardownOutcome::NothingInstalled);
    assert!(r.mutating_calls().is_empty());
    let mut r = Scripted::new(&base_rules(QDISC_TBF));
    assert!(matches!(teardown(&mut r, "sfx0", BandMap::default()), Err(UplinkError::ForeignQdisc { .. })));
    assert!(r.mutating_calls().is_empty());
}

#[test]
fn show_labels_bands() {
    let text = include_str!("../tests/data/tc-6.1-class-show.txt");
    let mut rules = base_rules(QDISC_OURS);
    rules.push(("tc -s -j class show", ok(text)));
    let mut r = Scripted::new(&rules);
    let s = show(&mut r, "sfx0", BandMap::default()).unwrap();
    assert_eq!(s.rate_bits_per_s, Some(10_000_000));
    assert_eq!(s.bands.iter().map(|b| b.band).collect::<Vec<_>>(), (0..=6).collect::<Vec<u8>>());
    assert_eq!(s.bands[0].class, "1:a");
    assert_eq!(s.bands[0].so_priority, 0x1000a);
    assert_eq!(s.bands.iter().map(|b| b.counters.bytes).sum::<u64>(), s.total.bytes);
    // JSON for the lab: flat counters per band.
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["bands"][6]["class"], "1:10");
    assert!(json["bands"][6]["bytes"].as_u64().unwrap() > 0);
    assert!(json["total"]["backlog_packets"].is_u64());
}

#[test]
fn show_without_a_tree() {
    let mut r = Scripted::new(&base_rules(QDISC_DEFAULT));
    let err = show(&mut r, "sfx0", BandMap::default()).unwrap_err();
    assert!(matches!(err, UplinkError::NotInstalled { .. }), "{err}");
    assert!(err.to_string().contains("`noqueue 0:`"), "{err}");
}

#[test]
fn root_qdisc_parsing() {
    let table: &[(&str, Result<RootQdisc, &str>)] = &[
        (QDISC_DEFAULT, Ok(RootQdisc { kind: "noqueue".into(), handle: "0:".into(), htb_default: None })),
        (QDISC_OURS, Ok(RootQdisc { kind: "htb".into(), handle: "1:".into(), htb_default: Some(10) })),
        (
            r#"[{"kind":"pfifo","handle":"8002:","parent":"1:a","options":{}},{"kind":"htb","handle":"1:","root":true,"options":{"default":10}}]"#,
            Ok(RootQdisc { kind: "htb".into(), handle: "1:".into(), htb_default: Some(10) }),
        ),
        ("[]", Err("no root qdisc listed")),
        ("garbage", Err("invalid JSON")),
    ];
    for (json, want) in table {
        match (parse_root_qdisc(json), want) {
            (Ok(got), Ok(want)) => assert_eq!(&got, want, "{json}"),
            (Err(got), Err(want)) => assert!(got.contains(want), "{json}: {got}"),
            (got, want) => panic!("{json}: got {got:?}, want {want:?}"),
        }
    }
}

use super::*;

fn farm(hosts: usize, cutoffs: &[u64]) -> Farm {
    Farm {
        listen: "127.0.0.1:8080".into(),
        hosts: (0..hosts).map(|i| format!("10.0.0.{}:80", i + 1)).collect(),
        cutoffs: cutoffs.to_vec(),
        map_path: "/etc/haproxy/sizes.map".into(),
        stats_socket: None,
    }
}

fn entry(path: &str, size_bytes: u64) -> Entry {
    Entry { url_path: path.into(), size_bytes }
}

#[test]
fn map_sends_each_path_by_its_size() {
    let entries = [entry("/", 100), entry("/a.bin", 1000), entry("/b.bin", 1001), entry("/c%20d.bin", 5_000_000)];
    // (cutoffs, backends of the entries in order)
    let cases: [(&[u64], [&str; 4]); 3] = [
        (&[], ["host0", "host0", "host0", "host0"]),
        (&[1000], ["host0", "host0", "host1", "host1"]),
        (&[100, 1000, 1_000_000], ["host0", "host1", "host2", "host3"]),
    ];
    for (cutoffs, want) in cases {
        let text = map_text(&farm(cutoffs.len() + 1, cutoffs), &entries).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        let got: Vec<&str> = lines.iter().map(|l| l.split(' ').nth(1).unwrap()).collect();
        assert_eq!(got, want, "cutoffs {cutoffs:?}");
        let keys: Vec<&str> = lines.iter().map(|l| l.split(' ').next().unwrap()).collect();
        assert_eq!(keys, ["/", "/a.bin", "/b.bin", "/c%20d.bin"]);
        assert_eq!(text.lines().filter(|l| l.starts_with("# host")).count(), cutoffs.len() + 1);
    }
}

#[test]
fn configs_differ_only_in_dispatch() {
    let f = farm(2, &[1000]);
    let sita = config_text(&f, Balance::Sita).unwrap();
    assert!(sita.contains("    use_backend %[path,map(/etc/haproxy/sizes.map,any)]\n"), "{sita}");
    assert!(sita.contains("backend host0\n    server host0 10.0.0.1:80\n"));
    assert!(sita.contains("backend host1\n    server host1 10.0.0.2:80\n"));
    assert!(sita.contains("backend any\n    balance leastconn\n"));
    let rr = config_text(&f, Balance::RoundRobin).unwrap();
    assert!(rr
        .contains("backend any\n    balance roundrobin\n    server host0 10.0.0.1:80\n    server host1 10.0.0.2:80\n"));
    assert!(!rr.contains("map(") && !rr.contains("backend host0"));
    let lc = config_text(&f, Balance::LeastConn).unwrap();
    assert!(lc.contains("balance leastconn") && !lc.contains("map("));
    assert!(!sita.contains("stats socket"));
    let with_socket = Farm { stats_socket: Some("/run/sf/admin.sock".into()), ..f };
    assert!(config_text(&with_socket, Balance::Sita)
        .unwrap()
        .contains("stats socket /run/sf/admin.sock mode 600 level admin\n"));
}

/// A configuration and a test of the error it must give.
type BadCase = (Farm, fn(&ConfigError) -> bool);

#[test]
fn bad_fields_are_refused() {
    let good = farm(2, &[1000]);
    let cases: [BadCase; 6] = [
        (Farm { hosts: vec!["10.0.0.1:80\n    server evil 1.2.3.4:80".into(), "a:1".into()], ..good.clone() }, |e| {
            matches!(e, ConfigError::BadAddress(_))
        }),
        (Farm { hosts: vec!["10.0.0.1".into(), "a:1".into()], ..good.clone() }, |e| {
            matches!(e, ConfigError::BadAddress(_))
        }),
        (Farm { hosts: vec!["a:0".into(), "a:1".into()], ..good.clone() }, |e| matches!(e, ConfigError::BadAddress(_))),
        (Farm { listen: "8080".into(), ..good.clone() }, |e| matches!(e, ConfigError::BadListen(_))),
        (Farm { map_path: "sizes.map".into(), ..good.clone() }, |e| matches!(e, ConfigError::BadPath(_))),
        (Farm { cutoffs: vec![], ..good.clone() }, |e| matches!(e, ConfigError::CutoffCount { cutoffs: 0, hosts: 2 })),
    ];
    for (f, is_want) in cases {
        let e = config_text(&f, Balance::Sita).unwrap_err();
        assert!(is_want(&e), "{f:?}: {e}");
        assert_eq!(map_text(&f, &[]).unwrap_err(), e);
    }
    assert!(config_text(&Farm { listen: ":8080".into(), ..good }, Balance::LeastConn).is_ok());
}

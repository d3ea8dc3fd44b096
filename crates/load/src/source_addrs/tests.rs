use super::*;
use std::net::{Ipv4Addr, Ipv6Addr};

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

#[test]
fn list_specs() {
    let cases: &[(&str, Vec<IpAddr>)] = &[
        ("10.10.1.2", vec![v4(10, 10, 1, 2)]),
        ("10.10.1.2,10.10.2.2", vec![v4(10, 10, 1, 2), v4(10, 10, 2, 2)]),
        (" 10.10.1.2 , 10.10.2.2 ", vec![v4(10, 10, 1, 2), v4(10, 10, 2, 2)]),
        ("::1,[fd00::2]", vec![IpAddr::V6(Ipv6Addr::LOCALHOST), "fd00::2".parse().unwrap()]),
        ("127.0.0.2,127.0.0.2", vec![v4(127, 0, 0, 2), v4(127, 0, 0, 2)]),
    ];
    for (spec, want) in cases {
        assert_eq!(SourceAddrs::parse(spec).unwrap(), SourceAddrs::RoundRobin(want.clone()), "{spec}");
    }
}

#[test]
fn bad_list_specs_name_the_item() {
    let cases: &[(&str, &str)] = &[
        ("", "address 1 is empty"),
        ("10.0.0.1,", "address 2 is empty"),
        ("10.0.0.1,,10.0.0.2", "address 2 is empty"),
        ("10.0.0.300", "`10.0.0.300` (address 1) is not an IP address"),
        ("10.0.0.1,host.example", "`host.example` (address 2)"),
        ("10.0.0.0/24", "`10.0.0.0/24` (address 1)"),
        ("10.0.0.1:80", "`10.0.0.1:80`"),
        ("file:", "file: needs a path"),
    ];
    for (spec, want) in cases {
        let e = SourceAddrs::parse(spec).unwrap_err().to_string();
        assert!(e.starts_with("--source-addrs"), "{spec}: {e}");
        assert!(e.contains(want), "{spec}: {e}");
    }
}

#[test]
fn round_robin_by_client_id() {
    let s = SourceAddrs::parse("10.10.1.2,10.10.2.2,10.10.3.2").unwrap();
    let got: Vec<IpAddr> = (0..7).map(|c| s.for_client(c).unwrap().unwrap()).collect();
    let a = [v4(10, 10, 1, 2), v4(10, 10, 2, 2), v4(10, 10, 3, 2)];
    assert_eq!(got, vec![a[0], a[1], a[2], a[0], a[1], a[2], a[0]]);
    assert_eq!(s.for_client(u32::MAX).unwrap().unwrap(), a[u32::MAX as usize % 3]);
    assert_eq!(SourceAddrs::Any.for_client(5).unwrap(), None);
}

#[test]
fn file_rows_header_comments_and_default() {
    let p = Path::new("groups.csv");
    let text = "# group a\nclient,addr\n0,10.10.1.2\n\n 3 , 10.10.2.2\n*,10.10.9.2\n";
    let s = SourceAddrs::parse_file(p, text).unwrap();
    assert_eq!(s.for_client(0).unwrap(), Some(v4(10, 10, 1, 2)));
    assert_eq!(s.for_client(3).unwrap(), Some(v4(10, 10, 2, 2)));
    assert_eq!(s.for_client(1).unwrap(), Some(v4(10, 10, 9, 2)));
    let d = s.distinct();
    assert_eq!(d.len(), 3);
    assert_eq!(d[0], (v4(10, 10, 1, 2), "groups.csv:3".to_string()));

    // Without a header, and without a default: unlisted clients are an error
    // naming the client and the file.
    let s = SourceAddrs::parse_file(p, "7,::1\n").unwrap();
    assert_eq!(s.for_client(7).unwrap(), Some(IpAddr::V6(Ipv6Addr::LOCALHOST)));
    let e = s.for_client(8).unwrap_err().to_string();
    assert!(e.contains("groups.csv") && e.contains("client 8") && e.contains('*'), "{e}");

    // Only a default row: every client from it.
    let s = SourceAddrs::parse_file(p, "*,127.0.0.5").unwrap();
    assert_eq!(s.for_client(123).unwrap(), Some(v4(127, 0, 0, 5)));
}

#[test]
fn bad_files_name_the_line() {
    let p = Path::new("g.csv");
    let cases: &[(&str, &str)] = &[
        ("0,10.0.0.1\n1\n", "g.csv:2: expected `client,addr`"),
        ("0,10.0.0.1,x\n", "g.csv:1: expected `client,addr`"),
        ("client,address\n0,10.0.0.1\n", "g.csv:1: header must be `client,addr`"),
        ("0,10.0.0.1\n-1,10.0.0.2\n", "g.csv:2: client `-1` is not a client id"),
        ("0,10.0.0.1\nclient,addr\n", "g.csv:2: client `client`"),
        ("4294967296,10.0.0.1\n", "g.csv:1: client `4294967296`"),
        ("# c\n0,10.0.0.1\n0,10.0.0.2\n", "g.csv:3: client 0 is listed twice"),
        ("*,10.0.0.1\n*,10.0.0.2\n", "g.csv:2: a second `*` row"),
        ("0,10.0.0.x\n", "g.csv:1: `10.0.0.x` is not an IP address"),
        ("", "no `client,addr` rows"),
        ("client,addr\n# nothing\n", "no `client,addr` rows"),
    ];
    for (text, want) in cases {
        let e = SourceAddrs::parse_file(p, text).unwrap_err().to_string();
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

#[test]
fn file_spec_reads_the_file_and_reports_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("g.csv");
    std::fs::write(&f, "client,addr\n0,127.0.0.2\n1,127.0.0.3\n").unwrap();
    let s = SourceAddrs::parse(&format!("file:{}", f.display())).unwrap();
    assert_eq!(s.for_client(1).unwrap(), Some(v4(127, 0, 0, 3)));
    let missing = dir.path().join("none.csv");
    let e = SourceAddrs::parse(&format!("file:{}", missing.display())).unwrap_err().to_string();
    assert!(e.contains("none.csv"), "{e}");
}

#[test]
fn check_refuses_other_family_and_absent_addresses() {
    let target: SocketAddr = "127.0.0.1:80".parse().unwrap();
    assert!(SourceAddrs::parse("127.0.0.2,127.0.0.3").unwrap().check(target).is_ok());
    let e = SourceAddrs::parse("127.0.0.2,::1").unwrap().check(target).unwrap_err().to_string();
    assert!(e.contains("::1 (address 2 of the list) is IPv6"), "{e}");
    // TEST-NET-3: never configured on a test host.
    let e = SourceAddrs::parse("127.0.0.2,203.0.113.77").unwrap().check(target).unwrap_err().to_string();
    assert!(e.contains("cannot bind 203.0.113.77 (address 2 of the list)"), "{e}");
    assert!(e.contains("not on this host"), "{e}");
}

//! `--source-addrs` end to end on loopback: every 127.x address is local on
//! Linux, so the generator binds 127.0.0.2, 127.0.0.3, … against a server on
//! 127.0.0.1 that records each request's peer address; each client id's
//! requests must come from its address, over fresh and kept-alive
//! connections, in every model. An address not on the host is one error
//! before anything is sent; a client without an address stops the run before
//! its request is sent.

mod support;

use shortfirst_load::dist::TimeDist;
use shortfirst_load::record::{read_records, RequestRecord};
use shortfirst_load::run::{run_with, Config, Model};
use shortfirst_load::source_addrs::SourceAddrs;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;

/// What the server saw: the peer address of each request path, and connections.
#[derive(Default)]
struct Seen {
    connections: AtomicU64,
    peer_by_path: Mutex<HashMap<String, Vec<IpAddr>>>,
}

/// An HTTP/1.1 server on `ip` answering every GET with 10 bytes, keep-alive
/// unless asked to close.
fn start_server(ip: &str) -> Option<(SocketAddr, Arc<Seen>)> {
    let listener = std::net::TcpListener::bind((ip, 0)).ok()?;
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let s2 = seen.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let (sock, peer) = l.accept().await.unwrap();
                s2.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(serve_conn(sock, peer.ip(), s2.clone()));
            }
        });
    });
    Some((addr, seen))
}

async fn serve_conn(mut sock: tokio::net::TcpStream, peer: IpAddr, seen: Arc<Seen>) {
    let mut buf = Vec::new();
    loop {
        let Some(head) = support::read_head(&mut sock, &mut buf).await else { return };
        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
        seen.peer_by_path.lock().unwrap().entry(path).or_default().push(peer);
        let close = head.to_ascii_lowercase().contains("connection: close");
        let conn = if close { "Connection: close\r\n" } else { "" };
        let resp = format!("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n{conn}\r\n0123456789");
        if sock.write_all(resp.as_bytes()).await.is_err() || close {
            return;
        }
    }
}

fn config(addr: SocketAddr, trace: &Path, out: &Path, model: Model, persistent: Option<u32>) -> Config {
    Config { model, persistent, ..support::open_config(addr, trace, out, 3) }
}

/// A trace of `n` requests with unique paths, 2 ms apart (so that a
/// client's previous connection is usually idle again by its next request),
/// with client `client(i)` if given.
fn write_trace(dir: &Path, n: usize, client: Option<&dyn Fn(usize) -> u32>) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join("t.csv");
    let mut s =
        String::from(if client.is_some() { "time_s,path,size_bytes,client\n" } else { "time_s,path,size_bytes\n" });
    for i in 0..n {
        let t = i as f64 * 0.002;
        match client {
            Some(f) => s.push_str(&format!("{t},/r/{i},10,{}\n", f(i))),
            None => s.push_str(&format!("{t},/r/{i},10\n")),
        }
    }
    std::fs::write(&p, s).unwrap();
    p
}

fn rows(out: &Path) -> Vec<RequestRecord> {
    read_records(&out.join("requests.csv")).unwrap().collect::<Result<_, _>>().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Every row succeeded and the server saw its path exactly once, from the
/// address `want(client)`; returns the clients seen.
fn check_sources(out: &Path, seen: &Seen, want: &dyn Fn(u32) -> IpAddr) -> Vec<u32> {
    let rows = rows(out);
    assert!(!rows.is_empty());
    let peers = seen.peer_by_path.lock().unwrap();
    let mut clients = Vec::new();
    for r in &rows {
        assert_eq!(r.status, Some(200), "{r:?}");
        let got = peers.get(&r.path).unwrap_or_else(|| panic!("server never saw {}", r.path));
        assert_eq!(got, &vec![want(r.client)], "request {} of client {}", r.path, r.client);
        clients.push(r.client);
    }
    clients.sort_unstable();
    clients.dedup();
    clients
}

#[test]
fn each_client_connects_from_its_address_in_every_model() {
    let list = |c: u32| if c % 2 == 0 { ip("127.0.0.2") } else { ip("127.0.0.3") };
    let file_map = |c: u32| match c {
        0 => ip("127.0.0.3"),
        1 => ip("127.0.0.2"),
        _ => ip("127.0.0.4"),
    };
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("groups.csv");
    std::fs::write(&map, "client,addr\n# group b first\n0,127.0.0.3\n1,127.0.0.2\n*,127.0.0.4\n").unwrap();
    let file_spec = format!("file:{}", map.display());
    let by_trace = |i: usize| (i % 5) as u32;
    type Case<'a> = (&'a str, &'a str, Model, Option<u32>, bool, &'a dyn Fn(u32) -> IpAddr, usize);
    let cases: Vec<Case> = vec![
        // name, spec, model, keep-alive, trace has clients, expected address, clients
        ("open-list", "127.0.0.2,127.0.0.3", Model::Open, None, true, &list, 5),
        ("open-list-keepalive", "127.0.0.2, 127.0.0.3", Model::Open, Some(8), true, &list, 5),
        ("open-file-round-robin-clients", &file_spec, Model::Open, Some(8), false, &file_map, 3),
        ("partly-open-file", &file_spec, Model::PartlyOpen { k: 3 }, Some(3), true, &file_map, 5),
        (
            "closed-list",
            "127.0.0.2,127.0.0.3",
            Model::Closed { users: 3, think: TimeDist::Const(0.0) },
            Some(4),
            true,
            &list,
            3,
        ),
    ];
    for (name, spec, model, persistent, has_client, want, n_clients) in cases {
        let (addr, seen) = start_server("127.0.0.1").unwrap();
        let trace = write_trace(&dir.path().join(name), 60, has_client.then_some(&by_trace as &dyn Fn(usize) -> u32));
        let out = dir.path().join(name).join("out");
        let cfg = config(addr, &trace, &out, model, persistent);
        let s = run_with(cfg, SourceAddrs::parse(spec).unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.requests, 60, "{name}");
        assert_eq!(s.ok, 60, "{name}");
        let clients = check_sources(&out, &seen, want);
        assert_eq!(clients.len(), n_clients, "{name}: clients {clients:?}");
        let conns = seen.connections.load(Ordering::Relaxed);
        if persistent.is_some() {
            // Kept-alive connections were reused (and still every request
            // came from its client's address).
            assert!(conns < 60, "{name}: {conns} connections for 60 requests");
        } else {
            assert_eq!(conns, 60, "{name}");
        }
    }
}

#[test]
fn address_not_on_this_host_is_one_error_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, seen) = start_server("127.0.0.1").unwrap();
    let trace = write_trace(dir.path(), 10, None);
    let out = dir.path().join("out");
    // 203.0.113.0/24 (TEST-NET-3) is never configured on a test host.
    let spec = SourceAddrs::parse("127.0.0.2,203.0.113.77").unwrap();
    let e = run_with(config(addr, &trace, &out, Model::Open, None), spec).unwrap_err().to_string();
    assert!(e.contains("--source-addrs: cannot bind 203.0.113.77 (address 2 of the list)"), "{e}");
    assert!(e.contains("not on this host"), "{e}");
    assert_eq!(seen.connections.load(Ordering::Relaxed), 0);
    assert!(!out.exists(), "outputs written before the check");

    // The same from a file names the file and line.
    let map = dir.path().join("g.csv");
    std::fs::write(&map, "0,127.0.0.2\n1,203.0.113.78\n").unwrap();
    let spec = SourceAddrs::parse(&format!("file:{}", map.display())).unwrap();
    let e = run_with(config(addr, &trace, &out, Model::Open, None), spec).unwrap_err().to_string();
    assert!(e.contains(&format!("cannot bind 203.0.113.78 ({}:2)", map.display())), "{e}");

    // A source of the other family than the target.
    let spec = SourceAddrs::parse("::1").unwrap();
    let e = run_with(config(addr, &trace, &out, Model::Open, None), spec).unwrap_err().to_string();
    assert!(e.contains("::1 (address 1 of the list) is IPv6 but the target"), "{e}");
    assert_eq!(seen.connections.load(Ordering::Relaxed), 0);
}

#[test]
fn unlisted_client_stops_the_run_before_its_request() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, seen) = start_server("127.0.0.1").unwrap();
    let map = dir.path().join("g.csv");
    std::fs::write(&map, "client,addr\n0,127.0.0.2\n1,127.0.0.3\n").unwrap();
    // Clients 0, 1, 0, 1, then 7 (not in the file) at the fifth request.
    let trace = write_trace(dir.path(), 8, Some(&|i| if i == 4 { 7 } else { (i % 2) as u32 }));
    let out = dir.path().join("out");
    let spec = SourceAddrs::parse(&format!("file:{}", map.display())).unwrap();
    let e = run_with(config(addr, &trace, &out, Model::Open, None), spec).unwrap_err().to_string();
    assert!(e.contains("client 7 has no row") && e.contains("g.csv"), "{e}");
    assert!(!seen.peer_by_path.lock().unwrap().contains_key("/r/4"), "client 7's request was sent");
    assert!(!out.join("requests.csv").exists(), "a partial log looks complete");

    // Closed model: users are clients 0..N, all checked before the run.
    let spec = SourceAddrs::parse(&format!("file:{}", map.display())).unwrap();
    let model = Model::Closed { users: 3, think: TimeDist::Const(0.0) };
    let e = run_with(config(addr, &trace, &dir.path().join("closed"), model, None), spec).unwrap_err().to_string();
    assert!(e.contains("client 2 has no row"), "{e}");
}

#[test]
fn ipv6_source_address() {
    let Some((addr, seen)) = start_server("::1") else {
        eprintln!("skipped: no IPv6 loopback (::1) on this host");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), 10, Some(&|i| i as u32));
    let out = dir.path().join("out");
    let s = run_with(config(addr, &trace, &out, Model::Open, Some(4)), SourceAddrs::parse("[::1]").unwrap()).unwrap();
    assert_eq!(s.ok, 10);
    check_sources(&out, &seen, &|_| ip("::1"));
    // An IPv4 source for an IPv6 target is refused.
    let e = run_with(config(addr, &trace, &out, Model::Open, None), SourceAddrs::parse("127.0.0.2").unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("is IPv4 but the target"), "{e}");
}

//! Kernel-mode scheduling as the kernel sees it: the listener's set-up
//! priority, and one `SO_PRIORITY` change per cutoff crossing, read back from
//! the server's own socket at each change.

mod common;

use std::sync::{Arc, Mutex};

use common::{can_set_priority, req, Raw, TestServer};
use shortfirst_core::bands::{Band, BandMap, Cutoffs};
use shortfirst_server::{so_priority, Policy, PriorityObserver};

/// (requested priority, priority the kernel reports right after), in order.
type Seen = Arc<Mutex<Vec<(u32, u32)>>>;

fn recorder() -> (PriorityObserver, Seen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let observer: PriorityObserver = Arc::new(move |fd, p| {
        let kernel = so_priority(fd).unwrap();
        s.lock().unwrap().push((p, kernel));
    });
    (observer, seen)
}

fn bands(seen: &Mutex<Vec<(u32, u32)>>) -> Vec<u8> {
    let map = BandMap::default();
    seen.lock()
        .unwrap()
        .iter()
        .map(|&(p, kernel)| {
            assert_eq!(p, kernel, "kernel priority differs from the one set");
            (1..=7).map(|b| Band::new(b).unwrap()).find(|&b| map.so_priority(b) == p).expect("a data band").index()
        })
        .collect()
}

fn skip() -> bool {
    if !can_set_priority() {
        eprintln!("skipping: SO_PRIORITY above 6 needs CAP_NET_ADMIN (run as root)");
        return true;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srpt_sets_one_priority_per_crossing() {
    if skip() {
        return;
    }
    let (observer, seen) = recorder();
    let mut s = TestServer::start_with_observer(
        |c| {
            // Small sendfile calls so every cutoff can be observed on its own.
            c.sendfile_chunk_bytes = 4096;
            c.send_buffer_bytes = Some(4096);
        },
        Some(observer),
    )
    .await;
    assert_eq!(s.listener_priority, Some(BandMap::default().so_priority(Band::SETUP)), "SYN-ACKs ride band 0");

    let mut c = Raw::connect(s.addr).await;
    c.send(req("/medium.bin").as_bytes()).await;
    assert_eq!(c.response(false).await.unwrap().body.len(), 100_000);
    let first = bands(&seen);
    // 100 KB starts in the default cutoffs' band of its size (above 64K: band 5); every
    // change is a strict improvement, so each cutoff is crossed at most once. The last 4 KB
    // write starts with at most 4,096 bytes left (band 3 or better) and, emptying the
    // response, moves it no further: its bytes leave in the band of their own size.
    let start = Cutoffs::server_default().band_for_remaining(100_000).index();
    assert_eq!(start, 5);
    assert_eq!(first.first(), Some(&start), "{first:?}");
    assert!(first.last().is_some_and(|&b| (1..=3).contains(&b)), "{first:?}");
    assert!(first.windows(2).all(|w| w[1] < w[0]), "{first:?}");
    assert!(first.len() >= 4, "with 4 KB writes most cutoffs are crossed one by one: {first:?}");

    // Same connection: a small response moves to band 1 (one syscall unless there) …
    c.send(req("/small.txt").as_bytes()).await;
    c.response(false).await.unwrap();
    let after_small = bands(&seen);
    let expected: &[u8] = if first.last() == Some(&1) { &[] } else { &[1] };
    assert_eq!(&after_small[first.len()..], expected, "at most one setsockopt, to the small response's band");
    // … a second one is already there (no syscall) …
    c.send(req("/small.txt").as_bytes()).await;
    c.response(false).await.unwrap();
    assert_eq!(bands(&seen), after_small, "no setsockopt when the band does not change");
    // … and a large one starts again from its own size.
    c.send(req("/medium.bin").as_bytes()).await;
    c.response(false).await.unwrap();
    let all = bands(&seen);
    assert_eq!(&all[after_small.len()..], &first[..], "second large response repeats the descent");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_uses_one_band_and_one_setsockopt() {
    if skip() {
        return;
    }
    let (observer, seen) = recorder();
    let mut s = TestServer::start_with_observer(
        |c| {
            c.policy = Policy::Fair;
            c.sendfile_chunk_bytes = 4096;
        },
        Some(observer),
    )
    .await;
    let mut c = Raw::connect(s.addr).await;
    for path in ["/medium.bin", "/small.txt", "/big.bin"] {
        c.send(req(path).as_bytes()).await;
        c.response(false).await.unwrap();
    }
    assert_eq!(bands(&seen), vec![1]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srpt2_starts_split_at_1k() {
    if skip() {
        return;
    }
    let (observer, seen) = recorder();
    let mut s = TestServer::start_with_observer(|c| c.policy = Policy::Srpt2, Some(observer)).await;
    let mut c = Raw::connect(s.addr).await;
    c.send(req("/medium.bin").as_bytes()).await;
    c.response(false).await.unwrap();
    let b = bands(&seen);
    assert_eq!(b.first(), Some(&2), "{b:?}");
    assert!(b.iter().all(|&x| x == 1 || x == 2), "{b:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn band_tracks_bytes_not_yet_transmitted() {
    if skip() {
        return;
    }
    let (observer, seen) = recorder();
    let mut s = TestServer::start_with_observer(|_| {}, Some(observer)).await;
    // A client that cannot take the response yet: tiny receive window, no reads.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(s.addr).await.unwrap();
    let mut c = Raw::from_stream(stream);
    c.send(req("/big.bin").as_bytes()).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // Almost all of the 300 KB is still on the server: the socket must not
    // have been promoted past the largest band (TCP_NOTSENT_LOWAT keeps the
    // kernel's unsent backlog small, so written ≈ transmitted).
    assert_eq!(bands(&seen), vec![6], "promoted before the bytes left");
    assert_eq!(c.response(false).await.unwrap().body.len(), 300_000);
    // Drained: the descent went from band 6 towards the best bands, one
    // crossing at a time, and stopped at the band of the last write (no more
    // than the 16 KiB TCP_NOTSENT_LOWAT plus one write left: band 4 or better).
    let descent = bands(&seen);
    assert!(descent.windows(2).all(|w| w[1] < w[0]), "{descent:?}");
    assert!(descent.last().is_some_and(|&b| (1..=4).contains(&b)), "{descent:?}");
    s.stop().await;
}

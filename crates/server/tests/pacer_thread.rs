//! The user-space scheduler's pacer runs on a thread of its own (not a tokio
//! timer), which exists while the server runs and is joined when it stops, and
//! `/metrics` shows the paced rate, the look-ahead and the release quantum in force and what
//! late wake-ups cost. Its timing is measured by hand, not asserted here (see
//! docs/serve.md).

mod common;

use common::{get, metric, metrics_text, req, TestServer};
use shortfirst_server::{Policy, Scheduling};

/// Threads of this process named `name`.
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pacer_thread_runs_with_the_server_and_shows_its_look_ahead() {
    assert_eq!(threads_named("sf-pacer"), 0);
    let mut s = TestServer::start(|c| {
        c.scheduler = Scheduling::User;
        c.link_rate_bits_per_s = Some(10_000_000);
        c.policy = Policy::Srpt;
        c.srpt_exact = true;
        c.socket_priority = false;
        c.admin = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    assert_eq!(get(s.addr, &req("/medium.bin")).await.unwrap().body.len(), 100_000);
    assert_eq!(threads_named("sf-pacer"), 1, "one pacer thread while serving");
    let m = metrics_text(&s).await;
    assert_eq!(metric(&m, "shortfirst_uplink_pacer_rate_bits_per_s"), 9_800_000.0, "0.98 of the rate by default");
    assert_eq!(metric(&m, "shortfirst_uplink_pacer_burst_seconds"), 0.0, "no idle burst by default");
    // The default at 10 Mbit/s: two segments of link time at 0.98 of the rate.
    assert_eq!(metric(&m, "shortfirst_uplink_pacer_lookahead_seconds"), 0.002471838);
    // A segment's link time there is more than the release quantum's 0.6 ms.
    assert_eq!(metric(&m, "shortfirst_uplink_pacer_release_quantum_seconds"), 0.001235919);
    assert!(metric(&m, "shortfirst_uplink_pacer_lateness_seconds_count") > 0.0, "100 KB took timer wake-ups");
    for name in ["shortfirst_uplink_pacer_late_idle_seconds_total", "shortfirst_uplink_pacer_late_idle_wakes_total"] {
        assert!(metric(&m, name) >= 0.0);
    }
    s.stop().await;
    // Joined when the server stops. A joined thread can stay listed in /proc for a moment:
    // the join returns when the thread has released its memory, before the kernel is done
    // removing it.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    while threads_named("sf-pacer") > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(threads_named("sf-pacer"), 0, "stopped and joined with the server");
}

//! At the open-files limit, accept fails with EMFILE for as long as the limit
//! is hit; the warning must not repeat at every back-off. In its own test
//! binary: it lowers this process's RLIMIT_NOFILE.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::TestServer;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_errors_are_logged_once_per_interval() {
    let log = Captured::default();
    let writer = log.clone();
    tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).init();
    let mut s = TestServer::start(|_| {}).await;
    // Client sockets made while descriptors are free; connected after the limit drops.
    let clients: Vec<socket2::Socket> =
        (0..4).map(|_| socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap()).collect();
    let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write the struct we pass.
    unsafe { assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut old), 0) };
    let low = libc::rlimit { rlim_cur: open_fds() + 1, rlim_max: old.rlim_max };
    // SAFETY: as above.
    unsafe { assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &low), 0) };
    for c in &clients {
        c.connect(&s.addr.into()).unwrap();
    }
    // ~40 failed accepts at the 50 ms back-off.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // SAFETY: as above.
    unsafe { assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &old), 0) };
    drop(clients);
    s.stop().await;
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    let warnings = text.lines().filter(|l| l.contains("accept failed")).count();
    assert_eq!(warnings, 1, "one warning per interval, got:\n{text}");
}

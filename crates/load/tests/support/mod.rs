//! What the load generator's socket tests share: reading one request head from a
//! connection of the test server, and an open-model run of a trace against it.

#![allow(dead_code)] // each test crate uses part of it

use std::net::SocketAddr;
use std::path::Path;

use shortfirst_load::http::Target;
use shortfirst_load::run::{Config, Model, Source};
use shortfirst_load::scale::Scaling;
use tokio::io::AsyncReadExt;

/// A test server on a runtime of its own (2 workers): each accepted connection
/// is handed to `handle` on a task of its own; returns the listening address.
pub fn serve_on_thread<F, Fut>(handle: F) -> SocketAddr
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            loop {
                let (sock, _) = l.accept().await.unwrap();
                tokio::spawn(handle(sock));
            }
        });
    });
    rx.recv().unwrap()
}

/// An open-model run of the trace at `trace` as it is, against `addr`, with `clients`
/// client identities, writing to `out`; a 10 s timeout, no aborts, seed 1.
pub fn open_config(addr: SocketAddr, trace: &Path, out: &Path, clients: u32) -> Config {
    Config {
        target: Target::parse(&format!("http://{addr}")).unwrap(),
        out_dir: out.to_path_buf(),
        model: Model::Open,
        source: Source::Trace { path: trace.to_path_buf(), format: None, skip_bad: false },
        scaling: Scaling::AsIs,
        uplink_bits_per_s: None,
        duration_s: None,
        persistent: None,
        abort_after_s: None,
        retries: 0,
        timeout_s: 10.0,
        clients,
        threads: 2,
        max_in_flight: 1000,
        seed: 1,
        progress: false,
        realtime: false,
        batch_window_us: shortfirst_load::run::DEFAULT_BATCH_WINDOW_US,
        spin_us: 0,
        load_schedule: None,
        command_line: vec!["test".into()],
    }
}

/// The next request head on `sock` (through its blank line), with the bytes after it
/// left in `buf` for the next call; `None` once the peer closes or errors.
pub async fn read_head(sock: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    let mut tmp = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match sock.read(&mut tmp).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    buf.drain(..end);
    Some(head)
}

//! What HTTP/2 over TLS costs with this stack alone: the `h2` crate and rustls (the same
//! versions and crypto provider as `shortfirst serve`), answering every request at once
//! from memory — the regular files at the top of `--root`, read at start — with two fields
//! (`content-type`, `content-length`); no file opened per request, no scheduler, no log. The bench runs it beside
//! `serve`, nginx and h2o: the requests/s no server built on these crates passes on the
//! same CPU, so that what `serve` adds to it, and how far the crates sit from h2o, are
//! measured rather than guessed.
//!
//! `cargo run --release --example h2_floor -- --listen 127.0.0.1:8443 --tls-cert cert.pem
//! --tls-key key.pem --root DIR --threads 2`; ends on SIGINT/SIGTERM (the process dies).
//! Not a server to deploy: a path is a file name, anything else is 404.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use clap::Parser;
use shortfirst_tls::{CertStore, TlsEntry};
use tokio::net::TcpListener;

/// The files read at start may hold this much in all; beyond it the start is refused.
const MAX_ROOT_BYTES: u64 = 256 << 20;
/// Files read at start, at most.
const MAX_FILES: usize = 1024;
/// Concurrent streams per connection, as `serve`'s default.
const MAX_CONCURRENT_STREAMS: u32 = 128;

#[derive(Parser)]
struct Args {
    #[arg(long)]
    listen: SocketAddr,
    #[arg(long)]
    tls_cert: PathBuf,
    #[arg(long)]
    tls_key: PathBuf,
    /// The directory whose top-level regular files are served, from memory.
    #[arg(long)]
    root: PathBuf,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The listen backlog.
    #[arg(long, default_value_t = 1024)]
    backlog: u32,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let files = Arc::new(read_root(&args.root)?);
    let entry = TlsEntry { cert: args.tls_cert.clone(), key: args.tls_key.clone(), names: Vec::new() };
    let store = CertStore::load(vec![entry], shortfirst_tls::provider()).context("loading the certificate")?;
    let mut config = shortfirst_tls::server_config(&store).context("TLS set-up")?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(args.threads.max(1)).enable_all().build()?;
    runtime.block_on(async move {
        let socket = socket2::Socket::new(socket2::Domain::for_address(args.listen), socket2::Type::STREAM, None)?;
        socket.set_reuse_address(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&args.listen.into())?;
        socket.listen(i32::try_from(args.backlog).unwrap_or(i32::MAX))?;
        let listener = TcpListener::from_std(socket.into())?;
        loop {
            let (tcp, _) = listener.accept().await?;
            tcp.set_nodelay(true)?;
            let (acceptor, files) = (acceptor.clone(), files.clone());
            tokio::spawn(async move {
                if let Err(e) = connection(acceptor, tcp, files).await {
                    eprintln!("connection: {e}");
                }
            });
        }
    })
}

/// `root`'s top-level regular files by request path (`/name`), read whole.
fn read_root(root: &Path) -> anyhow::Result<HashMap<String, Bytes>> {
    let mut files = HashMap::new();
    let mut total_bytes = 0;
    for entry in std::fs::read_dir(root).with_context(|| format!("reading {}", root.display()))? {
        let entry = entry?;
        if !entry.file_type()?.is_file() {
            continue;
        }
        let path = entry.path();
        total_bytes += entry.metadata()?.len();
        anyhow::ensure!(files.len() < MAX_FILES, "{}: more than {MAX_FILES} files", root.display());
        anyhow::ensure!(total_bytes <= MAX_ROOT_BYTES, "{}: more than {MAX_ROOT_BYTES} bytes of files", root.display());
        let body = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        files.insert(format!("/{}", entry.file_name().to_string_lossy()), Bytes::from(body));
    }
    Ok(files)
}

/// Serves one connection: each request answered where it is accepted, its body handed
/// whole to the codec, which cuts it to the client's frame size and windows.
async fn connection(
    acceptor: tokio_rustls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
    files: Arc<HashMap<String, Bytes>>,
) -> anyhow::Result<()> {
    let tls = acceptor.accept(tcp).await?;
    let mut conn = h2::server::Builder::new().max_concurrent_streams(MAX_CONCURRENT_STREAMS).handshake(tls).await?;
    while let Some(request) = conn.accept().await {
        let (request, mut respond) = request?;
        let mut response = http::Response::new(());
        let body = match files.get(request.uri().path()) {
            Some(body) => body.clone(),
            None => {
                *response.status_mut() = http::StatusCode::NOT_FOUND;
                Bytes::new()
            }
        };
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/octet-stream"));
        response.headers_mut().insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(body.len()));
        let mut send = respond.send_response(response, body.is_empty())?;
        if !body.is_empty() {
            send.send_data(body, true)?;
        }
    }
    Ok(())
}

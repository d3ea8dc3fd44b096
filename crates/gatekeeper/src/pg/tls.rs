//! TLS on the client side of the PostgreSQL gatekeeper (`--tls-cert/--tls-key`): the
//! certificate set of `shortfirst-tls` (the one `serve` uses), so a certificate is re-read
//! on SIGHUP (with the rest of the configuration) and when its files change, without
//! dropping a session: open sessions keep their keys, the next handshakes get the new pair.
//! A pair that does not load (unreadable, half-written, a key of another certificate)
//! leaves the previous one in force; the failure is logged and counted.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use shortfirst_tls::{CertStore, Prepared, TlsEntry, TlsError};

use crate::GatekeeperError;

/// How often the certificate and key files are checked for a change.
pub use shortfirst_tls::POLL_INTERVAL;

/// The TLS acceptor of the client side and the certificate set behind it.
#[derive(Clone)]
pub struct PgTls {
    store: Arc<CertStore>,
    acceptor: tokio_rustls::TlsAcceptor,
    counts: Arc<ReloadCounts>,
}

/// Certificate reloads by outcome (`gatekeeper_pg_tls_reloads_total`).
#[derive(Debug, Default)]
struct ReloadCounts {
    ok: AtomicU64,
    failed: AtomicU64,
}

impl std::fmt::Debug for PgTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTls").field("store", &self.store).finish_non_exhaustive()
    }
}

impl PgTls {
    /// The acceptor of a PEM certificate chain and private key (TLS 1.3 and 1.2), each
    /// error naming the flag and the file.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, GatekeeperError> {
        let store = CertStore::load(vec![entry(cert, key)], shortfirst_tls::provider()).map_err(flag_error)?;
        let config = shortfirst_tls::server_config(&store).map_err(flag_error)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        Ok(PgTls { store, acceptor, counts: Arc::default() })
    }

    pub fn acceptor(&self) -> &tokio_rustls::TlsAcceptor {
        &self.acceptor
    }

    /// Reads and checks a (reloaded configuration's) pair without putting it in force.
    pub fn prepare(&self, cert: &Path, key: &Path) -> Result<Prepared, GatekeeperError> {
        self.store.prepare(vec![entry(cert, key)]).map_err(|e| {
            self.counts.failed.fetch_add(1, Relaxed);
            flag_error(e)
        })
    }

    /// Puts a prepared pair in force: the next handshakes use it.
    pub fn install(&self, prepared: Prepared) {
        self.store.install(prepared);
        self.counts.ok.fetch_add(1, Relaxed);
    }

    /// Checks the files every [`POLL_INTERVAL`] for ever (the caller aborts the task);
    /// a reload a change caused is logged and counted.
    pub async fn watch(self) {
        shortfirst_tls::watch(self.store.clone(), |outcome| match outcome {
            Ok(()) => {
                self.counts.ok.fetch_add(1, Relaxed);
                tracing::info!("TLS certificate reloaded: a certificate or key file changed");
            }
            Err(e) => {
                self.counts.failed.fetch_add(1, Relaxed);
                tracing::error!(error = %e, "TLS certificate not reloaded: the previous one stays in force");
            }
        })
        .await
    }

    /// The reload counters in Prometheus text.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let name = "gatekeeper_pg_tls_reloads_total";
        let mut o = String::new();
        crate::metrics::family(
            &mut o,
            name,
            "TLS certificate reloads (SIGHUP or a changed file) by outcome.",
            "counter",
        );
        for (outcome, count) in [("ok", &self.counts.ok), ("failed", &self.counts.failed)] {
            let _ = writeln!(o, "{name}{{outcome=\"{outcome}\"}} {}", count.load(Relaxed));
        }
        o
    }
}

fn entry(cert: &Path, key: &Path) -> TlsEntry {
    TlsEntry { cert: cert.to_path_buf(), key: key.to_path_buf(), names: Vec::new() }
}

/// A certificate error named by the flag that gave the file.
fn flag_error(e: TlsError) -> GatekeeperError {
    GatekeeperError::Config(match e {
        TlsError::Cert { path, reason } => format!("--tls-cert {}: {reason}", path.display()),
        TlsError::Key { path, reason, .. } => format!("--tls-key {}: {reason}", path.display()),
        TlsError::Setup(reason) => format!("TLS set-up: {reason}"),
    })
}

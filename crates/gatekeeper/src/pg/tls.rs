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
        let config = rustls::ServerConfig::builder_with_provider(store.provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| GatekeeperError::Config(format!("TLS set-up: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(store.resolver());
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

    /// Re-reads the files if one changed since they were last read; logs what happened.
    pub fn reload_if_changed(&self) {
        if !self.store.changed() {
            return;
        }
        match self.store.reload() {
            Ok(()) => {
                self.counts.ok.fetch_add(1, Relaxed);
                tracing::info!("TLS certificate reloaded: a certificate or key file changed");
            }
            Err(e) => {
                self.counts.failed.fetch_add(1, Relaxed);
                tracing::error!(error = %e, "TLS certificate not reloaded: the previous one stays in force");
            }
        }
    }

    /// Checks the files every [`POLL_INTERVAL`] for ever (the caller aborts the task).
    pub async fn watch(self) {
        let mut tick = tokio::time::interval(POLL_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.reload_if_changed();
        }
    }

    /// The reload counters in Prometheus text.
    pub fn render(&self) -> String {
        let name = "gatekeeper_pg_tls_reloads_total";
        let mut o = format!("# HELP {name} TLS certificate reloads (SIGHUP or a changed file) by outcome.\n");
        o.push_str(&format!("# TYPE {name} counter\n"));
        o.push_str(&format!("{name}{{outcome=\"ok\"}} {}\n", self.counts.ok.load(Relaxed)));
        o.push_str(&format!("{name}{{outcome=\"failed\"}} {}\n", self.counts.failed.load(Relaxed)));
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

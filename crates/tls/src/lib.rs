//! The certificates a TLS listener serves, shared by `shortfirst serve` and the
//! gatekeeper's PostgreSQL side: read and checked at start (a bad file refuses the start,
//! naming it), chosen per handshake by the client's server name and signature schemes,
//! re-read on demand (SIGHUP) and when a file changes ([`certs`]); the server names a
//! certificate is chosen for and how an SNI name matches them ([`names`], pure, fuzzed).
//! Which protocol runs inside the session is the caller's business.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use serde::Deserialize;

pub mod certs;
pub mod names;

pub use certs::{CertStore, Prepared, TlsError};

/// How often a listener checks its certificate and key files for a change.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// One certificate: its PEM chain and key files and the server names it is chosen for
/// (none: a default certificate). A `[[tls]]` table of a config file, or
/// `--tls-cert/--tls-key` (no names).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsEntry {
    pub cert: PathBuf,
    pub key: PathBuf,
    #[serde(default)]
    pub names: Vec<String>,
}

/// The crypto provider compiled in: aws-lc-rs unless only the `ring` feature is on.
pub fn provider() -> Arc<CryptoProvider> {
    #[cfg(feature = "aws-lc-rs")]
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    #[cfg(all(feature = "ring", not(feature = "aws-lc-rs")))]
    let provider = rustls::crypto::ring::default_provider();
    Arc::new(provider)
}

#[cfg(not(any(feature = "aws-lc-rs", feature = "ring")))]
compile_error!("shortfirst-tls needs a TLS crypto provider: the `aws-lc-rs` (default) or `ring` feature");

/// A rustls server configuration serving `store`'s certificates over TLS 1.3 and 1.2,
/// without client certificates. Callers add what their protocol needs (ALPN, record size).
pub fn server_config(store: &Arc<CertStore>) -> Result<rustls::ServerConfig, TlsError> {
    Ok(rustls::ServerConfig::builder_with_provider(store.provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Setup(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(store.resolver()))
}

/// Checks `store`'s files every [`POLL_INTERVAL`] for ever (the caller aborts the task), and
/// hands the outcome of each reload a change caused to `report`.
pub async fn watch(store: Arc<CertStore>, mut report: impl FnMut(Result<(), TlsError>)) {
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Some(outcome) = store.reload_if_changed() {
            report(outcome);
        }
    }
}

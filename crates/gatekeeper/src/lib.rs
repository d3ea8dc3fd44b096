//! shortfirst gatekeeper: a transparent admission-control and shortest-job-first reverse
//! proxy for dynamic backends (Elnikety et al. 2004, §3).
//!
//! The decisions (cost estimates, admission, queue order, capacity auto-tuning) live in
//! `shortfirst_core::admission`; this crate is the driver around them: HTTP/1.1 in and out
//! (our own on both sides, over httparse; hyper for the admin page, the synthetic upstream
//! and calibration's client) and the PostgreSQL protocol, the clock, request
//! classification, metrics, the synthetic upstream used by tests and benchmarks, and
//! capacity calibration.
//!
//! Must not know: how the decision logic picks (it only feeds events and applies results).

mod admit;
pub mod busypoll;
pub mod calibrate;
pub mod classify;
pub mod config;
pub mod cpu_slice;
pub mod metrics;
pub mod pg;
pub mod proxy;
pub mod settings;
pub mod synthetic;
pub mod upstream;

pub use config::{CapacitySetting, ProxyConfig};
pub use proxy::{Gatekeeper, Handle};
pub use settings::ProxySettings;

#[derive(Debug, thiserror::Error)]
pub enum GatekeeperError {
    #[error("configuration: {0}")]
    Config(String),
    /// A setting's value is wrong; `key` names it as in a file (`max-queue-wait`).
    #[error("{error}")]
    Setting { key: &'static str, error: Box<GatekeeperError> },
    /// What is wrong came from this config file.
    #[error("config file {}: {error}", path.display())]
    InFile { path: std::path::PathBuf, error: Box<GatekeeperError> },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Admission(#[from] shortfirst_core::admission::AdmissionError),
}

impl GatekeeperError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        GatekeeperError::Io { what: what.into(), source }
    }
}

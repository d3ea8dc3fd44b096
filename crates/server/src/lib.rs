//! `shortfirst serve`: a static-file HTTP/1.1 and HTTP/2 server whose connections (and streams) are
//! scheduled by size through kernel priority bands (Harchol-Balter et al. 2003)
//! or through its own user-space uplink scheduler ([`usched`]).
//!
//! The ranking (size → band, crossings, auto cutoffs) is `shortfirst_core::bands`;
//! this crate is the driver that applies it: [`sched`] turns bands into
//! `SO_PRIORITY`, [`conn`] is the per-connection HTTP state machine, [`http`]
//! the wire format, [`resolve`] maps targets to files without ever leaving the
//! root ([`listing`] lists a directory by the same rules), [`encoding`] picks a precompressed sidecar by `Accept-Encoding`,
//! [`cache_control`] gives `Cache-Control` by path glob, `site` picks a request's virtual host
//! and `live` holds the configuration in force (swapped on SIGHUP), [`io`] does the zero-copy writes, [`server`] accepts, limits (what to
//! do at the connection limit: [`limit`]) and shuts down, [`metrics`] and
//! [`access_log`] observe. [`tls`] puts HTTPS (rustls) in front of the same
//! state machine; [`http2`] answers HTTP/2 streams through it, ordering their bytes by
//! `shortfirst_core::stream_sched` (under the user-space pacer, by the uplink scheduler,
//! with every other response). Under `srrt`, [`srrt`] re-ranks a
//! response from [`tcpinfo`] (`getsockopt(TCP_INFO)`) as its bytes drain.
//!
//! Must not know: tc/HTB (that is `shortfirst uplink`), how cutoffs are chosen.

pub mod access_log;
pub mod cache_control;
pub mod config;
pub mod conn;
pub mod encoding;
pub mod filecache;
pub mod http;
pub mod http2;
pub mod io;
pub mod limit;
pub mod listing;
mod live;
pub mod metrics;
pub mod resolve;
pub mod sched;
pub mod server;
mod site;
pub mod srrt;
pub mod tcpinfo;
pub mod tls;
pub mod usched;

pub use config::{
    AccessLogFormat, AtMaxConnections, ConfigError, ConfigFile, CutoffsSpec, Dotfiles, HostEntry, Listings, Policy,
    PolicySpec, RrtCutoffsSpec, Scheduling, ServerConfig, TlsEntry, TlsSettings, UnknownHost,
};
pub use sched::{so_priority, PriorityObserver};
pub use server::{run_until_signal, Server, ServerError};

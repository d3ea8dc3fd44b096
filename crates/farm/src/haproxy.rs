//! HAProxy's side of a farm, as text (pure): the map of URL path → backend by size
//! interval, and three configurations to compare — `sita` (the frontend picks the
//! backend from the map: `use_backend %[path,map(MAP,any)]`, one backend per host,
//! unknown paths to `any`), `roundrobin` and `leastconn` (one backend over every host).
//!
//! The `any` backend (`leastconn` over every host) takes the paths the map does not
//! know: files added since the map was written, dynamic paths, typos (404s from any
//! host). HAProxy reads the map when it starts and at every reload, so writing a new
//! map (atomically) and reloading applies it; the `stats socket` (when given) also
//! takes `set map`/`add map` for single entries without a reload.

use std::fmt::Write;
use std::path::Path;

use shortfirst_core::dispatch::sita_host;

use crate::docroot::Entry;

/// The backend of unknown paths (and the only one of `roundrobin`/`leastconn`).
pub const ANY_BACKEND: &str = "any";

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("host address {0:?}: expected HOST:PORT without spaces, quotes or `#`")]
    BadAddress(String),
    #[error("listen address {0:?}: expected [HOST]:PORT without spaces, quotes or `#`")]
    BadListen(String),
    #[error(
        "path {0:?}: must be absolute and free of spaces, quotes, `#` and `,` (HAProxy reads it inside `map(...)`)"
    )]
    BadPath(String),
    #[error("{cutoffs} cutoffs for {hosts} hosts: need one fewer cutoff than hosts")]
    CutoffCount { cutoffs: usize, hosts: usize },
}

/// Which configuration to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Balance {
    /// Size intervals through the map.
    Sita,
    RoundRobin,
    LeastConn,
}

impl Balance {
    pub const ALL: [Balance; 3] = [Balance::Sita, Balance::RoundRobin, Balance::LeastConn];

    /// The name in file names and comments.
    pub fn name(self) -> &'static str {
        match self {
            Balance::Sita => "sita",
            Balance::RoundRobin => "roundrobin",
            Balance::LeastConn => "leastconn",
        }
    }
}

/// What every configuration shares.
#[derive(Clone, Debug, PartialEq)]
pub struct Farm {
    /// The frontend's `bind` address, `[HOST]:PORT`.
    pub listen: String,
    /// Host i's `HOST:PORT` (backend `host<i>`).
    pub hosts: Vec<String>,
    /// Host i takes sizes in `(cutoffs[i-1], cutoffs[i]]` (host 0 from 0).
    pub cutoffs: Vec<u64>,
    /// Absolute path of the map file as HAProxy will read it.
    pub map_path: String,
    /// Optional runtime API socket (`stats socket ... level admin`).
    pub stats_socket: Option<String>,
}

fn plain(text: &str) -> bool {
    !text.is_empty() && !text.chars().any(|c| c.is_whitespace() || c.is_control() || "\"'#\\".contains(c))
}

fn address(text: &str) -> bool {
    plain(text) && text.rsplit_once(':').is_some_and(|(_, port)| port.parse::<u16>().is_ok_and(|p| p > 0))
}

fn abs_path(text: &str) -> bool {
    plain(text) && !text.contains(',') && !text.contains(')') && Path::new(text).is_absolute()
}

impl Farm {
    /// Checks every field that ends up in the configuration text.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.cutoffs.len() + 1 != self.hosts.len() {
            return Err(ConfigError::CutoffCount { cutoffs: self.cutoffs.len(), hosts: self.hosts.len() });
        }
        if let Some(bad) = self.hosts.iter().find(|h| !address(h)) {
            return Err(ConfigError::BadAddress(bad.clone()));
        }
        if !address(&self.listen) {
            return Err(ConfigError::BadListen(self.listen.clone()));
        }
        for p in std::iter::once(&self.map_path).chain(&self.stats_socket) {
            if !abs_path(p) {
                return Err(ConfigError::BadPath(p.clone()));
            }
        }
        Ok(())
    }

    /// Size interval of host i, for comments: `(lo, hi]` bytes.
    fn interval(&self, host: usize) -> String {
        let lo = if host == 0 { 0 } else { self.cutoffs[host - 1] };
        match self.cutoffs.get(host) {
            Some(hi) => format!("({lo}, {hi}] bytes"),
            None => format!("({lo}, ...) bytes"),
        }
    }
}

/// The map: one `URL-path backend` line per entry, after a comment with the cutoffs.
pub fn map_text(farm: &Farm, entries: &[Entry]) -> Result<String, ConfigError> {
    farm.validate()?;
    let mut out = String::with_capacity(32 * entries.len() + 256);
    out.push_str("# shortfirst farm map: URL path -> backend by response size (SITA)\n");
    for h in 0..farm.hosts.len() {
        let _ = writeln!(out, "# host{h}: {}", farm.interval(h));
    }
    for e in entries {
        let _ = writeln!(out, "{} host{}", e.url_path, sita_host(&farm.cutoffs, e.size_bytes));
    }
    Ok(out)
}

/// A complete HAProxy configuration for `balance`.
pub fn config_text(farm: &Farm, balance: Balance) -> Result<String, ConfigError> {
    farm.validate()?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# shortfirst farm: {} over {} hosts (generated; edit the command, not this file)",
        balance.name(),
        farm.hosts.len()
    );
    out.push_str("global\n    maxconn 20000\n");
    if let Some(sock) = &farm.stats_socket {
        let _ = writeln!(out, "    stats socket {sock} mode 600 level admin");
    }
    out.push_str(
        "\ndefaults\n    mode http\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n\n",
    );
    let _ = writeln!(out, "frontend farm\n    bind {}", farm.listen);
    if balance == Balance::Sita {
        let _ = writeln!(out, "    use_backend %[path,map({},{ANY_BACKEND})]", farm.map_path);
    }
    let _ = writeln!(out, "    default_backend {ANY_BACKEND}\n");
    let any_balance = if balance == Balance::RoundRobin { "roundrobin" } else { "leastconn" };
    let _ = writeln!(out, "backend {ANY_BACKEND}\n    balance {any_balance}");
    for (h, addr) in farm.hosts.iter().enumerate() {
        let _ = writeln!(out, "    server host{h} {addr}");
    }
    if balance == Balance::Sita {
        for (h, addr) in farm.hosts.iter().enumerate() {
            let _ = writeln!(out, "\n# sizes {}\nbackend host{h}\n    server host{h} {addr}", farm.interval(h));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;

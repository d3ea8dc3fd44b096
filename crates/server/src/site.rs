//! Sites (virtual hosts): which directory, rules and listings a request gets, chosen by
//! the host name it names.
//!
//! The top-level `root` (with the top-level `cache-control` and `listings`) is the
//! default site; each `[[host]]` table is a site of its own, for its names. A request's
//! name is its `Host` field (HTTP/1.1, or the authority of an absolute-form target;
//! HTTP/2's `:authority` arrives as `Host`, see `http2::request`) without its port and a
//! final dot, compared without case: an exact
//! name first, then `*.suffix` for one label in front — the same names, by the same
//! rules (`tls::names`), as a certificate is chosen by SNI, so a `[[host]]` with a
//! `tls-cert` is one site for both. A name no host has (or no `Host` at all, HTTP/1.0)
//! is answered as `unknown-host` says: the default site, `421` or `404`.
//!
//! Every site is confined as the default one is (`resolve`: no climbing above its root,
//! symlinks kept beneath it, dotfiles refused). A site is shared (`Arc`) by the requests
//! that chose it: a reload builds new sites, the old ones live on while requests use them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::cache_control::CacheControl;
use crate::config::{Listings, ServerConfig, UnknownHost};
use crate::http::Status;
use crate::resolve::Root;
use crate::tls::names::{NamePattern, MAX_NAME_BYTES};

/// One site: a root and the rules its files are served under.
pub(crate) struct Site {
    /// Its first name, or `default`: for logs.
    pub name: String,
    pub root: Root,
    pub cache_control: CacheControl,
    pub listings: Listings,
}

/// Every site of one configuration and the table that finds a request's.
pub(crate) struct Sites {
    default: Arc<Site>,
    hosts: Vec<Arc<Site>>,
    /// Lower-case name → index in `hosts`.
    exact: HashMap<Vec<u8>, usize>,
    /// `*.suffix`: lower-case suffix → index in `hosts`.
    wildcard: HashMap<Vec<u8>, usize>,
    unknown: UnknownHost,
}

/// A root that could not be opened.
#[derive(Debug)]
pub(crate) struct OpenError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

impl Sites {
    /// Opens every site's root (each a directory descriptor held while the site lives).
    pub(crate) fn open(config: &ServerConfig) -> Result<Sites, OpenError> {
        let confine = !config.follow_symlinks_outside_root;
        let open =
            |path: &PathBuf| Root::open(path, confine).map_err(|source| OpenError { path: path.clone(), source });
        let default = Arc::new(Site {
            name: "default".into(),
            root: open(&config.root)?,
            cache_control: config.cache_control.clone(),
            listings: config.listings,
        });
        let mut sites = Sites {
            default,
            hosts: Vec::with_capacity(config.hosts.len()),
            exact: HashMap::new(),
            wildcard: HashMap::new(),
            unknown: config.unknown_host,
        };
        for host in &config.hosts {
            let index = sites.hosts.len();
            for name in &host.names {
                match name {
                    NamePattern::Exact(n) => sites.exact.insert(n.as_bytes().to_vec(), index),
                    NamePattern::Wildcard(suffix) => sites.wildcard.insert(suffix.as_bytes().to_vec(), index),
                };
            }
            sites.hosts.push(Arc::new(Site {
                name: host.names.first().map_or_else(String::new, ToString::to_string),
                root: open(&host.root)?,
                cache_control: host.cache_control.clone().unwrap_or_else(|| config.cache_control.clone()),
                listings: host.listings.unwrap_or(config.listings),
            }));
        }
        Ok(sites)
    }

    /// The site for a request whose `Host` field is `host`; an unknown name's answer
    /// (`421`, `404`) as the error.
    pub(crate) fn choose(&self, host: Option<&[u8]>) -> Result<&Arc<Site>, Status> {
        if let Some(index) = host.and_then(|h| self.lookup(name_of(h))) {
            return Ok(&self.hosts[index]);
        }
        match self.unknown {
            UnknownHost::Default => Ok(&self.default),
            UnknownHost::Misdirected => Err(Status::MISDIRECTED_REQUEST),
            UnknownHost::NotFound => Err(Status::NOT_FOUND),
        }
    }

    /// The default site (the top-level root).
    pub(crate) fn default_site(&self) -> &Arc<Site> {
        &self.default
    }

    /// Every `[[host]]` site.
    pub(crate) fn hosts(&self) -> &[Arc<Site>] {
        &self.hosts
    }

    fn lookup(&self, name: &[u8]) -> Option<usize> {
        if self.hosts.is_empty() || name.is_empty() || name.len() > MAX_NAME_BYTES {
            return None;
        }
        let mut lower = [0u8; MAX_NAME_BYTES];
        let lower = &mut lower[..name.len()];
        lower.copy_from_slice(name);
        lower.make_ascii_lowercase();
        if let Some(&i) = self.exact.get(&lower[..]) {
            return Some(i);
        }
        let dot = lower.iter().position(|&b| b == b'.')?;
        if dot == 0 {
            return None;
        }
        self.wildcard.get(&lower[dot + 1..]).copied()
    }
}

/// The host a request names: the authority of an absolute-form target
/// (`GET http://example.com/x`), which wins over `Host` (RFC 9112 §3.2.2), else `Host`.
pub(crate) fn request_host<'a>(target: &'a [u8], host: Option<&'a [u8]>) -> Option<&'a [u8]> {
    if target.first() == Some(&b'/') {
        return host;
    }
    let Some(scheme_end) = target.windows(3).position(|w| w == b"://") else { return host };
    let rest = &target[scheme_end + 3..];
    Some(&rest[..rest.iter().position(|&b| b == b'/' || b == b'?').unwrap_or(rest.len())])
}

/// The host name of a `Host` value: without its port (`example.com:8080`), its final dot
/// (`example.com.`); an IP literal keeps its brackets (`[::1]:80` → `[::1]`).
pub(crate) fn name_of(host: &[u8]) -> &[u8] {
    let name = if host.first() == Some(&b'[') {
        match host.iter().position(|&b| b == b']') {
            Some(close) => &host[..=close],
            None => host,
        }
    } else {
        match host.iter().rposition(|&b| b == b':') {
            Some(colon) => &host[..colon],
            None => host,
        }
    };
    name.strip_suffix(b".").unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HostSettings;

    #[test]
    fn host_names_lose_port_and_final_dot() {
        for (host, name) in [
            ("example.com", "example.com"),
            ("Example.COM:8080", "Example.COM"),
            ("example.com.", "example.com"),
            ("example.com.:443", "example.com"),
            ("[::1]:80", "[::1]"),
            ("[::1]", "[::1]"),
            ("127.0.0.1:80", "127.0.0.1"),
            ("", ""),
        ] {
            assert_eq!(name_of(host.as_bytes()), name.as_bytes(), "{host}");
        }
    }

    #[test]
    fn an_absolute_target_names_the_host() {
        let host = Some(&b"h.test"[..]);
        for (target, want) in [
            ("/x", Some("h.test")),
            ("*", Some("h.test")),
            ("http://a.test/x", Some("a.test")),
            ("HTTPS://a.test:8443?q", Some("a.test:8443")),
            ("http://a.test", Some("a.test")),
        ] {
            assert_eq!(request_host(target.as_bytes(), host), want.map(str::as_bytes), "{target}");
        }
        assert_eq!(request_host(b"/x", None), None);
    }

    fn sites(unknown: UnknownHost) -> (tempfile::TempDir, Sites) {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["default", "a", "w"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let mut config = ServerConfig::new(dir.path().join("default"));
        config.unknown_host = unknown;
        let host = |names: &[&str], root: &str| HostSettings {
            names: names.iter().map(|n| NamePattern::parse(n).unwrap()).collect(),
            root: dir.path().join(root),
            cache_control: None,
            listings: Some(Listings::Json),
        };
        config.hosts = vec![host(&["a.test", "www.a.test"], "a"), host(&["*.w.test"], "w")];
        let sites = Sites::open(&config).unwrap();
        (dir, sites)
    }

    #[test]
    fn a_request_finds_its_site_by_name_then_wildcard_then_the_default() {
        let (_dir, s) = sites(UnknownHost::Default);
        let chosen = |host: Option<&str>| s.choose(host.map(str::as_bytes)).map(|site| site.name.clone());
        for (host, want) in [
            (Some("a.test"), "a.test"),
            (Some("WWW.A.test:8080"), "a.test"),
            (Some("a.test."), "a.test"),
            (Some("x.w.test"), "*.w.test"),
            (Some("w.test"), "default"),
            (Some("x.y.w.test"), "default"),
            (Some("b.test"), "default"),
            (Some(".w.test"), "default"),
            (None, "default"),
        ] {
            assert_eq!(chosen(host), Ok(want.to_string()), "{host:?}");
        }
        assert_eq!(s.hosts()[0].listings, Listings::Json, "a host's own setting");
        assert_eq!(s.default_site().listings, Listings::Off, "the top-level one");
    }

    #[test]
    fn an_unknown_name_is_answered_as_configured() {
        for (unknown, status) in
            [(UnknownHost::Misdirected, Status::MISDIRECTED_REQUEST), (UnknownHost::NotFound, Status::NOT_FOUND)]
        {
            let (_dir, s) = sites(unknown);
            assert_eq!(s.choose(Some(b"b.test")).err(), Some(status));
            assert_eq!(s.choose(None).err(), Some(status));
            assert_eq!(s.choose(Some(b"a.test")).unwrap().name, "a.test");
        }
    }
}

//! `[[host]]` tables: the virtual hosts of the config file, one site each (see
//! `crate::site`). A host's keys are spelt as the top-level ones; what a host leaves out
//! it takes from the top level.

use std::path::PathBuf;

use serde::Deserialize;

use super::{ConfigError, Listings, TlsEntry};
use crate::cache_control::CacheControl;
use crate::tls::names::NamePattern;

/// Most `[[host]]` tables one server takes: each holds its root's directory open and its
/// names in the lookup table (a request finds its site in one hash look-up, then at most
/// this many wildcard comparisons).
pub const MAX_HOSTS: usize = 256;
/// Most names (`name` and its aliases) one host answers to.
pub const MAX_NAMES_PER_HOST: usize = 32;

/// One name or several: `name = "example.com"` or `name = ["example.com", "www.example.com"]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum Names {
    One(String),
    Many(Vec<String>),
}

impl Names {
    pub fn as_slice(&self) -> &[String] {
        match self {
            Names::One(name) => std::slice::from_ref(name),
            Names::Many(names) => names,
        }
    }
}

/// One `[[host]]` table.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HostEntry {
    /// The host names it serves, matched against `Host` (HTTP/1.1) or `:authority`
    /// (HTTP/2) without case and port: DNS names, or `*.example.com` for any one label
    /// in front (as the certificates' `names`).
    pub name: Names,
    /// Its directory, confined as the top-level `root` is.
    pub root: PathBuf,
    /// Its `Cache-Control` rules (`GLOB=VALUE`, as the top-level key); absent: the
    /// top-level rules; `[]`: none.
    pub cache_control: Option<Vec<String>>,
    /// Its directory listings; absent: the top-level setting.
    pub listings: Option<Listings>,
    /// Its certificate chain (PEM), chosen by SNI for its names; needs `tls-key` and the
    /// HTTPS listener (`tls-listen`).
    pub tls_cert: Option<PathBuf>,
    /// The private key of `tls-cert`.
    pub tls_key: Option<PathBuf>,
}

/// A `[[host]]` table validated: its names parsed, its rules compiled.
#[derive(Clone, Debug)]
pub struct HostSettings {
    pub names: Vec<NamePattern>,
    pub root: PathBuf,
    /// `None`: the top-level rules.
    pub cache_control: Option<CacheControl>,
    /// `None`: the top-level setting.
    pub listings: Option<Listings>,
}

impl HostEntry {
    /// Checks the table (`index`: its place in the file, for errors) and splits it into
    /// its site's settings and its certificate, if any.
    pub fn validate(&self, index: usize) -> Result<(HostSettings, Option<TlsEntry>), ConfigError> {
        let first = self.name.as_slice().first().map_or("", String::as_str);
        let invalid = |reason: String| ConfigError::Invalid {
            key: "host",
            reason: format!("[[host]] #{} ({first:?}): {reason}", index + 1),
        };
        let given = self.name.as_slice();
        if given.is_empty() {
            return Err(invalid("`name` lists no host name".into()));
        }
        if given.len() > MAX_NAMES_PER_HOST {
            return Err(invalid(format!("{} names: at most {MAX_NAMES_PER_HOST}", given.len())));
        }
        let mut names = Vec::with_capacity(given.len());
        for name in given {
            let pattern = NamePattern::parse(name.strip_suffix('.').unwrap_or(name))
                .map_err(|e| invalid(format!("name {name:?}: {e}")))?;
            names.push(pattern);
        }
        let cache_control = match &self.cache_control {
            Some(rules) => Some(CacheControl::new(rules).map_err(|e| invalid(format!("cache-control: {e}")))?),
            None => None,
        };
        let cert = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsEntry {
                cert: cert.clone(),
                key: key.clone(),
                names: names.iter().map(ToString::to_string).collect(),
            }),
            (None, None) => None,
            (Some(_), None) => return Err(invalid("`tls-cert` without `tls-key`".into())),
            (None, Some(_)) => return Err(invalid("`tls-key` without `tls-cert`".into())),
        };
        let settings = HostSettings { names, root: self.root.clone(), cache_control, listings: self.listings };
        Ok((settings, cert))
    }
}

/// Validates every table: at most [`MAX_HOSTS`], no name given to two hosts. Returns the
/// hosts' settings and their certificates, in file order.
pub fn validate_hosts(entries: &[HostEntry]) -> Result<(Vec<HostSettings>, Vec<TlsEntry>), ConfigError> {
    if entries.len() > MAX_HOSTS {
        return Err(ConfigError::Invalid {
            key: "host",
            reason: format!("{} [[host]] tables: at most {MAX_HOSTS}", entries.len()),
        });
    }
    let mut hosts = Vec::with_capacity(entries.len());
    let mut certs = Vec::new();
    let mut seen = std::collections::HashMap::new();
    for (i, entry) in entries.iter().enumerate() {
        let (settings, cert) = entry.validate(i)?;
        for name in &settings.names {
            if let Some(other) = seen.insert(name.to_string(), i) {
                return Err(ConfigError::Invalid {
                    key: "host",
                    reason: format!("name {name} is given to [[host]] #{} and #{}", other + 1, i + 1),
                });
            }
        }
        hosts.push(settings);
        certs.extend(cert);
    }
    Ok((hosts, certs))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{ConfigFile, ServerConfig, UnknownHost};
    use super::*;

    fn parse(text: &str) -> Result<ServerConfig, ConfigError> {
        ServerConfig::from_file(ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("h.toml"))?)
    }

    #[test]
    fn host_tables_become_sites_and_their_certificates() {
        let c = parse(
            "unknown-host = \"misdirected\"\ntls-listen = \"127.0.0.1:0\"\n\
             [[host]]\nname = \"a.test\"\nroot = \"/srv/a\"\nlistings = \"json\"\n\
             [[host]]\nname = [\"B.test.\", \"*.b.test\"]\nroot = \"/srv/b\"\ncache-control = []\n\
             tls-cert = \"b.crt\"\ntls-key = \"b.key\"\n",
        )
        .unwrap();
        assert_eq!(c.unknown_host, UnknownHost::Misdirected);
        let names: Vec<Vec<String>> =
            c.hosts.iter().map(|h| h.names.iter().map(ToString::to_string).collect()).collect();
        assert_eq!(names, [vec!["a.test"], vec!["b.test", "*.b.test"]]);
        assert_eq!((c.hosts[0].listings, c.hosts[1].listings), (Some(Listings::Json), None));
        assert!(c.hosts[0].cache_control.is_none() && c.hosts[1].cache_control.as_ref().unwrap().is_empty());
        let certs = &c.tls.as_ref().unwrap().certs;
        assert_eq!(certs.len(), 1);
        assert_eq!(
            (certs[0].cert.to_str(), certs[0].names.clone()),
            (Some("b.crt"), vec!["b.test".into(), "*.b.test".into()])
        );
    }

    #[test]
    fn bad_host_tables_are_named() {
        let many: String =
            (0..=MAX_HOSTS).map(|i| format!("[[host]]\nname = \"h{i}.test\"\nroot = \"/r\"\n")).collect();
        let cases: &[(&str, &[&str])] = &[
            ("[[host]]\nname = \"a_b.test\"\nroot = \"/r\"", &["host", "#1", "a_b.test"]),
            ("[[host]]\nname = []\nroot = \"/r\"", &["host", "no host name"]),
            (
                "[[host]]\nname = \"a.test\"\nroot = \"/r\"\n[[host]]\nname = \"A.test\"\nroot = \"/s\"",
                &["a.test", "#1 and #2"],
            ),
            ("[[host]]\nname = \"a.test\"\nroot = \"/r\"\ncache-control = [\"x=y\"]", &["host", "cache-control"]),
            ("[[host]]\nname = \"a.test\"\nroot = \"/r\"\ntls-cert = \"c\"", &["tls-key"]),
            ("[[host]]\nname = \"a.test\"\nroot = \"/r\"\ntls-cert = \"c\"\ntls-key = \"k\"", &["tls-listen"]),
            (&many, &["257 [[host]] tables", "at most 256"]),
            ("unknown-host = \"not-found\"", &["unknown-host", "no [[host]] table"]),
        ];
        for (text, needles) in cases {
            let msg = parse(text).unwrap_err().to_string();
            for n in *needles {
                assert!(msg.contains(n), "{text}: {msg} lacks {n}");
            }
        }
        for (text, needle) in [
            ("[[host]]\nname = \"a.test\"\nroot = \"/r\"\nroots = \"/s\"", "roots"),
            ("[[host]]\nroot = \"/r\"", "name"),
            ("unknown-host = \"drop\"", "`misdirected`"),
        ] {
            let msg =
                ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("h.toml")).unwrap_err().to_string();
            assert!(msg.contains(needle) && msg.contains("h.toml"), "{text}: {msg}");
        }
        assert!("drop".parse::<UnknownHost>().unwrap_err().contains("default, misdirected or not-found"));
    }
}

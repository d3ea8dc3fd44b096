//! The certificate set: loaded at start (a bad file refuses the start, naming it), chosen
//! per handshake, re-read on demand (SIGHUP) and when a file changes.
//!
//! Choice: among the certificates whose names match the client's SNI name (exact names
//! first, then `*.` ones), else those without names (the defaults), else all of them, the
//! first, in configuration order, whose key can sign with a scheme the client offers — so
//! an ECDSA and an RSA certificate for one name serve clients of either kind.
//!
//! Reload: every file is read and checked again; only if all are good does the new set
//! replace the old (one pointer swap under a lock held for no I/O). Open connections keep
//! their session keys; the next handshakes see the new set. A failed reload is logged
//! and counted, and the old set stays. A configuration reload ([`CertStore::replace`])
//! swaps in another list of entries the same way (`[[tls]]` tables and `[[host]]` ones).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::names::NamePattern;
use crate::TlsEntry;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS certificate {path}: {reason}")]
    Cert { path: PathBuf, reason: String },
    #[error("TLS key {path} (of certificate {cert}): {reason}")]
    Key { path: PathBuf, cert: PathBuf, reason: String },
    #[error("TLS set-up: {0}")]
    Setup(String),
}

/// Certificates read and checked, not yet in force ([`CertStore::install`]).
pub struct Prepared {
    entries: Vec<TlsEntry>,
    loaded: Vec<Loaded>,
    stamps: Vec<Option<Stamp>>,
}

struct Loaded {
    names: Vec<NamePattern>,
    key: Arc<CertifiedKey>,
}

/// What identifies a file's version: a replaced (renamed over) or rewritten file differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    size_bytes: u64,
    mtime: Option<SystemTime>,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp { inode: m.ino(), size_bytes: m.len(), mtime: m.modified().ok() })
}

/// The certificates in force (see the module docs).
pub struct CertStore {
    /// Replaced whole by a configuration reload ([`CertStore::replace`]).
    entries: RwLock<Vec<TlsEntry>>,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<Vec<Loaded>>>,
    /// The files' stamps when last loaded, cert and key of each entry in turn.
    stamps: Mutex<Vec<Option<Stamp>>>,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore").field("entries", &self.entries).finish_non_exhaustive()
    }
}

impl CertStore {
    /// Loads every entry; the first bad file is the error.
    pub fn load(entries: Vec<TlsEntry>, provider: Arc<CryptoProvider>) -> Result<Arc<CertStore>, TlsError> {
        let stamps = Self::stamps_of(&entries);
        let loaded = load_all(&entries, &provider)?;
        Ok(Arc::new(CertStore {
            entries: RwLock::new(entries),
            provider,
            current: RwLock::new(Arc::new(loaded)),
            stamps: Mutex::new(stamps),
        }))
    }

    fn stamps_of(entries: &[TlsEntry]) -> Vec<Option<Stamp>> {
        entries.iter().flat_map(|e| [stamp(&e.cert), stamp(&e.key)]).collect()
    }

    pub fn provider(&self) -> Arc<CryptoProvider> {
        self.provider.clone()
    }

    pub fn resolver(self: &Arc<Self>) -> Arc<dyn ResolvesServerCert> {
        Arc::new(Resolver(self.clone()))
    }

    /// Re-reads every file; on success the new set is in force.
    pub fn reload(&self) -> Result<(), TlsError> {
        let entries = self.entries.read().expect("certificate entries lock poisoned").clone();
        self.replace(entries)
    }

    /// Loads `entries` (a reloaded configuration's); on success they are the set in
    /// force, and the files polled for changes.
    pub fn replace(&self, entries: Vec<TlsEntry>) -> Result<(), TlsError> {
        let prepared = self.prepare(entries)?;
        self.install(prepared);
        Ok(())
    }

    /// Reads and checks `entries` without putting them in force: a reload loads its
    /// certificates before it opens anything else, and installs them with the rest.
    pub fn prepare(&self, entries: Vec<TlsEntry>) -> Result<Prepared, TlsError> {
        let stamps = Self::stamps_of(&entries);
        let loaded = load_all(&entries, &self.provider)?;
        Ok(Prepared { entries, loaded, stamps })
    }

    /// Puts a prepared set in force, and its files polled for changes.
    pub fn install(&self, prepared: Prepared) {
        let Prepared { entries, loaded, stamps } = prepared;
        *self.entries.write().expect("certificate entries lock poisoned") = entries;
        *self.current.write().expect("certificate lock poisoned") = Arc::new(loaded);
        *self.stamps.lock().expect("certificate stamps lock poisoned") = stamps;
    }

    /// Re-reads the files if one changed since they were last read (or tried): `None` if
    /// none did, else the reload's outcome.
    pub fn reload_if_changed(&self) -> Option<Result<(), TlsError>> {
        self.changed().then(|| self.reload())
    }

    /// Whether a file changed since it was last loaded (or tried).
    pub fn changed(&self) -> bool {
        let now = Self::stamps_of(&self.entries.read().expect("certificate entries lock poisoned"));
        let mut last = self.stamps.lock().expect("certificate stamps lock poisoned");
        if *last == now {
            return false;
        }
        // Remember the new stamps even if the reload fails: a half-written pair is
        // tried again only when it changes again, not every poll.
        *last = now;
        true
    }

    fn choose(&self, server_name: Option<&str>, schemes: &[rustls::SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        let set = self.current.read().expect("certificate lock poisoned").clone();
        let fits = |l: &&Loaded| l.key.key.choose_scheme(schemes).is_some();
        let named = |exact: bool| {
            let name = server_name?;
            set.iter()
                .filter(|l| l.names.iter().any(|n| matches!(n, NamePattern::Exact(_)) == exact && n.matches(name)))
                .find(fits)
        };
        named(true)
            .or_else(|| named(false))
            .or_else(|| set.iter().filter(|l| l.names.is_empty()).find(fits))
            .or_else(|| set.iter().find(fits))
            .map(|l| l.key.clone())
    }
}

#[derive(Debug)]
struct Resolver(Arc<CertStore>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.choose(hello.server_name(), hello.signature_schemes())
    }
}

fn load_all(entries: &[TlsEntry], provider: &CryptoProvider) -> Result<Vec<Loaded>, TlsError> {
    entries.iter().map(|e| load_one(e, provider)).collect()
}

/// Reads one certificate chain and its key and checks they belong together.
fn load_one(entry: &TlsEntry, provider: &CryptoProvider) -> Result<Loaded, TlsError> {
    let cert_err = |reason: String| TlsError::Cert { path: entry.cert.clone(), reason };
    let key_err = |reason: String| TlsError::Key { path: entry.key.clone(), cert: entry.cert.clone(), reason };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&entry.cert)
        .map_err(|e| cert_err(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| cert_err(e.to_string()))?;
    if chain.is_empty() {
        return Err(cert_err("no PEM CERTIFICATE block".into()));
    }
    let key = PrivateKeyDer::from_pem_file(&entry.key).map_err(|e| key_err(e.to_string()))?;
    let signing = provider.key_provider.load_private_key(key).map_err(|e| key_err(e.to_string()))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => key_err("does not match the certificate's public key".into()),
        e => cert_err(format!("not a usable certificate ({e})")),
    })?;
    let names = entry.names.iter().filter_map(|n| NamePattern::parse(n).ok()).collect();
    Ok(Loaded { names, key: Arc::new(certified) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::SignatureScheme as S;

    /// A self-signed certificate for `name` (RSA or ECDSA P-256) written to `dir`.
    fn entry(dir: &Path, stem: &str, name: &str, rsa: bool, names: &[&str]) -> TlsEntry {
        let alg = if rsa { &rcgen::PKCS_RSA_SHA256 } else { &rcgen::PKCS_ECDSA_P256_SHA256 };
        let key = rcgen::KeyPair::generate_for(alg).unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap().self_signed(&key).unwrap();
        let (cert_path, key_path) = (dir.join(format!("{stem}.crt")), dir.join(format!("{stem}.key")));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        TlsEntry { cert: cert_path, key: key_path, names: names.iter().map(|n| n.to_string()).collect() }
    }

    #[test]
    fn chosen_by_name_then_by_the_schemes_the_client_offers() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let entries = vec![
            entry(d, "default", "localhost", false, &[]),
            entry(d, "ec", "example.com", false, &["example.com"]),
            entry(d, "rsa", "example.com", true, &["example.com"]),
            entry(d, "wild", "x.example.com", false, &["*.example.com"]),
        ];
        let store = CertStore::load(entries, crate::provider()).unwrap();
        let leaf = |i: usize| store.current.read().unwrap()[i].key.cert[0].clone();
        let ec: &[S] = &[S::ECDSA_NISTP256_SHA256];
        let rsa: &[S] = &[S::RSA_PSS_SHA256, S::RSA_PKCS1_SHA256];
        let both: &[S] = &[S::ECDSA_NISTP256_SHA256, S::RSA_PSS_SHA256];
        // (server name, schemes offered) → the entry chosen
        let cases: &[(Option<&str>, &[S], Option<usize>)] = &[
            (Some("example.com"), both, Some(1)),
            (Some("EXAMPLE.com"), rsa, Some(2)),
            (Some("example.com"), ec, Some(1)),
            (Some("a.example.com"), both, Some(3)),
            // Only the RSA certificate can sign for this client: whatever its name.
            (Some("a.example.com"), rsa, Some(2)),
            (Some("other.test"), both, Some(0)),
            (None, ec, Some(0)),
            (None, &[S::ED25519], None),
        ];
        for &(name, schemes, want) in cases {
            let got = store.choose(name, schemes).map(|k| k.cert[0].clone());
            assert_eq!(got, want.map(leaf), "{name:?} {schemes:?}");
        }
    }

    #[test]
    fn a_changed_file_is_noticed_once_and_a_bad_reload_keeps_the_set() {
        let dir = tempfile::tempdir().unwrap();
        let e = entry(dir.path(), "site", "localhost", false, &[]);
        let store = CertStore::load(vec![e.clone()], crate::provider()).unwrap();
        assert!(!store.changed());
        let before = store.choose(None, &[S::ECDSA_NISTP256_SHA256]).unwrap().cert[0].clone();
        std::fs::write(&e.cert, "not PEM").unwrap();
        assert!(store.changed());
        assert!(!store.changed(), "noticed once, not at every poll");
        let err = store.reload().unwrap_err().to_string();
        assert!(err.contains(&e.cert.display().to_string()), "{err}");
        let after = store.choose(None, &[S::ECDSA_NISTP256_SHA256]).unwrap().cert[0].clone();
        assert_eq!(before, after, "the set in force stays");
    }
}

//! Certificates for the TLS tests, generated here (rcgen): a test CA and leaves it signs,
//! written to a directory as the server reads them, and a client that trusts the CA.

use std::path::Path;
use std::sync::Arc;

use rcgen::{BasicConstraints, Certificate, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::CertificateDer;
use shortfirst_server::TlsEntry;

/// A test certificate authority.
pub struct Ca {
    cert: Certificate,
    key: KeyPair,
}

impl Ca {
    pub fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, "shortfirst test CA");
        let key = KeyPair::generate().unwrap();
        Ca { cert: params.self_signed(&key).unwrap(), key }
    }

    pub fn der(&self) -> &[u8] {
        self.cert.der()
    }

    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    /// A leaf for `names` signed by this CA, written as `<stem>.crt` and `<stem>.key` in
    /// `dir`; RSA if `rsa`, else ECDSA P-256. Returns the entry and the leaf's DER.
    pub fn leaf(&self, dir: &Path, stem: &str, names: &[&str], rsa: bool) -> (TlsEntry, Vec<u8>) {
        let key = if rsa { KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256) } else { KeyPair::generate() }.unwrap();
        let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, names[0]);
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let (cert_path, key_path) = (dir.join(format!("{stem}.crt")), dir.join(format!("{stem}.key")));
        write_atomically(&cert_path, cert.pem().as_bytes());
        write_atomically(&key_path, key.serialize_pem().as_bytes());
        (TlsEntry { cert: cert_path, key: key_path, names: Vec::new() }, cert.der().to_vec())
    }
}

/// A CA and an ECDSA leaf for `localhost` it signs, in `dir` (`leaf.crt`, `leaf.key`, and
/// the CA as `ca.crt` for command-line clients). Returns the entry and the CA's DER.
pub fn localhost(dir: &Path) -> (TlsEntry, Vec<u8>) {
    let ca = Ca::new();
    let (entry, _) = ca.leaf(dir, "leaf", &["localhost"], false);
    write_atomically(&dir.join("ca.crt"), ca.pem().as_bytes());
    (entry, ca.der().to_vec())
}

/// Replaces a file whole (a rename), as certificate tools do.
pub fn write_atomically(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A TLS client that trusts only `ca_der` and offers `alpn`.
pub fn client(ca_der: &[u8], alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca_der.to_vec())).unwrap();
    let mut c = rustls::ClientConfig::builder_with_provider(shortfirst_server::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(c))
}

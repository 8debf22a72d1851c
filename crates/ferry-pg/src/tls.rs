//! TLS to PostgreSQL as libpq does it: `sslmode` (`disable`, `allow`, `prefer`, `require`,
//! `verify-ca`, `verify-full`) and `sslrootcert`, from the connection string or `PGSSLMODE`
//! and `PGSSLROOTCERT`. tokio-postgres knows only disable/prefer/require and no root
//! certificate, so both are taken out of the string here and enforced by the rustls verifier.
//!
//! As in libpq: `prefer` (the default) and `require` encrypt without checking whose
//! certificate it is, unless a root certificate is given (or `~/.postgresql/root.crt`
//! exists), when `require` checks the chain like `verify-ca`; `verify-ca` checks the chain;
//! `verify-full` the chain and the host name. `allow` is taken as `prefer` (libpq would try
//! plaintext first).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferry_transfer::{Error, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No TLS.
    Disable,
    /// TLS if the server offers it; libpq tries plaintext first, ferry TLS first.
    Allow,
    /// TLS if the server offers it (libpq's default).
    Prefer,
    /// TLS or no connection.
    Require,
    /// TLS, the chain checked against the root certificate.
    VerifyCa,
    /// TLS, the chain and the host name checked.
    VerifyFull,
}

/// The TLS settings of one connection string.
#[derive(Debug, Clone)]
pub struct Tls {
    /// The mode.
    pub mode: Mode,
    /// The root certificate file (`system`: the system's trust store).
    pub root: Option<PathBuf>,
}

impl Mode {
    fn parse(v: &str) -> Result<Mode> {
        Ok(match v {
            "disable" => Mode::Disable,
            "allow" => Mode::Allow,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            _ => {
                return Err(Error::Invalid(format!(
                    "sslmode '{v}': want disable, allow, prefer, require, verify-ca or verify-full"
                )))
            }
        })
    }
}

/// Takes `sslmode` and `sslrootcert` out of `conninfo` (key=value form or URL), falling back
/// to `PGSSLMODE` and `PGSSLROOTCERT`; returns the rest for tokio-postgres.
pub fn split(conninfo: &str) -> Result<(String, Tls)> {
    let (rest, mode, root) =
        if conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://") {
            split_url(conninfo)
        } else {
            split_pairs(conninfo)
        };
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let mode = Mode::parse(&mode.or_else(|| env("PGSSLMODE")).unwrap_or("prefer".into()))?;
    let root = root.or_else(|| env("PGSSLROOTCERT")).map(PathBuf::from);
    Ok((rest, Tls { mode, root }))
}

type Split = (String, Option<String>, Option<String>);

fn split_url(url: &str) -> Split {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), None, None);
    };
    let (mut mode, mut root, mut keep) = (None, None, Vec::new());
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("sslmode", v)) => mode = Some(v.to_string()),
            Some(("sslrootcert", v)) => root = Some(v.replace("%2F", "/").replace("%2f", "/")),
            _ => keep.push(pair),
        }
    }
    let rest = match keep.is_empty() {
        true => base.to_string(),
        false => format!("{base}?{}", keep.join("&")),
    };
    (rest, mode, root)
}

/// key=value pairs, values plain or single-quoted with backslash escapes, as libpq reads them.
fn split_pairs(s: &str) -> Split {
    let (mut mode, mut root, mut keep) = (None, None, Vec::new());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        while i < b.len() && b[i] != b'=' && !b[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = &s[start..i];
        while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b'=') {
            i += 1;
        }
        let (mut value, vstart) = (String::new(), i);
        if i < b.len() && b[i] == b'\'' {
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    i += 1;
                }
                value.push(b[i] as char);
                i += 1;
            }
            i += 1;
        } else {
            while i < b.len() && !b[i].is_ascii_whitespace() {
                i += 1;
            }
            value = s[vstart..i].to_string();
        }
        match key {
            "" => {}
            "sslmode" => mode = Some(value),
            "sslrootcert" => root = Some(value),
            _ => keep.push(s[start..i.min(s.len())].to_string()),
        }
    }
    (keep.join(" "), mode, root)
}

impl Tls {
    /// What tokio-postgres negotiates.
    pub fn ssl_mode(&self) -> SslMode {
        match self.mode {
            Mode::Disable => SslMode::Disable,
            Mode::Allow | Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }

    /// The connector, with the verifier this mode asks for.
    pub fn connector(&self) -> Result<MakeRustlsConnect> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let default_root = std::env::var_os("HOME")
            .map(|h| Path::new(&h).join(".postgresql/root.crt"))
            .filter(|p| p.exists());
        let root = self.root.clone().or(default_root);
        let check = match (self.mode, &root) {
            (Mode::VerifyFull, Some(_)) => Check::Full,
            (Mode::VerifyCa, Some(_)) | (Mode::Require, Some(_)) => Check::Chain,
            (Mode::VerifyCa | Mode::VerifyFull, None) => {
                return Err(Error::Invalid(
                    "sslmode verify-ca/verify-full needs a root certificate: set sslrootcert \
                     (a PEM file, or 'system') or put it in ~/.postgresql/root.crt"
                        .into(),
                ))
            }
            _ => Check::Nothing,
        };
        let chain = match check {
            Check::Nothing => None,
            _ => {
                let roots = roots(root.as_deref().expect("checked above"))?;
                let v =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| Error::Invalid(format!("sslrootcert: {e}")))?;
                Some(v)
            }
        };
        let verifier = Arc::new(Verifier {
            chain,
            name: check == Check::Full,
            provider: provider.clone(),
        });
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Invalid(format!("TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    Full,
}

/// The trust anchors in `path` (PEM), or the system's for `system`.
fn roots(path: &Path) -> Result<RootCertStore> {
    let file = match path.to_str() {
        Some("system") => std::env::var_os("SSL_CERT_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/etc/ssl/certs/ca-certificates.crt".into()),
        _ => path.to_path_buf(),
    };
    let bad =
        |e: &dyn std::fmt::Display| Error::Invalid(format!("sslrootcert {}: {e}", file.display()));
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&file).map_err(|e| bad(&e))? {
        store.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
    }
    if store.is_empty() {
        return Err(bad(&"no certificate in it"));
    }
    Ok(store)
}

/// The server-certificate check of one mode: none (`prefer`/`require` without a root
/// certificate, as libpq: encrypted, anyone's certificate taken), the chain (`verify-ca`:
/// a name mismatch is forgiven), or chain and name (`verify-full`). The handshake's
/// signatures are checked in every mode.
#[derive(Debug)]
struct Verifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
    name: bool,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self, end_entity: &CertificateDer<'_>, intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>, ocsp: &[u8], now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.name => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.provider.signature_verification_algorithms;
        verify_tls12_signature(message, cert, dss, algs)
    }

    fn verify_tls13_signature(
        &self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.provider.signature_verification_algorithms;
        verify_tls13_signature(message, cert, dss, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssl_settings_come_out_of_both_forms() {
        let (rest, t) =
            split("host=h sslmode=verify-full sslrootcert='/a b/ca.pem' user=u").unwrap();
        assert_eq!(rest, "host=h user=u");
        assert_eq!(t.mode, Mode::VerifyFull);
        assert_eq!(t.root.as_deref(), Some(Path::new("/a b/ca.pem")));
        let (rest, t) =
            split("postgres://u@h/db?sslmode=verify-ca&sslrootcert=%2Fca.pem&x=1").unwrap();
        assert_eq!(rest, "postgres://u@h/db?x=1");
        assert_eq!(t.mode, Mode::VerifyCa);
        assert_eq!(t.root.as_deref(), Some(Path::new("/ca.pem")));
        assert!(split("host=h sslmode=bogus").is_err());
    }
}

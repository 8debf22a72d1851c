//! TLS to PostgreSQL as libpq does it: `sslmode` (`disable`, `allow`, `prefer`, `require`,
//! `verify-ca`, `verify-full`), `sslrootcert`, and the client certificate `sslcert` with its
//! key `sslkey`, from the connection string or `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT` and
//! `PGSSLKEY` (the certificate by default `~/.postgresql/postgresql.crt` when it exists).
//! tokio-postgres knows only disable/prefer/require, no root certificate and no client
//! certificate, so they are taken out of the string here and handed to rustls.
//!
//! As in libpq: `prefer` (the default) and `require` encrypt without checking whose
//! certificate it is, unless a root certificate is given (or `~/.postgresql/root.crt`
//! exists), when `require` checks the chain like `verify-ca`; `verify-ca` checks the chain;
//! `verify-full` the chain and the host name. `allow` is taken as `prefer` (libpq would try
//! plaintext first).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferry_transfer::{Error, Result};

use crate::libpq::Taken;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
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
    /// The client certificate (PEM, the chain) and its key, for servers that ask for one
    /// (`cert` authentication, `clientcert=verify-full`).
    pub cert: Option<(PathBuf, PathBuf)>,
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

/// Takes `sslmode`, `sslrootcert`, `sslcert` and `sslkey` out of what
/// [`crate::libpq::take`] took from a connection string, falling back to `PGSSLMODE`,
/// `PGSSLROOTCERT`, `PGSSLCERT` and `PGSSLKEY`. An explicit certificate must exist; the
/// default one is used when it does.
pub fn settings(taken: &mut Taken) -> Result<Tls> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let mut get = |k: &str, var: &str| taken.remove(k).or_else(|| env(var));
    let mode = Mode::parse(&get("sslmode", "PGSSLMODE").unwrap_or("prefer".into()))?;
    let root = get("sslrootcert", "PGSSLROOTCERT").map(PathBuf::from);
    let cert = get("sslcert", "PGSSLCERT").map(PathBuf::from);
    let key = get("sslkey", "PGSSLKEY").map(PathBuf::from);
    let home = || crate::home::home().map(|h| h.join(".postgresql"));
    let cert = match cert {
        // No TLS, no certificate to send (libpq loads it only once TLS is negotiated).
        _ if mode == Mode::Disable => None,
        Some(c) if !c.exists() => {
            return Err(Error::Invalid(format!(
                "sslcert {}: no such file",
                c.display()
            )))
        }
        Some(c) => Some(c),
        None => home()
            .map(|d| d.join("postgresql.crt"))
            .filter(|c| c.exists()),
    };
    let cert = cert.map(|c| {
        let key = key
            .or_else(|| home().map(|d| d.join("postgresql.key")))
            .unwrap_or_else(|| c.with_extension("key"));
        (c, key)
    });
    Ok(Tls { mode, root, cert })
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
        let default_root = crate::home::home()
            .map(|h| h.join(".postgresql/root.crt"))
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
            .with_custom_certificate_verifier(verifier);
        let config = match &self.cert {
            None => config.with_no_client_auth(),
            Some((cert, key)) => {
                let (chain, key) = client_cert(cert, key)?;
                config
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| Error::Invalid(format!("sslcert {}: {e}", cert.display())))?
            }
        };
        Ok(MakeRustlsConnect::new(config))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    Full,
}

/// The client certificate chain in `cert` and its private key in `key` (PEM). As libpq, a
/// key that others may read is refused: 0600 or less, or 0640 when root owns it.
fn client_cert(
    cert: &Path, key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    use std::os::unix::fs::MetadataExt;
    let bad = |what: &str, p: &Path, e: &dyn std::fmt::Display| {
        Error::Invalid(format!("{what} {}: {e}", p.display()))
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad("sslcert", cert, &e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad("sslcert", cert, &e))?;
    if chain.is_empty() {
        return Err(bad("sslcert", cert, &"no certificate in it"));
    }
    // Opened once, and its mode checked on what was opened: not a name that could be
    // swapped for another file in between.
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(key)
            .map_err(|e| bad("sslkey", key, &e))?
    };
    let meta = file.metadata().map_err(|e| bad("sslkey", key, &e))?;
    let allowed = if meta.uid() == 0 { 0o037 } else { 0o077 };
    if !meta.is_file() || meta.mode() & allowed != 0 {
        return Err(bad(
            "sslkey",
            key,
            &"not a plain file, or has group or world access (chmod 0600 it, as libpq wants)",
        ));
    }
    let mut reader = std::io::BufReader::new(std::io::Read::take(file, 1 << 20));
    let pem = PrivateKeyDer::from_pem_reader(&mut reader).map_err(|e| bad("sslkey", key, &e))?;
    Ok((chain, pem))
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

    fn split(conninfo: &str) -> Result<(String, Tls)> {
        let (rest, mut taken) = crate::libpq::take(conninfo)?;
        Ok((rest, settings(&mut taken)?))
    }

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
        let here = std::env::current_exe().unwrap();
        let (rest, t) = split(&format!(
            "host=h sslcert={} sslkey=/k user=u",
            here.display()
        ))
        .unwrap();
        assert_eq!(rest, "host=h user=u");
        assert_eq!(t.cert, Some((here.clone(), PathBuf::from("/k"))));
        let e = split("postgres://u@h/db?sslcert=%2Fno%2Fsuch.crt").unwrap_err();
        assert!(e.to_string().contains("no such file"), "{e}");
    }
}

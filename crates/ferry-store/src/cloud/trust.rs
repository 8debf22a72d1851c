//! Which servers the HTTP client believes: those whose chain ends at the system's roots or at
//! a certificate of the `--ca-cert` bundle; and a server whose certificate *is* one of the
//! bundle's, byte for byte.
//!
//! The second is how most how-tos make a MinIO certificate (`openssl req -x509 ...`: a
//! self-signed certificate, often CA:TRUE, that is its own trust anchor). webpki refuses a CA
//! certificate in the end-entity position (`CaUsedAsEndEntity`), where curl, rclone, restic
//! and pgBackRest accept the file as the anchor. Pinning the exact bytes trusts nothing more
//! than the operator gave; the host name and the validity period are still checked.
//!
//! A refused certificate fails with one line naming what the server presented and what was
//! expected: the operator at 3 a.m. needs both to tell a wrong file from a wrong server.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, SignatureScheme};
use x509_cert::der::Decode;
use x509_cert::Certificate;

/// The `--ca-cert` bundle: its file name and certificates.
#[derive(Debug)]
pub(super) struct Bundle {
    pub name: String,
    pub certs: Vec<CertificateDer<'static>>,
}

/// The verifier of every TLS connection to a store.
#[derive(Debug)]
pub(super) struct Trust {
    chain: Arc<dyn ServerCertVerifier>,
    bundle: Option<Bundle>,
    provider: Arc<CryptoProvider>,
}

impl Trust {
    pub(super) fn new(
        chain: Arc<dyn ServerCertVerifier>, bundle: Option<Bundle>, provider: Arc<CryptoProvider>,
    ) -> Self {
        Self {
            chain,
            bundle,
            provider,
        }
    }

    fn pinned(&self, ee: &CertificateDer<'_>) -> bool {
        self.bundle
            .as_ref()
            .is_some_and(|b| b.certs.iter().any(|c| c.as_ref() == ee.as_ref()))
    }

    /// What the operator asked to be trusted, for the refusal's line.
    fn expected(&self) -> String {
        match &self.bundle {
            None => {
                "a certificate from the system's trusted roots (give --ca-cert for another)".into()
            }
            Some(b) => {
                // A system bundle holds a hundred roots: name them only when few.
                let names = match b.certs.len() {
                    1..=3 => b
                        .certs
                        .iter()
                        .map(|c| describe(c).subject)
                        .collect::<Vec<_>>()
                        .join("; "),
                    n => format!("{n} certificates"),
                };
                format!(
                    "a certificate from the system's roots or from {} ({names})",
                    b.name
                )
            }
        }
    }

    fn refuse(&self, ee: &CertificateDer<'_>, host: &ServerName<'_>, why: &str) -> rustls::Error {
        let d = describe(ee);
        let msg = format!(
            "{} presented '{}' issued by '{}' (valid {}): {why}; expected {}",
            host.to_str(),
            d.subject,
            d.issuer,
            d.validity,
            self.expected()
        );
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(Refused(
            msg,
        )))))
    }
}

/// A refused server certificate, said in one line.
#[derive(Debug, Clone)]
pub(super) struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "certificate refused: {}", self.0)
    }
}

impl std::error::Error for Refused {}

/// The [`Refused`] somewhere in a connection error's chain: rustls reports it inside an I/O
/// error inside hyper's, each adding a Debug-formatted layer.
pub(super) fn refused(e: &(dyn std::error::Error + 'static)) -> Option<Refused> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(rustls::Error::InvalidCertificate(CertificateError::Other(o))) =
            e.downcast_ref::<rustls::Error>()
        {
            return o.0.downcast_ref::<Refused>().cloned();
        }
        // An I/O error's source() skips the error it wraps: look inside it instead.
        next = match e.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|i| i as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// A verifier's refusal in words (webpki's names are for programmers).
fn reason(e: &rustls::Error) -> String {
    let text = format!("{e:?}");
    let said = [
        (
            "CaUsedAsEndEntity",
            "it is a CA certificate that is not itself in --ca-cert",
        ),
        ("UnknownIssuer", "its issuer is not trusted"),
        ("NotValidForName", "it is not valid for this host name"),
        ("Expired", "it has expired"),
        ("NotValidYet", "it is not valid yet"),
        ("BadSignature", "its signature does not verify"),
        ("Revoked", "it is revoked"),
    ];
    said.iter()
        .find(|(k, _)| text.contains(k))
        .map(|(_, s)| s.to_string())
        .unwrap_or(text)
}

/// The parts of a certificate an operator recognises.
struct Described {
    subject: String,
    issuer: String,
    validity: String,
    /// Not before and not after, seconds since the epoch.
    window: Option<(u64, u64)>,
}

fn describe(der: &CertificateDer<'_>) -> Described {
    match Certificate::from_der(der.as_ref()) {
        Err(e) => Described {
            subject: format!("an unreadable certificate ({e})"),
            issuer: "?".into(),
            validity: "?".into(),
            window: None,
        },
        Ok(c) => {
            let v = &c.tbs_certificate.validity;
            // The names are the server's words: escaped, so that no control character
            // reaches the operator's terminal.
            let shown = |n: &x509_cert::name::Name| n.to_string().escape_debug().to_string();
            Described {
                subject: shown(&c.tbs_certificate.subject),
                issuer: shown(&c.tbs_certificate.issuer),
                validity: format!("{} to {}", v.not_before, v.not_after),
                window: Some((
                    v.not_before.to_unix_duration().as_secs(),
                    v.not_after.to_unix_duration().as_secs(),
                )),
            }
        }
    }
}

/// The checks a pinned certificate still gets: its validity period and the host name.
fn check_pinned(
    ee: &CertificateDer<'_>, host: &ServerName<'_>, now: UnixTime,
) -> Result<(), &'static str> {
    let (from, until) = describe(ee).window.ok_or("it cannot be parsed")?;
    let now = now.as_secs();
    if now < from {
        return Err("it is not valid yet");
    }
    if now > until {
        return Err("it has expired");
    }
    let cert = webpki::EndEntityCert::try_from(ee).map_err(|_| "it cannot be parsed")?;
    cert.verify_is_valid_for_subject_name(host)
        .map_err(|_| "it is not valid for this host name")
}

impl ServerCertVerifier for Trust {
    fn verify_server_cert(
        &self, ee: &CertificateDer<'_>, intermediates: &[CertificateDer<'_>],
        host: &ServerName<'_>, ocsp: &[u8], now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.pinned(ee) {
            return check_pinned(ee, host, now)
                .map(|()| ServerCertVerified::assertion())
                .map_err(|why| self.refuse(ee, host, why));
        }
        self.chain
            .verify_server_cert(ee, intermediates, host, ocsp, now)
            .map_err(|e| self.refuse(ee, host, &reason(&e)))
    }

    fn verify_tls12_signature(
        &self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
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
    use rustls::pki_types::pem::PemObject;
    use std::time::Duration;

    /// A certificate as the how-tos make it, by the same openssl command.
    fn self_signed() -> CertificateDer<'static> {
        made_for("/CN=127.0.0.1")
    }

    fn made_for(subject: &str) -> CertificateDer<'static> {
        // One directory per certificate: the tests run at once.
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ferry-trust-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = std::process::Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
            ])
            .args(["-subj", subject, "-addext", "subjectAltName=IP:127.0.0.1"])
            .arg("-keyout")
            .arg(dir.join("k"))
            .arg("-out")
            .arg(dir.join("c"))
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "openssl req -x509 failed");
        let c = CertificateDer::from_pem_file(dir.join("c")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        c
    }

    #[test]
    fn a_pinned_certificate_still_needs_its_name_and_its_dates() {
        let c = self_signed();
        let ip = ServerName::try_from("127.0.0.1").unwrap();
        let now = UnixTime::now();
        let at = |days: i64| {
            let secs = now.as_secs() as i64 + days * 86_400;
            UnixTime::since_unix_epoch(Duration::from_secs(secs as u64))
        };
        assert_eq!(check_pinned(&c, &ip, now), Ok(()));
        let other = ServerName::try_from("localhost").unwrap();
        assert_eq!(
            check_pinned(&c, &other, now),
            Err("it is not valid for this host name")
        );
        assert_eq!(check_pinned(&c, &ip, at(31)), Err("it has expired"));
        assert_eq!(check_pinned(&c, &ip, at(-1)), Err("it is not valid yet"));
        let garbage = CertificateDer::from(vec![0x30, 0x03, 1, 2, 3]);
        assert_eq!(check_pinned(&garbage, &ip, now), Err("it cannot be parsed"));
    }

    #[test]
    fn a_hostile_certificate_name_is_shown_escaped() {
        let c = made_for("/CN=a\u{1b}[2Jb");
        let d = describe(&c);
        assert!(
            !d.subject.contains('\u{1b}') && d.subject.contains("[2Jb"),
            "{}",
            d.subject
        );
        assert!(!d.issuer.contains('\u{1b}'), "{}", d.issuer);
    }
}

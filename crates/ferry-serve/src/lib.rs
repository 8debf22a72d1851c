//! `ferry serve`: one HTTPS server that is a store for many tenants. Clients keep their keys
//! (the server sees only sealed objects); the server keeps each tenant in its prefix and
//! role, counts its quota, and schedules requests fairly between tenants with WAL first
//! (see `docs/serve.md`). It speaks ferry's own object protocol and restic's REST backend
//! protocol (v2), and writes through the transfer engine to any backend ferry has.
#![warn(missing_docs)]

pub mod answer;
pub mod config;
pub mod keys;
pub mod listings;
pub mod logline;
pub mod metrics;
pub mod peers;
pub mod route;
pub mod sched;
pub mod server;
pub mod stall;
pub mod store;

use std::net::SocketAddr;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

pub use config::Config;
pub use server::Server;

/// The TLS settings for `cfg`'s certificate and key (HTTP/1.1 only).
pub fn tls(cfg: &Config) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs = CertificateDer::pem_file_iter(&cfg.tls_cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", cfg.tls_cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate", cfg.tls_cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&cfg.tls_key)
        .map_err(|e| format!("{}: {e}", cfg.tls_key.display()))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &cfg.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            let pems = CertificateDer::pem_file_iter(ca)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("{}: {e}", ca.display()))?;
            for c in pems {
                roots.add(c).map_err(|e| format!("{}: {e}", ca.display()))?;
            }
            // Optional: clients without a certificate authenticate with a token.
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .allow_unauthenticated()
            .build()
            .map_err(|e| format!("{}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut c = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("{}: {e}", cfg.tls_cert.display()))?;
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(c))
}

/// Binds `cfg.listen` and serves until the returned future is dropped; `bound` is told the
/// address once the socket listens.
pub async fn run(
    cfg: &Config, backend: ferry_transfer::Remote, base: &str, bound: impl FnOnce(SocketAddr),
) -> Result<(), String> {
    let tls = tls(cfg)?;
    let server = Arc::new(Server::new(cfg, backend, base)?);
    let listener = tokio::net::TcpListener::bind(&cfg.listen)
        .await
        .map_err(|e| format!("listen on {}: {e}", cfg.listen))?;
    bound(listener.local_addr().map_err(|e| e.to_string())?);
    server.serve(listener, tls).await;
    Ok(())
}

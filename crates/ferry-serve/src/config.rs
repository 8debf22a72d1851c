//! `serve.toml`: where to listen, the certificate, the backend, the limits and the tenants.

use std::path::PathBuf;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::sched::Limits;

/// What one server process serves: the `[serve]` table of ferry's config file. Its `Debug`
/// shows the backend without its query (a SAS token) and no token hash.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address and port to listen on (`127.0.0.1:8443`).
    pub listen: String,
    /// Where objects go: any location ferry opens (a directory, `s3://bucket/prefix`, ...).
    pub backend: String,
    /// PEM certificate chain and private key: the server speaks HTTPS only.
    pub tls_cert: PathBuf,
    /// See [`Config::tls_cert`].
    pub tls_key: PathBuf,
    /// PEM CA certificates that sign client certificates: with it, a client may present a
    /// certificate instead of a token (see [`Tenant::client_cert_subject`]).
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    /// SHA-256 of the token `/metrics` asks for; without it, `/metrics` is open (bind to
    /// loopback then).
    #[serde(default)]
    pub metrics_token_sha256: Option<String>,
    /// Scheduling and memory bounds.
    #[serde(default)]
    pub limits: Limits,
    /// Who may use the server.
    #[serde(rename = "tenant", default)]
    pub tenants: Vec<Tenant>,
}

/// One client of the server: its own prefix, token, role and quota. Its `Debug` shows no
/// token hash.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    /// The tenant's name: the first segment of every path it uses, and its prefix.
    pub name: String,
    /// SHA-256 (hex) of the tenant's token. Tokens are 32 random bytes, so a slow hash
    /// would buy nothing and cost every request.
    pub token_sha256: String,
    /// What the tenant may do.
    pub role: Role,
    /// The subject (`CN=db1,O=example`, as RFC 4514 writes it) of a client certificate,
    /// signed by `client_ca`, that authenticates this tenant as its token does.
    #[serde(default)]
    pub client_cert_subject: Option<String>,
    /// Most bytes the tenant may hold (`10GiB`); none when absent.
    #[serde(default)]
    pub quota: Option<String>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("backend", &ferry_store::Location::shown(&self.backend))
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("client_ca", &self.client_ca)
            .field(
                "metrics_token_sha256",
                &self.metrics_token_sha256.as_ref().map(|_| "***"),
            )
            .field("limits", &self.limits)
            .field("tenants", &self.tenants)
            .finish()
    }
}

impl std::fmt::Debug for Tenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenant")
            .field("name", &self.name)
            .field("token_sha256", &"***")
            .field("role", &self.role)
            .field("client_cert_subject", &self.client_cert_subject)
            .field("quota", &self.quota)
            .finish()
    }
}

/// What a tenant may do inside its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Read and list.
    Read,
    /// Read, list, and create objects that do not exist; never delete or overwrite (restic
    /// locks excepted: a client removes its own lock).
    AppendOnly,
    /// Everything inside the prefix.
    Admin,
}

impl Config {
    /// Checks what serde cannot: tenant names, token hashes, quotas.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for t in &self.tenants {
            if !ferry_store::is_tenant_name(&t.name) {
                return Err(format!(
                    "tenant name {:?}: {}",
                    t.name,
                    ferry_store::TENANT_NAME
                ));
            }
            if !seen.insert(&t.name) {
                return Err(format!("tenant {} is listed twice", t.name));
            }
            parse_hash(&t.token_sha256).map_err(|e| format!("tenant {}: {e}", t.name))?;
            t.quota_bytes()
                .map_err(|e| format!("tenant {}: {e}", t.name))?;
        }
        if let Some(h) = &self.metrics_token_sha256 {
            parse_hash(h).map_err(|e| format!("metrics_token_sha256: {e}"))?;
        }
        Ok(())
    }
}

impl Tenant {
    /// The quota in bytes, if any.
    pub fn quota_bytes(&self) -> Result<Option<u64>, String> {
        self.quota
            .as_deref()
            .map(|q| ferry_store::size::parse(q).ok_or(format!("quota {q:?}: not a size")))
            .transpose()
    }

    /// True when `digest` ([`digest`] of a presented token) is this tenant's token's.
    pub fn digest_matches(&self, digest: &[u8; 32]) -> bool {
        parse_hash(&self.token_sha256).is_ok_and(|want| digest.ct_eq(&want).into())
    }
}

/// SHA-256 of a presented token.
pub fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// True when SHA-256 of `token` is `hash_hex`, compared in constant time.
pub fn hash_matches(hash_hex: &str, token: &[u8]) -> bool {
    let Ok(want) = parse_hash(hash_hex) else {
        return false;
    };
    digest(token).ct_eq(&want).into()
}

fn parse_hash(h: &str) -> Result<[u8; 32], String> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(h, &mut out).map_err(|_| "token_sha256: 64 hex digits".to_string())?;
    Ok(out)
}

/// A new token (32 random bytes, hex) and its SHA-256 for `serve.toml`.
pub fn new_token() -> (String, String) {
    let bytes: [u8; 32] = rand::random();
    let token = hex::encode(bytes);
    let hash = hex::encode(Sha256::digest(token.as_bytes()));
    (token, hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Printed, a config shows neither the backend's SAS token nor a token's hash.
    #[test]
    fn debug_shows_no_secret() {
        let hash = "ab".repeat(32);
        let c: Config = toml::from_str(&format!(
            r#"
            listen = "127.0.0.1:8443"
            backend = "https://a.blob.core.windows.net/c/r?sv=1&sig=SIGSECRET"
            tls_cert = "/c.pem"
            tls_key = "/k.pem"
            metrics_token_sha256 = "{hash}"
            [[tenant]]
            name = "db1"
            token_sha256 = "{hash}"
            role = "admin"
            "#
        ))
        .unwrap();
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("SIGSECRET") && !shown.contains(&hash),
            "{shown}"
        );
        assert!(
            shown.contains("a.blob.core.windows.net/c/r") && shown.contains("db1"),
            "{shown}"
        );
    }
}

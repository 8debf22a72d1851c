//! Endpoints and credentials, read by each cloud's own conventions: one module per cloud,
//! and what they share.

mod azure;
mod gcs;
mod s3;

use std::path::PathBuf;
use std::time::Duration;

use object_store::{ClientOptions, RetryConfig};

pub use azure::AzureConfig;
pub use gcs::GcsConfig;
pub use s3::S3Config;
pub(super) use s3::S3Extra;

use super::metered::{Connector, CONNECT_TIMEOUT};
use crate::{Error, Result};

pub(super) fn env(names: &[&str]) -> Option<String> {
    names
        .iter()
        .find_map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()))
}

/// `object_store`'s settings for both clouds: the engine owns retries and watches each
/// request for a stall, so the crate's own retries are off and its total timeout is only a
/// backstop. The connection itself is [`Connector`]'s.
pub(super) fn client_options(endpoint: Option<&str>) -> ClientOptions {
    ClientOptions::new()
        .with_timeout(Duration::from_secs(24 * 3600))
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_allow_http(endpoint.is_some_and(|e| e.starts_with("http://")))
}

/// The metered HTTP client, trusting `ca_cert` besides the system's roots.
pub(crate) fn connector(ca_cert: Option<&PathBuf>) -> Result<Connector> {
    match ca_cert {
        None => Connector::new(None),
        Some(ca) => {
            let pem = std::fs::read(ca).map_err(|e| Error::io(ca.display(), e))?;
            Connector::new(Some((&ca.display().to_string(), &pem)))
        }
    }
}

pub(super) fn no_retries() -> RetryConfig {
    RetryConfig {
        max_retries: 0,
        ..Default::default()
    }
}

/// `value` if it is one of `known` (any case), in the cloud's spelling; else one line.
pub(super) fn pick_class(value: &str, known: &[&str], cloud: &str) -> Result<String> {
    known
        .iter()
        .find(|k| k.eq_ignore_ascii_case(value))
        .map(|k| k.to_string())
        .ok_or_else(|| {
            Error::Invalid(format!(
                "storage class '{value}' is not one of {cloud}'s: {}",
                known.join(", ")
            ))
        })
}

/// `***` for a secret that is set: configs are printed in debug output, secrets never.
pub(super) fn hidden(s: &Option<String>) -> Option<&'static str> {
    s.as_ref().map(|_| "***")
}

#[cfg(test)]
mod secret_tests {
    use super::*;

    #[test]
    fn a_sas_connection_string_names_its_account_by_its_endpoint() {
        let c = AzureConfig::from_connection_string(
            "BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature=sv=1&sig=a%3D",
        );
        assert_eq!(c.account.as_deref(), Some("acct"));
        assert_eq!(c.sas_token.as_deref(), Some("sv=1&sig=a%3D"));
        let c = AzureConfig::from_connection_string(
            "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;SharedAccessSignature=sv=1",
        );
        assert_eq!(c.account.as_deref(), Some("devstoreaccount1"));
    }

    #[test]
    fn debug_output_hides_secrets() {
        let s = S3Config {
            secret_access_key: Some("hunter2".into()),
            session_token: Some("tok3n".into()),
            ..Default::default()
        };
        let a = AzureConfig::from_connection_string("AccountName=a;AccountKey=hunter2");
        for shown in [format!("{s:?}"), format!("{a:?}")] {
            assert!(
                !shown.contains("hunter2") && !shown.contains("tok3n"),
                "{shown}"
            );
            assert!(shown.contains("***"), "{shown}");
        }
    }
}

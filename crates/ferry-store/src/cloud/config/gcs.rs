//! Google Cloud Storage settings: an emulator, a service-account file, object_store's chain.

use std::path::PathBuf;
use std::sync::Arc;

use object_store::gcp::{GcpCredential, GoogleCloudStorage, GoogleCloudStorageBuilder};
use object_store::StaticCredentialProvider;

use super::{client_options, connector, env, no_retries, pick_class};
use crate::cloud::gcs::GcsWriter;
use crate::error::one_line;
use crate::{Error, Result};

/// Google Cloud Storage settings; [`GcsConfig::from_env`] reads `STORAGE_EMULATOR_HOST`,
/// `GOOGLE_APPLICATION_CREDENTIALS` and `GOOGLE_CLOUD_PROJECT`. Without a service-account
/// file, `object_store` looks for application default credentials (gcloud's) and then the
/// GCE metadata server.
#[derive(Debug, Clone, Default)]
pub struct GcsConfig {
    /// Endpoint (an emulator's `http://127.0.0.1:4443`): requests then carry no token, as
    /// Google's own libraries do with `STORAGE_EMULATOR_HOST`. Google when unset.
    pub endpoint: Option<String>,
    /// A service-account key file (JSON).
    pub service_account: Option<PathBuf>,
    /// Project new buckets are made in.
    pub project: Option<String>,
    /// Storage class of every object written: `STANDARD`, `NEARLINE`, `COLDLINE`, `ARCHIVE`.
    pub storage_class: Option<String>,
    /// PEM file of extra trusted CAs, or the server's own certificate.
    pub ca_cert: Option<PathBuf>,
}

/// The fields of a service-account file ferry reads besides `object_store`.
#[derive(serde::Deserialize, Default)]
struct ServiceAccount {
    #[serde(rename = "type")]
    kind: Option<String>,
    project_id: Option<String>,
    /// `object_store`'s extension for emulators.
    gcs_base_url: Option<String>,
}

impl GcsConfig {
    /// Settings from the standard Google environment variables.
    pub fn from_env() -> Self {
        Self {
            endpoint: env(&["STORAGE_EMULATOR_HOST"]).map(|h| match h.contains("://") {
                true => h,
                false => format!("http://{h}"),
            }),
            service_account: env(&["GOOGLE_APPLICATION_CREDENTIALS"]).map(PathBuf::from),
            project: env(&[
                "GOOGLE_CLOUD_PROJECT",
                "CLOUDSDK_CORE_PROJECT",
                "GCLOUD_PROJECT",
            ]),
            ca_cert: env(&["SSL_CERT_FILE"]).map(PathBuf::from),
            storage_class: None,
        }
    }

    pub(in crate::cloud) fn build(&self, bucket: &str) -> Result<(GoogleCloudStorage, GcsWriter)> {
        let http = connector(self.ca_cert.as_ref())?;
        // A key file of another kind (gcloud's authorized_user) is object_store's ADC's to read.
        let sa = match &self.service_account {
            None => None,
            Some(p) => {
                let text = std::fs::read(p).map_err(|e| Error::io(p.display(), e))?;
                let sa: ServiceAccount = serde_json::from_slice(&text).map_err(|e| {
                    Error::Invalid(format!(
                        "{}: not a Google credentials file: {e}",
                        p.display()
                    ))
                })?;
                Some((p, sa))
            }
        };
        let service_account = sa
            .as_ref()
            .filter(|(_, sa)| sa.kind.as_deref() == Some("service_account"));
        let base = self
            .endpoint
            .clone()
            .or_else(|| service_account.and_then(|(_, sa)| sa.gcs_base_url.clone()))
            .unwrap_or_else(|| "https://storage.googleapis.com".into());
        let base = base.trim_end_matches('/').to_string();
        let mut b = GoogleCloudStorageBuilder::new()
            .with_bucket_name(bucket)
            .with_base_url(&base)
            .with_retry(no_retries())
            .with_client_options(client_options(Some(&base)))
            .with_http_connector(http.clone());
        // A token never goes over plain http (an emulator's `STORAGE_EMULATOR_HOST`, or
        // whoever listens there): a service account's is good for an hour, for all of
        // Google Cloud.
        let plain = base.to_ascii_lowercase().starts_with("http://");
        if let (Some((p, _)), false) = (service_account, plain) {
            b = b.with_service_account_path(p.display().to_string());
        } else if self.endpoint.is_some() || plain {
            let none = GcpCredential {
                bearer: String::new(),
            };
            b = b.with_credentials(Arc::new(StaticCredentialProvider::new(none)));
        }
        let gcs = b.build().map_err(|e| Error::Invalid(one_line(&e)))?;
        let project = self
            .project
            .clone()
            .or_else(|| sa.and_then(|(_, sa)| sa.project_id))
            .or_else(|| self.endpoint.as_ref().map(|_| "ferry".to_string()));
        let class = self
            .storage_class
            .as_deref()
            .map(|c| pick_class(c, &["STANDARD", "NEARLINE", "COLDLINE", "ARCHIVE"], "GCS"))
            .transpose()?;
        let writer = GcsWriter::new(
            http.http(),
            &base,
            bucket,
            project,
            gcs.credentials().clone(),
            class,
        )?;
        Ok((gcs, writer))
    }
}

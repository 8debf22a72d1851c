//! Endpoints and credentials, read by each cloud's own conventions.

use std::path::PathBuf;
use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder, AwsAuthorizer, AwsCredential, Checksum};
use object_store::azure::{AzureAccessKey, AzureCredential, MicrosoftAzure, MicrosoftAzureBuilder};
use object_store::client::{HttpClient, HttpRequestBody};
use object_store::{ClientOptions, RetryConfig};

use super::azure::AzureWriter;
use super::metered::{Connector, CONNECT_TIMEOUT};
use crate::error::one_line;
use crate::{Error, Result};

/// Azurite's well-known development account.
const DEV_ACCOUNT: &str = "devstoreaccount1";
const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

fn env(names: &[&str]) -> Option<String> {
    names
        .iter()
        .find_map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()))
}

/// `object_store`'s settings for both clouds: the engine owns retries and watches each
/// request for a stall, so the crate's own retries are off and its total timeout is only a
/// backstop. The connection itself is [`Connector`]'s.
fn client_options(endpoint: Option<&str>) -> ClientOptions {
    ClientOptions::new()
        .with_timeout(Duration::from_secs(24 * 3600))
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_allow_http(endpoint.is_some_and(|e| e.starts_with("http://")))
}

/// The metered HTTP client, trusting `ca_cert` besides the system's roots.
fn connector(ca_cert: Option<&PathBuf>) -> Result<Connector> {
    match ca_cert {
        None => Connector::new(None),
        Some(ca) => {
            let pem = std::fs::read(ca).map_err(|e| Error::io(ca.display(), e))?;
            Connector::new(Some((&ca.display().to_string(), &pem)))
        }
    }
}

fn no_retries() -> RetryConfig {
    RetryConfig {
        max_retries: 0,
        ..Default::default()
    }
}

/// S3 settings; [`S3Config::from_env`] reads `AWS_ENDPOINT_URL`, `AWS_REGION`,
/// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` and `AWS_CA_BUNDLE`.
#[derive(Clone, Default)]
pub struct S3Config {
    /// Endpoint URL (`http://127.0.0.1:9000`); AWS when unset.
    pub endpoint: Option<String>,
    /// Region; `us-east-1` when unset.
    pub region: Option<String>,
    /// Access key id.
    pub access_key_id: Option<String>,
    /// Secret access key.
    pub secret_access_key: Option<String>,
    /// Session token for temporary credentials.
    pub session_token: Option<String>,
    /// PEM file of extra trusted CAs.
    pub ca_cert: Option<PathBuf>,
}

impl S3Config {
    /// Settings from the standard AWS environment variables.
    pub fn from_env() -> Self {
        Self {
            endpoint: env(&["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"]),
            region: env(&["AWS_REGION", "AWS_DEFAULT_REGION"]),
            access_key_id: env(&["AWS_ACCESS_KEY_ID"]),
            secret_access_key: env(&["AWS_SECRET_ACCESS_KEY"]),
            session_token: env(&["AWS_SESSION_TOKEN"]),
            ca_cert: env(&["AWS_CA_BUNDLE", "SSL_CERT_FILE"]).map(PathBuf::from),
        }
    }

    fn region(&self) -> String {
        self.region.clone().unwrap_or_else(|| "us-east-1".into())
    }

    pub(super) fn build(&self, bucket: &str) -> Result<(AmazonS3, S3Extra)> {
        let http = connector(self.ca_cert.as_ref())?;
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_region(self.region())
            .with_checksum_algorithm(Checksum::SHA256)
            .with_retry(no_retries())
            .with_client_options(client_options(self.endpoint.as_deref()))
            .with_http_connector(http.clone());
        if let Some(e) = &self.endpoint {
            b = b.with_endpoint(e).with_allow_http(e.starts_with("http://"));
        }
        let (Some(id), Some(secret)) = (&self.access_key_id, &self.secret_access_key) else {
            return Err(Error::Invalid(
                "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY".into(),
            ));
        };
        b = b.with_access_key_id(id).with_secret_access_key(secret);
        if let Some(t) = &self.session_token {
            b = b.with_token(t);
        }
        let s3 = b.build().map_err(|e| Error::Invalid(one_line(&e)))?;
        let extra = S3Extra {
            http: http.http(),
            endpoint: self
                .endpoint
                .clone()
                .unwrap_or_else(|| format!("https://s3.{}.amazonaws.com", self.region())),
            region: self.region(),
            credential: AwsCredential {
                key_id: id.clone(),
                secret_key: secret.clone(),
                token: self.session_token.clone(),
            },
        };
        Ok((s3, extra))
    }
}

/// What S3 needs beyond `object_store`: bucket creation.
#[derive(Debug)]
pub(super) struct S3Extra {
    http: HttpClient,
    endpoint: String,
    region: String,
    credential: AwsCredential,
}

impl S3Extra {
    /// Keys of multipart uploads started and neither completed nor aborted.
    pub(super) async fn pending_uploads(&self, bucket: &str, prefix: &str) -> Result<Vec<String>> {
        let mut url = url::Url::parse(&format!("{}/{bucket}", self.endpoint.trim_end_matches('/')))
            .map_err(|e| Error::Invalid(format!("bucket URL: {e}")))?;
        url.query_pairs_mut()
            .append_pair("prefix", prefix)
            .append_key_only("uploads");
        let mut req = http::Request::builder()
            .method(http::Method::GET)
            .uri(url.as_str())
            .body(HttpRequestBody::empty())
            .map_err(|e| Error::Invalid(format!("list uploads: {e}")))?;
        AwsAuthorizer::new(&self.credential, "s3", &self.region)
            .try_authorize(&mut req, None)
            .map_err(Error::from)?;
        let body = super::signed::send_for_body(&self.http, req, "list multipart uploads").await?;
        let text = String::from_utf8_lossy(&body);
        Ok(text
            .split("<Upload>")
            .skip(1)
            .filter_map(|u| {
                u.split("<Key>")
                    .nth(1)?
                    .split("</Key>")
                    .next()
                    .map(str::to_string)
            })
            .collect())
    }

    pub(super) async fn create_bucket(&self, bucket: &str) -> Result<()> {
        let url = format!("{}/{bucket}", self.endpoint.trim_end_matches('/'));
        let body = if self.region == "us-east-1" {
            String::new()
        } else {
            format!(
                "<CreateBucketConfiguration><LocationConstraint>{}</LocationConstraint></CreateBucketConfiguration>",
                self.region
            )
        };
        let mut req = http::Request::builder()
            .method(http::Method::PUT)
            .uri(&url)
            .body(HttpRequestBody::from(body))
            .map_err(|e| Error::Invalid(format!("bucket URL {url}: {e}")))?;
        AwsAuthorizer::new(&self.credential, "s3", &self.region)
            .try_authorize(&mut req, None)
            .map_err(Error::from)?;
        super::signed::send(&self.http, req, &format!("create bucket {bucket}")).await
    }
}

/// Azure settings; [`AzureConfig::from_env`] reads `AZURE_STORAGE_CONNECTION_STRING`, or
/// `AZURE_STORAGE_ACCOUNT` with `AZURE_STORAGE_KEY` (and `AZURE_STORAGE_ENDPOINT`).
#[derive(Clone, Default)]
pub struct AzureConfig {
    /// Storage account name.
    pub account: Option<String>,
    /// Account key (base64).
    pub key: Option<String>,
    /// Blob service endpoint, including the account for path-style endpoints such as
    /// Azurite's `http://127.0.0.1:10000/devstoreaccount1`.
    pub endpoint: Option<String>,
    /// PEM file of extra trusted CAs.
    pub ca_cert: Option<PathBuf>,
}

impl AzureConfig {
    /// Settings from the standard Azure environment variables.
    pub fn from_env() -> Self {
        let mut c = match env(&["AZURE_STORAGE_CONNECTION_STRING"]) {
            Some(cs) => Self::from_connection_string(&cs),
            None => Self::default(),
        };
        c.account = c
            .account
            .or_else(|| env(&["AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_ACCOUNT_NAME"]));
        c.key = c
            .key
            .or_else(|| env(&["AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT_KEY"]));
        c.endpoint = c.endpoint.or_else(|| env(&["AZURE_STORAGE_ENDPOINT"]));
        c.ca_cert = env(&["SSL_CERT_FILE"]).map(PathBuf::from);
        c
    }

    /// Parses `AccountName=..;AccountKey=..;BlobEndpoint=..` or `UseDevelopmentStorage=true`.
    pub fn from_connection_string(cs: &str) -> Self {
        let mut c = Self::default();
        let mut protocol = "https".to_string();
        let mut suffix = None;
        for part in cs.split(';').filter(|p| !p.is_empty()) {
            let Some((k, v)) = part.split_once('=') else {
                continue;
            };
            match k.trim() {
                "AccountName" => c.account = Some(v.into()),
                "AccountKey" => c.key = Some(v.into()),
                "BlobEndpoint" => c.endpoint = Some(v.trim_end_matches('/').into()),
                "DefaultEndpointsProtocol" => protocol = v.into(),
                "EndpointSuffix" => suffix = Some(v.to_string()),
                "UseDevelopmentStorage" if v.eq_ignore_ascii_case("true") => {
                    c.account = Some(DEV_ACCOUNT.into());
                    c.key = Some(DEV_KEY.into());
                    c.endpoint = Some(format!("http://127.0.0.1:10000/{DEV_ACCOUNT}"));
                }
                _ => {}
            }
        }
        if c.endpoint.is_none() {
            if let (Some(a), Some(s)) = (&c.account, suffix) {
                c.endpoint = Some(format!("{protocol}://{a}.blob.{s}"));
            }
        }
        c
    }

    pub(super) fn build(&self, container: &str) -> Result<(MicrosoftAzure, AzureWriter)> {
        let (Some(account), Some(key)) = (&self.account, &self.key) else {
            return Err(Error::Invalid(
                "no Azure credentials: set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY".into(),
            ));
        };
        let endpoint = self
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("https://{account}.blob.core.windows.net"));
        let http = connector(self.ca_cert.as_ref())?;
        let az = MicrosoftAzureBuilder::new()
            .with_account(account)
            .with_access_key(key)
            .with_container_name(container)
            .with_endpoint(endpoint.clone())
            .with_allow_http(endpoint.starts_with("http://"))
            .with_retry(no_retries())
            .with_client_options(client_options(Some(&endpoint)))
            .with_http_connector(http.clone())
            .build()
            .map_err(|e| Error::Invalid(one_line(&e)))?;
        let credential = AzureCredential::AccessKey(
            AzureAccessKey::try_new(key).map_err(|e| Error::Invalid(one_line(&e)))?,
        );
        let writer = AzureWriter::new(http.http(), &endpoint, account, container, credential)?;
        Ok((az, writer))
    }
}

/// `***` for a secret that is set: configs are printed in debug output, secrets never.
fn hidden(s: &Option<String>) -> Option<&'static str> {
    s.as_ref().map(|_| "***")
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &hidden(&self.secret_access_key))
            .field("session_token", &hidden(&self.session_token))
            .field("ca_cert", &self.ca_cert)
            .finish()
    }
}

impl std::fmt::Debug for AzureConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureConfig")
            .field("account", &self.account)
            .field("key", &hidden(&self.key))
            .field("endpoint", &self.endpoint)
            .field("ca_cert", &self.ca_cert)
            .finish()
    }
}

#[cfg(test)]
mod secret_tests {
    use super::*;

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

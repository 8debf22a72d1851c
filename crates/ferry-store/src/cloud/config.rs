//! Endpoints and credentials, read by each cloud's own conventions.

use std::path::PathBuf;
use std::time::Duration;

use object_store::aws::{
    AmazonS3, AmazonS3Builder, AwsAuthorizer, AwsCredentialProvider, Checksum,
};
use object_store::azure::{AzureConfigKey, MicrosoftAzure, MicrosoftAzureBuilder};
use object_store::client::{HttpClient, HttpRequest, HttpRequestBody};
use object_store::gcp::{GcpCredential, GoogleCloudStorage, GoogleCloudStorageBuilder};
use object_store::{ClientOptions, RetryConfig, StaticCredentialProvider};
use std::sync::Arc;

use super::aws_credentials;
use super::azure::AzureWriter;
use super::explained::Explained;
use super::gcs::GcsWriter;
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
/// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_PROFILE` and
/// `AWS_CA_BUNDLE`. Without keys, credentials come from the chain in
/// [`aws_credentials`](super::aws_credentials).
#[derive(Clone, Default)]
pub struct S3Config {
    /// Endpoint URL (`http://127.0.0.1:9000`); AWS when unset.
    pub endpoint: Option<String>,
    /// Region; the profile's, else `us-east-1`, when unset.
    pub region: Option<String>,
    /// Access key id.
    pub access_key_id: Option<String>,
    /// Secret access key.
    pub secret_access_key: Option<String>,
    /// Session token for temporary credentials.
    pub session_token: Option<String>,
    /// Profile of `~/.aws/config` and `~/.aws/credentials` (`AWS_PROFILE`; `default`).
    pub profile: Option<String>,
    /// Bucket in the host name (`BUCKET.s3.REGION.amazonaws.com`, AWS's way) rather than in
    /// the path (MinIO's and Ceph RGW's); unset: virtual-hosted on AWS, path elsewhere.
    pub virtual_hosted: Option<bool>,
    /// PEM file of extra trusted CAs, or the server's own certificate.
    pub ca_cert: Option<PathBuf>,
    /// Storage class of every object written (`STANDARD_IA`, `GLACIER_IR`, ...).
    pub storage_class: Option<String>,
    /// Server-side encryption: `AES256`, `aws:kms` or `aws:kms:dsse`.
    pub sse: Option<String>,
    /// The KMS key of `aws:kms` (the bucket's default key when unset).
    pub sse_kms_key_id: Option<String>,
    /// SSE-C: the customer's 256-bit key, base64; sent with every request, so over TLS only.
    pub sse_c_key: Option<String>,
}

/// The three headers of SSE-C, for the requests ferry signs itself.
fn sse_c_headers(key_b64: &str) -> [(&'static str, String); 3] {
    use base64::prelude::{Engine, BASE64_STANDARD};
    use md5::{Digest, Md5};
    let raw = BASE64_STANDARD.decode(key_b64).unwrap_or_default();
    [
        (
            "x-amz-server-side-encryption-customer-algorithm",
            "AES256".into(),
        ),
        ("x-amz-server-side-encryption-customer-key", key_b64.into()),
        (
            "x-amz-server-side-encryption-customer-key-md5",
            BASE64_STANDARD.encode(Md5::digest(&raw)),
        ),
    ]
}

/// The storage classes S3 knows (MinIO: STANDARD and REDUCED_REDUNDANCY).
const S3_CLASSES: &[&str] = &[
    "STANDARD",
    "REDUCED_REDUNDANCY",
    "STANDARD_IA",
    "ONEZONE_IA",
    "INTELLIGENT_TIERING",
    "GLACIER",
    "GLACIER_IR",
    "DEEP_ARCHIVE",
    "OUTPOSTS",
    "EXPRESS_ONEZONE",
];

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

impl S3Config {
    /// Settings from the standard AWS environment variables.
    pub fn from_env() -> Self {
        Self {
            endpoint: env(&["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"]),
            region: env(&["AWS_REGION", "AWS_DEFAULT_REGION"]),
            access_key_id: env(&["AWS_ACCESS_KEY_ID"]),
            secret_access_key: env(&["AWS_SECRET_ACCESS_KEY"]),
            session_token: env(&["AWS_SESSION_TOKEN"]),
            profile: env(&["AWS_PROFILE"]),
            virtual_hosted: None,
            ca_cert: env(&["AWS_CA_BUNDLE", "SSL_CERT_FILE"]).map(PathBuf::from),
            ..Default::default()
        }
    }

    /// Where requests for `bucket` go: the endpoint with the bucket in its path or host.
    fn bucket_url(&self, bucket: &str, region: &str) -> Result<String> {
        let virtual_hosted = self.virtual_hosted.unwrap_or(self.endpoint.is_none());
        let endpoint = self
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"));
        let endpoint = endpoint.trim_end_matches('/');
        if !virtual_hosted {
            return Ok(format!("{endpoint}/{bucket}"));
        }
        let mut u = url::Url::parse(endpoint)
            .map_err(|e| Error::Invalid(format!("S3 endpoint '{endpoint}': {e}")))?;
        let host = u.host_str().unwrap_or_default().to_string();
        u.set_host(Some(&format!("{bucket}.{host}")))
            .map_err(|e| Error::Invalid(format!("bucket '{bucket}' in a host name: {e}")))?;
        Ok(u.as_str().trim_end_matches('/').to_string())
    }

    /// `object_store`'s settings for the encryption asked for, checked first.
    fn encryption(&self, url: &str) -> Result<Vec<(&'static str, String)>> {
        let mut out = Vec::new();
        match (self.sse.as_deref(), &self.sse_c_key) {
            (Some(_), Some(_)) => {
                return Err(Error::Invalid(
                    "--sse and --sse-c-key-file: one server-side encryption, not both".into(),
                ))
            }
            (None, Some(key)) => {
                if !url.starts_with("https://") {
                    return Err(Error::Invalid(format!(
                        "SSE-C sends its key with every request: {url} is not https"
                    )));
                }
                // Not object_store's SSE-C setting: it leaves the key out of
                // CompleteMultipartUpload, which S3 then refuses for an upload with checksums.
                // The key goes on every request instead (client_options' default headers).
                let _ = key;
            }
            (Some(kind), None) => {
                let kind = ["AES256", "aws:kms", "aws:kms:dsse"]
                    .into_iter()
                    .find(|k| k.eq_ignore_ascii_case(kind))
                    .ok_or_else(|| {
                        Error::Invalid(format!("--sse '{kind}': AES256, aws:kms or aws:kms:dsse"))
                    })?;
                out.push(("aws_server_side_encryption", kind.to_string()));
                if let Some(id) = &self.sse_kms_key_id {
                    if kind == "AES256" {
                        return Err(Error::Invalid(
                            "--sse-kms-key-id goes with --sse aws:kms".into(),
                        ));
                    }
                    out.push(("aws_sse_kms_key_id", id.clone()));
                }
            }
            (None, None) if self.sse_kms_key_id.is_some() => {
                return Err(Error::Invalid(
                    "--sse-kms-key-id goes with --sse aws:kms".into(),
                ))
            }
            (None, None) => {}
        }
        Ok(out)
    }

    /// SSE-C's three headers on every request (S3 ignores them where no object is read or
    /// written), marked sensitive so that no log prints the key.
    fn sse_c_options(&self, o: ClientOptions) -> ClientOptions {
        let Some(key) = &self.sse_c_key else {
            return o;
        };
        let mut h = http::HeaderMap::new();
        for (name, value) in sse_c_headers(key) {
            let mut v = http::HeaderValue::from_str(&value).expect("base64 is a header value");
            v.set_sensitive(true);
            h.insert(name, v);
        }
        o.with_default_headers(h)
    }

    pub(super) fn build(&self, bucket: &str) -> Result<(AmazonS3, S3Extra)> {
        let http = connector(self.ca_cert.as_ref())?;
        let key = match (&self.access_key_id, &self.secret_access_key) {
            (Some(id), Some(secret)) => {
                Some((id.as_str(), secret.as_str(), self.session_token.as_deref()))
            }
            (None, None) => None,
            _ => {
                return Err(Error::Invalid(
                    "S3 keys: set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither"
                        .into(),
                ))
            }
        };
        let default_region = self.region.clone().unwrap_or_else(|| "us-east-1".into());
        let wanted = aws_credentials::Wanted {
            key,
            profile: self.profile.as_deref(),
            region: &default_region,
        };
        let found = aws_credentials::find(&wanted, &http)?;
        tracing::debug!("S3 credentials from {}", found.source);
        let region = self
            .region
            .clone()
            .or(found.region)
            .unwrap_or_else(|| "us-east-1".into());
        let bucket_url = self.bucket_url(bucket, &region)?;
        let storage_class = self
            .storage_class
            .as_deref()
            .map(|c| pick_class(c, S3_CLASSES, "S3"))
            .transpose()?;
        let mut b = AmazonS3Builder::new();
        for (key, value) in self.encryption(&bucket_url)? {
            let key = key.parse().expect("object_store's own key name");
            b = b.with_config(key, value);
        }
        let s3 = b
            .with_bucket_name(bucket)
            .with_region(&region)
            .with_checksum_algorithm(Checksum::SHA256)
            .with_retry(no_retries())
            .with_client_options(self.sse_c_options(client_options(Some(&bucket_url))))
            .with_http_connector(http.clone())
            .with_endpoint(&bucket_url)
            .with_virtual_hosted_style_request(true)
            .with_credentials(found.provider.clone())
            .build()
            .map_err(|e| Error::Invalid(one_line(&e)))?;
        let md5_etags = self.sse_c_key.is_none()
            && !self
                .sse
                .as_deref()
                .is_some_and(|k| k.to_ascii_lowercase().starts_with("aws:kms"));
        let extra = S3Extra {
            storage_class,
            lock: tokio::sync::OnceCell::new(),
            sse_c_key: self.sse_c_key.clone(),
            md5_etags,
            http: http.http(),
            bucket_url,
            region,
            credentials: found.provider,
        };
        Ok((s3, extra))
    }
}

/// What S3 needs beyond `object_store`: bucket creation, open uploads, the storage class.
#[derive(Debug)]
pub(super) struct S3Extra {
    pub storage_class: Option<String>,
    /// Whether the bucket has Object Lock, once asked.
    lock: tokio::sync::OnceCell<bool>,
    /// The SSE-C key (base64), which every request on an object must carry.
    sse_c_key: Option<String>,
    /// False under SSE-KMS and SSE-C, whose ETags are not the content's MD5: ferry's digest
    /// is then read from the object's metadata, as on Azure.
    pub md5_etags: bool,
    http: HttpClient,
    /// The bucket's URL, path- or host-style.
    bucket_url: String,
    region: String,
    credentials: AwsCredentialProvider,
}

impl S3Extra {
    async fn sign(&self, req: &mut HttpRequest) -> Result<()> {
        let c = self.credentials.get_credential().await?;
        AwsAuthorizer::new(&c, "s3", &self.region)
            .try_authorize(req, None)
            .map_err(Error::from)
    }

    /// HEAD of `key`, signed here rather than by `object_store`, whose answer drops the
    /// headers that say how the object is encrypted: under SSE-KMS or SSE-C (asked for, or the
    /// bucket's default) the ETag is not the content's MD5 and is left out.
    async fn head_headers(&self, key: &str) -> Result<http::HeaderMap> {
        let mut url = url::Url::parse(&self.bucket_url)
            .map_err(|e| Error::Invalid(format!("bucket URL: {e}")))?;
        url.path_segments_mut()
            .map_err(|()| Error::Invalid("bucket URL".into()))?
            .pop_if_empty()
            .extend(key.split('/'));
        let mut req = http::Request::builder()
            .method(http::Method::HEAD)
            .uri(url.as_str())
            .body(HttpRequestBody::empty())
            .map_err(|e| Error::Invalid(format!("head {key}: {e}")))?;
        if let Some(k) = &self.sse_c_key {
            let h = req.headers_mut();
            for (name, value) in sse_c_headers(k) {
                h.insert(name, http::HeaderValue::from_str(&value).expect("base64"));
            }
        }
        self.sign(&mut req).await?;
        let what = format!("head {key}");
        let (h, _) = match super::signed::send_for_response(&self.http, req, &what).await {
            // A HEAD has no body to say why; SSE-C without the key is the usual reason.
            Err(Error::Permanent(m)) if m.contains("400") && self.sse_c_key.is_none() => {
                return Err(Error::Permanent(format!(
                    "{m} (an object encrypted with SSE-C is read with its key: --sse-c-key-file)"
                )))
            }
            r => r?,
        };
        Ok(h)
    }

    pub(super) async fn head(&self, key: &str) -> Result<crate::ObjectInfo> {
        let h = self.head_headers(key).await?;
        let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
        let encrypted = text("x-amz-server-side-encryption")
            .is_some_and(|v| v.starts_with("aws:kms"))
            || text("x-amz-server-side-encryption-customer-algorithm").is_some();
        let meta = h
            .iter()
            .filter_map(|(k, v)| {
                let k = k.as_str().strip_prefix("x-amz-meta-")?;
                Some((k.to_string(), v.to_str().ok()?.to_string()))
            })
            .collect();
        Ok(crate::ObjectInfo {
            key: key.into(),
            size: text("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            etag: text("etag")
                .map(|e| e.trim_matches('"').to_string())
                .filter(|_| !encrypted),
            meta,
        })
    }

    /// Keys of multipart uploads started and neither completed nor aborted.
    pub(super) async fn pending_uploads(&self, prefix: &str) -> Result<Vec<String>> {
        let mut url = url::Url::parse(&format!("{}/", self.bucket_url))
            .map_err(|e| Error::Invalid(format!("bucket URL: {e}")))?;
        url.query_pairs_mut()
            .append_pair("prefix", prefix)
            .append_key_only("uploads");
        let mut req = http::Request::builder()
            .method(http::Method::GET)
            .uri(url.as_str())
            .body(HttpRequestBody::empty())
            .map_err(|e| Error::Invalid(format!("list uploads: {e}")))?;
        self.sign(&mut req).await?;
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

    /// Whether the bucket has Object Lock, asked once.
    async fn lock_enabled(&self) -> Result<bool> {
        let ask = || async {
            let url = format!("{}/?object-lock=", self.bucket_url);
            let mut req = http::Request::builder()
                .uri(&url)
                .body(HttpRequestBody::empty())
                .map_err(|e| Error::Invalid(format!("{url}: {e}")))?;
            self.sign(&mut req).await?;
            match super::signed::send_for_body(&self.http, req, "object lock configuration").await {
                Ok(body) => {
                    Ok(String::from_utf8_lossy(&body).contains("<ObjectLockEnabled>Enabled"))
                }
                Err(Error::NotFound(_)) => Ok(false),
                Err(e) => Err(e),
            }
        };
        self.lock.get_or_try_init(ask).await.copied()
    }

    /// Why `key` may not be deleted now: a legal hold, or a retention date still ahead.
    pub(super) async fn retention(&self, key: &str) -> Result<Option<String>> {
        if !self.lock_enabled().await? {
            return Ok(None);
        }
        let h = match self.head_headers(key).await {
            Err(Error::NotFound(_)) => return Ok(None),
            r => r?,
        };
        let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
        if text("x-amz-object-lock-legal-hold").is_some_and(|v| v.eq_ignore_ascii_case("ON")) {
            return Ok(Some("under legal hold".into()));
        }
        let Some(until) = text("x-amz-object-lock-retain-until-date") else {
            return Ok(None);
        };
        let mode = text("x-amz-object-lock-mode").unwrap_or("retention");
        let when = humantime::parse_rfc3339_weak(until.trim_end_matches('Z'))
            .map_err(|e| Error::Permanent(format!("{key}: retain-until date '{until}': {e}")))?;
        Ok((when > std::time::SystemTime::now())
            .then(|| format!("{} until {until}", mode.to_ascii_lowercase())))
    }

    /// Creates the bucket with Object Lock (or checks it has it) and sets its default
    /// retention, which S3 then applies to every object version written.
    pub(super) async fn lock_new_objects(
        &self, bucket: &str, days: u32, mode: crate::LockMode,
    ) -> Result<()> {
        match self.create_bucket_with(bucket, true).await {
            Ok(()) => {}
            Err(Error::AlreadyExists(_)) => {
                if !self.lock_enabled().await? {
                    return Err(Error::Invalid(format!(
                        "bucket {bucket} exists without Object Lock, which S3 and MinIO enable \
                         when a bucket is made: give a new bucket"
                    )));
                }
            }
            Err(e) => return Err(e),
        }
        let xml = format!(
            "<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule>\
             <DefaultRetention><Mode>{}</Mode><Days>{days}</Days></DefaultRetention></Rule>\
             </ObjectLockConfiguration>",
            mode.as_str()
        );
        let url = format!("{}/?object-lock=", self.bucket_url);
        let md5 = {
            use base64::prelude::{Engine, BASE64_STANDARD};
            use md5::{Digest, Md5};
            BASE64_STANDARD.encode(Md5::digest(xml.as_bytes()))
        };
        let mut req = http::Request::builder()
            .method(http::Method::PUT)
            .uri(&url)
            .header("content-md5", md5)
            .body(HttpRequestBody::from(xml))
            .map_err(|e| Error::Invalid(format!("{url}: {e}")))?;
        self.sign(&mut req).await?;
        super::signed::send(&self.http, req, &format!("default retention of {bucket}")).await
    }

    pub(super) async fn create_bucket(&self, bucket: &str) -> Result<()> {
        self.create_bucket_with(bucket, false).await
    }

    async fn create_bucket_with(&self, bucket: &str, lock: bool) -> Result<()> {
        let body = if self.region == "us-east-1" {
            String::new()
        } else {
            format!(
                "<CreateBucketConfiguration><LocationConstraint>{}</LocationConstraint></CreateBucketConfiguration>",
                self.region
            )
        };
        let url = format!("{}/", self.bucket_url);
        let mut req = http::Request::builder()
            .method(http::Method::PUT)
            .uri(&url)
            .body(HttpRequestBody::from(body))
            .map_err(|e| Error::Invalid(format!("bucket URL {url}: {e}")))?;
        if lock {
            req.headers_mut().insert(
                "x-amz-bucket-object-lock-enabled",
                http::HeaderValue::from_static("true"),
            );
        }
        self.sign(&mut req).await?;
        super::signed::send(&self.http, req, &format!("create bucket {bucket}")).await
    }
}

/// Azure settings; [`AzureConfig::from_env`] reads `AZURE_STORAGE_CONNECTION_STRING`, or
/// `AZURE_STORAGE_ACCOUNT` with `AZURE_STORAGE_KEY` or `AZURE_STORAGE_SAS_TOKEN` (and
/// `AZURE_STORAGE_ENDPOINT`). Without a key or SAS token, `object_store` finds the
/// credentials: an Azure AD client secret (`AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`,
/// `AZURE_TENANT_ID`), workload identity (`AZURE_FEDERATED_TOKEN_FILE`), then the managed
/// identity of the VM (IMDS).
#[derive(Clone, Default)]
pub struct AzureConfig {
    /// Storage account name.
    pub account: Option<String>,
    /// Account key (base64).
    pub key: Option<String>,
    /// Access tier of every blob written: `Hot`, `Cool`, `Cold` or `Archive`.
    pub access_tier: Option<String>,
    /// A SAS token (`sv=...&sig=...`), from `AZURE_STORAGE_SAS_TOKEN`, a connection string's
    /// `SharedAccessSignature` or the query of an `https://` URL.
    pub sas_token: Option<String>,
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
        c.sas_token = c
            .sas_token
            .or_else(|| env(&["AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_SAS_KEY"]));
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
                // The token itself holds '=': everything after the first one.
                "SharedAccessSignature" => {
                    c.sas_token = part.split_once('=').map(|(_, t)| t.to_string())
                }
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
        // A SAS connection string names no account: the endpoint does, in its host
        // (ACCOUNT.blob.core.windows.net) or, for emulators, its path (HOST:PORT/ACCOUNT).
        if c.account.is_none() {
            c.account = c.endpoint.as_deref().and_then(account_of_endpoint);
        }
        c
    }

    pub(super) fn build(&self, container: &str) -> Result<(MicrosoftAzure, AzureWriter)> {
        let Some(account) = &self.account else {
            return Err(Error::Invalid(
                "no Azure account: set AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT, \
                 or give https://ACCOUNT.blob.core.windows.net/CONTAINER/..."
                    .into(),
            ));
        };
        let endpoint = self
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("https://{account}.blob.core.windows.net"));
        let http = connector(self.ca_cert.as_ref())?;
        let mut b = MicrosoftAzureBuilder::new()
            .with_account(account)
            .with_container_name(container)
            .with_endpoint(endpoint.clone())
            .with_allow_http(endpoint.starts_with("http://"))
            .with_retry(no_retries())
            .with_client_options(client_options(Some(&endpoint)))
            .with_http_connector(http.clone());
        // What object_store's chain reads, set ones only (its from_env takes an empty
        // variable for a value).
        for (key, vars) in [
            (
                AzureConfigKey::ClientId,
                &["AZURE_CLIENT_ID", "AZURE_STORAGE_CLIENT_ID"][..],
            ),
            (
                AzureConfigKey::ClientSecret,
                &["AZURE_CLIENT_SECRET", "AZURE_STORAGE_CLIENT_SECRET"],
            ),
            (
                AzureConfigKey::AuthorityId,
                &["AZURE_TENANT_ID", "AZURE_STORAGE_TENANT_ID"],
            ),
            (AzureConfigKey::AuthorityHost, &["AZURE_AUTHORITY_HOST"]),
            (
                AzureConfigKey::FederatedTokenFile,
                &["AZURE_FEDERATED_TOKEN_FILE"],
            ),
            (
                AzureConfigKey::MsiEndpoint,
                &["AZURE_MSI_ENDPOINT", "IDENTITY_ENDPOINT", "MSI_ENDPOINT"],
            ),
            (AzureConfigKey::ObjectId, &["AZURE_OBJECT_ID"]),
            (AzureConfigKey::MsiResourceId, &["AZURE_MSI_RESOURCE_ID"]),
            (AzureConfigKey::UseAzureCli, &["AZURE_USE_AZURE_CLI"]),
        ] {
            if let Some(v) = env(vars) {
                b = b.with_config(key, v);
            }
        }
        let given = match (&self.key, &self.sas_token) {
            (Some(key), _) => {
                b = b.with_access_key(key);
                true
            }
            (None, Some(sas)) => {
                b = b.with_config(AzureConfigKey::SasKey, sas.trim_start_matches('?'));
                true
            }
            (None, None) => false,
        };
        let build = |b: MicrosoftAzureBuilder| b.build().map_err(|e| Error::Invalid(one_line(&e)));
        let az = match given {
            true => build(b)?,
            // The chain object_store assembles, its failure explained, for both clients.
            false => {
                let chain = build(b.clone())?.credentials().clone();
                let explained = Explained::new(
                    chain,
                    "no Azure credentials: none given (AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN, \
                     a connection string, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET, \
                     AZURE_FEDERATED_TOKEN_FILE), and managed identity failed"
                        .into(),
                );
                build(b.with_credentials(Arc::new(explained)))?
            }
        };
        let credentials = az.credentials().clone();
        let tier = self
            .access_tier
            .as_deref()
            .map(|t| pick_class(t, &["Hot", "Cool", "Cold", "Archive"], "Azure"))
            .transpose()?;
        let writer = AzureWriter::new(
            http.http(),
            &endpoint,
            account,
            container,
            credentials,
            tier,
        )?;
        Ok((az, writer))
    }
}

fn account_of_endpoint(endpoint: &str) -> Option<String> {
    let u = url::Url::parse(endpoint).ok()?;
    let host = u.host_str()?;
    let name = match host.split_once(".blob.") {
        Some((account, _)) => account,
        None => u.path_segments()?.find(|s| !s.is_empty())?,
    };
    Some(name.to_string())
}

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

    pub(super) fn build(&self, bucket: &str) -> Result<(GoogleCloudStorage, GcsWriter)> {
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
        if let Some((p, _)) = service_account {
            b = b.with_service_account_path(p.display().to_string());
        } else if self.endpoint.is_some() {
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
            .field("profile", &self.profile)
            .field("virtual_hosted", &self.virtual_hosted)
            .field("ca_cert", &self.ca_cert)
            .field("storage_class", &self.storage_class)
            .field("sse", &self.sse)
            .field("sse_kms_key_id", &self.sse_kms_key_id)
            .field("sse_c_key", &hidden(&self.sse_c_key))
            .finish()
    }
}

impl std::fmt::Debug for AzureConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureConfig")
            .field("account", &self.account)
            .field("key", &hidden(&self.key))
            .field("sas_token", &hidden(&self.sas_token))
            .field("endpoint", &self.endpoint)
            .field("access_tier", &self.access_tier)
            .field("ca_cert", &self.ca_cert)
            .finish()
    }
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

//! S3 settings, and the requests S3 needs beyond `object_store`.

use std::path::PathBuf;

use base64::prelude::{Engine as _, BASE64_STANDARD};

use object_store::aws::{
    AmazonS3, AmazonS3Builder, AwsAuthorizer, AwsCredentialProvider, Checksum,
};
use object_store::client::{HttpClient, HttpRequest, HttpRequestBody};
use object_store::ClientOptions;

use super::{client_options, connector, env, hidden, no_retries, pick_class};
use crate::cloud::aws_credentials;
use crate::error::one_line;
use crate::{Error, Result};

/// S3 settings; [`S3Config::from_env`] reads `AWS_ENDPOINT_URL`, `AWS_REGION`,
/// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_PROFILE` and
/// `AWS_CA_BUNDLE`. Without keys, credentials come from the chain in
/// [`aws_credentials`](crate::cloud::aws_credentials).
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
        // The region becomes part of a host name (from a config file someone else may
        // write): `evil.example/` would send the requests, keys and all, elsewhere.
        let fits = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
        if self.endpoint.is_none() && (region.is_empty() || !region.chars().all(fits)) {
            return Err(Error::Invalid(format!(
                "S3 region {region:?}: a region is letters, digits and '-'"
            )));
        }
        let virtual_hosted = self.virtual_hosted.unwrap_or(self.endpoint.is_none());
        let endpoint = self
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"));
        let endpoint = endpoint.trim_end_matches('/');
        // The endpoint comes from the command line, the environment or a settings file, and
        // messages repeat it: one with a password or a query in it is refused wherever it
        // came from, and repeated as `Location::shown` cuts it.
        let shown = crate::Location::shown(endpoint);
        let mut u = url::Url::parse(endpoint)
            .map_err(|e| Error::Invalid(format!("S3 endpoint '{shown}': {e}")))?;
        if !u.username().is_empty() || u.password().is_some() || u.query().is_some() {
            return Err(Error::Invalid(format!(
                "S3 endpoint '{shown}': an endpoint takes no user name, password or query; S3 \
                 keys go in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile"
            )));
        }
        if !virtual_hosted {
            return Ok(format!("{endpoint}/{bucket}"));
        }
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

    pub(in crate::cloud) fn build(&self, bucket: &str) -> Result<(AmazonS3, S3Extra)> {
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
            // The body's SHA-256 goes in x-amz-checksum-sha256, a signed header the store checks
            // the body against: signing the payload too would only make the store hash every
            // byte twice (MinIO: two SHA-256 passes per write, 7 % of a 2-core host under
            // `ferry serve`'s flood). The XML bodies (a multipart upload's part list) go
            // unsigned too: the ETag that answers them is checked against the parts S3 confirmed.
            .with_checksum_algorithm(Checksum::SHA256)
            .with_unsigned_payload(true)
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

/// S3's content checksum in ferry's digest form: CRC-64/NVME of the whole object (`crc64:HEX`,
/// the cheapest to check), else SHA-256, of the whole object or of its parts' SHA-256s
/// (`sha256:HEX` or `sha256:HEX-N`). A value that does not decode to the algorithm's length
/// is no checksum (the store's answer is hostile input): the reader falls back to the ETag.
fn checksum(crc64: Option<&str>, sha256: Option<&str>) -> Option<String> {
    let decode = |v: &str, len: usize| {
        let raw = BASE64_STANDARD.decode(v).ok()?;
        (raw.len() == len).then(|| hex::encode(raw))
    };
    // A composite CRC-64 (`…-N`, not S3's; some other store's) would not combine: skip it.
    let crc = crc64
        .and_then(|v| decode(v, 8))
        .map(|hex| format!("crc64:{hex}"));
    let sha = sha256.and_then(|v| {
        let (b64, parts) = match v.split_once('-') {
            Some((b64, n)) => (b64, Some(n.parse::<u32>().ok().filter(|&n| n > 0)?)),
            None => (v, None),
        };
        let hex = decode(b64, 32)?;
        Some(match parts {
            Some(n) => format!("sha256:{hex}-{n}"),
            None => format!("sha256:{hex}"),
        })
    });
    crc.or(sha)
}

/// What S3 needs beyond `object_store`: bucket creation, open uploads, the storage class.
/// Its `Debug` shows neither the SSE-C key nor the credentials.
pub(in crate::cloud) struct S3Extra {
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
        // The content checksum S3 keeps (SHA-256 or CRC-64 of ferry's uploads) comes only when
        // asked for; checking it costs a reader a third of the MD5 in the ETag, or less.
        req.headers_mut().insert(
            "x-amz-checksum-mode",
            http::HeaderValue::from_static("ENABLED"),
        );
        self.sign(&mut req).await?;
        let what = format!("head {key}");
        let (h, _) = match crate::cloud::signed::send_for_response(&self.http, req, &what).await {
            // A HEAD has no body to say why: name the usual reasons, not one as the cause (a
            // bucket name S3 refuses, "bk", was once reported as SSE-C).
            Err(Error::Permanent(m)) if m.contains("400") && self.sse_c_key.is_none() => {
                return Err(Error::Permanent(format!(
                    "{m} (a HEAD's answer gives no reason: a bucket name S3 refuses, or an object \
                     encrypted with SSE-C, read with its key: --sse-c-key-file)"
                )))
            }
            r => r?,
        };
        Ok(h)
    }

    pub(in crate::cloud) async fn head(&self, key: &str) -> Result<crate::ObjectInfo> {
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
            checksum: checksum(
                text("x-amz-checksum-crc64nvme"),
                text("x-amz-checksum-sha256"),
            ),
            meta,
        })
    }

    /// Keys of multipart uploads started and neither completed nor aborted.
    pub(in crate::cloud) async fn pending_uploads(&self, prefix: &str) -> Result<Vec<String>> {
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
        let body =
            crate::cloud::signed::send_for_body(&self.http, req, "list multipart uploads").await?;
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
            match crate::cloud::signed::send_for_body(&self.http, req, "object lock configuration")
                .await
            {
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
    pub(in crate::cloud) async fn retention(&self, key: &str) -> Result<Option<String>> {
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
    pub(in crate::cloud) async fn lock_new_objects(
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
        crate::cloud::signed::send(&self.http, req, &format!("default retention of {bucket}")).await
    }

    pub(in crate::cloud) async fn create_bucket(&self, bucket: &str) -> Result<()> {
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
        crate::cloud::signed::send(&self.http, req, &format!("create bucket {bucket}")).await
    }
}

impl std::fmt::Debug for S3Extra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Extra")
            .field("bucket_url", &self.bucket_url)
            .field("region", &self.region)
            .field("storage_class", &self.storage_class)
            .field("sse_c_key", &hidden(&self.sse_c_key))
            .field("md5_etags", &self.md5_etags)
            .field("credentials", &"***")
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field(
                "endpoint",
                &self.endpoint.as_deref().map(crate::Location::shown),
            )
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

#[cfg(test)]
mod tests {
    use super::{checksum, S3Config};

    /// S3's checksum headers become ferry digests; what does not decode to the algorithm's
    /// length, or is a composite CRC, is none (the ETag is checked instead).
    #[test]
    fn a_checksum_header_becomes_a_digest_or_nothing() {
        let crc = "AAAAAAAAAAE="; // 8 bytes, 0x...01
        let sha = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="; // SHA-256 of nothing
        let sha_hex = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert_eq!(
            checksum(Some(crc), Some(sha)).unwrap(),
            "crc64:0000000000000001"
        );
        assert_eq!(
            checksum(None, Some(sha)).unwrap(),
            format!("sha256:{sha_hex}")
        );
        let parts = format!("{sha}-3");
        assert_eq!(
            checksum(None, Some(&parts)).unwrap(),
            format!("sha256:{sha_hex}-3")
        );
        for bad in [
            "",
            "AAAA",
            "!!",
            &format!("{sha}-0"),
            &format!("{sha}-x"),
            "AAAAAAAAAAE=-2",
        ] {
            assert_eq!(checksum(Some(bad), Some(bad)), None, "{bad}");
        }
        assert_eq!(
            checksum(Some("AAAAAAAAAAE=-2"), Some(sha)).unwrap(),
            format!("sha256:{sha_hex}")
        );
    }

    /// A region from a config file becomes a host name only when it is one: `evil.example/`
    /// would send the requests elsewhere. With an endpoint of its own, the region is only
    /// signed (RGW zone groups name their own).
    #[test]
    fn a_region_is_no_host_name() {
        let aws = S3Config::default();
        assert_eq!(
            aws.bucket_url("b", "eu-north-1").unwrap(),
            "https://b.s3.eu-north-1.amazonaws.com"
        );
        assert!(aws.bucket_url("b", "evil.example/").is_err());
        let own = S3Config {
            endpoint: Some("https://s3.example:9000".into()),
            ..S3Config::default()
        };
        assert!(own.bucket_url("b", "zone_group.1").is_ok());
    }

    /// An endpoint from the environment or a settings file is held to the command line's
    /// rule: no user info, no query, and the refusal repeats neither.
    #[test]
    fn an_endpoint_with_a_secret_in_it_is_refused_unrepeated() {
        for endpoint in [
            "https://key:hunter2@s3.example:9000",
            "http://hunter2@127.0.0.1:9000",
            "https://s3.example/?X-Amz-Signature=hunter2",
        ] {
            for virtual_hosted in [Some(true), Some(false)] {
                let c = S3Config {
                    endpoint: Some(endpoint.into()),
                    virtual_hosted,
                    ..S3Config::default()
                };
                let e = c.bucket_url("b", "us-east-1").unwrap_err().to_string();
                assert!(!e.contains("hunter2"), "{endpoint}: {e}");
                assert!(e.contains("no user name, password or query"), "{e}");
                // Printed before it is refused (a debug log of the settings), it shows none.
                assert!(!format!("{c:?}").contains("hunter2"), "{c:?}");
            }
        }
    }
}

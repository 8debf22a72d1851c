//! Azure Blob writes with a Content-MD5 on every request, so that the service verifies each
//! block, and metadata on the block list, so that ferry's digest lands with the commit.
//! Signing and transport are `object_store`'s; this module only names the requests.

use base64::prelude::{Engine, BASE64_STANDARD};
use bytes::Bytes;
use http::{HeaderValue, Method};
use md5::{Digest, Md5};
use object_store::azure::{AzureAuthorizer, AzureCredentialProvider};
use object_store::client::{HttpClient, HttpRequest, HttpRequestBody};
use url::Url;

use super::azure_lock::{self, AzureLock};
use super::signed::send_for_response;
use crate::{BlockId, Error, LockMode, Meta, Result, Upload};

/// Writes blobs and blocks to one container. Its `Debug` leaves the credentials out (a key
/// or SAS token of object_store's, which print themselves).
pub(super) struct AzureWriter {
    http: HttpClient,
    service: Url,
    account: String,
    container: String,
    /// A key, a SAS token or a bearer token (Azure AD, managed identity), whichever the
    /// chain found; asked per request, as tokens expire.
    credentials: AzureCredentialProvider,
    /// `x-ms-access-tier` of every blob committed.
    tier: Option<String>,
    /// The retention the container asks of every blob committed, read once.
    lock: tokio::sync::OnceCell<Option<AzureLock>>,
    /// The credential could not read the container's lock record; not yet said.
    unread: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for AzureWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureWriter")
            .field("service", &self.service.as_str())
            .field("account", &self.account)
            .field("container", &self.container)
            .field("tier", &self.tier)
            .field("credentials", &"***")
            .finish_non_exhaustive()
    }
}

/// Block ids must have one length within a blob: a random session tag and a fixed-width index.
pub(super) fn new_session_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

fn block_id(up: &Upload, idx: usize) -> String {
    BASE64_STANDARD.encode(format!("{}{idx:08}", up.id))
}

fn md5_b64(data: &[u8]) -> String {
    BASE64_STANDARD.encode(Md5::digest(data))
}

impl AzureWriter {
    pub(super) fn new(
        http: HttpClient, endpoint: &str, account: &str, container: &str,
        credentials: AzureCredentialProvider, tier: Option<String>,
    ) -> Result<Self> {
        let service = Url::parse(endpoint)
            .map_err(|e| Error::Invalid(format!("Azure endpoint {endpoint}: {e}")))?;
        Ok(Self {
            http,
            service,
            account: account.into(),
            container: container.into(),
            credentials,
            tier,
            lock: tokio::sync::OnceCell::new(),
            unread: Default::default(),
        })
    }

    fn url(&self, key: Option<&str>, query: &[(&str, &str)]) -> Url {
        let mut url = self.service.clone();
        {
            let mut segs = url.path_segments_mut().expect("http URL");
            segs.pop_if_empty().push(&self.container);
            if let Some(k) = key {
                segs.extend(k.split('/'));
            }
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        url
    }

    async fn put(
        &self, url: Url, body: Bytes, headers: &[(String, String)], what: &str,
    ) -> Result<()> {
        self.send(Method::PUT, url, body, headers, what)
            .await
            .map(drop)
    }

    /// Signs and sends one request; the answer's headers on success.
    async fn send(
        &self, method: Method, url: Url, body: Bytes, headers: &[(String, String)], what: &str,
    ) -> Result<http::HeaderMap> {
        let len = body.len();
        let mut req: HttpRequest = http::Request::builder()
            .method(method.clone())
            .uri(url.as_str())
            .body(HttpRequestBody::from(body))
            .map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
        let h = req.headers_mut();
        // Content-Length is part of the SharedKey signature: set it before signing.
        if method != Method::HEAD {
            h.insert(http::header::CONTENT_LENGTH, HeaderValue::from(len));
        }
        for (k, v) in headers {
            let name = http::HeaderName::try_from(k.as_str())
                .map_err(|e| Error::Invalid(format!("header {k}: {e}")))?;
            let value = HeaderValue::try_from(v.as_str())
                .map_err(|e| Error::Invalid(format!("header {k}: {e}")))?;
            h.insert(name, value);
        }
        let credential = self.credentials.get_credential().await?;
        AzureAuthorizer::new(&credential, &self.account).try_authorize(&mut req)?;
        send_for_response(&self.http, req, what)
            .await
            .map(|(h, _)| h)
    }

    /// The container's properties: its metadata among them.
    async fn container_properties(&self) -> Result<http::HeaderMap> {
        let url = self.url(None, &[("restype", "container")]);
        let what = format!("properties of container {}", self.container);
        self.send(Method::HEAD, url, Bytes::new(), &[], &what).await
    }

    /// The container's retention for new blobs, asked once per process.
    async fn lock(&self) -> Result<Option<AzureLock>> {
        let ask = || async {
            match self.container_properties().await {
                Ok(h) => AzureLock::from_container(&h, &self.container),
                // No container yet: nothing written will be locked until init makes one.
                Err(Error::NotFound(_)) => Ok(None),
                // A container-scoped SAS may not read the container's properties: its
                // writes go on, carrying whatever default policy the owner set in Azure.
                // Said once a write has gone through: with a wrong key the write's own
                // refusal is the one line to show.
                Err(Error::Denied(_)) => {
                    self.unread
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        };
        self.lock.get_or_try_init(ask).await.copied()
    }

    /// Records a retention on the container (creating it when missing) for every blob
    /// written to it from now on.
    pub(super) async fn lock_new_objects(&self, days: u32, mode: LockMode) -> Result<()> {
        match self.create_container().await {
            Ok(()) | Err(Error::AlreadyExists(_)) => {}
            Err(e) => return Err(e),
        }
        let lock = AzureLock::new(days, mode);
        // Setting metadata replaces all of it: keep what the container's owner put there.
        let had = self.container_properties().await?;
        // Azure refuses policies on a container without version-level immutability, but only
        // at the first write; say it here. (Azurite does not send the header at all.)
        let support = "x-ms-immutable-storage-with-versioning-enabled";
        if had
            .get(support)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"false"))
        {
            return Err(Error::Invalid(format!(
                "container {}: version-level immutability support is not enabled on it (its \
                 owner enables it in Azure, on the container or the account)",
                self.container
            )));
        }
        let mut metadata: Vec<(String, String)> = had
            .iter()
            .filter(|(k, _)| k.as_str().starts_with("x-ms-meta-"))
            .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_string())))
            .collect();
        let ours = lock.metadata();
        metadata.retain(|(k, _)| !ours.iter().any(|(o, _)| o == k));
        metadata.extend(ours);
        let url = self.url(None, &[("restype", "container"), ("comp", "metadata")]);
        let what = format!("set the lock on container {}", self.container);
        self.put(url, Bytes::new(), &metadata, &what).await?;
        // This process writes the repository's first files next: locked, too.
        let _ = self.lock.set(Some(lock));
        Ok(())
    }

    /// Why `key` may not be deleted now: its immutability policy or legal hold.
    pub(super) async fn retention(&self, key: &str) -> Result<Option<String>> {
        let what = format!("properties of {key}");
        let h = match self
            .send(
                Method::HEAD,
                self.url(Some(key), &[]),
                Bytes::new(),
                &[],
                &what,
            )
            .await
        {
            Err(Error::NotFound(_)) => return Ok(None),
            r => r?,
        };
        azure_lock::retention(&h, key, std::time::SystemTime::now())
    }

    /// After a commit: says once that its blobs went without the container's lock record.
    fn said_unread(&self) {
        if self
            .unread
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(container = %self.container,
                "this credential cannot read the container's properties: blobs are written \
                 without ferry's lock record (a policy the owner set in Azure still applies)");
        }
    }

    /// What a committed blob carries: its metadata, the access tier and the container's
    /// retention.
    async fn commit_headers(&self, meta: &Meta) -> Result<Vec<(String, String)>> {
        let mut h = self.meta_headers(meta);
        if let Some(lock) = self.lock().await? {
            h.extend(lock.policy_headers(std::time::SystemTime::now()));
        }
        Ok(h)
    }

    /// Metadata and the access tier: what a committed blob carries.
    fn meta_headers(&self, meta: &Meta) -> Vec<(String, String)> {
        meta.iter()
            .map(|(k, v)| (format!("x-ms-meta-{k}"), v.clone()))
            .chain(
                self.tier
                    .iter()
                    .map(|t| ("x-ms-access-tier".into(), t.clone())),
            )
            .collect()
    }

    pub(super) async fn put_blob(&self, key: &str, data: Bytes, meta: &Meta) -> Result<()> {
        let mut h = self.commit_headers(meta).await?;
        h.push(("x-ms-blob-type".into(), "BlockBlob".into()));
        h.push(("content-md5".into(), md5_b64(&data)));
        self.put(self.url(Some(key), &[]), data, &h, &format!("put {key}"))
            .await?;
        self.said_unread();
        Ok(())
    }

    pub(super) async fn put_block(&self, up: &Upload, idx: usize, data: Bytes) -> Result<BlockId> {
        let id = block_id(up, idx);
        let url = self.url(Some(&up.key), &[("comp", "block"), ("blockid", &id)]);
        let h = [("content-md5".to_string(), md5_b64(&data))];
        self.put(url, data, &h, &format!("put block {idx} of {}", up.key))
            .await?;
        Ok(BlockId(id))
    }

    pub(super) async fn put_block_list(
        &self, up: &Upload, blocks: &[BlockId], meta: &Meta,
    ) -> Result<()> {
        let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
        for b in blocks {
            xml.push_str("<Latest>");
            xml.push_str(&b.0);
            xml.push_str("</Latest>");
        }
        xml.push_str("</BlockList>");
        let mut h = self.commit_headers(meta).await?;
        h.push(("content-md5".into(), md5_b64(xml.as_bytes())));
        let url = self.url(Some(&up.key), &[("comp", "blocklist")]);
        self.put(url, Bytes::from(xml), &h, &format!("commit {}", up.key))
            .await?;
        self.said_unread();
        Ok(())
    }

    pub(super) async fn create_container(&self) -> Result<()> {
        let url = self.url(None, &[("restype", "container")]);
        self.put(
            url,
            Bytes::new(),
            &[],
            &format!("create container {}", self.container),
        )
        .await
    }
}

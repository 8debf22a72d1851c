//! Azure Blob writes with a Content-MD5 on every request, so that the service verifies each
//! block, and metadata on the block list, so that ferry's digest lands with the commit.
//! Signing and transport are `object_store`'s; this module only names the three requests.

use base64::prelude::{Engine, BASE64_STANDARD};
use bytes::Bytes;
use http::{HeaderValue, Method};
use md5::{Digest, Md5};
use object_store::azure::{AzureAuthorizer, AzureCredentialProvider};
use object_store::client::{HttpClient, HttpRequest, HttpRequestBody};
use url::Url;

use super::signed::send;
use crate::{BlockId, Error, Meta, Result, Upload};

/// Writes blobs and blocks to one container.
#[derive(Debug)]
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
        let len = body.len();
        let mut req: HttpRequest = http::Request::builder()
            .method(Method::PUT)
            .uri(url.as_str())
            .body(HttpRequestBody::from(body))
            .map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
        let h = req.headers_mut();
        // Content-Length is part of the SharedKey signature: set it before signing.
        h.insert(http::header::CONTENT_LENGTH, HeaderValue::from(len));
        for (k, v) in headers {
            let name = http::HeaderName::try_from(k.as_str())
                .map_err(|e| Error::Invalid(format!("header {k}: {e}")))?;
            let value = HeaderValue::try_from(v.as_str())
                .map_err(|e| Error::Invalid(format!("header {k}: {e}")))?;
            h.insert(name, value);
        }
        let credential = self.credentials.get_credential().await?;
        AzureAuthorizer::new(&credential, &self.account).try_authorize(&mut req)?;
        send(&self.http, req, what).await
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
        let mut h = self.meta_headers(meta);
        h.push(("x-ms-blob-type".into(), "BlockBlob".into()));
        h.push(("content-md5".into(), md5_b64(&data)));
        self.put(self.url(Some(key), &[]), data, &h, &format!("put {key}"))
            .await
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
        let mut h = self.meta_headers(meta);
        h.push(("content-md5".into(), md5_b64(xml.as_bytes())));
        let url = self.url(Some(&up.key), &[("comp", "blocklist")]);
        self.put(url, Bytes::from(xml), &h, &format!("commit {}", up.key))
            .await
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

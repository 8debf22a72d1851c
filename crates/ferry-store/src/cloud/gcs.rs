//! Google Cloud Storage writes through the JSON API: whole objects as one multipart insert
//! (metadata and an `md5Hash` the service verifies, in the same request), and the engine's
//! blocks as objects of their own, composed into the target at the end.
//!
//! Why not `object_store`'s XML multipart: compose is GCS's native way to build an object from
//! parts uploaded in parallel, needs no upload session that can expire, and is what GCS
//! emulators (fake-gcs-server) implement. Reads, listings and deletes go through
//! `object_store`'s XML client.
//!
//! A block is written as `.ferry-uploads/SESSION/NNNNN`; more than 32 blocks are composed in
//! rounds (32 sources per request), and the parts are deleted once the target exists. Listings
//! of the store leave `.ferry-uploads/` out, as S3 keeps open multipart uploads out of sight.

use base64::prelude::{Engine, BASE64_STANDARD};
use bytes::Bytes;
use http::{HeaderValue, Method};
use md5::{Digest, Md5};
use object_store::client::{HttpClient, HttpRequest, HttpRequestBody};
use object_store::gcp::GcpCredentialProvider;
use object_store::PutPayload;
use serde_json::{json, Value};
use url::Url;

use super::signed::{send, send_for_body};
use crate::{BlockId, Error, Meta, Result, Upload};

/// Where block objects live until they are composed.
pub(super) const UPLOADS: &str = ".ferry-uploads/";
/// Sources one compose request takes.
const COMPOSE_MAX: usize = 32;

/// Writes objects to one bucket.
#[derive(Debug)]
pub(super) struct GcsWriter {
    http: HttpClient,
    base: Url,
    bucket: String,
    project: Option<String>,
    credentials: GcpCredentialProvider,
    /// Storage class of objects committed; parts stay STANDARD (a colder class bills early
    /// deletion, and parts live for seconds).
    class: Option<String>,
}

/// The object names of one listing page that lie under `prefix`. The answer is the server's:
/// a name outside what was asked for (which abort would then delete) is dropped.
fn names_in(page: &Value, prefix: &str) -> Vec<String> {
    let items = page["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    items
        .iter()
        .filter_map(|i| i["name"].as_str())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

fn md5_b64(data: &[u8]) -> String {
    BASE64_STANDARD.encode(Md5::digest(data))
}

impl GcsWriter {
    pub(super) fn new(
        http: HttpClient, base: &str, bucket: &str, project: Option<String>,
        credentials: GcpCredentialProvider, class: Option<String>,
    ) -> Result<Self> {
        let base =
            Url::parse(base).map_err(|e| Error::Invalid(format!("GCS endpoint {base}: {e}")))?;
        Ok(Self {
            http,
            base,
            bucket: bucket.into(),
            project,
            credentials,
            class,
        })
    }

    /// `BASE/PREFIX.../b/BUCKET/o/NAME/TAIL...`, each part one path segment (a `/` in the
    /// object name is encoded, as the JSON API wants).
    fn url(&self, prefix: &[&str], name: Option<&str>, tail: &[&str]) -> Url {
        let mut url = self.base.clone();
        {
            let mut s = url.path_segments_mut().expect("http URL");
            s.pop_if_empty().extend(prefix).extend(["b", &self.bucket]);
            if let Some(n) = name {
                s.extend(["o", n]);
            }
            s.extend(tail);
        }
        url
    }

    async fn request(
        &self, method: Method, url: Url, body: HttpRequestBody, content_type: Option<&str>,
    ) -> Result<HttpRequest> {
        let mut req: HttpRequest = http::Request::builder()
            .method(method)
            .uri(url.as_str())
            .body(body)
            .map_err(|e| Error::Invalid(format!("GCS request {url}: {e}")))?;
        let h = req.headers_mut();
        if let Some(ct) = content_type {
            h.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_str(ct).expect("ascii"),
            );
        }
        let token = self.credentials.get_credential().await?;
        // An emulator takes no token: its credential is empty.
        if !token.bearer.is_empty() {
            let v = HeaderValue::from_str(&format!("Bearer {}", token.bearer))
                .map_err(|_| Error::Invalid("GCS token is not a header value".into()))?;
            h.insert(http::header::AUTHORIZATION, v);
        }
        Ok(req)
    }

    /// A whole object: in its storage class.
    pub(super) async fn put(&self, name: &str, data: Bytes, meta: &Meta) -> Result<()> {
        self.insert(name, data, meta, self.class.as_deref()).await
    }

    /// One object with its metadata, in one multipart/related request; GCS checks `md5Hash`.
    async fn insert(
        &self, name: &str, data: Bytes, meta: &Meta, class: Option<&str>,
    ) -> Result<()> {
        let boundary = format!("ferry{:016x}", rand::random::<u64>());
        let mut head = json!({"name": name, "md5Hash": md5_b64(&data), "metadata": meta});
        if let Some(c) = class {
            head["storageClass"] = json!(c);
        }
        let open = format!(
            "--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{head}\r\n\
             --{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n"
        );
        let close = format!("\r\n--{boundary}--\r\n");
        // The block is not copied: the body is the three pieces in turn.
        let payload: PutPayload = [Bytes::from(open), data, Bytes::from(close)]
            .into_iter()
            .collect();
        let mut url = self.url(&["upload", "storage", "v1"], None, &["o"]);
        url.query_pairs_mut().append_pair("uploadType", "multipart");
        let ct = format!("multipart/related; boundary={boundary}");
        let req = self
            .request(Method::POST, url, HttpRequestBody::from(payload), Some(&ct))
            .await?;
        send(&self.http, req, &format!("put {name}")).await
    }

    pub(super) async fn put_block(&self, up: &Upload, idx: usize, data: Bytes) -> Result<BlockId> {
        let name = format!("{UPLOADS}{}/{idx:05}", up.id);
        self.insert(&name, data, &Meta::new(), None).await?;
        Ok(BlockId(name))
    }

    async fn compose(
        &self, sources: &[String], dest: &str, meta: &Meta, class: Option<&str>,
    ) -> Result<()> {
        let mut body = json!({
            "sourceObjects": sources.iter().map(|s| json!({"name": s})).collect::<Vec<_>>(),
            "destination": {"contentType": "application/octet-stream", "metadata": meta},
        });
        if let Some(c) = class {
            body["destination"]["storageClass"] = json!(c);
        }
        let url = self.url(&["storage", "v1"], Some(dest), &["compose"]);
        let req = self
            .request(
                Method::POST,
                url,
                HttpRequestBody::from(body.to_string()),
                Some("application/json"),
            )
            .await?;
        send(&self.http, req, &format!("compose {dest}")).await
    }

    /// Composes the blocks into the target in rounds of [`COMPOSE_MAX`], then deletes them.
    pub(super) async fn complete(
        &self, up: &Upload, blocks: &[BlockId], meta: &Meta,
    ) -> Result<()> {
        let mut level: Vec<String> = blocks.iter().map(|b| b.0.clone()).collect();
        for name in &level {
            // A block id is a name ferry made: never compose someone else's object.
            if !name.starts_with(&format!("{UPLOADS}{}/", up.id)) {
                return Err(Error::Invalid(format!(
                    "block {name} is not of upload {}",
                    up.id
                )));
            }
        }
        let mut made = level.clone();
        let mut round = 0;
        while level.len() > COMPOSE_MAX {
            let mut next = Vec::new();
            for (i, group) in level.chunks(COMPOSE_MAX).enumerate() {
                let name = format!("{UPLOADS}{}/r{round}-{i:05}", up.id);
                self.compose(group, &name, &Meta::new(), None).await?;
                next.push(name);
            }
            made.extend(next.iter().cloned());
            level = next;
            round += 1;
        }
        self.compose(&level, &up.key, meta, self.class.as_deref())
            .await?;
        for name in made {
            if let Err(e) = self.delete(&name).await {
                tracing::warn!("{} is composed; its part {name} is left: {e}", up.key);
            }
        }
        Ok(())
    }

    async fn delete(&self, name: &str) -> Result<()> {
        let url = self.url(&["storage", "v1"], Some(name), &[]);
        let req = self
            .request(Method::DELETE, url, HttpRequestBody::empty(), None)
            .await?;
        match send(&self.http, req, &format!("delete {name}")).await {
            Err(Error::NotFound(_)) => Ok(()),
            r => r,
        }
    }

    /// Names of objects under `prefix`, every page.
    pub(super) async fn names(&self, prefix: &str) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let mut page: Option<String> = None;
        loop {
            let mut url = self.url(&["storage", "v1"], None, &["o"]);
            url.query_pairs_mut()
                .append_pair("prefix", prefix)
                .append_pair("fields", "items(name),nextPageToken");
            if let Some(p) = &page {
                url.query_pairs_mut().append_pair("pageToken", p);
            }
            let req = self
                .request(Method::GET, url, HttpRequestBody::empty(), None)
                .await?;
            let body = send_for_body(&self.http, req, &format!("list {prefix}")).await?;
            let v: Value = serde_json::from_slice(&body)
                .map_err(|e| Error::Permanent(format!("list {prefix}: not JSON: {e}")))?;
            out.extend(names_in(&v, prefix));
            match v["nextPageToken"].as_str() {
                Some(p) if !p.is_empty() => page = Some(p.to_string()),
                _ => return Ok(out),
            }
        }
    }

    /// Deletes an upload's parts.
    pub(super) async fn abort(&self, up: &Upload) -> Result<()> {
        for name in self.names(&format!("{UPLOADS}{}/", up.id)).await? {
            self.delete(&name).await?;
        }
        Ok(())
    }

    pub(super) async fn create_bucket(&self) -> Result<()> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("http URL")
            .pop_if_empty()
            .extend(["storage", "v1", "b"]);
        let project = self.project.as_deref().ok_or_else(|| {
            Error::Invalid("creating a GCS bucket needs a project: set GOOGLE_CLOUD_PROJECT".into())
        })?;
        url.query_pairs_mut().append_pair("project", project);
        let body = json!({"name": self.bucket}).to_string();
        let req = self
            .request(
                Method::POST,
                url,
                HttpRequestBody::from(body),
                Some("application/json"),
            )
            .await?;
        send(&self.http, req, &format!("create bucket {}", self.bucket)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_yields_only_names_under_what_was_asked() {
        let page = json!({"items": [
            {"name": ".ferry-uploads/s1/00000"},
            {"name": "repo/config"},
            {"name": 7},
            {},
            {"name": ".ferry-uploads/s10/00000"},
            {"name": ".ferry-uploads/s1/00001"}
        ]});
        assert_eq!(
            names_in(&page, ".ferry-uploads/s1/"),
            [".ferry-uploads/s1/00000", ".ferry-uploads/s1/00001"]
        );
        assert!(names_in(&json!({"items": "x"}), "").is_empty());
    }
}

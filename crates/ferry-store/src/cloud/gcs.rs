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
//! rounds (32 sources per request), and the parts are deleted once the target exists (by the
//! caller, in parallel: [`leftovers`]). Listings of the store leave `.ferry-uploads/` out, as
//! S3 keeps open multipart uploads out of sight.

use base64::prelude::{Engine, BASE64_STANDARD};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
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
/// Parts an abort deletes at once: one request each, and a 1 GiB upload has about 200.
const DELETES_AT_ONCE: usize = 16;

/// Writes objects to one bucket. Its `Debug` leaves the credentials out (object_store's
/// token or service-account key print themselves).
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

impl std::fmt::Debug for GcsWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcsWriter")
            .field("base", &self.base.as_str())
            .field("bucket", &self.bucket)
            .field("project", &self.project)
            .field("class", &self.class)
            .field("credentials", &"***")
            .finish_non_exhaustive()
    }
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

/// Where the objects of upload `up` live until they are composed.
fn session_dir(up: &Upload) -> String {
    format!("{UPLOADS}{}/", up.id)
}

/// The name of block `idx` of upload `up`.
fn part_name(up: &Upload, idx: usize) -> String {
    format!("{}{idx:05}", session_dir(up))
}

/// The objects each compose round of an upload of `blocks` parts makes, in order: a round
/// composes groups of [`COMPOSE_MAX`] of the level below until one request can take them all.
fn rounds(up: &Upload, blocks: usize) -> Vec<Vec<String>> {
    let (mut out, mut n) = (Vec::new(), blocks);
    while n > COMPOSE_MAX {
        n = n.div_ceil(COMPOSE_MAX);
        let r = out.len();
        out.push(
            (0..n)
                .map(|i| format!("{}r{r}-{i:05}", session_dir(up)))
                .collect(),
        );
    }
    out
}

/// What a completed upload of `blocks` leaves under `.ferry-uploads/`: its parts and the
/// objects of its compose rounds.
pub(super) fn leftovers(up: &Upload, blocks: &[BlockId]) -> Vec<String> {
    let mut out: Vec<String> = (0..blocks.len()).map(|i| part_name(up, i)).collect();
    out.extend(rounds(up, blocks.len()).into_iter().flatten());
    out
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
        let name = part_name(up, idx);
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

    /// Composes the blocks into the target in rounds of [`COMPOSE_MAX`]. The parts and the
    /// rounds' objects stay: [`leftovers`] names them for the caller to delete, each as a
    /// request of its own that is retried and run in parallel. Deleted here one after
    /// another, they were most of a 1 GiB upload's time on an 80 ms link (212 round trips).
    pub(super) async fn complete(
        &self, up: &Upload, blocks: &[BlockId], meta: &Meta,
    ) -> Result<()> {
        for b in blocks {
            // A block id is a name ferry made: never compose someone else's object.
            if !b.0.starts_with(&session_dir(up)) {
                return Err(Error::Invalid(format!(
                    "block {} is not of upload {}",
                    b.0, up.id
                )));
            }
        }
        let mut level: Vec<String> = blocks.iter().map(|b| b.0.clone()).collect();
        for round in rounds(up, blocks.len()) {
            // A round's objects are independent of each other: composed at once.
            let none = Meta::new();
            let groups = level.chunks(COMPOSE_MAX).zip(&round);
            futures::future::try_join_all(
                groups.map(|(group, name)| self.compose(group, name, &none, None)),
            )
            .await?;
            level = round;
        }
        self.compose(&level, &up.key, meta, self.class.as_deref())
            .await
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
        let names = self.names(&session_dir(up)).await?;
        futures::stream::iter(names)
            .map(|n| async move { self.delete(&n).await })
            .buffer_unordered(DELETES_AT_ONCE)
            .try_collect()
            .await
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

    #[test]
    fn leftovers_are_every_part_and_every_round_object() {
        let up = Upload::new("k", "s1".to_string());
        let blocks = |n: usize| {
            (0..n)
                .map(|i| BlockId(part_name(&up, i)))
                .collect::<Vec<_>>()
        };
        // One compose takes 32 sources: no rounds below that.
        assert_eq!(leftovers(&up, &blocks(32)).len(), 32);
        let left = leftovers(&up, &blocks(100));
        assert_eq!(left.len(), 100 + 4);
        assert_eq!(left[0], ".ferry-uploads/s1/00000");
        assert_eq!(left[103], ".ferry-uploads/s1/r0-00003");
        // 1025 parts: 33 objects in round 0, 2 in round 1, then the target.
        let r = rounds(&up, 1025);
        assert_eq!(r.iter().map(Vec::len).collect::<Vec<_>>(), [33, 2]);
        assert_eq!(leftovers(&up, &blocks(1025)).len(), 1025 + 35);
        assert!(leftovers(&up, &blocks(1025))
            .iter()
            .all(|n| n.starts_with(".ferry-uploads/s1/")));
    }
}

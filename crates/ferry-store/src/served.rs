//! A `ferry serve` server as a store (`ferry+https://HOST:PORT/TENANT/KEY`): ferry's object
//! protocol over the same metered HTTP client as the clouds. Keys start with the tenant;
//! the server keeps each tenant inside its prefix, so a key naming another is refused there.

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Request, StatusCode};
use object_store::client::{HttpClient, HttpRequestBody};
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};

use crate::bounded::MAX_GET;
use crate::{BlockId, DigestKind, Error, Limits, Meta, ObjectInfo, Result, Store, Upload};

/// Largest block the server takes in one request (its default `max_body` is 128 MiB);
/// larger objects go in blocks that the server composes.
pub const MAX_BLOCK: u64 = 64 << 20;

/// The longest answer read where no object is asked for: an error's words, a PUT's
/// receipt.
const ANSWER: u64 = 64 << 10;

/// What a path segment escapes: everything but unreserved characters.
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'/')
    .add(b'\\')
    .add(b'^')
    .add(b'|')
    .add(b'[')
    .add(b']');

/// A `ferry serve` endpoint, reached with one tenant's token.
pub struct ServedStore {
    base: String,
    token: String,
    http: HttpClient,
}

impl std::fmt::Debug for ServedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedStore")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl ServedStore {
    /// The server at `host_port`, trusting `ca_cert` besides the system's roots; `token`
    /// authenticates every request (never printed).
    pub fn new(host_port: &str, token: &str, ca_cert: Option<&PathBuf>) -> Result<ServedStore> {
        if token.is_empty() {
            return Err(Error::Denied(
                "ferry+https:// needs a tenant token: set FERRY_SERVE_TOKEN".into(),
            ));
        }
        // A token in the URL (`TENANT:TOKEN@HOST`) would be shown by url() in every
        // message: Location::parse refuses it, and so does this, for any other caller.
        if host_port.contains('@') || host_port.contains('/') {
            return Err(Error::Invalid(
                "ferry+https:// takes HOST:PORT only, no user name or token: set FERRY_SERVE_TOKEN"
                    .into(),
            ));
        }
        Ok(ServedStore {
            base: format!("https://{host_port}"),
            token: token.to_string(),
            http: crate::cloud::config::connector(ca_cert)?.http(),
        })
    }

    fn path(key: &str) -> String {
        key.split('/')
            .map(|s| utf8_percent_encode(s, SEGMENT).to_string())
            .collect::<Vec<_>>()
            .join("/")
    }

    /// One request. The answer's body is read up to `limit` bytes (what a GET asked for, a
    /// short text for the others), whatever the server sends.
    async fn call(
        &self, method: Method, path_query: &str, range: Option<Range<u64>>, body: Bytes, limit: u64,
    ) -> Result<(StatusCode, http::HeaderMap, Bytes)> {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}/v1/{path_query}", self.base))
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-length", body.len());
        if let Some(r) = &range {
            req = req.header("range", format!("bytes={}-{}", r.start, r.end - 1));
        }
        let req = req
            .body(HttpRequestBody::from(body))
            .map_err(|e| Error::Invalid(e.to_string()))?;
        let what = path_query.split('?').next().unwrap_or_default().to_string();
        let res = self
            .http
            .execute(req)
            .await
            .map_err(|e| Error::Transient(format!("{what}: {}", crate::error::one_line(&e))))?;
        let (parts, body) = res.into_parts();
        let status = parts.status;
        let limit = if status.is_success() { limit } else { ANSWER };
        let hint = match (&range, status.is_success()) {
            (Some(r), true) => r.end - r.start,
            _ => 0,
        };
        let stream = body.bytes_stream().map(|c| {
            c.map_err(|e| Error::Transient(format!("{what}: {}", crate::error::one_line(&e))))
        });
        let bytes = crate::bounded::collect(stream, limit, hint, &what).await?;
        if status.is_success() {
            return Ok((status, parts.headers, bytes));
        }
        // The server's words, escaped: no control character reaches a terminal or a log.
        let why: String = String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
            .trim()
            .escape_debug()
            .collect();
        let msg = format!("{}/{what}: {status}: {why}", self.url());
        Err(match status.as_u16() {
            404 => Error::NotFound(msg),
            401 | 403 => Error::Denied(msg),
            409 => Error::AlreadyExists(msg),
            503 => {
                let after = parts
                    .headers
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                    .unwrap_or(1);
                Error::Busy(msg, Duration::from_secs(after.min(300)))
            }
            500..=599 => Error::Transient(msg),
            _ => Error::Permanent(msg),
        })
    }
}

#[async_trait]
impl Store for ServedStore {
    fn url(&self) -> String {
        self.base.replacen("https://", "ferry+https://", 1)
    }

    fn limits(&self) -> Limits {
        Limits {
            min_block: 1,
            max_block: MAX_BLOCK,
            max_blocks: 10_000,
        }
    }

    fn digest(&self, _: &ObjectInfo) -> Option<String> {
        None
    }

    /// The server keeps no metadata: what is read back is authenticated by the repository
    /// or WAL layer above (ferry seals every object it writes there).
    fn digest_kind(&self) -> Option<DigestKind> {
        None
    }

    async fn put(&self, key: &str, data: Bytes, _meta: &Meta) -> Result<()> {
        self.call(Method::PUT, &Self::path(key), None, data, ANSWER)
            .await?;
        Ok(())
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let want = range.end - range.start;
        let (_, _, b) = self
            .call(
                Method::GET,
                &Self::path(key),
                Some(range),
                Bytes::new(),
                want,
            )
            .await?;
        if b.len() as u64 != want {
            return Err(Error::Transient(format!(
                "{key}: {} bytes of {want} came",
                b.len()
            )));
        }
        Ok(b)
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        Ok(self
            .call(Method::GET, &Self::path(key), None, Bytes::new(), MAX_GET)
            .await?
            .2)
    }

    async fn head(&self, key: &str) -> Result<ObjectInfo> {
        let (_, h, _) = self
            .call(Method::HEAD, &Self::path(key), None, Bytes::new(), ANSWER)
            .await?;
        let size = h
            .get("content-length")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .ok_or_else(|| Error::Permanent(format!("{key}: no size in the answer")))?;
        Ok(ObjectInfo {
            checksum: None,
            key: key.to_string(),
            size,
            ..Default::default()
        })
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        // The tenant is the prefix's first segment; the server lists below a directory.
        let (tenant, rest) = prefix.split_once('/').unwrap_or((prefix, ""));
        let dir = rest.trim_end_matches('/');
        let path = match dir.is_empty() {
            true => format!("{}/?list", Self::path(tenant)),
            false => format!("{}/{}/?list", Self::path(tenant), Self::path(dir)),
        };
        let body = match self
            .call(Method::GET, &path, None, Bytes::new(), MAX_GET)
            .await
        {
            Ok((_, _, b)) => b,
            Err(Error::NotFound(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        #[derive(serde::Deserialize)]
        struct Listed {
            key: String,
            size: u64,
        }
        let all: Vec<Listed> = serde_json::from_slice(&body)
            .map_err(|e| Error::Permanent(format!("{prefix}: a listing that is not JSON: {e}")))?;
        let mut out: Vec<ObjectInfo> = all
            .into_iter()
            .map(|l| ObjectInfo {
                checksum: None,
                key: format!("{tenant}/{}", l.key),
                size: l.size,
                ..Default::default()
            })
            .filter(|o| o.key.starts_with(prefix))
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn delete(&self, key: &str) -> Result<()> {
        match self
            .call(Method::DELETE, &Self::path(key), None, Bytes::new(), ANSWER)
            .await
        {
            Ok(_) | Err(Error::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn create_root(&self) -> Result<()> {
        Ok(())
    }

    async fn start_upload(&self, key: &str, _meta: &Meta) -> Result<Upload> {
        // The session is the server's once its first block arrives: the id is ours to pick.
        Ok(Upload::new(key, format!("{:032x}", rand::random::<u128>())))
    }

    async fn put_block(
        &self, up: &Upload, idx: usize, _offset: u64, data: Bytes,
    ) -> Result<BlockId> {
        let q = format!("{}?upload={}&part={idx}", Self::path(&up.key), up.id);
        self.call(Method::PUT, &q, None, data, ANSWER).await?;
        Ok(BlockId(idx.to_string()))
    }

    async fn complete_upload(
        &self, up: &Upload, blocks: Vec<BlockId>, _meta: &Meta,
    ) -> Result<Option<String>> {
        // The server composes blocks 0..n in order: that is what the engine hands over.
        if blocks.iter().enumerate().any(|(i, b)| b.0 != i.to_string()) {
            return Err(Error::Invalid(format!("{}: blocks out of order", up.key)));
        }
        let q = format!(
            "{}?upload={}&parts={}",
            Self::path(&up.key),
            up.id,
            blocks.len()
        );
        self.call(Method::POST, &q, None, Bytes::new(), ANSWER)
            .await?;
        Ok(None)
    }

    async fn abort_upload(&self, up: &Upload) -> Result<()> {
        let q = format!("{}?upload={}", Self::path(&up.key), up.id);
        self.call(Method::DELETE, &q, None, Bytes::new(), ANSWER)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token in the host part would be shown by url(): refused, and not repeated.
    #[test]
    fn a_token_in_the_host_is_refused_and_not_repeated() {
        let e = ServedStore::new("t:TOKSECRET@h:8443", "token", None).unwrap_err();
        let e = e.to_string();
        assert!(
            !e.contains("TOKSECRET") && e.contains("FERRY_SERVE_TOKEN"),
            "{e}"
        );
    }
}

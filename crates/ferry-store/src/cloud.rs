//! S3, Azure Blob and Google Cloud Storage through `object_store`.
//!
//! `object_store` does the transport, signing and S3 multipart: it exposes
//! `MultipartStore::put_part(part_idx)`, so the engine schedules and retries each part, and it
//! sends `x-amz-checksum-sha256` with every part, which the server verifies. Its Azure client
//! sends no Content-MD5 on Put Block and takes no metadata on a low-level block list, so Azure
//! writes go through [`azure`]: the same crate's authorizer and HTTP client, three requests.
//! GCS writes go through [`gcs`] (JSON API inserts and compose), reads through the crate.

mod aws_credentials;
mod aws_profile;
mod azure;
mod azure_lock;
pub(crate) mod config;
mod explained;
mod gcs;
pub(crate) mod metered;
mod s3_parts;
mod signed;
mod trust;

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{
    Attribute, Attributes, GetOptions, ObjectStore, ObjectStoreExt, PutMultipartOptions,
    PutOptions, PutPayload,
};

pub use config::{AzureConfig, GcsConfig, S3Config};
pub(crate) use explained::MISSING;

use crate::{
    bounded, BlockId, DigestKind, Error, Limits, LockMode, Meta, ObjectInfo, Result, Store, Upload,
    META_DIGEST,
};

/// Environment variables that hold a secret ferry reads: its own (repository passwords, the
/// serve token), the stores' (Azure keys, SAS tokens, client secrets, connection strings)
/// and PostgreSQL's. A program ferry runs for an answer (an AWS `credential_process`,
/// `--password-command`) is handed none of them: see [`hidden_from_helpers`].
///
/// AWS's own `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN` are not here: they are the
/// ambient credentials the AWS tools such helpers often are (`aws secretsmanager` as a
/// password command, a `credential_process` that exchanges them) work from, and static
/// keys come before any `credential_process` in ferry's chain.
pub const SECRET_VARS: &[&str] = &[
    "FERRY_PASSWORD",
    "FERRY_FROM_PASSWORD",
    "FERRY_NEW_PASSWORD",
    "FERRY_SERVE_TOKEN",
    "FERRY_AZURE_CONNECTION_STRING",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_CLIENT_SECRET",
    "AZURE_STORAGE_CLIENT_SECRET",
    "PGPASSWORD",
    "FERRY_PG_CONNINFO",
    "FERRY_PG_PRIMARY_CONNINFO",
];

/// The variables a helper's environment leaves out: [`SECRET_VARS`], and `FERRY_REPO` when
/// it may carry one ([`crate::Location::secret_in`]).
pub fn hidden_from_helpers() -> Vec<&'static str> {
    let repo = std::env::var_os("FERRY_REPO").map(|r| r.to_string_lossy().into_owned());
    hidden_with_repo(repo.as_deref())
}

fn hidden_with_repo(repo: Option<&str>) -> Vec<&'static str> {
    let mut v = SECRET_VARS.to_vec();
    if repo.is_some_and(|r| crate::Location::secret_in(r).is_some()) {
        v.push("FERRY_REPO");
    }
    v
}

/// Which cloud a [`CloudStore`] talks to, with what that cloud needs beyond `object_store`.
/// Each writer's own `Debug` shows where it writes, never its credentials.
#[derive(Debug)]
enum Flavor {
    S3(config::S3Extra),
    Azure(azure::AzureWriter),
    Gcs(gcs::GcsWriter),
}

/// A bucket (S3) or container (Azure) as a [`Store`]. Its `Debug` leaves out the
/// `object_store` client, whose own would print the credentials it signs with.
pub struct CloudStore {
    flavor: Flavor,
    bucket: String,
    inner: Arc<dyn ObjectStore>,
    s3: Option<Arc<object_store::aws::AmazonS3>>,
    /// [`Store::warm`] has run: later transfers of the process start from the pool as the
    /// earlier ones left it (idle connections close after 50 s).
    warmed: AtomicBool,
}

impl std::fmt::Debug for CloudStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudStore")
            .field("flavor", &self.flavor)
            .field("bucket", &self.bucket)
            .finish_non_exhaustive()
    }
}

impl CloudStore {
    /// [`Store::head`], then the bytes of `range` it holds: two requests.
    async fn head_then_read(&self, key: &str, range: Range<u64>) -> Result<(ObjectInfo, Bytes)> {
        let info = self.head(key).await?;
        let data = self.get_range(key, crate::within(range, info.size)).await?;
        Ok((info, data))
    }

    /// An S3 bucket.
    pub fn s3(cfg: &S3Config, bucket: &str) -> Result<Self> {
        let (s3, extra) = cfg.build(bucket)?;
        let s3 = Arc::new(s3);
        Ok(Self {
            flavor: Flavor::S3(extra),
            warmed: AtomicBool::new(false),
            bucket: bucket.into(),
            inner: s3.clone(),
            s3: Some(s3),
        })
    }

    /// An Azure Blob container.
    pub fn azure(cfg: &AzureConfig, container: &str) -> Result<Self> {
        let (az, writer) = cfg.build(container)?;
        Ok(Self {
            flavor: Flavor::Azure(writer),
            warmed: AtomicBool::new(false),
            bucket: container.into(),
            inner: Arc::new(az),
            s3: None,
        })
    }

    /// A Google Cloud Storage bucket.
    pub fn gcs(cfg: &GcsConfig, bucket: &str) -> Result<Self> {
        let (gcs, writer) = cfg.build(bucket)?;
        Ok(Self {
            flavor: Flavor::Gcs(writer),
            warmed: AtomicBool::new(false),
            bucket: bucket.into(),
            inner: Arc::new(gcs),
            s3: None,
        })
    }

    /// Keys under `prefix` with a multipart upload still open (S3), or the parts of GCS
    /// uploads not composed (wherever their target); Azure keeps uncommitted blocks
    /// invisible and expires them on its own, so it has none to show.
    pub async fn pending_uploads(&self, prefix: &str) -> Result<Vec<String>> {
        match &self.flavor {
            Flavor::S3(extra) => extra.pending_uploads(prefix).await,
            Flavor::Azure(_) => Ok(Vec::new()),
            Flavor::Gcs(w) => w.names(gcs::UPLOADS).await,
        }
    }

    fn multipart(&self) -> &object_store::aws::AmazonS3 {
        self.s3.as_deref().expect("S3 multipart on an S3 store")
    }
}

fn path(key: &str) -> Result<Path> {
    Path::parse(key).map_err(|e| Error::Invalid(format!("bad object key '{key}': {e}")))
}

fn attributes(meta: &Meta, class: Option<&String>) -> Attributes {
    meta.iter()
        .map(|(k, v)| {
            (
                Attribute::Metadata(k.clone().into()),
                object_store::AttributeValue::from(v.clone()),
            )
        })
        .chain(class.map(|c| (Attribute::StorageClass, c.clone().into())))
        .collect()
}

fn unquote(etag: Option<String>) -> Option<String> {
    etag.map(|e| e.trim_matches('"').to_string())
}

/// True for an MD5 ETag (`hex32`, or `hex32-N` for multipart): S3 computes these itself.
fn is_md5_etag(e: &str) -> bool {
    let (hex, n) = e.split_once('-').unwrap_or((e, "1"));
    hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()) && n.parse::<u32>().is_ok()
}

#[async_trait]
impl Store for CloudStore {
    fn url(&self) -> String {
        match self.flavor {
            Flavor::S3(_) => format!("s3://{}", self.bucket),
            Flavor::Azure(_) => format!("az://{}", self.bucket),
            Flavor::Gcs(_) => format!("gs://{}", self.bucket),
        }
    }

    fn limits(&self) -> Limits {
        match self.flavor {
            Flavor::S3(_) => Limits {
                min_block: 5 << 20,
                max_block: 5 << 30,
                max_blocks: 10_000,
            },
            Flavor::Azure(_) => Limits {
                min_block: 1,
                max_block: 4000 << 20,
                max_blocks: 50_000,
            },
            // A composite object holds at most 1024 components.
            Flavor::Gcs(_) => Limits {
                min_block: 1,
                max_block: 5 << 30,
                max_blocks: 1024,
            },
        }
    }

    fn digest(&self, info: &ObjectInfo) -> Option<String> {
        match &self.flavor {
            Flavor::S3(extra) if extra.md5_etags => info.etag.clone().filter(|e| is_md5_etag(e)),
            Flavor::S3(_) => info.meta.get(META_DIGEST).cloned(),
            Flavor::Azure(_) | Flavor::Gcs(_) => info.meta.get(META_DIGEST).cloned(),
        }
    }

    // S3 checks each part of ferry's against the checksum sent with it (SHA-256), and the
    // part's receipt says so (else its ETag is checked: `s3_parts`): the engine hashes nothing
    // for such writes. Under SSE, whose ETags are no MD5s, ferry records its own.
    fn digest_kind(&self) -> Option<DigestKind> {
        match &self.flavor {
            Flavor::S3(extra) if extra.md5_etags => None,
            _ => Some(DigestKind::Md5),
        }
    }

    async fn put(&self, key: &str, data: Bytes, meta: &Meta) -> Result<()> {
        match &self.flavor {
            Flavor::Azure(w) => w.put_blob(key, data, meta).await,
            Flavor::Gcs(w) => w.put(key, data, meta).await,
            Flavor::S3(extra) => {
                let opts = PutOptions {
                    attributes: attributes(meta, extra.storage_class.as_ref()),
                    ..Default::default()
                };
                self.inner
                    .put_opts(&path(key)?, PutPayload::from(data), opts)
                    .await?;
                Ok(())
            }
        }
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let want = range.end - range.start;
        let opts = GetOptions {
            range: Some(range.into()),
            ..Default::default()
        };
        let r = self.inner.get_opts(&path(key)?, opts).await?;
        whole(key, body(key, r, want).await?, want)
    }

    // One request instead of HEAD then GET: a repository's small files over a slow link.
    async fn get(&self, key: &str) -> Result<Bytes> {
        let r = self.inner.get(&path(key)?).await?;
        crate::too_long(key, r.meta.size)?;
        body(key, r, bounded::MAX_GET).await
    }

    // HEADs of the key, whatever they answer (a missing object, a write-only credential's
    // 403): HTTP/1 keeps the connection, and the pool hands it to the next request. Measured
    // on lfp (200 ms, a handshake a round trip): a download's first 8 blocks all ended at
    // 1.24 s instead of one then, seven at 1.45 s, and the start went to 24 requests a tick
    // (0.1 s) sooner both ways.
    async fn warm(&self, key: &str, n: usize) {
        if n == 0 || self.warmed.swap(true, Ordering::Relaxed) {
            return;
        }
        futures::future::join_all((0..n).map(|_| self.head(key))).await;
    }

    async fn head(&self, key: &str) -> Result<ObjectInfo> {
        if let Flavor::S3(extra) = &self.flavor {
            return extra.head(key).await;
        }
        let opts = GetOptions {
            head: true,
            ..Default::default()
        };
        let r = self.inner.get_opts(&path(key)?, opts).await?;
        Ok(info_of(key, &r))
    }

    async fn head_and_read(&self, key: &str, range: Range<u64>) -> Result<(ObjectInfo, Bytes)> {
        // At least a byte: an empty range is no request the store takes (none at the last
        // offset there is: a range a client named, asked of the store).
        let asked = range.start..range.end.max(range.start.saturating_add(1));
        let opts = GetOptions {
            range: Some(asked.clone().into()),
            ..Default::default()
        };
        if let Flavor::S3(extra) = &self.flavor {
            // S3's answer must be read for how the object is encrypted (its ETag is no MD5
            // under SSE-KMS or SSE-C), which object_store's GET drops: a HEAD of ferry's own
            // beside the GET of the first bytes, both at once (one round trip, not two: 0.2 s
            // of a 1 GiB download over a 200 ms link). The bytes count only when they come
            // from the object the HEAD described; else, or when the GET failed (an empty
            // object has no first byte to give, nor one a range starts past), they are read
            // again after it.
            let p = path(key)?;
            let first = async {
                let r = self.inner.get_opts(&p, opts).await?;
                let tag = unquote(r.meta.e_tag.clone());
                let size = r.meta.size;
                Ok::<_, Error>((tag, size, body(key, r, asked.end - asked.start).await?))
            };
            let (info, first) = tokio::join!(extra.head(key), first);
            let info = info?;
            let want = crate::within(range, info.size);
            let data = match first {
                Ok((tag, size, data))
                    if tag.is_some()
                        && tag == info.etag
                        && size == info.size
                        && !want.is_empty() =>
                {
                    whole(key, data, want.end - want.start)?
                }
                _ => self.get_range(key, want).await?,
            };
            return Ok((info, data));
        }
        let r = match self.inner.get_opts(&path(key)?, opts).await {
            Ok(r) => r,
            Err(
                e @ (object_store::Error::NotFound { .. }
                | object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. }),
            ) => return Err(e.into()),
            // An empty object has no first byte to give, nor a shorter one a byte past its
            // end (416): ask what it is.
            Err(_) => return self.head_then_read(key, range).await,
        };
        // The object's size, from the answer's Content-Range.
        let info = info_of(key, &r);
        let want = crate::within(range, info.size);
        let data = whole(
            key,
            body(key, r, asked.end - asked.start).await?,
            want.end - want.start,
        )?;
        Ok((info, data))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let p = if prefix.is_empty() {
            None
        } else {
            Some(path(prefix)?)
        };
        let hidden = matches!(self.flavor, Flavor::Gcs(_));
        let mut out: Vec<ObjectInfo> = self
            .inner
            .list(p.as_ref())
            // Parts of GCS uploads not yet composed: no one's object.
            .try_filter(|m| {
                futures::future::ready(!(hidden && m.location.as_ref().starts_with(gcs::UPLOADS)))
            })
            .map_ok(|m| ObjectInfo {
                checksum: None,
                key: m.location.to_string(),
                size: m.size,
                etag: unquote(m.e_tag),
                meta: Meta::new(),
            })
            .try_collect()
            .await?;
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn delete(&self, key: &str) -> Result<()> {
        match self.inner.delete(&path(key)?).await {
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            r => Ok(r?),
        }
    }

    async fn create_root(&self) -> Result<()> {
        match &self.flavor {
            Flavor::S3(extra) => extra.create_bucket(&self.bucket).await,
            Flavor::Azure(w) => w.create_container().await,
            Flavor::Gcs(w) => w.create_bucket().await,
        }
    }

    async fn start_upload(&self, key: &str, meta: &Meta) -> Result<Upload> {
        let id = match &self.flavor {
            Flavor::Azure(_) | Flavor::Gcs(_) => azure::new_session_id(),
            Flavor::S3(extra) => {
                let opts = PutMultipartOptions {
                    attributes: attributes(meta, extra.storage_class.as_ref()),
                    ..Default::default()
                };
                self.multipart()
                    .create_multipart_opts(&path(key)?, opts)
                    .await?
            }
        };
        Ok(Upload::new(key, id))
    }

    async fn put_block(
        &self, up: &Upload, idx: usize, _offset: u64, data: Bytes,
    ) -> Result<BlockId> {
        match &self.flavor {
            Flavor::Azure(w) => w.put_block(up, idx, data).await,
            Flavor::Gcs(w) => w.put_block(up, idx, data).await,
            Flavor::S3(extra) => {
                let part = self
                    .multipart()
                    .put_part(&path(&up.key)?, &up.id, idx, PutPayload::from(data.clone()))
                    .await?;
                let receipt = s3_parts::read(&part.content_id);
                s3_parts::check(&up.key, idx, &receipt, data, extra.md5_etags).await?;
                Ok(BlockId(part.content_id))
            }
        }
    }

    async fn complete_upload(
        &self, up: &Upload, blocks: Vec<BlockId>, meta: &Meta,
    ) -> Result<Option<String>> {
        match &self.flavor {
            Flavor::Azure(w) => w.put_block_list(up, &blocks, meta).await.map(|()| None),
            Flavor::Gcs(w) => w.complete(up, &blocks, meta).await.map(|()| None),
            Flavor::S3(extra) => {
                let receipts: Vec<_> = blocks.iter().map(|b| s3_parts::read(&b.0)).collect();
                let parts = blocks
                    .into_iter()
                    .map(|b| PartId { content_id: b.0 })
                    .collect();
                // The ETag the parts the store received make (each checked: `put_block`).
                let sent = s3_parts::assembled(&receipts).filter(|_| extra.md5_etags);
                let md5 = |e: Option<String>| e.filter(|e| extra.md5_etags && is_md5_etag(e));
                let done = self
                    .multipart()
                    .complete_multipart(&path(&up.key)?, &up.id, parts)
                    .await
                    .map_err(Error::from);
                let etag = match done {
                    Ok(done) => md5(unquote(done.e_tag)),
                    // A completion sent again after its answer was lost finds its upload gone:
                    // the object under the key must be the one these parts make. Not removed
                    // when it is not: it may be another writer's, or this key's before.
                    // Else (no ETag to compare) the caller looks at the object's size.
                    Err(Error::NotFound(e)) if sent.is_some() => {
                        match md5(self.head(&up.key).await?.etag) {
                            Some(stored) if Some(&stored) == sent.as_ref() => Some(stored),
                            Some(stored) => {
                                return Err(Error::Permanent(format!(
                                    "checksum mismatch: {}: the upload is gone and the object \
                                     there is not the one its parts make ({stored}, not {}): {e}",
                                    up.key,
                                    sent.unwrap_or_default()
                                )))
                            }
                            None => return Err(Error::NotFound(e)),
                        }
                    }
                    Err(e) => return Err(e),
                };
                if etag.is_none() || sent.is_none() || etag == sent {
                    return Ok(etag);
                }
                // A bucket encrypting with KMS by default answers an ETag that is not an MD5:
                // before that reads as damage, ask the object how it is stored.
                let Some(stored) = self.head(&up.key).await?.etag else {
                    return Ok(None);
                };
                let _ = self.delete(&up.key).await;
                // Not retried: the upload is consumed, and a retry would find the object
                // (were the removal refused) with nothing left to compare it with.
                Err(Error::Permanent(format!(
                    "checksum mismatch: {}: the store assembled {stored}, its parts make {}; \
                     removed",
                    up.key,
                    sent.unwrap_or_default()
                )))
            }
        }
    }

    async fn retention(&self, key: &str) -> Result<Option<String>> {
        match &self.flavor {
            Flavor::S3(extra) => extra.retention(key).await,
            Flavor::Azure(w) => w.retention(key).await,
            Flavor::Gcs(_) => Ok(None),
        }
    }

    async fn lock_new_objects(&self, days: u32, mode: LockMode) -> Result<()> {
        match &self.flavor {
            Flavor::S3(extra) => extra.lock_new_objects(&self.bucket, days, mode).await,
            Flavor::Azure(w) => w.lock_new_objects(days, mode).await,
            Flavor::Gcs(_) => Err(Error::Invalid(format!(
                "{}: a GCS bucket's retention policy is set on the bucket by its owner",
                self.url()
            ))),
        }
    }

    fn leftovers(&self, up: &Upload, blocks: &[BlockId]) -> Vec<String> {
        match &self.flavor {
            Flavor::Gcs(_) => gcs::leftovers(up, blocks),
            _ => Vec::new(),
        }
    }

    async fn abort_upload(&self, up: &Upload) -> Result<()> {
        match &self.flavor {
            // Uncommitted Azure blocks are never visible and expire on their own.
            Flavor::Azure(_) => Ok(()),
            Flavor::Gcs(w) => w.abort(up).await,
            Flavor::S3(_) => match self
                .multipart()
                .abort_multipart(&path(&up.key)?, &up.id)
                .await
            {
                Err(object_store::Error::NotFound { .. }) => Ok(()),
                r => Ok(r?),
            },
        }
    }
}

/// What a GET or HEAD answer of `object_store` says of an object.
/// `got`, when it holds the `want` bytes asked for; a short answer is worth a retry.
/// An answer's body, at most `limit` bytes (what was asked for), whatever the server sends.
async fn body(key: &str, r: object_store::GetResult, limit: u64) -> Result<Bytes> {
    let hint = (r.range.end - r.range.start).min(limit);
    let stream = r.into_stream().map(|c| c.map_err(Error::from));
    bounded::collect(stream, limit, hint, key).await
}

fn whole(key: &str, got: Bytes, want: u64) -> Result<Bytes> {
    if got.len() as u64 != want {
        return Err(Error::Transient(format!(
            "short read of {key}: {} of {want} bytes",
            got.len()
        )));
    }
    Ok(got)
}

fn info_of(key: &str, r: &object_store::GetResult) -> ObjectInfo {
    let meta = r
        .attributes
        .iter()
        .filter_map(|(k, v)| match k {
            Attribute::Metadata(k) => Some((k.to_string(), v.to_string())),
            _ => None,
        })
        .collect();
    ObjectInfo {
        checksum: None,
        key: key.into(),
        size: r.meta.size,
        etag: unquote(r.meta.e_tag.clone()),
        meta,
    }
}

#[cfg(test)]
mod tests {
    use super::{hidden_with_repo, is_md5_etag, AzureConfig, CloudStore, S3Config};

    /// Printed, a store shows where it writes, never what it signs or encrypts with.
    #[tokio::test]
    async fn a_store_prints_no_secret() {
        let sse_c = "U1NFQ0tFWVNFQ1JFVFNTRUNLRVlTRUNSRVRTU0VDS0U=";
        let s3 = S3Config {
            endpoint: Some("https://s3.example:9000".into()),
            access_key_id: Some("AKIDEXAMPLE".into()),
            secret_access_key: Some("KEYSECRET".into()),
            sse_c_key: Some(sse_c.into()),
            ..Default::default()
        };
        let s3 = CloudStore::s3(&s3, "bucket").unwrap();
        let az = AzureConfig {
            account: Some("acct".into()),
            sas_token: Some("sv=1&sig=SIGSECRET".into()),
            ..Default::default()
        };
        let az = CloudStore::azure(&az, "c").unwrap();
        for shown in [format!("{s3:?}"), format!("{az:?}")] {
            for secret in [sse_c, "KEYSECRET", "SIGSECRET"] {
                assert!(!shown.contains(secret), "{shown}");
            }
            assert!(
                shown.contains("bucket") || shown.contains("acct"),
                "{shown}"
            );
        }
    }

    /// A helper gets FERRY_REPO only when it can hold no secret.
    #[test]
    fn a_repository_url_that_may_hold_a_secret_is_hidden_from_helpers() {
        let hides = |r: &str| hidden_with_repo(Some(r)).contains(&"FERRY_REPO");
        assert!(hides("https://a.blob.core.windows.net/c/r?sv=1&sig=S"));
        assert!(hides("ferry+https://t:T@h/t/r"));
        assert!(hides("s3://AKIA:SE/CRET@bucket/r"));
        assert!(!hides("s3://bucket/r@v1") && !hides("/srv/me@host"));
        assert!(!hides("s3://bucket/prefix") && !hides("/srv/backup"));
        assert!(hidden_with_repo(None).contains(&"FERRY_FROM_PASSWORD"));
    }

    #[test]
    fn recognises_md5_etags() {
        assert!(is_md5_etag("9e107d9d372bb6826bd81d3542a419d6"));
        assert!(is_md5_etag("9e107d9d372bb6826bd81d3542a419d6-12"));
        assert!(!is_md5_etag("0x8DA8BEB55D0EA35"));
        assert!(!is_md5_etag("9e107d9d372bb6826bd81d3542a419d6-x"));
    }
}

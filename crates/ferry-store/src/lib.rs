//! One small async trait over the object stores ferry writes to.
//!
//! The trait exposes block (multipart) sessions instead of hiding them, so that the transfer
//! engine above, not the backend, decides how many blocks are in flight, retries a failed block
//! alone and checks each block. Backends: [`local::LocalStore`] (a directory, with fsync and
//! atomic rename), [`cloud::CloudStore`] (S3 and Azure Blob through `object_store`) and
//! [`memory::MemoryStore`] (in memory, for tests).
#![warn(missing_docs)]

pub mod bounded;
pub mod buffer;
pub mod cloud;
mod error;
pub mod flow;
pub mod local;
mod location;
pub mod memory;
mod opened;
pub mod served;
pub mod size;

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;

pub use error::{Error, Result};
pub use location::{is_tenant_name, Location, Scheme, Secret, TENANT_NAME};
pub use opened::Opened;

/// User metadata stored with an object (keys without any backend prefix; C# identifiers,
/// as Azure requires).
pub type Meta = BTreeMap<String, String>;

/// `range` cut at the end of an object of `size` bytes; empty when it starts there or past it.
pub fn within(range: Range<u64>, size: u64) -> Range<u64> {
    let end = range.end.min(size);
    range.start.min(end)..end
}

/// Refuses an object longer than [`Store::get`] reads whole.
pub fn too_long(key: &str, size: u64) -> Result<()> {
    match size > bounded::MAX_GET {
        true => Err(Error::Permanent(format!(
            "{key}: {size} bytes, more than {} read whole",
            bounded::MAX_GET
        ))),
        false => Ok(()),
    }
}

/// Metadata key under which ferry records the block plan an object was written with.
pub const META_BLOCKS: &str = "ferry_blocks";
/// Metadata key under which ferry records the object's block digest where the store keeps none.
pub const META_DIGEST: &str = "ferry_digest";

/// The hash a block digest is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestKind {
    /// MD5 in S3's ETag form: what S3 computes itself, so ferry can compare with it, and
    /// what Azure stores beside its own Content-MD5.
    Md5,
    /// BLAKE3, written `b3:HEX` or `b3:HEX-N`: six to ten times cheaper than MD5, for stores
    /// that only keep what ferry records (RADOS), where MD5 would be half of a copy's CPU.
    Blake3,
    /// SHA-256 in S3's checksum form, written `sha256:HEX` (a whole object) or `sha256:HEX-N`
    /// (SHA-256 of the blocks' SHA-256s): what S3 keeps of an object uploaded with
    /// `x-amz-checksum-sha256`, as ferry's are. With the CPU's SHA instructions a third of
    /// MD5's cost, which was half of a download's CPU.
    Sha256,
    /// CRC-64/NVME of the whole object, written `crc64:HEX`: what S3 keeps of an object
    /// uploaded with `x-amz-checksum-crc64nvme`. Blocks' CRCs combine into the whole's, so it
    /// is checked whatever blocks the object is read in; a few percent of MD5's cost.
    Crc64,
}

impl DigestKind {
    /// The kind a recorded digest string is of.
    pub fn of(digest: &str) -> DigestKind {
        match digest.split_once(':').map(|(kind, _)| kind) {
            Some("b3") => DigestKind::Blake3,
            Some("sha256") => DigestKind::Sha256,
            Some("crc64") => DigestKind::Crc64,
            _ => DigestKind::Md5,
        }
    }

    /// True when a digest of this kind is checked whatever blocks the object is read in,
    /// not only those it was written in.
    pub fn any_blocks(self) -> bool {
        self == DigestKind::Crc64
    }
}

/// What the store says about one object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Key relative to the store's root.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// The store's entity tag, quotes removed, if it has one.
    pub etag: Option<String>,
    /// The content checksum the store keeps beside the ETag, in ferry's digest form
    /// (`sha256:HEX-N`, `crc64:HEX`), if it gave one (S3, asked with `x-amz-checksum-mode`).
    pub checksum: Option<String>,
    /// User metadata (filled by [`Store::head`], empty in listings).
    pub meta: Meta,
}

/// Hard limits of a store that shape how an object is cut into blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Smallest block allowed, except the last one.
    pub min_block: u64,
    /// Largest block allowed.
    pub max_block: u64,
    /// Most blocks one object may have.
    pub max_blocks: u64,
}

impl Limits {
    /// A store with no block limits of its own (local disk, memory): blocks up to 4 GiB, as
    /// many as the object needs.
    pub const UNBOUNDED: Limits = Limits {
        min_block: 1,
        max_block: 1 << 32,
        max_blocks: u64::MAX,
    };
}

/// An open block session: blocks are written, then completed into one object or aborted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    /// Destination key.
    pub key: String,
    /// Backend-specific session id (multipart upload id, temp file path).
    pub id: String,
}

impl Upload {
    /// A session for `key` under the backend's `id`.
    pub fn new(key: impl Into<String>, id: String) -> Upload {
        Upload {
            key: key.into(),
            id,
        }
    }
}

/// Receipt for one stored block, handed back at completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockId(pub String);

/// The operations the engine needs from a store. Every write is atomic: an object appears
/// whole under its key or not at all.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// Where this store points, for messages (`s3://bucket`, `/data`).
    fn url(&self) -> String;
    /// The store's block limits.
    fn limits(&self) -> Limits;
    /// The block digest the store vouches for, if any (S3's multipart ETag, or ferry's own
    /// record in metadata where the store computes none).
    fn digest(&self, info: &ObjectInfo) -> Option<String>;
    /// The digest a reader of the object checks: the store's own content checksum where it
    /// gave one ([`ObjectInfo::checksum`], cheaper than MD5), else [`Store::digest`], the one
    /// ferry's writes are compared with.
    fn read_digest(&self, info: &ObjectInfo) -> Option<String> {
        info.checksum.clone().or_else(|| self.digest(info))
    }
    /// The digest the store checks or keeps for what ferry writes (S3's ETag, recorded
    /// metadata), or None: local disk writes, fsyncs and renames, keeps no metadata, and
    /// saves the hashing.
    fn digest_kind(&self) -> Option<DigestKind> {
        Some(DigestKind::Md5)
    }
    /// The digest ferry computes and records for an object written whole, in one [`Store::put`]:
    /// [`Store::digest_kind`], or None where the store derives that digest itself from a whole
    /// put and checks the body on receipt (S3's ETag of a single PUT is the content's MD5, and
    /// every body carries a SHA-256 that S3 verifies), so that hashing it again would only cost
    /// CPU: MD5 was a third of `ferry serve`'s CPU in front of S3.
    fn whole_digest_kind(&self) -> Option<DigestKind> {
        self.digest_kind()
    }
    /// True when a read costs no round trip (local disk): a caller then keeps only as many
    /// reads in flight as it can process, not as many as would cover the latency.
    fn is_local(&self) -> bool {
        false
    }
    /// Opens up to `n` connections for requests about to go out at once, while the request
    /// before them (an upload's start, an object's HEAD) is on the wire: over a WAN each new
    /// connection's handshakes (TCP, TLS) cost a round trip or two before its first byte.
    /// Stores that keep a connection pool do it, once; the default does nothing.
    async fn warm(&self, _key: &str, _n: usize) {}
    /// Writes a whole object in one request.
    async fn put(&self, key: &str, data: Bytes, meta: &Meta) -> Result<()>;
    /// Reads `range` of an object; the range must lie within it.
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes>;
    /// Reads a whole small object. Stores that can answer in one request override this;
    /// the default asks for the size first.
    /// At most [`bounded::MAX_GET`] bytes: a longer object is an error.
    async fn get(&self, key: &str) -> Result<Bytes> {
        let size = self.head(key).await?.size;
        too_long(key, size)?;
        self.get_range(key, 0..size).await
    }
    /// Size, etag and metadata of one object.
    async fn head(&self, key: &str) -> Result<ObjectInfo>;
    /// [`Store::head`] with the bytes of `range` of the object, cut at its end (none when
    /// it starts there or past it): a read that comes with what the object is, one round trip
    /// instead of two (a download's first block; a server's answer to a ranged read, which
    /// names the object's size). Stores that can answer in one request override this.
    async fn head_and_read(&self, key: &str, range: Range<u64>) -> Result<(ObjectInfo, Bytes)> {
        let info = self.head(key).await?;
        let data = self.get_range(key, within(range, info.size)).await?;
        Ok((info, data))
    }
    /// Opens an object to read it in parts without a request each (a file), or `None` where
    /// every read is a request of its own: a server then streams a large answer from it
    /// holding a part's memory at a time, as from a file, where a store with round trips
    /// needs the whole answer in hand first.
    async fn open(&self, _key: &str) -> Result<Option<Opened>> {
        Ok(None)
    }
    /// Removes ferry's own temp files under `prefix` not written to for `idle` (a writer
    /// killed mid-write leaves its temp file behind, never listed nor served, but on disk);
    /// how many went. Stores whose writes leave no such files do nothing.
    async fn sweep_temp(&self, _prefix: &str, _idle: std::time::Duration) -> Result<usize> {
        Ok(0)
    }
    /// Every object under `prefix`, recursively, sorted by key.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>>;
    /// Deletes an object; deleting a missing object is not an error.
    async fn delete(&self, key: &str) -> Result<()>;
    /// Creates the bucket, container or directory this store points at.
    async fn create_root(&self) -> Result<()>;
    /// Opens a block session for `key`; `meta` is stored where the backend takes it at start.
    async fn start_upload(&self, key: &str, meta: &Meta) -> Result<Upload>;
    /// Stores block `idx`, whose data starts at byte `offset` of the object.
    async fn put_block(&self, up: &Upload, idx: usize, offset: u64, data: Bytes)
        -> Result<BlockId>;
    /// Makes the object appear, made of `blocks` in order; `meta` is stored where the backend
    /// takes it at completion. Returns the digest the store computed for what it assembled,
    /// when it tells (S3's ETag), so that the caller can check it without another request.
    async fn complete_upload(
        &self, up: &Upload, blocks: Vec<BlockId>, meta: &Meta,
    ) -> Result<Option<String>>;
    /// Discards a session and every block written to it.
    async fn abort_upload(&self, up: &Upload) -> Result<()>;
    /// Objects that a completed upload of `blocks` leaves for the caller to delete (GCS's
    /// composed parts): deleting them in the completion itself would make it as long as
    /// hundreds of round trips, and a failure to delete one fail an upload that succeeded.
    fn leftovers(&self, _up: &Upload, _blocks: &[BlockId]) -> Vec<String> {
        Vec::new()
    }
    /// Why `key` may not be deleted now (Object Lock retention or legal hold, said in words),
    /// or `None`. A plain delete of a locked S3 object "succeeds" as a delete marker while its
    /// data stays: callers that mean to free space ask first, and keep what is locked.
    async fn retention(&self, _key: &str) -> Result<Option<String>> {
        Ok(None)
    }
    /// Creates the root with Object Lock, or checks an existing one has it, and makes every
    /// object written from now on undeletable for `days` in `mode` (governance or compliance).
    async fn lock_new_objects(&self, _days: u32, _mode: LockMode) -> Result<()> {
        Err(Error::Invalid(format!(
            "{}: this store has no Object Lock (S3 has; Azure immutability policies and GCS \
             bucket locks are set on the container or bucket by its owner)",
            self.url()
        )))
    }
}

/// Object Lock's two modes: governance (lifted by users holding the bypass permission) and
/// compliance (by no one, the account's root included, until the date).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// `GOVERNANCE`.
    Governance,
    /// `COMPLIANCE`.
    Compliance,
}

impl LockMode {
    /// S3's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Governance => "GOVERNANCE",
            LockMode::Compliance => "COMPLIANCE",
        }
    }
}

//! A store seen through the engine: every call waits its turn in the scheduler and runs
//! under the engine's retry policy, as restic wraps its backends.
//!
//! The libraries above the engine (`ferry-repo`, `ferry-wal`, `ferry-pg`) hold only a
//! [`Remote`], never the raw store, so no call of theirs skips the retries, the scheduling
//! or the tuner's accounting. The class a call runs in is the remote's: the program that
//! opens a store says once whether what goes through it is urgent (WAL) or bulk.

use std::ops::Range;

use bytes::Bytes;
use ferry_store::{Meta, ObjectInfo, Result};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::{Class, Engine, Progress, SharedStore};

/// A store whose every call goes through an [`Engine`], in one [`Class`].
#[derive(Debug, Clone)]
pub struct Remote {
    store: SharedStore,
    engine: Engine,
    class: Class,
}

impl Engine {
    /// `store` seen through this engine, its calls in `class`.
    pub fn remote(&self, store: SharedStore, class: Class) -> Remote {
        Remote {
            store,
            engine: self.clone(),
            class,
        }
    }
}

impl Remote {
    /// The same store, its calls in `class`.
    pub fn with_class(&self, class: Class) -> Remote {
        Remote {
            class,
            ..self.clone()
        }
    }

    /// The class this remote's calls run in.
    pub fn class(&self) -> Class {
        self.class
    }

    /// The engine the calls go through.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Where the store points, for messages.
    pub fn url(&self) -> String {
        self.store.url()
    }

    /// True when a read costs no round trip (local disk).
    pub fn is_local(&self) -> bool {
        self.store.is_local()
    }

    /// Size, etag and metadata of one object.
    pub async fn head(&self, key: &str) -> Result<ObjectInfo> {
        self.engine
            .request(self.class, &format!("head {key}"), || self.store.head(key))
            .await
    }

    /// A whole small object in one request (config, key, index, lock files).
    pub async fn get(&self, key: &str) -> Result<Bytes> {
        self.engine
            .request(self.class, &format!("read {key}"), || self.store.get(key))
            .await
    }

    /// `range` of an object, in one request.
    pub async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.engine
            .request(self.class, &format!("read {key}"), || {
                self.store.get_range(key, range.clone())
            })
            .await
    }

    /// Every object under `prefix`, recursively, sorted by key.
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        self.engine
            .request(self.class, &format!("list {prefix}"), || {
                self.store.list(prefix)
            })
            .await
    }

    /// Deletes an object; a missing one is not an error.
    pub async fn delete(&self, key: &str) -> Result<()> {
        self.engine
            .request(self.class, &format!("delete {key}"), || {
                self.store.delete(key)
            })
            .await
    }

    /// Writes a small object in one request, with `meta`.
    pub async fn put(&self, key: &str, data: Bytes, meta: &Meta) -> Result<()> {
        self.engine
            .request(self.class, &format!("write {key}"), || {
                self.store.put(key, data.clone(), meta)
            })
            .await
    }

    /// Creates the bucket, container or directory the store points at.
    pub async fn create_root(&self) -> Result<()> {
        let what = format!("create {}", self.store.url());
        self.engine
            .request(self.class, &what, || self.store.create_root())
            .await
    }

    /// Writes `data`, already in memory, to `key` in blocks sent in parallel.
    pub async fn upload_bytes(&self, data: Bytes, key: &str) -> Result<u64> {
        self.engine
            .upload_bytes(data, &self.store, key, self.class)
            .await
    }

    /// Writes everything `reader` yields to `key`, in blocks, length unknown in advance.
    pub async fn upload<R: AsyncRead + Unpin>(
        &self,
        reader: R,
        key: &str,
        progress: std::sync::Arc<dyn Progress>,
    ) -> Result<u64> {
        self.engine
            .upload(reader, &self.store, key, self.class, progress)
            .await
    }

    /// Writes object `key` to `writer` in order, blocks fetched ahead in parallel, checked
    /// against the store's digest when it vouches for one.
    pub async fn download<W: AsyncWrite + Unpin>(
        &self,
        key: &str,
        writer: W,
        progress: &dyn Progress,
    ) -> Result<u64> {
        self.engine
            .download(&self.store, key, writer, self.class, progress)
            .await
    }

    /// Copies `key` to `dst_key` of `dst`: the destination appears whole, checked, or not at
    /// all. Runs in this remote's class.
    pub async fn copy_to(
        &self,
        key: &str,
        dst: &Remote,
        dst_key: &str,
        progress: &dyn Progress,
    ) -> Result<u64> {
        self.engine
            .copy(&self.store, key, &dst.store, dst_key, self.class, progress)
            .await
    }
}

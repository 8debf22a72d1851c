//! A store seen through the engine: every call waits its turn in the scheduler and runs
//! under the engine's retry policy, as restic wraps its backends.
//!
//! The libraries above the engine (`ferry-repo`, `ferry-wal`, `ferry-pg`) hold only a
//! [`Remote`], never the raw store, so no call of theirs skips the retries, the scheduling
//! or the tuner's accounting. The class a call runs in is the remote's: the program that
//! opens a store says once whether what goes through it is urgent (WAL) or bulk.

use std::ops::Range;

use bytes::Bytes;
use ferry_store::{ObjectInfo, Result};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::{Class, Engine, NoProgress, Progress, SharedStore, Started};

/// An object as a [`Remote::describe`] found it, with all the store said of it (a listing's
/// entries lack the metadata a copy checks its bytes by, so they are no description).
#[derive(Debug, Clone)]
pub struct Described(ObjectInfo);

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

    /// What the engine this remote goes through has done so far (shared by its clones).
    pub fn report(&self) -> crate::Report {
        self.engine.report()
    }

    /// Bulk requests the engine lets on the wire now (see [`Scheduler::bulk_limit`]).
    ///
    /// [`Scheduler::bulk_limit`]: crate::Scheduler::bulk_limit
    pub fn bulk_limit(&self) -> usize {
        self.engine.sched.bulk_limit()
    }

    /// Where the store points, for messages.
    pub fn url(&self) -> String {
        self.store.url()
    }

    /// True when a read costs no round trip (local disk).
    pub fn is_local(&self) -> bool {
        self.store.is_local()
    }

    /// The store below, for the engine's own modules.
    pub(crate) fn store(&self) -> &SharedStore {
        &self.store
    }

    /// Size, etag and metadata of one object (in the light lane: see [`Engine::request_light`]).
    pub async fn head(&self, key: &str) -> Result<ObjectInfo> {
        let what = format!("head {key}");
        let op = || self.store.head(key);
        self.engine.request_light(self.class, &what, 0, op).await
    }

    /// A whole small object in one request (config, key, index, lock files).
    pub async fn get(&self, key: &str) -> Result<Bytes> {
        let what = format!("read {key}");
        let op = || self.store.get(key);
        self.engine.request(self.class, &what, 0, op).await
    }

    /// What an object is, with the bytes of `range` it holds (cut at its end): one round
    /// trip where the store answers both at once. Scheduled as [`Remote::get_range`].
    pub async fn head_and_read(&self, key: &str, range: Range<u64>) -> Result<(ObjectInfo, Bytes)> {
        let op = || self.store.head_and_read(key, range.clone());
        self.read_range(key, range.end - range.start, op, |(_, b)| b.len())
            .await
    }

    /// `range` of an object, in one request; the retry policy allows for its length. A range
    /// of a few KiB (a header) goes in the light lane; a larger one's bytes count towards the
    /// tuner's rate.
    pub async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let op = || self.store.get_range(key, range.clone());
        self.read_range(key, range.end - range.start, op, Bytes::len)
            .await
    }

    /// A read of up to `len` bytes of `key` by `op`, scheduled by its length: the light lane
    /// for a few KiB, else a slot, the `bytes` it got counted towards the tuner's rate.
    async fn read_range<T, F, Fut>(
        &self, key: &str, len: u64, op: F, bytes: impl Fn(&T) -> usize,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let what = format!("read {key}");
        if len <= crate::LIGHT_BYTES {
            return self.engine.request_light(self.class, &what, len, op).await;
        }
        let got = self.engine.request(self.class, &what, len, op).await?;
        self.engine.scheduler().record(bytes(&got) as u64);
        Ok(got)
    }

    /// `key` opened to be read in parts without a request each (a file), or `None` where
    /// every read is a request (see [`ferry_store::Store::open`]; in the light lane).
    pub async fn open(&self, key: &str) -> Result<Option<ferry_store::Opened>> {
        let what = format!("open {key}");
        let op = || self.store.open(key);
        self.engine.request_light(self.class, &what, 0, op).await
    }

    /// Removes the store's leftover temp files under `prefix` idle for `idle` (see
    /// [`ferry_store::Store::sweep_temp`]); how many. In the light lane.
    pub async fn sweep_temp(&self, prefix: &str, idle: std::time::Duration) -> Result<usize> {
        let what = format!("sweep {prefix}");
        let op = || self.store.sweep_temp(prefix, idle);
        self.engine.request_light(self.class, &what, 0, op).await
    }

    /// Every object under `prefix`, recursively, sorted by key (in the light lane).
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let what = format!("list {prefix}");
        let op = || self.store.list(prefix);
        self.engine.request_light(self.class, &what, 0, op).await
    }

    /// Deletes an object; a missing one is not an error (in the light lane).
    pub async fn delete(&self, key: &str) -> Result<()> {
        let what = format!("delete {key}");
        let op = || self.store.delete(key);
        self.engine.request_light(self.class, &what, 0, op).await
    }

    /// Creates the bucket, container or directory the store points at. Tried once: after an
    /// answer lost on the way, a second try would say "already exists" of what the first
    /// made.
    pub async fn create_root(&self) -> Result<()> {
        let op = self.store.create_root();
        self.engine.request_once(self.class, op).await
    }

    /// Why `key` may not be deleted now (Object Lock), or `None`.
    pub async fn retention(&self, key: &str) -> Result<Option<String>> {
        let what = format!("retention of {key}");
        let op = || self.store.retention(key);
        self.engine.request_light(self.class, &what, 0, op).await
    }

    /// Makes objects written from now on undeletable for `days` (Object Lock).
    pub async fn lock_new_objects(&self, days: u32, mode: ferry_store::LockMode) -> Result<()> {
        let op = self.store.lock_new_objects(days, mode);
        self.engine.request_once(self.class, op).await
    }

    /// Starts the upload of an object of `size` bytes to `key` before its bytes may go, so
    /// that its round trip overlaps what the caller waits for meanwhile; `None` when one
    /// request will carry the object (nothing to start). Hand it to [`Remote::upload_bytes`]
    /// or [`Remote::upload_held`] of that key and size, or to [`Remote::abandon`].
    pub fn start_upload(&self, key: &str, size: u64) -> Option<Started> {
        self.engine.start_ahead(&self.store, key, size)
    }

    /// Aborts the upload `started` began: the object is not to be written after all.
    pub async fn abandon(&self, started: Started) {
        self.engine.abandon(&self.store, started).await
    }

    /// Writes `data`, already in memory, to `key` in blocks sent in parallel, through the
    /// upload `started` began for it, if any.
    pub async fn upload_bytes(
        &self, data: Bytes, key: &str, started: Option<Started>,
    ) -> Result<u64> {
        self.engine
            .upload_bytes(data, &self.store, key, self.class, started)
            .await
    }

    /// [`Remote::upload_bytes`] for `data` counted in a caller's memory budget by `held`:
    /// each block's share of it returns as that block is answered.
    pub async fn upload_held(
        &self, data: Bytes, key: &str, held: tokio::sync::OwnedSemaphorePermit,
        started: Option<Started>,
    ) -> Result<u64> {
        self.engine
            .upload_held(data, &self.store, key, self.class, held, started)
            .await
    }

    /// Writes everything `reader` yields to `key`, in blocks, length unknown in advance.
    pub async fn upload<R: AsyncRead + Unpin>(
        &self, reader: R, key: &str, progress: std::sync::Arc<dyn Progress>,
    ) -> Result<u64> {
        self.engine
            .upload(reader, &self.store, key, self.class, progress)
            .await
    }

    /// A whole object into memory, refused before a byte is read when the store says it is
    /// larger than `max`; blocks fetched in parallel and checked as [`Remote::download`] does.
    pub async fn read(&self, key: &str, max: u64) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let (store, class) = (&self.store, self.class);
        self.engine
            .download(store, key, &mut out, class, &NoProgress, max)
            .await?;
        Ok(out)
    }

    /// Writes object `key` to `writer` in order, blocks fetched ahead in parallel, checked
    /// against the store's digest when it vouches for one.
    pub async fn download<W: AsyncWrite + Unpin>(
        &self, key: &str, writer: W, progress: &dyn Progress,
    ) -> Result<u64> {
        self.engine
            .download(&self.store, key, writer, self.class, progress, u64::MAX)
            .await
    }

    /// Copies `key` to `dst_key` of `dst`: the destination appears whole, checked, or not at
    /// all. Runs in this remote's class.
    pub async fn copy_to(
        &self, key: &str, dst: &Remote, dst_key: &str, progress: &dyn Progress,
    ) -> Result<u64> {
        self.engine
            .copy(
                &self.store,
                key,
                None,
                &dst.store,
                dst_key,
                self.class,
                progress,
            )
            .await
    }

    /// Opens connections to the store for a first wave of requests (one of them to `key`),
    /// without waiting: for a program about to send many at once, as its first.
    pub fn warm(&self, key: &str) {
        let wave = self.engine.scheduler().limit();
        self.engine.warm(&self.store, key, wave);
    }

    /// `key` as the store describes it now, for [`Remote::copy_described_to`]. The
    /// connections the copy's first blocks will need open meanwhile (the size is not known
    /// yet: a small object's copy costs a few HEADs more).
    pub async fn describe(&self, key: &str) -> Result<Described> {
        self.warm(key);
        self.head(key).await.map(Described)
    }

    /// [`Remote::copy_to`] of an object this remote described: the copy does not ask the store
    /// again (a round trip fewer). Only for a copy that follows at once: the description's
    /// digest checks what is read, and an object without one is read to its described size.
    pub async fn copy_described_to(
        &self, obj: &Described, dst: &Remote, dst_key: &str, progress: &dyn Progress,
    ) -> Result<u64> {
        let info = &obj.0;
        self.engine
            .copy(
                &self.store,
                &info.key,
                Some(info),
                &dst.store,
                dst_key,
                self.class,
                progress,
            )
            .await
    }
}

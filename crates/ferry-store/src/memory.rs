//! A store held in memory: for tests of the libraries above the engine, which then run in
//! seconds with no disk, server or network, and for looking at (or damaging) what they wrote.
//!
//! It keeps [`crate::local::LocalStore`]'s semantics where the libraries depend on them: keys
//! are `/`-separated paths, a key cannot be both an object and a "directory" of others, every
//! write is atomic (a block session's object appears whole at completion, an aborted one
//! leaves nothing), a missing object is [`Error::NotFound`], a listing is recursive under a
//! path prefix and sorted by key, and deleting a missing object succeeds. Like S3 and Azure,
//! a completed session is made of exactly the blocks it names, in that order. Where a key
//! names a "directory", it answers as object stores do (a head is NotFound, a delete does
//! nothing), not as the disk's EISDIR.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};

use crate::{
    BlockId, DigestKind, Error, Limits, Meta, ObjectInfo, Result, Store, Upload, META_DIGEST,
};

/// One stored object.
#[derive(Debug, Clone)]
struct Object {
    data: Bytes,
    meta: Meta,
    /// Changes with every write, as a real store's entity tag does.
    etag: String,
}

/// An open block session.
#[derive(Debug)]
struct Session {
    key: String,
    /// Block index -> (offset, data).
    blocks: BTreeMap<usize, (u64, Bytes)>,
}

#[derive(Debug, Default)]
struct Inner {
    objects: BTreeMap<String, Object>,
    /// Session id -> session.
    sessions: HashMap<String, Session>,
    /// Source of session ids and entity tags.
    counter: u64,
    /// The reads asked of a remote store, in order.
    reads: Vec<String>,
    /// The content checksum every description carries: [`MemoryStore::claim_checksum`].
    checksum: Option<String>,
}

impl Inner {
    fn next(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    /// Refuses `key` where the directory store would: an object at one of its parents, or
    /// objects below it.
    fn check_place(&self, key: &str) -> Result<()> {
        for (i, _) in key.match_indices('/') {
            let parent = &key[..i];
            if self.objects.contains_key(parent) {
                return Err(Error::AlreadyExists(format!(
                    "{key}: {parent} is an object, not a directory"
                )));
            }
        }
        let below = format!("{key}/");
        if self
            .objects
            .range(below.clone()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(&below))
        {
            return Err(Error::AlreadyExists(format!("{key} is a directory")));
        }
        Ok(())
    }

    fn insert(&mut self, key: &str, data: Bytes, meta: &Meta) -> Result<()> {
        self.check_place(key)?;
        let etag = format!("{:016x}", self.next());
        self.objects.insert(
            key.to_string(),
            Object {
                data,
                meta: meta.clone(),
                etag,
            },
        );
        Ok(())
    }

    fn object(&self, key: &str) -> Result<&Object> {
        self.objects
            .get(key)
            .ok_or_else(|| Error::NotFound(format!("memory:{key}")))
    }
}

/// A store in memory. Cheap to create; share it as an `Arc` and keep a handle to look at
/// what was written.
#[derive(Debug, Default)]
pub struct MemoryStore {
    /// The digest kind ferry records in metadata, when this store is to keep one.
    recording: Option<DigestKind>,
    /// Seen as a remote store (requests, not disk reads), its reads logged.
    remote: bool,
    /// Whole-object writes are refused: a store this process lost while others reach it.
    refusing: std::sync::atomic::AtomicBool,
    /// Ranged reads are refused.
    refusing_reads: std::sync::atomic::AtomicBool,
    /// Called as each write arrives: [`MemoryStore::on_write`].
    on_write: Hook,
    /// Called as each read of a remote store arrives: [`MemoryStore::on_read`].
    on_read: Hook,
    inner: Mutex<Inner>,
}

/// A callback a test sets to look at its side of the world at one point of a request.
#[derive(Default)]
struct Hook(Mutex<Option<HookFn>>);

/// What a [`Hook`] calls, with the request's name.
type HookFn = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

impl Hook {
    fn call(&self, what: &str) {
        let f = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(f) = f {
            f(what);
        }
    }
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

/// A key as the store keeps it: no leading or trailing `/`, no empty, `.` or `..` component.
fn clean(key: &str) -> Result<&str> {
    let k = key.trim_matches('/');
    if k.is_empty() || k.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(Error::Invalid(format!("memory: bad object key {key:?}")));
    }
    Ok(k)
}

impl MemoryStore {
    /// An empty store that, like local disk, keeps no digest: ferry hashes nothing for it.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store that keeps the digest of `kind` ferry records in each object's
    /// metadata and vouches for it, as Azure (MD5) and RADOS (BLAKE3) do: reads through the
    /// engine are then checked against it.
    pub fn recording(kind: DigestKind) -> Self {
        Self {
            recording: Some(kind),
            ..Self::default()
        }
    }

    /// This store seen as a remote one (the engine then reads it in ranges, each request in
    /// a slot, as it reads a cloud), every read logged: [`MemoryStore::reads`].
    pub fn remote(self) -> Self {
        Self {
            remote: true,
            ..self
        }
    }

    /// Refuses whole-object writes ([`Store::put`]) from now on, or takes them again: a
    /// store this process lost while others still reach it.
    pub fn refuse_puts(&self, refuse: bool) {
        self.refusing
            .store(refuse, std::sync::atomic::Ordering::Relaxed);
    }

    /// Refuses ranged reads ([`Store::get_range`]) from now on, or takes them again: a
    /// store that fails a moment, which says nothing about what it holds.
    pub fn refuse_ranges(&self, refuse: bool) {
        self.refusing_reads
            .store(refuse, std::sync::atomic::Ordering::Relaxed);
    }

    /// Calls `f` with `put`, `put_block` or `complete_upload` as each of those writes
    /// arrives, before it is done: a test's look at what the writer holds meanwhile.
    pub fn on_write(&self, f: impl Fn(&str) + Send + Sync + 'static) {
        *self.on_write.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::sync::Arc::new(f));
    }

    /// Calls `f` with each read of a [`MemoryStore::remote`] store as it arrives, before it
    /// is answered, named as [`MemoryStore::reads`] names it: a test can hold one there.
    pub fn on_read(&self, f: impl Fn(&str) + Send + Sync + 'static) {
        *self.on_read.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::sync::Arc::new(f));
    }

    /// The reads asked so far of a [`MemoryStore::remote`] store, in order: `head KEY`,
    /// `head_and_read KEY START..END`, `get KEY`, `get_range KEY START..END`.
    pub fn reads(&self) -> Vec<String> {
        self.lock().reads.clone()
    }

    /// From now on every object's description carries `checksum` as the store's own content
    /// checksum ([`ObjectInfo::checksum`], S3's `x-amz-checksum-*`), true or not: a test's
    /// store that vouches for what it does not hold.
    pub fn claim_checksum(&self, checksum: Option<String>) {
        self.lock().checksum = checksum;
    }

    fn info_of(k: &str, obj: &Object, checksum: Option<String>) -> ObjectInfo {
        ObjectInfo {
            checksum,
            key: k.to_string(),
            size: obj.data.len() as u64,
            etag: Some(obj.etag.clone()),
            meta: obj.meta.clone(),
        }
    }

    fn log(&self, read: impl FnOnce() -> String) {
        if self.remote {
            let read = read();
            self.lock().reads.push(read.clone());
            self.on_read.call(&read);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panicking test thread must not hide what the store holds from the others.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every object's key, sorted.
    pub fn keys(&self) -> Vec<String> {
        self.lock().objects.keys().cloned().collect()
    }

    /// The bytes stored under `key`, if any.
    pub fn bytes(&self, key: &str) -> Option<Bytes> {
        let k = clean(key).ok()?;
        self.lock().objects.get(k).map(|o| o.data.clone())
    }

    /// Changes the bytes stored under `key` in place, keeping its metadata and entity tag, as
    /// bit rot or someone writing to the store behind ferry's back would; false when there
    /// is no such object.
    pub fn tamper(&self, key: &str, change: impl FnOnce(&mut Vec<u8>)) -> bool {
        let Ok(k) = clean(key) else { return false };
        let mut inner = self.lock();
        let Some(obj) = inner.objects.get_mut(k) else {
            return false;
        };
        let mut data = obj.data.to_vec();
        change(&mut data);
        obj.data = Bytes::from(data);
        true
    }

    /// Block sessions started and neither completed nor aborted.
    pub fn open_uploads(&self) -> usize {
        self.lock().sessions.len()
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn url(&self) -> String {
        format!("memory:{:p}", self)
    }

    fn is_local(&self) -> bool {
        !self.remote
    }

    fn limits(&self) -> Limits {
        Limits::UNBOUNDED
    }

    fn digest(&self, info: &ObjectInfo) -> Option<String> {
        self.recording?;
        info.meta.get(META_DIGEST).cloned()
    }

    fn digest_kind(&self) -> Option<DigestKind> {
        self.recording
    }

    async fn put(&self, key: &str, data: Bytes, meta: &Meta) -> Result<()> {
        self.on_write.call("put");
        if self.refusing.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Error::Denied(format!("memory:{key}: writes refused")));
        }
        let k = clean(key)?;
        self.lock().insert(k, data, meta)
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.log(|| format!("get_range {key} {range:?}"));
        if self
            .refusing_reads
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Err(Error::Denied(format!("memory:{key}: reads refused")));
        }
        let k = clean(key)?;
        let inner = self.lock();
        let data = &inner.object(k)?.data;
        if range.start > range.end || range.end > data.len() as u64 {
            return Err(Error::Invalid(format!(
                "memory:{k}: range {range:?} is not within its {} bytes",
                data.len()
            )));
        }
        Ok(data.slice(range.start as usize..range.end as usize))
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        self.log(|| format!("get {key}"));
        let k = clean(key)?;
        Ok(self.lock().object(k)?.data.clone())
    }

    async fn head(&self, key: &str) -> Result<ObjectInfo> {
        self.log(|| format!("head {key}"));
        let k = clean(key)?;
        let inner = self.lock();
        Ok(Self::info_of(k, inner.object(k)?, inner.checksum.clone()))
    }

    async fn head_and_read(&self, key: &str, range: Range<u64>) -> Result<(ObjectInfo, Bytes)> {
        self.log(|| format!("head_and_read {key} {range:?}"));
        // Both from one look, as a store's single answer is.
        let k = clean(key)?;
        let inner = self.lock();
        let obj = inner.object(k)?;
        let r = crate::within(range, obj.data.len() as u64);
        let first = obj.data.slice(r.start as usize..r.end as usize);
        Ok((Self::info_of(k, obj, inner.checksum.clone()), first))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let p = prefix.trim_matches('/');
        let inner = self.lock();
        let info = |(k, o): (&String, &Object)| ObjectInfo {
            checksum: None,
            key: k.clone(),
            size: o.data.len() as u64,
            etag: Some(o.etag.clone()),
            meta: Meta::new(),
        };
        if p.is_empty() {
            return Ok(inner.objects.iter().map(info).collect());
        }
        let p = clean(p)?;
        let below = format!("{p}/");
        // The object named by the prefix itself, if any, sorts first: it is a prefix of the rest.
        Ok(inner
            .objects
            .range(p.to_string()..)
            .take_while(|(k, _)| k.starts_with(p))
            .filter(|(k, _)| k.as_str() == p || k.starts_with(&below))
            .map(info)
            .collect())
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let k = clean(key)?;
        self.lock().objects.remove(k);
        Ok(())
    }

    async fn create_root(&self) -> Result<()> {
        Ok(())
    }

    async fn start_upload(&self, key: &str, _meta: &Meta) -> Result<Upload> {
        let k = clean(key)?;
        let mut inner = self.lock();
        inner.check_place(k)?;
        let id = format!("memory-upload-{}", inner.next());
        inner.sessions.insert(
            id.clone(),
            Session {
                key: k.to_string(),
                blocks: BTreeMap::new(),
            },
        );
        Ok(Upload::new(key, id))
    }

    async fn put_block(
        &self, up: &Upload, idx: usize, offset: u64, data: Bytes,
    ) -> Result<BlockId> {
        self.on_write.call("put_block");
        let mut inner = self.lock();
        let session = inner
            .sessions
            .get_mut(&up.id)
            .ok_or_else(|| Error::NotFound(format!("memory: no upload {} of {}", up.id, up.key)))?;
        // A block sent again replaces the first copy, as a retried part upload does.
        session.blocks.insert(idx, (offset, data));
        Ok(BlockId(idx.to_string()))
    }

    async fn complete_upload(
        &self, up: &Upload, blocks: Vec<BlockId>, meta: &Meta,
    ) -> Result<Option<String>> {
        self.on_write.call("complete_upload");
        let mut inner = self.lock();
        let session = inner
            .sessions
            .get(&up.id)
            .ok_or_else(|| Error::NotFound(format!("memory: no upload {} of {}", up.id, up.key)))?;
        let size = session.blocks.values().map(|(_, b)| b.len()).sum();
        let mut data = BytesMut::with_capacity(size);
        for b in &blocks {
            let block =
                b.0.parse::<usize>()
                    .ok()
                    .and_then(|i| session.blocks.get(&i));
            let Some((offset, bytes)) = block else {
                return Err(Error::Invalid(format!(
                    "memory:{}: block {} was not uploaded",
                    session.key, b.0
                )));
            };
            if *offset != data.len() as u64 {
                return Err(Error::Invalid(format!(
                    "memory:{}: block {} starts at {offset}, but the blocks before it end at {}",
                    session.key,
                    b.0,
                    data.len()
                )));
            }
            data.extend_from_slice(bytes);
        }
        let key = session.key.clone();
        inner.insert(&key, data.freeze(), meta)?;
        inner.sessions.remove(&up.id);
        Ok(None)
    }

    async fn abort_upload(&self, up: &Upload) -> Result<()> {
        self.lock().sessions.remove(&up.id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys `list(prefix)` returns.
    async fn keys_under(s: &MemoryStore, prefix: &str) -> Vec<String> {
        let listed = s.list(prefix).await.unwrap();
        listed.into_iter().map(|o| o.key).collect()
    }

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn a_key_is_an_object_or_a_directory_not_both() {
        run(async {
            let s = MemoryStore::new();
            let none = Meta::new();
            s.put("a/b", Bytes::from_static(b"x"), &none).await.unwrap();
            let e = s.put("a", Bytes::new(), &none).await;
            assert!(matches!(e, Err(Error::AlreadyExists(_))), "{e:?}");
            let e = s.put("a/b/c", Bytes::new(), &none).await;
            assert!(matches!(e, Err(Error::AlreadyExists(_))), "{e:?}");
            // A sibling whose name merely starts like the object is no conflict.
            s.put("a/bc", Bytes::new(), &none).await.unwrap();
            s.put("ab", Bytes::new(), &none).await.unwrap();
            let listed = keys_under(&s, "a").await;
            assert_eq!(listed, ["a/b", "a/bc"]);
            let listed = keys_under(&s, "a/b").await;
            assert_eq!(listed, ["a/b"]);
            assert_eq!(s.list("").await.unwrap().len(), 3);
            for bad in ["", "/", "a//b", "a/../b", "./a"] {
                let e = s.put(bad, Bytes::new(), &none).await;
                assert!(matches!(e, Err(Error::Invalid(_))), "{bad:?}: {e:?}");
            }
        });
    }

    #[test]
    fn a_session_is_made_of_the_blocks_it_names_in_order() {
        run(async {
            let s = MemoryStore::new();
            let none = Meta::new();
            let up = s.start_upload("k", &none).await.unwrap();
            let b1 = s
                .put_block(&up, 1, 3, Bytes::from_static(b"def"))
                .await
                .unwrap();
            let b0 = s
                .put_block(&up, 0, 0, Bytes::from_static(b"abc"))
                .await
                .unwrap();
            // Out of order, or with one missing: refused, and the session stays open.
            let e = s
                .complete_upload(&up, vec![b1.clone(), b0.clone()], &none)
                .await;
            assert!(matches!(e, Err(Error::Invalid(_))), "{e:?}");
            let e = s.complete_upload(&up, vec![b1.clone()], &none).await;
            assert!(matches!(e, Err(Error::Invalid(_))), "{e:?}");
            assert_eq!(s.open_uploads(), 1);
            s.complete_upload(&up, vec![b0.clone(), b1], &none)
                .await
                .unwrap();
            assert_eq!(s.bytes("k").unwrap(), Bytes::from_static(b"abcdef"));
            assert_eq!(s.open_uploads(), 0);
            // A completed session is gone: completing it again is NotFound, as on S3.
            let e = s.complete_upload(&up, vec![b0], &none).await;
            assert!(matches!(e, Err(Error::NotFound(_))), "{e:?}");
            let e = s.put_block(&up, 2, 6, Bytes::new()).await;
            assert!(matches!(e, Err(Error::NotFound(_))), "{e:?}");
        });
    }

    #[test]
    fn a_recording_store_vouches_for_the_recorded_digest() {
        run(async {
            let plain = MemoryStore::new();
            let rec = MemoryStore::recording(DigestKind::Blake3);
            let meta = Meta::from([(META_DIGEST.to_string(), "b3:00".to_string())]);
            for s in [&plain, &rec] {
                s.put("k", Bytes::from_static(b"x"), &meta).await.unwrap();
            }
            assert_eq!(plain.digest_kind(), None);
            assert_eq!(plain.digest(&plain.head("k").await.unwrap()), None);
            assert_eq!(rec.digest_kind(), Some(DigestKind::Blake3));
            let info = rec.head("k").await.unwrap();
            assert_eq!(rec.digest(&info).as_deref(), Some("b3:00"));
            // Tampering keeps the metadata: the digest no longer describes the bytes.
            assert!(rec.tamper("k", |d| d[0] ^= 1));
            assert_eq!(rec.head("k").await.unwrap().meta, info.meta);
            assert_eq!(rec.bytes("k").unwrap(), Bytes::from_static(b"y"));
            // Nothing recorded, nothing vouched for.
            rec.put("m", Bytes::new(), &Meta::new()).await.unwrap();
            assert_eq!(rec.digest(&rec.head("m").await.unwrap()), None);
        });
    }
}

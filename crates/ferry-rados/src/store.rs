//! `rados://pool/name`: the [`Store`] over striped objects.
//!
//! Atomic appearance: a striped object exists for readers (ferry, libradosstriper, `rados
//! --striper`) when its first piece carries the layout xattrs. Every other piece is written
//! first, under its final name, with aio; the first piece's bytes wait in memory and are
//! written last, together with all its xattrs, in one RADOS operation. Before writing the
//! pieces of a new version, the old first piece is removed, so no reader ever sees an old
//! size over new pieces. See docs/rados.md.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use ferry_store::buffer;
use ferry_store::{
    BlockId, DigestKind, Error, Limits, Meta, ObjectInfo, Result, Store, Upload, META_DIGEST,
};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::{OnceCell, Semaphore};

use crate::cluster::Cluster;
use crate::io::Pool;
use crate::layout::{piece, Layout, FIRST_SUFFIX};
use crate::Config;

/// Operations in flight per store unless `FERRY_RADOS_AIO` says otherwise.
const DEFAULT_AIO: usize = 32;

/// A pool of a Ceph cluster as a store; keys name striped objects.
pub struct RadosStore {
    name: String,
    cfg: Config,
    layout: Layout,
    pool: OnceCell<Arc<Pool>>,
    cluster: OnceCell<Arc<Cluster>>,
    aio: Arc<Semaphore>,
    uploads: Mutex<HashMap<String, Arc<Pending>>>,
}

impl std::fmt::Debug for RadosStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RadosStore")
            .field("pool", &self.name)
            .field("layout", &self.layout)
            .finish()
    }
}

/// A striped object being written.
struct Pending {
    key: String,
    layout: Layout,
    /// The first piece's bytes, written last.
    first: Mutex<Vec<u8>>,
    /// One past the highest byte written.
    end: Mutex<u64>,
    meta: Meta,
}

impl Pending {
    fn new(key: &str, layout: Layout, meta: &Meta) -> Self {
        Self {
            key: key.into(),
            layout,
            first: Mutex::new(Vec::new()),
            end: Mutex::new(0),
            meta: meta.clone(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RadosStore {
    /// A store on `pool`. Connects on first use, so that opening costs nothing and never
    /// blocks.
    pub fn with(pool: &str, cfg: Config, layout: Layout) -> Result<Self> {
        if pool.is_empty() {
            return Err(Error::Invalid("rados:// names no pool".into()));
        }
        let aio = match cfg.aio {
            0 => DEFAULT_AIO,
            n => n,
        };
        heap_for_copies(layout.object_size);
        Ok(Self {
            name: pool.into(),
            cfg,
            layout,
            pool: OnceCell::new(),
            cluster: OnceCell::new(),
            aio: Arc::new(Semaphore::new(aio)),
            uploads: Mutex::new(HashMap::new()),
        })
    }

    /// The layout new objects are written with.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    async fn cluster(&self) -> Result<Arc<Cluster>> {
        self.cluster
            .get_or_try_init(|| async {
                let cfg = self.cfg.clone();
                blocking(move || Cluster::connect(&cfg).map(Arc::new)).await
            })
            .await
            .cloned()
    }

    async fn pool(&self) -> Result<Arc<Pool>> {
        let cluster = self.cluster().await?;
        self.pool
            .get_or_try_init(|| async {
                let name = self.name.clone();
                blocking(move || Pool::open(cluster, &name).map(Arc::new)).await
            })
            .await
            .cloned()
    }

    /// Runs `f` with one of the bounded aio slots.
    async fn bounded<T>(&self, f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        let _slot = self.aio.acquire().await.expect("semaphore never closed");
        f.await
    }

    /// Layout, size and xattrs of striped object `key`.
    async fn stat(&self, key: &str) -> Result<(Layout, u64, Meta)> {
        let pool = self.pool().await?;
        let first = piece(key, 0);
        let x = self.bounded(pool.xattrs(&first)).await?;
        let text = |k: &str| x.get(k).map(|v| String::from_utf8_lossy(v).into_owned());
        let (layout, size) = Layout::parse(text).ok_or_else(|| {
            Error::NotFound(format!(
                "{first} has no striper layout: {key} is not a striped object"
            ))
        })?;
        // ferry's own metadata: names without a dot (striper.* and lock.* are the striper's).
        let meta = x
            .iter()
            .filter(|(k, _)| !k.contains('.'))
            .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
            .collect();
        Ok((layout, size, meta))
    }

    /// Writes `data` at `off` of a pending object: the first piece's share into memory, the
    /// rest to their pieces, all at once within the aio bound.
    async fn write_range(&self, p: &Pending, off: u64, data: Bytes) -> Result<()> {
        let pool = self.pool().await?;
        let extents = p.layout.extents(off, data.len() as u64);
        let mut writes = Vec::new();
        for e in extents {
            let part = data.slice(e.buf_off as usize..(e.buf_off + e.len) as usize);
            if e.objno == 0 {
                let mut first = lock(&p.first);
                let end = (e.obj_off + e.len) as usize;
                if first.len() < end {
                    first.resize(end, 0);
                }
                first[e.obj_off as usize..end].copy_from_slice(&part);
            } else {
                writes.push((piece(&p.key, e.objno), e.obj_off, part));
            }
        }
        futures::stream::iter(writes)
            .map(|(oid, o, part)| {
                let pool = pool.clone();
                self.bounded(async move { pool.write(&oid, o, part).await })
            })
            .buffer_unordered(usize::MAX)
            .try_collect::<Vec<()>>()
            .await?;
        let mut end = lock(&p.end);
        *end = (*end).max(off + data.len() as u64);
        Ok(())
    }

    /// Makes a pending object appear: its first piece with layout, size and metadata.
    async fn publish(&self, p: &Pending, meta: &Meta) -> Result<u64> {
        let pool = self.pool().await?;
        let size = *lock(&p.end);
        let first = std::mem::take(&mut *lock(&p.first));
        let mut x: Vec<(String, Vec<u8>)> = p
            .layout
            .xattrs(size)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.into_bytes()))
            .collect();
        for (k, v) in p.meta.iter().chain(meta) {
            x.push((k.clone(), v.clone().into_bytes()));
        }
        let res = self
            .bounded(pool.replace(&piece(&p.key, 0), &first, &x))
            .await;
        if res.is_err() {
            // A retried completion needs the bytes again.
            *lock(&p.first) = first;
        }
        res.map(|_| size)
    }

    /// Removes pieces `from..to`, then any beyond `to` up to the first missing one (left by
    /// a larger older version or a crashed write).
    async fn remove_pieces(&self, key: &str, from: u64, to: u64) -> Result<()> {
        let pool = self.pool().await?;
        futures::stream::iter(from..to)
            .map(|n| {
                let pool = pool.clone();
                let oid = piece(key, n);
                self.bounded(async move { pool.remove(&oid).await })
            })
            .buffer_unordered(usize::MAX)
            .try_collect::<Vec<bool>>()
            .await?;
        let mut n = to.max(from);
        while self.bounded(pool.remove(&piece(key, n))).await? {
            n += 1;
        }
        Ok(())
    }

    fn pending(&self, up: &Upload) -> Result<Arc<Pending>> {
        lock(&self.uploads).get(&up.id).cloned().ok_or_else(|| {
            Error::Invalid(format!("no upload {} of {} in this process", up.id, up.key))
        })
    }
}

/// librados copies every write into a buffer of its own, up to a piece's size. Above glibc's
/// mmap threshold, which the ferry binary pins at 1 MiB, each copy is a fresh mapping whose
/// pages all fault and are zeroed: a third of the system time of a `ferry cp` to RADOS. The
/// threshold goes just above the piece size (glibc takes at most 32 MiB), so the copies
/// reuse heap memory; it is only ever raised.
fn heap_for_copies(piece: u64) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SET: AtomicU64 = AtomicU64::new(0);
    let want = (piece + (64 << 10)).min(32 << 20);
    if SET.fetch_max(want, Ordering::Relaxed) < want {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: mallopt only changes allocator tuning; glibc serializes it with allocations.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, want as libc::c_int);
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Permanent(format!("librados task failed: {e}")))?
}

/// Listing prefixes are whole path segments, as in the other stores: `a` holds `a/b`, not `ab`.
fn under(key: &str, prefix: &str) -> bool {
    let p = prefix.trim_end_matches('/');
    p.is_empty() || key == p || key.strip_prefix(p).is_some_and(|r| r.starts_with('/'))
}

#[async_trait]
impl Store for RadosStore {
    fn url(&self) -> String {
        format!("rados://{}", self.name)
    }

    fn limits(&self) -> Limits {
        // One block per object set: each block fills whole pieces with one write each.
        let set = self.layout.set_size();
        Limits {
            min_block: set,
            max_block: set,
            max_blocks: u64::MAX,
        }
    }

    fn digest(&self, info: &ObjectInfo) -> Option<String> {
        info.meta.get(META_DIGEST).cloned()
    }

    fn digest_kind(&self) -> Option<DigestKind> {
        Some(DigestKind::Blake3)
    }

    async fn put(&self, key: &str, data: Bytes, meta: &Meta) -> Result<()> {
        let p = Pending::new(key, self.layout, &Meta::new());
        if self.layout.pieces(data.len() as u64) > 1 {
            // Pieces of the old version are about to be overwritten: hide it first.
            let pool = self.pool().await?;
            self.bounded(pool.remove(&piece(key, 0))).await?;
        }
        self.write_range(&p, 0, data).await?;
        self.publish(&p, meta).await.map(drop)
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let (layout, size, _) = self.stat(key).await?;
        if range.end > size || range.start > range.end {
            return Err(Error::Invalid(format!(
                "{key}: range {range:?} outside its {size} bytes"
            )));
        }
        let pool = self.pool().await?;
        let len = (range.end - range.start) as usize;
        let extents = layout.extents(range.start, len as u64);
        let parts: Vec<_> = futures::stream::iter(extents.iter().copied())
            .map(|e| {
                let pool = pool.clone();
                let oid = piece(key, e.objno);
                self.bounded(async move { pool.read(&oid, e.obj_off, e.len as usize).await })
            })
            .buffered(usize::MAX)
            .try_collect()
            .await?;
        if parts.len() == 1 && parts[0].len() == len {
            return Ok(parts.into_iter().next().expect("one part").freeze());
        }
        let mut out = buffer::take(len);
        out.fill(0);
        for (e, part) in extents.iter().zip(parts) {
            out[e.buf_off as usize..(e.buf_off + e.len) as usize].copy_from_slice(&part);
        }
        Ok(out.freeze())
    }

    async fn head(&self, key: &str) -> Result<ObjectInfo> {
        let (_, size, meta) = self.stat(key).await?;
        Ok(ObjectInfo {
            checksum: None,
            key: key.into(),
            size,
            etag: None,
            meta,
        })
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let pool = self.pool().await?;
        let names = blocking(move || pool.names()).await?;
        let keys: Vec<String> = names
            .iter()
            .filter_map(|n| n.strip_suffix(FIRST_SUFFIX))
            .filter(|k| under(k, prefix))
            .map(String::from)
            .collect();
        let found: Vec<Option<ObjectInfo>> = futures::stream::iter(keys)
            .map(|key| async move {
                match self.stat(&key).await {
                    Ok((_, size, _)) => Ok(Some(ObjectInfo {
                        checksum: None,
                        key,
                        size,
                        ..Default::default()
                    })),
                    // Removed meanwhile, or a first piece without a layout: not an object.
                    Err(Error::NotFound(_)) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .buffer_unordered(64)
            .try_collect()
            .await?;
        let mut out: Vec<ObjectInfo> = found.into_iter().flatten().collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let (layout, size, _) = match self.stat(key).await {
            Ok(s) => s,
            Err(Error::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        // The first piece goes first: the object disappears at once, then its pieces.
        let pool = self.pool().await?;
        self.bounded(pool.remove(&piece(key, 0))).await?;
        self.remove_pieces(key, 1, layout.pieces(size)).await
    }

    async fn create_root(&self) -> Result<()> {
        let cluster = self.cluster().await?;
        let name = self.name.clone();
        blocking(move || cluster.create_pool(&name)).await
    }

    async fn start_upload(&self, key: &str, meta: &Meta) -> Result<Upload> {
        let pool = self.pool().await?;
        // The old version must be gone before its pieces are overwritten.
        self.bounded(pool.remove(&piece(key, 0))).await?;
        let id = format!("{:016x}", rand::random::<u64>());
        let p = Arc::new(Pending::new(key, self.layout, meta));
        lock(&self.uploads).insert(id.clone(), p);
        Ok(Upload::new(key, id))
    }

    async fn put_block(
        &self, up: &Upload, idx: usize, offset: u64, data: Bytes,
    ) -> Result<BlockId> {
        let p = self.pending(up)?;
        self.write_range(&p, offset, data).await?;
        Ok(BlockId(idx.to_string()))
    }

    async fn complete_upload(
        &self, up: &Upload, _blocks: Vec<BlockId>, meta: &Meta,
    ) -> Result<Option<String>> {
        let p = self.pending(up)?;
        let size = self.publish(&p, meta).await?;
        lock(&self.uploads).remove(&up.id);
        let n = p.layout.pieces(size);
        self.remove_pieces(&p.key, n, n).await?;
        Ok(None)
    }

    async fn abort_upload(&self, up: &Upload) -> Result<()> {
        let Some(p) = lock(&self.uploads).remove(&up.id) else {
            return Ok(());
        };
        let end = *lock(&p.end);
        self.remove_pieces(&p.key, 1, p.layout.pieces(end)).await
    }
}

//! `backup`: files and streams into the repository. Reading, chunking, hashing, compressing
//! and encrypting run on blocking threads, several files at once; packs upload through the
//! engine's bulk class while the next ones fill. Files whose size, mtime, ctime and inode match
//! the parent snapshot, and whose ctime lies safely before the parent started, keep their
//! content list unread: ctime cannot be set from user space, so a write after the parent began
//! reading always shows, even one within the same mtime tick.
//!
//! Write order: packs, then the index files naming them (flushed every few packs, so an
//! interrupted backup's packs serve the next one), then the snapshot.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use ferry_transfer::{Error, Result};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::chunker::Chunker;
use crate::crypto::{Kind, MasterKey, SEAL_ROOM};
use crate::id::Id;
use crate::index::{self, Index};
use crate::pack::{BlobKind, Entry, Packer};
use crate::policy::{Chunking, Everything, Pick, Policy};
use crate::repo::Repo;
use crate::snapshot::{hostname, Snapshot, Summary};
use crate::tree::{Node, NodeKind, Tree};
use crate::walk::{self, ReadAhead};

/// Packs uploading at once: enough to fill a long fat link at 4 blocks each.
const PACKS_IN_FLIGHT: usize = 6;
/// Packs being written at once to a local repository: a write there takes no round trip,
/// and each pack waiting holds its 16 MiB.
const PACKS_IN_FLIGHT_LOCAL: usize = 2;
/// Files read at once.
const FILES_AT_ONCE: usize = 8;
/// Big files (each with a chunker buffer of up to `chunk_max`) read at once into a local
/// repository: the cores, not the store, bound it.
const FILES_AT_ONCE_LOCAL: usize = 4;
/// Directories listed at once (besides the read-ahead thread): a disk's queue, not a core.
const LISTINGS_AT_ONCE: usize = 4;
/// Small changed files (one chunk or less) are read this many to a blocking task...
const SMALL_RUN: usize = 64;
/// ...or until they hold this many bytes.
const SMALL_RUN_BYTES: u64 = 4 << 20;
/// An index file is written once this many packs wait for one, or once a pack has waited
/// [`INDEX_EVERY`]: a backup killed after that leaves its packs findable.
const PACKS_PER_INDEX: usize = 16;
const INDEX_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// A parent's file is trusted unread only if its ctime is this much before the parent began:
/// the kernel stamps ctime from a coarse clock that may lag the one the start time came from.
const CTIME_MARGIN_NS: i64 = 2_000_000_000;

/// zstd level for blobs: level 1 keeps within a few percent of level 3's size at twice the
/// speed, and a backup on 2 cores is bound by it.
const ZSTD_LEVEL: i32 = 1;

thread_local! {
    /// One compression context per thread: creating one per blob costs more than
    /// compressing a small file.
    static ZSTD: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> = const { std::cell::RefCell::new(None) };
}

/// Scratch capacity a thread keeps between blobs.
const SCRATCH_KEEP: usize = 1 << 20;

thread_local! {
    /// Per-thread buffer a blob is compressed and sealed in before its pack copies it: a fresh
    /// one per blob, most above the mmap threshold, would fault in new pages each time.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// zstd of `plain` into `out`, replacing what it held.
fn compress_into(plain: &[u8], out: &mut Vec<u8>) -> Result<()> {
    ZSTD.with(|z| {
        let mut z = z.borrow_mut();
        if z.is_none() {
            *z = Some(
                zstd::bulk::Compressor::new(ZSTD_LEVEL)
                    .map_err(|e| Error::Permanent(e.to_string()))?,
            );
        }
        out.clear();
        // Room for the sealed blob that will be made in this buffer too (see seal_blob).
        out.reserve(zstd::zstd_safe::compress_bound(plain.len()) + SEAL_ROOM + 1 + TAG_ROOM);
        z.as_mut()
            .expect("set above")
            .compress_to_buffer(plain, out)
            .map(drop)
            .map_err(|e| Error::Permanent(format!("compress: {e}")))
    })
}

/// What sealing appends (the tag), reserved so that it does not move a large blob.
const TAG_ROOM: usize = 16;

/// The sealed blob for `plain`: a flag byte saying whether zstd was used (only where it
/// pays), then the bytes, sealed; handed to `f` while it lies in this thread's scratch. One
/// buffer: the compressed bytes move up in it to make room for the nonce and the flag.
fn seal_blob<R>(
    key: &MasterKey, kind: BlobKind, plain: &[u8], f: impl FnOnce(&[u8]) -> R,
) -> Result<R> {
    SCRATCH.with(|s| {
        let sealed = &mut *s.borrow_mut();
        compress_into(plain, sealed)?;
        let packed = sealed.len();
        if packed + 64 < plain.len() {
            sealed.resize(SEAL_ROOM + 1 + packed, 0);
            sealed.copy_within(..packed, SEAL_ROOM + 1);
            sealed[SEAL_ROOM] = 1;
        } else {
            sealed.clear();
            sealed.resize(SEAL_ROOM, 0);
            sealed.push(0);
            sealed.extend_from_slice(plain);
        }
        key.seal_in_place(kind.sealed(), sealed);
        let out = f(sealed);
        // A thread keeps a small buffer for the next blob; a large chunk's (up to 8 MiB,
        // mmapped) goes back at once rather than staying with a thread that may idle.
        if sealed.capacity() > SCRATCH_KEEP {
            *sealed = Vec::new();
        }
        Ok(out)
    })
}

/// Room for a data pack: it closes at the first blob past the pack size, so one largest
/// sealed chunk more, and its header.
fn data_pack_room(cfg: &crate::repo::Config) -> usize {
    (cfg.pack_size + cfg.chunk_max) as usize + (1 << 20)
}

/// Receives progress: the CLI draws a bar.
pub trait BackupProgress: Send + Sync {
    /// A file was found by the scanner ahead of the backup.
    fn scanned(&self, _bytes: u64) {}
    /// Bytes were processed (read, or proven unchanged; written, on restore).
    fn done(&self, _bytes: u64) {}
    /// A whole file was backed up.
    fn file_done(&self) {}
    /// A file starts being read (for a progress line that names it).
    fn file_started(&self, _path: &Path) {}
}

/// A [`BackupProgress`] that ignores everything.
#[derive(Debug, Default)]
pub struct Quiet;
impl BackupProgress for Quiet {}

/// What went into a backup, and what could not.
#[derive(Debug)]
pub struct Outcome {
    /// The new snapshot's id.
    pub id: Id,
    /// The snapshot.
    pub snapshot: Snapshot,
    /// Paths that could not be read, with why.
    pub errors: Vec<String>,
}

struct State {
    data: Packer,
    tree: Packer,
    /// Blobs stored during this backup (in a pack, uploaded or not).
    seen: HashSet<Id>,
    summary: Summary,
    errors: Vec<String>,
    /// Uploaded packs not yet named by an index file.
    unindexed: Vec<(Id, Vec<Entry>)>,
    last_index: std::time::Instant,
}

/// What must hold before a backup writes anything: see [`Archiver::write_after`].
pub type Gate = futures::future::Shared<BoxFuture<'static, Result<()>>>;

/// One backup run.
pub struct Archiver {
    repo: Arc<Repo>,
    index: Arc<Index>,
    gate: std::sync::OnceLock<Gate>,
    ahead: std::sync::OnceLock<Arc<ReadAhead>>,
    /// The snapshot's hostname, when not this host's (`backup --host`).
    host: std::sync::OnceLock<String>,
    state: Mutex<State>,
    uploads: Mutex<JoinSet<Result<()>>>,
    slots: Arc<Semaphore>,
    /// Held by a thread whose full pack waits for an upload slot.
    closing: Mutex<()>,
    files: Semaphore,
    /// Directory listings at once: each is a blocking task, and unbounded, a cold-cache walk
    /// had tokio's blocking pool grow to 60 threads, each keeping the buffers of its own
    /// (zstd context, scratch, malloc arena) once it went on to pack blobs.
    listings: Semaphore,
    progress: Arc<dyn BackupProgress>,
    rt: tokio::runtime::Handle,
    trees: crate::blob::Trees,
    policy: Arc<dyn Policy>,
    /// Nanoseconds since the epoch when this backup began.
    started: i64,
    /// Parent files with a ctime before this are trusted unread.
    trust_before: AtomicI64,
}

pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

impl Archiver {
    /// A backup into `repo`, deduplicating against `index`.
    /// `trees` serves the parent snapshot's directory listings (preloaded, or read on demand).
    pub fn new(
        repo: Arc<Repo>, index: Arc<Index>, trees: crate::blob::Trees,
        progress: Arc<dyn BackupProgress>,
    ) -> Arc<Self> {
        Self::with_policy(repo, index, trees, progress, Arc::new(Everything))
    }

    /// Like [`Archiver::new`], with what to take and how to cut it chosen by `policy`.
    pub fn with_policy(
        repo: Arc<Repo>, index: Arc<Index>, trees: crate::blob::Trees,
        progress: Arc<dyn BackupProgress>, policy: Arc<dyn Policy>,
    ) -> Arc<Self> {
        let room = data_pack_room(&repo.config);
        let (packs_in_flight, files_at_once) = match repo.remote().is_local() {
            true => (PACKS_IN_FLIGHT_LOCAL, FILES_AT_ONCE_LOCAL),
            false => (PACKS_IN_FLIGHT, FILES_AT_ONCE),
        };
        Arc::new(Self {
            repo,
            index,
            gate: std::sync::OnceLock::new(),
            ahead: std::sync::OnceLock::new(),
            host: std::sync::OnceLock::new(),
            state: Mutex::new(State {
                data: Packer::with_capacity(room),
                tree: Packer::default(),
                seen: HashSet::new(),
                summary: Summary::default(),
                errors: Vec::new(),
                unindexed: Vec::new(),
                // The first pack is indexed at once.
                last_index: std::time::Instant::now() - INDEX_EVERY,
            }),
            uploads: Mutex::new(JoinSet::new()),
            slots: Arc::new(Semaphore::new(packs_in_flight)),
            closing: Mutex::new(()),
            files: Semaphore::new(files_at_once),
            listings: Semaphore::new(LISTINGS_AT_ONCE),
            progress,
            rt: tokio::runtime::Handle::current(),
            trees,
            policy,
            started: now_ns(),
            trust_before: AtomicI64::new(i64::MIN),
        })
    }

    /// Holds every write to the store (packs, index, snapshot) until `gate` resolves, and
    /// fails them with its error. A backup can then read and compare while its lock is still
    /// being taken: only what it writes must wait for the lock. Set before the backup starts.
    pub fn write_after(&self, gate: Gate) {
        let _ = self.gate.set(gate);
    }

    /// Names the snapshot's host `host` instead of this host's name. Set before the backup
    /// starts.
    pub fn host(&self, host: String) {
        let _ = self.host.set(host);
    }

    /// Takes directory listings from `ahead`, which began before this archiver: the snapshot
    /// then starts when it did. Set before the backup starts.
    pub fn read_ahead(&self, ahead: Arc<ReadAhead>) {
        let _ = self.ahead.set(ahead);
    }

    // The archiver lists faster than the read-ahead alone, and would list again what the
    // read-ahead had not reached yet.
    fn stop_reading_ahead(&self) {
        if let Some(ra) = self.ahead.get() {
            ra.stop();
        }
    }

    /// When this backup began reading, in nanoseconds since the epoch.
    fn start_ns(&self) -> i64 {
        let ahead = self.ahead.get().map(|ra| ra.started());
        ahead.map_or(self.started, |a| a.min(self.started))
    }

    async fn writable(&self) -> Result<()> {
        match self.gate.get() {
            Some(g) => g.clone().await,
            None => Ok(()),
        }
    }

    /// Stores one blob unless the repository has it; blocking (runs on a blocking thread).
    fn add_blob(self: &Arc<Self>, kind: BlobKind, plain: &[u8]) -> Result<Id> {
        let key = self.repo.key();
        let id = key.blob_id(plain);
        if self.index.has(&id) {
            return Ok(id);
        }
        if !self.state.lock().expect("state").seen.insert(id) {
            return Ok(id);
        }
        // Waits while a full pack waits for an upload slot (see below).
        drop(self.closing.lock().expect("closing"));
        let full = seal_blob(key, kind, plain, |sealed| {
            let mut st = self.state.lock().expect("state");
            st.summary.blobs_new += 1;
            st.summary.bytes_new += plain.len() as u64;
            let packer = match kind {
                BlobKind::Data => &mut st.data,
                BlobKind::Tree => &mut st.tree,
            };
            packer.add(kind, id, sealed, plain.len());
            if packer.len() >= self.repo.config.pack_size as usize {
                let next = match kind {
                    BlobKind::Data => Packer::with_capacity(data_pack_room(&self.repo.config)),
                    BlobKind::Tree => Packer::default(),
                };
                Some(std::mem::replace(packer, next))
            } else {
                None
            }
        })?;
        if let Some(p) = full {
            // No blob is added while this pack waits for its slot: otherwise every thread
            // could fill and hold a pack of its own meanwhile (heaptrack: 11 packs, 288 MB,
            // with 6 uploading over the WAN).
            let _closing = self.closing.lock().expect("closing");
            self.upload(p)?;
        }
        Ok(id)
    }

    /// Hands a full pack to an upload task; blocks while too many are in flight.
    fn upload(self: &Arc<Self>, packer: Packer) -> Result<()> {
        let permit = self
            .rt
            .block_on(self.slots.clone().acquire_owned())
            .map_err(|e| Error::Permanent(e.to_string()))?;
        let (id, bytes, entries) = packer.finish(self.repo.key());
        if let Some(c) = self.repo.cache() {
            if entries.iter().all(|e| e.kind == BlobKind::Tree) {
                c.put("trees", &id, &bytes);
            }
        }
        let me = self.clone();
        let mut uploads = self.uploads.lock().expect("uploads");
        uploads.spawn_on(
            async move {
                me.writable().await?;
                let n = me.repo.put(&me.repo.pack_path(&id), bytes).await?;
                drop(permit);
                let flush = {
                    let mut st = me.state.lock().expect("state");
                    st.summary.bytes_stored += n;
                    st.unindexed.push((id, entries));
                    if st.unindexed.len() >= PACKS_PER_INDEX
                        || st.last_index.elapsed() >= INDEX_EVERY
                    {
                        st.last_index = std::time::Instant::now();
                        std::mem::take(&mut st.unindexed)
                    } else {
                        Vec::new()
                    }
                };
                if !flush.is_empty() {
                    me.repo
                        .save_file(Kind::Index, &index::encode(&flush))
                        .await?;
                }
                Ok(())
            },
            &self.rt,
        );
        Ok(())
    }

    /// The counts so far: files, bytes, blobs new to the repository.
    pub fn summary(&self) -> Summary {
        self.state.lock().expect("state").summary.clone()
    }

    /// Paths that could not be read, with why.
    pub fn errors(&self) -> Vec<String> {
        self.state.lock().expect("state").errors.clone()
    }

    /// Whether an entry gone missing is passed over in silence.
    fn vanished(&self, kind: &std::io::ErrorKind) -> bool {
        *kind == std::io::ErrorKind::NotFound && !self.policy.vanished_is_error()
    }

    /// Trusts the parent's metadata for files last changed safely before it began.
    fn trust_parent(&self, parent: Option<&Snapshot>) {
        if let Some(s) = parent {
            let start = s.start.unwrap_or(s.time.saturating_mul(1_000_000_000));
            self.trust_before
                .store(start - CTIME_MARGIN_NS, Ordering::Relaxed);
        }
    }

    fn error(&self, path: &Path, e: impl std::fmt::Display) {
        let mut st = self.state.lock().expect("state");
        st.summary.errors += 1;
        st.errors.push(format!("{}: {e}", path.display()));
    }

    /// Reads and stores the content of `f`, the file at `path`; blocking.
    fn save_content(
        self: &Arc<Self>, path: &Path, f: &fs::File, size: u64,
    ) -> Result<(Vec<Id>, u64)> {
        let cfg = &self.repo.config;
        let io = |e: std::io::Error| Error::io(path.display(), e);
        let mut ids = Vec::new();
        let mut read = 0u64;
        if let Chunking::Fixed(block) = self.policy.chunking(path) {
            let store = |off: u64, b: &[u8]| {
                self.policy.inspect(path, off, b);
                self.add_blob(BlobKind::Data, b)
            };
            return crate::blocks::cut(f, size, block, &store, &path.display());
        } else if size <= u64::from(cfg.chunk_min) {
            // A small file is one chunk: no chunker buffer for it.
            let mut buf = Vec::with_capacity(size as usize);
            let mut r = f;
            r.read_to_end(&mut buf).map_err(io)?;
            if !buf.is_empty() {
                read = buf.len() as u64;
                ids.push(self.add_blob(BlobKind::Data, &buf)?);
            }
        } else {
            let mut chunker = Chunker::new(f, cfg.chunk_min, cfg.chunk_avg, cfg.chunk_max);
            while let Some(c) = chunker.next_chunk().map_err(io)? {
                read += c.len() as u64;
                ids.push(self.add_blob(BlobKind::Data, c)?);
            }
        }
        Ok((ids, read))
    }

    /// Loads a tree blob of an older snapshot, with its id, to compare against; `None` when
    /// unreadable or no longer indexed.
    async fn old_tree(&self, id: Option<Id>) -> Option<(Id, Tree)> {
        let id = id.filter(|id| self.index.has(id))?;
        let tree = self.trees.get(&self.repo, &self.index, &id).await.ok()?;
        Some((id, tree))
    }

    /// Stores one directory's listing as given, sorted by name: for programs that build a
    /// tree themselves (and for tests that play a hostile password holder). A restore checks
    /// every name it reads, whatever wrote it.
    pub fn save_tree(self: &Arc<Self>, mut nodes: Vec<Node>) -> BoxFuture<'static, Result<Id>> {
        let me = self.clone();
        async move {
            nodes.sort_by_key(|a| a.name_bytes());
            let json = serde_json::to_vec(&Tree { nodes }).expect("serializable");
            tokio::task::spawn_blocking(move || me.add_blob(BlobKind::Tree, &json))
                .await
                .map_err(|e| Error::Permanent(e.to_string()))?
        }
        .boxed()
    }

    /// Stores one data blob unless the repository has it (`copy` brings blobs over from
    /// another repository this way, each named again by this repository's key).
    pub fn save_data(self: &Arc<Self>, plain: Vec<u8>) -> BoxFuture<'static, Result<Id>> {
        let me = self.clone();
        async move {
            tokio::task::spawn_blocking(move || me.add_blob(BlobKind::Data, &plain))
                .await
                .map_err(|e| Error::Permanent(e.to_string()))?
        }
        .boxed()
    }

    /// Backs up one entry at `path`, given the same entry in the parent snapshot.
    fn save_entry(
        self: &Arc<Self>, path: PathBuf, old: Option<Node>,
    ) -> BoxFuture<'static, Option<Node>> {
        let name = path
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        let node = walk::node(&path, &name);
        self.save_node(path, node, old)
    }

    /// The parent's node of a file whose content may be kept unread: unchanged since, last
    /// changed safely before the parent began, and still in the index (a prune that ran
    /// before this backup's lock may have removed a forgotten parent's chunks).
    fn reusable<'a>(
        &self, node: &Node, old: Option<&'a Node>, trust_before: i64,
    ) -> Option<&'a Node> {
        old.filter(|o| {
            node.unchanged_since(o)
                && o.ctime < trust_before
                && o.content.iter().all(|c| self.index.has(c))
        })
    }

    /// Reads a file's content and xattrs into its `node`; blocking. `None` when it vanished
    /// or could not be read (reported).
    fn read_file(self: &Arc<Self>, path: &Path, mut node: Node) -> Option<Node> {
        self.progress.file_started(path);
        // The file listed, and only it: content and xattrs from one descriptor of it.
        let read = walk::open_listed(path, &node)
            .map_err(|e| Error::io(path.display(), e))
            .and_then(|f| {
                let xattrs = walk::xattrs_of_file(&f);
                self.save_content(path, &f, node.size)
                    .map(|(ids, read)| (ids, read, xattrs))
            });
        match read {
            Ok((ids, read, xattrs)) => {
                node.content = ids;
                node.xattrs = xattrs;
                node.size = read;
                let mut st = self.state.lock().expect("state");
                st.summary.files_read += 1;
                st.summary.bytes_read += read;
                Some(node)
            }
            Err(Error::NotFound(_)) if self.vanished(&std::io::ErrorKind::NotFound) => None,
            Err(e) => {
                self.error(path, e);
                None
            }
        }
    }

    fn file_done(&self, node: &Node) {
        self.state.lock().expect("state").summary.total_bytes += node.size;
        self.progress.done(node.size);
        self.progress.file_done();
    }

    /// Reads a run of small changed files in one blocking task: one task per 4 KiB file
    /// cost more in thread wake-ups than in reading (perf: a sixth of a first backup).
    fn save_small(
        self: &Arc<Self>, files: Vec<(PathBuf, Node)>,
    ) -> BoxFuture<'static, Vec<Option<Node>>> {
        let me = self.clone();
        async move {
            let _permit = me.files.acquire().await.expect("open semaphore");
            let (m2, paths) = (
                me.clone(),
                files.iter().map(|f| f.0.clone()).collect::<Vec<_>>(),
            );
            let read = tokio::task::spawn_blocking(move || {
                files
                    .into_iter()
                    .map(|(path, node)| m2.read_file(&path, node))
                    .collect::<Vec<_>>()
            });
            match read.await {
                Ok(nodes) => {
                    for n in nodes.iter().flatten() {
                        me.file_done(n);
                    }
                    nodes
                }
                Err(e) => {
                    for p in &paths {
                        me.error(p, &e);
                    }
                    Vec::new()
                }
            }
        }
        .boxed()
    }

    /// Backs up the entry at `path` whose metadata was read as `node`.
    fn save_node(
        self: &Arc<Self>, path: PathBuf, node: std::io::Result<Node>, old: Option<Node>,
    ) -> BoxFuture<'static, Option<Node>> {
        let me = self.clone();
        async move {
            let mut node = match node {
                Ok(n) => n,
                Err(e) if me.vanished(&e.kind()) => return None,
                Err(e) => {
                    me.error(&path, e);
                    return None;
                }
            };
            let trust_before = me.trust_before.load(Ordering::Relaxed);
            match node.kind {
                NodeKind::File => {
                    if let Some(o) = me.reusable(&node, old.as_ref(), trust_before) {
                        // Setting an xattr changes the ctime: the parent's are still right.
                        node.content = o.content.clone();
                        node.xattrs = o.xattrs.clone();
                        me.state.lock().expect("state").summary.files_unchanged += 1;
                    } else {
                        let _permit = me.files.acquire().await.expect("open semaphore");
                        let (m2, p2) = (me.clone(), path.clone());
                        let read = tokio::task::spawn_blocking(move || m2.read_file(&p2, node));
                        match read.await {
                            Ok(Some(n)) => node = n,
                            Ok(None) => return None,
                            Err(e) => {
                                me.error(&path, e);
                                return None;
                            }
                        }
                    }
                    me.file_done(&node);
                }
                NodeKind::Dir => {
                    let old_tree = me.old_tree(old.and_then(|o| o.subtree)).await;
                    let listed_as = (node.dev, node.inode);
                    match me.save_dir(path.clone(), old_tree, Some(listed_as)).await {
                        Ok(id) => node.subtree = Some(id),
                        Err(Error::NotFound(_)) if me.vanished(&std::io::ErrorKind::NotFound) => {
                            return None;
                        }
                        Err(e) => {
                            me.error(&path, e);
                            return None;
                        }
                    }
                }
                _ => {}
            }
            Some(node)
        }
        .boxed()
    }

    /// The entries of the directory at `path` the policy takes, each with whether it is
    /// kept as an empty directory; what it leaves out is counted.
    fn pick(
        &self, path: &Path, entries: walk::Entries,
    ) -> Vec<(std::ffi::OsString, std::io::Result<Node>, bool)> {
        let (mut excluded, mut bytes) = (0, 0);
        let mut kept = Vec::with_capacity(entries.len());
        for (name, node) in entries {
            let pick = match &node {
                Ok(n) => self.policy.pick(&path.join(&name), n),
                Err(_) => Pick::Take,
            };
            match pick {
                Pick::Take => kept.push((name, node, false)),
                Pick::Empty => kept.push((name, node, true)),
                Pick::Follow => {
                    let p = path.join(&name);
                    let node = match fs::metadata(&p) {
                        Ok(m) if m.is_dir() => walk::node_of(&m, &p, &name),
                        _ => node,
                    };
                    kept.push((name, node, false));
                }
                Pick::Skip => {
                    excluded += 1;
                    bytes += node.as_ref().map_or(0, |n| n.size);
                }
            }
        }
        let mut st = self.state.lock().expect("state");
        st.summary.excluded += excluded;
        st.summary.excluded_bytes += bytes;
        kept
    }

    /// A directory kept without its content (a mount point under `--one-file-system`).
    fn save_empty_dir(
        self: &Arc<Self>, node: std::io::Result<Node>,
    ) -> BoxFuture<'static, Option<Node>> {
        let me = self.clone();
        async move {
            let mut node = node.ok()?;
            match me.save_tree(Vec::new()).await {
                Ok(id) => node.subtree = Some(id),
                Err(e) => {
                    me.error(Path::new(&node.name), e);
                    return None;
                }
            }
            me.state.lock().expect("state").summary.dirs += 1;
            Some(node)
        }
        .boxed()
    }

    /// Backs up a directory's entries; returns its tree's id.
    /// Saves the directory at `path`; `listed_as` is its device and inode in its parent's
    /// listing, which the directory read must be (None for a source given by path).
    fn save_dir(
        self: &Arc<Self>, path: PathBuf, old: Option<(Id, Tree)>, listed_as: Option<(u64, u64)>,
    ) -> BoxFuture<'static, Result<Id>> {
        let me = self.clone();
        async move {
            let ahead = me.ahead.get().and_then(|ra| ra.take(&path));
            let entries = match ahead {
                Some(listed) => listed,
                None => {
                    let p = path.clone();
                    let _permit = me.listings.acquire().await.expect("open semaphore");
                    tokio::task::spawn_blocking(move || walk::entries(&p))
                        .await
                        .map_err(|e| Error::Permanent(e.to_string()))?
                }
            }
            .map_err(|e| Error::io(path.display(), e))?;
            if listed_as.is_some_and(|id| id != entries.id) {
                return Err(Error::Permanent(format!(
                    "{}: changed while the backup ran: not the directory it listed; left out",
                    path.display()
                )));
            }
            let entries = me.pick(&path, entries.entries);
            me.state.lock().expect("state").summary.dirs += 1;
            let (old_id, old_nodes) = match old {
                Some((id, t)) => (Some(id), t.nodes),
                None => (None, Vec::new()),
            };
            let by_name: HashMap<Vec<u8>, usize> = old_nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name_bytes(), i))
                .collect();
            let find = |name: &std::ffi::OsStr| {
                by_name.get(name.as_bytes()).map(|&i| old_nodes[i].clone())
            };
            // Small changed files go in runs, each read by one blocking task; the rest one by
            // one. Order is kept: the tree lists entries by name. The work is made as the
            // stream takes it, not up front: a future per entry of every directory open at
            // once (hundreds, while listings wait on a cold disk) held tens of MiB.
            let trust_before = me.trust_before.load(Ordering::Relaxed);
            let small_max = u64::from(me.repo.config.chunk_min);
            let mut last: Vec<BoxFuture<'static, Option<Node>>> = Vec::new();
            let mut entries = entries.into_iter();
            let mut run: Vec<(PathBuf, Node)> = Vec::new();
            let mut run_bytes = 0u64;
            let mut next: Option<BoxFuture<'static, Vec<Option<Node>>>> = None;
            let work = std::iter::from_fn(|| {
                if let Some(f) = next.take() {
                    return Some(f);
                }
                for (name, node, empty) in entries.by_ref() {
                    let old = find(&name);
                    if me.policy.last(&path.join(&name)) {
                        last.push(match empty {
                            true => me.save_empty_dir(node),
                            false => me.save_node(path.join(&name), node, old),
                        });
                        continue;
                    }
                    let small = match &node {
                        Ok(n) => {
                            n.kind == NodeKind::File
                                && n.size <= small_max
                                && me.reusable(n, old.as_ref(), trust_before).is_none()
                        }
                        Err(_) => false,
                    };
                    if small {
                        let n = node.expect("checked above");
                        run_bytes += n.size;
                        run.push((path.join(&name), n));
                        if run.len() >= SMALL_RUN || run_bytes >= SMALL_RUN_BYTES {
                            run_bytes = 0;
                            return Some(me.save_small(std::mem::take(&mut run)));
                        }
                        continue;
                    }
                    let one = match empty {
                        true => me.save_empty_dir(node),
                        false => me.save_node(path.join(&name), node, old),
                    };
                    let one = one.map(|n| vec![n]).boxed();
                    if run.is_empty() {
                        return Some(one);
                    }
                    // The run before it goes first.
                    next = Some(one);
                    run_bytes = 0;
                    return Some(me.save_small(std::mem::take(&mut run)));
                }
                (!run.is_empty()).then(|| me.save_small(std::mem::take(&mut run)))
            });
            let mut nodes: Vec<Node> = futures::stream::iter(work)
                .buffered(FILES_AT_ONCE * 2)
                .flat_map(futures::stream::iter)
                .filter_map(|n| async move { n })
                .collect()
                .await;
            // What the policy wants read last, one after another, once the rest is done.
            if !last.is_empty() {
                for f in last {
                    nodes.extend(f.await);
                }
                nodes.sort_by_key(|n| n.name_bytes());
            }
            // Both lists are sorted by name: equal entries encode to the same tree, so an
            // unchanged directory keeps its id without being encoded and hashed again.
            match old_id {
                Some(id) if nodes == old_nodes => Ok(id),
                _ => me.save_tree(nodes).await,
            }
        }
        .boxed()
    }

    /// The nodes for `rels` under `base`: whole entries where a rel is one component, the
    /// intermediate directories (metadata only) otherwise.
    fn save_paths(
        self: &Arc<Self>, base: PathBuf, rels: Vec<PathBuf>, old: Option<(Id, Tree)>,
    ) -> BoxFuture<'static, Result<Id>> {
        let me = self.clone();
        async move {
            let mut firsts: Vec<std::ffi::OsString> = rels
                .iter()
                .filter_map(|r| r.iter().next().map(|c| c.to_os_string()))
                .collect();
            firsts.sort();
            firsts.dedup();
            let old_nodes = old.map(|(_, t)| t.nodes).unwrap_or_default();
            let mut nodes = Vec::new();
            for first in firsts {
                let path = base.join(&first);
                let prev = old_nodes
                    .iter()
                    .find(|n| n.name_bytes() == first.as_bytes())
                    .cloned();
                let whole = rels.iter().any(|r| r.as_os_str() == first.as_os_str());
                if whole {
                    if let Some(n) = me.save_entry(path, prev).await {
                        nodes.push(n);
                    }
                    continue;
                }
                let deeper: Vec<PathBuf> = rels
                    .iter()
                    .filter_map(|r| r.strip_prefix(&first).ok().map(Path::to_path_buf))
                    .collect();
                let mut n = walk::node(&path, &first).map_err(|e| Error::io(path.display(), e))?;
                let old_sub = me.old_tree(prev.and_then(|p| p.subtree)).await;
                n.subtree = Some(me.save_paths(path, deeper, old_sub).await?);
                nodes.push(n);
            }
            me.save_tree(nodes).await
        }
        .boxed()
    }

    /// Backs up `paths` (absolute); `parent` is the snapshot to compare against.
    pub async fn backup_paths(
        self: &Arc<Self>, paths: &[PathBuf], parent: Option<(Id, Snapshot)>, tags: Vec<String>,
    ) -> Result<Outcome> {
        let rels: Vec<PathBuf> = paths
            .iter()
            .map(|p| p.strip_prefix("/").unwrap_or(p).to_path_buf())
            .collect();
        self.stop_reading_ahead();
        for p in paths {
            fs::symlink_metadata(p).map_err(|e| Error::io(p.display(), e))?;
        }
        self.trust_parent(parent.as_ref().map(|p| &p.1));
        let old_root = match &parent {
            Some((_, s)) => self.old_tree(Some(s.tree)).await,
            None => None,
        };
        let root = self.save_paths(PathBuf::from("/"), rels, old_root).await?;
        let shown = paths.iter().map(|p| p.display().to_string()).collect();
        self.commit(root, shown, parent.map(|p| p.0), tags, None)
            .await
    }

    /// Backs up the directory `dir` as the snapshot's root (its entries are the root tree's,
    /// so a restore writes them straight into the target), compared against `parent`.
    /// Returns the root tree for [`Archiver::commit`], which the caller calls once it has
    /// what the snapshot should record.
    pub async fn save_root(self: &Arc<Self>, dir: &Path, parent: Option<&Snapshot>) -> Result<Id> {
        self.stop_reading_ahead();
        self.trust_parent(parent);
        let old = match parent {
            Some(s) => self.old_tree(Some(s.tree)).await,
            None => None,
        };
        fs::metadata(dir).map_err(|e| Error::io(dir.display(), e))?;
        self.save_dir(dir.to_path_buf(), old, None).await
    }

    /// Backs up a stream as one file called `name`.
    pub async fn backup_stream<R: Read + Send + 'static>(
        self: &Arc<Self>, reader: R, name: &str, tags: Vec<String>,
    ) -> Result<Outcome> {
        // Checked before a byte is read: a restore would refuse the name anyway.
        ferry_fs::check_name(name.as_bytes())
            .map_err(|e| Error::Invalid(format!("--name {name:?}: {e}")))?;
        let me = self.clone();
        let (ids, size) = tokio::task::spawn_blocking(move || {
            let cfg = me.repo.config.clone();
            let mut ids = Vec::new();
            let mut size = 0u64;
            let mut chunker = Chunker::new(reader, cfg.chunk_min, cfg.chunk_avg, cfg.chunk_max);
            while let Some(c) = chunker
                .next_chunk()
                .map_err(|e| Error::Permanent(format!("read stdin: {e}")))?
            {
                size += c.len() as u64;
                me.progress.done(c.len() as u64);
                ids.push(me.add_blob(BlobKind::Data, c)?);
            }
            Ok::<_, Error>((ids, size))
        })
        .await
        .map_err(|e| Error::Permanent(e.to_string()))??;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let mut node = Node {
            name: String::new(),
            name_hex: false,
            kind: NodeKind::File,
            mode: 0o600,
            uid,
            gid,
            mtime: now,
            ctime: now,
            inode: 0,
            dev: 0,
            nlink: 1,
            size,
            content: ids,
            subtree: None,
            target: None,
            rdev: None,
            xattrs: Vec::new(),
        };
        node.set_name(std::ffi::OsStr::new(name));
        {
            let mut st = self.state.lock().expect("state");
            st.summary.files_read = 1;
            st.summary.bytes_read = size;
            st.summary.total_bytes = size;
        }
        let root = self.save_tree(vec![node]).await?;
        self.commit(root, vec![format!("stdin:{name}")], None, tags, None)
            .await
    }

    /// Uploads what is left, indexes it, and writes the snapshot of `root`: the last step,
    /// so that a snapshot never names data the repository lacks.
    pub async fn commit(
        self: &Arc<Self>, root: Id, paths: Vec<String>, parent: Option<Id>, tags: Vec<String>,
        extra: Option<serde_json::Value>,
    ) -> Result<Outcome> {
        let (summary, errors) = self.flush().await?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let snapshot = Snapshot {
            time: now.as_secs() as i64,
            nanos: now.subsec_nanos(),
            hostname: self.host.get().cloned().unwrap_or_else(hostname),
            paths,
            tags,
            tree: root,
            parent,
            summary,
            start: Some(self.start_ns()),
            extra,
        };
        let id = self
            .repo
            .save_file(
                Kind::Snapshot,
                &serde_json::to_vec(&snapshot).expect("serializable"),
            )
            .await?;
        Ok(Outcome {
            id,
            snapshot,
            errors,
        })
    }

    /// Writes `snapshot` as it is, once what this archiver stored is uploaded and indexed:
    /// for a snapshot made again from another (`repair snapshots`), which keeps its time,
    /// host and counts.
    pub async fn commit_snapshot(self: &Arc<Self>, snapshot: &Snapshot) -> Result<Id> {
        self.flush().await?;
        let body = serde_json::to_vec(snapshot).expect("serializable");
        self.repo.save_file(Kind::Snapshot, &body).await
    }

    /// Uploads the packs still open, waits for every upload, and indexes what is not yet:
    /// the counts and errors of the run.
    async fn flush(self: &Arc<Self>) -> Result<(Summary, Vec<String>)> {
        let (data, tree) = {
            let mut st = self.state.lock().expect("state");
            (std::mem::take(&mut st.data), std::mem::take(&mut st.tree))
        };
        for p in [data, tree] {
            if !p.is_empty() {
                let me = self.clone();
                tokio::task::spawn_blocking(move || me.upload(p))
                    .await
                    .map_err(|e| Error::Permanent(e.to_string()))??;
            }
        }
        let mut uploads = std::mem::take(&mut *self.uploads.lock().expect("uploads"));
        while let Some(r) = uploads.join_next().await {
            r.map_err(|e| Error::Permanent(e.to_string()))??;
        }
        let (rest, summary, errors) = {
            let mut st = self.state.lock().expect("state");
            (
                std::mem::take(&mut st.unindexed),
                st.summary.clone(),
                std::mem::take(&mut st.errors),
            )
        };
        self.writable().await?;
        if !rest.is_empty() {
            self.repo
                .save_file(Kind::Index, &index::encode(&rest))
                .await?;
        }
        Ok((summary, errors))
    }
}

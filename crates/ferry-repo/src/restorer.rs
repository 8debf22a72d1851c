//! `restore`: a snapshot back to a directory. Trees load in parallel; file content is fetched
//! pack by pack, each pack's needed blobs in a few coalesced ranged reads, many packs at once,
//! and written at their offsets. Files are written under private temp names and renamed only
//! when every blob checked out: a damaged file is reported by name, never left half-written.
//! Every entry is made through `ferry-fs`, beneath the target's descriptor: names from the
//! snapshot are checked, links in the target are never followed (docs/security.md).

mod entry;
mod select;

pub use select::Select;

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use ferry_fs::Dir;
use ferry_transfer::{Error, Result};
use futures::StreamExt;

use crate::blob::with_blob;
use crate::id::Id;
use crate::index::Index;
use crate::lock::Lock;
use crate::pack::BlobKind;
use crate::repo::{Repo, READ_AHEAD};
use crate::snapshot::Snapshot;
use crate::tree::NodeKind;
use entry::{create, make_other, meta, write_whole, Entry, Failed};

/// Ranged reads in flight: at 4 MiB each, 64 MiB of buffers at most; over the bench's WAN
/// (8 MB/s per connection, 100 MB/s in all) 16 fill the link. From local disk a read is
/// ready at once: two per core keep every core busy with less memory.
const READS_AT_ONCE: usize = 16;
/// Needed blobs closer than this are fetched in one read, the bytes between them discarded.
const COALESCE_GAP: u64 = 256 << 10;
/// Longest single read: long reads would leave few requests in flight on a high-latency link.
const MAX_READ: u64 = 4 << 20;
/// Longest single read from a local store: a read there costs a system call, not a round trip,
/// and a shorter one holds less memory while its blobs wait for a core. Restore of 100k files
/// (2.1 GB), peak RSS: 106-112 MiB at 4 MiB, 96-98 at 2, 93-95 at 1, for about 5 % more time
/// at 1 (within the noise of this disk).
const MAX_READ_LOCAL: u64 = 1 << 20;

/// What a restore did.
#[derive(Debug, Default)]
pub struct Restored {
    /// Files written.
    pub files: u64,
    /// Directories created.
    pub dirs: u64,
    /// Bytes of file content.
    pub bytes: u64,
    /// Files that could not be restored, with why.
    pub errors: Vec<String>,
    /// Entries left as they were (`--overwrite never` or `if-changed`).
    pub skipped: u64,
    /// Entries removed because the snapshot does not hold them (`--delete`).
    pub deleted: u64,
}

/// What a restore does with an entry already in the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overwrite {
    /// Replace it (as restic does by default).
    #[default]
    Always,
    /// Leave a regular file whose size, mtime, mode and (on a root restore) owner match the
    /// snapshot's; replace anything else.
    IfChanged,
    /// Leave anything that exists; directories are entered all the same.
    Never,
    /// Leave a regular file whose size, mode and (on a root restore) owner match the
    /// snapshot's and whose content does, blob by blob (read and hashed with the repository's
    /// key); replace anything else. Slower than `IfChanged`, and a file whose mtime was put
    /// back after a change is still found (a delta restore).
    IfDifferent,
}

/// What to restore, and how.
#[derive(Debug, Clone)]
pub struct Options {
    /// Only these paths of the snapshot (absolute, as backed up); all when empty.
    pub include: Vec<PathBuf>,
    /// Devices, FIFOs, setuid/setgid bits and file capabilities as stored (`false`:
    /// `--no-special` leaves them out).
    pub special: bool,
    /// `--include` / `--exclude` patterns.
    pub select: Select,
    /// What to do with entries already there.
    pub overwrite: Overwrite,
    /// Remove what the target holds and the snapshot does not, in the directories restored
    /// whole (with include patterns or paths, only within what they select).
    pub delete: bool,
    /// Every entry's owner and group, in place of the snapshot's (set only on a root
    /// restore). `pg restore` gives a data directory's entries to the cluster's owner: a
    /// forged snapshot cannot hand `pg_hba.conf` to another user of the host.
    pub owner: Option<(u32, u32)>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            include: Vec::new(),
            special: true,
            select: Select::default(),
            overwrite: Overwrite::Always,
            delete: false,
            owner: None,
        }
    }
}

struct Item {
    /// The entry's name in its directory, as checked by [`walk`]. Its path is not kept
    /// ([`rel`] rebuilds it for messages): 100k paths cost more than their names.
    name: Box<[u8]>,
    /// The directory's item; `None`: the target itself. (u32: 100k items cost less.)
    parent: Option<u32>,
    node: Entry,
}

impl Item {
    /// The entry's name in its directory, as checked by [`walk`].
    fn name(&self) -> &[u8] {
        &self.name
    }
}

/// Item `i`'s path below the target, from its parents' names.
fn rel(items: &[Item], i: usize) -> PathBuf {
    let mut names = Vec::new();
    let mut at = Some(i as u32);
    while let Some(j) = at {
        let it = &items[j as usize];
        names.push(it.name());
        at = it.parent;
    }
    names
        .iter()
        .rev()
        .map(|n| std::ffi::OsStr::from_bytes(n))
        .collect()
}

/// The most entries a restore's walk holds ([`crate::limits::walk_entries`]);
/// `FERRY_RESTORE_MAX_ENTRIES` lowers it for tests.
fn max_entries() -> u64 {
    std::env::var("FERRY_RESTORE_MAX_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(crate::limits::walk_entries)
}

/// What [`walk`] found.
struct Walked {
    items: Vec<Item>,
    /// Entries refused for their names (with their subtrees), as errors.
    refused: Vec<String>,
    /// Per item: selected whole (not only a parent of something selected).
    whole: Vec<bool>,
    /// With `--delete`: the names each directory holds in the snapshot (by its path below
    /// the target; the target itself is ""), excluded ones included.
    known: HashMap<PathBuf, HashSet<Vec<u8>>>,
}

/// Every entry of the snapshot under `include` (all when empty) that `select` selects, and
/// the directories above them, parents before children.
async fn walk(
    repo: &Repo, index: &Index, trees: &mut crate::blob::Trees, root: Id, include: &[PathBuf],
    select: &Select, delete: bool,
) -> Result<Walked> {
    let wanted = |rel: &Path| {
        include.is_empty()
            || include
                .iter()
                .any(|inc| rel.starts_with(inc) || inc.starts_with(rel))
    };
    let limit = max_entries();
    let mut items = Vec::new();
    let mut whole = Vec::new();
    let mut known: HashMap<PathBuf, HashSet<Vec<u8>>> = HashMap::new();
    let mut refused = Vec::new();
    // (path, parent item, tree, selected whole because an ancestor matched)
    let mut level: Vec<(PathBuf, Option<u32>, Id, bool)> =
        vec![(PathBuf::new(), None, root, !select.narrows())];
    while !level.is_empty() {
        // Preloaded trees are taken out of the cache as the walk reaches them: the cache
        // shrinks while the entries grow, instead of both holding every node at the end.
        let this: Vec<_> = std::mem::take(&mut level)
            .into_iter()
            .map(|(rel, parent, id, inc)| {
                let taken = trees.take(&id);
                (rel, parent, id, inc, taken)
            })
            .collect();
        let cache = &*trees;
        let trees: Vec<_> = futures::stream::iter(this)
            .map(|(rel, parent, id, inc, taken)| async move {
                let tree = match taken {
                    Some(t) => Ok(t),
                    None => cache.get(repo, index, &id).await,
                };
                (rel, parent, inc, tree)
            })
            .buffered(READ_AHEAD)
            .collect()
            .await;
        let mut next = Vec::new();
        // Exactly what this level adds: grown by doubling, 100k items kept a third more room
        // than they used, and briefly both the old and the new buffer.
        let adds: usize = trees
            .iter()
            .map(|t| t.3.as_ref().map_or(0, |t| t.nodes.len()))
            .sum();
        items.reserve_exact(adds);
        whole.reserve_exact(adds);
        for (rel, parent, inc, tree) in trees {
            let tree = tree?;
            if delete {
                let names = tree.nodes.iter().filter_map(|n| n.checked_name().ok());
                known.insert(rel.clone(), names.collect());
            }
            for node in tree.nodes {
                let name = match node.checked_name() {
                    Ok(n) => n,
                    Err(e) => {
                        refused.push(format!("/{}: refused: {e}", rel.join(&node.name).display()));
                        continue;
                    }
                };
                let child = rel.join(std::ffi::OsStr::from_bytes(&name));
                if !wanted(&child) {
                    continue;
                }
                let mut inc = inc;
                if select.active() {
                    let (abs, dir) = (Path::new("/").join(&child), node.kind == NodeKind::Dir);
                    if select.excluded(&abs, dir) {
                        continue;
                    }
                    inc = inc || select.included(&abs, dir);
                }
                if node.kind == NodeKind::Dir {
                    if let Some(sub) = node.subtree {
                        let me = u32::try_from(items.len())
                            .map_err(|_| Error::Invalid("more than 2^32 entries".into()))?;
                        next.push((child.clone(), Some(me), sub, inc));
                    }
                } else if !inc {
                    continue; // not selected, and no place for anything selected
                }
                if items.len() as u64 >= limit {
                    return Err(Error::Invalid(format!(
                        "the snapshot names more than {limit} entries, more than half this \
                         host's free memory holds while restoring (FERRY_RESTORE_MAX_ENTRIES \
                         raises the bound); trees that share subtrees level after level do this"
                    )));
                }
                whole.push(inc);
                items.push(Item {
                    name: name.into_boxed_slice(),
                    parent,
                    node: Entry::from(node),
                });
            }
        }
        level = next;
    }
    if select.narrows() {
        (items, whole) = keep_selected(items, whole);
    }
    Ok(Walked {
        items,
        refused,
        whole,
        known,
    })
}

/// The items selected whole and the directories above them, parents renumbered: a
/// directory that holds nothing selected is not restored.
fn keep_selected(items: Vec<Item>, whole: Vec<bool>) -> (Vec<Item>, Vec<bool>) {
    let mut keep = whole.clone();
    // Children come after their parents: one pass from the end carries "keep" upwards.
    for i in (0..items.len()).rev() {
        if let (true, Some(p)) = (keep[i], items[i].parent) {
            keep[p as usize] = true;
        }
    }
    let mut renumber = vec![0u32; items.len()];
    let (mut kept, mut kept_whole) = (Vec::new(), Vec::new());
    for (i, (mut it, w)) in items.into_iter().zip(whole).enumerate() {
        if !keep[i] {
            continue;
        }
        renumber[i] = kept.len() as u32;
        it.parent = it.parent.map(|p| renumber[p as usize]);
        kept.push(it);
        kept_whole.push(w);
    }
    (kept, kept_whole)
}

/// True when the entry already at `it`'s place stays as it is (`--overwrite`).
fn leave(dir: &Dir, it: &Item, how: Overwrite, owner: bool, special: bool, blobs: &Blobs) -> bool {
    let Ok(Some(st)) = dir.lstat(it.name()) else {
        return false;
    };
    let n = &it.node;
    let same_file = || {
        let m = meta(n, special);
        n.kind == NodeKind::File
            && st.st_mode & libc::S_IFMT == libc::S_IFREG
            && st.st_size as u64 == n.size
            && st.st_mode & 0o7777 == m.mode & 0o7777
            && (!owner || (st.st_uid == n.uid && st.st_gid == n.gid))
    };
    match how {
        Overwrite::Always => false,
        Overwrite::Never => true,
        Overwrite::IfChanged => {
            same_file() && st.st_mtime * 1_000_000_000 + st.st_mtime_nsec == n.mtime
        }
        Overwrite::IfDifferent => same_file() && same_content(dir, it, blobs),
    }
}

/// What checking a file's content against the snapshot needs.
struct Blobs<'a> {
    key: &'a crate::crypto::MasterKey,
    index: &'a Index,
}

/// Whether the regular file at `it`'s place holds the snapshot's content: each blob's
/// plaintext length read in turn hashes to that blob's id. A read error counts as different.
fn same_content(dir: &Dir, it: &Item, blobs: &Blobs) -> bool {
    use std::io::Read;
    let Ok(Some((file, _))) = dir.open_file(it.name()) else {
        return false;
    };
    let mut file = std::io::BufReader::with_capacity(1 << 20, file);
    let mut buf = Vec::new();
    for id in it.node.content.iter() {
        let Some(loc) = blobs.index.get(id) else {
            return false;
        };
        buf.resize(loc.plain_len as usize, 0);
        if file.read_exact(&mut buf).is_err() || blobs.key.blob_id(&buf) != *id {
            return false;
        }
    }
    // Nothing after the last blob (the size was compared, but the file may have grown).
    matches!(file.read(&mut [0u8; 1]), Ok(0))
}

/// `--delete`: in every directory restored whole (the target itself when nothing narrows
/// the restore), removes what the snapshot's tree does not name, but for what an exclude
/// pattern matches. Returns how many entries went, and what could not be removed.
fn delete_extra(
    places: &Places, items: &[Item], selected: &[bool], known: &HashMap<PathBuf, HashSet<Vec<u8>>>,
    include: &[PathBuf], select: &Select,
) -> (u64, Vec<String>) {
    let within = |rel: &Path| include.is_empty() || include.iter().any(|i| rel.starts_with(i));
    let mut dirs: Vec<(&Dir, PathBuf)> = Vec::new();
    if include.is_empty() && !select.narrows() {
        dirs.push((&places.root, PathBuf::new()));
    }
    for (i, d) in places.dirs.iter().enumerate() {
        if let (Some(d), true) = (d, selected[i]) {
            let rel = rel(items, i);
            if within(&rel) {
                dirs.push((d, rel));
            }
        }
    }
    let (mut deleted, mut errors) = (0, Vec::new());
    for (dir, rel) in dirs {
        let Some(names) = known.get(&rel) else {
            continue;
        };
        let entries = match dir.entries() {
            Ok(e) => e,
            Err(e) => {
                errors.push(format!("/{}: --delete: {e}", rel.display()));
                continue;
            }
        };
        for name in entries.into_iter().filter(|n| !names.contains(n)) {
            let path = rel.join(std::ffi::OsStr::from_bytes(&name));
            // The target's entry is not looked at: left alone when excluded either way.
            let abs = Path::new("/").join(&path);
            if select.excluded(&abs, true) || select.excluded(&abs, false) {
                continue;
            }
            match dir.remove_tree(&name) {
                Ok(()) => deleted += 1,
                Err(e) => errors.push(format!("/{}: --delete: {e}", path.display())),
            }
        }
    }
    (deleted, errors)
}

/// A temp file: its name, and its (device, inode).
type TempName = (CString, (u64, u64));

/// The directories a restore writes into, open, and the temp files it made in them.
struct Places {
    root: Dir,
    /// A directory item's directory, once made.
    dirs: Vec<Option<Dir>>,
    /// A file of several blobs: its temp name and (device, inode), once made (boxed: most
    /// items are not such files, and an empty slot then costs a pointer).
    temps: Vec<OnceLock<Box<TempName>>>,
}

impl Places {
    /// The open directory item `i` lives in; `None` when it could not be made.
    fn parent(&self, items: &[Item], i: usize) -> Option<&Dir> {
        match items[i].parent {
            None => Some(&self.root),
            Some(p) => self.dirs[p as usize].as_ref(),
        }
    }

    /// Item `i`'s temp file: name and (device, inode).
    fn temp(&self, i: usize) -> Option<&TempName> {
        self.temps[i].get().map(|b| &**b)
    }
}

const NO_PARENT: &str = "its directory could not be restored";

/// Runs `f` on `0..n` on all cores, each core a contiguous share (mostly other directories
/// than the next core's, whose locks they would contend for); returns what failed.
async fn on_all_cores<F>(n: usize, f: F) -> Result<Vec<(usize, String)>>
where
    F: Fn(usize) -> std::result::Result<(), (usize, String)> + Send + Sync + 'static,
{
    let f = Arc::new(f);
    let cores = std::thread::available_parallelism().map_or(2, |c| c.get());
    let share = n.div_ceil(cores).max(1);
    let tasks: Vec<_> = (0..n)
        .step_by(share)
        .map(|from| {
            let f = f.clone();
            tokio::task::spawn_blocking(move || {
                (from..(from + share).min(n))
                    .filter_map(|k| f(k).err())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut failed = Vec::new();
    for t in tasks {
        failed.extend(t.await.map_err(|e| Error::Permanent(e.to_string()))?);
    }
    Ok(failed)
}

/// Where a blob's plaintext goes: (item, offset in the file).
type Targets = smallvec::SmallVec<[(usize, u64); 1]>;

/// pack -> blob -> (offset, sealed length, the files and offsets it goes to).
type ByPack = HashMap<u32, HashMap<Id, (u32, u32, Targets)>>;
/// A blob to read: offset in its pack, sealed length, id, targets.
type Want = (u64, u32, Id, Targets);

/// One coalesced read: a range of a pack and the blobs in it.
struct Read {
    pack: Id,
    start: u64,
    end: u64,
    /// Offset, sealed length, id, and where the plaintext goes: (item, file offset).
    blobs: Vec<Want>,
}

/// What writing the blobs of one read left to report.
struct Written {
    /// Files whose content is not in place, with why: damaged.
    bad: Vec<(usize, String)>,
    /// Files in place whose metadata could not be set, as reported.
    unset: Vec<String>,
}

/// Writes the blobs of reads into their files.
struct Writer {
    key: crate::crypto::MasterKey,
    items: Arc<Vec<Item>>,
    /// Files whose content is one blob: made, written and finished at once.
    whole: Vec<bool>,
    places: Arc<Places>,
    /// Whether to set owners: only root may.
    owner: bool,
    /// Whether to restore special files and bits.
    special: bool,
    progress: Arc<dyn crate::archiver::BackupProgress>,
}

impl Writer {
    /// Opens the blobs of `r`, read as `fetched`, and writes each where it goes.
    fn write(&self, r: Read, fetched: Result<bytes::Bytes>) -> Written {
        let mut w = Written {
            bad: Vec::new(),
            unset: Vec::new(),
        };
        // The blobs of one read mostly land in one file: open it once for them.
        let mut open: Option<(usize, fs::File)> = None;
        for (o, l, id, targets) in r.blobs {
            let what = format!("blob {} in pack {}", id.short(), r.pack.short());
            let sealed = match &fetched {
                Ok(b) => {
                    let s = (o - r.start) as usize;
                    Ok(&b[s..s + l as usize])
                }
                Err(e) => Err(Error::Permanent(format!("{what}: {e}"))),
            };
            let written = sealed.and_then(|sealed| {
                with_blob(&self.key, BlobKind::Data, sealed, &id, &what, |plain| {
                    let zeros = plain.iter().all(|&b| b == 0);
                    for &(item, off) in &targets {
                        self.progress.done(plain.len() as u64);
                        let it = &self.items[item];
                        let Some(dir) = self.places.parent(&self.items, item) else {
                            w.bad.push((item, NO_PARENT.into()));
                            continue;
                        };
                        if self.whole[item] {
                            match write_whole(
                                dir,
                                it.name(),
                                &it.node,
                                plain,
                                self.owner,
                                self.special,
                            ) {
                                Ok(()) => {}
                                Err(Failed::Content(e)) => w.bad.push((item, e.to_string())),
                                Err(Failed::Meta(e)) => w.unset.push(format!(
                                    "/{}: metadata: {e}",
                                    rel(&self.items, item).display()
                                )),
                            }
                            continue;
                        }
                        if zeros {
                            continue; // a hole, left by create
                        }
                        if open.as_ref().is_none_or(|(i, _)| *i != item) {
                            let Some((name, id)) = self.places.temp(item) else {
                                w.bad.push((item, "its file was not made".into()));
                                continue;
                            };
                            match dir.open_temp(name, *id) {
                                Ok(f) => open = Some((item, f)),
                                Err(e) => {
                                    open = None;
                                    w.bad.push((item, e.to_string()));
                                    continue;
                                }
                            }
                        }
                        let (_, f) = open.as_ref().expect("opened above");
                        if let Err(e) = f.write_all_at(plain, off) {
                            w.bad.push((item, e.to_string()));
                        }
                    }
                })
            });
            if let Err(e) = written {
                w.bad
                    .extend(targets.iter().map(|(i, _)| (*i, e.to_string())));
            }
        }
        w
    }
}

/// The reads that fetch every blob wanted, in pack order, neighbours within
/// [`COALESCE_GAP`] merged into one ranged read of at most `max_read` ([`MAX_READ`], or
/// [`MAX_READ_LOCAL`] from a local store).
fn coalesce(mut by_pack: ByPack, index: &Index, max_read: u64) -> Vec<Read> {
    let mut packs: Vec<u32> = by_pack.keys().copied().collect();
    packs.sort_unstable();
    let mut reads = Vec::new();
    for p in packs {
        let mut blobs: Vec<Want> = by_pack
            .remove(&p)
            .expect("listed")
            .into_iter()
            .map(|(id, (o, l, t))| (u64::from(o), l, id, t))
            .collect();
        blobs.sort_by_key(|b| b.0);
        let pack = index.pack(p);
        for b in blobs {
            let b_end = b.0 + u64::from(b.1);
            match reads.last_mut() {
                Some(Read {
                    pack: rp,
                    start,
                    end,
                    blobs: rb,
                }) if *rp == pack && b.0 <= *end + COALESCE_GAP && b_end - *start <= max_read => {
                    *end = b_end;
                    rb.push(b);
                }
                _ => reads.push(Read {
                    pack,
                    start: b.0,
                    end: b_end,
                    blobs: vec![b],
                }),
            }
        }
    }
    reads
}

/// Runs `reads`, many in flight, each written into its files by `writer` on a core of its
/// own; returns the files whose content is not in place (with why) and the metadata that
/// could not be set.
async fn fetch_and_write(
    repo: &Arc<Repo>, reads: Vec<Read>, writer: Arc<Writer>,
) -> Result<(Vec<(usize, String)>, Vec<String>)> {
    // Decrypting, decompressing and writing is CPU work: one read at a time per core. More
    // would only hold more plaintext buffers at once; reads keep arriving meanwhile.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let cpu = Arc::new(tokio::sync::Semaphore::new(cores));
    let mut running = futures::stream::iter(reads)
        .map(|r| {
            let repo = repo.clone();
            let writer = writer.clone();
            let cpu = cpu.clone();
            async move {
                let fetched = repo
                    .read_range(&repo.pack_path(&r.pack), r.start..r.end)
                    .await;
                let _core = cpu.acquire_owned().await.expect("never closed");
                tokio::task::spawn_blocking(move || writer.write(r, fetched))
                    .await
                    .map_err(|e| Error::Permanent(e.to_string()))
            }
        })
        .buffer_unordered(if repo.remote().is_local() {
            2 * cores
        } else {
            READS_AT_ONCE
        });
    let (mut bad, mut unset) = (Vec::new(), Vec::new());
    while let Some(w) = running.next().await {
        let w = w?;
        bad.extend(w.bad);
        unset.extend(w.unset);
    }
    Ok((bad, unset))
}

/// Returns to the kernel the pages of what was freed in small pieces between live ones (the
/// trees the walk took its entries from, the per-pack maps the reads were made from): glibc
/// keeps such pages until told (100k entries: 10-15 MiB of a restore's peak RSS).
fn give_back_freed() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free pages to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Restores `snap` into `target` as `opts` say, holding a shared lock (a prune must not
/// delete packs while they are read) under which the index is read. Entries the snapshot
/// names badly are refused, each reported; the rest is restored.
pub async fn restore(
    repo: Arc<Repo>, snap: &Snapshot, target: &Path, opts: &Options,
    progress: Arc<dyn crate::archiver::BackupProgress>,
) -> Result<Restored> {
    // The index is read while the lock is checked: a prune that holds it fails this restore.
    let (lock, (index, _)) = Lock::acquire_then(repo.clone(), false, repo.index()).await?;
    let index = Arc::new(index);
    let r = restore_locked(repo.clone(), index, snap, target, None, opts, progress).await;
    lock.release_after(r).await
}

/// [`restore`] into `root`, the directory `target` names, opened by the caller (who holds
/// the directory above may swap `target` for a link once it was opened, and a restore that
/// opened it again by its path would follow that link), for a caller that holds the
/// repository's lock and read `index` under it: `pg restore` restores a data directory and
/// its tablespaces from one index, under one lock, so that no prune runs between them.
pub async fn restore_into(
    repo: Arc<Repo>, index: Arc<Index>, snap: &Snapshot, root: Dir, target: &Path, opts: &Options,
    progress: Arc<dyn crate::archiver::BackupProgress>,
) -> Result<Restored> {
    restore_locked(repo, index, snap, target, Some(root), opts, progress).await
}

#[allow(clippy::too_many_arguments)]
async fn restore_locked(
    repo: Arc<Repo>, index: Arc<Index>, snap: &Snapshot, target: &Path, root: Option<Dir>,
    opts: &Options, progress: Arc<dyn crate::archiver::BackupProgress>,
) -> Result<Restored> {
    // 1. What to restore: the snapshot's trees walked into entries, bounded by memory.
    let include: Vec<PathBuf> = opts
        .include
        .iter()
        .map(|p| p.strip_prefix("/").unwrap_or(p).to_path_buf())
        .collect();
    let mut trees = crate::blob::Trees::preload(&repo, &index, crate::blob::PRELOAD_MAX).await?;
    let mut walked = walk(
        &repo,
        &index,
        &mut trees,
        snap.tree,
        &include,
        &opts.select,
        opts.delete,
    )
    .await?;
    drop(trees);
    give_back_freed();
    if let Some((uid, gid)) = opts.owner {
        for it in &mut walked.items {
            (it.node.uid, it.node.gid) = (uid, gid);
        }
    }
    if !include.is_empty() && walked.items.is_empty() {
        return Err(Error::NotFound(format!("{include:?}: not in the snapshot")));
    }
    // 2. Directories made, private; files planned blob by blob.
    ferry_fs::raise_fd_limit();
    let root = match root {
        Some(r) => r,
        None => Dir::create_root(target).map_err(|e| Error::io(target.display(), e))?,
    };
    let mut out = Restored {
        errors: std::mem::take(&mut walked.refused),
        ..Restored::default()
    };
    let (mut plan, by_pack, whole) = lay_out(walked, root, &index, repo.key(), opts, &mut out);
    // 3. Files of several blobs made on all cores, under private temp names.
    let (its, pl) = (plan.items.clone(), plan.places.clone());
    let make = std::mem::take(&mut plan.make);
    let made = on_all_cores(make.len(), move |k| {
        let i = make[k];
        let dir = pl.parent(&its, i).ok_or((i, NO_PARENT.to_string()))?;
        let t = create(dir, &its[i].node).map_err(|e| (i, e.to_string()))?;
        let _ = pl.temps[i].set(Box::new((t.name, t.id)));
        Ok(())
    })
    .await?;
    plan.damaged.extend(made);
    // 4. Blobs read pack by pack in coalesced ranges, checked, written into their files.
    let max_read = if repo.remote().is_local() {
        MAX_READ_LOCAL
    } else {
        MAX_READ
    };
    let reads = coalesce(by_pack, &index, max_read);
    give_back_freed();
    let writer = Arc::new(Writer {
        key: repo.key().clone(),
        items: plan.items.clone(),
        whole,
        places: plan.places.clone(),
        owner: plan.owner,
        special: opts.special,
        progress: progress.clone(),
    });
    let (bad, unset) = fetch_and_write(&repo, reads, writer.clone()).await?;
    for (i, why) in bad {
        plan.damaged.entry(i).or_insert(why);
    }
    out.errors.extend(unset);
    // 5. Names, links, special files, deletions; directories' metadata last.
    finish(plan, &writer.whole, opts, &include, &mut out).await?;
    Ok(out)
}

/// What laying out a restore decided, for the phases after it.
struct Plan {
    items: Arc<Vec<Item>>,
    places: Arc<Places>,
    /// Entries that cannot be restored, with why.
    damaged: HashMap<usize, String>,
    /// Files of several blobs, made before their blobs are read.
    make: Vec<usize>,
    /// Links and special files: made after all content.
    others: Vec<usize>,
    /// Entries left as they were, as the overwrite policy says.
    left: HashSet<usize>,
    /// Hard-linked files: (the first name, another name).
    hardlinks: Vec<(usize, usize)>,
    /// Entries selected whole, and every name the snapshot holds (for `--delete`).
    selected: Vec<bool>,
    known: HashMap<PathBuf, HashSet<Vec<u8>>>,
    /// Restoring as root: owners are set.
    owner: bool,
}

/// Makes the directories (private until their metadata is set last) and plans every file:
/// which blobs of which packs it is made of, or why it cannot be restored. Returns the plan,
/// the blobs wanted per pack, and which files are made whole by their one blob.
fn lay_out(
    walked: Walked, root: Dir, index: &Index, key: &crate::crypto::MasterKey, opts: &Options,
    out: &mut Restored,
) -> (Plan, ByPack, Vec<bool>) {
    let blobs = Blobs { key, index };
    let Walked {
        items,
        whole: selected,
        known,
        ..
    } = walked;
    let special = opts.special;
    // SAFETY: geteuid cannot fail.
    let owner = unsafe { libc::geteuid() } == 0;
    let mut damaged: HashMap<usize, String> = HashMap::new();
    // pack -> blob -> (offset, sealed len, targets)
    let mut by_pack: ByPack = HashMap::new();
    let mut links: HashMap<(u64, u64), usize> = HashMap::new();
    let mut hardlinks: Vec<(usize, usize)> = Vec::new();
    let mut whole = vec![false; items.len()];
    let mut places = Places {
        root,
        dirs: (0..items.len()).map(|_| None).collect(),
        temps: (0..items.len()).map(|_| OnceLock::new()).collect(),
    };

    // Directories first, in order, private until their metadata is set last; then files of
    // several blobs are made on all cores; links and special files come after all content.
    let mut make = Vec::new();
    let mut others = Vec::new();
    let mut left = HashSet::new();
    for (i, it) in items.iter().enumerate() {
        let n = &it.node;
        // Only asked when not overwriting: the default path makes no extra call per entry.
        if n.kind != NodeKind::Dir && opts.overwrite != Overwrite::Always {
            if let Some(dir) = places.parent(&items, i) {
                if leave(dir, it, opts.overwrite, owner, special, &blobs) {
                    out.skipped += 1;
                    left.insert(i);
                    continue;
                }
            }
        }
        match n.kind {
            NodeKind::Dir => {
                out.dirs += 1;
                let made = match places.parent(&items, i) {
                    Some(d) => d
                        .make_dir(it.name(), true, owner)
                        .map_err(|e| e.to_string()),
                    None => Err(NO_PARENT.to_string()),
                };
                match made {
                    Ok((d, _)) => places.dirs[i] = Some(d),
                    Err(e) => {
                        damaged.insert(i, e);
                    }
                }
            }
            NodeKind::Socket => {}
            NodeKind::File => {
                if let Some(link) = n.link() {
                    if let Some(&first) = links.get(&link) {
                        hardlinks.push((first, i));
                        continue;
                    }
                    links.insert(link, i);
                }
                out.files += 1;
                out.bytes += n.size;
                let mut off = 0u64;
                for id in n.content.iter() {
                    let Some(loc) = index.get(id) else {
                        damaged.insert(i, format!("blob {} is in no index", id.short()));
                        break;
                    };
                    let e = by_pack.entry(loc.pack).or_default();
                    e.entry(*id)
                        .or_insert((loc.offset, loc.len, Targets::new()))
                        .2
                        .push((i, off));
                    off += u64::from(loc.plain_len);
                }
                if !damaged.contains_key(&i) && off != n.size {
                    damaged.insert(
                        i,
                        format!("blobs hold {off} bytes, the snapshot says {}", n.size),
                    );
                }
                if damaged.contains_key(&i) {
                    continue;
                }
                if n.content.len() == 1 {
                    whole[i] = true; // made, written and finished with its blob
                } else {
                    make.push(i);
                }
            }
            _ => others.push(i),
        }
    }
    let plan = Plan {
        items: Arc::new(items),
        places: Arc::new(places),
        damaged,
        make,
        others,
        left,
        hardlinks,
        selected,
        known,
        owner,
    };
    (plan, by_pack, whole)
}

/// Damaged files reported and their temp files removed; the others given their metadata and
/// names on all cores; then links, special files, `--delete`, and directories' metadata,
/// deepest first.
async fn finish(
    plan: Plan, whole: &[bool], opts: &Options, include: &[PathBuf], out: &mut Restored,
) -> Result<()> {
    let (items, places, damaged, left) = (plan.items, plan.places, plan.damaged, plan.left);
    let (others, hardlinks, owner) = (plan.others, plan.hardlinks, plan.owner);
    let (selected, known) = (plan.selected, plan.known);
    let special = opts.special;
    let mut finish = Vec::new();
    for (i, it) in items.iter().enumerate() {
        if let Some(why) = damaged.get(&i) {
            if let (Some(dir), Some((name, _))) = (places.parent(&items, i), places.temp(i)) {
                let _ = dir.remove(name);
            }
            out.errors
                .push(format!("/{}: {why}", rel(&items, i).display()));
        } else if it.node.kind == NodeKind::File && !whole[i] && !left.contains(&i) {
            finish.push(i);
        }
    }
    let second: std::collections::HashSet<usize> = hardlinks.iter().map(|h| h.1).collect();
    finish.retain(|i| !second.contains(i)); // linked below, to their first name
    let (its, pl) = (items.clone(), places.clone());
    let finished = on_all_cores(finish.len(), move |k| {
        let i = finish[k];
        let it = &its[i];
        let fail = |e: std::io::Error| (i, format!("/{}: {e}", rel(&its, i).display()));
        let dir = pl
            .parent(&its, i)
            .ok_or_else(|| (i, format!("/{}: {NO_PARENT}", rel(&its, i).display())))?;
        let (name, id) = pl.temp(i).expect("made, or damaged");
        let file = dir.open_temp(name, *id).map_err(fail)?;
        dir.finish(&file, name, it.name(), &meta(&it.node, special), owner)
            .map_err(fail)?
            .map_err(|e| (i, format!("/{}: metadata: {e}", rel(&its, i).display())))
    })
    .await?;
    out.errors.extend(finished.into_iter().map(|(_, m)| m));
    let (its, pl) = (items.clone(), places.clone());
    let made = on_all_cores(others.len(), move |k| {
        let i = others[k];
        let it = &its[i];
        let dir = pl.parent(&its, i).ok_or((i, NO_PARENT.to_string()))?;
        make_other(dir, it.name(), &it.node, owner, special).map_err(|e| (i, e.to_string()))
    })
    .await?;
    for (i, e) in made {
        out.errors
            .push(format!("/{}: {e}", rel(&items, i).display()));
    }
    for (first, other) in hardlinks {
        let (a, b) = (&items[first], &items[other]);
        if damaged.contains_key(&first) {
            out.errors.push(format!(
                "/{}: hard link to a damaged file",
                rel(&items, other).display()
            ));
            continue;
        }
        let linked = match (places.parent(&items, first), places.parent(&items, other)) {
            (Some(from), Some(to)) => to.hard_link(from, a.name(), b.name()),
            _ => Err(std::io::Error::other(NO_PARENT)),
        };
        if let Err(e) = linked {
            out.errors
                .push(format!("/{}: {e}", rel(&items, other).display()));
        }
    }
    if opts.delete {
        let done = delete_extra(&places, &items, &selected, &known, include, &opts.select);
        out.deleted += done.0;
        out.errors.extend(done.1);
    }
    // Directories last, deepest first: writing into them changed their mtime, and their
    // final mode may let others in.
    for (i, it) in items.iter().enumerate().rev() {
        if let Some(d) = &places.dirs[i] {
            if let Err(e) = d.set_meta(&meta(&it.node, special), owner) {
                out.errors
                    .push(format!("/{}: metadata: {e}", rel(&items, i).display()));
            }
        }
    }
    Ok(())
}

//! `restore`: a snapshot back to a directory. Trees load in parallel; file content is fetched
//! pack by pack, each pack's needed blobs in a few coalesced ranged reads, many packs at once,
//! and written at their offsets. Files are written under temp names and renamed only when
//! every blob checked out: a damaged file is reported by name, never left half-written.

mod entry;

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferry_store::{Error, Result};
use futures::StreamExt;

use crate::blob::with_blob;
use crate::dirfd;
use crate::id::Id;
use crate::index::Index;
use crate::repo::{Repo, READ_AHEAD};
use crate::snapshot::Snapshot;
use crate::tree::{Node, NodeKind};
use entry::{apply_meta, create, temp_of, write_whole, Failed};

/// Ranged reads in flight: at 4 MiB each, 64 MiB of buffers at most; over the bench's WAN
/// (8 MB/s per connection, 100 MB/s in all) 16 fill the link. From local disk a read is
/// ready at once: two per core keep every core busy with less memory.
const READS_AT_ONCE: usize = 16;
/// Needed blobs closer than this are fetched in one read, the bytes between them discarded.
const COALESCE_GAP: u64 = 256 << 10;
/// Longest single read: long reads would leave few requests in flight on a high-latency link.
const MAX_READ: u64 = 4 << 20;

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
}

struct Item {
    rel: PathBuf,
    node: Node,
}

/// Every entry of the snapshot under `include` (all when empty), parents before children.
async fn walk(
    repo: &Repo,
    index: &Index,
    trees: &crate::blob::Trees,
    root: Id,
    include: &[PathBuf],
) -> Result<Vec<Item>> {
    let wanted = |rel: &Path| {
        include.is_empty()
            || include
                .iter()
                .any(|inc| rel.starts_with(inc) || inc.starts_with(rel))
    };
    let mut items = Vec::new();
    let mut level: Vec<(PathBuf, Id)> = vec![(PathBuf::new(), root)];
    while !level.is_empty() {
        let trees: Vec<(PathBuf, Result<crate::tree::Tree>)> = futures::stream::iter(level)
            .map(|(rel, id)| async move { (rel, trees.get(repo, index, &id).await) })
            .buffered(READ_AHEAD)
            .collect()
            .await;
        let mut next = Vec::new();
        for (rel, tree) in trees {
            for node in tree?.nodes {
                let child = rel.join(OsString::from_vec(node.name_bytes()));
                if !wanted(&child) {
                    continue;
                }
                if let Some(sub) = node.subtree {
                    next.push((child.clone(), sub));
                }
                items.push(Item { rel: child, node });
            }
        }
        level = next;
    }
    Ok(items)
}

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
type Targets = Vec<(usize, u64)>;
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
    root: PathBuf,
    /// Whether to set owners: only root may.
    owner: bool,
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
                with_blob(&self.key, sealed, &id, &what, |plain| {
                    let zeros = plain.iter().all(|&b| b == 0);
                    for &(item, off) in &targets {
                        self.progress.done(plain.len() as u64);
                        let it = &self.items[item];
                        if self.whole[item] {
                            let path = self.root.join(&it.rel);
                            match write_whole(&path, &it.node, plain, self.owner) {
                                Ok(()) => {}
                                Err(Failed::Content(e)) => w.bad.push((item, e.to_string())),
                                Err(Failed::Meta(e)) => w
                                    .unset
                                    .push(format!("/{}: metadata: {e}", it.rel.display())),
                            }
                            continue;
                        }
                        if zeros {
                            continue; // a hole, left by create
                        }
                        if open.as_ref().is_none_or(|(i, _)| *i != item) {
                            match dirfd::open_write(&temp_of(&self.root.join(&it.rel))) {
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

/// Restores `snap` (the parts under `include`, absolute paths as backed up) into `target`.
pub async fn restore(
    repo: Arc<Repo>,
    index: Arc<Index>,
    snap: &Snapshot,
    target: &Path,
    include: &[PathBuf],
    progress: Arc<dyn crate::archiver::BackupProgress>,
) -> Result<Restored> {
    let include: Vec<PathBuf> = include
        .iter()
        .map(|p| p.strip_prefix("/").unwrap_or(p).to_path_buf())
        .collect();
    let trees = crate::blob::Trees::preload(&repo, &index, crate::blob::PRELOAD_MAX).await?;
    let items = walk(&repo, &index, &trees, snap.tree, &include).await?;
    drop(trees);
    if !include.is_empty() && items.is_empty() {
        return Err(Error::NotFound(format!("{include:?}: not in the snapshot")));
    }
    fs::create_dir_all(target).map_err(|e| Error::io(target.display(), e))?;
    dirfd::forget();
    let mut out = Restored::default();
    let mut damaged: HashMap<usize, String> = HashMap::new();
    // pack -> blob -> (offset, sealed len, targets)
    let mut by_pack: HashMap<u32, HashMap<Id, (u32, u32, Targets)>> = HashMap::new();
    let mut links: HashMap<(u64, u64), usize> = HashMap::new();
    let mut hardlinks: Vec<(usize, usize)> = Vec::new();
    let mut whole = vec![false; items.len()];

    // Directories first, in order; everything else is made afterwards on all cores.
    let mut make = Vec::new();
    for (i, it) in items.iter().enumerate() {
        let n = &it.node;
        match n.kind {
            NodeKind::Dir => {
                out.dirs += 1;
                let path = target.join(&it.rel);
                if let Err(e) = fs::create_dir_all(&path) {
                    damaged.insert(i, e.to_string());
                }
            }
            NodeKind::Socket => {}
            NodeKind::File => {
                if n.nlink > 1 {
                    if let Some(&first) = links.get(&(n.dev, n.inode)) {
                        hardlinks.push((first, i));
                        continue;
                    }
                    links.insert((n.dev, n.inode), i);
                }
                out.files += 1;
                out.bytes += n.size;
                let mut off = 0u64;
                for id in &n.content {
                    let Some(loc) = index.get(id) else {
                        damaged.insert(i, format!("blob {} is in no index", id.short()));
                        break;
                    };
                    let e = by_pack.entry(loc.pack).or_default();
                    e.entry(*id)
                        .or_insert((loc.offset, loc.len, Vec::new()))
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
                if n.content.len() == 1 && !damaged.contains_key(&i) {
                    whole[i] = true; // made, written and finished with its blob
                } else {
                    make.push(i);
                }
            }
            _ => make.push(i),
        }
    }
    let items = Arc::new(items);
    let (its, root) = (items.clone(), target.to_path_buf());
    let made = on_all_cores(make.len(), move |k| {
        let it = &its[make[k]];
        create(&root.join(&it.rel), &it.node).map_err(|e| (make[k], e.to_string()))
    })
    .await?;
    damaged.extend(made);

    // Reads in pack order, each at most a few MiB, many in flight.
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
                }) if *rp == pack && b.0 <= *end + COALESCE_GAP && b_end - *start <= MAX_READ => {
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
    let writer = Arc::new(Writer {
        key: repo.key().clone(),
        items: items.clone(),
        whole,
        root: target.to_path_buf(),
        // SAFETY: geteuid cannot fail.
        owner: unsafe { libc::geteuid() } == 0,
        progress: progress.clone(),
    });
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
        .buffer_unordered(if repo.store().is_local() {
            2 * cores
        } else {
            READS_AT_ONCE
        });
    let mut unset = Vec::new();
    while let Some(w) = running.next().await {
        let w = w?;
        for (i, why) in w.bad {
            damaged.entry(i).or_insert(why);
        }
        unset.extend(w.unset);
    }
    drop(running);
    let whole = &writer.whole;
    out.errors.extend(unset);

    // Damaged files are reported; the others get their names and metadata, on all cores.
    let mut finish = Vec::new();
    for (i, it) in items.iter().enumerate() {
        if let Some(why) = damaged.get(&i) {
            let _ = fs::remove_file(temp_of(&target.join(&it.rel)));
            out.errors.push(format!("/{}: {why}", it.rel.display()));
        } else if !matches!(it.node.kind, NodeKind::Dir | NodeKind::Socket) && !whole[i] {
            finish.push(i);
        }
    }
    let second: std::collections::HashSet<usize> = hardlinks.iter().map(|h| h.1).collect();
    finish.retain(|i| !second.contains(i)); // linked below, to their first name
    let (its, root) = (items.clone(), target.to_path_buf());
    let finished = on_all_cores(finish.len(), move |k| {
        let it = &its[finish[k]];
        let path = root.join(&it.rel);
        let rel = it.rel.display();
        if it.node.kind == NodeKind::File {
            dirfd::rename_within(&temp_of(&path), &path)
                .map_err(|e| (finish[k], format!("/{rel}: {e}")))?;
        }
        apply_meta(&path, &it.node).map_err(|e| (finish[k], format!("/{rel}: metadata: {e}")))
    })
    .await?;
    out.errors.extend(finished.into_iter().map(|(_, m)| m));
    for (first, other) in hardlinks {
        let a = target.join(&items[first].rel);
        let b = target.join(&items[other].rel);
        if damaged.contains_key(&first) {
            out.errors.push(format!(
                "/{}: hard link to a damaged file",
                items[other].rel.display()
            ));
            continue;
        }
        let _ = fs::remove_file(&b);
        if let Err(e) = fs::hard_link(&a, &b) {
            out.errors
                .push(format!("/{}: {e}", items[other].rel.display()));
        }
    }
    // Directories last, deepest first: writing into them changed their mtime.
    for it in items
        .iter()
        .rev()
        .filter(|it| it.node.kind == NodeKind::Dir)
    {
        if let Err(e) = apply_meta(&target.join(&it.rel), &it.node) {
            out.errors
                .push(format!("/{}: metadata: {e}", it.rel.display()));
        }
    }
    Ok(out)
}

//! Mending a damaged repository.
//!
//! `repair index`: the index rebuilt from the packs' own headers, for a repository whose
//! index files were lost or damaged. Every pack carries its blob list, sealed, at its end;
//! the index is only a faster way to find it. Order, safe against `kill -9`: the new index
//! files are written before the old ones are deleted, so at every moment each blob a
//! readable pack holds is indexed somewhere.
//!
//! `repair snapshots`: each snapshot that names lost data written again without it (run
//! after `repair index`, which makes the index say what the packs really hold). The new
//! snapshot is written before the old one is removed.

use std::sync::Arc;

use ferry_transfer::{Error, Result};
use futures::StreamExt;

use crate::crypto::Kind;
use crate::id::Id;
use crate::index;
use crate::pack::{decode_entries, Entry};
use crate::repo::{Repo, READ_AHEAD};

/// The tail read first: a pack's header is a few KiB for the blobs of 16 MiB, so one read
/// usually holds it whole.
const TAIL: u64 = 256 << 10;

/// What [`repair_index`] did.
#[derive(Debug, Default, serde::Serialize)]
pub struct IndexRepaired {
    /// Packs whose headers were read and indexed.
    pub packs: usize,
    /// Blobs they hold.
    pub blobs: usize,
    /// Index files written.
    pub written: usize,
    /// Old index files deleted.
    pub deleted: usize,
    /// Packs whose header could not be read or authenticated: their blobs are lost.
    pub damaged: Vec<String>,
}

/// Rebuilds `repo`'s index from every pack's header, under an exclusive lock.
pub async fn repair_index(repo: Arc<Repo>) -> Result<IndexRepaired> {
    crate::lock::under(&repo, true, rebuild(&repo)).await
}

async fn rebuild(repo: &Repo) -> Result<IndexRepaired> {
    let old = repo.list_ids("index").await?;
    let listing = repo.remote().list(&repo.path("data/")).await?;
    let packs: Vec<(Id, u64)> = listing
        .iter()
        .filter_map(|o| Some((Id::parse(o.key.rsplit('/').next()?)?, o.size)))
        .collect();
    let read: Vec<(Id, Result<Vec<Entry>>)> = futures::stream::iter(packs)
        .map(|(id, size)| async move { (id, header(repo, &id, size).await) })
        .buffer_unordered(READ_AHEAD)
        .collect()
        .await;
    let mut out = IndexRepaired::default();
    let mut good: Vec<(Id, Vec<Entry>)> = Vec::new();
    for (id, r) in read {
        match r {
            Ok(entries) => good.push((id, entries)),
            // Gone since the listing: nothing to index.
            Err(Error::NotFound(_)) => {}
            Err(e @ Error::Checksum(_)) => out.damaged.push(format!("pack {}: {e}", id.short())),
            // A timeout or a refusal says nothing about the pack: the old index stays, and
            // the repair must run again, rather than drop a good pack from the index.
            Err(e) => {
                return Err(Error::Transient(format!(
                    "pack {}: {e}: nothing changed, run repair index again",
                    id.short()
                )))
            }
        }
    }
    good.sort_by_key(|(id, _)| *id);
    out.packs = good.len();
    out.blobs = good.iter().map(|(_, e)| e.len()).sum();
    out.written = index::save_all(repo, good).await?;
    for id in &old {
        repo.delete_file("index", id).await?;
        out.deleted += 1;
    }
    Ok(out)
}

/// The blob list at the end of pack `id` of `size` bytes, authenticated, every entry within
/// the pack's body: a hostile header cannot point outside it.
async fn header(repo: &Repo, id: &Id, size: u64) -> Result<Vec<Entry>> {
    let what = format!("pack {}", id.short());
    let bad = |why: &str| Error::Checksum(format!("{what}: {why}"));
    if size < 4 {
        return Err(bad("too short for a header"));
    }
    let path = repo.pack_path(id);
    let start = size.saturating_sub(TAIL);
    let mut tail = repo.read_range(&path, start..size).await?.to_vec();
    let hlen = u64::from(u32::from_le_bytes(
        tail[tail.len() - 4..].try_into().expect("4 bytes"),
    ));
    if hlen + 4 > size {
        return Err(bad("header longer than the pack"));
    }
    let body_end = size - 4 - hlen;
    let mut base = start;
    if body_end < start {
        // A header larger than the tail: read it whole.
        tail = repo.read_range(&path, body_end..size).await?.to_vec();
        base = body_end;
    }
    let sealed = &tail[(body_end - base) as usize..tail.len() - 4];
    let plain = repo.key().open(Kind::PackHeader, sealed, &what)?;
    let entries = decode_entries(&plain, &what)?;
    if let Some(e) = entries
        .iter()
        .find(|e| u64::from(e.offset) + u64::from(e.len) > body_end)
    {
        return Err(bad(&format!(
            "blob {} lies beyond the pack's body",
            e.id.short()
        )));
    }
    Ok(entries)
}

/// What [`repair_snapshots`] did, or with `dry_run` would do.
#[derive(Debug, Default, serde::Serialize)]
pub struct SnapshotsRepaired {
    /// Snapshots read whole: nothing to mend.
    pub intact: usize,
    /// (old id, new id) of each snapshot written again without what it lost; the new id is
    /// absent in a dry run.
    pub repaired: Vec<(Id, Option<Id>)>,
    /// What went: each directory whose listing could not be read and each file whose data
    /// is not in the index, by snapshot and path.
    pub dropped: Vec<String>,
    /// The originals were removed (`--forget`).
    pub forgot: bool,
    /// Nothing was written.
    pub dry_run: bool,
}

/// How [`repair_snapshots`] runs.
#[derive(Debug, Clone, Default)]
pub struct RepairOptions {
    /// The snapshots to look at.
    pub filter: crate::snapshot::Filter,
    /// Remove each original once its repaired copy is written.
    pub forget: bool,
    /// Say what would go; write nothing.
    pub dry_run: bool,
}

/// Writes again every snapshot `o.filter` chooses that names data the repository lacks,
/// without it: unreadable directory listings and files with unindexed data are dropped,
/// the rest kept, the snapshot's time, host, paths and counts kept, a "repaired" tag added.
/// Under an exclusive lock (with `forget` it removes snapshots, as forget does).
pub async fn repair_snapshots(repo: Arc<Repo>, o: &RepairOptions) -> Result<SnapshotsRepaired> {
    match o.dry_run {
        true => mend_all(&repo, o).await,
        false => crate::lock::under(&repo, true, mend_all(&repo, o)).await,
    }
}

async fn mend_all(repo: &Arc<Repo>, o: &RepairOptions) -> Result<SnapshotsRepaired> {
    let (index, _) = repo.index().await?;
    let index = Arc::new(index);
    let snaps = repo.snapshots_matching(&o.filter).await?;
    let arch = crate::archiver::Archiver::new(
        repo.clone(),
        index.clone(),
        crate::blob::Trees::default(),
        Arc::new(crate::archiver::Quiet),
    );
    let mut out = SnapshotsRepaired {
        dry_run: o.dry_run,
        forgot: o.forget && !o.dry_run,
        ..Default::default()
    };
    let mut mender = Mender {
        repo,
        index: &index,
        arch: &arch,
        dry_run: o.dry_run,
        done: std::collections::HashMap::new(),
    };
    for (id, snap) in snaps {
        let mut dropped = Vec::new();
        let root = mender.mend(snap.tree, "".into(), &mut dropped).await?;
        if dropped.is_empty() && root == Some(snap.tree) {
            out.intact += 1;
            continue;
        }
        out.dropped.extend(
            dropped
                .into_iter()
                .map(|d| format!("snapshot {}: {d}", id.short())),
        );
        if o.dry_run {
            out.repaired.push((id, None));
            continue;
        }
        let root = match root {
            Some(r) => r,
            // The root listing itself is gone: an empty snapshot says so better than none.
            None => arch.save_tree(Vec::new()).await?,
        };
        let mut tags = snap.tags.clone();
        if !tags.iter().any(|t| t == "repaired") {
            tags.push("repaired".into());
        }
        let new = crate::Snapshot {
            tree: root,
            tags,
            ..snap
        };
        let new_id = arch.commit_snapshot(&new).await?;
        if o.forget {
            repo.delete_file("snapshots", &id).await?;
        }
        out.repaired.push((id, Some(new_id)));
    }
    Ok(out)
}

/// Rebuilds trees without what cannot be read, each distinct tree once.
struct Mender<'a> {
    repo: &'a Repo,
    index: &'a crate::index::Index,
    arch: &'a Arc<crate::archiver::Archiver>,
    dry_run: bool,
    /// Tree id -> its mended id (None: unreadable), and what went below it.
    done: std::collections::HashMap<Id, (Option<Id>, Vec<String>)>,
}

impl Mender<'_> {
    /// The id of tree `id` (at `path`) without what is lost, or None when its listing cannot
    /// be read; what went is added to `dropped`.
    fn mend<'s>(
        &'s mut self, id: Id, path: String, dropped: &'s mut Vec<String>,
    ) -> futures::future::BoxFuture<'s, Result<Option<Id>>> {
        use futures::FutureExt;
        async move {
            if let Some((new, below)) = self.done.get(&id) {
                dropped.extend(below.iter().map(|b| format!("{path}{b}")));
                return Ok(*new);
            }
            let mut below = Vec::new();
            let new = match crate::load_tree(self.repo, self.index, &id).await {
                Err(e @ (Error::Checksum(_) | Error::NotFound(_))) => {
                    below.push(format!("/: listing unreadable ({e})"));
                    None
                }
                // Not damage: a listing that could not be read now is not dropped for good.
                Err(e) => return Err(e),
                Ok(tree) => Some(self.mend_tree(id, tree, &mut below).await?),
            };
            dropped.extend(below.iter().map(|b| format!("{path}{b}")));
            self.done.insert(id, (new, below));
            Ok(new)
        }
        .boxed()
    }

    /// `tree` (whose id is `id`) without what is lost below it; a write failure ends the
    /// repair.
    async fn mend_tree(
        &mut self, id: Id, tree: crate::tree::Tree, below: &mut Vec<String>,
    ) -> Result<Id> {
        let mut nodes = Vec::with_capacity(tree.nodes.len());
        let mut changed = false;
        for mut n in tree.nodes {
            let name = String::from_utf8_lossy(&n.name_bytes()).into_owned();
            if let Some(sub) = n.subtree {
                let mut lost = Vec::new();
                let new = self.mend(sub, format!("/{name}"), &mut lost).await?;
                below.extend(lost);
                match new {
                    Some(s) => {
                        changed |= s != sub;
                        n.subtree = Some(s);
                    }
                    None => {
                        changed = true;
                        continue;
                    }
                }
            } else if let Some(b) = n.content.iter().find(|b| !self.index.has(b)) {
                below.push(format!(
                    "/{name}: data blob {} is not in the index",
                    b.short()
                ));
                changed = true;
                continue;
            }
            nodes.push(n);
        }
        if !changed || self.dry_run {
            return Ok(id);
        }
        self.arch.save_tree(nodes).await
    }
}

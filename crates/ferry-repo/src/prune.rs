//! `prune`: delete what no snapshot uses. Packs holding only unused blobs are deleted; packs
//! mostly unused are rewritten with their used blobs (copied sealed, never decrypted); packs
//! in no index (an interrupted backup's) are deleted.
//!
//! Order, safe against `kill -9` at any point: new packs, then the new index files, then the
//! old index files are deleted, then the packs. Until the last step every snapshot's blobs
//! are reachable through some index; afterwards leftovers are only unreferenced packs.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ferry_transfer::{Error, Result};
use futures::StreamExt;

use crate::checker::{snapshots, used_blobs};
use crate::id::Id;
use crate::index;
use crate::lock::Lock;
use crate::pack::{Entry, Packer};
use crate::repo::Repo;

/// A pack is rewritten when more than this share of it is unused.
const REPACK_UNUSED: f64 = 0.2;

/// What prune did.
#[derive(Debug, Default)]
pub struct Pruned {
    /// Packs deleted (including rewritten ones).
    pub packs_deleted: usize,
    /// Packs rewritten.
    pub packs_rewritten: usize,
    /// Bytes freed: those of the packs deleted, less the used blobs rewritten into new packs.
    pub bytes_freed: u64,
    /// Blobs kept.
    pub blobs_kept: usize,
    /// Nothing was changed: the counts are what a prune would do.
    pub dry_run: bool,
    /// Packs that would go but are locked (Object Lock): kept until they may be deleted.
    pub packs_locked: usize,
    /// Their bytes.
    pub bytes_locked: u64,
    /// Why one of them is locked (`governance until ...`), for the message.
    pub locked_why: Option<String>,
}

/// Prunes `repo` under an exclusive lock. With `dry_run`, says what it would delete and
/// rewrite and changes nothing, under a shared lock (backups go on; a pack one of them is
/// writing may then be counted as deletable, which a real prune, excluding them, would not).
pub async fn prune(repo: Arc<Repo>, dry_run: bool) -> Result<Pruned> {
    let lock = Lock::acquire(repo.clone(), !dry_run).await?;
    let res = run(&repo, dry_run).await;
    lock.release_after(res).await
}

async fn run(repo: &Repo, dry_run: bool) -> Result<Pruned> {
    let (index, old_index_files, errs) = repo.load_index().await?;
    if let Some(e) = errs.first() {
        return Err(Error::Invalid(format!("damaged index, run check: {e}")));
    }
    let mut errors = Vec::new();
    let snaps = snapshots(repo, &mut errors).await?;
    let (used, problems) = used_blobs(repo, &index, &snaps).await;
    if let Some(e) = errors.first().or(problems.first()) {
        return Err(Error::Invalid(format!(
            "refusing to prune a damaged repository (run check): {e}"
        )));
    }
    let sizes = repo.stored_packs().await?;

    let mut out = Pruned::default();
    let mut keep: Vec<(Id, Vec<Entry>)> = Vec::new();
    let mut rewrite: Vec<(Id, Vec<Entry>)> = Vec::new();
    let mut delete: Vec<Id> = Vec::new();
    let mut seen: HashSet<Id> = HashSet::new();
    let packs = index.by_pack();
    let by_pack: HashMap<Id, &Vec<Entry>> = packs.iter().map(|(p, e)| (*p, e)).collect();
    for (pack, entries) in packs.iter().cloned() {
        // An index file may name a pack the store lacks (planted by whoever can add files, to
        // have the real copies of its blobs look unused): it keeps nothing, and leaves the
        // index.
        if !sizes.contains_key(&pack) {
            continue;
        }
        // A blob indexed twice is kept once.
        let (live, dead): (Vec<Entry>, Vec<Entry>) = entries
            .iter()
            .partition(|e| used.contains(&e.id) && seen.insert(e.id));
        let dead_bytes: u64 = dead.iter().map(|e| u64::from(e.len)).sum();
        let total: u64 = dead_bytes + live.iter().map(|e| u64::from(e.len)).sum::<u64>();
        if live.is_empty() {
            delete.push(pack);
        } else if dead_bytes as f64 > REPACK_UNUSED * total as f64 {
            rewrite.push((pack, live));
        } else {
            // Kept whole, so indexed whole: the index describes every byte of the pack.
            keep.push((pack, entries));
        }
    }
    if let Some(b) = used.iter().find(|b| !seen.contains(b)) {
        return Err(Error::Invalid(format!(
            "refusing to prune a damaged repository (run check): blob {} is used, and in no \
             pack the store holds",
            b.short()
        )));
    }
    let indexed: HashSet<Id> = index.packs().iter().copied().collect();
    delete.extend(sizes.keys().filter(|p| !indexed.contains(p)));

    // Object Lock: a locked pack is neither deleted nor rewritten (its bytes would stay
    // anyway); an indexed one stays indexed whole, an unindexed one waits for a later prune.
    let candidates = delete.iter().chain(rewrite.iter().map(|(p, _)| p));
    let locked = locked_packs(repo, candidates.copied().collect()).await?;
    delete.retain(|p| !locked.contains_key(p));
    rewrite.retain(|(p, _)| !locked.contains_key(p));
    // Every locked indexed pack, whether it was to be rewritten or deleted, stays indexed whole.
    let whole = locked.keys().filter(|p| indexed.contains(p));
    keep.extend(whole.map(|p| (*p, by_pack[p].clone())));
    out.packs_locked = locked.len();
    out.bytes_locked = locked
        .keys()
        .map(|p| sizes.get(p).copied().unwrap_or(0))
        .sum();
    out.locked_why = locked.into_values().min();
    // Bytes freed: the packs deleted, less the live blobs a rewrite copies into new packs
    // (so that a dry run and the prune it foretells say the same).
    let copied: u64 = rewrite
        .iter()
        .flat_map(|(_, l)| l.iter().map(|e| u64::from(e.len)))
        .sum();
    if dry_run {
        let size = |p: &Id| sizes.get(p).copied().unwrap_or(0);
        let gone = delete.iter().chain(rewrite.iter().map(|(p, _)| p));
        return Ok(Pruned {
            packs_deleted: delete.len() + rewrite.len(),
            packs_rewritten: rewrite.len(),
            bytes_freed: gone.map(size).sum::<u64>().saturating_sub(copied),
            blobs_kept: seen.len(),
            dry_run,
            ..out
        });
    }

    // Rewrite: copy the live sealed blobs into new packs.
    let mut packer = Packer::default();
    let mut new_packs: Vec<(Id, Vec<Entry>)> = Vec::new();
    for (pack, live) in &rewrite {
        let body = repo.read(&repo.pack_path(pack)).await?;
        if Id::of(&body) != *pack {
            return Err(Error::Checksum(format!(
                "pack {}: damaged, run check --read-data",
                pack.short()
            )));
        }
        for e in live {
            let s = e.offset as usize;
            // An index entry past the pack's end (planted by a password holder) is refused,
            // not a panic.
            let sealed = body.get(s..s + e.len as usize).ok_or_else(|| {
                Error::Checksum(format!(
                    "pack {}: blob {} lies past its end (run repair index)",
                    pack.short(),
                    e.id.short()
                ))
            })?;
            packer.add(e.kind, e.id, sealed, e.plain_len as usize);
            if packer.len() >= repo.config.pack_size as usize {
                new_packs.push(flush(repo, std::mem::take(&mut packer)).await?);
            }
        }
        out.packs_rewritten += 1;
        delete.push(*pack);
    }
    if !packer.is_empty() {
        new_packs.push(flush(repo, packer).await?);
    }
    keep.extend(new_packs);
    out.blobs_kept = seen.len();

    // New index, then the old one goes, then the packs.
    index::save_all(repo, keep).await?;
    // The lock, lost meanwhile, would let a backup start and reuse what goes next.
    repo.locks_held()?;
    for id in &old_index_files {
        repo.delete_file("index", id).await?;
    }
    let sizes = &sizes;
    let deleted: Vec<Result<u64>> = futures::stream::iter(delete)
        .map(|p| async move {
            repo.remote().delete(&repo.pack_path(&p)).await?;
            Ok(sizes.get(&p).copied().unwrap_or(0))
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for d in deleted {
        out.bytes_freed += d?;
        out.packs_deleted += 1;
    }
    out.bytes_freed = out.bytes_freed.saturating_sub(copied);
    Ok(out)
}

/// The packs among `packs` that may not be deleted now, with why.
async fn locked_packs(repo: &Repo, packs: Vec<Id>) -> Result<HashMap<Id, String>> {
    let asked: Vec<Result<(Id, Option<String>)>> = futures::stream::iter(packs)
        .map(|p| async move { Ok((p, repo.remote().retention(&repo.pack_path(&p)).await?)) })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut out = HashMap::new();
    for a in asked {
        if let (p, Some(why)) = a? {
            out.insert(p, why);
        }
    }
    Ok(out)
}

async fn flush(repo: &Repo, packer: Packer) -> Result<(Id, Vec<Entry>)> {
    let (id, bytes, entries) = packer.finish(repo.key());
    repo.put(&repo.pack_path(&id), bytes).await?;
    Ok((id, entries))
}

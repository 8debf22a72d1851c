//! `repair index`: the index rebuilt from the packs' own headers, for a repository whose
//! index files were lost or damaged. Every pack carries its blob list, sealed, at its end;
//! the index is only a faster way to find it.
//!
//! Order, safe against `kill -9`: the new index files are written before the old ones are
//! deleted, so at every moment each blob a readable pack holds is indexed somewhere.

use std::sync::Arc;

use ferry_transfer::{Error, Result};
use futures::StreamExt;

use crate::crypto::Kind;
use crate::id::Id;
use crate::index;
use crate::pack::{decode_entries, Entry};
use crate::repo::{Repo, READ_AHEAD};

/// Blobs per index file written.
const BLOBS_PER_INDEX: usize = 200_000;
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
            Err(e) => out.damaged.push(format!("pack {}: {e}", id.short())),
        }
    }
    good.sort_by_key(|(id, _)| *id);
    out.packs = good.len();
    out.blobs = good.iter().map(|(_, e)| e.len()).sum();
    let mut batch: Vec<(Id, Vec<Entry>)> = Vec::new();
    let mut count = 0;
    for p in good {
        count += p.1.len();
        batch.push(p);
        if count >= BLOBS_PER_INDEX {
            repo.save_file(Kind::Index, &index::encode(&batch)).await?;
            out.written += 1;
            batch.clear();
            count = 0;
        }
    }
    if !batch.is_empty() {
        repo.save_file(Kind::Index, &index::encode(&batch)).await?;
        out.written += 1;
    }
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

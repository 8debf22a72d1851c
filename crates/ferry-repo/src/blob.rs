//! Reading blobs back: decrypt, decompress, and check the id against the plaintext.

use ferry_transfer::{Error, Result};

use crate::crypto::MasterKey;
use crate::id::Id;
use crate::index::Index;
use crate::pack::BlobKind;
use crate::repo::Repo;
use crate::tree::Tree;

/// Blobs larger than this are decompressed as a stream, not into one buffer sized up front.
const BULK_MAX: u64 = 64 << 20;
/// The most a blob may decompress to. Chunks are at most 8 MiB; a tree of a directory with
/// millions of entries runs to hundreds of MiB; past 1 GiB a frame is hostile.
pub const MAX_BLOB: u64 = 1 << 30;

thread_local! {
    /// One decompression context per thread: a restore opens tens of thousands of blobs, and
    /// a fresh streaming decoder per blob costs more than decompressing a 64 KiB one.
    static UNZSTD: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Decompresses `data` into `out`, replacing what it held. zstd frames with their size in
/// the header (all that ferry writes) go straight into `out`, from the buffer pool when it is
/// too small, through this thread's context; others stream.
fn decompress_into(data: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
    decompress_capped(data, out, MAX_BLOB)
}

/// [`decompress_into`], refusing output past `limit`.
pub(crate) fn decompress_capped(data: &[u8], out: &mut Vec<u8>, limit: u64) -> std::io::Result<()> {
    out.clear();
    match zstd::zstd_safe::get_frame_content_size(data) {
        Ok(Some(n)) if n <= BULK_MAX => UNZSTD.with(|cell| {
            let mut d = cell.borrow_mut();
            if d.is_none() {
                *d = Some(zstd::bulk::Decompressor::new()?);
            }
            if out.capacity() < n as usize {
                // A pooled buffer of the frame's size: one grown from a smaller one would
                // be fresh memory.
                *out = ferry_transfer::buffer::with_capacity(n as usize);
            }
            let got = d
                .as_mut()
                .expect("set above")
                .decompress_to_buffer(data, out)?;
            if got as u64 != n {
                return Err(std::io::Error::other("frame shorter than its header says"));
            }
            Ok(())
        }),
        // No size in the header, or a large one: stream, and stop past the limit.
        _ => {
            use std::io::Read;
            zstd::stream::read::Decoder::new(data)?
                .take(limit + 1)
                .read_to_end(out)?;
            if out.len() as u64 > limit {
                out.clear();
                return Err(std::io::Error::other(format!(
                    "decompresses past {} MiB",
                    limit >> 20
                )));
            }
            Ok(())
        }
    }
}

/// A blob's plaintext from what its seal held: a flag byte (0 raw, 1 zstd) and the bytes.
/// Decompressed into `scratch`, never past [`MAX_BLOB`]: a hostile frame cannot make it
/// allocate without bound.
pub fn unpack<'a>(body: &'a [u8], scratch: &'a mut Vec<u8>, what: &str) -> Result<&'a [u8]> {
    match body.split_first() {
        Some((0, rest)) => Ok(rest),
        Some((1, rest)) => {
            decompress_into(rest, scratch)
                .map_err(|e| Error::Checksum(format!("{what}: does not decompress: {e}")))?;
            Ok(&scratch[..])
        }
        _ => Err(Error::Checksum(format!("{what}: unknown blob encoding"))),
    }
}

/// The plaintext of a sealed blob of `kind`, checked against `id`.
pub fn open_blob(
    key: &MasterKey, kind: BlobKind, sealed: &[u8], id: &Id, what: &str,
) -> Result<Vec<u8>> {
    with_blob(key, kind, sealed, id, what, <[u8]>::to_vec)
}

/// Calls `f` with the plaintext of a sealed blob of `kind`, checked against `id`. The plaintext lives
/// in reused buffers: a restore opens a blob per chunk, and fresh multi-MiB buffers cost a
/// page fault and a zeroed page per 4 KiB.
pub fn with_blob<R>(
    key: &MasterKey, kind: BlobKind, sealed: &[u8], id: &Id, what: &str, f: impl FnOnce(&[u8]) -> R,
) -> Result<R> {
    let mut body = ferry_transfer::buffer::with_capacity(sealed.len());
    let mut unpacked = Vec::new();
    let r = (|| {
        key.open_into(kind.sealed(), sealed, &mut body, what)?;
        let plain = unpack(&body, &mut unpacked, what)?;
        if key.blob_id(plain) != *id {
            return Err(Error::Checksum(format!(
                "{what}: content does not match its id"
            )));
        }
        Ok(f(plain))
    })();
    ferry_transfer::buffer::give_back(body);
    ferry_transfer::buffer::give_back(unpacked);
    r
}

/// Reads one blob.
pub async fn load_blob(repo: &Repo, index: &Index, id: &Id) -> Result<Vec<u8>> {
    let loc = index
        .get(id)
        .ok_or_else(|| Error::NotFound(format!("blob {} is in no index", id.short())))?;
    let pack = index.pack(loc.pack);
    let sealed = repo
        .read_range(
            &repo.pack_path(&pack),
            u64::from(loc.offset)..u64::from(loc.offset) + u64::from(loc.len),
        )
        .await?;
    let what = format!("blob {} in pack {}", id.short(), pack.short());
    let key = repo.key().clone();
    let (id, kind) = (*id, loc.kind);
    tokio::task::spawn_blocking(move || open_blob(&key, kind, &sealed, &id, &what))
        .await
        .map_err(|e| Error::Permanent(e.to_string()))?
}

/// Reads one tree.
pub async fn load_tree(repo: &Repo, index: &Index, id: &Id) -> Result<Tree> {
    let b = load_blob(repo, index, id).await?;
    Tree::decode(&b, &format!("tree {}", id.short()))
}

/// Trees, served from memory when they were preloaded. Listing directories one ranged read at
/// a time costs a round trip each (1000 directories at 80 ms: over a minute); reading the
/// tree packs whole, in parallel, costs a few.
#[derive(Debug, Default)]
pub struct Trees {
    cache: std::collections::HashMap<Id, std::sync::Arc<Tree>>,
}

/// Trees of at most this many entries stay cached when [`Trees::take`]n.
const KEEP_SMALL: usize = 4;

/// Trees are preloaded only while they take less than this in the store.
pub const PRELOAD_MAX: u64 = 256 << 20;

/// Decrypts and parses the trees `blobs` (id, offset, length) of a pack whose bytes from
/// `start` on are `body`, on all cores: one pack can hold every tree of a backup.
async fn decode_trees(
    repo: &Repo, pack: Id, body: Vec<u8>, start: u64, blobs: Vec<(Id, u32, u32)>,
) -> Result<Vec<(Id, Tree)>> {
    let body = std::sync::Arc::new(body);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let per_task = blobs.len().div_ceil(cores).max(1);
    let tasks: Vec<_> = blobs
        .chunks(per_task)
        .map(|part| {
            let (part, body, key) = (part.to_vec(), body.clone(), repo.key().clone());
            tokio::task::spawn_blocking(move || {
                part.into_iter()
                    .map(|(id, off, len)| {
                        let what = format!("tree {} in pack {}", id.short(), pack.short());
                        let s = (u64::from(off) - start) as usize;
                        let sealed = body
                            .get(s..s + len as usize)
                            .ok_or_else(|| Error::Checksum(format!("{what}: pack too short")))?;
                        let plain = open_blob(&key, BlobKind::Tree, sealed, &id, &what)?;
                        let t = Tree::decode(&plain, &what)?;
                        Ok((id, t))
                    })
                    .collect::<Result<Vec<_>>>()
            })
        })
        .collect();
    let mut trees = Vec::new();
    for t in tasks {
        trees.extend(t.await.map_err(|e| Error::Permanent(e.to_string()))??);
    }
    Ok(trees)
}

impl Trees {
    /// Every tree the index knows, read pack by pack; empty when they exceed `max_bytes`.
    pub async fn preload(repo: &Repo, index: &Index, max_bytes: u64) -> Result<Trees> {
        Trees::default().complete(repo, index, max_bytes).await
    }

    /// The trees of every tree pack in the repository's cache, found by the packs' own
    /// headers: no index is needed, so this runs while the index is still being listed.
    /// Only trees the index later vouches for are used (see the archiver). Nothing when the
    /// cached packs exceed `max_bytes`.
    pub async fn cached(repo: &Repo, max_bytes: u64) -> Trees {
        use futures::StreamExt;
        let Some(c) = repo.cache() else {
            return Trees::default();
        };
        if c.bytes("trees") > max_bytes {
            return Trees::default();
        }
        let loaded: Vec<Vec<(Id, Tree)>> = futures::stream::iter(c.ids("trees"))
            .map(|pack| async move {
                let body = c.get("trees", &pack)?;
                let what = format!("cached pack {}", pack.short());
                let entries = crate::pack::read_header(&body, repo.key(), &what).ok()?;
                let blobs = entries
                    .iter()
                    .filter(|e| e.kind == BlobKind::Tree)
                    .map(|e| (e.id, e.offset, e.len))
                    .collect();
                decode_trees(repo, pack, body, 0, blobs).await.ok()
            })
            .buffer_unordered(crate::repo::READ_AHEAD)
            .filter_map(|v| async move { v })
            .collect()
            .await;
        let cache = loaded
            .into_iter()
            .flatten()
            .map(|(id, t)| (id, std::sync::Arc::new(t)))
            .collect();
        Trees { cache }
    }

    /// Adds every tree the index knows and these lack, read pack by pack; adds nothing when
    /// they exceed `max_bytes`.
    pub async fn complete(mut self, repo: &Repo, index: &Index, max_bytes: u64) -> Result<Trees> {
        use futures::StreamExt;
        let mut by_pack: std::collections::HashMap<u32, Vec<(Id, u32, u32)>> = Default::default();
        let mut total = 0u64;
        let mut tree_packs = std::collections::HashSet::new();
        // Packs a prune repacked hold data beside trees: those are read by range, not whole.
        let mixed: std::collections::HashSet<u32> = index
            .iter()
            .filter(|(_, l)| l.kind != BlobKind::Tree)
            .map(|(_, l)| l.pack)
            .collect();
        for (id, loc) in index.iter() {
            if loc.kind == BlobKind::Tree {
                if !mixed.contains(&loc.pack) {
                    tree_packs.insert(index.pack(loc.pack));
                }
                if self.cache.contains_key(id) {
                    continue;
                }
                total += u64::from(loc.len);
                by_pack
                    .entry(loc.pack)
                    .or_default()
                    .push((*id, loc.offset, loc.len));
            }
        }
        if let Some(c) = repo.cache() {
            c.retain("trees", &tree_packs);
        }
        if total > max_bytes {
            return Ok(self);
        }
        let mixed = &mixed;
        let loaded: Vec<Result<Vec<(Id, Tree)>>> = futures::stream::iter(by_pack)
            .map(|(pack_no, blobs)| async move {
                let pack = index.pack(pack_no);
                let start = blobs.iter().map(|b| u64::from(b.1)).min().unwrap_or(0);
                let end = blobs
                    .iter()
                    .map(|b| u64::from(b.1) + u64::from(b.2))
                    .max()
                    .unwrap_or(0);
                let mut body = Vec::new();
                if repo.cache().is_some() && !mixed.contains(&pack_no) {
                    // Cached whole: this pack holds nothing but trees.
                    body = repo.tree_pack(&pack).await?;
                    body.truncate(end as usize);
                    return decode_trees(repo, pack, body, 0, blobs).await;
                } else if start == 0 {
                    // Whole tree packs go through the engine's parallel block reads.
                    body = repo.read(&repo.pack_path(&pack)).await?;
                    body.truncate(end as usize);
                } else {
                    body.extend_from_slice(
                        &repo.read_range(&repo.pack_path(&pack), start..end).await?,
                    );
                }
                decode_trees(repo, pack, body, start, blobs).await
            })
            .buffer_unordered(crate::repo::READ_AHEAD)
            .collect()
            .await;
        // A damaged tree pack is skipped: its trees load one by one later and report there.
        for v in loaded.into_iter().flatten() {
            self.cache
                .extend(v.into_iter().map(|(id, t)| (id, std::sync::Arc::new(t))));
        }
        Ok(self)
    }

    /// Tree `id` from the cache, for a walk that reads each tree once: a large one is taken
    /// out (the cache shrinks as the walk's entries grow), a small one stays, cloned (every
    /// empty directory shares one tree; a large subtree met again is read from the store).
    /// `None` when not cached.
    pub fn take(&mut self, id: &Id) -> Option<Tree> {
        let t = self.cache.get(id)?;
        if t.nodes.len() <= KEEP_SMALL {
            return Some((**t).clone());
        }
        let t = self.cache.remove(id)?;
        Some(std::sync::Arc::try_unwrap(t).unwrap_or_else(|t| (*t).clone()))
    }

    /// The tree `id`.
    pub async fn get(&self, repo: &Repo, index: &Index, id: &Id) -> Result<Tree> {
        match self.cache.get(id) {
            Some(t) => Ok((**t).clone()),
            None => load_tree(repo, index, id).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zstd_bomb_stops_at_the_limit() {
        // 8 MiB of zeros in frames that do not say their size: streamed, cut at 1 MiB.
        let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        enc.include_contentsize(false).unwrap();
        std::io::Write::write_all(&mut enc, &vec![0u8; 8 << 20]).unwrap();
        let frame = enc.finish().unwrap();
        let mut out = Vec::new();
        let e = decompress_capped(&frame, &mut out, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("past 1 MiB"), "{e}");
        assert!(out.is_empty());
        decompress_capped(&frame, &mut out, 8 << 20).unwrap();
        assert_eq!(out.len(), 8 << 20);
    }
}

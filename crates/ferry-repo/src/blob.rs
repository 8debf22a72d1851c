//! Reading blobs back: decrypt, decompress, and check the id against the plaintext.

use ferry_store::{Error, Result};

use crate::crypto::MasterKey;
use crate::id::Id;
use crate::index::Index;
use crate::repo::Repo;
use crate::tree::Tree;

/// Blobs larger than this are decompressed as a stream, not into one buffer sized up front.
const BULK_MAX: u64 = 64 << 20;

thread_local! {
    /// One decompression context per thread: a restore opens tens of thousands of blobs, and
    /// a fresh streaming decoder per blob costs more than decompressing a 64 KiB one.
    static UNZSTD: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// zstd frames with their size in the header (all that ferry writes) go into a buffer of
/// exactly that size through this thread's context; others stream.
fn decompress(data: &[u8]) -> std::io::Result<Vec<u8>> {
    match zstd::zstd_safe::get_frame_content_size(data) {
        Ok(Some(n)) if n <= BULK_MAX => UNZSTD.with(|cell| {
            let mut d = cell.borrow_mut();
            if d.is_none() {
                *d = Some(zstd::bulk::Decompressor::new()?);
            }
            d.as_mut().expect("set above").decompress(data, n as usize)
        }),
        _ => zstd::stream::decode_all(data),
    }
}

/// The plaintext of a sealed blob, checked against `id`.
pub fn open_blob(key: &MasterKey, sealed: &[u8], id: &Id, what: &str) -> Result<Vec<u8>> {
    let body = key.open(sealed, what)?;
    let plain = match body.split_first() {
        Some((0, rest)) => rest.to_vec(),
        Some((1, rest)) => decompress(rest)
            .map_err(|e| Error::Checksum(format!("{what}: does not decompress: {e}")))?,
        _ => return Err(Error::Checksum(format!("{what}: unknown blob encoding"))),
    };
    if key.blob_id(&plain) != *id {
        return Err(Error::Checksum(format!(
            "{what}: content does not match its id"
        )));
    }
    Ok(plain)
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
    let id = *id;
    tokio::task::spawn_blocking(move || open_blob(&key, &sealed, &id, &what))
        .await
        .map_err(|e| Error::Permanent(e.to_string()))?
}

/// Reads one tree.
pub async fn load_tree(repo: &Repo, index: &Index, id: &Id) -> Result<Tree> {
    let b = load_blob(repo, index, id).await?;
    serde_json::from_slice(&b).map_err(|e| Error::Checksum(format!("tree {}: {e}", id.short())))
}

/// Trees, served from memory when they were preloaded. Listing directories one ranged read at
/// a time costs a round trip each (1000 directories at 80 ms: over a minute); reading the
/// tree packs whole, in parallel, costs a few.
#[derive(Debug, Default)]
pub struct Trees {
    cache: std::collections::HashMap<Id, std::sync::Arc<Tree>>,
}

/// Trees are preloaded only while they take less than this in the store.
pub const PRELOAD_MAX: u64 = 256 << 20;

impl Trees {
    /// Every tree the index knows, read pack by pack; empty when they exceed `max_bytes`.
    pub async fn preload(repo: &Repo, index: &Index, max_bytes: u64) -> Result<Trees> {
        use futures::StreamExt;
        let mut by_pack: std::collections::HashMap<u32, Vec<(Id, u32, u32)>> = Default::default();
        let mut total = 0u64;
        for (id, loc) in index.iter() {
            if loc.kind == crate::pack::BlobKind::Tree {
                total += u64::from(loc.len);
                by_pack
                    .entry(loc.pack)
                    .or_default()
                    .push((*id, loc.offset, loc.len));
            }
        }
        if total > max_bytes {
            return Ok(Trees::default());
        }
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
                if start == 0 {
                    // Whole tree packs go through the engine's parallel block reads.
                    body = repo.read(&repo.pack_path(&pack)).await?;
                    body.truncate(end as usize);
                } else {
                    body.extend_from_slice(
                        &repo.read_range(&repo.pack_path(&pack), start..end).await?,
                    );
                }
                let key = repo.key().clone();
                tokio::task::spawn_blocking(move || {
                    blobs
                        .into_iter()
                        .map(|(id, off, len)| {
                            let s = (u64::from(off) - start) as usize;
                            let what = format!("tree {} in pack {}", id.short(), pack.short());
                            let plain = open_blob(&key, &body[s..s + len as usize], &id, &what)?;
                            let t: Tree = serde_json::from_slice(&plain)
                                .map_err(|e| Error::Checksum(format!("{what}: {e}")))?;
                            Ok((id, t))
                        })
                        .collect()
                })
                .await
                .map_err(|e| Error::Permanent(e.to_string()))?
            })
            .buffer_unordered(crate::repo::READ_AHEAD)
            .collect()
            .await;
        let mut cache = std::collections::HashMap::new();
        // A damaged tree pack is skipped: its trees load one by one later and report there.
        for v in loaded.into_iter().flatten() {
            cache.extend(v.into_iter().map(|(id, t)| (id, std::sync::Arc::new(t))));
        }
        Ok(Trees { cache })
    }

    /// The tree `id`.
    pub async fn get(&self, repo: &Repo, index: &Index, id: &Id) -> Result<Tree> {
        match self.cache.get(id) {
            Some(t) => Ok((**t).clone()),
            None => load_tree(repo, index, id).await,
        }
    }
}

//! Reading blobs back: decrypt, decompress, and check the id against the plaintext.

use ferry_store::{Error, Result};

use crate::crypto::MasterKey;
use crate::id::Id;
use crate::index::Index;
use crate::repo::Repo;
use crate::tree::Tree;

/// The plaintext of a sealed blob, checked against `id`.
pub fn open_blob(key: &MasterKey, sealed: &[u8], id: &Id, what: &str) -> Result<Vec<u8>> {
    let body = key.open(sealed, what)?;
    let plain = match body.split_first() {
        Some((0, rest)) => rest.to_vec(),
        Some((1, rest)) => zstd::stream::decode_all(rest)
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

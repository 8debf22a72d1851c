//! Reading a file's bytes from its blobs, with a small cache of decrypted blobs: the kernel
//! reads a file in pieces of 128 KiB, and a blob is about 1 MiB, so without one each blob
//! would be fetched and decrypted eight times.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use ferry_repo::tree::Node;
use ferry_repo::Id;
use ferry_transfer::{Error, Result};

use crate::fs::RepoFs;

/// Decrypted blobs kept at most.
const CACHE_BYTES: usize = 64 << 20;

/// The blob cache, oldest first.
#[derive(Default)]
pub(crate) struct Blobs {
    cached: Mutex<VecDeque<(Id, Arc<Vec<u8>>)>>,
}

impl Blobs {
    fn get(&self, fs: &RepoFs, id: &Id) -> Result<Arc<Vec<u8>>> {
        if let Some((_, b)) = self
            .cached
            .lock()
            .expect("cache")
            .iter()
            .find(|(i, _)| i == id)
        {
            return Ok(b.clone());
        }
        let b = Arc::new(
            fs.rt
                .block_on(ferry_repo::load_blob(&fs.repo, &fs.index, id))?,
        );
        let mut c = self.cached.lock().expect("cache");
        c.push_back((*id, b.clone()));
        let mut held: usize = c.iter().map(|(_, b)| b.len()).sum();
        while held > CACHE_BYTES && c.len() > 1 {
            held -= c.pop_front().map_or(0, |(_, b)| b.len());
        }
        Ok(b)
    }

    /// Up to `size` bytes of `node` from `offset`: fewer only at its end.
    pub(crate) fn read(
        &self, fs: &RepoFs, node: &Node, offset: u64, size: usize,
    ) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(size);
        let mut start = 0u64;
        for id in &node.content {
            let len = fs
                .index
                .get(id)
                .map(|l| u64::from(l.plain_len))
                .ok_or_else(|| Error::NotFound(format!("blob {} is in no index", id.short())))?;
            let end = start + len;
            let want = offset + out.len() as u64;
            if end > want && out.len() < size {
                let b = self.get(fs, id)?;
                // The index's length is what the offsets were counted with: a blob of
                // another length (a forged index) would put every later byte elsewhere, or
                // slice past its end.
                if b.len() as u64 != len {
                    return Err(Error::Checksum(format!(
                        "blob {} holds {} bytes, its index says {len}",
                        id.short(),
                        b.len()
                    )));
                }
                let from = (want - start) as usize;
                let take = (size - out.len()).min(b.len().saturating_sub(from));
                out.extend_from_slice(&b[from..from + take]);
            }
            if out.len() >= size {
                break;
            }
            start = end;
        }
        Ok(out)
    }
}

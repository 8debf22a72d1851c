//! Objects written as their bytes arrive, for stores where a block costs no round trip (a
//! directory): `ferry serve` receives a request's body straight into the object's temp file
//! instead of holding all of it in memory first, as restic's rest-server does, and makes it
//! appear (fsync, rename) only once the body is whole and the write's turn has come.
//!
//! Over a store with round trips the body is still held whole before it goes: there, a
//! block per arriving chunk would cost a request each, and one PUT needs its checksum before
//! its first byte.

use bytes::Bytes;
use ferry_store::{BlockId, Meta, Result, Upload};

use crate::{Remote, SharedStore};

/// An object of a local store being written (see [`Remote::stage`]). Dropped before
/// [`Staged::publish`], it is removed: nothing of it ever appears under its key.
#[derive(Debug)]
pub struct Staged {
    store: SharedStore,
    up: Option<Upload>,
    written: u64,
    blocks: Vec<BlockId>,
}

impl Remote {
    /// Opens `key` for writing as its bytes arrive, or `None` where a block costs a round
    /// trip (the caller then holds the bytes and calls [`Remote::upload_bytes`]). Nothing
    /// appears under `key` until [`Staged::publish`].
    pub async fn stage(&self, key: &str) -> Result<Option<Staged>> {
        if !self.is_local() {
            return Ok(None);
        }
        let up = self.store().start_upload(key, &Meta::new()).await?;
        Ok(Some(Staged {
            store: self.store().clone(),
            up: Some(up),
            written: 0,
            blocks: Vec::new(),
        }))
    }
}

impl Staged {
    /// Appends `data` (written to disk before this returns).
    pub async fn write(&mut self, data: Bytes) -> Result<()> {
        let up = self.up.as_ref().expect("open until published or dropped");
        let len = data.len() as u64;
        let id = self
            .store
            .put_block(up, self.blocks.len(), self.written, data)
            .await?;
        self.blocks.push(id);
        self.written += len;
        Ok(())
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.written
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.written == 0
    }

    /// Makes the object appear under its key, made of what was written: made durable first
    /// (fsync, rename, fsync of the directory), so that an acknowledged write survives a
    /// crash. Tried once: a rename that happened cannot be repeated.
    pub async fn publish(mut self) -> Result<u64> {
        let up = self.up.take().expect("open until published or dropped");
        let blocks = std::mem::take(&mut self.blocks);
        match self.store.complete_upload(&up, blocks, &Meta::new()).await {
            Ok(_) => Ok(self.written),
            Err(e) => {
                let _ = self.store.abort_upload(&up).await;
                Err(e)
            }
        }
    }

    /// Removes what was written: nothing of it appears under its key.
    pub async fn discard(mut self) {
        if let Some(up) = self.up.take() {
            let _ = self.store.abort_upload(&up).await;
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        // Dropped unpublished (its request's task cancelled): its temp file goes. (A runtime
        // shutting down leaves it behind, as a crash does; listings skip temp files.)
        if let Some(up) = self.up.take() {
            let store = self.store.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move { store.abort_upload(&up).await });
            }
        }
    }
}

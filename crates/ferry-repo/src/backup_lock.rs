//! The shared lock of a backup, taken while the backup reads the index and snapshots.
//!
//! Over a link with 80 ms round trips, taking the lock first and reading the index after
//! would put two round trips in a row before any work. Instead both start at once, and the
//! backup writes nothing (packs, index, snapshot) until the lock is held: its writes wait
//! behind [`BackupLock::gate`]. Once the lock file is written, the index is listed again; if
//! an index file the backup read is gone (a prune finished in between), the backup must run
//! again with the index read under the lock, which [`BackupLock::index_changed`] says.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ferry_transfer::{Error, Result};
use futures::FutureExt;
use tokio::task::JoinHandle;

use crate::archiver::Gate;
use crate::id::Id;
use crate::lock::Lock;
use crate::repo::Repo;

/// The lock being taken, with the index files listed once its file was written.
type Taking = JoinHandle<Result<(Lock, Option<Vec<Id>>)>>;

/// A backup's shared lock, from the moment it starts being taken to its release.
#[derive(Debug)]
pub struct BackupLock {
    repo: Arc<Repo>,
    taking: Option<Taking>,
    held: Arc<tokio::sync::Mutex<Option<Lock>>>,
    changed: Arc<AtomicBool>,
}

impl BackupLock {
    /// Starts taking the shared lock. With `speculate`, the index is read beside it and
    /// listed again once the lock file is written, alongside the look for conflicting locks.
    pub fn start(repo: &Arc<Repo>, speculate: bool) -> Self {
        let r = repo.clone();
        let taking = tokio::spawn(Lock::acquire_then(repo.clone(), false, async move {
            match speculate {
                true => r.list_ids("index").await.map(Some),
                false => Ok(None),
            }
        }));
        Self {
            repo: repo.clone(),
            taking: Some(taking),
            held: Arc::new(tokio::sync::Mutex::new(None)),
            changed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The gate a backup's writes wait behind: open once the lock is held and, when `loaded`
    /// names the index files the backup read, every one of them is still there. Called once.
    pub fn gate(&mut self, loaded: Option<Vec<Id>>) -> Gate {
        let taking = self.taking.take().expect("the gate is made once");
        let (repo, held, changed) = (self.repo.clone(), self.held.clone(), self.changed.clone());
        async move {
            let (lock, listed) = taking
                .await
                .map_err(|e| Error::Permanent(e.to_string()))??;
            *held.lock().await = Some(lock);
            tracing::debug!("lock held");
            if let Some(loaded) = loaded {
                let listed = match listed {
                    Some(ids) => ids,
                    None => repo.list_ids("index").await?,
                };
                let now: HashSet<Id> = listed.into_iter().collect();
                if !loaded.iter().all(|id| now.contains(id)) {
                    changed.store(true, Ordering::Relaxed);
                    return Err(Error::Transient(
                        "the repository's index changed while the lock was taken".into(),
                    ));
                }
                tracing::debug!("index unchanged under the lock");
            }
            Ok(())
        }
        .boxed()
        .shared()
    }

    /// Says the index must be read again under the lock: some of it could not be read while
    /// the lock was taken, and a finishing prune may have removed it.
    pub fn mark_changed(&self) {
        self.changed.store(true, Ordering::Relaxed);
    }

    /// Whether the backup must run again, with the index read under the lock.
    pub fn index_changed(&self) -> bool {
        self.changed.load(Ordering::Relaxed)
    }

    /// Releases the lock, also when the backup failed before it needed it.
    pub async fn release(self) -> Result<()> {
        if let Some(task) = self.taking {
            if let Ok(Ok((lock, _))) = task.await {
                lock.release().await?;
            }
        }
        if let Some(lock) = self.held.lock().await.take() {
            lock.release().await?;
        }
        Ok(())
    }
}

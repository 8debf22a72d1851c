//! Locks that keep `prune` from deleting what a running backup is about to reference.
//!
//! Backups take a shared lock, prune an exclusive one. Each writes its lock file, then looks
//! for conflicting ones and backs out if it finds any, so two racing processes cannot both
//! win (both may lose, and say so). A lock is refreshed every 5 minutes; one older than 30
//! minutes, or of a process of this host that is gone, belongs to a process that died and
//! is ignored. A backup killed with `kill -9` on another host thus blocks prune for at most
//! 30 minutes, and its packs are left for the next prune; [`unlock`] removes such locks.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferry_transfer::{Error, Result};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::crypto::Kind;
use crate::id::Id;
use crate::repo::Repo;
use crate::snapshot::hostname;

const REFRESH: Duration = Duration::from_secs(300);
const STALE: u64 = 1800;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct LockInfo {
    exclusive: bool,
    hostname: String,
    pid: u32,
    time: u64,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A held lock; released on [`Lock::release`] (or left to go stale if the process dies).
#[derive(Debug)]
pub struct Lock {
    repo: Arc<Repo>,
    id: Arc<Mutex<Id>>,
    refresher: JoinHandle<()>,
}

async fn others(repo: &Repo, mine: &Id) -> Result<Vec<LockInfo>> {
    use futures::StreamExt;
    let ids = repo.list_ids("locks").await?;
    let read = futures::stream::iter(ids.into_iter().filter(|id| id != mine))
        .map(|id| async move { repo.load_file(Kind::Lock, &id).await })
        .buffer_unordered(crate::repo::READ_AHEAD)
        .collect::<Vec<_>>()
        .await;
    // A lock deleted meanwhile, or unreadable, does not hold anything.
    Ok(read
        .into_iter()
        .filter_map(|b| serde_json::from_slice::<LockInfo>(&b.ok()?).ok())
        .filter(|l| stale(l).is_none())
        .collect())
}

/// Why a lock holds nothing, or None when it holds: a process of this host that is gone, or
/// no refresh for [`STALE`] seconds (a holder on another host refreshes every 5 minutes).
fn stale(l: &LockInfo) -> Option<String> {
    let age = now().saturating_sub(l.time);
    if died_here(l) {
        Some("its process is gone".into())
    } else if age >= STALE {
        Some(format!("not refreshed for {} minutes", age / 60))
    } else {
        None
    }
}

/// A lock of a process on this host that no longer runs (killed, say) holds nothing.
fn died_here(l: &LockInfo) -> bool {
    // SAFETY: signal 0 only checks whether the process exists.
    l.hostname == hostname()
        && unsafe { libc::kill(l.pid as i32, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

async fn write(repo: &Repo, exclusive: bool) -> Result<Id> {
    let info = LockInfo {
        exclusive,
        hostname: hostname(),
        pid: std::process::id(),
        time: now(),
    };
    repo.save_file(
        Kind::Lock,
        &serde_json::to_vec(&info).expect("serializable"),
    )
    .await
}

fn describe(l: &LockInfo) -> String {
    format!(
        "{} lock of {} pid {} ({}s ago)",
        if l.exclusive {
            "an exclusive"
        } else {
            "a shared"
        },
        l.hostname,
        l.pid,
        now().saturating_sub(l.time)
    )
}

/// Runs `work` holding a shared (`exclusive` false) or exclusive lock, released after
/// whatever `work` returned. The operations that read or change the repository call it
/// themselves, so that no caller has to remember to.
pub async fn under<T>(
    repo: &Arc<Repo>, exclusive: bool, work: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let lock = Lock::acquire(repo.clone(), exclusive).await?;
    let res = work.await;
    lock.release().await?;
    res
}

impl Lock {
    /// Takes a shared (backup) or exclusive (prune) lock.
    pub async fn acquire(repo: Arc<Repo>, exclusive: bool) -> Result<Lock> {
        let (lock, ()) = Lock::acquire_then(repo, exclusive, async { Ok(()) }).await?;
        Ok(lock)
    }

    /// [`Lock::acquire`], running `then` once the lock file is written, alongside the look
    /// for conflicting locks, one round trip instead of two: what `then` reads, the lock held
    /// guards from then on (a prune that began earlier is a conflict, one that begins later
    /// sees this lock).
    pub async fn acquire_then<T>(
        repo: Arc<Repo>, exclusive: bool, then: impl std::future::Future<Output = Result<T>>,
    ) -> Result<(Lock, T)> {
        let conflict = |o: &[LockInfo]| -> Option<String> {
            o.iter()
                .find(|l| exclusive || l.exclusive)
                .map(|l| format!("repository {} is locked: {}", repo.url(), describe(l)))
        };
        // Written first and checked after, in two round trips: of two racing processes,
        // at least the later one sees the other's lock.
        let id = write(&repo, exclusive).await?;
        let (found, then) = match tokio::join!(others(&repo, &id), then) {
            (Ok(found), Ok(t)) => (found, t),
            (Err(e), _) | (_, Err(e)) => {
                let _ = repo.delete_file("locks", &id).await;
                return Err(e);
            }
        };
        if let Some(msg) = conflict(&found) {
            let _ = repo.delete_file("locks", &id).await;
            return Err(Error::Denied(msg));
        }
        let id = Arc::new(Mutex::new(id));
        let (r, i) = (repo.clone(), id.clone());
        let refresher = tokio::spawn(async move {
            loop {
                tokio::time::sleep(REFRESH).await;
                if let Ok(new) = write(&r, exclusive).await {
                    let mut cur = i.lock().await;
                    let _ = r.delete_file("locks", &cur).await;
                    *cur = new;
                }
            }
        });
        Ok((
            Lock {
                repo,
                id,
                refresher,
            },
            then,
        ))
    }

    /// Removes the lock file.
    pub async fn release(self) -> Result<()> {
        self.refresher.abort();
        let id = *self.id.lock().await;
        self.repo.delete_file("locks", &id).await
    }
}

/// One lock file as `unlock` found it.
#[derive(Debug, Clone, Serialize)]
pub struct LockState {
    /// The lock file.
    pub id: Id,
    /// Held by a prune (or forget, tag, repair), not a backup.
    pub exclusive: bool,
    /// The host of the process holding it.
    pub hostname: String,
    /// That process.
    pub pid: u32,
    /// Seconds since it was written or last refreshed.
    pub age: u64,
    /// Why it holds nothing (absent: it is live).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
}

impl LockState {
    /// "a shared lock of HOST pid N (Ns ago)", as conflicts name it.
    pub fn describe(&self) -> String {
        describe(&LockInfo {
            exclusive: self.exclusive,
            hostname: self.hostname.clone(),
            pid: self.pid,
            time: now().saturating_sub(self.age),
        })
    }
}

/// What [`unlock`] did.
#[derive(Debug, Default, Serialize)]
pub struct Unlocked {
    /// Locks removed: the stale ones, or every one with `remove_all`.
    pub removed: Vec<LockState>,
    /// Live locks, left alone.
    pub kept: Vec<LockState>,
    /// Lock files that could not be read, with why: they hold nothing (no lock honours
    /// them), but only `remove_all` deletes what ferry cannot vouch for.
    pub unreadable: Vec<(Id, String)>,
    /// The unreadable ones were removed too.
    pub remove_all: bool,
}

/// Removes the locks whose holder is gone (by the rule conflicting locks are ignored by:
/// a dead process of this host, or no refresh for 30 minutes), or with `remove_all` every
/// lock, live ones too, as restic's `unlock` does. Takes no lock itself.
pub async fn unlock(repo: &Repo, remove_all: bool) -> Result<Unlocked> {
    use futures::StreamExt;
    let ids = repo.list_ids("locks").await?;
    let read: Vec<(Id, Result<Vec<u8>>)> = futures::stream::iter(ids)
        .map(|id| async move { (id, repo.load_file(Kind::Lock, &id).await) })
        .buffer_unordered(crate::repo::READ_AHEAD)
        .collect()
        .await;
    let mut out = Unlocked {
        remove_all,
        ..Default::default()
    };
    for (id, body) in read {
        let info = body.and_then(|b| {
            serde_json::from_slice::<LockInfo>(&b).map_err(|e| Error::Checksum(e.to_string()))
        });
        let state = match info {
            // Released between the listing and the read.
            Err(Error::NotFound(_)) => continue,
            Err(e) => {
                if remove_all {
                    gone(repo.delete_file("locks", &id).await)?;
                }
                out.unreadable.push((id, e.to_string()));
                continue;
            }
            Ok(l) => LockState {
                id,
                exclusive: l.exclusive,
                age: now().saturating_sub(l.time),
                stale: stale(&l),
                hostname: l.hostname,
                pid: l.pid,
            },
        };
        if remove_all || state.stale.is_some() {
            gone(repo.delete_file("locks", &id).await)?;
            out.removed.push(state);
        } else {
            out.kept.push(state);
        }
    }
    out.removed.sort_by_key(|l| (l.age, l.id));
    out.kept.sort_by_key(|l| (l.age, l.id));
    Ok(out)
}

/// A lock file already gone (its holder released it meanwhile) is as good as removed.
fn gone(r: Result<()>) -> Result<()> {
    match r {
        Err(Error::NotFound(_)) => Ok(()),
        r => r,
    }
}

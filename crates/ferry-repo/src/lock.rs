//! Locks that keep `prune` from deleting what a running backup is about to reference.
//!
//! Backups take a shared lock, prune an exclusive one. Each writes its lock file, then looks
//! for conflicting ones and backs out if it finds any, so two racing processes cannot both
//! win (both may lose, and say so). A lock is refreshed every 5 minutes; one of a process of
//! this host that is gone holds nothing. One not refreshed for 30 minutes by the reader's
//! clock may belong to a process that died elsewhere: the reader watches it for one refresh
//! interval more (its own clock may be ahead, the holder alive), and takes it as dead only if
//! its holder wrote no lock meanwhile. A backup killed with `kill -9` on another host thus
//! blocks prune for 30 to 36 minutes, and its packs are left for the next prune; [`unlock`]
//! removes such locks.
//!
//! A holder whose refresh keeps failing (it lost the store while others still reach it) has
//! lost its lock after 25 minutes without one: [`Repo`] then refuses to write an index or
//! snapshot file for it, and prune to delete, since another process may already have taken
//! the lock as dead and acted on it.

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

/// How a lock is kept: every ferry follows [`TIMING`]; a parameter so that tests can run the
/// rules in seconds ([`Lock::acquire_timed`]).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// A held lock is written again this often.
    pub refresh: Duration,
    /// A lock this old by the reader's clock may be dead: watched for `refresh` and a
    /// fifth more before it is taken as such.
    pub stale: Duration,
    /// A holder that went this long without a refresh has lost its lock.
    pub give_up: Duration,
    /// Seconds added to this host's clock in the lock files it writes: a host whose clock is
    /// off, in tests.
    pub skew: i64,
}

/// The rules every ferry follows (restic's: refresh 5 min, stale 30 min).
pub const TIMING: Timing = Timing {
    refresh: Duration::from_secs(300),
    stale: Duration::from_secs(1800),
    give_up: Duration::from_secs(1500),
    skew: 0,
};

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
    health: Arc<Health>,
}

/// When a held lock was last written, and whether it has been lost.
#[derive(Debug)]
pub(crate) struct Health {
    give_up: Duration,
    state: std::sync::Mutex<Written>,
}

#[derive(Debug)]
struct Written {
    /// By the monotonic clock, and by the wall clock (which goes on while the host sleeps).
    at: (std::time::Instant, u64),
    lost: Option<String>,
}

impl Health {
    fn new(give_up: Duration) -> Arc<Health> {
        Arc::new(Health {
            give_up,
            state: std::sync::Mutex::new(Written {
                at: (std::time::Instant::now(), now()),
                lost: None,
            }),
        })
    }

    /// The time since the last write, by whichever clock says longer.
    fn gap(w: &Written) -> Duration {
        let wall = Duration::from_secs(now().saturating_sub(w.at.1));
        w.at.0.elapsed().max(wall)
    }

    /// Records a write (`ok`) or a failed one; a gap past `give_up` loses the lock for good,
    /// even if a later write succeeds: others may have acted on it in between.
    fn note(&self, ok: bool) {
        let mut w = self.state.lock().expect("lock health");
        let gap = Self::gap(&w);
        if gap >= self.give_up && w.lost.is_none() {
            w.lost = Some(format!(
                "the repository lock could not be refreshed for {} minutes: another \
                 process may have taken it as dead (a prune may have removed what this wrote); \
                 nothing more is written, run it again",
                gap.as_secs() / 60
            ));
        }
        if ok {
            w.at = (std::time::Instant::now(), now());
        }
    }

    /// An error once the lock is lost.
    pub(crate) fn check(&self) -> Result<()> {
        self.note(false);
        match &self.state.lock().expect("lock health").lost {
            Some(why) => Err(Error::Permanent(why.clone())),
            None => Ok(()),
        }
    }
}

/// The other lock files, read, but for those `skip` names; a lock deleted meanwhile, or
/// unreadable, holds nothing. Those of a process of this host that is gone are left out.
async fn others(repo: &Repo, skip: &[Id]) -> Result<Vec<(Id, LockInfo)>> {
    use futures::StreamExt;
    let ids = repo.list_ids("locks").await?;
    let read = futures::stream::iter(ids.into_iter().filter(|id| !skip.contains(id)))
        .map(|id| async move { (id, repo.load_file(Kind::Lock, &id).await) })
        .buffer_unordered(crate::repo::READ_AHEAD)
        .collect::<Vec<_>>()
        .await;
    Ok(read
        .into_iter()
        .filter_map(|(id, b)| Some((id, serde_json::from_slice::<LockInfo>(&b.ok()?).ok()?)))
        .filter(|(_, l)| !died_here(l))
        .collect())
}

/// Why a lock holds nothing, or None when it holds: a process of this host that is gone, or
/// no refresh for `stale` (a holder refreshes every 5 minutes).
fn stale(l: &LockInfo, stale: Duration) -> Option<String> {
    let age = now().saturating_sub(l.time);
    if died_here(l) {
        Some("its process is gone".into())
    } else if age >= stale.as_secs() {
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

async fn write(repo: &Repo, exclusive: bool, skew: i64) -> Result<Id> {
    let info = LockInfo {
        exclusive,
        hostname: hostname(),
        pid: std::process::id(),
        time: now().saturating_add_signed(skew),
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
    lock.release_after(res).await
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
        Lock::acquire_timed(repo, exclusive, then, TIMING).await
    }

    /// [`Lock::acquire_then`] under the rules `t` instead of [`TIMING`].
    pub async fn acquire_timed<T>(
        repo: Arc<Repo>, exclusive: bool, then: impl std::future::Future<Output = Result<T>>,
        t: Timing,
    ) -> Result<(Lock, T)> {
        // Written first and checked after, in two round trips: of two racing processes,
        // at least the later one sees the other's lock.
        let id = write(&repo, exclusive, t.skew).await?;
        let checked = async {
            let mine = [id];
            let (found, then) = tokio::try_join!(others(&repo, &mine), then)?;
            conflicts(&repo, exclusive, &id, found, t).await?;
            Ok(then)
        };
        let then = match checked.await {
            Ok(then) => then,
            Err(e) => {
                let _ = repo.delete_file("locks", &id).await;
                return Err(e);
            }
        };
        let health = Health::new(t.give_up);
        repo.hold(health.clone());
        let id = Arc::new(Mutex::new(id));
        let refresher = tokio::spawn(refresh(
            repo.clone(),
            exclusive,
            id.clone(),
            health.clone(),
            t,
        ));
        Ok((
            Lock {
                repo,
                id,
                refresher,
                health,
            },
            then,
        ))
    }

    /// Releases the lock after work that held it, returning what the work did: its error
    /// when it failed (a failure to release is then logged, not put in its place), its
    /// result when it succeeded, also when the lock file could not be removed (the work is
    /// done; the file is stale once its holder no longer refreshes it, and is warned of).
    pub async fn release_after<T>(self, res: Result<T>) -> Result<T> {
        if let Err(e) = self.release().await {
            tracing::warn!(
                "could not remove this process's repository lock ({e}); others take it as \
                 stale once it is no longer refreshed"
            );
        }
        res
    }

    /// Removes the lock file.
    pub async fn release(self) -> Result<()> {
        self.refresher.abort();
        self.repo.unhold(&self.health);
        let id = *self.id.lock().await;
        self.repo.delete_file("locks", &id).await
    }
}

/// Writes the lock again every `t.refresh` (a minute after a failed try, until it is lost),
/// then removes the one before.
async fn refresh(
    repo: Arc<Repo>, exclusive: bool, id: Arc<Mutex<Id>>, health: Arc<Health>, t: Timing,
) {
    let mut wait = t.refresh;
    loop {
        tokio::time::sleep(wait).await;
        match write(&repo, exclusive, t.skew).await {
            Ok(new) => {
                health.note(true);
                let mut cur = id.lock().await;
                let _ = repo.delete_file("locks", &cur).await;
                *cur = new;
                wait = t.refresh;
            }
            Err(e) => {
                tracing::warn!("refreshing the repository lock: {e}");
                health.note(false);
                wait = (t.refresh / 5).min(Duration::from_secs(60));
            }
        }
    }
}

/// An error when a lock in `found` conflicts with taking one (`exclusive` or shared). One
/// that looks dead by this host's clock is watched for a refresh interval first: if its
/// holder writes a lock meanwhile it is alive, and this host's clock is ahead of its.
async fn conflicts(
    repo: &Repo, exclusive: bool, mine: &Id, found: Vec<(Id, LockInfo)>, t: Timing,
) -> Result<()> {
    let conflict = |l: &LockInfo| exclusive || l.exclusive;
    let denied = |l: &LockInfo, why: &str| {
        Error::Denied(format!(
            "repository {} is locked: {}{why}",
            repo.url(),
            describe(l)
        ))
    };
    let (old, live): (Vec<_>, Vec<_>) = found
        .into_iter()
        .filter(|(_, l)| conflict(l))
        .partition(|(_, l)| stale(l, t.stale).is_some());
    if let Some((_, l)) = live.first() {
        return Err(denied(l, ""));
    }
    if old.is_empty() {
        return Ok(());
    }
    let watch = t.refresh + t.refresh / 5;
    // Said at warn: six minutes of nothing would look like a hang.
    tracing::warn!(
        "{} not refreshed for {} minutes by this host's clock: watching it for {} s",
        describe(&old[0].1),
        t.stale.as_secs() / 60,
        watch.as_secs()
    );
    tokio::time::sleep(watch).await;
    let mut seen: Vec<Id> = old.iter().map(|(id, _)| *id).collect();
    seen.push(*mine);
    let newer = others(repo, &seen).await?;
    match newer.iter().find(|(_, l)| conflict(l)) {
        Some((_, l)) => Err(denied(
            l,
            ", refreshed while watched (this host's clock is ahead of its)",
        )),
        None => Ok(()),
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

/// Removes the locks whose holder is gone, or with `remove_all` every lock, live ones too,
/// as restic's `unlock` does. Takes no lock itself. Gone is the rule conflicting locks are
/// judged by (`t`: [`TIMING`] but in tests): a dead process of this host at once; a lock
/// not refreshed for `t.stale` by this host's clock only after watching it for a refresh
/// interval and a fifth more, in which a live holder writes a new lock (this host's clock
/// is then ahead of its, and the lock is kept).
pub async fn unlock(repo: &Repo, remove_all: bool, t: Timing) -> Result<Unlocked> {
    use futures::StreamExt;
    let ids = repo.list_ids("locks").await?;
    let read: Vec<(Id, Result<Vec<u8>>)> = futures::stream::iter(ids.clone())
        .map(|id| async move { (id, repo.load_file(Kind::Lock, &id).await) })
        .buffer_unordered(crate::repo::READ_AHEAD)
        .collect()
        .await;
    let mut out = Unlocked {
        remove_all,
        ..Default::default()
    };
    let mut watch = Vec::new();
    for (id, body) in read {
        let info = body.and_then(|b| {
            serde_json::from_slice::<LockInfo>(&b).map_err(|e| Error::Checksum(e.to_string()))
        });
        let (state, dead) = match info {
            // Released between the listing and the read.
            Err(Error::NotFound(_)) => continue,
            Err(e) => {
                if remove_all {
                    gone(repo.delete_file("locks", &id).await)?;
                }
                out.unreadable.push((id, e.to_string()));
                continue;
            }
            Ok(l) => {
                let dead = died_here(&l);
                let state = LockState {
                    id,
                    exclusive: l.exclusive,
                    age: now().saturating_sub(l.time),
                    stale: stale(&l, t.stale),
                    hostname: l.hostname,
                    pid: l.pid,
                };
                (state, dead)
            }
        };
        match (remove_all, &state.stale) {
            (false, None) => out.kept.push(state),
            // Only looks old: watched first.
            (false, Some(_)) if !dead => watch.push(state),
            _ => {
                gone(repo.delete_file("locks", &id).await)?;
                out.removed.push(state);
            }
        }
    }
    if !watch.is_empty() {
        let wait = t.refresh + t.refresh / 5;
        tracing::warn!(
            "{} locks not refreshed for {} minutes by this host's clock: watching them for {} s \
             (--remove-all removes every lock at once)",
            watch.len(),
            t.stale.as_secs() / 60,
            wait.as_secs()
        );
        tokio::time::sleep(wait).await;
        let newer = others(repo, &ids).await?;
        for state in watch {
            let refreshed = newer
                .iter()
                .find(|(_, l)| l.hostname == state.hostname && l.pid == state.pid);
            if let Some((id, l)) = refreshed {
                // Reported as it is now: the lock file its holder wrote meanwhile.
                out.kept.push(LockState {
                    id: *id,
                    stale: None,
                    age: now().saturating_sub(l.time),
                    ..state
                });
            } else {
                gone(repo.delete_file("locks", &state.id).await)?;
                out.removed.push(state);
            }
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

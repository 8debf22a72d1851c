//! The lock rules on an in-memory store, in tenths of a second instead of minutes: a lock
//! that looks dead by the reader's clock is watched before it is taken as such, and a holder
//! that cannot refresh its lock writes no index or snapshot once it has given up.

use std::sync::Arc;
use std::time::Duration;

use ferry_repo::crypto::Kind;
use ferry_repo::lock::{Lock, Timing};
use ferry_repo::Repo;
use ferry_store::memory::MemoryStore;
use ferry_transfer::{Class, Engine, EngineConfig, Result};

/// The rules, in tenths of a second.
const FAST: Timing = Timing {
    refresh: Duration::from_millis(400),
    stale: Duration::from_secs(60),
    give_up: Duration::from_millis(1500),
    skew: 0,
};

async fn repo() -> (Arc<MemoryStore>, Arc<Repo>) {
    let store = Arc::new(MemoryStore::new());
    let s: Arc<dyn ferry_store::Store> = store.clone();
    let remote = Engine::new(EngineConfig::default()).remote(s, Class::Bulk);
    let repo = Repo::init(remote, "r", b"pw", ferry_repo::repo::FORMAT)
        .await
        .unwrap();
    (store, Arc::new(repo))
}

async fn nothing() -> Result<()> {
    Ok(())
}

/// A backup's lock on a host an hour behind: every lock it writes looks an hour old. It
/// refreshes four times in the time a reader watches (whatever the load on the host that
/// runs the test, one lands inside it).
async fn backup_behind(repo: &Arc<Repo>) -> Lock {
    let behind = Timing {
        skew: -3600,
        refresh: FAST.refresh / 4,
        ..FAST
    };
    let (backup, ()) = Lock::acquire_timed(repo.clone(), false, nothing(), behind)
        .await
        .unwrap();
    backup
}

/// A lock of a process on another host, written an hour ago and never refreshed.
async fn plant_dead_lock(repo: &Repo) {
    let hour_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 3600;
    let dead = serde_json::json!({"exclusive": false, "hostname": "another-host", "pid": 1,
        "time": hour_ago});
    repo.save_file(Kind::Lock, &serde_json::to_vec(&dead).unwrap())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_cannot_refresh_writes_no_index_or_snapshot_after_giving_up() {
    let (store, repo) = repo().await;
    let (lock, ()) = Lock::acquire_timed(repo.clone(), false, nothing(), FAST)
        .await
        .unwrap();
    repo.save_file(Kind::Snapshot, b"{}").await.unwrap();
    store.refuse_puts(true);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    store.refuse_puts(false);
    let e = repo.save_file(Kind::Index, b"{}").await.unwrap_err();
    assert!(e.to_string().contains("could not be refreshed"), "{e}");
    // The store came back, and the lock is refreshed again: still lost, since another
    // process may have acted on it in between.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(repo.save_file(Kind::Snapshot, b"{}").await.is_err());
    lock.release().await.unwrap();
    // Released, it no longer counts.
    repo.save_file(Kind::Snapshot, b"{}").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_lock_of_a_host_whose_clock_is_behind_is_not_taken_as_dead() {
    let (_store, repo) = repo().await;
    let backup = backup_behind(&repo).await;
    let prune = Lock::acquire_timed(repo.clone(), true, nothing(), FAST).await;
    let e = prune.unwrap_err().to_string();
    assert!(e.contains("refreshed while watched"), "{e}");
    backup.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_nobody_refreshes_is_dead_once_watched() {
    let (_store, repo) = repo().await;
    plant_dead_lock(&repo).await;
    let (prune, ()) = Lock::acquire_timed(repo.clone(), true, nothing(), FAST)
        .await
        .unwrap();
    prune.release().await.unwrap();
    // A live lock conflicts at once, unwatched.
    let (live, ()) = Lock::acquire_timed(repo.clone(), false, nothing(), FAST)
        .await
        .unwrap();
    let e = Lock::acquire_timed(repo.clone(), true, nothing(), FAST)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("is locked"), "{e}");
    live.release().await.unwrap();
}

/// `unlock` judges by the same rule: a lock that looks an hour old by its clock is watched
/// first. The one of a live backup on a host an hour behind is refreshed meanwhile and
/// kept; the one nobody refreshes is removed; a live lock of this clock is kept unwatched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_removes_a_lock_that_looks_old_only_once_watched() {
    let (_store, repo) = repo().await;
    plant_dead_lock(&repo).await;
    let backup = backup_behind(&repo).await;
    let (now, ()) = Lock::acquire_timed(repo.clone(), false, nothing(), FAST)
        .await
        .unwrap();
    let u = ferry_repo::lock::unlock(&repo, false, FAST).await.unwrap();
    let hosts = |v: &[ferry_repo::lock::LockState]| {
        v.iter().map(|l| l.hostname.clone()).collect::<Vec<_>>()
    };
    assert_eq!(hosts(&u.removed), ["another-host"], "{u:?}");
    assert_eq!(u.kept.len(), 2, "{u:?}");
    assert!(u.kept.iter().all(|l| l.stale.is_none()), "{u:?}");
    // Both holders still hold: a prune is refused.
    let e = Lock::acquire_timed(repo.clone(), true, nothing(), FAST)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("is locked"), "{e}");
    backup.release().await.unwrap();
    now.release().await.unwrap();
}

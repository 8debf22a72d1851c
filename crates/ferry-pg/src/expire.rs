//! `ferry pg expire`: old backups out, and the WAL no kept backup needs, and nothing else.
//!
//! A kept backup needs every segment from its start on (to reach any later point). So WAL
//! older than the oldest kept backup's start segment goes; timeline histories always stay
//! (they are tiny and recovery reads them to choose a timeline). Snapshots that are not
//! PostgreSQL backups are left alone; their data stays unless prune finds it unused.

use std::sync::Arc;

use ferry_repo::{Id, Repo};
use ferry_transfer::{Error, Result};

use crate::record::{backups, PgBackup};
use crate::walview::WalView;

/// Which backups to keep; a backup is kept when any rule keeps it.
#[derive(Debug, Clone, Default)]
pub struct Keep {
    /// The newest N.
    pub last: Option<usize>,
    /// Those that ended within this many days.
    pub days: Option<u32>,
}

/// What expire removed.
#[derive(Debug, Default)]
pub struct Expired {
    /// Backups removed.
    pub backups: Vec<(Id, PgBackup)>,
    /// Backups kept.
    pub kept: usize,
    /// WAL files removed.
    pub wal_files: usize,
    /// The oldest segment kept, when a backup is kept.
    pub wal_from: Option<String>,
    /// Backups and WAL files the policy lets go that Object Lock keeps.
    pub locked: usize,
    /// Why one of them is locked (`governance until ...`).
    pub locked_why: Option<String>,
}

/// Removes the backups `keep` does not keep and the WAL older than every kept one, under an
/// exclusive lock as `forget` takes (the backups it decides on cannot change underneath: a
/// `pg backup` adding one, another expire); a dry run, which removes nothing, shares it.
/// Data is freed by a prune afterwards, under its own exclusive lock.
pub async fn expire(repo: Arc<Repo>, keep: &Keep, dry_run: bool) -> Result<Expired> {
    // Refused before the lock is taken: bad arguments say so, not "locked".
    if keep.last.is_none() && keep.days.is_none() {
        return Err(Error::Invalid(
            "say what to keep: --keep N and/or --keep-days D".into(),
        ));
    }
    if keep.last == Some(0) {
        return Err(Error::Invalid(
            "--keep 0 would remove every backup; keep at least one".into(),
        ));
    }
    ferry_repo::lock::under(&repo, !dry_run, expire_locked(&repo, keep, dry_run)).await
}

async fn expire_locked(repo: &Arc<Repo>, keep: &Keep, dry_run: bool) -> Result<Expired> {
    let repo = repo.clone();
    let snaps = repo.snapshots().await?;
    let all = backups(snaps);
    let now_us = chrono::Utc::now().timestamp_micros();
    let n = all.len();
    let (mut kept, gone): (Vec<_>, Vec<_>) =
        all.into_iter().enumerate().partition(|(i, (_, _, b))| {
            keep.last.is_some_and(|k| i + k >= n)
                || keep
                    .days
                    .is_some_and(|d| now_us - b.stop_time <= i64::from(d) * 86_400_000_000)
        });
    let mut out = Expired::default();
    for (i, (id, s, b)) in gone {
        // A locked backup stays (a delete would only hide it behind a marker), and with it
        // the WAL it needs.
        if let Some(why) = repo.file_retention("snapshots", &id).await? {
            out.locked += 1;
            out.locked_why.get_or_insert(why);
            kept.push((i, (id, s, b)));
            continue;
        }
        if !dry_run {
            repo.delete_file("snapshots", &id).await?;
        }
        out.backups.push((id, b));
    }
    out.kept = kept.len();
    let Some(oldest) = kept
        .iter()
        .map(|(_, (_, _, b))| b)
        .min_by_key(|b| b.start_lsn)
    else {
        return Ok(out);
    };
    let from = oldest.start_lsn.segno(oldest.seg_size);
    out.wal_from = Some(oldest.start_wal.clone());
    let view = WalView::load(&repo, oldest.seg_size).await?;
    for (_, key) in view.older_than(from) {
        if let Some(why) = repo.remote().retention(&key).await? {
            out.locked += 1;
            out.locked_why.get_or_insert(why);
            continue;
        }
        if !dry_run {
            match repo.remote().delete(&key).await {
                Ok(()) | Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        out.wal_files += 1;
    }
    Ok(out)
}

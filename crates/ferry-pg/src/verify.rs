//! `ferry pg verify`: every backup has all of its WAL, and its data checks out.

use std::sync::Arc;

use ferry_repo::{Id, Repo};
use ferry_transfer::Result;

use crate::record::{backups, PgBackup};
use crate::walview::WalView;

/// One backup's findings.
#[derive(Debug)]
pub struct Finding {
    /// The backup.
    pub id: Id,
    /// Its record.
    pub backup: PgBackup,
    /// Segments between its start and its consistent point that cannot be replayed.
    pub missing: Vec<String>,
    /// Segments after it, up to the newest archived, that a replay would stop at.
    pub holes: Vec<String>,
}

impl Finding {
    /// Restorable to every archived point after it.
    pub fn ok(&self) -> bool {
        self.missing.is_empty() && self.holes.is_empty()
    }
}

/// What verify found.
#[derive(Debug)]
pub struct Verified {
    /// Per backup, oldest first.
    pub backups: Vec<Finding>,
    /// The repository check's errors (packs, index, trees of every snapshot).
    pub errors: Vec<String>,
}

/// Checks every backup's WAL, then the repository (with `read_data`, every pack's bytes).
pub async fn verify(repo: Arc<Repo>, read_data: bool) -> Result<Verified> {
    ferry_repo::lock::under(&repo, false, verify_locked(repo.clone(), read_data)).await
}

async fn verify_locked(repo: Arc<Repo>, read_data: bool) -> Result<Verified> {
    let snaps = repo.snapshots().await?;
    let all = backups(snaps);
    let mut out = Verified {
        backups: Vec::new(),
        errors: Vec::new(),
    };
    let mut view: Option<WalView> = None;
    for (id, _, b) in all {
        if view.is_none() {
            view = Some(WalView::load(&repo, b.seg_size).await?);
        }
        let v = view.as_ref().expect("loaded");
        let start = b.start_lsn.segno(b.seg_size);
        let stop = b.stop_lsn.segno(b.seg_size).max(start);
        out.backups.push(Finding {
            missing: v.missing(b.timeline, start, stop),
            holes: v.holes_after(b.timeline, stop + 1),
            id,
            backup: b,
        });
    }
    let report = ferry_repo::checker::check(&repo, read_data).await?;
    out.errors = report.errors;
    Ok(out)
}

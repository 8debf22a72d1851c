//! Which backup a restore starts from: the one asked for, or the newest that ends before the
//! target. For a restore point that means finding it in the archived WAL; for a transaction,
//! asking whether it had ended when the backup stopped.

use ferry_repo::{Id, Repo, Snapshot};
use ferry_transfer::{Error, Result};
use futures::{StreamExt, TryStreamExt};

use crate::lsn::Lsn;
use crate::record::{backups, PgBackup};
use crate::restore::show_time;
use crate::target::Target;
use crate::walrecord::{RestorePoint, Scanner};
use crate::walview::{self, WalView};

/// Segments fetched at once while looking for a restore point.
const FETCH_AHEAD: usize = 4;

/// The backup to restore for `target`: `backup` (an id prefix), or the newest that reaches
/// the target.
pub async fn choose(
    repo: &Repo, target: &Target, backup: Option<&str>,
) -> Result<(Id, Snapshot, PgBackup)> {
    let all = backups(repo.snapshots().await?);
    if all.is_empty() {
        return Err(Error::NotFound(format!(
            "{} holds no PostgreSQL backup (make one with ferry pg backup)",
            repo.url()
        )));
    }
    if let Some(want) = backup {
        let hits: Vec<_> = all
            .iter()
            .filter(|(id, _, _)| id.hex().starts_with(&want.to_ascii_lowercase()))
            .collect();
        let (id, snap, b) = match hits.as_slice() {
            [one] => *one,
            [] => return Err(Error::NotFound(format!("no PostgreSQL backup {want}"))),
            _ => return Err(Error::Invalid(format!("backup id {want} is ambiguous"))),
        };
        if !target.reachable_from(b) {
            return Err(Error::Invalid(format!(
                "backup {} ends after {}: recovery cannot stop before a backup is consistent",
                id.short(),
                target.describe()
            )));
        }
        return Ok((*id, snap.clone(), b.clone()));
    }
    let pick = match target {
        Target::Name(name) => Some(before_restore_point(repo, &all, name).await?),
        _ => all.iter().rposition(|(_, _, b)| target.reachable_from(b)),
    };
    match pick {
        Some(i) => Ok(all[i].clone()),
        None => {
            let oldest = &all[0].2;
            Err(Error::Invalid(format!(
                "no backup ends before {}: the oldest ends at {} (LSN {})",
                target.describe(),
                show_time(oldest.stop_time),
                oldest.stop_lsn
            )))
        }
    }
}

/// The newest of `all` (oldest first) after whose end the archived WAL holds a restore point
/// `name`: PostgreSQL stops at the first one after the backup is consistent. The WAL is read
/// from the newest backup's end on, then back over each older backup's stretch, only as far
/// as needed.
async fn before_restore_point(
    repo: &Repo, all: &[(Id, Snapshot, PgBackup)], name: &str,
) -> Result<usize> {
    let seg_size = all[all.len() - 1].2.seg_size;
    let view = WalView::load(repo, seg_size).await?;
    let archive = walview::archive(repo);
    let mut found: Vec<RestorePoint> = Vec::new();
    let mut read = 0;
    // The first segment read for the newer backup: read again with the older one's stretch,
    // so that a record running from one into the other is found.
    let mut above: Option<u64> = None;
    for (i, (_, _, b)) in all.iter().enumerate().rev() {
        let from = Lsn(b.stop_lsn.0.saturating_sub(1)).segno(seg_size);
        let to = match above {
            Some(a) => a,
            None => match view.newest_from(b.timeline) {
                Some((_, last)) => last,
                None => break,
            },
        };
        if from <= to {
            let names = view.replay_path(b.timeline, from, to);
            read += names.len();
            tracing::info!(
                "reading {} WAL segments for restore point '{name}'",
                names.len()
            );
            let mut scanner = Scanner::default();
            let mut segs = futures::stream::iter(names.into_iter().map(|n| {
                let archive = archive.clone();
                async move {
                    let data = archive.fetch(&n).await?;
                    Ok::<_, Error>((n.segno(seg_size) * seg_size, data))
                }
            }))
            .buffered(FETCH_AHEAD);
            while let Some((start, data)) = segs.try_next().await? {
                found.extend(
                    scanner
                        .scan(&data, start)
                        .into_iter()
                        .filter(|p| p.name == name),
                );
            }
        }
        if found.iter().any(|p| p.lsn >= b.stop_lsn) {
            return Ok(i);
        }
        above = Some(from.min(to));
    }
    match found.iter().min_by_key(|p| p.lsn) {
        Some(p) => Err(Error::Invalid(format!(
            "restore point '{name}' (LSN {}, made {}) comes before the oldest backup ends \
             (LSN {}): recovery cannot stop before a backup is consistent",
            p.lsn,
            show_time(p.time),
            all[0].2.stop_lsn
        ))),
        None => Err(Error::NotFound(format!(
            "restore point '{name}' is not in the archived WAL after any backup ({read} \
             segments read)"
        ))),
    }
}

//! `ferry pg info`: what monitoring asks of a repository: its backups, the WAL archived per
//! timeline and, with a connection to the cluster, how far archiving lags behind it.

use std::sync::Arc;

use ferry_repo::{Id, Repo, Snapshot};
use ferry_transfer::{Error, Result};
use serde::Serialize;

use crate::backup::db;
use crate::conn::connect;
use crate::lsn::Lsn;
use crate::record::{backups, PgBackup};
use crate::walview::WalView;

/// The WAL archived on one timeline.
#[derive(Debug, Serialize)]
pub struct Timeline {
    /// The timeline.
    pub timeline: u32,
    /// Its oldest archived segment.
    pub first: String,
    /// Its newest archived segment.
    pub last: String,
    /// How many segments it has (fewer than `last - first + 1`: holes).
    pub segments: usize,
}

/// The cluster's side, read from the server.
#[derive(Debug, Serialize)]
pub struct Archiving {
    /// The segment PostgreSQL writes now.
    pub current: String,
    /// Completed segments not in the repository yet: 0 keeps up.
    pub lag_segments: u64,
    /// What PostgreSQL last archived (`pg_stat_archiver`), and how many seconds ago.
    pub last_archived: Option<String>,
    /// See `last_archived`.
    pub last_archived_age_s: Option<f64>,
    /// Failed archive_command runs since the statistics were reset.
    pub failed_count: i64,
    /// The last file that failed, and how many seconds ago.
    pub last_failed: Option<String>,
    /// See `last_failed`.
    pub last_failed_age_s: Option<f64>,
}

/// What `ferry pg info` shows.
#[derive(Debug)]
pub struct Info {
    /// Every backup, oldest first.
    pub backups: Vec<(Id, Snapshot, PgBackup)>,
    /// The archive, per timeline.
    pub timelines: Vec<Timeline>,
    /// With a connection: the cluster's archiving.
    pub archiving: Option<Archiving>,
}

/// Reads `repo` and, when `conninfo` is given, the cluster it reaches.
pub async fn info(repo: Arc<Repo>, conninfo: Option<&str>) -> Result<Info> {
    let all = backups(repo.snapshots().await?);
    // Segment sizes differ only between clusters initialised differently; 16 MiB otherwise.
    let seg_size = all.last().map_or(16 << 20, |(_, _, b)| b.seg_size);
    let view = WalView::load(&repo, seg_size).await?;
    let timelines = view
        .ranges()
        .into_iter()
        .map(|(timeline, first, last, segments)| Timeline {
            timeline,
            first: first.to_string(),
            last: last.to_string(),
            segments,
        })
        .collect();
    let archiving = match conninfo {
        Some(c) => Some(archiving(c, &view, seg_size).await?),
        None => None,
    };
    Ok(Info {
        backups: all,
        timelines,
        archiving,
    })
}

async fn archiving(conninfo: &str, view: &WalView, seg_size: u64) -> Result<Archiving> {
    let c = connect(conninfo).await?;
    let r = c
        .query_one(
            "SELECT pg_walfile_name(pg_current_wal_lsn()), last_archived_wal, \
             extract(epoch from now() - last_archived_time)::float8, failed_count, \
             last_failed_wal, extract(epoch from now() - last_failed_time)::float8, \
             pg_current_wal_lsn()::text FROM pg_stat_archiver",
            &[],
        )
        .await
        .map_err(db(
            "read pg_stat_archiver (a standby cannot tell its current WAL file)",
        ))?;
    // pg_walfile_name names the segment before a boundary, and right after a switch the
    // position is on one: the timeline is taken from it, the segment from the position.
    let named = ferry_wal::WalName::parse(&r.get::<_, String>(0))?;
    let lsn: Lsn = r.get::<_, String>(6).parse().map_err(Error::Permanent)?;
    let now = ferry_wal::WalName::segment(named.timeline(), lsn.segno(seg_size), seg_size);
    let current = now.to_string();
    // Completed segments after the newest archived on any timeline (segment numbers count
    // positions, which a new timeline continues).
    let lag_segments = match view.newest_from(0) {
        Some((_, newest)) => now.segno(seg_size).saturating_sub(newest + 1),
        None => now.segno(seg_size),
    };
    Ok(Archiving {
        current,
        lag_segments,
        last_archived: r.get(1),
        last_archived_age_s: r.get(2),
        failed_count: r.get(3),
        last_failed: r.get(4),
        last_failed_age_s: r.get(5),
    })
}

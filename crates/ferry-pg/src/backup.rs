//! `ferry pg backup`: a base backup through the non-exclusive backup API.
//!
//! pg_backup_start (with a fast checkpoint), the data directory read in parallel by the
//! repository's archiver, then pg_backup_stop, and a wait until the last WAL segment the
//! backup needs is in this repository's archive. The snapshot, carrying the label and the WAL
//! range, is written only then: a backup in the repository always has its WAL in the archive.
//!
//! The wait is ours, not pg_backup_stop's: PostgreSQL checks its archiver once a second, and
//! only the repository says whether the segment is stored where a restore will look.
//!
//! From a standby (files read there, so that the primary carries no read load): the same
//! calls on the standby, which PostgreSQL allows for non-exclusive backups; then the primary
//! (`primary_conninfo`) switches WAL, since a standby archives nothing and cannot switch,
//! and ferry waits for the backup's last segment from the primary's archiver.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_repo::archiver::{Archiver, BackupProgress};
use ferry_repo::{Id, Repo, Snapshot};
use ferry_transfer::{Error, Result};
use tokio_postgres::Client;

use crate::conn::{connect, pg_message};
use crate::layout::{BadPages, PgLayout};
use crate::lsn::Lsn;
use crate::record::{self, PgBackup, Tablespace};
use ferry_wal::WalName;

/// What to back up and how.
pub struct BackupOptions {
    /// libpq connection string or URL; empty: the environment's.
    pub conninfo: String,
    /// The data directory, when the server's `data_directory` is not readable as seen here.
    pub pgdata: Option<PathBuf>,
    /// Block size for relation files.
    pub block: u32,
    /// Read every file, trusting nothing from the previous backup.
    pub full: bool,
    /// When `conninfo` reaches a standby: its primary, asked to switch WAL at the end.
    pub primary_conninfo: Option<String>,
}

/// A finished backup.
pub struct Done {
    /// The snapshot's id.
    pub id: Id,
    /// The snapshot.
    pub snapshot: Snapshot,
    /// What it records for PostgreSQL.
    pub record: PgBackup,
    /// Pages whose checksum failed (with page checksums on; the backup is complete, but the
    /// cluster's files are damaged).
    pub bad_pages: BadPages,
}

pub(crate) fn db(what: &str) -> impl Fn(tokio_postgres::Error) -> Error + '_ {
    move |e| match e.code() {
        Some(c) if *c == tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE => {
            Error::Denied(format!(
                "PostgreSQL refused to {what}: {} (the role needs superuser, or EXECUTE on \
                 pg_backup_start and pg_backup_stop and membership in pg_read_all_settings)",
                pg_message(&e)
            ))
        }
        _ => Error::Permanent(format!("PostgreSQL failed to {what}: {}", pg_message(&e))),
    }
}

async fn now_us(c: &Client) -> Result<i64> {
    let r = c
        .query_one(
            "SELECT (extract(epoch from clock_timestamp()) * 1e6)::int8",
            &[],
        )
        .await
        .map_err(db("read the time"))?;
    Ok(r.get(0))
}

/// The non-exclusive backup functions of a server version: PostgreSQL 15 renamed them
/// (`pg_start_backup(label, fast, exclusive)` became `pg_backup_start(label, fast)`) and
/// dropped exclusive backups.
struct BackupApi {
    /// Starts a backup labelled `$1` with a fast checkpoint; answers the start LSN as text.
    start: &'static str,
    /// Stops it without waiting for the archiver (ferry waits on its own archive instead):
    /// the stop LSN as text, the label file, the tablespace map.
    stop: &'static str,
}

impl BackupApi {
    fn of(version: i32) -> BackupApi {
        if version >= 150000 {
            BackupApi {
                start: "SELECT pg_backup_start($1, true)::text",
                stop: "SELECT lsn::text, labelfile, spcmapfile FROM pg_backup_stop(false)",
            }
        } else {
            BackupApi {
                start: "SELECT pg_start_backup($1, true, false)::text",
                stop: "SELECT lsn::text, labelfile, spcmapfile FROM pg_stop_backup(false, false)",
            }
        }
    }
}

/// How long the backup's last segment may take to reach the archive.
const ARCHIVE_WAIT: Duration = Duration::from_secs(600);
/// How long a segment PostgreSQL reports archived may take to show in this repository
/// before its archive_command is taken to go elsewhere.
const ELSEWHERE_GRACE: Duration = Duration::from_secs(15);

/// Waits up to `timeout` until `name` is in `repo`'s WAL archive. Fails early when PostgreSQL
/// says it archived the segment and the repository still lacks it: archive_command goes
/// elsewhere.
pub(crate) async fn wait_archived(
    c: &Client, repo: &Repo, name: &str, timeout: Duration,
) -> Result<()> {
    let archive = crate::walview::archive(repo);
    let wal = ferry_wal::WalName::parse(name)?;
    let start = Instant::now();
    let mut asked = start;
    let mut archived_at: Option<Instant> = None;
    let elsewhere = |why: &str| {
        Error::Permanent(format!(
            "WAL segment {name} is not in {} ({why}): archive_command \
             must be 'ferry wal-push %p' into this repository",
            repo.url()
        ))
    };
    loop {
        match archive.peek(&wal).await {
            Ok(_) => return Ok(()),
            Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        if start.elapsed() > timeout {
            let why = format!("not archived within {}s", timeout.as_secs());
            return Err(elsewhere(&why));
        }
        if archived_at.is_none() && asked.elapsed() > Duration::from_millis(500) {
            asked = Instant::now();
            let r = c
                .query_one(
                    "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver",
                    &[],
                )
                .await
                .map_err(db("read pg_stat_archiver"))?;
            let last: String = r.get(0);
            // Segments and backup labels (`<segment>.<offset>.backup`) of the same timeline
            // sort by position.
            // Compared as bytes: the server's word may hold any character, and slicing a
            // string inside one would panic.
            let (last, want) = (last.as_bytes(), name.as_bytes());
            if last.len() >= 24
                && want.len() >= 24
                && last[..8] == want[..8]
                && last[..24] >= want[..24]
            {
                archived_at = Some(Instant::now());
            }
        }
        if archived_at.is_some_and(|t| t.elapsed() > ELSEWHERE_GRACE) {
            return Err(elsewhere("PostgreSQL reports it archived"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The primary `conninfo` reaches, for the standby `standby`: a primary, of the same
/// cluster.
async fn primary_of(standby: &Client, conninfo: &str) -> Result<Client> {
    let p = connect(conninfo).await?;
    let q = "SELECT pg_is_in_recovery(), (SELECT system_identifier::text FROM pg_control_system())";
    let (r, s) = tokio::try_join!(p.query_one(q, &[]), standby.query_one(q, &[]))
        .map_err(db("describe the primary"))?;
    if r.get::<_, bool>(0) {
        return Err(Error::Invalid(
            "--primary-conninfo reaches a standby too: give the primary".into(),
        ));
    }
    if r.get::<_, String>(1) != s.get::<_, String>(1) {
        return Err(Error::Invalid(
            "--primary-conninfo reaches another cluster than the standby's (system identifiers \
             differ)"
                .into(),
        ));
    }
    Ok(p)
}

/// Refuses `data_dir` unless the server `c` reaches runs on it: its `postmaster.pid` must
/// name the server's port and start time (to the second: the file keeps whole seconds, the
/// server a timestamp taken a moment apart). A `PGDATA` left pointing at the primary while
/// `--conninfo` reaches a standby (or at another cluster of the host) would back up the wrong
/// files under the right label.
async fn same_server(c: &Client, data_dir: &std::path::Path) -> Result<()> {
    let r = c
        .query_one(
            "SELECT extract(epoch from pg_postmaster_start_time())::float8, \
             current_setting('port')",
            &[],
        )
        .await
        .map_err(db("read its start time"))?;
    let (started, port): (f64, String) = (r.get(0), r.get(1));
    let pid_file = data_dir.join("postmaster.pid");
    let text = std::fs::read_to_string(&pid_file).map_err(|e| Error::io(pid_file.display(), e))?;
    // postmaster.pid: PID, data directory, start time (seconds since the epoch), port, ...
    let mut lines = text.lines().skip(2).map(str::trim);
    let file_started = lines.next().and_then(|l| l.parse::<f64>().ok());
    let same = file_started.is_some_and(|t| (t - started).abs() <= 2.0)
        && lines.next() == Some(port.as_str());
    if !same {
        return Err(Error::Invalid(format!(
            "{} is not the data directory of the server --conninfo reaches (its postmaster.pid \
             is another server's): give --pgdata (or PGDATA) for that server",
            data_dir.display()
        )));
    }
    Ok(())
}

/// The cluster's tablespaces but the built-in two.
async fn list_tablespaces(c: &Client) -> Result<Vec<Tablespace>> {
    let rows = c
        .query(
            "SELECT oid::int8, pg_tablespace_location(oid) FROM pg_tablespace \
             WHERE spcname NOT IN ('pg_default', 'pg_global') ORDER BY oid",
            &[],
        )
        .await
        .map_err(db("list its tablespaces"))?;
    Ok(rows
        .iter()
        .map(|r| Tablespace {
            oid: r.get::<_, i64>(0) as u32,
            location: r.get(1),
        })
        .collect())
}

/// Backs up the cluster `opts.conninfo` reaches into `repo`, holding a shared lock.
pub async fn backup(
    repo: Arc<Repo>, opts: &BackupOptions, progress: Arc<dyn BackupProgress>,
) -> Result<Done> {
    let work = backup_locked(repo.clone(), opts, progress);
    ferry_repo::lock::under(&repo, false, work).await
}

async fn backup_locked(
    repo: Arc<Repo>, opts: &BackupOptions, progress: Arc<dyn BackupProgress>,
) -> Result<Done> {
    let c = connect(&opts.conninfo).await?;
    let r = c
        .query_one(
            "SELECT pg_is_in_recovery(), current_setting('server_version_num')::int, \
             current_setting('archive_mode'), \
             (SELECT setting::int8 FROM pg_settings WHERE name = 'wal_segment_size'), \
             (SELECT count(*) FROM pg_tablespace WHERE spcname NOT IN ('pg_default', 'pg_global')), \
             current_setting('data_checksums') = 'on' AND current_setting('block_size') = '8192'",
            &[],
        )
        .await
        .map_err(db("describe itself"))?;
    let (standby, version, archive_mode, seg_size, tablespaces): (bool, i32, String, i64, i64) =
        (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
    let checksums: bool = r.get(5);
    let primary = match (standby, &opts.primary_conninfo) {
        (false, _) => None,
        (true, Some(p)) => Some(primary_of(&c, p).await?),
        (true, None) => {
            return Err(Error::Invalid(
                "the server is a standby: give --primary-conninfo too; ferry asks the primary \
                 to switch WAL (a standby cannot), so that the backup's last segment gets archived"
                    .into(),
            ))
        }
    };
    if version < 130000 {
        return Err(Error::Invalid(format!(
            "PostgreSQL {version} is older than 13, which ferry pg backup needs"
        )));
    }
    let api = BackupApi::of(version);
    if archive_mode == "off" {
        return Err(Error::Invalid(
            "archive_mode is off: a base backup is only restorable with its WAL; set \
             archive_mode = on and archive_command = 'ferry wal-push %p'"
                .into(),
        ));
    }
    let tablespaces = if tablespaces > 0 {
        list_tablespaces(&c).await?
    } else {
        Vec::new()
    };
    let label = format!("ferry {}", chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ"));
    let start_time = now_us(&c).await?;
    let r = c
        .query_one(api.start, &[&label])
        .await
        .map_err(db("start a backup"))?;
    let start_lsn: Lsn = r.get::<_, String>(0).parse().map_err(Error::Permanent)?;
    let r = c
        .query_one(
            "SELECT (SELECT timeline_id FROM pg_control_checkpoint()), \
             (SELECT system_identifier::text FROM pg_control_system()), \
             current_setting('data_directory')",
            &[],
        )
        .await
        .map_err(db("describe the backup's start"))?;
    let (timeline, system_id, server_dir): (i32, String, String) = (r.get(0), r.get(1), r.get(2));
    let seg = seg_size as u64;
    // Named here: pg_walfile_name cannot run on a standby.
    let start_wal = WalName::segment(timeline as u32, start_lsn.segno(seg), seg).to_string();
    let data_dir = opts.pgdata.clone().unwrap_or_else(|| server_dir.into());
    let meta = std::fs::metadata(&data_dir).map_err(|e| Error::io(data_dir.display(), e))?;
    if !data_dir.join("PG_VERSION").exists() {
        return Err(Error::Invalid(format!(
            "{} is not a PostgreSQL data directory (no PG_VERSION)",
            data_dir.display()
        )));
    }
    same_server(&c, &data_dir).await?;

    let snaps = repo.snapshots().await?;
    let parent = record::backups(snaps)
        .into_iter()
        .rev()
        .find(|(_, _, b)| b.system_id == system_id && b.data_dir == data_dir.to_string_lossy())
        .filter(|_| !opts.full);
    let (index, trees) = ferry_repo::backup::starting_point(&repo, parent.is_some()).await?;
    let mut layout = PgLayout::new(&data_dir, opts.block);
    if checksums {
        layout = layout.with_checksums(start_lsn.0);
    }
    let layout = Arc::new(layout);
    let arch = Archiver::with_policy(repo.clone(), index, trees, progress, layout.clone());
    let root = arch
        .save_root(&data_dir, parent.as_ref().map(|(_, s, _)| s))
        .await?;
    let unread = arch.errors();
    if let Some(e) = unread.first() {
        // A backup missing a file cannot be restored to anything consistent: no snapshot.
        return Err(Error::Permanent(format!(
            "backup abandoned, {} files could not be read, first: {e}",
            unread.len()
        )));
    }

    let r = c
        .query_one(api.stop, &[])
        .await
        .map_err(db("stop the backup"))?;
    let stop_lsn: Lsn = r.get::<_, String>(0).parse().map_err(Error::Permanent)?;
    // The segment holding the last byte before the stop point (on a primary, the stop point
    // is where pg_backup_stop switched WAL: a segment's start).
    let last = Lsn(stop_lsn.0.saturating_sub(1)).segno(seg);
    let stop_wal = WalName::segment(timeline as u32, last, seg).to_string();
    // A standby archives nothing: the primary completes the segment and archives it.
    let archiver = match &primary {
        Some(p) => {
            p.query_one("SELECT pg_switch_wal()", &[])
                .await
                .map_err(db("switch WAL on the primary"))?;
            p
        }
        None => &c,
    };
    wait_archived(archiver, &repo, &stop_wal, ARCHIVE_WAIT).await?;
    let spcmap: Option<String> = r.get(2);
    // Taken after the stop: a transaction it shows running had not ended at the stop point.
    let stop_snapshot: String = c
        .query_one("SELECT pg_current_snapshot()::text", &[])
        .await
        .map_err(db("read the transactions running"))?
        .get(0);
    let record = PgBackup {
        system_id,
        version: version as u32,
        timeline: timeline as u32,
        seg_size: seg_size as u64,
        start_lsn,
        stop_lsn,
        start_wal,
        stop_wal,
        start_time,
        stop_time: now_us(&c).await?,
        stop_snapshot: Some(stop_snapshot),
        label: r.get(1),
        tablespace_map: spcmap.filter(|s| !s.is_empty()),
        data_dir: data_dir.to_string_lossy().into_owned(),
        owner: (meta.uid(), meta.gid()),
        mode: meta.mode() & 0o7777,
        block_size: opts.block,
        tablespaces,
    };
    let out = arch
        .commit(
            root,
            vec![record.data_dir.clone()],
            parent.map(|(id, _, _)| id),
            vec![record::TAG.to_string()],
            Some(record.to_extra()),
        )
        .await?;
    Ok(Done {
        id: out.id,
        snapshot: out.snapshot,
        record,
        bad_pages: layout.bad_pages(),
    })
}

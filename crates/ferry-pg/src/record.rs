//! What a PostgreSQL backup records beside its files, kept in the snapshot (encrypted).

use ferry_repo::{Id, Snapshot};
use serde::{Deserialize, Serialize};

use crate::lsn::Lsn;

/// The tag every PostgreSQL backup's snapshot carries.
pub const TAG: &str = "pg";

/// One base backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgBackup {
    /// `pg_control`'s system identifier: which cluster this is.
    pub system_id: String,
    /// `server_version_num`.
    pub version: u32,
    /// Timeline the backup started on.
    pub timeline: u32,
    /// WAL segment size in bytes.
    pub seg_size: u64,
    /// Where replay starts.
    pub start_lsn: Lsn,
    /// Where the cluster is consistent; a restore cannot stop before it.
    pub stop_lsn: Lsn,
    /// First WAL file replay needs.
    pub start_wal: String,
    /// Last WAL file replay needs.
    pub stop_wal: String,
    /// Server time at start and at stop, microseconds since the epoch.
    pub start_time: i64,
    /// See `start_time`.
    pub stop_time: i64,
    /// `pg_current_snapshot()` taken once the backup had stopped (`xmin:xmax:xip,...`):
    /// which transactions had ended by then, for `--target-xid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_snapshot: Option<String>,
    /// The `backup_label` pg_backup_stop returned; written into the restored directory.
    pub label: String,
    /// The `tablespace_map`, when there is one.
    #[serde(default)]
    pub tablespace_map: Option<String>,
    /// The data directory backed up.
    pub data_dir: String,
    /// Its owner and mode, for the restored directory.
    pub owner: (u32, u32),
    /// See `owner`.
    pub mode: u32,
    /// Block size relation files were cut into.
    pub block_size: u32,
    /// Tablespaces outside the data directory: their files are in the snapshot under
    /// `pg_tblspc/OID`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tablespaces: Vec<Tablespace>,
}

/// A tablespace a backup holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tablespace {
    /// Its OID: the name of its link in `pg_tblspc`.
    pub oid: u32,
    /// Where it was (`pg_tablespace_location`).
    pub location: String,
}

impl PgBackup {
    /// Why a directory of `uid` is not the cluster owner's to restore into, or `None` when it
    /// is: a directory another user owns is theirs to swap or read, and a root-owned one
    /// filled and handed to the cluster's owner would become theirs.
    pub(crate) fn not_owners(&self, uid: u32) -> Option<String> {
        (uid != self.owner.0).then(|| {
            format!(
                "belongs to uid {uid}, not to the cluster's owner (uid {})",
                self.owner.0
            )
        })
    }

    /// The record in `snap`, if it is a PostgreSQL backup.
    pub fn of(snap: &Snapshot) -> Option<PgBackup> {
        let v = snap.extra.as_ref()?.get(TAG)?;
        serde_json::from_value(v.clone()).ok()
    }

    /// The snapshot `extra` holding this record.
    pub fn to_extra(&self) -> serde_json::Value {
        serde_json::json!({ TAG: self })
    }
}

/// Every PostgreSQL backup among `snaps`, oldest first.
pub fn backups(snaps: Vec<(Id, Snapshot)>) -> Vec<(Id, Snapshot, PgBackup)> {
    let mut out: Vec<_> = snaps
        .into_iter()
        .filter_map(|(id, s)| PgBackup::of(&s).map(|b| (id, s, b)))
        .collect();
    out.sort_by_key(|(_, _, b)| b.stop_time);
    out
}

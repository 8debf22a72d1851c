//! What a PostgreSQL backup records beside its files, kept in the snapshot (encrypted).

use ferry_repo::{Id, Snapshot};
use serde::{Deserialize, Serialize};

use crate::lsn::Lsn;

/// The tag every PostgreSQL backup's snapshot carries.
pub const TAG: &str = "pg";

/// Smallest WAL segment size PostgreSQL has (`initdb --wal-segsize`).
pub const MIN_SEG_SIZE: u64 = 1 << 20;

/// Largest WAL segment size PostgreSQL has.
pub const MAX_SEG_SIZE: u64 = 1 << 30;

/// Most WAL a record's start and stop may lie apart: 2^48 bytes (256 TiB). A base backup
/// spans only the WAL written while it ran; 256 TiB is three days at 1 GB/s, past what any
/// server writes during one backup, yet it bounds a forged record to 2^28 segments of
/// 1 MiB instead of 2^44 (the whole LSN space).
pub const MAX_SPAN: u64 = 1 << 48;

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

    /// The record in `snap`, if it is a PostgreSQL backup whose values PostgreSQL could have
    /// written: a damaged record is none, and so is an impossible one (see
    /// [`PgBackup::impossible`]).
    pub fn of(snap: &Snapshot) -> Option<PgBackup> {
        Self::read(snap)?.ok()
    }

    /// The record in `snap`, if it has one: parsed and checked, or why it is refused.
    fn read(snap: &Snapshot) -> Option<Result<PgBackup, String>> {
        let v = snap.extra.as_ref()?.get(TAG)?;
        let b = serde_json::from_value::<PgBackup>(v.clone()).map_err(|e| e.to_string());
        Some(b.and_then(|b| b.impossible().map_or(Ok(b), Err)))
    }

    /// Why PostgreSQL cannot have written this record, or `None` when it can have. A
    /// password holder can write any record, and everything that reads the WAL a backup
    /// needs divides by its segment size and walks from its start to its stop: a size of 0
    /// divides by zero, one above 4 GiB makes zero segments per log (a remainder by zero
    /// in `WalName::segment`), and a span of 2^64 bytes lists 2^40 segments.
    pub fn impossible(&self) -> Option<String> {
        let s = self.seg_size;
        if !(s.is_power_of_two() && (MIN_SEG_SIZE..=MAX_SEG_SIZE).contains(&s)) {
            return Some(format!(
                "segment size {s} is not one PostgreSQL has (a power of two from 1 MiB to 1 GiB)"
            ));
        }
        if self.stop_lsn < self.start_lsn {
            return Some(format!(
                "it stops (LSN {}) before it starts (LSN {})",
                self.stop_lsn, self.start_lsn
            ));
        }
        if self.stop_lsn.0 - self.start_lsn.0 > MAX_SPAN {
            return Some(format!(
                "it spans more WAL ({} to {}) than any backup writes (at most {} TiB)",
                self.start_lsn,
                self.stop_lsn,
                MAX_SPAN >> 40
            ));
        }
        None
    }

    /// The snapshot `extra` holding this record.
    pub fn to_extra(&self) -> serde_json::Value {
        serde_json::json!({ TAG: self })
    }
}

/// Every PostgreSQL backup among `snaps`, oldest first. A snapshot whose record is damaged
/// or impossible is left out, with a warning naming it.
pub fn backups(snaps: Vec<(Id, Snapshot)>) -> Vec<(Id, Snapshot, PgBackup)> {
    let mut out: Vec<_> = snaps
        .into_iter()
        .filter_map(|(id, s)| match PgBackup::read(&s)? {
            Ok(b) => Some((id, s, b)),
            Err(why) => {
                tracing::warn!(
                    "snapshot {}: not a usable PostgreSQL backup: {why}",
                    id.short()
                );
                None
            }
        })
        .collect();
    out.sort_by_key(|(_, _, b)| b.stop_time);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> PgBackup {
        PgBackup {
            system_id: "7300000000000000001".into(),
            version: 150_004,
            timeline: 1,
            seg_size: 16 << 20,
            start_lsn: Lsn(0x3_0000_0028),
            stop_lsn: Lsn(0x3_0100_0100),
            start_wal: "000000010000000300000000".into(),
            stop_wal: "000000010000000300000001".into(),
            start_time: 1,
            stop_time: 2,
            stop_snapshot: None,
            label: String::new(),
            tablespace_map: None,
            data_dir: "/var/lib/postgresql/15/main".into(),
            owner: (100, 100),
            mode: 0o700,
            block_size: 8192,
            tablespaces: Vec::new(),
        }
    }

    fn snapshot(b: &PgBackup) -> Snapshot {
        Snapshot {
            time: 0,
            nanos: 0,
            hostname: "h".into(),
            paths: vec![b.data_dir.clone()],
            tags: vec![TAG.into()],
            tree: Id::default(),
            parent: None,
            summary: Default::default(),
            start: None,
            extra: Some(b.to_extra()),
        }
    }

    #[test]
    fn records_postgresql_cannot_have_written_are_refused() {
        let ok = good();
        assert_eq!(PgBackup::of(&snapshot(&ok)), Some(ok.clone()));
        let mut bad = Vec::new();
        for seg_size in [0, 1, 3 << 20, 512 << 10, 2 << 30, 8 << 30, u64::MAX] {
            bad.push(PgBackup {
                seg_size,
                ..ok.clone()
            });
        }
        // Stops before it starts; the whole LSN space; one byte past the bound.
        bad.push(PgBackup {
            start_lsn: ok.stop_lsn,
            stop_lsn: ok.start_lsn,
            ..ok.clone()
        });
        bad.push(PgBackup {
            start_lsn: Lsn(0),
            stop_lsn: Lsn(u64::MAX),
            ..ok.clone()
        });
        bad.push(PgBackup {
            start_lsn: Lsn(0),
            stop_lsn: Lsn(MAX_SPAN + 1),
            ..ok.clone()
        });
        for b in &bad {
            assert!(b.impossible().is_some(), "{b:?}");
            assert_eq!(PgBackup::of(&snapshot(b)), None, "{b:?}");
        }
        let snaps = bad
            .iter()
            .chain([&ok])
            .map(|b| (Id::default(), snapshot(b)));
        let all = backups(snaps.collect());
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].2, ok);
        // The edges PostgreSQL has are taken.
        for seg_size in [MIN_SEG_SIZE, MAX_SEG_SIZE] {
            assert!(PgBackup {
                seg_size,
                ..ok.clone()
            }
            .impossible()
            .is_none());
        }
        let widest = PgBackup {
            start_lsn: Lsn(0),
            stop_lsn: Lsn(MAX_SPAN),
            ..ok.clone()
        };
        assert!(widest.impossible().is_none());
    }
}

//! What of a data directory a backup takes, and how relation files are cut.
//!
//! Left out, as pg_basebackup leaves them out: WAL (the archive has it), and directories
//! PostgreSQL empties or rebuilds at start (their directories are kept, empty).
//! Relation files are cut into page-aligned blocks: PostgreSQL changes them 8 KiB at a
//! time, scattered, and content-defined chunks of 1 MiB would store most of a table again
//! after a few rows changed everywhere in it.

use std::path::{Path, PathBuf};

use ferry_repo::policy::{Chunking, Pick, Policy};
use ferry_repo::tree::Node;

/// Directories whose contents are not backed up.
const EMPTIED: &[&str] = &[
    "pg_wal",
    "pg_dynshmem",
    "pg_notify",
    "pg_replslot",
    "pg_serial",
    "pg_snapshots",
    "pg_stat_tmp",
    "pg_subtrans",
];

/// Top-level files that belong to the running server or to recovery, not to the data.
const SKIPPED: &[&str] = &[
    "postmaster.pid",
    "postmaster.opts",
    "backup_label",
    "backup_label.old",
    "tablespace_map",
    "tablespace_map.old",
    "recovery.signal",
    "standby.signal",
];

/// Block size for relation files: 64 KiB, eight pages. See docs/pg.md for what it costs.
pub const BLOCK: u32 = 64 << 10;

/// The backup policy for one data directory.
pub struct PgLayout {
    root: PathBuf,
    block: u32,
}

impl PgLayout {
    /// For the data directory `root`, relation files cut into `block` bytes.
    pub fn new(root: &Path, block: u32) -> Self {
        Self {
            root: root.to_path_buf(),
            block,
        }
    }
}

/// `12345`, `12345.1`, `12345_fsm`, `12345_vm.2`, `12345_init`.
fn is_relation_file(name: &str) -> bool {
    let base = name.split_once('.').map_or(name, |(b, seg)| {
        if seg.bytes().all(|c| c.is_ascii_digit()) && !seg.is_empty() {
            b
        } else {
            ""
        }
    });
    let oid = base
        .strip_suffix("_fsm")
        .or_else(|| base.strip_suffix("_vm"))
        .or_else(|| base.strip_suffix("_init"))
        .unwrap_or(base);
    !oid.is_empty() && oid.bytes().all(|c| c.is_ascii_digit())
}

impl PgLayout {
    /// Whether `path` (and, for a directory, what is under it) is in a base backup.
    pub fn takes(&self, path: &Path) -> bool {
        let Ok(rel) = path.strip_prefix(&self.root) else {
            return true;
        };
        let parts: Vec<&str> = rel.iter().filter_map(|c| c.to_str()).collect();
        let name = parts.last().copied().unwrap_or_default();
        if name == "pg_internal.init" || name.starts_with("pgsql_tmp") {
            return false;
        }
        match parts.as_slice() {
            [one] => !SKIPPED.contains(one),
            [dir, _, ..] => !EMPTIED.contains(dir),
            [] => true,
        }
    }
}

impl Policy for PgLayout {
    fn pick(&self, path: &Path, _node: &Node) -> Pick {
        match self.takes(path) {
            true => Pick::Take,
            false => Pick::Skip,
        }
    }

    fn chunking(&self, path: &Path) -> Chunking {
        let Ok(rel) = path.strip_prefix(&self.root) else {
            return Chunking::ContentDefined;
        };
        let parts: Vec<&str> = rel.iter().filter_map(|c| c.to_str()).collect();
        let relation = match parts.as_slice() {
            ["base", _, f] | ["global", f] => is_relation_file(f),
            ["pg_tblspc", ..] => parts.last().is_some_and(|f| is_relation_file(f)),
            _ => false,
        };
        if relation {
            Chunking::Fixed(self.block)
        } else {
            Chunking::ContentDefined
        }
    }

    fn vanished_is_error(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_data_and_leaves_runtime_files() {
        let l = PgLayout::new(Path::new("/d"), BLOCK);
        for yes in [
            "/d/base/1/1259",
            "/d/global/pg_control",
            "/d/pg_wal",
            "/d/PG_VERSION",
        ] {
            assert!(l.takes(Path::new(yes)), "{yes}");
        }
        for no in [
            "/d/postmaster.pid",
            "/d/pg_wal/000000010000000000000001",
            "/d/pg_wal/archive_status",
            "/d/base/1/pg_internal.init",
            "/d/base/pgsql_tmp",
            "/d/backup_label",
        ] {
            assert!(!l.takes(Path::new(no)), "{no}");
        }
    }

    #[test]
    fn cuts_relation_files_in_blocks() {
        let l = PgLayout::new(Path::new("/d"), BLOCK);
        let fixed = Chunking::Fixed(BLOCK);
        assert_eq!(l.chunking(Path::new("/d/base/5/16384")), fixed);
        assert_eq!(l.chunking(Path::new("/d/base/5/16384.2")), fixed);
        assert_eq!(l.chunking(Path::new("/d/base/5/16384_vm")), fixed);
        assert_eq!(l.chunking(Path::new("/d/global/1262")), fixed);
        for cdc in [
            "/d/base/5/PG_VERSION",
            "/d/global/pg_control",
            "/d/pg_xact/0000",
            "/d/base/5/1.x",
        ] {
            assert_eq!(
                l.chunking(Path::new(cdc)),
                Chunking::ContentDefined,
                "{cdc}"
            );
        }
    }
}

//! What of a data directory a backup takes, and how relation files are cut.
//!
//! Left out, as pg_basebackup leaves them out: WAL (the archive has it), directories
//! PostgreSQL empties or rebuilds at start (their directories are kept, empty), and the data
//! of unlogged relations (their init forks stay: recovery rebuilds the relation from them).
//! Relation files are cut into page-aligned blocks: PostgreSQL changes them 8 KiB at a
//! time, scattered, and content-defined chunks of 1 MiB would store most of a table again
//! after a few rows changed everywhere in it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ferry_repo::policy::{Chunking, Pick, Policy};
use ferry_repo::tree::{Node, NodeKind};

use crate::checksum;

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
    /// The data directory's owner: a tablespace is that user's directory (PostgreSQL makes
    /// it so), and pg_tblspc's links are followed only to such.
    owner: Option<u32>,
    block: u32,
    /// With page checksums on: the backup's start LSN, and what failed.
    checksums: Option<(u64, Mutex<BadPages>)>,
}

/// Pages whose checksum failed.
#[derive(Debug, Default, Clone)]
pub struct BadPages {
    /// How many.
    pub count: u64,
    /// The first [`BAD_PAGES_KEPT`] of them: path relative to the data directory, block
    /// number in the relation.
    pub pages: Vec<(String, u64)>,
}

/// Bad pages named one by one; beyond, only counted.
pub const BAD_PAGES_KEPT: usize = 100;

impl PgLayout {
    /// For the data directory `root`, relation files cut into `block` bytes.
    pub fn new(root: &Path, block: u32) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            root: root.to_path_buf(),
            owner: std::fs::metadata(root).ok().map(|m| m.uid()),
            block,
            checksums: None,
        }
    }

    /// Verifies page checksums as relation files are read, for a backup started at `start`.
    pub fn with_checksums(mut self, start: u64) -> Self {
        self.checksums = Some((start, Mutex::new(BadPages::default())));
        self
    }

    /// The pages whose checksum failed so far.
    pub fn bad_pages(&self) -> BadPages {
        self.checksums
            .as_ref()
            .map_or_else(BadPages::default, |(_, b)| {
                b.lock().unwrap_or_else(|e| e.into_inner()).clone()
            })
    }

    /// The components of `path` below the data directory; `None` outside it.
    fn parts<'a>(&self, path: &'a Path) -> Option<Vec<&'a str>> {
        let rel = path.strip_prefix(&self.root).ok()?;
        Some(rel.iter().filter_map(|c| c.to_str()).collect())
    }

    /// Relation files: their path relative to the data directory and first block number.
    fn relation_start(&self, path: &Path) -> Option<(String, u64)> {
        let name = relation_name(&self.parts(path)?)?;
        let segment = name
            .split_once('.')
            .and_then(|(_, s)| s.parse::<u64>().ok())
            .unwrap_or(0);
        let rel = path.strip_prefix(&self.root).ok()?;
        Some((rel.display().to_string(), segment * checksum::SEGMENT_PAGES))
    }
}

/// The file name of a relation file, given its path's components below the data directory:
/// `base/DB/FILE`, `global/FILE` or `pg_tblspc/OID/PG_VERSION_CATALOG/DB/FILE`.
fn relation_name<'a>(parts: &[&'a str]) -> Option<&'a str> {
    let name = match parts {
        ["base", _, f] | ["global", f] | ["pg_tblspc", _, _, _, f] => *f,
        _ => return None,
    };
    is_relation_file(name).then_some(name)
}

/// `12345`, `12345.1`, `12345_fsm`, `12345_vm.2`, `12345_init`.
fn is_relation_file(name: &str) -> bool {
    relation_of(name).is_some()
}

/// The relation file `name`'s file node and fork (`""` for the main fork, `"_fsm"`, ...).
fn relation_of(name: &str) -> Option<(&str, &str)> {
    let base = name.split_once('.').map_or(Some(name), |(b, seg)| {
        (seg.bytes().all(|c| c.is_ascii_digit()) && !seg.is_empty()).then_some(b)
    })?;
    let (node, fork) = ["_fsm", "_vm", "_init"]
        .iter()
        .find_map(|f| base.strip_suffix(f).map(|n| (n, *f)))
        .unwrap_or((base, ""));
    (!node.is_empty() && node.bytes().all(|c| c.is_ascii_digit())).then_some((node, fork))
}

/// Whether `path`, a relation file named `name`, is a fork of an unlogged relation other than
/// its init fork: recovery resets those from the init fork, so they are not backed up (as
/// pg_basebackup does not). An unlogged relation is one whose `_init` fork exists.
fn is_unlogged_data(path: &Path, name: &str) -> bool {
    match relation_of(name) {
        Some((node, fork)) if fork != "_init" => path
            .with_file_name(format!("{node}_init"))
            .symlink_metadata()
            .is_ok(),
        _ => false,
    }
}

impl PgLayout {
    /// Whether `pg_tblspc/OID` at `path` leads to a tablespace to back up: an OID's name, to
    /// a directory of the data directory's owner. The cluster's owner can point such a link
    /// anywhere (`/root`); a backup run as root would store what it points to, for whoever
    /// holds the repository's password (the cluster's owner's archive_command does) to read.
    /// Anything else there is stored as the link it is.
    fn tablespace(&self, path: &Path, oid: &str) -> bool {
        use std::os::unix::fs::MetadataExt;
        let owned =
            std::fs::metadata(path).is_ok_and(|m| m.is_dir() && Some(m.uid()) == self.owner);
        if !owned {
            tracing::warn!(
                "{}: not a directory of the data directory's owner: stored as a link, not \
                 followed",
                path.display()
            );
        }
        oid.parse::<u32>().is_ok() && owned
    }

    /// Whether `path` (and, for a directory, what is under it) is in a base backup.
    pub fn takes(&self, path: &Path) -> bool {
        let Some(parts) = self.parts(path) else {
            return true;
        };
        let name = parts.last().copied().unwrap_or_default();
        if name == "pg_internal.init" || name.starts_with("pgsql_tmp") {
            return false;
        }
        match parts.as_slice() {
            [one] => !SKIPPED.contains(one),
            ["base", _, f] => !is_unlogged_data(path, f),
            ["pg_tblspc", _, _, _, f] => !is_unlogged_data(path, f),
            [dir, _, ..] => !EMPTIED.contains(dir),
            [] => true,
        }
    }
}

impl Policy for PgLayout {
    fn pick(&self, path: &Path, node: &Node) -> Pick {
        if !self.takes(path) {
            return Pick::Skip;
        }
        // PostgreSQL makes none of these in a data directory, and `pg restore` would leave
        // them out or refuse them: skipped with a warning, as pg_basebackup does.
        if matches!(
            node.kind,
            NodeKind::Fifo | NodeKind::Socket | NodeKind::Chardev | NodeKind::Blockdev
        ) {
            tracing::warn!("{}: a special file; skipped", path.display());
            return Pick::Skip;
        }
        // pg_tblspc/OID links to a tablespace: its files are backed up there, as pg_basebackup
        // does; the restore puts them back where tablespace_map says.
        match self.parts(path).as_deref() {
            Some(["pg_tblspc", oid]) if self.tablespace(path, oid) => Pick::Follow,
            _ => Pick::Take,
        }
    }

    fn chunking(&self, path: &Path) -> Chunking {
        if self
            .parts(path)
            .is_some_and(|p| relation_name(&p).is_some())
        {
            Chunking::Fixed(self.block)
        } else {
            Chunking::ContentDefined
        }
    }

    fn last(&self, path: &Path) -> bool {
        // pg_control after every other file: from a standby, its minimum recovery point is
        // where the restored copy becomes consistent, and must lie after every page read.
        let rel = path.strip_prefix(&self.root).ok();
        rel.is_some_and(|r| r == Path::new("global") || r == Path::new("global/pg_control"))
    }

    fn inspect(&self, path: &Path, offset: u64, block: &[u8]) {
        let Some((start, bad)) = &self.checksums else {
            return;
        };
        let Some((rel, first)) = self.relation_start(path) else {
            return;
        };
        // Blocks start on page boundaries (the block size is a multiple of the page); a
        // short page at the end is a file being extended: its page is in the WAL.
        for (i, page) in block.chunks_exact(checksum::PAGE).enumerate() {
            let page: &[u8; checksum::PAGE] = page.try_into().expect("a whole page");
            let blkno = first + offset / checksum::PAGE as u64 + i as u64;
            if checksum::verify(page, blkno, *start) == checksum::Verdict::Bad {
                let mut b = bad.lock().unwrap_or_else(|e| e.into_inner());
                b.count += 1;
                if b.pages.len() < BAD_PAGES_KEPT {
                    b.pages.push((rel.clone(), blkno));
                }
            }
        }
    }

    fn vanished_is_error(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listing's node of `kind`.
    fn node(kind: NodeKind) -> Node {
        Node {
            name: String::new(),
            name_hex: false,
            kind,
            mode: 0o777,
            uid: 0,
            gid: 0,
            mtime: 0,
            ctime: 0,
            inode: 0,
            dev: 0,
            nlink: 1,
            size: 0,
            content: Vec::new(),
            subtree: None,
            target: None,
            rdev: None,
            xattrs: Vec::new(),
        }
    }

    /// FIFOs, sockets and devices anywhere are skipped, as pg_basebackup skips them: `pg
    /// restore` would leave them out or refuse the backup.
    #[test]
    fn special_files_are_skipped() {
        let l = PgLayout::new(Path::new("/data"), BLOCK);
        let at = Path::new("/data/base/1/x");
        for kind in [
            NodeKind::Fifo,
            NodeKind::Socket,
            NodeKind::Chardev,
            NodeKind::Blockdev,
        ] {
            assert_eq!(l.pick(at, &node(kind)), Pick::Skip, "{kind:?}");
        }
        assert_eq!(l.pick(at, &node(NodeKind::File)), Pick::Take);
    }

    /// pg_tblspc's links are followed only to the data directory owner's directories, and
    /// only under an OID's name: a link the cluster's owner points at /root is stored as a
    /// link. (The other owner is made only as root, where backups of others' files run.)
    #[test]
    fn only_tablespaces_of_the_cluster_owner_are_followed() {
        let t = std::env::temp_dir().join(ferry_testkit::unique("ferry-layout"));
        let (data, mine, theirs) = (t.join("data"), t.join("mine"), t.join("theirs"));
        for d in [&data.join("pg_tblspc"), &mine, &theirs] {
            std::fs::create_dir_all(d).unwrap();
        }
        let root = unsafe { libc::geteuid() } == 0;
        if root {
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
        }
        for (name, to) in [("16400", &mine), ("16401", &theirs), ("x", &mine)] {
            std::os::unix::fs::symlink(to, data.join("pg_tblspc").join(name)).unwrap();
        }
        let l = PgLayout::new(&data, BLOCK);
        // (pick reads the link itself; the node it is handed is the listing's.)
        let link = node(NodeKind::Symlink);
        let pick = |n: &str| l.pick(&data.join("pg_tblspc").join(n), &link);
        assert_eq!(pick("16400"), Pick::Follow);
        assert_eq!(pick("x"), Pick::Take);
        if root {
            assert_eq!(pick("16401"), Pick::Take);
        }
        std::fs::remove_dir_all(&t).unwrap();
    }

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
    fn leaves_out_unlogged_relations_but_their_init_forks() {
        let root = std::env::temp_dir().join(format!("ferry-layout-{}", std::process::id()));
        let db = root.join("base/5");
        std::fs::create_dir_all(&db).unwrap();
        let files = [
            "16384",
            "16384.1",
            "16384_fsm",
            "16384_vm",
            "16384_init",
            "16385",
        ];
        for f in files {
            std::fs::write(db.join(f), b"").unwrap();
        }
        let l = PgLayout::new(&root, BLOCK);
        let took: Vec<_> = files.into_iter().filter(|f| l.takes(&db.join(f))).collect();
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(took, ["16384_init", "16385"]);
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

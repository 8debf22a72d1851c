//! What the repository-level pg tests share: an in-memory repository, WAL segments with
//! the header `ferry-wal` checks, backup records as `pg backup` writes them, and backups
//! made the way it makes them.

// Each test crate includes this module and uses part of it.
#![allow(dead_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferry_pg::layout::{PgLayout, BLOCK};
use ferry_pg::record::TAG;
use ferry_pg::{Lsn, PgBackup};
use ferry_repo::archiver::{Archiver, Quiet};
use ferry_repo::policy::{Chunking, Pick, Policy};
use ferry_repo::tree::{Node, NodeKind};
use ferry_repo::{Id, Repo};
use ferry_store::memory::MemoryStore;
use ferry_store::Store;
use ferry_transfer::{Class, Engine, EngineConfig};
use ferry_wal::WalName;

/// The smallest segment size PostgreSQL allows.
pub const SEG: u64 = 1 << 20;
pub const SYSTEM_ID: u64 = 7_301_234_567_890_123_456;
pub const ROOT: &str = "repo";

/// A scratch directory, removed when dropped (a failed assertion included).
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A new one, its name starting with `prefix`.
    pub fn new(prefix: &str) -> Scratch {
        let d = std::env::temp_dir().join(ferry_testkit::unique(prefix));
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A new repository in memory, with the store under it.
pub async fn memory_repo() -> (Arc<MemoryStore>, Arc<Repo>) {
    let store = Arc::new(MemoryStore::new());
    let shared: Arc<dyn Store> = store.clone();
    let remote = Engine::new(EngineConfig::default()).remote(shared, Class::Bulk);
    let repo = Repo::init(remote, ROOT, b"pw", ferry_repo::repo::FORMAT)
        .await
        .unwrap();
    (store, Arc::new(repo))
}

/// Segment `segno` of timeline `tli`.
pub fn seg(tli: u32, segno: u64) -> WalName {
    WalName::segment(tli, segno, SEG)
}

/// A WAL segment with the long page header `ferry-wal` checks.
pub fn segment(n: &WalName) -> Vec<u8> {
    let mut d = vec![0u8; SEG as usize];
    d[0..2].copy_from_slice(&0xD110u16.to_le_bytes());
    d[2..4].copy_from_slice(&0x0002u16.to_le_bytes());
    d[4..8].copy_from_slice(&n.timeline().to_le_bytes());
    d[8..16].copy_from_slice(&(n.segno(SEG) * SEG).to_le_bytes());
    d[24..32].copy_from_slice(&SYSTEM_ID.to_le_bytes());
    d[32..36].copy_from_slice(&(SEG as u32).to_le_bytes());
    d[36..40].copy_from_slice(&8192u32.to_le_bytes());
    d
}

/// What `pg backup` records for a backup of `dir` from segment `start` to `stop`, ended
/// `stop_time`, with no tablespaces.
pub fn record(dir: &Path, start: u64, stop: u64, stop_time: i64) -> PgBackup {
    let m = std::fs::metadata(dir).unwrap();
    let start_lsn = Lsn(start * SEG + 0x28);
    let start_wal = seg(1, start).to_string();
    PgBackup {
        system_id: SYSTEM_ID.to_string(),
        version: 150_004,
        timeline: 1,
        seg_size: SEG,
        start_lsn,
        stop_lsn: Lsn(stop * SEG + 0x100),
        label: format!("START WAL LOCATION: {start_lsn} (file {start_wal})\nLABEL: ferry test\n"),
        start_wal,
        stop_wal: seg(1, stop).to_string(),
        start_time: stop_time - 1_000_000,
        stop_time,
        stop_snapshot: None,
        tablespace_map: None,
        data_dir: dir.display().to_string(),
        owner: (m.uid(), m.gid()),
        mode: m.mode() & 0o7777,
        block_size: BLOCK,
        tablespaces: Vec::new(),
    }
}

/// A base backup of `dir` recording `rec`, made as `pg backup` makes it once PostgreSQL has
/// said where it starts (the record is the password holder's to write).
pub async fn pg_backup(repo: &Arc<Repo>, dir: &Path, rec: &PgBackup) -> Id {
    backup_with(repo, dir, rec, Arc::new(PgLayout::new(dir, BLOCK))).await
}

/// A backup of `dir` as a forger with write access to the repository makes it: `pg backup`'s
/// layout, but special files taken, which `pg backup` itself skips.
pub async fn forged_backup(repo: &Arc<Repo>, dir: &Path, rec: &PgBackup) -> Id {
    backup_with(repo, dir, rec, Arc::new(Forger(PgLayout::new(dir, BLOCK)))).await
}

/// `pg backup`'s layout, taking whatever it would skip as a special file.
struct Forger(PgLayout);

impl Policy for Forger {
    fn pick(&self, path: &Path, node: &Node) -> Pick {
        match node.kind {
            NodeKind::File | NodeKind::Dir | NodeKind::Symlink => self.0.pick(path, node),
            _ => Pick::Take,
        }
    }
    fn chunking(&self, path: &Path) -> Chunking {
        self.0.chunking(path)
    }
    fn last(&self, path: &Path) -> bool {
        self.0.last(path)
    }
    fn vanished_is_error(&self) -> bool {
        self.0.vanished_is_error()
    }
}

async fn backup_with(repo: &Arc<Repo>, dir: &Path, rec: &PgBackup, policy: Arc<dyn Policy>) -> Id {
    let (index, trees) = ferry_repo::backup::starting_point(repo, false)
        .await
        .unwrap();
    let arch = Archiver::with_policy(repo.clone(), index, trees, Arc::new(Quiet), policy);
    let root = arch.save_root(dir, None).await.unwrap();
    assert!(arch.errors().is_empty(), "{:?}", arch.errors());
    arch.commit(
        root,
        vec![rec.data_dir.clone()],
        None,
        vec![TAG.to_string()],
        Some(rec.to_extra()),
    )
    .await
    .unwrap()
    .id
}

//! `pg restore` of a backup a password holder forged, into a target local users planted
//! things in: no device, FIFO or setuid bit comes back, a target group members could write
//! is private before anything is written into it, a tablespace place that is a link to
//! nothing is refused, and `tablespace_map` holds only the places checked. On an in-memory
//! store; backups are made the way `memory.rs` makes them. The device and another user's
//! directory need root, as these tests run here; without it those parts are left out.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ferry_pg::layout::{PgLayout, BLOCK};
use ferry_pg::record::{Tablespace, TAG};
use ferry_pg::restore::{restore, RestoreOptions};
use ferry_pg::walview;
use ferry_pg::{Lsn, PgBackup, Target};
use ferry_repo::archiver::{Archiver, BackupProgress, Quiet};
use ferry_repo::{Id, Repo};
use ferry_store::memory::MemoryStore;
use ferry_store::Store;
use ferry_testkit::random_bytes;
use ferry_transfer::{Class, Engine, EngineConfig, Error};
use ferry_wal::WalName;

/// The smallest segment size PostgreSQL allows.
const SEG: u64 = 1 << 20;
const SYSTEM_ID: u64 = 7_301_234_567_890_123_456;
const ROOT: &str = "repo";
/// Every backup here starts and stops in segment 2.
const WAL: u64 = 2;

/// A scratch directory, removed when dropped (a failed assertion included).
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let d = std::env::temp_dir().join(ferry_testkit::unique("ferry-pg-hostile"));
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A repository whose archive holds the segment every backup here needs.
async fn new_repo() -> Arc<Repo> {
    let shared: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let remote = Engine::new(EngineConfig::default()).remote(shared, Class::Bulk);
    let repo = Repo::init(remote, ROOT, b"pw", ferry_repo::repo::FORMAT)
        .await
        .unwrap();
    let n = WalName::segment(1, WAL, SEG);
    let mut d = vec![0u8; SEG as usize];
    d[0..2].copy_from_slice(&0xD110u16.to_le_bytes());
    d[2..4].copy_from_slice(&0x0002u16.to_le_bytes());
    d[4..8].copy_from_slice(&1u32.to_le_bytes());
    d[8..16].copy_from_slice(&(WAL * SEG).to_le_bytes());
    d[24..32].copy_from_slice(&SYSTEM_ID.to_le_bytes());
    d[32..36].copy_from_slice(&(SEG as u32).to_le_bytes());
    d[36..40].copy_from_slice(&8192u32.to_le_bytes());
    walview::archive(&repo).push(&n, d).await.unwrap();
    Arc::new(repo)
}

/// A small data directory, with tablespace 16400's files under `pg_tblspc`.
fn data_dir(dir: &Path) {
    for d in ["base/5", "global", "pg_tblspc/16400/PG_15_202209061/5"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(dir.join("PG_VERSION"), b"15\n").unwrap();
    std::fs::write(dir.join("base/5/16384"), random_bytes(BLOCK as usize, 1)).unwrap();
    std::fs::write(dir.join("global/pg_control"), random_bytes(8192, 2)).unwrap();
    let space = dir.join("pg_tblspc/16400/PG_15_202209061/5/16385");
    std::fs::write(space, random_bytes(BLOCK as usize, 3)).unwrap();
    std::fs::write(dir.join("postgresql.auto.conf"), b"work_mem = '8MB'\n").unwrap();
    std::fs::set_permissions(dir, PermissionsExt::from_mode(0o700)).unwrap();
}

/// What `pg backup` records for a backup of `dir`, with `tablespaces`.
fn record(dir: &Path, tablespaces: Vec<Tablespace>) -> PgBackup {
    let m = std::fs::metadata(dir).unwrap();
    let start_lsn = Lsn(WAL * SEG + 0x28);
    let start_wal = WalName::segment(1, WAL, SEG).to_string();
    PgBackup {
        system_id: SYSTEM_ID.to_string(),
        version: 150_004,
        timeline: 1,
        seg_size: SEG,
        start_lsn,
        stop_lsn: Lsn(WAL * SEG + 0x100),
        label: format!("START WAL LOCATION: {start_lsn} (file {start_wal})\nLABEL: hostile\n"),
        stop_wal: start_wal.clone(),
        start_wal,
        start_time: 1_000_000,
        stop_time: 2_000_000,
        stop_snapshot: None,
        tablespace_map: None,
        data_dir: dir.display().to_string(),
        owner: (m.uid(), m.gid()),
        mode: m.mode() & 0o7777,
        block_size: BLOCK,
        tablespaces,
    }
}

/// A backup of `dir` recording `rec`, as `pg backup` makes it; the record is the password
/// holder's to write.
async fn pg_backup(repo: &Arc<Repo>, dir: &Path, rec: &PgBackup) -> Id {
    let (index, trees) = ferry_repo::backup::starting_point(repo, false)
        .await
        .unwrap();
    let layout = Arc::new(PgLayout::new(dir, BLOCK));
    let arch = Archiver::with_policy(repo.clone(), index, trees, Arc::new(Quiet), layout);
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

fn options(to: &Path, id: Id) -> RestoreOptions {
    RestoreOptions {
        to: to.to_path_buf(),
        target: Target::Latest,
        backup: Some(id.hex()),
        action: "promote".into(),
        restore_command: "ferry wal-fetch %f %p".into(),
        delta: false,
        tablespace_map: Vec::new(),
    }
}

async fn refused(repo: &Arc<Repo>, opts: &RestoreOptions) -> Error {
    restore(repo.clone(), opts, Arc::new(Quiet))
        .await
        .expect_err("accepted")
}

/// Every entry below `dir` (not following links), with its lstat.
fn survey(dir: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let m = std::fs::symlink_metadata(&p).unwrap();
        if m.is_dir() {
            out.extend(survey(&p));
        }
        out.push((p, m));
    }
    out
}

/// Entries no data directory holds: anything but files, directories and links, or with
/// setuid, setgid or sticky bits.
fn special(dir: &Path) -> Vec<PathBuf> {
    survey(dir)
        .into_iter()
        .filter(|(_, m)| {
            let t = m.file_type();
            !(t.is_file() || t.is_dir() || t.is_symlink()) || m.mode() & 0o7000 != 0
        })
        .map(|(p, _)| p)
        .collect()
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: c is NUL-terminated.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A snapshot holding a setuid file of root's and a FIFO (or a device) is refused before
/// anything is written; one holding only a FIFO, a socket's stand-in, and a directory that
/// inherited setgid is restored without them. Before, pg restore restored special files and
/// bits as `ferry restore` does by default: a root-owned setuid program, in the cluster
/// owner's hands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_files_and_bits_are_never_restored() {
    let scratch = Scratch::new();
    let repo = new_repo().await;
    let pgdata = scratch.0.join("pgdata");
    data_dir(&pgdata);
    std::fs::remove_dir_all(pgdata.join("pg_tblspc/16400")).unwrap();
    let rec = record(&pgdata, Vec::new());

    let suid = pgdata.join("base/5/16390");
    std::fs::write(&suid, b"#!/bin/sh\nid\n").unwrap();
    std::fs::set_permissions(&suid, PermissionsExt::from_mode(0o4755)).unwrap();
    mkfifo(&pgdata.join("global/pipe"));
    let forged = pg_backup(&repo, &pgdata, &rec).await;
    let to = scratch.0.join("forged");
    let e = refused(&repo, &options(&to, forged)).await;
    assert!(e.to_string().contains("16390"), "{e:?}");
    assert!(!to.exists(), "nothing is written");

    // A FIFO and a setgid directory: left out, and dropped.
    std::fs::remove_file(&suid).unwrap();
    let inherited = pgdata.join("base/6");
    std::fs::create_dir(&inherited).unwrap();
    std::fs::set_permissions(&inherited, PermissionsExt::from_mode(0o2700)).unwrap();
    let id = pg_backup(&repo, &pgdata, &rec).await;
    let to = scratch.0.join("fifo");
    restore(repo.clone(), &options(&to, id), Arc::new(Quiet))
        .await
        .unwrap();
    assert!(to.join("base/5/16384").is_file());
    assert!(to.join("base/6").is_dir());
    assert_eq!(special(&to), Vec::<PathBuf>::new());

    // A device node: only root makes one, and only a forger puts one in a data directory.
    if root() {
        std::fs::remove_file(pgdata.join("global/pipe")).unwrap();
        let dev = std::ffi::CString::new(pgdata.join("null").as_os_str().as_bytes()).unwrap();
        // SAFETY: dev is NUL-terminated; 1:3 is /dev/null's device.
        let rc = unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
        assert_eq!(rc, 0);
        let id = pg_backup(&repo, &pgdata, &rec).await;
        let to = scratch.0.join("device");
        let e = refused(&repo, &options(&to, id)).await;
        assert!(e.to_string().contains("a device"), "{e:?}");
        assert!(!to.exists(), "nothing is written");
    }
}

/// Notes, each time the restore writes, every directory of `watch` that holds entries while
/// its group or others may write to it.
struct Watch {
    watch: Vec<PathBuf>,
    open: Mutex<Vec<(PathBuf, u32)>>,
}

impl BackupProgress for Watch {
    fn done(&self, _bytes: u64) {
        for d in &self.watch {
            let mode = std::fs::metadata(d).unwrap().mode() & 0o7777;
            let used = std::fs::read_dir(d).unwrap().next().is_some();
            if used && mode & 0o077 != 0 {
                self.open.lock().unwrap().push((d.clone(), mode));
            }
        }
    }
}

/// An existing data directory and tablespace place a group may write (0770) are made 0700
/// before anything is written into them: before, they stayed 0770 until the restore's end,
/// and a group member could swap in a `postgresql.auto.conf` of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_writable_target_is_private_before_it_is_written() {
    let scratch = Scratch::new();
    let repo = new_repo().await;
    let pgdata = scratch.0.join("pgdata");
    data_dir(&pgdata);
    let space = Tablespace {
        oid: 16400,
        location: "/nowhere/space".into(),
    };
    let id = pg_backup(&repo, &pgdata, &record(&pgdata, vec![space])).await;
    let (to, ts) = (scratch.0.join("to"), scratch.0.join("ts"));
    for d in [&to, &ts] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, PermissionsExt::from_mode(0o770)).unwrap();
    }
    let watch = Arc::new(Watch {
        watch: vec![to.clone(), ts.clone()],
        open: Mutex::new(Vec::new()),
    });
    let opts = RestoreOptions {
        tablespace_map: vec![(16400, ts.clone())],
        ..options(&to, id)
    };
    restore(repo.clone(), &opts, watch.clone()).await.unwrap();
    assert_eq!(*watch.open.lock().unwrap(), Vec::<(PathBuf, u32)>::new());
    assert!(ts.join("PG_15_202209061/5/16385").is_file());
    for d in [&to, &ts] {
        let mode = std::fs::metadata(d).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
}

/// A tablespace location that is a link to nothing, in a directory of another user's
/// (root's, where a link to a removed file was left): before, the restore replaced the link
/// with a directory of its own and, having "made" it, handed it to the cluster's owner
/// without asking whose directory it was made in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tablespace_place_that_is_a_link_to_nothing_is_refused() {
    let scratch = Scratch::new();
    let repo = new_repo().await;
    let pgdata = scratch.0.join("pgdata");
    data_dir(&pgdata);
    let theirs = scratch.0.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    if root() {
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    }
    let gone = scratch.0.join("gone");
    let place = theirs.join("x");
    std::os::unix::fs::symlink(&gone, &place).unwrap();
    let space = Tablespace {
        oid: 16400,
        location: place.to_str().unwrap().into(),
    };
    let id = pg_backup(&repo, &pgdata, &record(&pgdata, vec![space])).await;
    let to = scratch.0.join("to");
    let e = refused(&repo, &options(&to, id)).await;
    assert!(e.to_string().contains("link to nothing"), "{e:?}");
    assert!(!to.exists(), "nothing is written");
    assert!(!gone.exists());
    let m = std::fs::symlink_metadata(&place).unwrap();
    assert!(m.file_type().is_symlink(), "the link is left as it was");
    assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 1);
}

/// `tablespace_map` is made from the places checked, never copied from the record: a map
/// without tablespaces is refused, and so are locations PostgreSQL would read otherwise than
/// ferry wrote them (a carriage return, a backslash) or that are not UTF-8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tablespace_map_holds_only_checked_places() {
    let scratch = Scratch::new();
    let repo = new_repo().await;
    let pgdata = scratch.0.join("pgdata");
    data_dir(&pgdata);
    let to = scratch.0.join("to");

    let mut rec = record(&pgdata, Vec::new());
    rec.tablespace_map = Some("16384 /anywhere\n".into());
    let id = pg_backup(&repo, &pgdata, &rec).await;
    let e = refused(&repo, &options(&to, id)).await;
    assert!(e.to_string().contains("no tablespaces"), "{e:?}");
    assert!(!to.exists(), "nothing is written");

    let places =
        [&b"a\\b"[..], b"a\rb", b"a\xffb"].map(|b| scratch.0.join(std::ffi::OsStr::from_bytes(b)));
    for (i, place) in places.iter().enumerate() {
        let location = match place.to_str() {
            Some(p) => p.to_string(),
            None => "/nowhere/space".into(),
        };
        let space = Tablespace {
            oid: 16400,
            location,
        };
        let id = pg_backup(&repo, &pgdata, &record(&pgdata, vec![space])).await;
        let mut opts = options(&to, id);
        if place.to_str().is_none() {
            opts.tablespace_map = vec![(16400, place.clone())];
        }
        let e = refused(&repo, &opts).await;
        assert!(
            e.to_string().contains("not a plain absolute path"),
            "{i}: {e:?}"
        );
        assert!(!to.exists(), "{i}: nothing is written");
        assert!(!place.exists(), "{i}: no place is made");
    }
}

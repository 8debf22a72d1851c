//! `pg restore` of a backup a password holder forged, into a target local users planted
//! things in: no device, FIFO or setuid bit comes back, a target group members could write
//! is private before anything is written into it, a tablespace place that is a link to
//! nothing is refused, and `tablespace_map` holds only the places checked. On an in-memory
//! store; backups are made as `memory.rs` makes them (`tests/common`). The device and
//! another user's directory need root, as these tests run here; without it those parts are
//! left out.

mod common;

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::{forged_backup, memory_repo, pg_backup, seg, segment, Scratch};
use ferry_pg::layout::BLOCK;
use ferry_pg::record::Tablespace;
use ferry_pg::restore::{restore, RestoreOptions};
use ferry_pg::walview;
use ferry_pg::{PgBackup, Target};
use ferry_repo::archiver::{BackupProgress, Quiet};
use ferry_repo::{Id, Repo};
use ferry_testkit::random_bytes;
use ferry_transfer::Error;

/// Every backup here starts and stops in segment 2.
const WAL: u64 = 2;

fn root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A repository whose archive holds the segment every backup here needs.
async fn new_repo() -> Arc<Repo> {
    new_repo_and_store().await.1
}

/// [`new_repo`], and the store under it.
async fn new_repo_and_store() -> (Arc<ferry_store::memory::MemoryStore>, Arc<Repo>) {
    let (store, repo) = memory_repo().await;
    let n = seg(1, WAL);
    walview::archive(&repo).push(&n, segment(&n)).await.unwrap();
    (store, repo)
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
    PgBackup {
        tablespaces,
        ..common::record(dir, WAL, WAL, 2_000_000)
    }
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
    let scratch = Scratch::new("ferry-pg-hostile");
    let repo = new_repo().await;
    let pgdata = scratch.0.join("pgdata");
    data_dir(&pgdata);
    std::fs::remove_dir_all(pgdata.join("pg_tblspc/16400")).unwrap();
    let rec = record(&pgdata, Vec::new());

    let suid = pgdata.join("base/5/16390");
    std::fs::write(&suid, b"#!/bin/sh\nid\n").unwrap();
    std::fs::set_permissions(&suid, PermissionsExt::from_mode(0o4755)).unwrap();
    mkfifo(&pgdata.join("global/pipe"));
    let forged = forged_backup(&repo, &pgdata, &rec).await;
    let to = scratch.0.join("forged");
    let e = refused(&repo, &options(&to, forged)).await;
    assert!(e.to_string().contains("16390"), "{e:?}");
    assert!(!to.exists(), "nothing is written");

    // A FIFO and a setgid directory: left out, and dropped.
    std::fs::remove_file(&suid).unwrap();
    let inherited = pgdata.join("base/6");
    std::fs::create_dir(&inherited).unwrap();
    std::fs::set_permissions(&inherited, PermissionsExt::from_mode(0o2700)).unwrap();
    let id = forged_backup(&repo, &pgdata, &rec).await;
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
        let id = forged_backup(&repo, &pgdata, &rec).await;
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
    let scratch = Scratch::new("ferry-pg-hostile");
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
    let scratch = Scratch::new("ferry-pg-hostile");
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
    let scratch = Scratch::new("ferry-pg-hostile");
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

/// A restore as root gives every entry of the data directory and of a tablespace to the
/// cluster's owner, whoever the snapshot names: before, a forged snapshot's owners were
/// restored as stored, and could hand `pg_hba.conf` (or a tablespace's files) to another
/// user of the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_entry_is_the_cluster_owners_whoever_the_snapshot_names() {
    if !root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "owners need a root restore"
        );
        return;
    }
    let scratch = Scratch::new("ferry-pg-hostile");
    let repo = new_repo().await;
    let pgdata = scratch.0.join("pgdata");
    data_dir(&pgdata);
    std::fs::write(pgdata.join("pg_hba.conf"), b"local all all peer\n").unwrap();
    let cluster = (70, 70);
    for (p, _) in survey(&pgdata) {
        std::os::unix::fs::lchown(&p, Some(cluster.0), Some(cluster.1)).unwrap();
    }
    std::os::unix::fs::chown(&pgdata, Some(cluster.0), Some(cluster.1)).unwrap();
    let theirs = [
        ("pg_hba.conf", 4242),
        ("base/5", 4243),
        ("pg_tblspc/16400/PG_15_202209061/5/16385", 4244),
    ];
    for (p, uid) in theirs {
        std::os::unix::fs::chown(pgdata.join(p), Some(uid), Some(uid)).unwrap();
    }
    let space = Tablespace {
        oid: 16400,
        location: "/nowhere/space".into(),
    };
    let rec = record(&pgdata, vec![space]);
    assert_eq!(rec.owner, cluster);
    let id = pg_backup(&repo, &pgdata, &rec).await;
    let (to, ts) = (scratch.0.join("to"), scratch.0.join("ts"));
    let opts = RestoreOptions {
        tablespace_map: vec![(16400, ts.clone())],
        ..options(&to, id)
    };
    restore(repo.clone(), &opts, Arc::new(Quiet)).await.unwrap();
    assert!(to.join("pg_hba.conf").is_file());
    assert!(ts.join("PG_15_202209061/5/16385").is_file());
    let mut all = survey(&to);
    all.extend(survey(&ts));
    let others: Vec<_> = all
        .iter()
        .filter(|(_, m)| (m.uid(), m.gid()) != cluster)
        .map(|(p, m)| (p.clone(), m.uid()))
        .collect();
    assert_eq!(others, Vec::<(PathBuf, u32)>::new());
}

/// A restore that fails after it opened the tablespaces leaves each as it found it: one that
/// was there empty, at its old mode and owner (before, at the 0700 the restore had made it,
/// and on a root restore the cluster owner's), and one the restore made, gone (before, left
/// empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_restore_puts_tablespace_places_back() {
    let scratch = Scratch::new("ferry-pg-hostile");
    let (store, repo) = new_repo_and_store().await;
    let pgdata = scratch.0.join("pgdata");
    data_dir(&pgdata);
    if root() {
        // The cluster's owner is not root, whose the operator's place is.
        for (p, _) in survey(&pgdata) {
            std::os::unix::fs::lchown(&p, Some(70), Some(70)).unwrap();
        }
        std::os::unix::fs::chown(&pgdata, Some(70), Some(70)).unwrap();
    }
    let space = Tablespace {
        oid: 16400,
        location: "/nowhere/space".into(),
    };
    let id = pg_backup(&repo, &pgdata, &record(&pgdata, vec![space])).await;
    // The tablespace's one relation block, damaged in its pack.
    let block = std::fs::read(pgdata.join("pg_tblspc/16400/PG_15_202209061/5/16385")).unwrap();
    let (index, _, _) = repo.load_index().await.unwrap();
    let loc = index.get(&repo.key().blob_id(&block)).expect("indexed");
    let pack = repo.pack_path(&index.pack(loc.pack));
    assert!(store.tamper(&pack, |d| d[(loc.offset + loc.len / 2) as usize] ^= 1));

    let (to, ts, new) = (
        scratch.0.join("to"),
        scratch.0.join("ts"),
        scratch.0.join("new"),
    );
    std::fs::create_dir(&ts).unwrap();
    std::fs::set_permissions(&ts, PermissionsExt::from_mode(0o750)).unwrap();
    for place in [&ts, &new] {
        let opts = RestoreOptions {
            tablespace_map: vec![(16400, place.clone())],
            ..options(&to, id)
        };
        let e = refused(&repo, &opts).await;
        assert!(
            matches!(&e, Error::Checksum(m) if m.contains("16385")),
            "{e:?}"
        );
        assert!(!to.exists(), "the data directory made is removed again");
    }
    assert_eq!(std::fs::read_dir(&ts).unwrap().count(), 0);
    let mode = std::fs::metadata(&ts).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o750, "its mode put back");
    let uid = std::fs::metadata(&ts).unwrap().uid();
    // SAFETY: geteuid cannot fail.
    assert_eq!(uid, unsafe { libc::geteuid() }, "its owner put back");
    assert!(!new.exists(), "a place the restore made is removed again");
}

//! The repository's logic on an in-memory store: init and open, backup and restore, the
//! parent snapshot that spares unchanged files, forget, prune, check, and damage found.
//! No disk for the repository, no server: the whole file runs in seconds.

use std::collections::HashSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ferry_repo::archiver::{Archiver, Outcome, Quiet};
use ferry_repo::backup::Backup;
use ferry_repo::exclude::Exclude;
use ferry_repo::pack::BlobKind;
use ferry_repo::restorer::{self, Options};
use ferry_repo::{checker, forget, prune, Id, Repo, Snapshot};
use ferry_store::memory::MemoryStore;
use ferry_store::Store;
use ferry_testkit::random_bytes;
use ferry_transfer::{Class, Engine, EngineConfig, Error, Remote};

const PASSWORD: &[u8] = b"correct horse";
/// The repository's prefix in the store: not the store's root, so that every key is joined.
const ROOT: &str = "repo";

/// A scratch directory, removed when dropped (a failed assertion included).
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(ferry_testkit::unique(tag));
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn remote(store: &Arc<MemoryStore>) -> Remote {
    let store: Arc<dyn Store> = store.clone();
    Engine::new(EngineConfig::default()).remote(store, Class::Bulk)
}

/// A scratch directory with an empty `src` in it, removed when the test ends.
fn scratch_with_src() -> (Scratch, PathBuf) {
    let scratch = Scratch::new("ferry-repo-mem");
    let src = scratch.0.join("src");
    std::fs::create_dir_all(&src).unwrap();
    (scratch, src)
}

async fn new_repo() -> (Arc<MemoryStore>, Arc<Repo>) {
    let store = Arc::new(MemoryStore::new());
    let repo = Repo::init(remote(&store), ROOT, PASSWORD, ferry_repo::repo::FORMAT)
        .await
        .unwrap();
    (store, Arc::new(repo))
}

async fn backup(repo: &Arc<Repo>, dir: &Path) -> Outcome {
    let out = Backup::paths(
        &[dir.to_path_buf()],
        vec!["test".into()],
        Exclude::default(),
    )
    .unwrap()
    .run(repo, Arc::new(Quiet))
    .await
    .unwrap();
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    out
}

/// The keys in the store under `kind/` of the repository.
fn keys_of(store: &MemoryStore, kind: &str) -> Vec<String> {
    let prefix = format!("{ROOT}/{kind}/");
    store
        .keys()
        .into_iter()
        .filter(|k| k.starts_with(&prefix))
        .collect()
}

/// The lock files left in the store: none once an operation has returned.
fn locks(store: &MemoryStore) -> Vec<String> {
    keys_of(store, "locks")
}

/// The keys of every pack in the store.
fn packs(store: &MemoryStore) -> Vec<String> {
    keys_of(store, "data")
}

/// Where the file `plain` (one chunk: at most the repository's smallest chunk) is stored:
/// its pack's key, and its sealed blob's offset and length there.
async fn blob_of(repo: &Repo, plain: &[u8]) -> (String, u32, u32) {
    assert!(plain.len() as u32 <= repo.config.chunk_min, "one chunk");
    let (index, _, errs) = repo.load_index().await.unwrap();
    assert!(errs.is_empty(), "{errs:?}");
    let loc = index.get(&repo.key().blob_id(plain)).expect("indexed");
    (repo.pack_path(&index.pack(loc.pack)), loc.offset, loc.len)
}

/// Every data blob the index names.
async fn data_blobs(repo: &Repo) -> HashSet<Id> {
    let (index, _, errs) = repo.load_index().await.unwrap();
    assert!(errs.is_empty(), "{errs:?}");
    index
        .iter()
        .filter(|(_, loc)| loc.kind == BlobKind::Data)
        .map(|(id, _)| *id)
        .collect()
}

/// The id of the listing of directory `dir` in snapshot `snap`.
async fn listing_id(repo: &Repo, snap: &Id, dir: &Path) -> Id {
    let (_, nodes) = repo
        .list_dir(&snap.hex(), dir.parent().unwrap())
        .await
        .unwrap();
    let name = dir.file_name().unwrap().as_encoded_bytes();
    let node = nodes.iter().find(|n| n.name_bytes() == name).unwrap();
    node.subtree.expect("a directory")
}

/// Where the restore puts `src`: below the target, at its absolute path.
fn restored(target: &Path, src: &Path) -> PathBuf {
    target.join(src.strip_prefix("/").unwrap())
}

/// Asserts that `b` holds what `a` holds: kinds, modes, sizes, mtimes, bytes, link targets.
fn assert_same_tree(a: &Path, b: &Path) {
    let (ma, mb) = (a.symlink_metadata().unwrap(), b.symlink_metadata().unwrap());
    let what = a.display();
    assert_eq!(ma.file_type(), mb.file_type(), "{what}: kind");
    if ma.file_type().is_symlink() {
        assert_eq!(
            std::fs::read_link(a).unwrap(),
            std::fs::read_link(b).unwrap(),
            "{what}: link target"
        );
        return;
    }
    assert_eq!(ma.mode() & 0o7777, mb.mode() & 0o7777, "{what}: mode");
    assert_eq!(
        (ma.mtime(), ma.mtime_nsec()),
        (mb.mtime(), mb.mtime_nsec()),
        "{what}: mtime"
    );
    if ma.is_file() {
        assert_eq!(ma.len(), mb.len(), "{what}: size");
        assert!(ferry_testkit::same_file(a, b), "{what}: content");
        return;
    }
    let names = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let (na, nb) = (names(a), names(b));
    assert_eq!(na, nb, "{what}: entries");
    for n in na {
        assert_same_tree(&a.join(&n), &b.join(&n));
    }
}

/// A directory with a bit of everything a backup must bring back: text, an empty file,
/// a file of several chunks, an executable in a private subdirectory, a symlink and a
/// dangling one. Five regular files.
fn corpus(src: &Path) {
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("small.txt"), b"hello, ferry\n".repeat(100)).unwrap();
    std::fs::write(src.join("empty"), b"").unwrap();
    std::fs::write(src.join("big.bin"), random_bytes(3 << 20, 1)).unwrap();
    std::fs::write(src.join("sub/run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    std::fs::write(src.join("sub/notes"), random_bytes(10_000, 2)).unwrap();
    std::fs::set_permissions(src.join("sub/run.sh"), PermissionsExt::from_mode(0o751)).unwrap();
    std::fs::set_permissions(src.join("sub/notes"), PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::set_permissions(src.join("sub"), PermissionsExt::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink("small.txt", src.join("link")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/target", src.join("dangling")).unwrap();
}

const FILES: u64 = 5;

/// Restores the whole of `snap` into `target` with the default options.
async fn restore_all(
    repo: &Arc<Repo>, snap: &Snapshot, target: &Path,
) -> ferry_transfer::Result<restorer::Restored> {
    restorer::restore(
        repo.clone(),
        snap,
        target,
        &Options::default(),
        Arc::new(Quiet),
    )
    .await
}

/// The ids of the repository's snapshots, oldest first.
async fn snapshot_ids(repo: &Repo) -> Vec<Id> {
    let snaps = repo.snapshots().await.unwrap();
    snaps.into_iter().map(|s| s.0).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_opens_with_its_password_only() {
    let (store, repo) = new_repo().await;
    let again = Repo::init(remote(&store), ROOT, b"other", ferry_repo::repo::FORMAT).await;
    assert!(matches!(again, Err(Error::AlreadyExists(_))), "{again:?}");

    let opened = Repo::open(remote(&store), ROOT, PASSWORD, None)
        .await
        .unwrap();
    assert_eq!(opened.config.id, repo.config.id);
    assert_eq!(opened.opened_with(), repo.opened_with());
    assert_eq!(opened.keys().await.unwrap().len(), 1);

    let wrong = Repo::open(remote(&store), ROOT, b"wrong", None).await;
    assert!(matches!(wrong, Err(Error::Denied(_))), "{wrong:?}");
    let elsewhere = Repo::open(remote(&store), "not-there", PASSWORD, None).await;
    assert!(
        matches!(&elsewhere, Err(Error::Invalid(m)) if m.contains("not a ferry repository")),
        "{elsewhere:?}"
    );
    // A second key opens the same repository; the first still does.
    repo.add_key(b"second").await.unwrap();
    let second = Repo::open(remote(&store), ROOT, b"second", None)
        .await
        .unwrap();
    assert_eq!(second.config.id, repo.config.id);
    assert_ne!(second.opened_with(), repo.opened_with());
    // A store writer plants key files (each would cost an Argon2 run): at most 20 are tried.
    // These sort after the real ones, which still open it.
    let real = keys_of(&store, "keys");
    let last = real
        .iter()
        .max()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    let mut planted = 0;
    for i in 0.. {
        let body = format!("{{\"planted\": {i}}}");
        let id = Id::of(body.as_bytes()).to_string();
        if id > last {
            let key = format!("{ROOT}/keys/{id}");
            store
                .put(&key, body.into(), &Default::default())
                .await
                .unwrap();
            planted += 1;
        }
        if planted == 25 {
            break;
        }
    }
    let wrong = Repo::open(remote(&store), ROOT, b"wrong", None).await;
    assert!(
        matches!(&wrong, Err(Error::Denied(m)) if m.contains("first 20 of 27")),
        "{wrong:?}"
    );
    Repo::open(remote(&store), ROOT, b"second", None)
        .await
        .unwrap();
    // Nothing of the repository is stored in the clear but its marker and key files.
    for k in store.keys() {
        let body = store.bytes(&k).unwrap();
        let marker = k == format!("{ROOT}/ferry-repo");
        let key_file = k.starts_with(&format!("{ROOT}/keys/"));
        if !marker && !key_file {
            assert!(
                serde_json::from_slice::<serde_json::Value>(&body).is_err(),
                "{k} is plaintext JSON"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_restores_exactly_and_the_next_one_reads_only_changes() {
    // The source's directory is touched by nothing else (restores go to another), so that
    // every directory from the source down stays as it was between backups.
    let (from, to) = (
        Scratch::new("ferry-repo-mem"),
        Scratch::new("ferry-repo-mem"),
    );
    let src = from.0.join("src");
    corpus(&src);
    // A parent's file is trusted unread only when its ctime lies two seconds before the
    // parent began (ctime cannot be set back): let the corpus age that long.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (store, repo) = new_repo().await;

    let first = backup(&repo, &src).await;
    let s = &first.snapshot.summary;
    assert_eq!(first.snapshot.parent, None);
    assert_eq!((s.files_read, s.files_unchanged), (FILES, 0), "{s:?}");
    let total = (1300 + (3 << 20) + 18 + 10_000) as u64;
    assert_eq!((s.total_bytes, s.bytes_read), (total, total), "{s:?}");
    assert!(s.blobs_new >= 5 && s.bytes_stored > 0, "{s:?}");
    assert_eq!(first.snapshot.paths, [src.display().to_string()]);
    assert!(locks(&store).is_empty(), "{:?}", locks(&store));

    // Restored: the same bytes, modes, mtimes and links.
    let target = to.0.join("target");
    let r = restore_all(&repo, &first.snapshot, &target).await.unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!((r.files, r.bytes), (FILES, total));
    assert_same_tree(&src, &restored(&target, &src));
    assert!(locks(&store).is_empty(), "{:?}", locks(&store));

    // Nothing changed: the parent is found, no file is read, no data is stored, and the
    // source's directory keeps its listing's id. (The directories above it, /tmp say, may
    // have changed meanwhile: their listings are stored again.)
    let data_before = data_blobs(&repo).await;
    let second = backup(&repo, &src).await;
    let s = &second.snapshot.summary;
    assert_eq!(second.snapshot.parent, Some(first.id));
    assert_eq!((s.files_read, s.files_unchanged), (0, FILES), "{s:?}");
    assert_eq!((s.bytes_read, s.total_bytes), (0, total), "{s:?}");
    assert_eq!(data_blobs(&repo).await, data_before, "no data stored");
    assert_eq!(
        listing_id(&repo, &second.id, &src).await,
        listing_id(&repo, &first.id, &src).await
    );

    // One file changed: only it is read, and only its new chunk is stored.
    std::fs::write(src.join("small.txt"), b"changed\n").unwrap();
    let third = backup(&repo, &src).await;
    let s = &third.snapshot.summary;
    assert_eq!(third.snapshot.parent, Some(second.id));
    assert_eq!((s.files_read, s.files_unchanged), (1, FILES - 1), "{s:?}");
    assert_eq!(s.bytes_read, 8, "{s:?}");
    let new: Vec<Id> = data_blobs(&repo)
        .await
        .difference(&data_before)
        .copied()
        .collect();
    assert_eq!(new, [repo.key().blob_id(b"changed\n")]);
    assert_ne!(
        listing_id(&repo, &third.id, &src).await,
        listing_id(&repo, &second.id, &src).await
    );
    let snaps = snapshot_ids(&repo).await;
    assert_eq!(snaps, [first.id, second.id, third.id], "oldest first");

    // The latest snapshot restores the change; the first one's restore kept the original.
    let target2 = to.0.join("target2");
    restore_all(&repo, &third.snapshot, &target2).await.unwrap();
    assert_same_tree(&src, &restored(&target2, &src));
    let old = restored(&target, &src).join("small.txt");
    assert_eq!(std::fs::read(old).unwrap(), b"hello, ferry\n".repeat(100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_then_prune_frees_what_no_kept_snapshot_uses() {
    let (scratch, src) = scratch_with_src();
    let (store, repo) = new_repo().await;
    let old = random_bytes(200_000, 10);
    let kept = random_bytes(150_000, 11);
    let shared = random_bytes(100_000, 12);
    std::fs::write(src.join("shared"), &shared).unwrap();
    std::fs::write(src.join("data"), &old).unwrap();
    let first = backup(&repo, &src).await;
    std::fs::write(src.join("data"), &kept).unwrap();
    let second = backup(&repo, &src).await;
    let (old_pack, _, _) = blob_of(&repo, &old).await;
    let (kept_pack, _, _) = blob_of(&repo, &kept).await;
    assert_ne!(old_pack, kept_pack, "each backup wrote its own data pack");
    let packs_before = packs(&store);

    let none = forget::forget(
        repo.clone(),
        &forget::Policy::default(),
        &Default::default(),
    )
    .await;
    assert!(matches!(none, Err(Error::Invalid(_))), "{none:?}");
    let policy = forget::Policy {
        last: Some(1),
        ..Default::default()
    };
    let f = forget::forget(repo.clone(), &policy, &Default::default())
        .await
        .unwrap();
    assert_eq!((f.kept, f.removed), (vec![second.id], vec![first.id]));
    let left = snapshot_ids(&repo).await;
    assert_eq!(left, [second.id]);
    // Forget removes snapshots only: the data waits for prune.
    assert_eq!(packs(&store), packs_before);

    // The first backup packed the shared file with the forgotten one: that pack is mostly
    // unused, so prune rewrites it, and a dry run must count that as the real prune does.
    let (shared_pack, _, _) = blob_of(&repo, &shared).await;
    assert_eq!(
        shared_pack, old_pack,
        "one pack for the first backup's files"
    );
    let dry = prune::prune(repo.clone(), true).await.unwrap();
    assert_eq!(packs(&store), packs_before, "a dry run deleted packs");
    let p = prune::prune(repo.clone(), false).await.unwrap();
    assert!(p.packs_deleted >= 1, "{p:?}");
    assert_eq!(p.packs_rewritten, 1, "{p:?}");
    assert_eq!(
        (dry.packs_deleted, dry.packs_rewritten, dry.bytes_freed),
        (p.packs_deleted, p.packs_rewritten, p.bytes_freed),
        "dry {dry:?} vs real {p:?}"
    );
    let old_size = store.bytes(&old_pack).map(|b| b.len()).unwrap_or(0);
    assert_eq!(old_size, 0, "the forgotten file's pack is gone");
    assert!(p.bytes_freed >= 200_000, "{p:?}");
    assert!(
        store.bytes(&kept_pack).is_some(),
        "the kept file's pack stays"
    );
    assert!(packs(&store).len() < packs_before.len());
    assert!(locks(&store).is_empty(), "{:?}", locks(&store));
    let (index, _, _) = repo.load_index().await.unwrap();
    assert!(!index.has(&repo.key().blob_id(&old)));
    assert!(index.has(&repo.key().blob_id(&kept)));
    assert!(index.has(&repo.key().blob_id(&shared)));

    // What is left is whole, and still restores.
    let report = checker::check(&repo, true).await.unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert_eq!(report.snapshots, 1);
    assert_eq!(report.packs_read, report.packs);
    let target = scratch.0.join("target");
    let r = restore_all(&repo, &second.snapshot, &target).await.unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_same_tree(&src, &restored(&target, &src));

    // A second prune finds nothing more to do.
    let again = prune::prune(repo.clone(), false).await.unwrap();
    assert_eq!(
        (again.packs_deleted, again.bytes_freed),
        (0, 0),
        "{again:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_is_reported_by_check_and_refused_by_restore() {
    let (scratch, src) = scratch_with_src();
    let (store, repo) = new_repo().await;
    let a = random_bytes(200_000, 20);
    let b = random_bytes(200_000, 21);
    std::fs::write(src.join("a.bin"), &a).unwrap();
    std::fs::write(src.join("b.bin"), &b).unwrap();
    let out = backup(&repo, &src).await;
    let clean = checker::check(&repo, true).await.unwrap();
    assert!(clean.errors.is_empty(), "{:?}", clean.errors);
    assert!(clean.warnings.is_empty(), "{:?}", clean.warnings);
    assert_eq!(clean.snapshots, 1);

    // One byte of a.bin's sealed chunk flipped in its pack, size unchanged.
    let (pack, off, len) = blob_of(&repo, &a).await;
    assert!(store.tamper(&pack, |d| d[(off + len / 2) as usize] ^= 0x01));
    let report = checker::check(&repo, true).await.unwrap();
    let pack_id = pack.rsplit('/').next().unwrap();
    let blob = repo.key().blob_id(&a).short();
    assert!(
        report
            .errors
            .iter()
            .any(|e| e.contains(&pack_id[..8]) && e.contains("does not match its name")),
        "{:?}",
        report.errors
    );
    assert!(
        report.errors.iter().any(|e| e.contains(&blob)),
        "the damaged blob is named: {:?}",
        report.errors
    );

    // Restore refuses the damaged file by name, writes nothing of it, and restores the rest.
    let target = scratch.0.join("target");
    let r = restore_all(&repo, &out.snapshot, &target).await.unwrap();
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert!(r.errors[0].contains("a.bin"), "{:?}", r.errors);
    let dst = restored(&target, &src);
    assert!(
        !dst.join("a.bin").exists(),
        "a damaged file is never written"
    );
    assert_eq!(std::fs::read(dst.join("b.bin")).unwrap(), b);
    let stray: Vec<_> = std::fs::read_dir(&dst)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(stray, ["b.bin"], "no temp file left behind");

    // A truncated pack shows without reading the data.
    assert!(store.tamper(&pack, |d| {
        d.pop();
    }));
    let report = checker::check(&repo, false).await.unwrap();
    assert!(
        report
            .errors
            .iter()
            .any(|e| e.contains(&pack_id[..8]) && e.contains("truncated")),
        "{:?}",
        report.errors
    );

    // A damaged snapshot file: listing snapshots refuses it, check names it.
    let snap_key = repo.path(&format!("snapshots/{}", out.id));
    assert!(store.tamper(&snap_key, |d| d[40] ^= 0x80));
    let listed = repo.snapshots().await;
    assert!(matches!(listed, Err(Error::Checksum(_))), "{listed:?}");
    let report = checker::check(&repo, false).await.unwrap();
    assert_eq!(report.snapshots, 0);
    assert!(
        report.errors.iter().any(|e| e.contains(&out.id.hex())),
        "{:?}",
        report.errors
    );
    // A prune refuses to work on a damaged repository rather than lose data.
    let p = prune::prune(repo.clone(), false).await;
    assert!(
        matches!(&p, Err(Error::Invalid(m)) if m.contains("damaged repository")),
        "{p:?}"
    );
    assert!(locks(&store).is_empty(), "{:?}", locks(&store));
}

/// A policy that cuts every file in fixed blocks (so that each read is seen) and wants `g`
/// and `g/z` last, recording the order files are read in.
struct Order {
    root: PathBuf,
    seen: std::sync::Mutex<Vec<PathBuf>>,
}

impl ferry_repo::policy::Policy for Order {
    fn chunking(&self, _: &Path) -> ferry_repo::policy::Chunking {
        ferry_repo::policy::Chunking::Fixed(4096)
    }
    fn last(&self, path: &Path) -> bool {
        let rel = path.strip_prefix(&self.root).unwrap();
        rel == Path::new("g") || rel == Path::new("g/z")
    }
    fn inspect(&self, path: &Path, offset: u64, _: &[u8]) {
        if offset == 0 {
            let rel = path.strip_prefix(&self.root).unwrap().to_path_buf();
            self.seen.lock().unwrap().push(rel);
        }
    }
}

/// An entry the policy wants last, under a directory it wants last, is read after every
/// other file of the tree (PostgreSQL's global/pg_control from a standby), and the tree
/// still lists every entry by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_policy_wants_last_is_read_after_everything_else() {
    let scratch = Scratch::new("ferry-repo-last");
    let root = scratch.0.join("data");
    for d in ["a", "g", "m/n", "z"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    for (i, f) in ["a/1", "a/2", "g/a", "g/z", "g/zz", "m/n/3", "z/4", "5"]
        .iter()
        .enumerate()
    {
        std::fs::write(root.join(f), random_bytes(20_000, i as u64)).unwrap();
    }
    let (_store, repo) = new_repo().await;
    let (index, trees) = ferry_repo::backup::starting_point(&repo, false)
        .await
        .unwrap();
    let order = Arc::new(Order {
        root: root.clone(),
        seen: Default::default(),
    });
    let arch = ferry_repo::archiver::Archiver::with_policy(
        repo.clone(),
        index,
        trees,
        Arc::new(Quiet),
        order.clone(),
    );
    let tree = arch.save_root(&root, None).await.unwrap();
    let seen = order.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 8, "{seen:?}");
    assert_eq!(seen.last().unwrap(), Path::new("g/z"), "{seen:?}");
    let out = arch
        .commit(tree, vec![root.display().to_string()], None, vec![], None)
        .await
        .unwrap();
    let back = scratch.0.join("back");
    restore_all(&repo, &out.snapshot, &back).await.unwrap();
    for f in ["a/1", "g/a", "g/z", "g/zz", "m/n/3", "z/4", "5"] {
        assert_eq!(
            std::fs::read(back.join(f)).unwrap(),
            std::fs::read(root.join(f)).unwrap()
        );
    }
}

/// A prune killed after writing its packs and index, before removing the old index, leaves
/// blobs that two packs hold and two indexes list: the repository is whole, and check must
/// say so (it once sized each pack by the blobs located in it, one pack per blob, and called
/// intact packs truncated).
#[tokio::test]
async fn blobs_that_two_packs_hold_are_no_damage() {
    let (store, repo) = new_repo().await;
    let (_scratch, src) = scratch_with_src();
    for i in 0..40u64 {
        std::fs::write(src.join(format!("f{i}")), random_bytes(4096, i)).unwrap();
    }
    backup(&repo, &src).await;
    let (index, _, errors) = repo.load_index().await.unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    // Every pack copied under another id and listed again by an index of its own, as a
    // prune's copies are.
    let mut copies = Vec::new();
    for (i, (pack, entries)) in index.by_pack().into_iter().enumerate() {
        let copy = Id([0xC0 ^ i as u8; 32]);
        let bytes = store.bytes(&repo.pack_path(&pack)).expect("pack stored");
        Store::put(&*store, &repo.pack_path(&copy), bytes, &Default::default())
            .await
            .unwrap();
        copies.push((copy, entries));
    }
    let blobs: usize = copies.iter().map(|(_, e)| e.len()).sum();
    assert!(blobs >= 40, "only {blobs} blobs");
    let plain = ferry_repo::index::encode(&copies);
    repo.save_file(ferry_repo::crypto::Kind::Index, &plain)
        .await
        .unwrap();
    let report = checker::check(&repo, false).await.unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.packs, 2 * copies.len());
}

/// A user who owns a directory being backed up swaps its entries between the listing and
/// the read: `f` for another file (its bytes would be stored under `f`'s owner and mode,
/// setuid bits and all, or `f`'s under the other's), `g` for a FIFO (a read would block the
/// backup for good). Each is left out with an error; the backup ends; nothing of the
/// swapped-in file is stored.
struct Swapper {
    root: PathBuf,
}

impl ferry_repo::policy::Policy for Swapper {
    fn pick(&self, path: &Path, _: &ferry_repo::tree::Node) -> ferry_repo::policy::Pick {
        let rel = path.strip_prefix(&self.root).unwrap();
        if rel == Path::new("d/f") {
            let other = self.root.join("other");
            std::fs::write(&other, b"OTHER: not the file listed").unwrap();
            std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o4755)).unwrap();
            std::fs::rename(&other, path).unwrap();
        }
        if rel == Path::new("e") {
            // A directory swapped for a link to one its owner could never read.
            std::fs::rename(path, self.root.join("e-was")).unwrap();
            std::os::unix::fs::symlink(self.root.join("../secret"), path).unwrap();
        }
        if rel == Path::new("d/g") {
            std::fs::remove_file(path).unwrap();
            let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        }
        ferry_repo::policy::Pick::Take
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_swapped_after_the_listing_are_left_out() {
    let scratch = Scratch::new("ferry-repo-swap");
    let root = scratch.0.join("data");
    std::fs::create_dir_all(root.join("d")).unwrap();
    std::fs::write(root.join("d/f"), b"MINE").unwrap();
    std::fs::write(root.join("d/g"), b"a file, then a FIFO").unwrap();
    std::fs::write(root.join("d/h"), b"left alone").unwrap();
    std::fs::create_dir_all(root.join("e")).unwrap();
    std::fs::create_dir_all(scratch.0.join("secret")).unwrap();
    std::fs::write(scratch.0.join("secret/key"), b"ROOT ONLY").unwrap();
    let (_store, repo) = new_repo().await;
    let (index, trees) = ferry_repo::backup::starting_point(&repo, false)
        .await
        .unwrap();
    let arch = ferry_repo::archiver::Archiver::with_policy(
        repo.clone(),
        index,
        trees,
        Arc::new(Quiet),
        Arc::new(Swapper { root: root.clone() }),
    );
    // A build that opens the FIFO blocks there: a minute on, a writer comes and goes so that
    // such a build fails this test instead of hanging it.
    let fifo = root.join("d/g");
    std::thread::spawn(move || {
        use std::os::unix::fs::OpenOptionsExt;
        std::thread::sleep(Duration::from_secs(60));
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo);
    });
    let tree = tokio::time::timeout(Duration::from_secs(120), arch.save_root(&root, None))
        .await
        .expect("the backup hung on a FIFO swapped in for a file")
        .unwrap();
    let out = arch
        .commit(tree, vec![root.display().to_string()], None, vec![], None)
        .await
        .unwrap();
    assert_eq!(out.errors.len(), 3, "{:?}", out.errors);
    assert!(
        out.errors
            .iter()
            .all(|e| e.contains("not the file it listed")
                || e.contains("not the directory it listed")),
        "{:?}",
        out.errors
    );
    let back = scratch.0.join("back");
    restore_all(&repo, &out.snapshot, &back).await.unwrap();
    let d = back.join("d");
    assert_eq!(std::fs::read(d.join("h")).unwrap(), b"left alone");
    for gone in ["f", "g"] {
        assert!(!d.join(gone).exists(), "{gone} was stored");
    }
    assert!(!back.join("e").exists(), "the swapped directory was stored");
}

/// A password holder (an append-only client, say) plants a snapshot whose file names an
/// honest directory listing as its content. That listing was taken as used before any
/// directory reached it, never walked, and what only it held looked unused: prune deleted
/// it. Now trees are walked whatever files name, and check names the forgery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_naming_a_directory_listing_hides_nothing_from_prune() {
    use ferry_repo::blob::Trees;
    let (_store, repo) = new_repo().await;
    let (_scratch, src) = scratch_with_src();
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    let only = random_bytes(300_000, 41);
    std::fs::write(src.join("a/b/only-here"), &only).unwrap();
    let honest = backup(&repo, &src).await;
    let listing = listing_id(&repo, &honest.id, &src.join("a/b")).await;
    let (index, _) = repo.index().await.unwrap();
    let index = Arc::new(index);
    let nodes = Trees::default()
        .get(&repo, &index, &listing)
        .await
        .unwrap()
        .nodes;
    let mut forged = nodes[0].clone();
    forged.content = vec![listing];
    let arch = Archiver::new(repo.clone(), index, Trees::default(), Arc::new(Quiet));
    let root = arch.save_tree(vec![forged]).await.unwrap();
    arch.commit(root, vec!["/forged".into()], None, Vec::new(), None)
        .await
        .unwrap();

    let report = checker::check(&repo, false).await.unwrap();
    assert!(
        report
            .errors
            .iter()
            .any(|e| e.contains("is a directory listing")),
        "{:?}",
        report.errors
    );
    // Prune refuses the damaged repository or keeps what the honest snapshot uses; either
    // way the honest snapshot restores whole.
    let _ = prune::prune(repo.clone(), false).await;
    let (_t, target) = scratch_with_src();
    restore_all(&repo, &honest.snapshot, &target).await.unwrap();
    assert_eq!(
        std::fs::read(restored(&target, &src).join("a/b/only-here")).unwrap(),
        only
    );
}

/// A store that fails for a moment says nothing about the packs: repair index leaves the
/// index as it was, instead of indexing none of them and deleting the old index files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_index_changes_nothing_when_reads_fail() {
    let (store, repo) = new_repo().await;
    let (_scratch, src) = scratch_with_src();
    std::fs::write(src.join("f"), random_bytes(200_000, 43)).unwrap();
    backup(&repo, &src).await;
    let before = keys_of(&store, "index");
    store.refuse_ranges(true);
    let r = ferry_repo::repair::repair_index(repo.clone()).await;
    store.refuse_ranges(false);
    assert!(r.is_err(), "{r:?}");
    assert_eq!(keys_of(&store, "index"), before, "the index changed");
    let report = checker::check(&repo, false).await.unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
}

/// A password holder (an append-only client) plants index files that place every blob in
/// packs the store lacks (as an index file put back after a prune would): the index keeps
/// the copies the store holds, so the honest snapshot restores whole at once, prune runs and
/// deletes no real pack, and `repair index` leaves a repository that checks clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_files_naming_packs_the_store_lacks_decide_nothing() {
    use ferry_repo::crypto::Kind;
    let (store, repo) = new_repo().await;
    let (_scratch, src) = scratch_with_src();
    let data = random_bytes(3 << 20, 47);
    std::fs::write(src.join("f"), &data).unwrap();
    let honest = backup(&repo, &src).await;
    let (index, _, _) = repo.load_index().await.unwrap();
    let real = index.by_pack();
    for i in 0..8u8 {
        // File content only: the listings stay readable, and prune gets to decide.
        let fake: Vec<_> = real
            .iter()
            .map(|(p, e)| {
                let data: Vec<_> = e
                    .iter()
                    .filter(|e| e.kind == BlobKind::Data)
                    .cloned()
                    .collect();
                (Id::of(&[p.0.as_slice(), &[i]].concat()), data)
            })
            .collect();
        repo.save_file(Kind::Index, &ferry_repo::index::encode(&fake))
            .await
            .unwrap();
    }
    let before = packs(&store);
    let (_t, target) = scratch_with_src();
    restore_all(&repo, &honest.snapshot, &target).await.unwrap();
    assert_eq!(
        std::fs::read(restored(&target, &src).join("f")).unwrap(),
        data
    );
    prune::prune(repo.clone(), false).await.unwrap();
    assert_eq!(packs(&store), before, "a real pack went");
    ferry_repo::repair::repair_index(repo.clone())
        .await
        .unwrap();
    let report = checker::check(&repo, true).await.unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
}

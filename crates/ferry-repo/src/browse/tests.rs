//! The walks on an in-memory repository: a listing both snapshots share is never read by
//! `diff`; `find` reads every listing.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferry_store::memory::MemoryStore;
use ferry_transfer::{Class, Engine, EngineConfig};

use super::{diff, find, lookup, What};
use crate::archiver::Quiet;
use crate::backup::Backup;
use crate::exclude::Exclude;
use crate::index::Index;
use crate::pattern::{Patterns, Source};
use crate::{Id, Repo, Snapshot};

async fn backup(repo: &Arc<Repo>, dir: &Path) -> Snapshot {
    let paths = [dir.to_path_buf()];
    let b = Backup::paths(&paths, vec![], Exclude::default()).unwrap();
    b.run(repo, Arc::new(Quiet)).await.unwrap().snapshot
}

/// `index` without the blob `gone`: reading it would fail.
fn without(index: &Index, gone: Id) -> Index {
    let mut less = Index::default();
    for (pack, mut entries) in index.by_pack() {
        entries.retain(|e| e.id != gone);
        less.add_pack(pack, &entries);
    }
    less.finish();
    less
}

#[tokio::test]
async fn shared_listings_are_not_read_again() {
    let dir = std::env::temp_dir().join(ferry_testkit::unique("browse-unit"));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("same/deeper")).unwrap();
    std::fs::write(src.join("same/deeper/f"), b"kept").unwrap();
    std::fs::write(src.join("x.txt"), b"one").unwrap();
    let engine = Engine::new(EngineConfig::default());
    let remote = engine.remote(Arc::new(MemoryStore::new()), Class::Bulk);
    let repo = Repo::init(remote, "repo", b"pw", crate::repo::FORMAT);
    let repo = Arc::new(repo.await.unwrap());
    let one = backup(&repo, &src).await;
    std::fs::write(src.join("x.txt"), b"two!").unwrap();
    let two = backup(&repo, &src).await;
    std::fs::remove_dir_all(&dir).unwrap();

    let (index, _) = repo.index().await.unwrap();
    let same = src.join("same");
    let shared = lookup(&repo, &index, one.tree, &same).await.unwrap();
    let shared = shared.node.unwrap().subtree.unwrap();
    let again = lookup(&repo, &index, two.tree, &same).await.unwrap();
    assert_eq!(
        again.node.unwrap().subtree,
        Some(shared),
        "the precondition"
    );

    // With the shared listing gone from the index, diff still works: it never read it.
    let index = without(&index, shared);
    let d = diff(&repo, &index, one.tree, two.tree).await.unwrap();
    let changed: Vec<(PathBuf, What)> = d.changes.into_iter().map(|c| (c.path, c.what)).collect();
    assert_eq!(changed, [(src.join("x.txt"), What::Modified)]);
    assert_eq!((d.bytes_added, d.bytes_removed), (4, 3));

    // find reads every listing, the shared one too: here it is missing, and named.
    let from = Source {
        flag: "pattern",
        case_insensitive: false,
    };
    let p = Patterns::new(&["f".into()], from).unwrap();
    let e = find(&repo, &index, &[one.tree, two.tree], &p).await;
    assert!(e.unwrap_err().to_string().contains(&shared.short()));
}

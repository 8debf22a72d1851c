//! A remote repository's metadata (key file, index files, snapshots, tree packs) is kept in a
//! local cache, so that an unchanged backup over a slow link does not read it again. The cache
//! must never be trusted over the store where it matters: damaged copies are read again, and
//! `check` reads the store.

mod repokit;

use std::path::{Path, PathBuf};

use repokit::{assert_same_tree, corpus, scratch, small_files, stderr, Repo};

/// Every cached file, by kind, under the cache's one repository directory.
fn cached(cache: &Path) -> Vec<(String, PathBuf)> {
    let repos: Vec<PathBuf> = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        repos.len(),
        1,
        "one repository, one cache directory: {repos:?}"
    );
    let mut files = Vec::new();
    for kind in ["keys", "index", "snapshots", "trees"] {
        for e in std::fs::read_dir(repos[0].join(kind)).unwrap() {
            files.push((kind.to_string(), e.unwrap().path()));
        }
    }
    files
}

fn count(files: &[(String, PathBuf)], kind: &str) -> usize {
    files.iter().filter(|(k, _)| k == kind).count()
}

#[test]
fn metadata_cache_minio() {
    let Some(repo) = Repo::s3() else { return };
    let cache = repo.cache_dir().unwrap();
    let dir = scratch("bk-cache");
    let src = dir.join("src");
    corpus(&src.join("kinds"), 2 << 20);
    small_files(&src.join("small"), 2000);
    // Past the 2 s ctime margin, so that the next backups trust what they find unchanged.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    repo.ok(&["init"]);
    let first = repo.ok(&["--json", "backup", src.to_str().unwrap()]);

    // What the first backup wrote is cached as it was written.
    let files = cached(&cache);
    assert_eq!(count(&files, "keys"), 1, "{files:?}");
    assert!(count(&files, "index") >= 1, "{files:?}");
    assert_eq!(count(&files, "snapshots"), 1, "{files:?}");
    assert!(count(&files, "trees") >= 1, "{files:?}");

    // Every cached copy damaged: the next backup reads them from the store, still finds its
    // parent (nothing read again), and the cache holds good copies again.
    for (_, f) in &files {
        std::fs::write(f, b"damaged").unwrap();
    }
    let second = repo.ok(&["--json", "backup", src.to_str().unwrap()]);
    assert_eq!(second["summary"]["files_read"], 0, "{second}");
    assert_eq!(
        second["summary"]["files_unchanged"], first["summary"]["files_read"],
        "{second}"
    );
    for (kind, f) in cached(&cache) {
        let body = std::fs::read(&f).unwrap();
        let name = f.file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(blake3::hash(&body).to_hex().as_str(), name, "{kind}/{name}");
    }

    // `check` reads the store: an index file damaged there is reported although the cache
    // holds a good copy.
    let index = cached(&cache)
        .into_iter()
        .find(|(k, _)| k == "index")
        .unwrap()
        .1;
    let id = index.file_name().unwrap().to_str().unwrap().to_string();
    let bad = dir.join("bad");
    std::fs::write(&bad, b"not an index").unwrap();
    let stored = format!("{}/index/{id}", repo.url);
    let put = repo.run(&["cp", bad.to_str().unwrap(), &stored], &[]);
    assert!(put.status.success(), "{}", stderr(&put));
    let out = repo.run(&["check"], &[]);
    assert!(!out.status.success(), "check trusted the cache");
    assert!(stderr(&out).contains(&id), "{}", stderr(&out));
    // Put the good copy back for what follows.
    let put = repo.run(&["cp", index.to_str().unwrap(), &stored], &[]);
    assert!(put.status.success(), "{}", stderr(&put));

    // Another machine (no cache here) forgets the first snapshots and prunes, rewriting the
    // index: this machine's next backup drops what the store no longer has, and its
    // snapshot restores whole.
    let other = [("FERRY_CACHE_DIR", dir.join("other-cache"))];
    let other: Vec<(&str, &str)> = other
        .iter()
        .map(|(k, v)| (*k, v.to_str().unwrap()))
        .collect();
    std::fs::write(src.join("small/new-file"), b"changed after the prune").unwrap();
    for args in [&["forget", "--keep-last", "1"][..], &["prune"][..]] {
        let out = repo.run(args, &other);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
    repo.ok(&["backup", src.to_str().unwrap()]);
    let listed = repo.ok(&["--json", "snapshots"]);
    assert_eq!(
        count(&cached(&cache), "snapshots"),
        listed.as_array().unwrap().len(),
        "{listed}"
    );
    repo.ok(&["check", "--read-data"]);
    let out = dir.join("out");
    repo.ok(&["restore", "latest", "--target", out.to_str().unwrap()]);
    assert_same_tree(&src, &out.join(src.strip_prefix("/").unwrap()));
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&cache).unwrap();
}

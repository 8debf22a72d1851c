//! Key files and formats: `key add/list/remove` manage passwords without touching data, the
//! key in use and the last key cannot be removed, a removed password no longer opens the
//! repository; a format 1 repository (`init --format 1`) is read, written and checked;
//! local repositories are private; forget and restore take their own locks.

mod repokit;

use repokit::{assert_same_tree, corpus, scratch, stderr, Repo};

#[test]
fn keys_are_added_listed_and_removed() {
    let dir = scratch("keys");
    let repo = Repo::local(&dir);
    repo.ok(&["init"]);
    let other = [("FERRY_PASSWORD", "second one")];
    let out = repo.run(&["key", "add"], &[("FERRY_NEW_PASSWORD", "second one")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(repo.run(&["snapshots"], &other).status.success());

    let listed = repo.ok(&["key", "list", "--json"]);
    let keys = listed.as_array().unwrap();
    assert_eq!(keys.len(), 2, "{listed}");
    let current: Vec<_> = keys.iter().filter(|k| k["current"] == true).collect();
    assert_eq!(current.len(), 1, "{listed}");
    assert!(keys.iter().all(|k| k["created"].is_number()), "{listed}");
    let first = current[0]["id"].as_str().unwrap().to_string();

    // The key that opened the repository is refused; from the other password it goes.
    let out = repo.run(&["key", "remove", &first[..8]], &[]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("opened the repository"),
        "{}",
        stderr(&out)
    );
    let out = repo.run(&["key", "remove", &first[..8]], &other);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = repo.run(&["snapshots"], &[]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("wrong password"), "{}", stderr(&out));
    // The last key is the one in use, so it is never removed.
    let last = repo.run(&["key", "list", "--json"], &other);
    let last: serde_json::Value = serde_json::from_slice(&last.stdout).unwrap();
    let id = last[0]["id"].as_str().unwrap().to_string();
    let out = repo.run(&["key", "remove", &id], &other);
    assert!(!out.status.success());
    let out = repo.run(&["key", "remove", "ffffffffff"], &other);
    assert!(stderr(&out).contains("no key"), "{}", stderr(&out));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_format_1_repository_is_read_written_and_checked() {
    let dir = scratch("format1");
    let repo = Repo::local(&dir);
    let src = dir.join("src");
    corpus(&src, 3 << 20);
    repo.ok(&["init", "--format", "1"]);
    let marker = std::fs::read_to_string(dir.join("repo/ferry-repo")).unwrap();
    assert!(marker.contains("format 1"), "{marker}");
    repo.ok(&["backup", src.to_str().unwrap()]);
    repo.ok(&["backup", src.to_str().unwrap()]);
    repo.ok(&["check", "--read-data"]);
    let target = dir.join("target");
    repo.ok(&["restore", "latest", "--target", target.to_str().unwrap()]);
    assert_same_tree(&src, &target.join(src.strip_prefix("/").unwrap()));
    let out = repo.run(&["init", "--format", "3"], &[]);
    assert!(!out.status.success());
    std::fs::remove_dir_all(dir).unwrap();
}

/// Key files can be attacked offline: every file of a local repository is 0600 and every
/// directory 0700, whatever the umask (here the usual 022).
#[test]
fn a_local_repository_is_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("private");
    let repo = Repo::local(&dir);
    let src = dir.join("src");
    corpus(&src, 1 << 20);
    // SAFETY: umask only sets the process's file mode mask; the children inherit it.
    let old = unsafe { libc::umask(0o022) };
    repo.ok(&["init"]);
    repo.ok(&["backup", src.to_str().unwrap()]);
    unsafe { libc::umask(old) };
    let mut seen = (0, 0);
    let mut stack = vec![dir.join("repo")];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        let mode = m.permissions().mode() & 0o777;
        if m.is_dir() {
            assert_eq!(mode, 0o700, "{}", p.display());
            seen.0 += 1;
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else {
            assert_eq!(mode, 0o600, "{}", p.display());
            seen.1 += 1;
        }
    }
    assert!(seen.0 >= 5 && seen.1 >= 5, "{seen:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A lock taken by another process, as the library takes it.
fn hold_lock(rt: &tokio::runtime::Runtime, repo: &Repo, exclusive: bool) -> ferry_repo::lock::Lock {
    use std::sync::Arc;
    rt.block_on(async {
        let key = repo.url.trim_start_matches('/').to_string();
        let engine = ferry_transfer::Engine::new(ferry_transfer::EngineConfig::default());
        let store = Arc::new(ferry_store::local::LocalStore::new("/"));
        let store = engine.remote(store, ferry_transfer::Class::Bulk);
        let r = ferry_repo::Repo::open(store, &key, b"correct horse", None)
            .await
            .unwrap();
        ferry_repo::lock::Lock::acquire(Arc::new(r), exclusive)
            .await
            .unwrap()
    })
}

/// The operations take the repository's lock themselves, not the CLI: forget an exclusive
/// one (as restic's), so it removes nothing while a backup holds a shared lock; restore a
/// shared one, so it reads nothing while a prune holds the exclusive lock. Each names who
/// holds the lock.
#[test]
fn forget_and_restore_take_their_locks() {
    let dir = scratch("locks");
    let repo = Repo::local(&dir);
    let src = dir.join("src");
    corpus(&src, 1 << 20);
    repo.ok(&["init"]);
    repo.ok(&["backup", src.to_str().unwrap()]);
    repo.ok(&["backup", src.to_str().unwrap()]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let held = hold_lock(&rt, &repo, false);
    let out = repo.run(&["forget", "--keep-last", "1"], &[]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is locked"), "{}", stderr(&out));
    assert_eq!(
        repo.ok(&["--json", "snapshots"]).as_array().unwrap().len(),
        2
    );
    rt.block_on(held.release()).unwrap();

    let held = hold_lock(&rt, &repo, true);
    let target = dir.join("target");
    let out = repo.run(
        &["restore", "latest", "--target", target.to_str().unwrap()],
        &[],
    );
    assert!(stderr(&out).contains("is locked"), "{}", stderr(&out));
    assert!(!target.exists(), "restored under another's exclusive lock");
    rt.block_on(held.release()).unwrap();

    let f = repo.ok(&["--json", "forget", "--keep-last", "1"]);
    assert_eq!(f["removed"].as_array().unwrap().len(), 1, "{f}");
    repo.ok(&["restore", "latest", "--target", target.to_str().unwrap()]);
    std::fs::remove_dir_all(dir).unwrap();
}

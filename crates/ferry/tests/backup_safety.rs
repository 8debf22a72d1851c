//! Damage is found and named: a wrong password, a flipped bit in any stored object, a
//! truncated index, a missing pack. Restore refuses bad data file by file and leaves no
//! half-written file. `kill -9` during backup and during prune leaves a repository that
//! check accepts and whose snapshots all restore.

mod repokit;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::Rng;
use repokit::{assert_same_tree, corpus, scratch, small_files, stderr, Repo};

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            v.extend(files_under(&p));
        } else {
            v.push(p);
        }
    }
    v.sort();
    v
}

/// Finished files under `dir` (none when it does not exist yet; temp names excluded).
fn files_under_or_none(dir: &Path) -> usize {
    if !dir.exists() {
        return 0;
    }
    files_under(dir)
        .iter()
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .count()
}

fn flip(path: &Path, at: usize) {
    let mut b = std::fs::read(path).unwrap();
    let i = at % b.len();
    b[i] ^= 0x04;
    std::fs::write(path, b).unwrap();
}

fn setup(tag: &str) -> (PathBuf, Repo, PathBuf) {
    let dir = scratch(tag);
    let repo = Repo::local(&dir);
    let src = dir.join("src");
    corpus(&src, 20 << 20);
    repo.ok(&["init"]);
    repo.ok(&["backup", src.to_str().unwrap()]);
    (dir, repo, src)
}

#[test]
fn wrong_password_is_refused() {
    let (dir, repo, _) = setup("bk-pw");
    let out = repo.run(&["snapshots"], &[("FERRY_PASSWORD", "wrong")]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("wrong password"), "{}", stderr(&out));
    // key passwd: the old password stops working, the new one works.
    let out = repo.run(&["key", "passwd"], &[("FERRY_NEW_PASSWORD", "new one")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!repo.run(&["snapshots"], &[]).status.success());
    assert!(repo
        .run(&["snapshots"], &[("FERRY_PASSWORD", "new one")])
        .status
        .success());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_flipped_bit_in_any_stored_object_is_found() {
    let (dir, repo, _) = setup("bk-flip");
    let root = PathBuf::from(&repo.url);
    let objects = files_under(&root);
    assert!(objects.len() >= 6, "{objects:?}");
    let mut rng = rand::rng();
    for obj in &objects {
        let original = std::fs::read(obj).unwrap();
        flip(obj, rng.random_range(0..original.len()));
        let out = repo.run(&["check", "--read-data"], &[]);
        let err = stderr(&out);
        assert!(
            !out.status.success(),
            "a flipped bit in {} went unnoticed",
            obj.display()
        );
        let name = obj.file_name().unwrap().to_string_lossy();
        let short = &name[..name.len().min(8)];
        assert!(
            err.contains(short) || err.contains("wrong password") || err.contains("marker"),
            "{}: the error does not name it: {err}",
            obj.display()
        );
        std::fs::write(obj, original).unwrap();
    }
    repo.ok(&["check", "--read-data"]);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Restore writes every file whose data checks out, and names, and leaves out, the others.
fn restore_reports(repo: &Repo, src: &Path, target: &Path) -> Vec<String> {
    let out = repo.run(
        &["restore", "latest", "--target", target.to_str().unwrap()],
        &[],
    );
    assert!(!out.status.success(), "restore of damaged data succeeded");
    let err = stderr(&out);
    let bad: Vec<String> = err
        .lines()
        .filter_map(|l| l.strip_prefix("ferry: not restored: "))
        .map(|l| l.split(": ").next().unwrap().to_string())
        .collect();
    assert!(!bad.is_empty(), "no file named: {err}");
    let base = target.join(src.strip_prefix("/").unwrap());
    for f in files_under(src) {
        let shown = f.display().to_string();
        let got = base.join(f.strip_prefix(src).unwrap());
        if bad.contains(&shown) {
            assert!(!got.exists(), "{shown} left half-written");
        } else if f.is_file() && !f.is_symlink() {
            assert!(ferry_testkit::same_file(&f, &got), "{shown} restored wrong");
        }
    }
    let leftovers: Vec<_> = files_under(target)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(".ferry-restore"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    bad
}

#[test]
fn tampered_pack_is_refused_by_restore() {
    let (dir, repo, src) = setup("bk-tamper");
    let packs = files_under(&PathBuf::from(&repo.url).join("data"));
    // The largest pack holds file data.
    let pack = packs
        .iter()
        .max_by_key(|p| p.metadata().unwrap().len())
        .unwrap();
    flip(pack, 1000);
    let bad = restore_reports(&repo, &src, &dir.join("out"));
    assert!(bad.iter().any(|b| b.ends_with("big.bin")), "{bad:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn truncated_index_and_missing_pack_are_named() {
    let (dir, repo, src) = setup("bk-missing");
    let root = PathBuf::from(&repo.url);
    let index = files_under(&root.join("index"));
    let original = std::fs::read(&index[0]).unwrap();
    std::fs::write(&index[0], &original[..original.len() / 2]).unwrap();
    let out = repo.run(&["check"], &[]);
    let name = index[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!("index/{name}")),
        "{}",
        stderr(&out)
    );
    std::fs::write(&index[0], original).unwrap();

    let packs = files_under(&root.join("data"));
    let pack = packs
        .iter()
        .max_by_key(|p| p.metadata().unwrap().len())
        .unwrap();
    std::fs::remove_file(pack).unwrap();
    let out = repo.run(&["check"], &[]);
    let short = &pack.file_name().unwrap().to_string_lossy()[..8];
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!("pack {short} is missing")),
        "{}",
        stderr(&out)
    );
    restore_reports(&repo, &src, &dir.join("out"));
    std::fs::remove_dir_all(dir).unwrap();
}

fn kill_after(mut child: std::process::Child, ms: u64) -> bool {
    std::thread::sleep(Duration::from_millis(ms));
    let done = child.try_wait().unwrap().is_some();
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
    !done
}

/// Every snapshot restores and matches what it recorded (the latest is compared with src).
fn all_restore(repo: &Repo, dir: &Path) {
    let snaps = repo.ok(&["--json", "snapshots"]);
    for s in snaps.as_array().unwrap() {
        let id = s["id"].as_str().unwrap();
        let out = dir.join(format!("r-{}", &id[..8]));
        repo.ok(&["restore", id, "--target", out.to_str().unwrap()]);
        std::fs::remove_dir_all(out).unwrap();
    }
}

#[test]
fn kill_9_during_backup_and_prune() {
    let dir = scratch("bk-kill");
    let repo = Repo::local(&dir);
    let src = dir.join("src");
    corpus(&src, 64 << 20);
    small_files(&src.join("many"), 10_000);
    repo.ok(&["init"]);
    let mut rng = rand::rng();
    let mut kills = 0;
    let data_dir = PathBuf::from(&repo.url).join("data");
    let packs = || files_under_or_none(&data_dir);
    for i in 0..6u64 {
        // New data every time, so that no attempt is a quick incremental one.
        let fresh = ferry_testkit::random_bytes(48 << 20, 1000 + i);
        std::fs::write(src.join(format!("fresh{i}")), fresh).unwrap();
        let before = packs();
        let mut child = repo
            .cmd(&["backup", src.to_str().unwrap()], &[])
            .spawn()
            .unwrap();
        // Killed at a random moment after its first new pack landed.
        while packs() == before && child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(2));
        }
        if kill_after(child, rng.random_range(0..150)) {
            kills += 1;
            let out = repo.run(&["check"], &[]);
            assert!(
                out.status.success(),
                "check after kill -9 of backup: {}",
                stderr(&out)
            );
        }
    }
    assert!(
        kills >= 3,
        "only {kills} backups were still running when killed"
    );
    repo.ok(&["backup", src.to_str().unwrap()]);
    let out = dir.join("out");
    repo.ok(&["restore", "latest", "--target", out.to_str().unwrap()]);
    assert_same_tree(&src, &out.join(src.strip_prefix("/").unwrap()));
    std::fs::remove_dir_all(&out).unwrap();

    // Several snapshots, most forgotten, then prune killed at random moments.
    for i in 0..3 {
        std::fs::write(
            src.join(format!("change{i}")),
            ferry_testkit::random_bytes(8 << 20, 100 + i),
        )
        .unwrap();
        std::fs::remove_file(src.join("big.bin")).ok();
        std::fs::write(
            src.join("big.bin"),
            ferry_testkit::random_bytes(24 << 20, 200 + i),
        )
        .unwrap();
        repo.ok(&["backup", src.to_str().unwrap()]);
    }
    repo.ok(&["forget", "--keep-last", "2"]);
    let mut prune_kills = 0;
    for _ in 0..5 {
        let child = repo.cmd(&["prune"], &[]).spawn().unwrap();
        if kill_after(child, rng.random_range(20..600)) {
            prune_kills += 1;
            let out = repo.run(&["check", "--read-data"], &[]);
            assert!(
                out.status.success(),
                "check after kill -9 of prune: {}",
                stderr(&out)
            );
            all_restore(&repo, &dir);
        }
    }
    eprintln!("{prune_kills} prunes killed");
    repo.ok(&["prune"]);
    repo.ok(&["check", "--read-data"]);
    all_restore(&repo, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A backup killed after its first index file: the next one stores only what is missing.
#[test]
fn killed_backup_packs_are_reused() {
    let dir = scratch("bk-reuse");
    let repo = Repo::local(&dir);
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("data"), ferry_testkit::random_bytes(96 << 20, 5)).unwrap();
    repo.ok(&["init"]);
    let index_dir = PathBuf::from(&repo.url).join("index");
    // Finished index files only: the local store writes under a hidden temp name first.
    let count = || {
        std::fs::read_dir(&index_dir).map_or(0, |d| {
            d.filter(|e| {
                !e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with('.')
            })
            .count()
        })
    };
    let mut child = repo
        .cmd(&["backup", src.to_str().unwrap()], &[])
        .spawn()
        .unwrap();
    while count() == 0 && child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = child.kill();
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "the backup finished before it could be killed"
    );
    let done = repo.ok(&["--json", "backup", src.to_str().unwrap()]);
    let stored = done["summary"]["bytes_stored"].as_u64().unwrap();
    eprintln!(
        "after the kill the backup stored {stored} of {} bytes",
        96 << 20
    );
    assert!(
        stored + (8 << 20) < 96 << 20,
        "the killed backup's packs were not reused"
    );
    repo.ok(&["check", "--read-data"]);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Backups run side by side; prune refuses to run beside one, and runs once it is done.
#[test]
fn concurrent_backups_and_prune_beside_a_backup() {
    let dir = scratch("bk-concurrent");
    let repo = Repo::local(&dir);
    repo.ok(&["init"]);
    let (a, b) = (dir.join("a"), dir.join("b"));
    small_files(&a, 3000);
    corpus(&b, 8 << 20);
    // A stdin backup holds its lock while its input stays open.
    let mut held = repo
        .cmd(&["backup", "--stdin", "--name", "stream"], &[])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = held.stdin.take().unwrap();
    std::io::Write::write_all(&mut pipe, &ferry_testkit::random_bytes(1 << 20, 4)).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let (ra, rb) = std::thread::scope(|s| {
        let ta = s.spawn(|| repo.run(&["backup", a.to_str().unwrap()], &[]));
        let tb = s.spawn(|| repo.run(&["backup", b.to_str().unwrap()], &[]));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    assert!(ra.status.success(), "{}", stderr(&ra));
    assert!(rb.status.success(), "{}", stderr(&rb));
    let out = repo.run(&["prune"], &[]);
    assert!(!out.status.success(), "prune ran beside a backup");
    assert!(stderr(&out).contains("is locked"), "{}", stderr(&out));
    drop(pipe);
    assert!(held.wait().unwrap().success());
    repo.ok(&["prune"]);
    repo.ok(&["check", "--read-data"]);
    all_restore(&repo, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

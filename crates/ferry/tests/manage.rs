//! `ferry tag`, `ferry unlock` and `ferry stats` as restic users expect them, to a local
//! repository and to MinIO: retagged snapshots are chosen by their new tags and still
//! restore; unlock removes the lock of a backup killed with SIGKILL and keeps a running
//! backup's, which --remove-all removes; stats counts what a restore writes and the data
//! shared by two snapshots once. Bad input is one line, and changes nothing.

mod repokit;

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::time::{Duration, Instant};

use repokit::{assert_same_tree, scratch, stderr, Repo};
use serde_json::Value;

/// (id, tags) of each snapshot `filter` chooses, sorted by id.
fn snapshots(repo: &Repo, filter: &[&str]) -> Vec<(String, Vec<String>)> {
    let mut args = vec!["--json", "snapshots"];
    args.extend(filter);
    let mut out: Vec<(String, Vec<String>)> = repo
        .ok(&args)
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (str_of(&s["id"]), strs(&s["tags"])))
        .collect();
    out.sort();
    out
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap().to_string()
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(str_of).collect()
}

fn backup(repo: &Repo, src: &Path, extra: &[&str]) -> String {
    let mut args = vec!["--json", "backup", src.to_str().unwrap()];
    args.extend(extra);
    str_of(&repo.ok(&args)["snapshot"])
}

/// The tags of the snapshot `id`.
fn tags_of(repo: &Repo, id: &str) -> Vec<String> {
    let all = snapshots(repo, &[]);
    let (_, tags) = all.iter().find(|(i, _)| i == id).expect("snapshot exists");
    tags.clone()
}

/// `ferry --json tag ARGS`: the (old, new) id pairs it reports.
fn tag(repo: &Repo, args: &[&str]) -> (Vec<(String, String)>, Value) {
    let mut all = vec!["--json", "tag"];
    all.extend(args);
    let v = repo.ok(&all);
    let changed = v["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (str_of(&c["old"]), str_of(&c["new"])))
        .collect();
    (changed, v)
}

fn tagging(repo: &Repo, dir: &Path) {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("a"), ferry_testkit::random_bytes(300_000, 3)).unwrap();
    std::fs::write(src.join("d/b"), b"bee").unwrap();
    repo.ok(&["init"]);
    let s1 = backup(repo, &src, &["--tag", "daily"]);
    let s2 = backup(repo, &src, &[]);

    // No ids, no filter: every snapshot, as restic does.
    let (changed, _) = tag(repo, &["--add", "x,y"]);
    assert_eq!(changed.len(), 2);
    let new1 = changed.iter().find(|(o, _)| *o == s1).unwrap().1.clone();
    let new2 = changed.iter().find(|(o, _)| *o == s2).unwrap().1.clone();
    assert_eq!(tags_of(repo, &new1), ["daily", "x", "y"]);
    assert_eq!(tags_of(repo, &new2), ["x", "y"]);
    let ids: Vec<String> = snapshots(repo, &[]).into_iter().map(|s| s.0).collect();
    assert_eq!(ids, sorted(&[&new1, &new2]), "the originals are gone");
    assert_eq!(snapshots(repo, &["--tag", "x"]).len(), 2);

    // One snapshot by id prefix: only it changes.
    let (changed, _) = tag(repo, &[&new1[..8], "--remove", "x"]);
    let [(old, new1b)] = &changed[..] else {
        panic!("{changed:?}")
    };
    assert_eq!(old, &new1);
    assert_eq!(tags_of(repo, new1b), ["daily", "y"]);
    let by_x: Vec<String> = snapshots(repo, &["--tag", "x"])
        .into_iter()
        .map(|s| s.0)
        .collect();
    assert_eq!(by_x, std::slice::from_ref(&new2));

    // Chosen by a filter, tags replaced.
    let (changed, _) = tag(repo, &["--tag", "daily", "--set", "a,b"]);
    let [(old, new1c)] = &changed[..] else {
        panic!("{changed:?}")
    };
    assert_eq!(old, new1b);
    assert_eq!(tags_of(repo, new1c), ["a", "b"]);
    assert!(snapshots(repo, &["--tag", "daily"]).is_empty());
    assert_eq!(snapshots(repo, &["--tag", "a,b"]).len(), 1);

    // A tag already there changes nothing, and writes nothing.
    let (changed, v) = tag(repo, &[new1c, "--add", "a"]);
    assert!(changed.is_empty(), "{v}");
    assert_eq!(strs(&v["unchanged"]), std::slice::from_ref(new1c));
    // --set '' clears them, as restic's does.
    let (changed, _) = tag(repo, &[&new2, "--set", ""]);
    assert!(tags_of(repo, &changed[0].1).is_empty());
    assert_eq!(snapshots(repo, &[]).len(), 2, "retagging changed the count");

    // The retagged snapshot restores what was backed up.
    let out = dir.join("out");
    repo.ok(&["restore", new1c, "--target", out.to_str().unwrap()]);
    assert_same_tree(&src, &out.join(src.strip_prefix("/").unwrap()));
    repo.ok(&["check", "--read-data"]);
}

fn sorted(v: &[&String]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

#[test]
fn tag_local() {
    let dir = scratch("mt-tag");
    tagging(&Repo::local(&dir), &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn tag_minio() {
    let Some(repo) = Repo::s3() else { return };
    let dir = scratch("mt-tag-s3");
    tagging(&repo, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Lock files in the repository, as the store lists them.
fn lock_files(repo: &Repo) -> usize {
    let v = repo.ok(&["--json", "ls", &format!("{}/locks/", repo.url)]);
    v.as_array().unwrap().len()
}

/// A `ferry backup --stdin` holding its shared lock: its standard input is kept open, so it
/// waits for data for as long as the test wants. Killed (SIGKILL) on drop.
struct Holder {
    child: Child,
    _stdin: ChildStdin,
}

impl Holder {
    /// Starts one and waits until its lock file is there (`before` lock files were).
    fn start(repo: &Repo, before: usize) -> Holder {
        let mut child = repo
            .cmd(&["backup", "--stdin", "--name", "held"], &[])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ferry backup");
        let stdin = child.stdin.take().unwrap();
        let h = Holder {
            child,
            _stdin: stdin,
        };
        let until = Instant::now() + Duration::from_secs(30);
        while lock_files(repo) == before {
            assert!(Instant::now() < until, "the backup never wrote its lock");
            std::thread::sleep(Duration::from_millis(100));
        }
        h
    }

    fn pid(&self) -> u64 {
        u64::from(self.child.id())
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill(); // SIGKILL: no chance to remove its lock
        let _ = self.child.wait();
    }
}

fn pids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|l| l["pid"].as_u64().unwrap())
        .collect()
}

fn unlocking(repo: &Repo, dir: &Path) {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    repo.ok(&["init"]);
    let s1 = backup(repo, &src, &[]);

    // A backup killed with SIGKILL while it holds its lock leaves the lock file behind.
    let dead = Holder::start(repo, 0);
    let dead_pid = dead.pid();
    drop(dead);
    assert_eq!(lock_files(repo), 1, "the killed backup's lock is gone");
    let live = Holder::start(repo, 1);
    assert_eq!(lock_files(repo), 2);

    // The live shared lock keeps an exclusive one out: tag is refused, nothing changes.
    let o = repo.run(&["tag", "--add", "x"], &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("is locked"), "{}", stderr(&o));
    assert_eq!(snapshots(repo, &[]), [(s1.clone(), vec![])]);

    let u = repo.ok(&["--json", "unlock"]);
    assert_eq!(pids(&u["removed"]), [dead_pid], "{u}");
    assert_eq!(u["removed"][0]["stale"], "its process is gone", "{u}");
    assert_eq!(pids(&u["kept"]), [live.pid()], "{u}");
    assert_eq!(lock_files(repo), 1);
    // Again: nothing stale is left, the live lock stays.
    let u = repo.ok(&["--json", "unlock"]);
    assert!(pids(&u["removed"]).is_empty(), "{u}");
    assert_eq!(pids(&u["kept"]), [live.pid()], "{u}");
    let human = repo.run(&["unlock"], &[]);
    assert!(
        stderr(&human).contains(&format!("pid {}", live.pid())),
        "{}",
        stderr(&human)
    );

    let u = repo.ok(&["--json", "unlock", "--remove-all"]);
    assert_eq!(pids(&u["removed"]), [live.pid()], "{u}");
    assert_eq!(lock_files(repo), 0);
    drop(live);
    assert_eq!(snapshots(repo, &[]).len(), 1);
}

#[test]
fn unlock_local() {
    let dir = scratch("mt-unlock");
    unlocking(&Repo::local(&dir), &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn unlock_minio() {
    let Some(repo) = Repo::s3() else { return };
    let dir = scratch("mt-unlock-s3");
    unlocking(&repo, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

/// (entries, regular files, directories, bytes of files, each inode once) below `root`.
fn on_disk(root: &Path) -> (u64, u64, u64, u64) {
    let (mut n, mut files, mut dirs, mut bytes) = (0, 0, 0, 0);
    let mut inodes = HashSet::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            n += 1;
            if m.is_dir() {
                dirs += 1;
                todo.push(p);
            } else if m.is_file() {
                files += 1;
                if inodes.insert(m.ino()) {
                    bytes += m.len();
                }
            }
        }
    }
    (n, files, dirs, bytes)
}

fn counts(v: &Value) -> (u64, u64, u64, u64) {
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    (
        n("total_file_count"),
        n("files"),
        n("dirs"),
        n("total_size"),
    )
}

fn stats(repo: &Repo, dir: &Path) {
    // a: 3 MiB of random data; t.txt: 60000 bytes that compress well, hard-linked as hl;
    // an empty file, a symlink, a subdirectory.
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("a"), ferry_testkit::random_bytes(3 << 20, 1)).unwrap();
    std::fs::write(src.join("t.txt"), b"hello\n".repeat(10_000)).unwrap();
    std::fs::hard_link(src.join("t.txt"), src.join("hl")).unwrap();
    std::fs::write(src.join("d/e"), b"").unwrap();
    std::os::unix::fs::symlink("a", src.join("link")).unwrap();
    repo.ok(&["init"]);
    let s1 = backup(repo, &src, &[]);
    std::fs::write(src.join("n"), ferry_testkit::random_bytes(200_000, 2)).unwrap();
    let s2 = backup(repo, &src, &[]);

    // The directories above src are in the snapshot (and the restore) too.
    let above = src.components().count() as u64 - 1;
    let first = (above + 6, 4, above + 1, (3 << 20) + 60_000);
    let second = (above + 7, 5, above + 1, (3 << 20) + 60_000 + 200_000);
    let one = repo.ok(&["--json", "stats", &s1]);
    assert_eq!(counts(&one), first, "{one}");
    assert_eq!(one["snapshots_count"], 1);
    // Restored, s1 is that on disk.
    let out = dir.join("out");
    repo.ok(&["restore", &s1, "--target", out.to_str().unwrap()]);
    assert_eq!(on_disk(&out), first);
    // Every snapshot (none named): each counted whole.
    let both = repo.ok(&["--json", "stats", "--mode", "restore-size"]);
    let sum = (
        first.0 + second.0,
        9,
        first.2 + second.2,
        first.3 + second.3,
    );
    assert_eq!(counts(&both), sum, "{both}");
    assert_eq!(both["snapshots_count"], 2);
    assert_eq!(both["mode"], "restore-size");

    // raw-data: what both use is what the second uses (a and t.txt stored once).
    let raw = |args: &[&str]| {
        let mut all = vec!["--json", "stats", "--mode", "raw-data"];
        all.extend(args);
        repo.ok(&all)
    };
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    let (r1, r2, rb) = (raw(&[&s1]), raw(&[&s2]), raw(&[]));
    assert_eq!(n(&r1, "data_size"), (3 << 20) + 60_000, "{r1}");
    assert_eq!(n(&rb, "data_size"), (3 << 20) + 60_000 + 200_000, "{rb}");
    assert_eq!(n(&rb, "data_blobs"), n(&r2, "data_blobs"), "{rb} {r2}");
    // Trees: the root, one per directory above src, src's and d's; d's is shared.
    assert_eq!(n(&r1, "tree_blobs"), above + 2, "{r1}");
    assert!(n(&rb, "tree_blobs") < n(&r1, "tree_blobs") + n(&r2, "tree_blobs"));
    assert_eq!(
        n(&rb, "total_blob_count"),
        n(&rb, "data_blobs") + n(&rb, "tree_blobs")
    );
    // t.txt and the listings compress; the random data is stored as it is, sealed.
    let (plain, stored) = (n(&rb, "total_uncompressed_size"), n(&rb, "total_size"));
    assert!(stored < plain && plain > n(&rb, "data_size"), "{rb}");
    let ratio = rb["compression_ratio"].as_f64().unwrap();
    assert!((ratio - plain as f64 / stored as f64).abs() < 1e-9, "{rb}");
    assert_eq!(rb["snapshots_count"], 2);

    // For people: the numbers, on stdout.
    let o = repo.run(&["stats", &s1], &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains(&format!("({} bytes)", first.3)), "{text}");
}

#[test]
fn stats_local() {
    let dir = scratch("mt-stats");
    stats(&Repo::local(&dir), &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn stats_minio() {
    let Some(repo) = Repo::s3() else { return };
    let dir = scratch("mt-stats-s3");
    stats(&repo, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

fn refused(repo: &Repo, dir: &Path) {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    repo.ok(&["init"]);
    backup(repo, &src, &["--tag", "t"]);
    backup(repo, &src, &[]);
    let before = snapshots(repo, &[]);
    let cases: [(&[&str], &str); 6] = [
        (&["tag", "zzzz", "--add", "x"], "'zzzz' is no snapshot"),
        (&["tag", "0123abcd", "--add", "x"], "no snapshot 0123abcd"),
        (&["tag", "latest"], "nothing to change"),
        (&["tag", "--tag", "t"], "nothing to change"),
        (&["stats", "0123abcd"], "no snapshot 0123abcd"),
        (
            &["stats", "--mode", "raw-data", "zzzz"],
            "'zzzz' is no snapshot",
        ),
    ];
    for (args, needle) in cases {
        let out = repo.run(args, &[]);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(
            err.trim().lines().count(),
            1,
            "{args:?}: not one line: {err}"
        );
    }
    assert_eq!(
        snapshots(repo, &[]),
        before,
        "a refused command changed them"
    );
    assert_eq!(lock_files(repo), 0, "a refused command left a lock");
}

#[test]
fn bad_input_is_refused_local() {
    let dir = scratch("mt-bad");
    refused(&Repo::local(&dir), &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_input_is_refused_minio() {
    let Some(repo) = Repo::s3() else { return };
    let dir = scratch("mt-bad-s3");
    refused(&repo, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

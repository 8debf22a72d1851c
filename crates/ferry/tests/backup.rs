//! Backups round-trip byte-identical with their metadata, to a local repository and to MinIO;
//! an unchanged second backup uploads nothing; a 1% change uploads about 1%.

mod repokit;

use std::path::Path;

use repokit::{assert_same_tree, corpus, scratch, small_files, Repo};

fn round_trip(repo: &Repo, dir: &Path) {
    let src = dir.join("src");
    corpus(&src, 24 << 20);
    // Files changed within 2 s of a backup's start are read again by the next (see
    // `fresh_files_are_read_again`): let the corpus age past that.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    repo.ok(&["init"]);
    let first = repo.ok(&["--json", "backup", src.to_str().unwrap()]);
    assert!(first["summary"]["bytes_stored"].as_u64().unwrap() > 0);
    let out = dir.join("out");
    repo.ok(&[
        "--json",
        "restore",
        "latest",
        "--target",
        out.to_str().unwrap(),
    ]);
    assert_same_tree(&src, &out.join(src.strip_prefix("/").unwrap()));

    // Unchanged: no file is read; only the listings of the directories above src, whose
    // mtimes the restore changed, are new.
    let second = repo.ok(&["--json", "backup", src.to_str().unwrap()]);
    assert!(
        second["summary"]["bytes_new"].as_u64().unwrap() < 4096,
        "{second}"
    );
    assert_eq!(second["summary"]["files_read"], 0, "{second}");

    // 1% of the data changes: about that much is stored.
    let big = src.join("big.bin");
    let f = std::fs::OpenOptions::new().write(true).open(&big).unwrap();
    let change = ferry_testkit::random_bytes((24 << 20) / 100, 9);
    std::os::unix::fs::FileExt::write_all_at(&f, &change, 10 << 20).unwrap();
    drop(f);
    let third = repo.ok(&["--json", "backup", src.to_str().unwrap()]);
    let total = third["summary"]["total_bytes"].as_u64().unwrap();
    let new = third["summary"]["bytes_new"].as_u64().unwrap();
    eprintln!(
        "1% change: {new} new bytes of {total} ({:.2}%), {} stored",
        100.0 * new as f64 / total as f64,
        third["summary"]["bytes_stored"]
    );
    assert!(
        new > 0 && new * 100 < total * 5,
        "a 1% change stored {new} of {total}"
    );
    let out3 = dir.join("out3");
    repo.ok(&["restore", "latest", "--target", out3.to_str().unwrap()]);
    assert_same_tree(&src, &out3.join(src.strip_prefix("/").unwrap()));

    // One path of a snapshot.
    let part = dir.join("part");
    let want = src.join("dir");
    repo.ok(&[
        "restore",
        "latest",
        "--target",
        part.to_str().unwrap(),
        want.to_str().unwrap(),
    ]);
    assert_same_tree(&want, &part.join(want.strip_prefix("/").unwrap()));
    assert!(!part
        .join(src.strip_prefix("/").unwrap())
        .join("big.bin")
        .exists());
    repo.ok(&["check", "--read-data"]);
}

#[test]
fn round_trip_local() {
    let dir = scratch("bk-local");
    round_trip(&Repo::local(&dir), &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Two directories of hard links to the same files are one tree in the snapshot: the
/// restore's walk takes a large tree out of its cache the first time and reads it from the
/// repository the second; both come back.
#[test]
fn directories_sharing_one_tree_both_come_back() {
    let dir = scratch("bk-shared-tree");
    let src = dir.join("src");
    let (a, b) = (src.join("a"), src.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    for i in 0..12 {
        let name = format!("f{i:02}");
        std::fs::write(a.join(&name), format!("content {i}").repeat(100 + i)).unwrap();
        std::fs::hard_link(a.join(&name), b.join(&name)).unwrap();
    }
    // The directories' own metadata may differ; their listings must not.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let repo = Repo::local(&dir);
    repo.ok(&["init"]);
    let s = repo.ok(&["--json", "backup", src.to_str().unwrap()])["summary"].clone();
    // 12 contents; one tree per directory backed up but a and b's, which is one; one per
    // directory above src (the root's included).
    let (blobs, dirs) = (
        s["blobs_new"].as_u64().unwrap(),
        s["dirs"].as_u64().unwrap(),
    );
    let above = src.components().count() as u64 - 1;
    assert_eq!(blobs, 12 + (dirs - 1) + above, "{s}");
    let out = dir.join("out");
    repo.ok(&["restore", "latest", "--target", out.to_str().unwrap()]);
    assert_same_tree(&src, &out.join(src.strip_prefix("/").unwrap()));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn round_trip_minio() {
    let Some(repo) = Repo::s3() else { return };
    let dir = scratch("bk-s3");
    round_trip(&repo, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn round_trip_gcs() {
    let Some(repo) = Repo::gcs() else { return };
    let dir = scratch("bk-gcs");
    round_trip(&repo, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

fn many_small(repo: &Repo, dir: &Path) {
    let src = dir.join("small");
    small_files(&src, 100_000);
    // Let the last files age past the 2 s margin (see `fresh_files_are_read_again`).
    std::thread::sleep(std::time::Duration::from_millis(2100));
    repo.ok(&["init"]);
    let s = repo.ok(&["--json", "backup", src.to_str().unwrap()]);
    assert_eq!(s["summary"]["files_read"], 100_000, "{s}");
    let out = dir.join("out");
    repo.ok(&["restore", "latest", "--target", out.to_str().unwrap()]);
    assert_same_tree(&src, &out.join(src.strip_prefix("/").unwrap()));
    let again = repo.ok(&["--json", "backup", src.to_str().unwrap()]);
    assert_eq!(again["summary"]["files_unchanged"], 100_000, "{again}");
    // Only the listings above `src` (their mtimes moved) are new.
    assert!(
        again["summary"]["bytes_stored"].as_u64().unwrap() < 4096,
        "{again}"
    );
}

#[test]
fn hundred_thousand_small_files_local() {
    let dir = scratch("bk-small");
    many_small(&Repo::local(&dir), &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn hundred_thousand_small_files_minio() {
    let Some(repo) = Repo::s3() else { return };
    let dir = scratch("bk-small-s3");
    many_small(&repo, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn stdin_stream() {
    let dir = scratch("bk-stdin");
    let repo = Repo::local(&dir);
    repo.ok(&["init"]);
    let data = ferry_testkit::random_bytes(30 << 20, 3);
    let mut child = repo
        .cmd(&["--json", "backup", "--stdin", "--name", "db.dump"], &[])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let d2 = data.clone();
    let feeder = std::thread::spawn(move || std::io::Write::write_all(&mut pipe, &d2).unwrap());
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert!(out.status.success(), "{}", repokit::stderr(&out));
    let target = dir.join("out");
    repo.ok(&["restore", "latest", "--target", target.to_str().unwrap()]);
    assert_eq!(std::fs::read(target.join("db.dump")).unwrap(), data);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A file last changed just before a backup began may change again in the same clock tick
/// after it was read, leaving size, mtime and ctime as recorded: the next backup reads it
/// again rather than trust the record. Older files are trusted.
#[test]
fn fresh_files_are_read_again() {
    let dir = scratch("bk-fresh");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    // init first: its Argon2 on a loaded machine can outlast the margin.
    let repo = Repo::local(&dir.join("repo"));
    repo.ok(&["init"]);
    std::fs::write(src.join("old"), "aged past the margin").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2100));
    std::fs::write(src.join("fresh"), "written just before the backup").unwrap();
    repo.ok(&["--json", "backup", src.to_str().unwrap()]);
    let second = repo.ok(&["--json", "backup", src.to_str().unwrap()]);
    assert_eq!(second["summary"]["files_read"], 1, "{second}");
    assert_eq!(second["summary"]["files_unchanged"], 1, "{second}");
    // Once the parent began after the last change, the record is trusted.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    repo.ok(&["--json", "backup", src.to_str().unwrap()]);
    let fourth = repo.ok(&["--json", "backup", src.to_str().unwrap()]);
    assert_eq!(fourth["summary"]["files_read"], 0, "{fourth}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// `--json` prints restic-style status lines while a backup runs, then the summary: here a
/// producer that takes three seconds holds the backup open past the one-second tick.
#[test]
fn json_status_lines_then_a_summary() {
    let dir = scratch("bk-status");
    let repo = Repo::local(&dir);
    repo.ok(&["init"]);
    let mut child = repo
        .cmd(&["--json", "backup", "--stdin", "--name", "slow"], &[])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        for i in 0..4u64 {
            let piece = ferry_testkit::random_bytes(1 << 20, i);
            std::io::Write::write_all(&mut pipe, &piece).unwrap();
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert!(out.status.success(), "{}", repokit::stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (summary, status) = lines.split_last().unwrap();
    assert_eq!(summary["message_type"], "summary", "{text}");
    assert_eq!(summary["summary"]["total_bytes"], 4 << 20, "{text}");
    assert!(!status.is_empty(), "no status line in a 4 s backup: {text}");
    let mut last = 0;
    for s in status {
        assert_eq!(s["message_type"], "status", "{s}");
        let done = s["bytes_done"].as_u64().unwrap();
        assert!(done >= last && done <= 4 << 20, "{s}");
        last = done;
    }
    std::fs::remove_dir_all(dir).unwrap();
}

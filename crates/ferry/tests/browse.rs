//! `diff`, `find` and `dump` against a local repository and MinIO: two backups with files
//! added, removed, rewritten, chmod-ed and turned from a link into a file; the exact changes,
//! the matches per snapshot, files dumped byte-identical, a directory as a tar archive that
//! GNU tar reads back identical; bad input refused in one line with nothing on stdout, and a
//! forged snapshot's hostile names refused.

mod repokit;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use repokit::{scratch, set_mtime, stderr, Repo};
use serde_json::json;

/// The first tree: text, a config, a nested directory, a link, a big file of several chunks.
fn first_tree(src: &Path) {
    std::fs::create_dir_all(src.join("docs/old")).unwrap();
    std::fs::create_dir_all(src.join("keep")).unwrap();
    std::fs::write(src.join("a.txt"), b"alpha\n").unwrap();
    std::fs::write(src.join("b.conf"), b"bee = 1\n").unwrap();
    std::fs::write(src.join("docs/readme.md"), b"# read me\n").unwrap();
    std::fs::write(src.join("docs/old/notes.txt"), b"old notes\n").unwrap();
    std::fs::write(src.join("gone.txt"), b"soon gone\n").unwrap();
    std::fs::write(src.join("keep/same.txt"), b"unchanged\n").unwrap();
    std::fs::write(src.join("big.bin"), ferry_testkit::random_bytes(8 << 20, 5)).unwrap();
    std::fs::write(src.join("mode.sh"), b"#!/bin/sh\n").unwrap();
    std::os::unix::fs::symlink("a.txt", src.join("link")).unwrap();
    // Past the 100 bytes a tar header holds: a GNU long-name member.
    std::fs::write(src.join("keep").join("n".repeat(150)), b"long name\n").unwrap();
    std::os::unix::fs::symlink("same.txt", src.join("keep/ln")).unwrap();
    let mode = std::fs::Permissions::from_mode(0o750);
    std::fs::set_permissions(src.join("docs"), mode).unwrap();
    set_mtime(&src.join("b.conf"), 1_600_000_000, 123_456_789);
}

/// What changes before the second backup: every kind of change once.
fn change_tree(src: &Path) {
    std::fs::remove_file(src.join("gone.txt")).unwrap();
    std::fs::remove_dir_all(src.join("docs/old")).unwrap();
    std::fs::write(src.join("new.txt"), b"brand new\n").unwrap();
    std::fs::create_dir_all(src.join("fresh")).unwrap();
    std::fs::write(src.join("fresh/f.txt"), b"fresh file\n").unwrap();
    std::fs::write(src.join("a.txt"), b"ALPHA\n").unwrap();
    let mode = std::fs::Permissions::from_mode(0o755);
    std::fs::set_permissions(src.join("mode.sh"), mode).unwrap();
    let big = std::fs::OpenOptions::new()
        .write(true)
        .open(src.join("big.bin"))
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&big, b"changed", 4 << 20).unwrap();
    std::fs::remove_file(src.join("link")).unwrap();
    std::fs::write(src.join("link"), b"a file now\n").unwrap();
}

/// Runs `ferry ARGS`, insisting on success; its stdout.
fn stdout_of(repo: &Repo, args: &[&str]) -> Vec<u8> {
    let out = repo.run(args, &[]);
    assert!(out.status.success(), "ferry {args:?}: {}", stderr(&out));
    out.stdout
}

/// Asserts that `out` failed with one line on stderr holding `want`, and nothing on stdout.
fn refused(out: &Output, want: &str) {
    let err = stderr(out);
    assert!(!out.status.success(), "accepted: {err}");
    assert!(out.stdout.is_empty(), "stdout: {:?}", out.stdout);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains(want), "{err} lacks {want}");
}

fn scenario(repo: &Repo, dir: &Path) {
    let src = dir.join("src");
    let s = src.to_str().unwrap().to_string();
    first_tree(&src);
    // Files changed within 2 s of a backup's start are read again by the next: let them age.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    repo.ok(&["init"]);
    repo.ok(&["backup", &s]);
    let old_a = std::fs::read(src.join("a.txt")).unwrap();
    change_tree(&src);
    repo.ok(&["backup", &s]);
    let snaps = repo.ok(&["--json", "snapshots"]);
    let ids: Vec<&str> = snaps
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{snaps}");
    let (one, two) = (&ids[0][..8], &ids[1][..8]);

    check_diff(repo, &s, one, two);
    check_find(repo, &s, ids[0], ids[1]);
    check_dump(repo, dir, &src, one, &old_a);
    check_bad_input(repo, &s, one);
}

fn check_diff(repo: &Repo, s: &str, one: &str, two: &str) {
    let d = repo.ok(&["--json", "diff", one, two]);
    let under: Vec<(String, String, String)> = d["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let path = c["path"].as_str().unwrap();
            (
                c["change"].as_str().unwrap().into(),
                path.into(),
                c["type"].as_str().unwrap().into(),
            )
        })
        .filter(|(_, p, _)| Path::new(p).starts_with(s))
        .collect();
    let want: Vec<(String, String, String)> = [
        ("U", "", "dir"),
        ("M", "/a.txt", "file"),
        ("M", "/big.bin", "file"),
        ("U", "/docs", "dir"),
        ("-", "/docs/old", "dir"),
        ("-", "/docs/old/notes.txt", "file"),
        ("+", "/fresh", "dir"),
        ("+", "/fresh/f.txt", "file"),
        ("-", "/gone.txt", "file"),
        ("T", "/link", "file"),
        ("U", "/mode.sh", "file"),
        ("+", "/new.txt", "file"),
    ]
    .iter()
    .map(|(c, p, k)| (c.to_string(), format!("{s}{p}"), k.to_string()))
    .collect();
    assert_eq!(under, want, "{d:#}");
    // Above the backed-up directory, only the parents' own metadata (their mtimes) moves.
    for c in d["changes"].as_array().unwrap() {
        let p = c["path"].as_str().unwrap();
        assert!(Path::new(s).starts_with(p) || p.starts_with(s), "{c}");
        assert!(p.starts_with(s) || c["change"] == "U", "{c}");
    }
    let counts = &d["counts"];
    assert_eq!(
        [
            &counts["added"],
            &counts["removed"],
            &counts["modified"],
            &counts["type"]
        ],
        [&json!(3), &json!(3), &json!(2), &json!(1)],
        "{counts}"
    );
    assert!(counts["metadata"].as_u64().unwrap() >= 3, "{counts}");
    // The changed chunks of big.bin, not the whole 8 MiB; the small files' bytes.
    let (added, removed) = (
        d["bytes_added"].as_u64().unwrap(),
        d["bytes_removed"].as_u64().unwrap(),
    );
    assert!((30..6 << 20).contains(&added), "{added}");
    assert!((20..6 << 20).contains(&removed), "{removed}");
    assert_eq!(d["from"].as_str().unwrap()[..8], *one);

    // The same for people: restic's marks, directories with a slash, a summary.
    let text = String::from_utf8(stdout_of(repo, &["diff", one, two])).unwrap();
    for line in [
        format!("-    {s}/docs/old/"),
        format!("+    {s}/fresh/f.txt"),
        format!("T    {s}/link"),
        format!("U    {s}/mode.sh"),
        format!("M    {s}/big.bin"),
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} not in:\n{text}");
    }
    let last = text.lines().last().unwrap();
    assert!(
        last.starts_with("3 added, 3 removed, 2 modified, "),
        "{last}"
    );

    // A snapshot against itself: nothing.
    let same = repo.ok(&["--json", "diff", two, "latest"]);
    assert_eq!(same["changes"], json!([]), "{same}");
}

fn check_find(repo: &Repo, s: &str, one: &str, two: &str) {
    let found = repo.ok(&["--json", "find", "*.txt"]);
    let paths = |i: usize| -> Vec<String> {
        found[i]["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["path"].as_str().unwrap().strip_prefix(s).unwrap().into())
            .collect()
    };
    assert_eq!(found[0]["snapshot"], one);
    assert_eq!(found[1]["snapshot"], two);
    assert_eq!(
        paths(0),
        [
            "/a.txt",
            "/docs/old/notes.txt",
            "/gone.txt",
            "/keep/same.txt"
        ]
    );
    assert_eq!(
        paths(1),
        ["/a.txt", "/fresh/f.txt", "/keep/same.txt", "/new.txt"]
    );
    let a = &found[1]["matches"][0];
    assert_eq!((&a["type"], &a["size"]), (&json!("file"), &json!(6)), "{a}");

    // Case: only with -i; each match's type, size and exact mtime.
    assert_eq!(repo.ok(&["--json", "find", "*.CONF"]), json!([]));
    let conf = repo.ok(&["--json", "find", "-i", "*.CONF"]);
    let want = json!({"path": format!("{s}/b.conf"), "type": "file", "size": 8,
        "mtime": "2020-09-13T12:26:40.123456789Z"});
    for snap in conf.as_array().unwrap() {
        assert_eq!(snap["matches"], json!([want]), "{conf}");
    }
    assert_eq!(conf.as_array().unwrap().len(), 2);

    // Anchored, directories only, several patterns at once, and a filter choosing nothing.
    let dirs = repo.ok(&["--json", "find", "old/", &format!("{s}/fresh")]);
    let got: Vec<_> = dirs
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["snapshot"].as_str().unwrap(), x["matches"].clone()))
        .collect();
    let m = |p: &str| json!([{"path": format!("{s}{p}"), "type": "dir", "size": 0}]);
    assert_eq!(got.len(), 2, "{dirs}");
    assert_eq!((got[0].0, got[1].0), (one, two));
    for (g, p) in [(&got[0].1, "/docs/old"), (&got[1].1, "/fresh")] {
        let mut g = g.clone();
        g[0].as_object_mut().unwrap().remove("mtime");
        assert_eq!(g, m(p), "{dirs}");
    }
    assert_eq!(
        repo.ok(&["--json", "find", "--host", "nowhere", "*"]),
        json!([])
    );

    let text = String::from_utf8(stdout_of(repo, &["find", "new.txt"])).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with(&format!("snapshot {} of ", &two[..8])),
        "{text}"
    );
    assert!(lines[1].starts_with("file ") && lines[1].ends_with(&format!("  {s}/new.txt")));
}

fn check_dump(repo: &Repo, dir: &Path, src: &Path, one: &str, old_a: &[u8]) {
    let s = src.to_str().unwrap();
    // Files: byte-identical, from either snapshot.
    let big = stdout_of(repo, &["dump", "latest", &format!("{s}/big.bin")]);
    assert!(
        big == std::fs::read(src.join("big.bin")).unwrap(),
        "big.bin differs"
    );
    assert_eq!(
        stdout_of(repo, &["dump", one, &format!("{s}/a.txt")]),
        old_a
    );
    assert_eq!(
        stdout_of(repo, &["dump", "latest", &format!("{s}/fresh/f.txt")]),
        b"fresh file\n"
    );

    // A directory: a tar archive named from the directory down, that tar reads back as it was.
    let tarball = dir.join("src.tar");
    std::fs::write(&tarball, stdout_of(repo, &["dump", "latest", s])).unwrap();
    let list = tar(&["-tf", tarball.to_str().unwrap()]);
    let long = format!("src/keep/{}", "n".repeat(150));
    let mut want = vec![
        "src/",
        "src/a.txt",
        "src/b.conf",
        "src/big.bin",
        "src/docs/",
        "src/docs/readme.md",
        "src/fresh/",
        "src/fresh/f.txt",
        "src/keep/",
        "src/keep/ln",
        &long,
        "src/keep/same.txt",
        "src/link",
        "src/mode.sh",
        "src/new.txt",
    ];
    want.sort();
    let mut got: Vec<&str> = list.lines().collect();
    got.sort();
    assert_eq!(got, want);
    let out = dir.join("untarred");
    std::fs::create_dir_all(&out).unwrap();
    tar(&[
        "-xpf",
        tarball.to_str().unwrap(),
        "-C",
        out.to_str().unwrap(),
    ]);
    same_as_tar_keeps(src, &out.join("src"));

    // The older snapshot: the link stays a link, the removed directory is there.
    let old = dir.join("old.tar");
    std::fs::write(&old, stdout_of(repo, &["dump", one, &format!("{s}/")])).unwrap();
    let listing = tar(&["-tvf", old.to_str().unwrap()]);
    let link = listing.lines().find(|l| l.contains("src/link")).unwrap();
    assert!(
        link.starts_with('l') && link.ends_with("src/link -> a.txt"),
        "{link}"
    );
    assert!(listing.contains("src/docs/old/notes.txt"), "{listing}");

    // The root: every path of the snapshot, relative.
    let root = dir.join("root.tar");
    std::fs::write(&root, stdout_of(repo, &["dump", "latest", "/"])).unwrap();
    let rel = s.trim_start_matches('/');
    let all = tar(&["-tf", root.to_str().unwrap()]);
    assert!(all.lines().any(|l| l == format!("{rel}/new.txt")), "{all}");
    assert!(all.lines().all(|l| !l.starts_with('/')), "{all}");
}

/// Runs GNU tar; its stdout.
fn tar(args: &[&str]) -> String {
    let out = Command::new("tar").args(args).output().expect("tar");
    assert!(out.status.success(), "tar {args:?}: {}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// Asserts that `b`, extracted from a tar archive, is `a` as far as tar keeps it: names,
/// kinds, permission bits, contents, link targets, files' mtimes in whole seconds.
fn same_as_tar_keeps(a: &Path, b: &Path) {
    let mut names: Vec<_> = std::fs::read_dir(a)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let mut other: Vec<_> = std::fs::read_dir(b)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    other.sort();
    assert_eq!(names, other, "entries of {}", b.display());
    for n in names {
        let (pa, pb) = (a.join(&n), b.join(&n));
        let (ma, mb) = (
            std::fs::symlink_metadata(&pa).unwrap(),
            std::fs::symlink_metadata(&pb).unwrap(),
        );
        assert_eq!(ma.mode(), mb.mode(), "mode of {}", pb.display());
        if ma.is_file() {
            assert_eq!(
                std::fs::read(&pa).unwrap(),
                std::fs::read(&pb).unwrap(),
                "{}",
                pb.display()
            );
            assert_eq!(ma.mtime(), mb.mtime(), "mtime of {}", pb.display());
        } else if ma.is_symlink() {
            assert_eq!(
                std::fs::read_link(&pa).unwrap(),
                std::fs::read_link(&pb).unwrap()
            );
        } else {
            same_as_tar_keeps(&pa, &pb);
        }
    }
}

fn check_bad_input(repo: &Repo, s: &str, one: &str) {
    let a = format!("{s}/a.txt");
    refused(
        &repo.run(&["dump", "deadbeef", &a], &[]),
        "no snapshot deadbeef",
    );
    refused(
        &repo.run(&["dump", "latest", &format!("{s}/nope")], &[]),
        "not in the snapshot",
    );
    refused(
        &repo.run(&["dump", "latest", &format!("{a}/x")], &[]),
        "not in the snapshot",
    );
    refused(
        &repo.run(&["dump", "latest", &format!("{s}/../src/a.txt")], &[]),
        "'..'",
    );
    refused(
        &repo.run(&["dump", one, &format!("{s}/link")], &[]),
        "symbolic link",
    );
    refused(
        &repo.run(&["dump", "latest", &a, "--host", "nowhere"], &[]),
        "no snapshots",
    );
    refused(
        &repo.run(&["diff", "deadbeef", "latest"], &[]),
        "no snapshot deadbeef",
    );
    refused(&repo.run(&["diff", one, "not-hex"], &[]), "is no snapshot");
    refused(&repo.run(&["find", "a["], &[]), "pattern 'a['");
    refused(&repo.run(&["find", ""], &[]), "empty pattern");
}

/// A scratch directory and the repository's own metadata cache, removed when dropped (a
/// failed assertion included).
struct Scratch(PathBuf, Option<PathBuf>);

impl Drop for Scratch {
    fn drop(&mut self) {
        for d in std::iter::once(&self.0).chain(&self.1) {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

#[test]
fn diff_find_dump_local() {
    let dir = scratch("browse-local");
    let repo = Repo::local(&dir);
    let _gone = Scratch(dir.clone(), None);
    scenario(&repo, &dir);
}

#[test]
fn diff_find_dump_minio() {
    let Some(repo) = Repo::s3() else { return };
    let dir = scratch("browse-s3");
    let _gone = Scratch(dir.clone(), repo.cache_dir());
    scenario(&repo, &dir);
}

/// A snapshot whose listing a password holder wrote with names no entry may have: a tar that
/// held them would write outside the directory it is unpacked in.
#[test]
fn hostile_names_are_refused() {
    let dir = scratch("browse-hostile");
    let repo = Repo::local(&dir);
    let _gone = Scratch(dir.clone(), None);
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("a.txt"), b"a").unwrap();
    std::fs::write(src.join("d/b.txt"), b"b").unwrap();
    repo.ok(&["init"]);
    repo.ok(&["backup", src.to_str().unwrap()]);
    for bad in ["..", "x/../../y", ""] {
        forge(&dir.join("repo"), bad);
        refused(
            &repo.run(&["dump", "latest", "/"], &[]),
            &format!("{bad:?} refused"),
        );
        // Every snapshot is searched, the forged ones before too: one of them is named.
        refused(&repo.run(&["find", "*"], &[]), "refused");
        refused(
            &repo.run(&["diff", "latest", &first_id(&repo)], &[]),
            "refused",
        );
        // What is not under the hostile name is still read.
        assert_eq!(stdout_of(&repo, &["dump", "latest", "/a.txt"]), b"a");
    }
}

fn first_id(repo: &Repo) -> String {
    repo.ok(&["--json", "snapshots"])[0]["id"]
        .as_str()
        .unwrap()
        .into()
}

/// Writes a snapshot whose root is the backed-up directory's listing with a copy of its file
/// `a.txt` named `name`: what a holder of the password can do through the library.
fn forge(repo_dir: &Path, name: &str) {
    repokit::forge(repo_dir, |nodes| {
        let mut evil = nodes.iter().find(|n| n.name == "a.txt").unwrap().clone();
        evil.name = name.into();
        nodes.insert(0, evil);
    });
}

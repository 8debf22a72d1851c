//! Snapshots as people manage them: hosts and tags chosen with --host/--tag/--path, forget's
//! --keep-tag, --keep-within, --group-by and --dry-run, prune --dry-run, backup --dry-run;
//! to a local repository and to MinIO. Bad input is one line, and changes nothing.

mod repokit;

use std::path::Path;

use repokit::{scratch, stderr, Repo};
use serde_json::Value;

fn ids(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

/// Snapshot ids the repository holds, chosen by `filter` flags.
fn snapshots(repo: &Repo, filter: &[&str]) -> Vec<String> {
    let mut args = vec!["--json", "snapshots"];
    args.extend(filter);
    let v = repo.ok(&args);
    let mut out: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

fn backup(repo: &Repo, src: &Path, extra: &[&str]) -> String {
    let mut args = vec!["--json", "backup", src.to_str().unwrap()];
    args.extend(extra);
    repo.ok(&args)["snapshot"].as_str().unwrap().to_string()
}

fn manage(repo: &Repo, dir: &Path) {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), vec![1u8; 100_000]).unwrap();
    std::fs::write(src.join("b"), b"bee").unwrap();
    repo.ok(&["init"]);

    // backup --dry-run counts and writes nothing.
    let d = repo.ok(&["--json", "backup", "-n", src.to_str().unwrap(), "-e", "b"]);
    assert_eq!(d["would_back_up"]["files"], 1, "{d}");
    assert_eq!(d["would_back_up"]["bytes"], 100_000, "{d}");
    assert_eq!(d["would_back_up"]["excluded"], 1, "{d}");
    assert!(snapshots(repo, &[]).is_empty());

    let a1 = backup(repo, &src, &["--host", "alpha", "--tag", "daily"]);
    let a2 = backup(repo, &src, &["--host", "alpha", "--tag", "daily,keep"]);
    std::fs::write(src.join("b"), vec![2u8; 50_000]).unwrap();
    let a3 = backup(repo, &src, &["--host", "alpha"]);
    let b1 = backup(repo, &src, &["--host", "beta", "--tag", "daily"]);
    let b2 = backup(repo, &src, &["--host", "beta"]);

    // Choosing snapshots: any host given, every tag of a list, any of the lists.
    assert_eq!(snapshots(repo, &["--host", "beta"]), sorted(&[&b1, &b2]));
    assert_eq!(
        snapshots(repo, &["--tag", "daily,keep"]),
        std::slice::from_ref(&a2)
    );
    assert_eq!(
        snapshots(repo, &["--tag", "keep", "--tag", "daily", "--host", "beta"]),
        std::slice::from_ref(&b1)
    );
    let src_s = src.to_str().unwrap();
    assert_eq!(snapshots(repo, &["--path", src_s]).len(), 5);
    assert!(snapshots(repo, &["--path", "/elsewhere"]).is_empty());

    // restore latest of a tag restores that one: b is 3 bytes there, 50 kB in the newest.
    let out = dir.join("out");
    let o = out.to_str().unwrap();
    repo.ok(&["restore", "latest", "--tag", "keep", "--target", o]);
    let b = out.join(src.strip_prefix("/").unwrap()).join("b");
    assert_eq!(std::fs::read(&b).unwrap(), b"bee");

    // A dry run removes nothing and says what would go.
    let f = repo.ok(&["--json", "forget", "--keep-last", "1", "--dry-run"]);
    assert_eq!(ids(&f["removed"]), sorted(&[&a1, &a2, &b1]), "{f}");
    assert_eq!(f["dry_run"], true);
    assert_eq!(snapshots(repo, &[]).len(), 5);

    // Only beta's are judged; the tag keeps b1 beside the newest.
    let f = repo.ok(&[
        "--json",
        "forget",
        "--host",
        "beta",
        "--keep-last",
        "1",
        "--keep-tag",
        "daily",
    ]);
    assert!(ids(&f["removed"]).is_empty(), "{f}");
    // One group of all hosts, the newest kept, and what carries "keep".
    let f = repo.ok(&[
        "--json",
        "forget",
        "--group-by",
        "",
        "--keep-last",
        "1",
        "--keep-tag",
        "keep",
    ]);
    assert_eq!(ids(&f["removed"]), sorted(&[&a1, &a3, &b1]), "{f}");
    assert_eq!(snapshots(repo, &[]), sorted(&[&a2, &b2]));
    // Everything here is younger than an hour.
    let f = repo.ok(&["--json", "forget", "--keep-within", "1h"]);
    assert!(ids(&f["removed"]).is_empty(), "{f}");

    // prune --dry-run frees what the real prune then frees, and deletes nothing.
    let dry = repo.ok(&["--json", "prune", "--dry-run"]);
    assert_eq!(dry["dry_run"], true);
    let again = repo.ok(&["--json", "prune", "--dry-run"]);
    assert_eq!(dry, again, "a dry run changed the repository");
    let real = repo.ok(&["--json", "prune"]);
    assert_eq!(real["bytes_freed"], dry["bytes_freed"], "{real} vs {dry}");
    assert_eq!(
        real["packs_deleted"], dry["packs_deleted"],
        "{real} vs {dry}"
    );
    repo.ok(&["check", "--read-data"]);
}

fn sorted(v: &[&String]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

#[test]
fn manage_local() {
    let dir = scratch("mg-local");
    manage(&Repo::local(&dir), &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn manage_minio() {
    let Some(repo) = Repo::s3() else { return };
    let dir = scratch("mg-s3");
    manage(&repo, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

fn refused(repo: &Repo, dir: &Path) {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    repo.ok(&["init"]);
    let s = src.to_str().unwrap();
    repo.ok(&["backup", s]);
    repo.ok(&["backup", s]);
    let t = dir.join("t");
    let t = t.to_str().unwrap();
    let cases: [(&[&str], &str); 6] = [
        (&["forget", "--keep-within", "5w"], "--keep-within '5w'"),
        (
            &["forget", "--keep-last", "1", "--group-by", "color"],
            "--group-by 'color'",
        ),
        (&["forget", "--host", "alpha"], "no policy"),
        (
            &["restore", "latest", "--host", "nobody", "--target", t],
            "no snapshots",
        ),
        (&["restore", "zzzz", "--target", t], "'zzzz' is no snapshot"),
        (&["backup", s, "--host", " "], "--host: an empty hostname"),
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
        snapshots(repo, &[]).len(),
        2,
        "a refused command changed the snapshots"
    );
    assert!(!Path::new(t).exists(), "a refused restore wrote its target");
}

#[test]
fn bad_input_is_refused_local() {
    let dir = scratch("mg-bad");
    refused(&Repo::local(&dir), &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_input_is_refused_minio() {
    let Some(repo) = Repo::s3() else { return };
    let dir = scratch("mg-bad-s3");
    refused(&repo, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

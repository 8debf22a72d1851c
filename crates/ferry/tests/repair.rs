//! `repair index`: with every index file gone, the index is rebuilt from the packs' headers
//! and the repository restores byte-identical again; a pack whose header was cut off is
//! named and left out, and the command says so with a non-zero exit. Local and MinIO.

mod repokit;

use std::path::Path;
use std::sync::Arc;

use ferry_store::cloud::CloudStore;
use ferry_store::Store;
use repokit::{assert_same_tree, scratch, stderr, Repo};

/// The repository's objects, as seen by a raw store: (list, delete, truncate).
trait Raw {
    fn keys(&self, prefix: &str) -> Vec<String>;
    fn delete(&self, key: &str);
    fn cut_tail(&self, key: &str, n: usize);
    fn len(&self, key: &str) -> u64;
}

struct Disk(std::path::PathBuf);

impl Raw for Disk {
    fn keys(&self, prefix: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut todo = vec![self.0.join(prefix)];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                match e.file_type().unwrap().is_dir() {
                    true => todo.push(e.path()),
                    false => out.push(
                        e.path()
                            .strip_prefix(&self.0)
                            .unwrap()
                            .display()
                            .to_string(),
                    ),
                }
            }
        }
        out
    }
    fn delete(&self, key: &str) {
        std::fs::remove_file(self.0.join(key)).unwrap();
    }
    fn len(&self, key: &str) -> u64 {
        std::fs::metadata(self.0.join(key)).unwrap().len()
    }
    fn cut_tail(&self, key: &str, n: usize) {
        let p = self.0.join(key);
        let body = std::fs::read(&p).unwrap();
        std::fs::write(&p, &body[..body.len() - n]).unwrap();
    }
}

struct Bucket(Arc<CloudStore>, String, tokio::runtime::Runtime);

impl Raw for Bucket {
    fn keys(&self, prefix: &str) -> Vec<String> {
        let list = self
            .2
            .block_on(self.0.list(&format!("{}/{prefix}", self.1)))
            .unwrap();
        list.into_iter()
            .map(|o| {
                o.key
                    .strip_prefix(&format!("{}/", self.1))
                    .unwrap()
                    .to_string()
            })
            .collect()
    }
    fn delete(&self, key: &str) {
        self.2
            .block_on(self.0.delete(&format!("{}/{key}", self.1)))
            .unwrap();
    }
    fn len(&self, key: &str) -> u64 {
        self.2
            .block_on(self.0.head(&format!("{}/{key}", self.1)))
            .unwrap()
            .size
    }
    fn cut_tail(&self, key: &str, n: usize) {
        let k = format!("{}/{key}", self.1);
        let body = self.2.block_on(self.0.get(&k)).unwrap();
        let meta = ferry_store::Meta::new();
        let cut = body.slice(..body.len() - n);
        self.2.block_on(self.0.put(&k, cut, &meta)).unwrap();
    }
}

fn repaired(repo: &Repo, raw: &dyn Raw, dir: &Path) {
    let src = dir.join("src");
    repokit::corpus(&src, 3 << 20);
    std::thread::sleep(std::time::Duration::from_millis(2100));
    repo.ok(&["init"]);
    repo.ok(&["backup", src.to_str().unwrap()]);
    std::fs::write(src.join("late"), ferry_testkit::random_bytes(1 << 20, 5)).unwrap();
    repo.ok(&["backup", src.to_str().unwrap()]);
    let index = raw.keys("index");
    assert!(!index.is_empty());
    for k in &index {
        raw.delete(k);
    }
    let broken = repo.run(&["--no-cache", "check"], &[]);
    assert!(!broken.status.success(), "check passed with no index");

    let r = repo.ok(&["--json", "repair", "index"]);
    assert_eq!(r["deleted"], 0, "{r}");
    assert!(r["blobs"].as_u64().unwrap() > 0, "{r}");
    repo.ok(&["--no-cache", "check", "--read-data"]);
    let out = dir.join("out");
    repo.ok(&[
        "--no-cache",
        "restore",
        "latest",
        "--target",
        out.to_str().unwrap(),
    ]);
    assert_same_tree(&src, &out.join(src.strip_prefix("/").unwrap()));

    // A pack whose header is cut off: named, left out, non-zero exit; the rest indexed.
    let packs = raw.keys("data");
    raw.cut_tail(&packs[0], 3);
    let out = repo.run(&["--json", "repair", "index"], &[]);
    let err = stderr(&out);
    assert!(
        !out.status.success(),
        "a damaged pack went unmentioned: {err}"
    );
    assert!(err.contains("1 packs could not be read"), "{err}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let short = packs[0].rsplit('/').next().unwrap()[..8].to_string();
    let damaged = r["damaged"].as_array().unwrap();
    assert_eq!(damaged.len(), 1, "{r}");
    assert!(
        damaged[0]
            .as_str()
            .unwrap()
            .starts_with(&format!("pack {short}")),
        "{r}"
    );
    assert_eq!(r["deleted"], 1, "the rebuilt index file was replaced: {r}");
}

#[test]
fn repair_index_local() {
    let dir = scratch("repair-local");
    let repo = Repo::local(&dir);
    repaired(&repo, &Disk(dir.join("repo")), &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn repair_index_minio() {
    let Some(repo) = Repo::s3() else { return };
    let cfg = ferry_testkit::s3().unwrap();
    let bucket = repo
        .url
        .strip_prefix("s3://")
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let raw = Bucket(
        Arc::new(CloudStore::s3(&cfg, bucket).unwrap()),
        "repo".into(),
        rt,
    );
    let dir = scratch("repair-s3");
    repaired(&repo, &raw, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Files in the corpus `repair snapshots` mends.
const FILES: u64 = 100;

fn snapshots_mended(repo: &Repo, raw: &dyn Raw, dir: &Path) {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    // Files of one chunk each (under the 512 KiB minimum), about two packs' worth: a lost
    // pack takes some of them whole and leaves the others whole, however the backup
    // interleaved its reads.
    for i in 0..FILES {
        let data = ferry_testkit::random_bytes(300 << 10, 100 + i);
        std::fs::write(src.join(format!("sub/f{i}")), data).unwrap();
    }
    std::fs::write(src.join("small"), b"small").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2100));
    repo.ok(&["init"]);
    repo.ok(&["backup", src.to_str().unwrap(), "--tag", "nightly"]);
    // A data pack is lost (the largest: tree packs are small).
    let mut packs = raw.keys("data");
    packs.sort_by_key(|k| raw.len(k));
    raw.delete(packs.last().unwrap());
    assert_eq!(raw.keys("data").len(), packs.len() - 1);
    repo.ok(&["repair", "index"]);
    assert!(!repo.run(&["--no-cache", "check"], &[]).status.success());

    let before = repo.ok(&["--json", "snapshots"]);
    let dry = repo.ok(&["--json", "repair", "snapshots", "--dry-run"]);
    let dropped: Vec<String> = dry["dropped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_string())
        .collect();
    assert!(!dropped.is_empty(), "{dry}");
    assert_eq!(repo.ok(&["--json", "snapshots"]), before, "a dry run wrote");

    let r = repo.ok(&["--json", "repair", "snapshots", "--forget"]);
    assert_eq!(r["repaired"].as_array().unwrap().len(), 1, "{r}");
    let after = repo.ok(&["--json", "snapshots"]);
    let snaps = after.as_array().unwrap();
    assert_eq!(snaps.len(), 1, "{after}");
    assert_eq!(snaps[0]["tags"], serde_json::json!(["nightly", "repaired"]));
    assert_eq!(
        snaps[0]["time"], before[0]["time"],
        "the snapshot keeps its time"
    );
    repo.ok(&["--no-cache", "check", "--read-data"]);

    // What survived restores byte-identical; what went is what was said to go.
    let out = dir.join("out");
    repo.ok(&["restore", "latest", "--target", out.to_str().unwrap()]);
    let back = out.join(src.strip_prefix("/").unwrap());
    let mut kept = 0;
    for rel in (0..FILES)
        .map(|i| format!("sub/f{i}"))
        .chain(["small".to_string()])
    {
        kept += usize::from(back.join(&rel).exists());
        let said = dropped.iter().any(|d| d.contains(&format!("/{rel}:")));
        match back.join(&rel).exists() {
            true => assert!(ferry_testkit::same_file(&src.join(&rel), &back.join(&rel))),
            false => assert!(said, "{rel} went unreported: {dropped:?}"),
        }
        assert!(
            !(said && back.join(&rel).exists()),
            "{rel} reported but restored"
        );
    }
    assert!(
        kept > 0,
        "a lost pack took everything: the test needs several data packs"
    );
}

#[test]
fn repair_snapshots_local() {
    let dir = scratch("repsnap-local");
    let repo = Repo::local(&dir);
    snapshots_mended(&repo, &Disk(dir.join("repo")), &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn repair_snapshots_minio() {
    let Some(repo) = Repo::s3() else { return };
    let cfg = ferry_testkit::s3().unwrap();
    let bucket = repo
        .url
        .strip_prefix("s3://")
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let raw = Bucket(
        Arc::new(CloudStore::s3(&cfg, bucket).unwrap()),
        "repo".into(),
        rt,
    );
    let dir = scratch("repsnap-s3");
    snapshots_mended(&repo, &raw, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

//! `restore --overwrite`, `--delete`, `--include/--exclude`, as restic users expect them,
//! with the real binary on a local repository.

mod repokit;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use repokit::{scratch, stderr, Repo};

struct Rig {
    dir: PathBuf,
    repo: Repo,
    src: PathBuf,
    target: PathBuf,
}

impl Rig {
    /// A source with files, a nested directory and a log, backed up.
    fn new(tag: &str) -> Rig {
        let dir = scratch(tag);
        let repo = Repo::local(&dir);
        let src = dir.join("src");
        std::fs::create_dir_all(src.join("d/e")).unwrap();
        for (f, body) in [
            ("a", "alpha"),
            ("b", "bravo"),
            ("d/c", "charlie"),
            ("d/e/f", "foxtrot"),
            ("d/run.log", "log"),
        ] {
            std::fs::write(src.join(f), body).unwrap();
        }
        repo.ok(&["init"]);
        repo.ok(&["backup", src.to_str().unwrap()]);
        let target = dir.join("target");
        Rig {
            dir,
            repo,
            src,
            target,
        }
    }

    /// Where `rel` of the source lands in the target.
    fn at(&self, rel: &str) -> PathBuf {
        self.target
            .join(self.src.strip_prefix("/").unwrap())
            .join(rel)
    }

    /// A restore with `extra` that must fail; its stderr.
    fn refused(&self, extra: &[&str]) -> String {
        let mut a = vec![
            "restore",
            "latest",
            "--target",
            self.target.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        let out = self.repo.run(&a, &[]);
        assert!(!out.status.success(), "{extra:?} succeeded");
        stderr(&out)
    }

    fn restore(&self, extra: &[&str]) -> serde_json::Value {
        let mut a = vec!["--json", "restore", "latest", "--target"];
        a.push(self.target.to_str().unwrap());
        a.extend_from_slice(extra);
        self.repo.ok(&a)
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ino(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).unwrap().ino()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn overwrite_never_if_changed_and_always() {
    let r = Rig::new("ro-over");
    r.restore(&[]);
    std::fs::write(r.at("a"), "changed").unwrap();
    let b = ino(&r.at("b"));

    let j = r.restore(&["--overwrite", "never"]);
    assert_eq!(read(&r.at("a")), "changed");
    assert_eq!(j["skipped"], 5, "{j}");
    assert_eq!(ino(&r.at("b")), b, "never: left as it was");

    let j = r.restore(&["--overwrite", "if-changed"]);
    assert_eq!(read(&r.at("a")), "alpha", "changed: replaced");
    assert_eq!(ino(&r.at("b")), b, "unchanged: left as it was");
    assert_eq!(j["skipped"], 4, "{j}");
    // Same size and content, another mode: changed.
    std::fs::set_permissions(
        r.at("b"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    r.restore(&["--overwrite", "if-changed"]);
    assert_ne!(ino(&r.at("b")), b, "mode differs: replaced");

    let b = ino(&r.at("b"));
    let j = r.restore(&[]);
    assert_ne!(ino(&r.at("b")), b, "always: replaced");
    assert_eq!(j["skipped"], 0, "{j}");
    let err = r.refused(&["--overwrite", "sometimes"]);
    assert!(err.contains("sometimes"), "{err}");
}

/// if-different reads what if-changed trusts: a file changed with its size and mtime put
/// back is replaced; a file with the snapshot's content is left whatever its mtime.
#[test]
fn overwrite_if_different_compares_content() {
    let r = Rig::new("ro-diff");
    r.restore(&[]);
    let (a, b) = (r.at("a"), r.at("b"));
    let mtime = std::fs::metadata(&a).unwrap().modified().unwrap();
    std::fs::write(&a, "ALPHA").unwrap();
    let set_mtime = |p: &Path, t| {
        let f = std::fs::File::options().write(true).open(p).unwrap();
        f.set_modified(t).unwrap();
    };
    set_mtime(&a, mtime);
    set_mtime(&b, std::time::SystemTime::UNIX_EPOCH);
    let ib = ino(&b);
    r.restore(&["--overwrite", "if-changed"]);
    assert_eq!(read(&a), "ALPHA", "if-changed trusts size and mtime");
    let ib2 = ino(&b);
    assert_ne!(ib2, ib, "if-changed: another mtime, replaced");
    set_mtime(&b, std::time::SystemTime::UNIX_EPOCH);
    let j = r.restore(&["--overwrite", "if-different"]);
    assert_eq!(read(&a), "alpha", "content differs: replaced");
    assert_eq!(ino(&b), ib2, "same content: left as it was");
    assert_eq!(j["skipped"], 4, "{j}");
}

#[test]
fn delete_makes_the_target_equal_and_never_follows_a_link() {
    let r = Rig::new("ro-del");
    r.restore(&[]);
    let outside = r.dir.join("outside");
    std::fs::create_dir_all(outside.join("keep")).unwrap();
    std::fs::write(outside.join("victim"), "keep").unwrap();
    std::fs::write(r.at("extra"), "x").unwrap();
    std::fs::create_dir_all(r.at("d/newdir/deeper")).unwrap();
    std::fs::write(r.at("d/newdir/deeper/x"), "x").unwrap();
    std::os::unix::fs::symlink(&outside, r.at("d/dirlink")).unwrap();
    std::os::unix::fs::symlink(outside.join("victim"), r.at("d/e/filelink")).unwrap();
    std::fs::write(r.at("d/other.log"), "excluded: kept").unwrap();

    let j = r.restore(&["--delete", "--exclude", "*.log"]);
    assert_eq!(j["deleted"], 4, "{j}");
    for gone in ["extra", "d/newdir", "d/dirlink", "d/e/filelink"] {
        assert!(
            std::fs::symlink_metadata(r.at(gone)).is_err(),
            "{gone} kept"
        );
    }
    assert_eq!(read(&r.at("d/other.log")), "excluded: kept");
    // Restored by the first restore, excluded now: neither rewritten nor deleted.
    assert_eq!(read(&r.at("d/run.log")), "log");
    assert_eq!(read(&outside.join("victim")), "keep");
    assert!(outside.join("keep").is_dir());

    // Narrowed by a pattern: only within what it selects.
    std::fs::write(r.at("extra"), "x").unwrap();
    std::fs::write(r.at("d/e/extra"), "x").unwrap();
    let j = r.restore(&["--delete", "--include", "**/d/e"]);
    assert_eq!(j["deleted"], 1, "{j}");
    assert!(r.at("extra").exists(), "outside the selection: kept");
    assert!(!r.at("d/e/extra").exists());
}

#[test]
fn include_and_exclude_patterns_select_what_is_restored() {
    let r = Rig::new("ro-sel");
    let j = r.restore(&["--include", "**/d/e", "--include", "a"]);
    assert_eq!(j["files"], 2, "{j}");
    assert_eq!(read(&r.at("d/e/f")), "foxtrot");
    assert_eq!(read(&r.at("a")), "alpha");
    assert!(!r.at("b").exists() && !r.at("d/c").exists());

    std::fs::remove_dir_all(&r.target).unwrap();
    let anchored = format!("{}/d", r.src.display());
    let j = r.restore(&["--exclude", &anchored, "--exclude", "b"]);
    assert_eq!(j["files"], 1, "{j}");
    assert!(r.at("a").exists() && !r.at("b").exists() && !r.at("d").exists());

    let err = r.refused(&["--include", "a["]);
    assert!(err.contains("--include 'a['"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

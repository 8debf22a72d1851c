//! Attacks on a restore, each by one of the parties docs/security.md distrusts, with the
//! real binary run as root: nothing outside the target changes (the surrounding tree is
//! surveyed before and after), no file is readable by another user while the restore runs
//! (a reader polls as `nobody`), names a snapshot should never hold are refused, and links
//! planted in the target are replaced, never followed.

mod repokit;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use repokit::{assert_same_tree, forge, forge_levels, scratch, stderr, Repo};

/// Root, which these attacks need (a restore that sets owners, a reader of another uid).
/// Under CI a missing root is a failure, elsewhere a loud skip.
fn root() -> bool {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        std::env::var("CI").is_err(),
        "tests/security.rs needs root under CI"
    );
    eprintln!("SKIPPED: tests/security.rs needs root");
    false
}

/// What `dir` holds, every entry with kind, mode, owner, size, content hash and link target,
/// leaving out the subtrees named in `skip`.
fn survey(dir: &Path, skip: &[&Path]) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    fn walk(p: &Path, skip: &[&Path], out: &mut BTreeMap<PathBuf, String>) {
        if skip.contains(&p) {
            return;
        }
        let m = std::fs::symlink_metadata(p).unwrap();
        let what = if m.file_type().is_symlink() {
            format!("link {:?}", std::fs::read_link(p).unwrap())
        } else if m.is_file() {
            format!("file {}", blake3::hash(&std::fs::read(p).unwrap()))
        } else {
            "dir".to_string()
        };
        out.insert(
            p.to_path_buf(),
            format!("{what} {:o} {}:{} {}", m.mode(), m.uid(), m.gid(), m.len()),
        );
        if m.is_dir() {
            for e in std::fs::read_dir(p).unwrap() {
                walk(&e.unwrap().path(), skip, out);
            }
        }
    }
    walk(dir, skip, &mut out);
    out
}

/// Root-only files and a directory outside the target, for planted links to point at.
fn victims(dir: &Path) -> PathBuf {
    let out = dir.join("outside");
    std::fs::create_dir_all(out.join("dir")).unwrap();
    for v in ["a", "big", "temp", "f"] {
        let p = out.join(v);
        std::fs::write(&p, b"ROOT ONLY\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    out
}

fn symlink(to: &Path, at: &Path) {
    std::os::unix::fs::symlink(to, at).unwrap();
}

/// A source owned by a backed-up user (uid 1234): a small file, a directory, a file of
/// several chunks, and a symlink to a root-only file.
fn user_source(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("a"), b"user data\n").unwrap();
    std::fs::write(src.join("d/f"), b"in d\n").unwrap();
    std::fs::write(src.join("big"), ferry_testkit::random_bytes(5 << 20, 3)).unwrap();
    symlink(Path::new("/etc/shadow"), &src.join("lnk"));
    for p in ["", "d", "a", "d/f", "big", "lnk"] {
        std::os::unix::fs::lchown(src.join(p), Some(1234), Some(1234)).unwrap();
    }
    src
}

/// Regression, the review's first finding: a backed-up user's symlink named like the
/// restore's temp file made a root restore overwrite a root-only file and chown it to that
/// user. Links and files planted where the restore writes, at every depth, are replaced.
#[test]
fn links_planted_in_the_target_are_replaced_never_followed() {
    if !root() {
        return;
    }
    let dir = scratch("sec-links");
    let repo = Repo::local(&dir);
    let src = user_source(&dir);
    let outside = victims(&dir);
    repo.ok(&["init"]);
    repo.ok(&["backup", src.to_str().unwrap()]);
    let skip_repo = dir.join("repo");

    // Planted beside and in place of every entry the restore makes.
    let target = dir.join("t1");
    let at = target.join(src.strip_prefix("/").unwrap());
    std::fs::create_dir_all(&at).unwrap();
    symlink(&outside.join("a"), &at.join("a"));
    symlink(&outside.join("big"), &at.join("big"));
    symlink(&outside.join("dir"), &at.join("d"));
    symlink(&outside.join("temp"), &at.join(".a.ferry-restore"));
    symlink(&outside.join("temp"), &at.join(".big.ferry-restore"));
    std::fs::write(at.join("lnk"), b"a file where the link goes").unwrap();
    let before = survey(&dir, &[&target, &skip_repo]);
    let out = repo.run(
        &["restore", "latest", "--target", target.to_str().unwrap()],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        survey(&dir, &[&target, &skip_repo]),
        before,
        "outside changed"
    );
    for n in ["a", "big", "d", "d/f", "lnk"] {
        assert_eq!(
            std::fs::symlink_metadata(src.join(n)).unwrap().file_type(),
            std::fs::symlink_metadata(at.join(n)).unwrap().file_type(),
            "{n}"
        );
    }
    assert!(ferry_testkit::same_file(&src.join("big"), &at.join("big")));
    assert_eq!(
        std::fs::read_link(at.join("lnk")).unwrap(),
        Path::new("/etc/shadow")
    );

    // A symlink as the first component under the target.
    let target = dir.join("t2");
    std::fs::create_dir_all(&target).unwrap();
    let first = src.strip_prefix("/").unwrap().components().next().unwrap();
    symlink(&outside.join("dir"), &target.join(first));
    let out = repo.run(
        &["restore", "latest", "--target", target.to_str().unwrap()],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(survey(&dir, &[&dir.join("t1"), &target, &skip_repo]), {
        let mut b = before.clone();
        b.retain(|p, _| !p.starts_with(dir.join("t1")));
        b
    });
    let at = target.join(src.strip_prefix("/").unwrap());
    assert_same_tree(&src, &at);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A password holder writes a snapshot whose names climb out of the target or hold a
/// slash: each is refused with its path, the rest restored, and check calls it damage.
#[test]
fn hostile_names_are_refused_and_the_rest_restored() {
    if !root() {
        return;
    }
    let dir = scratch("sec-names");
    let repo = Repo::local(&dir);
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("good"), b"good\n").unwrap();
    repo.ok(&["init"]);
    repo.ok(&["backup", src.to_str().unwrap()]);
    let hostile = [
        ("..", false),
        ("../escaped", false),
        ("x/y", false),
        ("", false),
        (".", false),
        (&hex_of("../hex-escaped"), true),
    ];
    forge(&dir.join("repo"), |nodes| {
        // The snapshot's root is "/"; down to src's node, then its files.
        let good = nodes[0].clone();
        for (name, is_hex) in hostile {
            let mut n = good.clone();
            n.name = name.to_string();
            n.name_hex = is_hex;
            nodes.push(n);
        }
    });
    let before = survey(&dir, &[&dir.join("repo")]);
    let target = dir.join("target");
    let out = repo.run(
        &["restore", "latest", "--target", target.to_str().unwrap()],
        &[],
    );
    assert!(
        !out.status.success(),
        "a restore with refused entries succeeded"
    );
    let err = stderr(&out);
    assert_eq!(err.matches("refused").count(), hostile.len(), "{err}");
    assert!(!dir.join("escaped").exists() && !dir.join("hex-escaped").exists());
    assert_eq!(survey(&dir, &[&dir.join("repo"), &target]), {
        let mut b = before.clone();
        b.retain(|p, _| !p.starts_with(&target));
        b
    });
    // The good entry (the snapshot's first) came back.
    let restored = survey(&target, &[]);
    assert!(restored.keys().any(|p| p.ends_with("good")), "{restored:?}");

    let out = repo.run(&["check"], &[]);
    assert!(!out.status.success(), "check called hostile names healthy");
    assert!(
        stderr(&out).contains("a restore refuses it"),
        "{}",
        stderr(&out)
    );

    // And backup never writes such a name.
    for name in ["../x", "a/b", "..", ""] {
        let out = repo.run(&["backup", "--stdin", "--name", name], &[]);
        assert!(!out.status.success(), "--name {name:?} accepted");
        assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
    }
    std::fs::remove_dir_all(dir).unwrap();
}

fn hex_of(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// A local user polls every file under the target while a root restore runs: a 0600 file,
/// and 0644 files in a 0700 directory, none of which that user could read at the source,
/// must never be readable, not even under a temp name.
#[test]
fn no_file_is_readable_by_another_user_during_a_restore() {
    if !root() {
        return;
    }
    let dir = scratch("sec-read");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let repo = Repo::local(&dir);
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("private")).unwrap();
    for i in 0..1500 {
        let body = format!("SECRET {i}\n").repeat(1 + i % 50);
        let (p, mode) = if i % 2 == 0 {
            (src.join(format!("s{i}")), 0o600)
        } else {
            (src.join(format!("private/p{i}")), 0o644)
        };
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let mut big = b"SECRET big\n".repeat(1000);
    big.extend(ferry_testkit::random_bytes(6 << 20, 9));
    std::fs::write(src.join("big"), &big).unwrap();
    std::fs::set_permissions(src.join("big"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(src.join("private"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o755)).unwrap();
    repo.ok(&["init"]);
    repo.ok(&["backup", src.to_str().unwrap()]);

    // The target exists and anyone may enter it, as a shared restore directory would.
    let target = dir.join("target");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
    let stop = dir.join("stop");
    let script = format!(
        "n=0; while [ ! -e {stop} ]; do find {t} -type f -exec cat {{}} + 2>/dev/null; \
         n=$((n+1)); done; echo polls=$n >&2",
        stop = stop.display(),
        t = target.display()
    );
    let reader = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
        ])
        .arg(&script)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("setpriv (util-linux)");
    for _ in 0..3 {
        std::fs::remove_dir_all(&target).unwrap();
        std::fs::create_dir_all(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = repo.run(
            &["restore", "latest", "--target", target.to_str().unwrap()],
            &[],
        );
        assert!(out.status.success(), "{}", stderr(&out));
    }
    std::fs::write(&stop, b"").unwrap();
    let seen = reader.wait_with_output().unwrap();
    let polls = String::from_utf8_lossy(&seen.stderr).into_owned();
    assert!(polls.contains("polls="), "the reader did not run: {polls}");
    // Not a byte: every file is 0600 or in a 0700 directory at the source (even the zeros
    // of a file sized before its blobs arrive are no one else's to read).
    let read = &seen.stdout;
    assert!(
        read.is_empty(),
        "another user read {} bytes of restored files ({} of them secrets; {polls})",
        read.len(),
        String::from_utf8_lossy(read).matches("SECRET").count()
    );
    assert_same_tree(&src, &target.join(src.strip_prefix("/").unwrap()));
    std::fs::remove_dir_all(dir).unwrap();
}

/// `wal-fetch` writes where PostgreSQL asked: a link planted there is replaced, never
/// followed. A spool others may write to, or another user's, is refused with one line.
#[test]
fn wal_fetch_replaces_a_planted_link_and_a_shared_spool_is_refused() {
    let dir = scratch("sec-wal");
    let repo = Repo::local(&dir);
    let home = dir.join("home");
    let env = [
        ("HOME", home.to_str().unwrap()),
        ("XDG_STATE_HOME", home.to_str().unwrap()),
        ("FERRY_WAL_PREFETCH", "0"),
    ];
    let pg_wal = dir.join("pgdata/pg_wal");
    std::fs::create_dir_all(&pg_wal).unwrap();
    let hist = pg_wal.join("00000002.history");
    std::fs::write(&hist, b"1\t0/3000000\tno recovery target specified\n").unwrap();
    repo.ok(&["init"]);
    let push = |extra: &[&str]| {
        let mut args = vec!["wal-push"];
        args.extend_from_slice(extra);
        args.push(hist.to_str().unwrap());
        repo.run(&args, &env)
    };
    let out = push(&["--async", "false"]);
    assert!(out.status.success(), "{}", stderr(&out));

    let victim = dir.join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    let dest = pg_wal.join("RECOVERYXLOG");
    symlink(&victim, &dest);
    let out = repo.run(
        &["wal-fetch", "00000002.history", dest.to_str().unwrap()],
        &env,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    assert!(std::fs::symlink_metadata(&dest).unwrap().is_file());
    assert_eq!(std::fs::read(&dest).unwrap(), std::fs::read(&hist).unwrap());

    let shared = dir.join("shared-spool");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = push(&["--spool", shared.to_str().unwrap()]);
    assert!(!out.status.success(), "a world-writable spool was used");
    assert!(
        stderr(&out).contains("may be written by others"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
    if root() {
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&shared, Some(65534), Some(65534)).unwrap();
        let out = push(&["--spool", shared.to_str().unwrap()]);
        assert!(!out.status.success(), "another user's spool was used");
        assert!(
            stderr(&out).contains("not by this user"),
            "{}",
            stderr(&out)
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A root restore recreates setuid files and FIFOs as stored; `--no-special` leaves the
/// setuid bit and the FIFO out.
#[test]
fn no_special_leaves_out_setuid_bits_and_special_files() {
    if !root() {
        return;
    }
    let dir = scratch("sec-special");
    let repo = Repo::local(&dir);
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("suid"), b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(src.join("suid"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    let fifo = std::ffi::CString::new(src.join("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    repo.ok(&["init"]);
    repo.ok(&["backup", src.to_str().unwrap()]);
    let mode = |t: &Path| {
        let at = t.join(src.strip_prefix("/").unwrap());
        let fifo = std::fs::symlink_metadata(at.join("fifo")).ok();
        (
            std::fs::metadata(at.join("suid")).unwrap().mode() & 0o7777,
            fifo.map(|m| m.mode() & libc::S_IFMT),
        )
    };
    let all = dir.join("all");
    repo.ok(&["restore", "latest", "--target", all.to_str().unwrap()]);
    assert_eq!(mode(&all), (0o4755, Some(libc::S_IFIFO)));
    let plain = dir.join("plain");
    repo.ok(&[
        "restore",
        "latest",
        "--no-special",
        "--target",
        plain.to_str().unwrap(),
    ]);
    assert_eq!(mode(&plain), (0o755, None));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A local user who owns the target gives it a default ACL naming themselves: what the
/// restore makes inherits it, and the final chmod 0640 of a root file would have opened the
/// ACL's mask to them (read). The restored files and directories carry no ACL of the
/// target's, only the snapshot's (none here).
#[test]
fn a_default_acl_in_the_target_is_not_inherited() {
    if !root() {
        return;
    }
    let dir = scratch("sec-acl");
    let repo = Repo::local(&dir);
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("d/secret"), b"root's only").unwrap();
    std::fs::set_permissions(src.join("d/secret"), std::fs::Permissions::from_mode(0o640)).unwrap();
    repo.ok(&["init"]);
    repo.ok(&["backup", src.to_str().unwrap()]);
    // user::rwx user:nobody:rwx group::r-x mask::rwx other::--- (the kernel's xattr form).
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 7u16, u32::MAX),
        (0x02, 7, 65534),
        (0x04, 5, u32::MAX),
        (0x10, 7, u32::MAX),
        (0x20, 0, u32::MAX),
    ] {
        acl.extend(tag.to_le_bytes());
        acl.extend(perm.to_le_bytes());
        acl.extend(id.to_le_bytes());
    }
    let target = dir.join("target");
    std::fs::create_dir(&target).unwrap();
    std::os::unix::fs::chown(&target, Some(65534), Some(65534)).unwrap();
    xattr::set(&target, "system.posix_acl_default", &acl).expect("a default ACL on the target");
    repo.ok(&["restore", "latest", "--target", target.to_str().unwrap()]);
    let at = target.join(src.strip_prefix("/").unwrap());
    assert_eq!(std::fs::read(at.join("d/secret")).unwrap(), b"root's only");
    for p in [at.join("d/secret"), at.join("d"), at.clone()] {
        for name in ["system.posix_acl_access", "system.posix_acl_default"] {
            assert!(
                xattr::get(&p, name).unwrap().is_none(),
                "{}: {name} inherited from the target",
                p.display()
            );
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The files of `kind` (a directory of the repository).
fn stored(repo: &Path, kind: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo.join(kind))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// Puts `bytes` into `kind/` under the name a reader checks them against (their BLAKE3), as
/// whoever can write the store can; returns the path.
fn plant(repo: &Path, kind: &str, bytes: &[u8]) -> PathBuf {
    let p = repo.join(kind).join(blake3::hash(bytes).to_hex().as_str());
    std::fs::write(&p, bytes).unwrap();
    p
}

/// The store writer: every file it moves to another kind's place, or brings from another
/// repository sealed under the same password, is named by `check` for what it is, and
/// nothing reads it as what its place says.
#[test]
fn swapped_and_foreign_repository_files_are_named_by_check() {
    let dir = scratch("sec-swap");
    let (a, b) = (Repo::local(&dir.join("a")), Repo::local(&dir.join("b")));
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"one").unwrap();
    for r in [&a, &b] {
        std::fs::create_dir_all(Path::new(&r.url).parent().unwrap()).unwrap();
        r.ok(&["init"]);
        r.ok(&["backup", src.to_str().unwrap()]);
    }
    let (ra, rb) = (PathBuf::from(&a.url), PathBuf::from(&b.url));
    let read = |p: &PathBuf| std::fs::read(p).unwrap();
    let snap = read(&stored(&ra, "snapshots")[0]);
    let index = read(&stored(&ra, "index")[0]);
    let config = read(&ra.join("config"));
    let foreign = read(&stored(&rb, "snapshots")[0]);
    for (kind, bytes, says) in [
        ("index", &snap, "sealed as snapshots, where index belongs"),
        (
            "snapshots",
            &index,
            "sealed as index, where snapshots belongs",
        ),
        (
            "snapshots",
            &config,
            "sealed as config, where snapshots belongs",
        ),
        ("snapshots", &foreign, "does not decrypt"),
    ] {
        let planted = plant(&ra, kind, bytes);
        let out = a.run(&["check"], &[]);
        let err = stderr(&out);
        let name = planted.file_name().unwrap().to_string_lossy().to_string();
        assert!(!out.status.success(), "{kind}/{name} went unnoticed: {err}");
        assert!(
            err.lines()
                .any(|l| l.contains(&format!("{kind}/{name}")) && l.contains(says)),
            "{kind}/{name}: check does not say '{says}': {err}"
        );
        // Nothing reads it as what its place says: a restore refuses too, writing nothing.
        let target = dir.join("target");
        let out = a.run(
            &["restore", "latest", "--target", target.to_str().unwrap()],
            &[],
        );
        assert!(!out.status.success(), "{kind}/{name}: restored");
        assert!(!target.exists(), "{kind}/{name}: restore wrote");
        std::fs::remove_file(planted).unwrap();
        a.ok(&["check"]);
    }
    // B's key file opens with the same password but binds B's id: A's config is refused.
    let keys = stored(&ra, "keys");
    let hidden = dir.join("a-keys");
    std::fs::rename(ra.join("keys"), &hidden).unwrap();
    std::fs::create_dir(ra.join("keys")).unwrap();
    plant(&ra, "keys", &read(&stored(&rb, "keys")[0]));
    let out = a.run(&["snapshots"], &[]);
    let err = stderr(&out);
    assert!(!out.status.success() && err.contains("/config:"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    std::fs::remove_dir_all(ra.join("keys")).unwrap();
    std::fs::rename(&hidden, ra.join("keys")).unwrap();
    assert_eq!(stored(&ra, "keys"), keys);
    a.ok(&["check"]);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The password holder: trees that share their subtree at every level name 2^24 entries
/// in 24 small trees. The restore stops at its bound with one line, having written only a
/// bounded number of directories.
#[test]
fn trees_sharing_subtrees_exponentially_are_refused_at_a_bound() {
    if !root() {
        return;
    }
    let dir = scratch("sec-share");
    let repo = Repo::local(&dir);
    let src = user_source(&dir);
    repo.ok(&["init"]);
    repo.ok(&["backup", src.to_str().unwrap()]);
    forge_levels(&PathBuf::from(&repo.url), 24, |_| {});
    let target = dir.join("target");
    let out = repo.run(
        &["restore", "latest", "--target", target.to_str().unwrap()],
        &[("FERRY_RESTORE_MAX_ENTRIES", "100000")],
    );
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(err.contains("more than 100000 entries"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

//! `ferry mount`: a real FUSE mount of a repository's snapshots, by time, host, tag and id;
//! files read back byte-identical, links as stored, writes refused; Ctrl-C unmounts and the
//! command exits cleanly. Needs /dev/fuse: skipped, loudly, only where it is missing (and
//! never under CI, which has it).

mod repokit;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use repokit::{forge_index, forge_levels, scratch, Repo};

fn fuse_available() -> bool {
    if Path::new("/dev/fuse").exists() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "/dev/fuse is missing under CI: ferry mount untested"
    );
    eprintln!("SKIPPED: /dev/fuse is missing here: ferry mount untested");
    false
}

/// True when `p` is a mount point now.
fn mounted(p: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let p = p.to_str().unwrap();
    info.lines().any(|l| l.split(' ').nth(4) == Some(p))
}

/// Every file and link under `a` has the same bytes or target under `b`, and nothing more.
fn same_content(a: &Path, b: &Path) {
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
    assert_eq!(names, other, "{} vs {}", a.display(), b.display());
    for n in names {
        let (x, y) = (a.join(&n), b.join(&n));
        let m = std::fs::symlink_metadata(&x).unwrap();
        let t = m.file_type();
        if t.is_symlink() {
            assert_eq!(
                std::fs::read_link(&x).unwrap(),
                std::fs::read_link(&y).unwrap()
            );
        } else if t.is_dir() {
            same_content(&x, &y);
        } else if t.is_file() {
            assert!(ferry_testkit::same_file(&x, &y), "{} differs", y.display());
            let my = std::fs::symlink_metadata(&y).unwrap();
            assert_eq!(
                (m.size(), m.mtime(), m.uid()),
                (my.size(), my.mtime(), my.uid())
            );
        }
    }
}

struct Mount {
    child: Child,
    at: PathBuf,
}

impl Mount {
    fn start(repo: &Repo, at: &Path) -> Mount {
        Self::start_with(repo, at, &[])
    }

    /// [`Mount::start`] with `extra` variables.
    fn start_with(repo: &Repo, at: &Path, extra: &[(&str, &str)]) -> Mount {
        std::fs::create_dir_all(at).unwrap();
        let child = repo
            .cmd(&["mount", at.to_str().unwrap()], extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let m = Mount {
            child,
            at: at.to_path_buf(),
        };
        // Waits for the mount to appear (not a measurement: a bound on a hang).
        let start = Instant::now();
        while !mounted(at) {
            assert!(start.elapsed() < Duration::from_secs(60), "never mounted");
            std::thread::sleep(Duration::from_millis(50));
        }
        m
    }

    /// Ctrl-C: the command unmounts and exits 0.
    fn stop(mut self) {
        // SAFETY: signals a child this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = self.child.wait().unwrap();
        assert!(status.success(), "ferry mount exited {status}");
        assert!(!mounted(&self.at), "still mounted after Ctrl-C");
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if mounted(&self.at) {
            let _ = self.child.kill();
            let _ = std::process::Command::new("fusermount")
                .arg("-uz")
                .arg(&self.at)
                .status();
        }
    }
}

fn browse(repo: &Repo, dir: &Path) {
    let src = dir.join("src");
    repokit::corpus(&src, 3 << 20);
    repo.ok(&["init"]);
    repo.ok(&[
        "backup",
        src.to_str().unwrap(),
        "--host",
        "alpha",
        "--tag",
        "first",
    ]);
    std::fs::write(src.join("added"), b"second").unwrap();
    let second = repo.ok(&["--json", "backup", src.to_str().unwrap(), "--host", "beta"]);
    let id = second["snapshot"].as_str().unwrap()[..8].to_string();
    let rel = src.strip_prefix("/").unwrap();

    let at = dir.join("mnt");
    let m = Mount::start(repo, &at);
    let top: Vec<String> = ["hosts", "ids", "snapshots", "tags"]
        .map(String::from)
        .to_vec();
    let mut got: Vec<String> = std::fs::read_dir(&at)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    got.sort();
    assert_eq!(got, top);
    same_content(&src, &at.join("snapshots/latest").join(rel));
    same_content(&src, &at.join("hosts/beta/latest").join(rel));
    same_content(&src, &at.join("ids").join(&id).join(rel));
    // The tagged one is the first: without the file added after it.
    let first = at.join("tags/first/latest").join(rel);
    assert!(first.join("big.bin").exists() && !first.join("added").exists());
    assert!(at
        .join("hosts/alpha/latest")
        .join(rel)
        .join("big.bin")
        .exists());
    // Read-only, whoever asks.
    let w = std::fs::OpenOptions::new()
        .write(true)
        .open(at.join("snapshots/latest").join(rel).join("added"));
    assert!(w.is_err(), "a write was accepted");
    assert!(std::fs::create_dir(at.join("snapshots/new")).is_err());
    m.stop();
}

#[test]
fn snapshots_browse_read_only_and_ctrl_c_unmounts_local() {
    if !fuse_available() {
        return;
    }
    let dir = scratch("mount");
    let repo = Repo::local(&dir);
    browse(&repo, &dir);
    let missing = dir.join("nowhere");
    let out = repo.run(&["mount", missing.to_str().unwrap()], &[]);
    let err = repokit::stderr(&out);
    assert!(!out.status.success() && err.contains("nowhere"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn snapshots_browse_read_only_and_ctrl_c_unmounts_minio() {
    let Some(repo) = Repo::s3() else { return };
    if !fuse_available() {
        return;
    }
    let dir = scratch("mount-s3");
    browse(&repo, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Directories under `d`, depth first, until one cannot be listed: its error, and how many
/// entries were seen before it (`None`: all of them, up to `most`).
fn walk_until_refused(d: &Path, seen: &mut usize, most: usize) -> Option<std::io::Error> {
    let entries = match std::fs::read_dir(d) {
        Ok(e) => e,
        Err(e) => return Some(e),
    };
    for e in entries {
        let e = match e {
            Ok(e) => e,
            Err(e) => return Some(e),
        };
        *seen += 1;
        if *seen >= most {
            return None;
        }
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            if let Some(err) = walk_until_refused(&e.path(), seen, most) {
                return Some(err);
            }
        }
    }
    None
}

/// A password holder's snapshot: trees that share their subtree at every level (2^24
/// copies), and an index that lies about a blob's length. Browsing it costs errors for the
/// calls that meet them (ENOMEM past the inode bound, EIO for the lying blob), never the
/// mount: it goes on answering what it holds.
#[test]
fn a_hostile_snapshot_costs_errors_not_the_mount() {
    if !fuse_available() {
        return;
    }
    // Its bound must hold while it walks: no other test drops the kernel's caches meanwhile.
    let _bound = BOUND.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("mount-hostile");
    let repo = Repo::local(&dir);
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("small"), b"small").unwrap();
    std::fs::write(src.join("d/big"), ferry_testkit::random_bytes(3 << 20, 5)).unwrap();
    repo.ok(&["init"]);
    let first = repo.ok(&["--json", "backup", src.to_str().unwrap()]);
    let id = first["snapshot"].as_str().unwrap()[..8].to_string();
    forge_levels(Path::new(&repo.url), 24, |_| {});
    forge_index(Path::new(&repo.url), |packs| {
        for (_, entries) in packs.iter_mut() {
            for e in entries.iter_mut().filter(|e| e.plain_len > 1000) {
                e.plain_len += 1;
            }
        }
    });
    let at = dir.join("mnt");
    let m = Mount::start_with(&repo, &at, &[("FERRY_MOUNT_MAX_INODES", "3000")]);
    let files = at
        .join("ids")
        .join(&id)
        .join(src.strip_prefix("/").unwrap());
    let big = std::fs::read(files.join("d/big")).unwrap_err();
    assert_eq!(big.raw_os_error(), Some(libc::EIO), "{big}");
    assert_eq!(std::fs::read(files.join("small")).unwrap(), b"small");

    let mut seen = 0;
    let refused = walk_until_refused(&at.join("snapshots/latest"), &mut seen, 1 << 20)
        .expect("2^24 entries were all listed");
    assert_eq!(
        refused.raw_os_error(),
        Some(libc::ENOMEM),
        "{refused} after {seen}"
    );
    assert!(
        seen < 3000,
        "{seen} entries listed past a bound of 3000 inodes"
    );
    // What it holds, it still serves.
    assert_eq!(std::fs::read(files.join("small")).unwrap(), b"small");
    assert!(std::fs::read_dir(&at).unwrap().count() == 4);
    m.stop();
    std::fs::remove_dir_all(dir).unwrap();
}

/// The entries of directory `p`, counted; the first error of its listing.
fn listed(p: &Path) -> std::io::Result<usize> {
    std::fs::read_dir(p)?.try_fold(0, |n, e| e.map(|_| n + 1))
}

/// Held by the tests that meet the inode bound: dropping the kernel's caches frees inodes in
/// every mount of the machine.
static BOUND: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// True when this process may drop the kernel's caches (root, /proc/sys writable); under CI
/// it must.
fn can_drop_caches() -> bool {
    match std::fs::write("/proc/sys/vm/drop_caches", "2") {
        Ok(()) => true,
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "cannot drop the kernel's caches under CI ({e}): mount's forget untested"
            );
            eprintln!("SKIPPED: cannot drop the kernel's caches ({e}): mount's forget untested");
            false
        }
    }
}

/// The kernel's `forget` is honoured: past the inode bound, directories not listed yet are
/// refused, and once the kernel has forgotten what was browsed (here: its caches dropped,
/// as memory pressure does), they list again without a remount.
#[test]
fn directories_the_kernel_forgot_free_their_inodes() {
    if !fuse_available() || !can_drop_caches() {
        return;
    }
    let _bound = BOUND.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("mount-forget");
    let repo = Repo::local(&dir);
    let src = dir.join("src");
    for d in 0..12 {
        let sub = src.join(format!("d{d}"));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..40 {
            std::fs::write(sub.join(format!("f{f}")), format!("{d}/{f}")).unwrap();
        }
    }
    repo.ok(&["init"]);
    repo.ok(&["--json", "backup", src.to_str().unwrap()]);
    let at = dir.join("mnt");
    let m = Mount::start_with(&repo, &at, &[("FERRY_MOUNT_MAX_INODES", "200")]);
    let base = at
        .join("snapshots/latest")
        .join(src.strip_prefix("/").unwrap());
    let d = |i: usize| base.join(format!("d{i}"));
    // Browsed while the kernel keeps every directory: the bound is met within a few.
    let before = (0..12).take_while(|&i| listed(&d(i)).is_ok()).count();
    assert!((1..12).contains(&before), "{before} directories listed");
    assert_eq!(
        listed(&d(before)).unwrap_err().raw_os_error(),
        Some(libc::ENOMEM)
    );
    // The kernel drops its caches after each directory: every one lists. (Its forgets
    // arrive on their own time: a refused listing is tried again.)
    for i in 0..12 {
        let mut tries = 0;
        let n = loop {
            std::fs::write("/proc/sys/vm/drop_caches", "2").expect("drop caches (root)");
            match listed(&d(i)) {
                Ok(n) => break n,
                Err(e) if e.raw_os_error() == Some(libc::ENOMEM) && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("d{i}: {e} after {tries} tries"),
            }
        };
        assert_eq!(n, 40, "d{i}");
    }
    assert_eq!(std::fs::read(d(11).join("f39")).unwrap(), b"11/39");
    m.stop();
    std::fs::remove_dir_all(dir).unwrap();
}

//! Backup test support: a corpus with every kind of file and metadata, a tree comparison that
//! checks contents and metadata, and `ferry` runs against one repository.
#![allow(dead_code)]

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use ferry_testkit::random_bytes;

/// A repository and the environment that reaches it.
pub struct Repo {
    pub url: String,
    pub env: Vec<(String, String)>,
}

impl Drop for Repo {
    /// The metadata cache made for this repository goes with it: tests leave nothing in the
    /// temp directory (hundreds of them were left by every run before).
    fn drop(&mut self) {
        if let Some(c) = self.cache_dir() {
            let _ = std::fs::remove_dir_all(c);
        }
    }
}

impl Repo {
    /// A repository in a fresh local directory.
    pub fn local(dir: &Path) -> Repo {
        Repo {
            url: dir.join("repo").display().to_string(),
            env: vec![("FERRY_PASSWORD".into(), "correct horse".into())],
        }
    }

    /// A repository in a fresh MinIO bucket, with its own metadata cache (not the user's);
    /// `None` (loud skip) without MinIO.
    pub fn s3() -> Option<Repo> {
        ferry_testkit::require("AWS_ENDPOINT_URL")?;
        let cache = std::env::temp_dir().join(ferry_testkit::unique("bk-cache"));
        Some(Repo {
            url: format!("s3://{}/repo", ferry_testkit::unique("bk")),
            env: vec![
                ("FERRY_PASSWORD".into(), "correct horse".into()),
                ("FERRY_CACHE_DIR".into(), cache.display().to_string()),
            ],
        })
    }

    /// A repository in a fresh fake-gcs-server bucket, with its own metadata cache; `None`
    /// (loud skip) without the emulator.
    pub fn gcs() -> Option<Repo> {
        ferry_testkit::require("STORAGE_EMULATOR_HOST")?;
        let cache = std::env::temp_dir().join(ferry_testkit::unique("bk-cache"));
        Some(Repo {
            url: format!("gs://{}/repo", ferry_testkit::unique("bk")),
            env: vec![
                ("FERRY_PASSWORD".into(), "correct horse".into()),
                ("FERRY_CACHE_DIR".into(), cache.display().to_string()),
            ],
        })
    }

    /// The metadata cache this repository's runs use, if any.
    pub fn cache_dir(&self) -> Option<PathBuf> {
        self.env
            .iter()
            .find(|(k, _)| k == "FERRY_CACHE_DIR")
            .map(|(_, v)| PathBuf::from(v))
    }

    /// Runs `ferry ARGS` against the repository, with `extra` environment.
    pub fn run(&self, args: &[&str], extra: &[(&str, &str)]) -> Output {
        self.cmd(args, extra).output().expect("run ferry")
    }

    /// The command `ferry ARGS`, not started.
    pub fn cmd(&self, args: &[&str], extra: &[(&str, &str)]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ferry"));
        c.args(args)
            .env("FERRY_REPO", &self.url)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(extra.iter().copied())
            .stdin(Stdio::null());
        c
    }

    /// Runs and insists on success; returns stdout parsed as JSON when `--json` was given.
    pub fn ok(&self, args: &[&str]) -> serde_json::Value {
        let out = self.run(args, &[]);
        assert!(
            out.status.success(),
            "ferry {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        last_json(&out.stdout)
    }
}

/// What a `--json` run printed: the whole of stdout, or its last line when status lines
/// (one JSON object a line, each second of a long backup or restore) came before it.
pub fn last_json(stdout: &[u8]) -> serde_json::Value {
    serde_json::from_slice(stdout).unwrap_or_else(|_| {
        let text = String::from_utf8_lossy(stdout);
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        serde_json::from_str(last).unwrap_or(serde_json::Value::Null)
    })
}

/// stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A scratch directory under /tmp, removed by the caller when done.
pub fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(ferry_testkit::unique(tag));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Sets a file's mtime (ns precision), not following symlinks.
pub fn set_mtime(p: &Path, sec: i64, nsec: i64) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let t = libc::timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    };
    // SAFETY: valid path and timespec array.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            [t, t].as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(rc, 0, "utimensat {}", p.display());
}

/// Every kind of file ferry must bring back: empty, large, sparse, symlinks (one dangling),
/// hard links, a FIFO, odd modes and owners, nanosecond mtimes, an xattr, a non-UTF-8 name.
pub fn corpus(root: &Path, big: usize) {
    std::fs::create_dir_all(root.join("dir/deeper")).unwrap();
    std::fs::write(root.join("empty"), b"").unwrap();
    std::fs::write(root.join("big.bin"), random_bytes(big, 1)).unwrap();
    std::fs::write(root.join("dir/text.txt"), b"hello\n".repeat(1000)).unwrap();
    std::fs::write(root.join("dir/deeper/one"), b"1").unwrap();
    // Sparse: 64 MiB apparent, 1 MiB of data in the middle.
    let f = std::fs::File::create(root.join("sparse.img")).unwrap();
    f.set_len(64 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &random_bytes(1 << 20, 2), 30 << 20).unwrap();
    std::os::unix::fs::symlink("dir/text.txt", root.join("link")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/target", root.join("dangling")).unwrap();
    std::fs::hard_link(root.join("dir/text.txt"), root.join("hardlink.txt")).unwrap();
    let fifo = std::ffi::CString::new(root.join("fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
    let odd = root.join(OsStr::from_bytes(b"caf\xe9-latin1"));
    std::fs::write(&odd, b"non-UTF-8 name").unwrap();
    std::fs::set_permissions(
        root.join("dir/deeper/one"),
        std::fs::Permissions::from_mode(0o4751),
    )
    .unwrap();
    std::fs::set_permissions(
        root.join("dir/deeper"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    std::os::unix::fs::lchown(root.join("dir/text.txt"), Some(1234), Some(5678)).unwrap();
    let _ = xattr::set(root.join("dir/text.txt"), "user.ferry", b"kept");
    set_mtime(&root.join("big.bin"), 1_600_000_000, 123_456_789);
    set_mtime(&root.join("link"), 1_500_000_000, 42);
}

#[derive(Debug, PartialEq, Eq)]
struct Meta {
    kind: u32,
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: (i64, i64),
    size: u64,
    target: Option<PathBuf>,
    xattr: Option<Vec<u8>>,
}

fn meta(p: &Path) -> Meta {
    let m = std::fs::symlink_metadata(p).unwrap();
    let ft = m.file_type();
    Meta {
        kind: m.mode() & libc::S_IFMT,
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        // Directories' and symlinks' times are what they are; files' are exact.
        mtime: if ft.is_dir() {
            (0, 0)
        } else {
            (m.mtime(), m.mtime_nsec())
        },
        size: if ft.is_file() { m.len() } else { 0 },
        target: ft.is_symlink().then(|| std::fs::read_link(p).unwrap()),
        xattr: if ft.is_symlink() {
            None
        } else {
            xattr::get(p, "user.ferry").ok().flatten()
        },
    }
}

/// Asserts `b` is `a` again: names, kinds, metadata, contents, hard links, sparseness.
pub fn assert_same_tree(a: &Path, b: &Path) {
    let mut inodes: HashMap<u64, u64> = HashMap::new();
    fn walk(a: &Path, b: &Path, inodes: &mut HashMap<u64, u64>) {
        let mut names: Vec<_> = std::fs::read_dir(a)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        let mut other: Vec<_> = std::fs::read_dir(b)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        other.sort();
        assert_eq!(names, other, "entries of {} differ", b.display());
        for n in names {
            let (pa, pb) = (a.join(&n), b.join(&n));
            assert_eq!(meta(&pa), meta(&pb), "metadata of {} differs", pb.display());
            let ma = std::fs::symlink_metadata(&pa).unwrap();
            let mb = std::fs::symlink_metadata(&pb).unwrap();
            if ma.is_file() {
                assert!(
                    ferry_testkit::same_file(&pa, &pb),
                    "content of {} differs",
                    pb.display()
                );
                if ma.nlink() > 1 {
                    let seen = *inodes.entry(ma.ino()).or_insert(mb.ino());
                    assert_eq!(seen, mb.ino(), "{} lost its hard link", pb.display());
                }
                // Sparse stays sparse: no more blocks than the original (plus a chunk).
                assert!(
                    mb.blocks() <= ma.blocks() + (16 << 20) / 512,
                    "{} takes {} blocks, the original {}",
                    pb.display(),
                    mb.blocks(),
                    ma.blocks()
                );
            } else if ma.is_dir() {
                walk(&pa, &pb, inodes);
            }
        }
    }
    walk(a, b, &mut inodes);
}

/// `n` small files of 100 B to 2 KiB in 100 directories.
pub fn small_files(root: &Path, n: usize) {
    let data = random_bytes(4096, 7);
    for d in 0..100 {
        std::fs::create_dir_all(root.join(format!("d{d:02}"))).unwrap();
    }
    for i in 0..n {
        let len = 100 + (i * 7919) % 1948;
        let off = (i * 31) % 2048;
        let mut body = data[off..off + len].to_vec();
        body.extend_from_slice(format!("{i}").as_bytes());
        std::fs::write(root.join(format!("d{:02}/f{i}", i % 100)), body).unwrap();
    }
}

/// The repository at `repo_dir` opened through the library, as any other program holding the
/// password would, on a runtime of its own.
fn with_repo<T>(
    repo_dir: &Path, work: impl AsyncFnOnce(std::sync::Arc<ferry_repo::Repo>) -> T,
) -> T {
    use ferry_transfer::{Class, Engine, EngineConfig};
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let key = repo_dir.to_str().unwrap().trim_start_matches('/');
        let engine = Engine::new(EngineConfig::default());
        let local = std::sync::Arc::new(ferry_store::local::LocalStore::new("/"));
        let store = engine.remote(local, Class::Bulk);
        let repo = ferry_repo::Repo::open(store, key, b"correct horse", None)
            .await
            .unwrap();
        work(std::sync::Arc::new(repo)).await
    })
}

/// Writes a new snapshot whose root tree is the first snapshot's backed-up directory listing
/// after `edit`: what a holder of the password can do.
pub fn forge(repo_dir: &Path, edit: impl FnOnce(&mut Vec<ferry_repo::tree::Node>)) {
    forge_levels(repo_dir, 0, edit);
}

/// [`forge`], then `levels` times a tree of two directories `a` and `b` that both hold the
/// tree before: 2^levels copies of the edited listing from a few kilobytes of trees.
pub fn forge_levels(
    repo_dir: &Path, levels: u32, edit: impl FnOnce(&mut Vec<ferry_repo::tree::Node>),
) {
    use ferry_repo::archiver::{Archiver, Quiet};
    use ferry_repo::blob::Trees;
    with_repo(repo_dir, async |repo| {
        let (index, _, _) = repo.load_index().await.unwrap();
        let index = std::sync::Arc::new(index);
        let snaps = repo.snapshots().await.unwrap();
        let mut tree = Trees::default()
            .get(&repo, &index, &snaps[0].1.tree)
            .await
            .unwrap();
        // Down the single-child directories to the backed-up directory's listing.
        while tree.nodes.len() == 1 && tree.nodes[0].subtree.is_some() {
            let sub = tree.nodes[0].subtree.unwrap();
            tree = Trees::default().get(&repo, &index, &sub).await.unwrap();
        }
        let mut nodes = tree.nodes;
        edit(&mut nodes);
        let dir = nodes.iter().find(|n| n.subtree.is_some()).cloned();
        let arch = Archiver::new(
            repo.clone(),
            index,
            Trees::default(),
            std::sync::Arc::new(Quiet),
        );
        let mut root = arch.save_tree(nodes).await.unwrap();
        for _ in 0..levels {
            let twice = ["a", "b"]
                .map(|name| ferry_repo::tree::Node {
                    name: name.into(),
                    subtree: Some(root),
                    ..dir.clone().expect("a directory to copy")
                })
                .to_vec();
            root = arch.save_tree(twice).await.unwrap();
        }
        arch.commit(root, vec!["/forged".into()], None, Vec::new(), None)
            .await
            .unwrap();
    })
}

/// Rewrites the whole index as `edit` leaves it, in one new index file, the old ones
/// removed: what a holder of the password can do.
pub fn forge_index(
    repo_dir: &Path, edit: impl FnOnce(&mut Vec<(ferry_repo::Id, Vec<ferry_repo::pack::Entry>)>),
) {
    use ferry_repo::crypto::Kind;
    with_repo(repo_dir, async |repo| {
        let (index, old, _) = repo.load_index().await.unwrap();
        let mut packs = index.by_pack();
        edit(&mut packs);
        repo.save_file(Kind::Index, &ferry_repo::index::encode(&packs))
            .await
            .unwrap();
        for id in old {
            repo.delete_file("index", &id).await.unwrap();
        }
    })
}

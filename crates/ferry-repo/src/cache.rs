//! A local copy of a remote repository's metadata: key files, index files, snapshots and the
//! packs that hold trees. Over a link with 80 ms round trips these cost an unchanged backup
//! more than everything else; restic and kopia keep such a cache for the same reason.
//!
//! Every cached file is named by the BLAKE3 of its bytes, as in the repository, so a cached
//! copy proves itself: one that does not hash to its name is deleted and read from the store
//! again. The cache holds nothing the store does not (still encrypted), is written with a
//! temporary name and a rename, and is dropped whole or in part without harm: every error in
//! it only costs a read from the store.

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::id::Id;

/// Kinds of files the cache keeps, each in a directory of that name.
pub const KINDS: [&str; 4] = ["keys", "index", "snapshots", "trees"];

/// Marks a cache directory, per <https://bford.info/cachedir/>.
const TAG: &str = "CACHEDIR.TAG";
const SIGNATURE: &str = "Signature: 8a477f597d28d172789f06886806bc55";
/// A repository's cache unused this long is removed, as restic removes its own: the
/// repository was likely deleted or moved, and nothing else would ever free the space.
const UNUSED: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// Removes the caches under `base` other than `mine` that are unused for [`UNUSED`]. Only
/// directories that ferry's tag marks: anything else under `base` is not ferry's to remove.
fn sweep(base: &Path, mine: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        // Only directories themselves: a link is none of ferry's making.
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let dir = e.path();
        let tag = dir.join(TAG);
        let unused = fs::metadata(&tag)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > UNUSED));
        let ours = unused
            && fs::read_to_string(&tag)
                .is_ok_and(|t| t.starts_with(SIGNATURE) && t.contains("# ferry's cache of "));
        if ours && dir != mine {
            tracing::info!(
                "removing {}: a repository cache unused for 30 days",
                dir.display()
            );
            let _ = fs::remove_dir_all(&dir);
        }
    }
}

/// The cache of one repository.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// The cache for the repository at `url`, under `base`: a directory per repository,
    /// named by a hash of the URL. `None` when it cannot be made.
    pub fn new(base: &Path, url: &str) -> Option<Cache> {
        let dir = base.join(&blake3::hash(url.as_bytes()).to_hex()[..32]);
        // Private: it holds the key file, open to offline guessing. A directory someone else
        // owns or may write to is not used (they could plant links where copies go). The
        // repository's directory is ferry's own name: a link there was planted (pointed at a
        // directory of this user's, say /root/.ssh, it would be filled, then swept), so it is
        // not followed.
        if fs::symlink_metadata(&dir).is_ok_and(|m| !m.is_dir()) {
            tracing::warn!("no metadata cache: {} is not a directory", dir.display());
            return None;
        }
        let root = ferry_fs::Dir::create_root(&dir).ok()?;
        if let Err(e) = root.check_private(&dir) {
            tracing::warn!("no metadata cache: {e}");
            return None;
        }
        root.set_mode(0o700, None).ok()?;
        for kind in KINDS {
            let (d, _) = root.make_dir(kind.as_bytes(), false, false).ok()?;
            d.check_private(&dir.join(kind)).ok()?;
        }
        // Says, to whoever finds the directory, what it is and that it may go. Written on
        // every use: its mtime says when the cache was last used.
        let _ = fs::write(
            dir.join(TAG),
            format!("{SIGNATURE}\n# ferry's cache of {url}: safe to delete\n"),
        );
        sweep(base, &dir);
        Some(Cache { dir })
    }

    fn path(&self, kind: &str, id: &Id) -> PathBuf {
        self.dir.join(kind).join(id.hex())
    }

    /// The cached file `kind/id`, if present and intact.
    pub fn get(&self, kind: &str, id: &Id) -> Option<Vec<u8>> {
        let path = self.path(kind, id);
        let body = fs::read(&path).ok()?;
        if Id::of(&body) != *id {
            tracing::warn!(
                "cache: {} is damaged, reading the store instead",
                path.display()
            );
            let _ = fs::remove_file(&path);
            return None;
        }
        Some(body)
    }

    /// Keeps a copy of `kind/id`; failures only mean a later read goes to the store.
    pub fn put(&self, kind: &str, id: &Id, body: &[u8]) {
        let path = self.path(kind, id);
        if path.exists() {
            return;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        // 0600 whatever the umask: the key file is among the copies.
        let written = {
            use std::os::unix::fs::OpenOptionsExt;
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)
                .and_then(|mut f| f.write_all(body))
        };
        if written.and_then(|()| fs::rename(&tmp, &path)).is_err() {
            let _ = fs::remove_file(&tmp);
        }
    }

    /// Ids of the cached files of `kind`.
    pub fn ids(&self, kind: &str) -> Vec<Id> {
        let Ok(dir) = fs::read_dir(self.dir.join(kind)) else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|e| Id::parse(e.file_name().to_str()?))
            .collect()
    }

    /// Bytes the cached files of `kind` take.
    pub fn bytes(&self, kind: &str) -> u64 {
        let Ok(dir) = fs::read_dir(self.dir.join(kind)) else {
            return 0;
        };
        dir.flatten()
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum()
    }

    /// Removes the cached files of `kind` that are not in `keep`: the repository no longer
    /// has them (forgotten, pruned, or a key removed).
    pub fn retain(&self, kind: &str, keep: &HashSet<Id>) {
        for id in self.ids(kind) {
            if !keep.contains(&id) {
                let _ = fs::remove_file(self.path(kind, &id));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_verifies_and_forgets() {
        let base = std::env::temp_dir().join(format!("ferry-cache-test-{}", std::process::id()));
        let c = Cache::new(&base, "s3://bucket/repo").expect("cache");
        let body = b"sealed bytes".to_vec();
        let id = Id::of(&body);
        assert_eq!(c.get("index", &id), None);
        c.put("index", &id, &body);
        assert_eq!(c.get("index", &id), Some(body.clone()));
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode(&c.path("index", &id)), 0o600);
        assert_eq!(mode(&c.dir.join("index")), 0o700);
        assert_eq!(mode(&c.dir), 0o700);
        assert_eq!(c.ids("index"), vec![id]);
        assert_eq!(c.bytes("index"), body.len() as u64);
        // A copy changed on disk is refused and removed.
        fs::write(c.path("index", &id), b"other bytes").expect("write");
        assert_eq!(c.get("index", &id), None);
        assert!(!c.path("index", &id).exists());
        c.put("snapshots", &id, &body);
        c.retain("snapshots", &HashSet::new());
        assert!(c.ids("snapshots").is_empty());
        // Another repository's cache is another directory.
        let other = Cache::new(&base, "s3://bucket/other").expect("cache");
        assert_ne!(other.dir, c.dir);
        fs::remove_dir_all(&base).expect("clean up");
    }

    #[test]
    fn a_cache_unused_for_30_days_is_removed_and_nothing_else() {
        let base = std::env::temp_dir().join(format!("ferry-cache-sweep-{}", std::process::id()));
        let age = |dir: &Path, days: u64| {
            let t = std::time::SystemTime::now() - std::time::Duration::from_secs(days * 86400);
            let f = fs::File::options()
                .append(true)
                .open(dir.join(TAG))
                .expect("tag");
            f.set_modified(t).expect("set mtime");
        };
        let old = Cache::new(&base, "s3://bucket/gone").expect("cache");
        let recent = Cache::new(&base, "s3://bucket/recent").expect("cache");
        age(&old.dir, 31);
        age(&recent.dir, 29);
        // Not ferry's: an old tagged directory of another program, and an untagged one.
        let foreign = base.join("someone-else");
        fs::create_dir_all(&foreign).expect("mkdir");
        fs::write(foreign.join(TAG), format!("{SIGNATURE}\n# other program\n")).expect("tag");
        age(&foreign, 40);
        let plain = base.join("plain");
        fs::create_dir_all(&plain).expect("mkdir");

        let now = Cache::new(&base, "s3://bucket/now").expect("cache");
        assert!(!old.dir.exists(), "unused for 31 days: removed");
        assert!(recent.dir.exists() && now.dir.exists() && foreign.exists() && plain.exists());
        // Using a cache again marks it used: it survives the next sweep.
        age(&recent.dir, 40);
        let _ = Cache::new(&base, "s3://bucket/recent").expect("cache");
        let _ = Cache::new(&base, "s3://bucket/now").expect("cache");
        assert!(recent.dir.exists(), "used again just now");
        fs::remove_dir_all(&base).expect("clean up");
    }

    /// A link planted where a repository's cache goes (to a private directory of this user,
    /// /root/.ssh for root) is not followed: nothing is written there, and an old cache
    /// reached through a link is not swept.
    #[test]
    fn a_link_in_place_of_a_cache_is_not_followed() {
        let t = std::env::temp_dir().join(format!("ferry-cache-link-{}", std::process::id()));
        let (base, victim) = (t.join("base"), t.join("victim"));
        fs::create_dir_all(&base).expect("mkdir");
        fs::create_dir_all(&victim).expect("mkdir");
        let url = "s3://bucket/planted";
        let dir = base.join(&blake3::hash(url.as_bytes()).to_hex()[..32]);
        std::os::unix::fs::symlink(&victim, &dir).expect("link");
        assert!(Cache::new(&base, url).is_none());
        assert_eq!(fs::read_dir(&victim).expect("victim").count(), 0);
        // A directory tagged as an old cache, reached through a link under base: kept.
        fs::write(
            victim.join(TAG),
            format!("{SIGNATURE}\n# ferry's cache of x\n"),
        )
        .expect("tag");
        let f = fs::File::options()
            .append(true)
            .open(victim.join(TAG))
            .expect("tag");
        f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(40 * 86400))
            .expect("mtime");
        let _ = Cache::new(&base, "s3://bucket/other").expect("cache");
        assert!(victim.join(TAG).exists(), "swept through a link");
        fs::remove_dir_all(&t).expect("clean up");
    }
}

//! Listings of repositories' `index/`, `snapshots/` and `keys/` directories, held in memory:
//! every backup starts by listing them, and on an object store a listing is a slow request
//! that would otherwise wait in line with the data. A cached listing is kept exact by this
//! process's own writes and deletes and refilled after [`FRESH`] (another process behind the
//! same bucket may have written).
//!
//! Only tenants that cannot delete are answered from it: a prune that missed an index
//! written through another process would delete packs that index still needs, while a backup
//! that misses one only stores some blobs twice.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferry_store::ObjectInfo;

/// Directories whose listings are kept.
const CACHED: &[&str] = &["index", "snapshots", "keys"];
/// A listing older than this is filled again from the backend.
pub const FRESH: Duration = Duration::from_secs(30);
/// Most listings kept at once: any tenant may list directories that do not exist, as many as
/// it likes, and each kept listing is memory.
pub const MAX_DIRS: usize = 4096;

/// Listings by their directory's full key (ending in `/`).
#[derive(Debug, Default)]
pub struct Listings {
    dirs: Mutex<HashMap<String, Dir>>,
    /// Writes and deletes so far: a listing read while one happened may lack it, and is
    /// not kept.
    changes: std::sync::atomic::AtomicU64,
}

#[derive(Debug)]
struct Dir {
    filled: Instant,
    objects: BTreeMap<String, u64>,
}

/// The directory `key` sits in, when its listing is one that is kept.
fn dir_of(key: &str) -> Option<&str> {
    let dir = &key[..=key.rfind('/')?];
    let name = dir.trim_end_matches('/').rsplit('/').next()?;
    CACHED.contains(&name).then_some(dir)
}

impl Listings {
    /// True when listings of `dir` (a full key ending in `/`) are kept.
    pub fn keeps(dir: &str) -> bool {
        dir.ends_with('/') && dir_of(dir).is_some_and(|d| d == dir)
    }

    /// The kept listing of `dir`, if fresh.
    pub fn get(&self, dir: &str) -> Option<Vec<ObjectInfo>> {
        let dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        let d = dirs.get(dir).filter(|d| d.filled.elapsed() < FRESH)?;
        Some(
            d.objects
                .iter()
                .map(|(k, s)| ObjectInfo {
                    checksum: None,
                    key: k.clone(),
                    size: *s,
                    ..Default::default()
                })
                .collect(),
        )
    }

    /// The count to hand [`Listings::fill`] with a listing read after this call.
    pub fn mark(&self) -> u64 {
        self.changes.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Keeps `objects` as `dir`'s listing, read from the backend after [`Listings::mark`]
    /// returned `mark`; not if a write or delete happened since.
    pub fn fill(&self, dir: &str, objects: &[ObjectInfo], mark: u64) {
        if !Self::keeps(dir) {
            return;
        }
        let objects = objects.iter().map(|o| (o.key.clone(), o.size)).collect();
        let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        if self.mark() != mark {
            return;
        }
        if dirs.len() >= MAX_DIRS && !dirs.contains_key(dir) {
            // Stale ones are of no use; if none is, this listing goes unkept.
            dirs.retain(|_, d| d.filled.elapsed() < FRESH);
            if dirs.len() >= MAX_DIRS {
                return;
            }
        }
        dirs.insert(
            dir.to_string(),
            Dir {
                filled: Instant::now(),
                objects,
            },
        );
    }

    /// `key` was written with `size` bytes.
    pub fn wrote(&self, key: &str, size: u64) {
        let Some(dir) = dir_of(key) else { return };
        let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        self.changes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if let Some(d) = dirs.get_mut(dir) {
            d.objects.insert(key.to_string(), size);
        }
    }

    /// `key` was deleted.
    pub fn deleted(&self, key: &str) {
        let Some(dir) = dir_of(key) else { return };
        let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        self.changes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if let Some(d) = dirs.get_mut(dir) {
            d.objects.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(k: &str, size: u64) -> ObjectInfo {
        ObjectInfo {
            checksum: None,
            key: k.into(),
            size,
            ..Default::default()
        }
    }

    #[test]
    fn a_kept_listing_follows_the_writes_and_deletes() {
        let l = Listings::default();
        let dir = "base/alice/repo/snapshots/";
        assert!(Listings::keeps(dir));
        assert!(!Listings::keeps("base/alice/repo/data/"));
        assert!(!Listings::keeps("base/alice/repo/locks/"));
        assert!(l.get(dir).is_none(), "never filled");
        // A listing read while a write happened is not kept.
        let m = l.mark();
        l.wrote("base/alice/repo/snapshots/z", 9);
        l.fill(dir, &[info("base/alice/repo/snapshots/a", 1)], m);
        assert!(l.get(dir).is_none(), "kept a listing that may lack a write");
        l.fill(dir, &[info("base/alice/repo/snapshots/a", 1)], l.mark());
        l.wrote("base/alice/repo/snapshots/b", 2);
        l.wrote("base/alice/repo/data/00/c", 3); // not kept
        l.deleted("base/alice/repo/snapshots/a");
        let got: Vec<_> = l
            .get(dir)
            .unwrap()
            .into_iter()
            .map(|o| (o.key, o.size))
            .collect();
        assert_eq!(got, vec![("base/alice/repo/snapshots/b".to_string(), 2)]);
        // Data directories are not kept even when asked.
        l.fill(
            "base/alice/repo/data/",
            &[info("base/alice/repo/data/x", 1)],
            l.mark(),
        );
        assert!(l.get("base/alice/repo/data/").is_none());
    }

    #[test]
    fn listings_kept_are_bounded() {
        let l = Listings::default();
        for i in 0..MAX_DIRS + 100 {
            l.fill(&format!("base/carol/r{i}/index/"), &[], l.mark());
        }
        assert_eq!(l.dirs.lock().unwrap().len(), MAX_DIRS);
        // The first ones are still kept and served; the ones past the bound are not.
        assert!(l.get("base/carol/r0/index/").is_some());
        assert!(l
            .get(&format!("base/carol/r{}/index/", MAX_DIRS + 50))
            .is_none());
    }
}

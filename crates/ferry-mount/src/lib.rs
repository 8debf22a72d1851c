//! A ferry repository's snapshots as a read-only FUSE filesystem, laid out as restic's
//! `mount` lays them out:
//!
//! ```text
//! snapshots/2026-11-25T10:00:00/...   every snapshot by time, `latest` a link to the newest
//! hosts/HOST/2026-11-25T10:00:00/...  by host, each with its own `latest`
//! tags/TAG/2026-11-25T10:00:00/...    by tag, each with its own `latest`
//! ids/0123abcd/...                    by id
//! ```
//!
//! The snapshots are those the repository held at mount time. Directory listings are read
//! when first visited, file bytes when read, each blob fetched once into a small cache.
//! Names a snapshot holds that no file may have (`..`, with a `/`) are not shown.
#![warn(missing_docs)]

mod content;
mod fs;
mod inodes;
mod table;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferry_repo::snapshot::Filter;
use ferry_repo::{Id, Repo, Snapshot};
use ferry_transfer::{Error, Result};
use fuser::{Config, MountOption, SessionACL};

use crate::fs::RepoFs;
use crate::inodes::{link_attr, made_attr, Inode, What};

/// A mounted repository; dropping it unmounts.
pub struct Mounted {
    _session: fuser::BackgroundSession,
}

/// Mounts the snapshots of `repo` that `filter` chooses at `at` (an existing, empty
/// directory), read-only; FUSE requests are answered on fuser's threads, blocking on `rt`.
pub async fn mount(repo: Arc<Repo>, filter: &Filter, at: &Path) -> Result<Mounted> {
    let meta = std::fs::metadata(at).map_err(|e| Error::io(at.display(), e))?;
    if !meta.is_dir() {
        return Err(Error::Invalid(format!("{}: not a directory", at.display())));
    }
    let (index, _) = repo.index().await?;
    let snaps = repo.snapshots_matching(filter).await?;
    let fs = RepoFs {
        repo,
        index: Arc::new(index),
        rt: tokio::runtime::Handle::current(),
        inodes: Mutex::new(crate::table::Table::new()),
        max_inodes: max_inodes(),
        warned: Default::default(),
        blobs: Default::default(),
    };
    layout(&fs, &snaps);
    let mut cfg = Config::default();
    cfg.mount_options = vec![
        MountOption::RO,
        MountOption::FSName("ferry".into()),
        MountOption::Subtype("ferry".into()),
        MountOption::DefaultPermissions,
    ];
    cfg.acl = SessionACL::Owner;
    let at = at.to_path_buf();
    let session = tokio::task::spawn_blocking(move || fuser::spawn_mount(fs, &at, &cfg))
        .await
        .map_err(|e| Error::Permanent(e.to_string()))?
        .map_err(|e| {
            Error::Permanent(format!("mount: {e} (is /dev/fuse there, and fusermount?)"))
        })?;
    Ok(Mounted { _session: session })
}

/// The most inodes the table holds: as many entries as a restore's walk takes on
/// (`FERRY_MOUNT_MAX_INODES` lowers it for tests). Each directory visited adds its entries,
/// and a password holder can write trees that share subtrees at every level: a `find` over
/// the mount would otherwise grow the table until memory ran out.
fn max_inodes() -> usize {
    std::env::var("FERRY_MOUNT_MAX_INODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(ferry_repo::limits::walk_entries) as usize
}

/// A snapshot's name under `snapshots/`: its UTC time to the second.
fn time_name(s: &Snapshot) -> String {
    let t = s.time;
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    let (y, m, d) = ferry_repo::snapshot::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// Builds the made-up directories over `snaps` (oldest first); the root is inode 1.
fn layout(fs: &RepoFs, snaps: &[(Id, Snapshot)]) {
    let now = SystemTime::now();
    let root = fs.add(|ino| made(ino, now));
    debug_assert_eq!(root, 1);
    // Each snapshot's own tree once, shared by every place it shows up.
    let roots: Vec<(u64, &Snapshot, &Id)> = snaps
        .iter()
        .map(|(id, s)| {
            let time = UNIX_EPOCH + Duration::from_secs(s.time.max(0) as u64);
            let ino = fs.add(|ino| Inode {
                what: What::Tree {
                    id: s.tree,
                    children: Mutex::new(None),
                },
                attr: made_attr(ino, time),
            });
            (ino, s, id)
        })
        .collect();
    let mut top = BTreeMap::new();
    let by_time = |pick: &dyn Fn(&Snapshot) -> bool| {
        let mut dir = BTreeMap::new();
        let mut last = None;
        for (ino, s, _) in roots.iter().filter(|(_, s, _)| pick(s)) {
            let mut name = time_name(s);
            let mut n = 1;
            while dir.contains_key(&OsString::from(&name)) {
                name = format!("{}-{n}", time_name(s));
                n += 1;
            }
            dir.insert(OsString::from(&name), *ino);
            last = Some(name);
        }
        if let Some(l) = last {
            let target = l.into_bytes();
            let ino = fs.add(|ino| Inode {
                attr: link_attr(ino, target.len(), now),
                what: What::Link(target),
            });
            dir.insert("latest".into(), ino);
        }
        fs.add(|ino| Inode {
            what: What::Made(Arc::new(dir.into())),
            attr: made_attr(ino, now),
        })
    };
    top.insert("snapshots".into(), by_time(&|_| true));
    let mut hosts: Vec<&str> = snaps.iter().map(|(_, s)| s.hostname.as_str()).collect();
    let mut tags: Vec<&str> = snaps
        .iter()
        .flat_map(|(_, s)| s.tags.iter().map(String::as_str))
        .collect();
    hosts.sort();
    hosts.dedup();
    tags.sort();
    tags.dedup();
    let group = |names: Vec<&str>, pick: &dyn Fn(&Snapshot, &str) -> bool| {
        let dir: BTreeMap<OsString, u64> = names
            .into_iter()
            .filter(|n| !n.is_empty() && !n.contains(['/', '\0']) && *n != "." && *n != "..")
            .map(|n| (OsString::from(n), by_time(&|s| pick(s, n))))
            .collect();
        fs.add(|ino| Inode {
            what: What::Made(Arc::new(dir.into())),
            attr: made_attr(ino, now),
        })
    };
    top.insert("hosts".into(), group(hosts, &|s, h| s.hostname == h));
    top.insert(
        "tags".into(),
        group(tags, &|s, t| s.tags.iter().any(|x| x == t)),
    );
    let ids: BTreeMap<OsString, u64> = roots
        .iter()
        .map(|(ino, _, id)| (OsString::from(id.short()), *ino))
        .collect();
    top.insert(
        "ids".into(),
        fs.add(|ino| Inode {
            what: What::Made(Arc::new(ids.into())),
            attr: made_attr(ino, now),
        }),
    );
    fs.inodes.lock().expect("inodes").replace(
        1,
        Inode {
            what: What::Made(Arc::new(top.into())),
            attr: made_attr(1, now),
        },
    );
}

fn made(ino: u64, now: SystemTime) -> Inode {
    Inode {
        what: What::Made(Arc::default()),
        attr: made_attr(ino, now),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_name_snapshots() {
        let mut s = ferry_repo::Snapshot {
            time: 1_795_600_000,
            nanos: 0,
            hostname: "h".into(),
            paths: vec![],
            tags: vec![],
            tree: Default::default(),
            parent: None,
            summary: Default::default(),
            start: None,
            extra: None,
        };
        assert_eq!(super::time_name(&s), "2026-11-25T09:46:40");
        s.time = 0;
        assert_eq!(super::time_name(&s), "1970-01-01T00:00:00");
    }
}

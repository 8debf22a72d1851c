//! `check`: every index, snapshot and tree readable and authentic, every blob a snapshot uses
//! indexed, every indexed pack present with the right size; with `--read-data`, every pack
//! read whole, checked against its name, and every blob in it decrypted and checked.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use ferry_transfer::Result;
use futures::StreamExt;

use crate::blob::open_blob;
use crate::crypto::{Kind, OVERHEAD};
use crate::id::Id;
use crate::index::Index;
use crate::pack::{read_header, BlobKind, ENTRY_LEN};
use crate::repo::{Repo, READ_AHEAD};
use crate::snapshot::Snapshot;

/// What check found.
#[derive(Debug, Default)]
pub struct Report {
    /// Damage: the repository cannot restore everything it should.
    pub errors: Vec<String>,
    /// Harmless leftovers (packs of an interrupted backup, say).
    pub warnings: Vec<String>,
    /// Snapshots checked.
    pub snapshots: usize,
    /// Packs the index names.
    pub packs: usize,
    /// Blobs the index names.
    pub blobs: usize,
    /// Packs read whole (`--read-data`).
    pub packs_read: usize,
}

/// Every snapshot, loaded; unreadable ones are reported in `errors`.
pub async fn snapshots(repo: &Repo, errors: &mut Vec<String>) -> Result<Vec<(Id, Snapshot)>> {
    let ids = repo.list_ids("snapshots").await?;
    if let Some(c) = repo.cache() {
        c.retain("snapshots", &ids.iter().copied().collect());
    }
    let loaded: Vec<(Id, Result<Vec<u8>>)> = futures::stream::iter(ids)
        .map(|id| async move { (id, repo.load_file(Kind::Snapshot, &id).await) })
        .buffer_unordered(READ_AHEAD)
        .collect()
        .await;
    let mut out = Vec::new();
    for (id, r) in loaded {
        match r.and_then(|b| Snapshot::decode(&b, &format!("snapshots/{id}"))) {
            Ok(s) => out.push((id, s)),
            Err(e) => errors.push(e.to_string()),
        }
    }
    out.sort_by_key(|(_, s)| (s.time, s.nanos));
    Ok(out)
}

/// Walks the trees of `snaps`: every blob they use, and a description of each problem with
/// the snapshot and path it hurts.
pub async fn used_blobs(
    repo: &Repo, index: &Index, snaps: &[(Id, Snapshot)],
) -> (HashSet<Id>, Vec<String>) {
    let cache = crate::blob::Trees::preload(repo, index, crate::blob::PRELOAD_MAX)
        .await
        .unwrap_or_default();
    let cache = &cache;
    // Blobs used, and apart from them the trees walked: a forged file whose content names a
    // tree's id would otherwise mark that tree used before any directory reached it, so that
    // it was never walked and everything only below it looked unused to prune.
    let mut used = HashSet::new();
    let mut walked = HashSet::new();
    let mut problems = Vec::new();
    let mut level: Vec<(Id, PathBuf, Id)> = Vec::new();
    for (sid, s) in snaps {
        used.insert(s.tree);
        if walked.insert(s.tree) {
            level.push((*sid, PathBuf::from("/"), s.tree));
        }
    }
    while !level.is_empty() {
        let trees: Vec<_> = futures::stream::iter(level)
            .map(
                |(sid, path, id)| async move { (sid, path, id, cache.get(repo, index, &id).await) },
            )
            .buffer_unordered(READ_AHEAD)
            .collect()
            .await;
        let mut next = Vec::new();
        for (sid, path, id, tree) in trees {
            let tree = match tree {
                Ok(t) => t,
                Err(e) => {
                    problems.push(format!(
                        "snapshot {}: {}: directory listing {} unreadable: {e}",
                        sid.short(),
                        path.display(),
                        id.short()
                    ));
                    continue;
                }
            };
            for n in tree.nodes {
                let child = match n.checked_name() {
                    Ok(name) => path.join(OsString::from_vec(name)),
                    Err(e) => {
                        problems.push(format!(
                            "snapshot {}: {}: entry {:?}: {e} (a restore refuses it)",
                            sid.short(),
                            path.display(),
                            n.name
                        ));
                        path.join("?")
                    }
                };
                let at = |w: String| format!("snapshot {}: {}: {w}", sid.short(), child.display());
                for c in &n.content {
                    if !used.insert(*c) {
                        continue;
                    }
                    match index.get(c) {
                        None => problems.push(at(format!("blob {} is in no index", c.short()))),
                        Some(l) if l.kind != BlobKind::Data => problems.push(at(format!(
                            "blob {} is a directory listing, not file content",
                            c.short()
                        ))),
                        Some(_) => {}
                    }
                }
                if let Some(sub) = n.subtree {
                    used.insert(sub);
                    if walked.insert(sub) {
                        // One that is in no index is reported when it cannot be read.
                        if index.get(&sub).is_some_and(|l| l.kind != BlobKind::Tree) {
                            problems.push(at(format!(
                                "directory listing {} is file content",
                                sub.short()
                            )));
                        }
                        next.push((sid, child, sub));
                    }
                }
            }
        }
        level = next;
    }
    (used, problems)
}

/// Which packs `check` reads whole.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReadData {
    /// None: sizes and the index only.
    No,
    /// Every pack.
    All,
    /// Group `n` of `t` (1-based): each pack falls in one group by its id, so `1/t` to
    /// `t/t` on successive runs read everything once (restic's `--read-data-subset n/t`).
    Group(u32, u32),
    /// A random share of the packs, at least one when there are any.
    Share(f64),
}

impl ReadData {
    /// Parses `n/t` or `x%`.
    pub fn parse_subset(s: &str) -> Result<ReadData> {
        let bad = || {
            ferry_transfer::Error::Invalid(format!(
                "--read-data-subset '{s}': use n/t (1 <= n <= t) or a percentage (5%)"
            ))
        };
        if let Some(p) = s.strip_suffix('%') {
            let x: f64 = p.trim().parse().map_err(|_| bad())?;
            return match x > 0.0 && x <= 100.0 {
                true => Ok(ReadData::Share(x / 100.0)),
                false => Err(bad()),
            };
        }
        let (n, t) = s.split_once('/').ok_or_else(bad)?;
        let (n, t): (u32, u32) = (n.parse().map_err(|_| bad())?, t.parse().map_err(|_| bad())?);
        match n >= 1 && n <= t {
            true => Ok(ReadData::Group(n, t)),
            false => Err(bad()),
        }
    }

    /// The packs of `all` to read.
    fn choose<'a, T>(&self, all: Vec<&'a (Id, T)>) -> Vec<&'a (Id, T)> {
        match *self {
            ReadData::No => Vec::new(),
            ReadData::All => all,
            ReadData::Group(n, t) => all
                .into_iter()
                .filter(|(id, _)| {
                    let v = u32::from_le_bytes([id.0[0], id.0[1], id.0[2], id.0[3]]);
                    v % t == n - 1
                })
                .collect(),
            ReadData::Share(x) => {
                use rand::seq::SliceRandom;
                let want = ((all.len() as f64 * x).ceil() as usize).min(all.len());
                let mut all = all;
                all.shuffle(&mut rand::rng());
                all.truncate(want);
                all
            }
        }
    }
}

/// Checks the repository; with `read_data`, reads every pack.
pub async fn check(repo: &Repo, read_data: bool) -> Result<Report> {
    let which = if read_data {
        ReadData::All
    } else {
        ReadData::No
    };
    check_reading(repo, which).await
}

/// Checks the repository, reading whole the packs `read` chooses.
pub async fn check_reading(repo: &Repo, read: ReadData) -> Result<Report> {
    let mut r = Report::default();
    let marker = repo.read(&repo.path("ferry-repo")).await?;
    if marker != crate::repo::marker_text(repo.config.version).as_bytes() {
        r.errors.push(format!(
            "ferry-repo: format marker damaged or not format {}'s",
            repo.config.version
        ));
    }
    let (index, _, index_errors) = repo.load_index().await?;
    r.errors.extend(index_errors.iter().map(|e| e.to_string()));
    r.packs = index.packs().len();
    r.blobs = index.len();

    let stored = repo.stored_packs().await?;
    let by_pack = index.by_pack();
    let indexed: HashSet<Id> = index.packs().iter().copied().collect();
    // Sizes from each pack's own listing: a blob also stored in another pack (a prune cut
    // short) is located there, and the pack would look larger than its located blobs.
    for (pack, blobs, bytes) in index.listed() {
        let expect = bytes + (OVERHEAD + ENTRY_LEN * blobs as usize + 4) as u64;
        match stored.get(&pack) {
            None => r.errors.push(format!(
                "pack {} is missing ({blobs} blobs lost)",
                pack.short(),
            )),
            Some(&size) if size != expect => r.errors.push(format!(
                "pack {}: {size} bytes, the index says {expect} (truncated or damaged)",
                pack.short()
            )),
            Some(_) => {}
        }
    }
    for p in stored.keys().filter(|p| !indexed.contains(p)) {
        r.warnings.push(format!(
            "pack {} is in no index (left by an interrupted backup or prune; prune removes it)",
            p.short()
        ));
    }

    let snaps = snapshots(repo, &mut r.errors).await?;
    r.snapshots = snaps.len();
    let (_, problems) = used_blobs(repo, &index, &snaps).await;
    r.errors.extend(problems);

    if read != ReadData::No {
        let present: Vec<&(Id, Vec<crate::pack::Entry>)> = by_pack
            .iter()
            .filter(|(p, _)| stored.contains_key(p))
            .collect();
        let present = read.choose(present);
        let results: Vec<Vec<String>> = futures::stream::iter(present)
            .map(|(pack, entries)| async move {
                let mut errs = Vec::new();
                let body = match repo.read(&repo.pack_path(pack)).await {
                    Ok(b) => b,
                    Err(e) => return vec![format!("pack {}: {e}", pack.short())],
                };
                if Id::of(&body) != *pack {
                    errs.push(format!(
                        "pack {}: content does not match its name (damaged)",
                        pack.short()
                    ));
                }
                let key = repo.key().clone();
                let pack = *pack;
                let entries = entries.clone();
                let more = tokio::task::spawn_blocking(move || {
                    let mut errs = Vec::new();
                    let what = format!("pack {}", pack.short());
                    if let Err(e) = read_header(&body, &key, &what) {
                        errs.push(e.to_string());
                    }
                    for e in entries {
                        let (s, end) = (e.offset as usize, e.offset as usize + e.len as usize);
                        let w = format!("blob {} in pack {}", e.id.short(), pack.short());
                        if end > body.len() {
                            errs.push(format!("{w}: beyond the end of the pack"));
                        } else if let Err(err) = open_blob(&key, e.kind, &body[s..end], &e.id, &w) {
                            errs.push(err.to_string());
                        }
                    }
                    errs
                })
                .await
                .unwrap_or_else(|e| vec![e.to_string()]);
                errs.extend(more);
                errs
            })
            .buffer_unordered(8)
            .collect()
            .await;
        r.packs_read = results.len();
        for e in results {
            r.errors.extend(e);
        }
    }
    Ok(r)
}

//! How much snapshots hold: the size a restore would write, or the stored data they use.
//!
//! Both walk the snapshots' trees, each distinct tree loaded once: a directory unchanged
//! across a hundred snapshots is one tree, read once and counted a hundred times.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ferry_transfer::{Error, Result};
use futures::StreamExt;

use crate::blob::{Trees, PRELOAD_MAX};
use crate::id::Id;
use crate::index::Index;
use crate::pack::BlobKind;
use crate::repo::{Repo, READ_AHEAD};
use crate::snapshot::Filter;
use crate::tagging::chosen;
use crate::tree::NodeKind;

/// What a restore of each snapshot would write, summed over the snapshots (restic's
/// `stats --mode restore-size`): a file in two snapshots counts twice, hard links within
/// one snapshot once, as the restore links them.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RestoreSize {
    /// Snapshots counted.
    pub snapshots_count: u64,
    /// Entries of every kind (restic's count: directories and links too).
    pub total_file_count: u64,
    /// Regular files.
    pub files: u64,
    /// Directories, the ones above the paths backed up included.
    pub dirs: u64,
    /// Bytes of the regular files (their full length, holes of sparse files included).
    pub total_size: u64,
}

/// The distinct blobs the snapshots use, each once (restic's `stats --mode raw-data`): what
/// the repository stores for them.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize)]
pub struct RawData {
    /// Snapshots counted.
    pub snapshots_count: u64,
    /// Distinct blobs, data and tree.
    pub total_blob_count: u64,
    /// Distinct data blobs (file chunks).
    pub data_blobs: u64,
    /// Distinct tree blobs (directory listings).
    pub tree_blobs: u64,
    /// Plaintext bytes of the data blobs.
    pub data_size: u64,
    /// Plaintext bytes of all the blobs.
    pub total_uncompressed_size: u64,
    /// Bytes the blobs take in packs: compressed where that paid, sealed.
    pub total_size: u64,
    /// total_uncompressed_size / total_size (0 with no blobs).
    pub compression_ratio: f64,
}

/// (device, inode, size) of a file with several links.
type Link = (u64, u64, u64);

/// What one tree holds, without what it holds below its subdirectories.
#[derive(Debug, Default)]
struct Dir {
    entries: u64,
    files: u64,
    /// Bytes of files with one link.
    bytes: u64,
    /// Files with several links: counted once per snapshot.
    links: Vec<Link>,
    subtrees: Vec<Id>,
    /// Directory entries without a tree (none ferry writes): counted, not walked.
    empty_dirs: u64,
}

/// Every tree below `roots`, each loaded once, and with `blobs` every data blob they name.
async fn walk(
    repo: &Repo, index: &Index, roots: &[Id], mut blobs: Option<&mut HashSet<Id>>,
) -> Result<HashMap<Id, Dir>> {
    let trees = Trees::preload(repo, index, PRELOAD_MAX).await?;
    let trees = &trees;
    let mut dirs: HashMap<Id, Dir> = HashMap::new();
    let mut queued: HashSet<Id> = roots.iter().copied().collect();
    let mut level: Vec<Id> = queued.iter().copied().collect();
    while !level.is_empty() {
        let loaded: Vec<(Id, Result<crate::tree::Tree>)> = futures::stream::iter(level)
            .map(|id| async move { (id, trees.get(repo, index, &id).await) })
            .buffer_unordered(READ_AHEAD)
            .collect()
            .await;
        let mut next = Vec::new();
        for (id, tree) in loaded {
            let tree = tree?;
            let mut d = Dir::default();
            for n in tree.nodes {
                d.entries += 1;
                if let Some(b) = blobs.as_deref_mut() {
                    b.extend(n.content.iter().copied());
                }
                match (n.kind, n.subtree) {
                    (NodeKind::Dir, Some(sub)) => {
                        d.subtrees.push(sub);
                        if queued.insert(sub) {
                            next.push(sub);
                        }
                    }
                    (NodeKind::Dir, None) => d.empty_dirs += 1,
                    (NodeKind::File, _) if n.nlink > 1 => {
                        d.files += 1;
                        d.links.push((n.dev, n.inode, n.size));
                    }
                    (NodeKind::File, _) => {
                        d.files += 1;
                        d.bytes += n.size;
                    }
                    _ => {}
                }
            }
            dirs.insert(id, d);
        }
        level = next;
    }
    Ok(dirs)
}

/// The counts of tree `id` and everything below it, from `dirs`, memoized in `done`; the
/// hard-linked files are left in `links` for the snapshot to count once.
fn total(
    id: &Id, dirs: &HashMap<Id, Dir>, done: &mut HashMap<Id, (RestoreSize, Vec<Link>)>,
) -> (RestoreSize, Vec<Link>) {
    if let Some(t) = done.get(id) {
        return t.clone();
    }
    let d = &dirs[id];
    let mut sum = RestoreSize {
        total_file_count: d.entries,
        files: d.files,
        dirs: d.subtrees.len() as u64 + d.empty_dirs,
        total_size: d.bytes,
        ..Default::default()
    };
    let mut links = d.links.clone();
    for sub in &d.subtrees {
        let (s, l) = total(sub, dirs, done);
        sum.total_file_count += s.total_file_count;
        sum.files += s.files;
        sum.dirs += s.dirs;
        sum.total_size += s.total_size;
        links.extend(l);
    }
    done.insert(*id, (sum.clone(), links.clone()));
    (sum, links)
}

/// [`RestoreSize`] of the snapshots [`chosen`] names, under a shared lock (a prune cannot
/// take their trees away mid-walk).
pub async fn restore_size(
    repo: Arc<Repo>, which: &[String], filter: &Filter,
) -> Result<RestoreSize> {
    crate::lock::under(&repo, false, async {
        let (snaps, (index, _)) = tokio::try_join!(chosen(&repo, which, filter), repo.index())?;
        let roots: Vec<Id> = snaps.iter().map(|(_, s)| s.tree).collect();
        let dirs = walk(&repo, &index, &roots, None).await?;
        let mut done = HashMap::new();
        let mut out = RestoreSize::default();
        for root in &roots {
            let (s, links) = total(root, &dirs, &mut done);
            out.snapshots_count += 1;
            out.total_file_count += s.total_file_count;
            out.files += s.files;
            out.dirs += s.dirs;
            out.total_size += s.total_size;
            let mut seen = HashSet::new();
            for (dev, ino, size) in links {
                if seen.insert((dev, ino)) {
                    out.total_size += size;
                }
            }
        }
        Ok(out)
    })
    .await
}

/// [`RawData`] of the snapshots [`chosen`] names, under a shared lock; refused, naming it,
/// when a blob they use is in no index.
pub async fn raw_data(repo: Arc<Repo>, which: &[String], filter: &Filter) -> Result<RawData> {
    crate::lock::under(&repo, false, async {
        let (snaps, (index, _)) = tokio::try_join!(chosen(&repo, which, filter), repo.index())?;
        let roots: Vec<Id> = snaps.iter().map(|(_, s)| s.tree).collect();
        let mut data = HashSet::new();
        let dirs = walk(&repo, &index, &roots, Some(&mut data)).await?;
        let mut out = RawData {
            snapshots_count: snaps.len() as u64,
            ..Default::default()
        };
        for id in dirs.keys().chain(&data) {
            let loc = index.get(id).ok_or_else(|| {
                Error::Checksum(format!(
                    "blob {} is in no index (run ferry check)",
                    id.short()
                ))
            })?;
            out.total_blob_count += 1;
            out.total_uncompressed_size += u64::from(loc.plain_len);
            out.total_size += u64::from(loc.len);
            match loc.kind {
                BlobKind::Data => {
                    out.data_blobs += 1;
                    out.data_size += u64::from(loc.plain_len);
                }
                BlobKind::Tree => out.tree_blobs += 1,
            }
        }
        if out.total_size > 0 {
            out.compression_ratio = out.total_uncompressed_size as f64 / out.total_size as f64;
        }
        Ok(out)
    })
    .await
}

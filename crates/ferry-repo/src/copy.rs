//! `copy`: snapshots from one repository into another, as restic's `copy`. Each blob is
//! read and decrypted from the source and stored under the destination's key, named again
//! by its keyed hash there: what the destination already holds is not uploaded again
//! (deduplicated on arrival), and nothing of the source's key reaches the destination.
//!
//! Trees are rewritten bottom-up with the new names; the snapshot keeps its time, host,
//! paths, tags and counts. A snapshot the destination already holds (same time, host, paths
//! and tags) is not copied twice.

use std::collections::HashMap;
use std::sync::Arc;

use ferry_transfer::{Error, Result};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};

use crate::archiver::{Archiver, Quiet};
use crate::id::Id;
use crate::index::Index;
use crate::repo::Repo;
use crate::snapshot::Snapshot;
use crate::tree::Tree;

/// Blobs read from the source at once.
const AT_ONCE: usize = 16;

/// What [`copy`] did.
#[derive(Debug, Default, serde::Serialize)]
pub struct Copied {
    /// (source id, destination id) of each snapshot copied.
    pub copied: Vec<(Id, Id)>,
    /// Source snapshots the destination already held.
    pub skipped: Vec<Id>,
    /// Blobs new to the destination, and their plaintext bytes.
    pub blobs_new: u64,
    /// Plaintext bytes of the new blobs.
    pub bytes_new: u64,
}

/// Copies `snaps` of `from` into `to`, under a shared lock on each (a backup's: prune, which
/// takes an exclusive one, waits).
pub async fn copy(from: Arc<Repo>, to: Arc<Repo>, snaps: Vec<(Id, Snapshot)>) -> Result<Copied> {
    let work = async { crate::lock::under(&from, false, copy_locked(&from, &to, snaps)).await };
    crate::lock::under(&to, false, work).await
}

fn same(a: &Snapshot, b: &Snapshot) -> bool {
    (a.time, a.nanos, &a.hostname, &a.paths, &a.tags)
        == (b.time, b.nanos, &b.hostname, &b.paths, &b.tags)
}

async fn copy_locked(
    from: &Arc<Repo>, to: &Arc<Repo>, snaps: Vec<(Id, Snapshot)>,
) -> Result<Copied> {
    let ((src_index, _), (dst_index, _), there) =
        tokio::try_join!(from.index(), to.index(), to.snapshots())?;
    let arch = Archiver::new(
        to.clone(),
        Arc::new(dst_index),
        Default::default(),
        Arc::new(Quiet),
    );
    let mut c = Rewriter {
        from,
        index: &src_index,
        arch: &arch,
        blobs: HashMap::new(),
        trees: HashMap::new(),
    };
    let mut out = Copied::default();
    for (id, snap) in snaps {
        if there.iter().any(|(_, t)| same(t, &snap)) {
            out.skipped.push(id);
            continue;
        }
        let root = c.tree(snap.tree, 0).await?;
        let new = Snapshot {
            tree: root,
            parent: None,
            ..snap
        };
        let new_id = arch.commit_snapshot(&new).await?;
        out.copied.push((id, new_id));
    }
    // The counts of what the archiver stored, across every snapshot copied.
    let s = arch.summary();
    out.blobs_new = s.blobs_new;
    out.bytes_new = s.bytes_new;
    Ok(out)
}

/// Source blob and tree ids mapped to the destination's, each done once.
struct Rewriter<'a> {
    from: &'a Repo,
    index: &'a Index,
    arch: &'a Arc<Archiver>,
    blobs: HashMap<Id, Id>,
    trees: HashMap<Id, Id>,
}

impl Rewriter<'_> {
    /// Tree `id` of the source, `depth` directories down, stored in the destination with its
    /// blobs; its new id. The source is another repository, whose password holder chose its
    /// names and its depth: a name no entry may have would make the destination's `check`
    /// fail and its prune refuse for good, and a chain of a million listings would overflow
    /// the stack this recursion runs on.
    fn tree(&mut self, id: Id, depth: usize) -> BoxFuture<'_, Result<Id>> {
        async move {
            if let Some(n) = self.trees.get(&id) {
                return Ok(*n);
            }
            if depth > ferry_fs::MAX_DEPTH {
                return Err(Error::Invalid(format!(
                    "source tree {}: more than {} directories deep: not copied",
                    id.short(),
                    ferry_fs::MAX_DEPTH
                )));
            }
            let tree: Tree = crate::load_tree(self.from, self.index, &id).await?;
            if let Some((n, e)) = tree
                .nodes
                .iter()
                .find_map(|n| n.checked_name().err().map(|e| (n, e)))
            {
                return Err(Error::Checksum(format!(
                    "source tree {}: entry {:?}: {e}: not copied",
                    id.short(),
                    n.name
                )));
            }
            self.data(&tree).await?;
            let mut nodes = Vec::with_capacity(tree.nodes.len());
            for mut n in tree.nodes {
                if let Some(sub) = n.subtree {
                    n.subtree = Some(self.tree(sub, depth + 1).await?);
                }
                n.content = n.content.iter().map(|b| self.blobs[b]).collect();
                nodes.push(n);
            }
            let new = self.arch.save_tree(nodes).await?;
            self.trees.insert(id, new);
            Ok(new)
        }
        .boxed()
    }

    /// Brings over the data blobs of `tree`'s files not brought yet, a few at once.
    async fn data(&mut self, tree: &Tree) -> Result<()> {
        let mut todo: Vec<Id> = tree
            .nodes
            .iter()
            .flat_map(|n| n.content.iter().copied())
            .filter(|b| !self.blobs.contains_key(b))
            .collect();
        todo.sort();
        todo.dedup();
        let (from, index, arch) = (self.from, self.index, self.arch);
        let done: Vec<Result<(Id, Id)>> = futures::stream::iter(todo)
            .map(|old| async move {
                let plain = crate::load_blob(from, index, &old).await?;
                Ok((old, arch.save_data(plain).await?))
            })
            .buffer_unordered(AT_ONCE)
            .collect()
            .await;
        for d in done {
            let (old, new) = d?;
            self.blobs.insert(old, new);
        }
        Ok(())
    }
}

//! Reading snapshots without restoring them: what changed between two (`diff`), which hold
//! a path (`find`), one file or directory to a stream (`dump`).

pub mod diff;
pub mod dump;
pub mod find;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use ferry_transfer::{Error, Result};
use futures::StreamExt;

use crate::index::Index;
use crate::repo::{Repo, READ_AHEAD};
use crate::tree::{Node, NodeKind, Tree};
use crate::Id;

pub use diff::{diff, Change, Diff, What};
pub use dump::{lookup, write_file, write_tar, Found};
pub use find::{find, Match};

/// The most entries one walk holds, found or still to visit ([`crate::limits`]).
fn limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(|| usize::try_from(crate::limits::walk_entries()).unwrap_or(usize::MAX))
}

/// Trees by id, each read once: unchanged subtrees are shared between snapshots.
#[derive(Default)]
struct Trees {
    loaded: HashMap<Id, Arc<Tree>>,
}

impl Trees {
    /// Reads the trees of `ids` (one depth of a walk) not held yet, in parallel.
    async fn load(
        &mut self, repo: &Repo, index: &Index, ids: impl Iterator<Item = Id>,
    ) -> Result<()> {
        let mut want: Vec<Id> = ids.collect();
        bound(want.len(), "directories at one depth")?;
        want.retain(|id| !self.loaded.contains_key(id));
        want.sort_unstable();
        want.dedup();
        let got: Vec<Result<(Id, Tree)>> = futures::stream::iter(want)
            .map(|id| async move { Ok((id, crate::load_tree(repo, index, &id).await?)) })
            .buffer_unordered(READ_AHEAD)
            .collect()
            .await;
        for r in got {
            let (id, t) = r?;
            self.loaded.insert(id, Arc::new(t));
        }
        Ok(())
    }

    /// The tree `id`, which [`Trees::load`] read.
    fn get(&self, id: &Id) -> Arc<Tree> {
        self.loaded.get(id).cloned().unwrap_or_default()
    }
}

/// Visits every entry under the tree `root` with its path (its name checked: [`child`]),
/// level by level, the trees of one level read in parallel. Stops at the first error `visit`
/// returns. The directories of one level are bounded by [`limit`]: a forged snapshot that
/// names one subtree from everywhere costs an error, not memory.
pub async fn walk(
    repo: &Repo, index: &Index, root: Id, mut visit: impl FnMut(&Path, &Node) -> Result<()>,
) -> Result<()> {
    walk_in(&mut Trees::default(), repo, index, root, &mut visit).await
}

/// [`walk`], reading trees through `trees`: walks of snapshots that share listings read
/// each once.
async fn walk_in(
    trees: &mut Trees, repo: &Repo, index: &Index, root: Id,
    visit: &mut dyn FnMut(&Path, &Node) -> Result<()>,
) -> Result<()> {
    let mut level = vec![(PathBuf::from("/"), root)];
    while !level.is_empty() {
        trees.load(repo, index, level.iter().map(|l| l.1)).await?;
        let mut next = Vec::new();
        for (dir, id) in level {
            bound(next.len(), "directories at one depth")?;
            for n in &trees.get(&id).nodes {
                let path = child(&dir, n)?;
                visit(&path, n)?;
                if let Some(sub) = n.subtree.filter(|_| n.kind == NodeKind::Dir) {
                    next.push((path, sub));
                }
            }
        }
        level = next;
    }
    Ok(())
}

/// The error that stops a walk a hostile snapshot made endless.
fn too_many(what: &str, limit: usize) -> Error {
    Error::Invalid(format!(
        "more than {limit} {what}: trees that share subtrees level after level do this \
         (run ferry check)"
    ))
}

/// `parent/name` for `node`, refused (naming it) unless its name is one entry's name: whoever
/// wrote the snapshot chose it, and `a/../b` would show, or write, somewhere else.
fn child(parent: &Path, node: &Node) -> Result<PathBuf> {
    let name = node.checked_name().map_err(|e| {
        let shown = String::from_utf8_lossy(&node.name_bytes()).into_owned();
        Error::Invalid(format!(
            "{}: entry {shown:?} refused: {e}",
            parent.display()
        ))
    })?;
    Ok(parent.join(OsString::from_vec(name)))
}

/// Fails once `n` entries held exceed [`limit`].
fn bound(n: usize, what: &str) -> Result<()> {
    match n > limit() {
        true => Err(too_many(what, limit())),
        false => Ok(()),
    }
}

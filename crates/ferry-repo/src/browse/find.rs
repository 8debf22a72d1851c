//! `find`: the paths of snapshots that match patterns. Snapshots of the same source share
//! most of their listings, so each listing is read once for all of them.

use std::path::PathBuf;

use ferry_transfer::Result;

use super::{bound, child, Trees};
use crate::index::Index;
use crate::pattern::Patterns;
use crate::repo::Repo;
use crate::tree::{Node, NodeKind};
use crate::Id;

/// One matching entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    /// Absolute, within the snapshot.
    pub path: PathBuf,
    /// The entry, as the snapshot holds it.
    pub node: Node,
}

/// For each root tree of `roots` in turn, the entries whose path `patterns` match, sorted.
pub async fn find(
    repo: &Repo, index: &Index, roots: &[Id], patterns: &Patterns,
) -> Result<Vec<Vec<Match>>> {
    let mut trees = Trees::default();
    let mut found = Vec::with_capacity(roots.len());
    for root in roots {
        let mut matches = Vec::new();
        let mut level = vec![(PathBuf::from("/"), *root)];
        while !level.is_empty() {
            trees.load(repo, index, level.iter().map(|l| l.1)).await?;
            let mut next = Vec::new();
            for (dir, id) in level {
                bound(matches.len() + next.len(), "entries")?;
                for n in &trees.get(&id).nodes {
                    let path = child(&dir, n)?;
                    let is_dir = n.kind == NodeKind::Dir;
                    if let Some(sub) = n.subtree.filter(|_| is_dir) {
                        next.push((path.clone(), sub));
                    }
                    if patterns.matches(&path, is_dir) {
                        let node = n.clone();
                        matches.push(Match { path, node });
                    }
                }
            }
            level = next;
        }
        matches.sort_by(|a, b| a.path.cmp(&b.path));
        found.push(matches);
    }
    Ok(found)
}

//! `find`: the paths of snapshots that match patterns. Snapshots of the same source share
//! most of their listings, so each listing is read once for all of them.

use std::path::{Path, PathBuf};

use ferry_transfer::Result;

use super::{bound, walk_in, Trees};
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
        let mut visit = |path: &Path, n: &Node| {
            if patterns.matches(path, n.kind == NodeKind::Dir) {
                bound(matches.len(), "entries")?;
                let (path, node) = (path.to_path_buf(), n.clone());
                matches.push(Match { path, node });
            }
            Ok(())
        };
        walk_in(&mut trees, repo, index, *root, &mut visit).await?;
        matches.sort_by(|a, b| a.path.cmp(&b.path));
        found.push(matches);
    }
    Ok(found)
}

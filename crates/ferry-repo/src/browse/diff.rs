//! `diff`: what changed between two snapshots, their trees walked side by side one depth at
//! a time. A subtree with the same id on both sides holds the same entries and is never read:
//! two backups of a large tree differ in a few listings.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use ferry_transfer::Result;

use super::{bound, child, Trees};
use crate::index::Index;
use crate::repo::Repo;
use crate::tree::{Node, NodeKind, Tree};
use crate::Id;

/// What happened to a path, as restic marks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    /// Only in the newer snapshot (`+`).
    Added,
    /// Only in the older snapshot (`-`).
    Removed,
    /// A file whose content changed (`M`).
    Modified,
    /// The same content, other metadata: mode, mtime, owner, xattrs, link target (`U`).
    Metadata,
    /// A different kind of file under the same name (`T`).
    Type,
}

impl What {
    /// restic's mark: `+`, `-`, `M`, `U` or `T`.
    pub fn mark(self) -> &'static str {
        match self {
            What::Added => "+",
            What::Removed => "-",
            What::Modified => "M",
            What::Metadata => "U",
            What::Type => "T",
        }
    }
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Absolute, within the snapshot.
    pub path: PathBuf,
    /// What happened to it.
    pub what: What,
    /// Its kind: in the newer snapshot, or in the older one when it was removed.
    pub kind: NodeKind,
}

/// What [`diff`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    /// The changed paths, sorted (a directory before what it holds).
    pub changes: Vec<Change>,
    /// Content bytes only the newer side's changed files hold (blobs, each counted once).
    pub bytes_added: u64,
    /// Content bytes only the older side's changed files held.
    pub bytes_removed: u64,
}

impl Diff {
    /// How many changes were `what`.
    pub fn count(&self, what: What) -> usize {
        self.changes.iter().filter(|c| c.what == what).count()
    }
}

/// Directories still to compare.
enum Pending {
    /// The same directory on both sides, with different listings.
    Both(PathBuf, Id, Id),
    /// A directory on one side only: everything in it was added or removed.
    Only(PathBuf, Id, What),
}

/// Compares the snapshots whose root trees are `old` and `new`.
pub async fn diff(repo: &Repo, index: &Index, old: Id, new: Id) -> Result<Diff> {
    let mut w = Walk::default();
    let mut level = match old == new {
        true => vec![],
        false => vec![Pending::Both(PathBuf::from("/"), old, new)],
    };
    while !level.is_empty() {
        // A fresh set a level: each listing is compared once, nothing needs it again.
        let mut trees = Trees::default();
        let ids = level.iter().flat_map(|p| match p {
            Pending::Both(_, a, b) => vec![*a, *b],
            Pending::Only(_, id, _) => vec![*id],
        });
        trees.load(repo, index, ids).await?;
        let mut next = Vec::new();
        for p in level {
            bound(w.changes.len() + next.len(), "entries")?;
            match p {
                Pending::Both(dir, a, b) => {
                    w.both(&dir, &trees.get(&a), &trees.get(&b), &mut next)?
                }
                Pending::Only(dir, id, what) => {
                    for n in &trees.get(&id).nodes {
                        w.one(child(&dir, n)?, n, what, &mut next);
                    }
                }
            }
        }
        level = next;
    }
    let size = |ids: &mut dyn Iterator<Item = &Id>| -> u64 {
        ids.filter_map(|id| index.get(id))
            .map(|l| u64::from(l.plain_len))
            .sum()
    };
    let mut changes = w.changes;
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Diff {
        changes,
        bytes_added: size(&mut w.new.difference(&w.old)),
        bytes_removed: size(&mut w.old.difference(&w.new)),
    })
}

/// The changes found so far and the content blobs each side's changed files use.
#[derive(Default)]
struct Walk {
    changes: Vec<Change>,
    old: HashSet<Id>,
    new: HashSet<Id>,
}

impl Walk {
    fn push(&mut self, path: PathBuf, what: What, kind: NodeKind) {
        self.changes.push(Change { path, what, kind });
    }

    /// Two listings of the directory `dir`, entry by entry under each name.
    fn both(&mut self, dir: &Path, a: &Tree, b: &Tree, next: &mut Vec<Pending>) -> Result<()> {
        let mut old: BTreeMap<Vec<u8>, &Node> =
            a.nodes.iter().map(|n| (n.name_bytes(), n)).collect();
        for n in &b.nodes {
            let path = child(dir, n)?;
            match old.remove(&n.name_bytes()) {
                None => self.one(path, n, What::Added, next),
                Some(o) => self.compare(path, o, n, next),
            }
        }
        for o in old.into_values() {
            self.one(child(dir, o)?, o, What::Removed, next);
        }
        Ok(())
    }

    /// An entry on one side only (`what` says which), and all it holds.
    fn one(&mut self, path: PathBuf, n: &Node, what: What, next: &mut Vec<Pending>) {
        let side = match what {
            What::Removed => &mut self.old,
            _ => &mut self.new,
        };
        side.extend(n.content.iter().copied());
        if let Some(sub) = n.subtree.filter(|_| n.kind == NodeKind::Dir) {
            next.push(Pending::Only(path.clone(), sub, what));
        }
        self.push(path, what, n.kind);
    }

    /// The same name on both sides.
    fn compare(&mut self, path: PathBuf, o: &Node, n: &Node, next: &mut Vec<Pending>) {
        if o.kind != n.kind {
            // What the old entry held went with it; what the new one holds came with it.
            for (node, what) in [(o, What::Removed), (n, What::Added)] {
                if let Some(sub) = node.subtree.filter(|_| node.kind == NodeKind::Dir) {
                    next.push(Pending::Only(path.clone(), sub, what));
                }
            }
            self.old.extend(o.content.iter().copied());
            self.new.extend(n.content.iter().copied());
            return self.push(path, What::Type, n.kind);
        }
        if n.kind == NodeKind::File && (o.content != n.content || o.size != n.size) {
            self.old.extend(o.content.iter().copied());
            self.new.extend(n.content.iter().copied());
            return self.push(path, What::Modified, n.kind);
        }
        if n.kind == NodeKind::Dir {
            match (o.subtree, n.subtree) {
                (Some(a), Some(b)) if a != b => next.push(Pending::Both(path.clone(), a, b)),
                (Some(a), None) => next.push(Pending::Only(path.clone(), a, What::Removed)),
                (None, Some(b)) => next.push(Pending::Only(path.clone(), b, What::Added)),
                _ => {}
            }
        }
        if !same_metadata(o, n) {
            self.push(path, What::Metadata, n.kind);
        }
    }
}

/// True when what a restore would set is the same. ctime, inode, device and link count say
/// where and when the file was, not what it is: a restore cannot set them back.
fn same_metadata(a: &Node, b: &Node) -> bool {
    a.mode == b.mode
        && a.uid == b.uid
        && a.gid == b.gid
        && a.mtime == b.mtime
        && a.target == b.target
        && a.rdev == b.rdev
        && a.xattrs == b.xattrs
}

//! Changing a snapshot's tags: a new snapshot file replaces the old one.
//!
//! A snapshot file is named by the hash of its bytes, so new tags make a new file. It is
//! written before the old one is deleted: a crash in between leaves both (the same backup
//! listed twice), never neither.

use std::sync::Arc;

use ferry_transfer::{Error, Result};

use crate::crypto::Kind;
use crate::id::Id;
use crate::repo::Repo;
use crate::snapshot::{Filter, Snapshot};

/// What to do to each snapshot's tags, as restic's `tag --set/--add/--remove`: `set`
/// replaces them, then `add` adds those missing, then `remove` takes its tags away.
#[derive(Debug, Clone, Default)]
pub struct TagChange {
    /// The tags to carry instead (an empty list: none at all).
    pub set: Option<Vec<String>>,
    /// Tags to add.
    pub add: Vec<String>,
    /// Tags to remove.
    pub remove: Vec<String>,
}

impl TagChange {
    /// True when it would change nothing whatever the tags.
    pub fn is_empty(&self) -> bool {
        self.set.is_none() && self.add.is_empty() && self.remove.is_empty()
    }

    /// Refuses a change that changes nothing, in one line.
    pub fn check(&self) -> Result<()> {
        match self.is_empty() {
            true => Err(Error::Invalid(
                "nothing to change: give --add, --remove or --set".into(),
            )),
            false => Ok(()),
        }
    }

    /// The tags `old` becomes, each once, in the order first met. Empty names are no tags
    /// (`--set ''` is restic's way to clear them).
    pub fn apply(&self, old: &[String]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let base = self.set.as_deref().unwrap_or(old);
        for t in base.iter().chain(&self.add) {
            if !t.is_empty() && !out.contains(t) && !self.remove.contains(t) {
                out.push(t.clone());
            }
        }
        out
    }
}

/// What [`tag`] did.
#[derive(Debug, Default, serde::Serialize)]
pub struct Retagged {
    /// (old id, new id) of each snapshot written again with its new tags.
    pub changed: Vec<(Id, Id)>,
    /// Snapshots that already carried exactly those tags: left alone.
    pub unchanged: Vec<Id>,
}

/// The snapshots a command given ids and a filter works on, oldest first: each snapshot
/// `which` names ("latest" or an id prefix, among those `filter` chooses) once, or, with no
/// ids, every one `filter` chooses (all of them for an empty filter), as restic chooses.
pub async fn chosen(repo: &Repo, which: &[String], filter: &Filter) -> Result<Vec<(Id, Snapshot)>> {
    if which.is_empty() {
        return repo.snapshots_matching(filter).await;
    }
    let mut out: Vec<(Id, Snapshot)> = Vec::new();
    for w in which {
        let (id, s) = repo.snapshot_in(w, filter).await?;
        if !out.iter().any(|(i, _)| *i == id) {
            out.push((id, s));
        }
    }
    out.sort_by_key(|(_, s)| (s.time, s.nanos));
    Ok(out)
}

/// Changes the tags of the snapshots [`chosen`] names, under an exclusive lock, as forget
/// removes snapshots: no backup, forget or prune sees the list while it changes. A change
/// that changes nothing is refused, before anything is read.
pub async fn tag(
    repo: Arc<Repo>, which: &[String], filter: &Filter, change: &TagChange,
) -> Result<Retagged> {
    change.check()?;
    crate::lock::under(&repo, true, retag(&repo, which, filter, change)).await
}

async fn retag(
    repo: &Repo, which: &[String], filter: &Filter, change: &TagChange,
) -> Result<Retagged> {
    let mut out = Retagged::default();
    for (id, snap) in chosen(repo, which, filter).await? {
        let tags = change.apply(&snap.tags);
        if tags == snap.tags {
            out.unchanged.push(id);
            continue;
        }
        let new = Snapshot { tags, ..snap };
        let body = serde_json::to_vec(&new).expect("serializable");
        let new_id = repo.save_file(Kind::Snapshot, &body).await?;
        repo.delete_file("snapshots", &id).await?;
        out.changed.push((id, new_id));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn set_add_remove() {
        let old = v(&["a", "b"]);
        let add = TagChange {
            add: v(&["b", "c"]),
            ..Default::default()
        };
        assert_eq!(add.apply(&old), v(&["a", "b", "c"]));
        let remove = TagChange {
            remove: v(&["a", "x"]),
            ..Default::default()
        };
        assert_eq!(remove.apply(&old), v(&["b"]));
        let set = TagChange {
            set: Some(v(&["x", "x", "y"])),
            ..Default::default()
        };
        assert_eq!(set.apply(&old), v(&["x", "y"]));
        let clear = TagChange {
            set: Some(v(&[""])),
            ..Default::default()
        };
        assert!(clear.apply(&old).is_empty());
        assert!(TagChange::default().is_empty() && !clear.is_empty());
    }
}

//! What the repository's WAL archive holds, as the backups need to see it: which segments of
//! which timelines, and which were dropped.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use ferry_repo::Repo;
use ferry_transfer::Result;
use ferry_wal::{Archive, Kind, WalKey, WalName};

/// The archive's contents.
pub struct WalView {
    /// Timeline -> archived segment numbers.
    segments: BTreeMap<u32, BTreeSet<u64>>,
    /// Names recorded as dropped (acknowledged without being archived).
    dropped: HashSet<String>,
    /// Every WAL file with its object key.
    files: Vec<(WalName, String)>,
    seg_size: u64,
}

/// The key `repo`'s WAL is sealed with, derived from its master key.
pub fn wal_key(repo: &Repo) -> WalKey {
    WalKey::from_secret(&repo.key().subkey(ferry_wal::envelope::KEY_CONTEXT))
}

/// The WAL archive inside `repo`, sealed with its key.
pub fn archive(repo: &Repo) -> Arc<Archive> {
    Archive::with_key(
        repo.remote().clone(),
        &repo.path(""),
        0,
        Some(wal_key(repo)),
    )
}

/// Audits the WAL archive inside `repo` with the repository's key: headers only, or every
/// object read and authenticated with `read_data`. Empty when there is none.
pub async fn audit(repo: &Repo, read_data: bool) -> Result<Vec<ferry_wal::audit::Finding>> {
    let archive = archive(repo);
    let names: Vec<WalName> = archive.list().await?.into_iter().map(|(n, _)| n).collect();
    Ok(ferry_wal::audit::audit(&archive, &names, true, read_data).await)
}

impl WalView {
    /// Lists the archive in `repo`, reading segment numbers with `seg_size`.
    pub async fn load(repo: &Repo, seg_size: u64) -> Result<WalView> {
        let a = archive(repo);
        let mut segments: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
        let mut files = Vec::new();
        for (name, info) in a.list().await? {
            if name.kind() == Kind::Segment {
                segments
                    .entry(name.timeline())
                    .or_default()
                    .insert(name.segno(seg_size));
            }
            files.push((name, info.key));
        }
        let dropped = a.gaps().await?.into_iter().map(|g| g.name).collect();
        Ok(WalView {
            segments,
            dropped,
            files,
            seg_size,
        })
    }

    /// The segments of `timeline` from `from` to `to` (inclusive) that cannot be replayed:
    /// not in the archive, or recorded as dropped.
    pub fn missing(&self, timeline: u32, from: u64, to: u64) -> Vec<String> {
        let have = self.segments.get(&timeline);
        (from..=to)
            .map(|s| WalName::segment(timeline, s, self.seg_size))
            .filter(|n| {
                !have.is_some_and(|h| h.contains(&n.segno(self.seg_size)))
                    || self.dropped.contains(n.as_str())
            })
            .map(|n| n.as_str().to_string())
            .collect()
    }

    /// Per timeline, oldest first: its first and last archived segment and how many it has.
    pub fn ranges(&self) -> Vec<(u32, WalName, WalName, usize)> {
        self.segments
            .iter()
            .filter_map(|(t, set)| {
                let (first, last) = (set.first()?, set.last()?);
                let name = |s: u64| WalName::segment(*t, s, self.seg_size);
                Some((*t, name(*first), name(*last), set.len()))
            })
            .collect()
    }

    /// The newest segment archived on `timeline` or any later one.
    pub fn newest_from(&self, timeline: u32) -> Option<(u32, u64)> {
        self.segments
            .range(timeline..)
            .filter_map(|(t, s)| s.last().map(|l| (*t, *l)))
            .max_by_key(|(t, s)| (*s, *t))
    }

    /// For each segment from `from` to `to` (inclusive), the file a replay from `timeline`
    /// following the newest timeline reads: the one on the highest timeline from `timeline` on
    /// that has it and did not drop it. Segments no such timeline has are left out.
    pub fn replay_path(&self, timeline: u32, from: u64, to: u64) -> Vec<WalName> {
        (from..=to)
            .filter_map(|s| {
                self.segments
                    .range(timeline..)
                    .rev()
                    .filter(|(_, set)| set.contains(&s))
                    .map(|(t, _)| WalName::segment(*t, s, self.seg_size))
                    .find(|n| !self.dropped.contains(n.as_str()))
            })
            .collect()
    }

    /// Segment numbers from `from` on, up to the newest archived on `timeline` or later, that no
    /// timeline from `timeline` on has (or that were dropped): where a replay would stop.
    pub fn holes_after(&self, timeline: u32, from: u64) -> Vec<String> {
        let Some((_, last)) = self.newest_from(timeline) else {
            return Vec::new();
        };
        (from..=last)
            .filter_map(|s| {
                let on: Vec<u32> = self
                    .segments
                    .range(timeline..)
                    .filter(|(_, set)| set.contains(&s))
                    .map(|(t, _)| *t)
                    .collect();
                let usable = on.iter().any(|t| {
                    !self
                        .dropped
                        .contains(WalName::segment(*t, s, self.seg_size).as_str())
                });
                (!usable).then(|| {
                    WalName::segment(timeline, s, self.seg_size)
                        .as_str()
                        .to_string()
                })
            })
            .collect()
    }

    /// Every archived WAL file (segments, partials, backup labels) positioned before
    /// segment `before`, on any timeline, with its key; timeline histories are never listed.
    pub fn older_than(&self, before: u64) -> Vec<(WalName, String)> {
        self.files
            .iter()
            .filter(|(n, _)| n.kind() != Kind::History && n.segno(self.seg_size) < before)
            .cloned()
            .collect()
    }
}

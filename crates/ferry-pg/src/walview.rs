//! What the repository's WAL archive holds, as the backups need to see it: which segments of
//! which timelines, and which were dropped.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use ferry_repo::Repo;
use ferry_transfer::Result;
use ferry_wal::{Archive, Kind, WalKey, WalName};

/// Most segment names [`WalView::missing`] and [`WalView::holes_after`] list: the first
/// tells where a replay stops, and a list this long already says the archive is unusable
/// there. Without a bound, a record or a planted name claiming 2^40 segments would allocate
/// a name for each.
pub const MAX_LISTED: usize = 1000;

/// `n` listed names as a count for a message: a list [`MAX_LISTED`] long or longer may
/// have been cut, so it gives a lower bound.
pub fn count(n: usize) -> String {
    match n >= MAX_LISTED {
        true => format!("at least {n}"),
        false => n.to_string(),
    }
}

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

    /// The first segments (at most [`MAX_LISTED`]) of `timeline` from `from` to `to`
    /// (inclusive) that cannot be replayed: not in the archive, or recorded as dropped. The
    /// walk stops there, so its cost is the archived segments it passes plus the bound,
    /// whatever span a record claims.
    pub fn missing(&self, timeline: u32, from: u64, to: u64) -> Vec<String> {
        let have = self.segments.get(&timeline);
        let name = |s: u64| {
            WalName::segment(timeline, s, self.seg_size)
                .as_str()
                .to_string()
        };
        (from..=to)
            .filter(|s| !have.is_some_and(|h| h.contains(s)) || self.dropped.contains(&name(*s)))
            .take(MAX_LISTED)
            .map(name)
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
        if from > to {
            return Vec::new();
        }
        // Only the numbers some timeline has: a name planted far ahead (log FFFFFFFF) makes
        // `to` huge, and a walk over every number up to it would never end.
        let archived: BTreeSet<u64> = self
            .segments
            .range(timeline..)
            .flat_map(|(_, set)| set.range(from..=to).copied())
            .collect();
        archived
            .into_iter()
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
    /// timeline from `timeline` on has (or that were dropped): where a replay would stop. The
    /// first [`MAX_LISTED`] only: a store writer can plant a name far ahead (it needs no key
    /// to be listed), and every number before it would be a hole.
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
            .take(MAX_LISTED)
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

#[cfg(test)]
mod tests {
    use super::*;

    const SEG: u64 = 16 << 20;

    /// Timeline 1 holding `segs`.
    fn view(segs: &[u64]) -> WalView {
        WalView {
            segments: BTreeMap::from([(1, segs.iter().copied().collect())]),
            dropped: HashSet::new(),
            files: Vec::new(),
            seg_size: SEG,
        }
    }

    #[test]
    fn huge_spans_are_listed_only_as_far_as_the_bound() {
        let v = view(&[0, 1, 2, 4]);
        // 2^22 segments, all but four missing: the first ones, no more.
        let m = v.missing(1, 0, 1 << 22);
        assert_eq!(m.len(), MAX_LISTED);
        assert_eq!(m[0], WalName::segment(1, 3, SEG).as_str());
        assert_eq!(m[1], WalName::segment(1, 5, SEG).as_str());
        // A forged record's whole LSN space, and a name planted at the end of it.
        assert_eq!(v.missing(1, 0, u64::MAX).len(), MAX_LISTED);
        let far = (u64::from(u32::MAX) << 8) | 0xff;
        let v = view(&[0, 1, 2, far]);
        let h = v.holes_after(1, 0);
        assert_eq!(h.len(), MAX_LISTED);
        assert_eq!(h[0], WalName::segment(1, 3, SEG).as_str());
        let path: Vec<u64> = v
            .replay_path(1, 1, far)
            .iter()
            .map(|n| n.segno(SEG))
            .collect();
        assert_eq!(path, [1, 2, far]);
    }

    #[test]
    fn short_spans_list_every_missing_and_dropped_segment() {
        let mut v = view(&[1, 2, 4, 5]);
        v.dropped
            .insert(WalName::segment(1, 4, SEG).as_str().to_string());
        let name = |s| WalName::segment(1, s, SEG).as_str().to_string();
        assert_eq!(v.missing(1, 0, 6), [name(0), name(3), name(4), name(6)]);
        assert_eq!(v.holes_after(1, 2), [name(3), name(4)]);
        assert_eq!(v.missing(2, 1, 1), [WalName::segment(2, 1, SEG).as_str()]);
    }
}

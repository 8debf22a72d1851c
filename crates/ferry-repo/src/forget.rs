//! `forget`: which snapshots a retention policy keeps, and removing the others.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use ferry_transfer::{Error, Result};

use crate::id::Id;
use crate::repo::Repo;
use crate::snapshot::{Filter, Snapshot};

/// What [`forget`] did, or with `dry_run` would do.
#[derive(Debug, Clone, Default)]
pub struct Forgotten {
    /// Snapshots the policy keeps.
    pub kept: Vec<Id>,
    /// Snapshots removed (or that would be).
    pub removed: Vec<Id>,
    /// Snapshots the policy lets go that Object Lock keeps, with why: kept until then.
    pub locked: Vec<(Id, String)>,
    /// Nothing was removed: this is what would have been.
    pub dry_run: bool,
}

/// What `forget` considers and how it groups them.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// Only the snapshots this chooses; the others are neither kept nor removed.
    pub filter: Filter,
    /// How snapshots are grouped, each group judged on its own.
    pub group_by: GroupBy,
    /// Say what would go; remove nothing.
    pub dry_run: bool,
}

/// Which snapshot fields make a group (restic's `--group-by host,paths,tags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupBy {
    /// Snapshots of different hosts are judged apart.
    pub host: bool,
    /// Snapshots of different path sets are judged apart.
    pub paths: bool,
    /// Snapshots with different tag sets are judged apart.
    pub tags: bool,
}

impl Default for GroupBy {
    fn default() -> Self {
        GroupBy {
            host: true,
            paths: true,
            tags: false,
        }
    }
}

impl GroupBy {
    /// Parses `host,paths,tags` (any of them, in any order; empty: one group of all).
    pub fn parse(s: &str) -> Result<GroupBy> {
        let mut g = GroupBy {
            host: false,
            paths: false,
            tags: false,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "host" => g.host = true,
                "paths" | "path" => g.paths = true,
                "tags" | "tag" => g.tags = true,
                o => {
                    return Err(Error::Invalid(format!(
                        "--group-by '{o}': use host, paths, tags (comma-separated)"
                    )))
                }
            }
        }
        Ok(g)
    }

    fn key(&self, s: &Snapshot) -> (String, Vec<String>, Vec<String>) {
        let mut tags = s.tags.clone();
        tags.sort();
        (
            if self.host {
                s.hostname.clone()
            } else {
                String::new()
            },
            if self.paths {
                s.paths.clone()
            } else {
                Vec::new()
            },
            if self.tags { tags } else { Vec::new() },
        )
    }
}

/// Removes every snapshot `policy` does not keep among those `scope` chooses, under an
/// exclusive lock, as restic does: the snapshot list it decides on cannot change underneath
/// (a backup adding one, another forget or a prune). The data goes with the next prune. An
/// empty policy is refused: it would remove every snapshot. A dry run takes no lock and
/// removes nothing.
pub async fn forget(repo: Arc<Repo>, policy: &Policy, scope: &Scope) -> Result<Forgotten> {
    if policy.is_empty() {
        return Err(Error::Invalid(
            "no policy: give at least one --keep-* option (forget would remove every snapshot)"
                .into(),
        ));
    }
    match scope.dry_run {
        true => remove_unkept(&repo, policy, scope).await,
        false => crate::lock::under(&repo, true, remove_unkept(&repo, policy, scope)).await,
    }
}

async fn remove_unkept(repo: &Repo, policy: &Policy, scope: &Scope) -> Result<Forgotten> {
    let snaps = repo.snapshots_matching(&scope.filter).await?;
    let kept = keep_grouped(&snaps, policy, scope.group_by);
    let mut out = Forgotten {
        dry_run: scope.dry_run,
        ..Default::default()
    };
    for (id, _) in &snaps {
        if kept.contains(id) {
            out.kept.push(*id);
            continue;
        }
        // A delete would "succeed" as a delete marker and the snapshot vanish from sight
        // while its data stays locked: it stays listed instead, and says until when.
        if let Some(why) = repo.file_retention("snapshots", id).await? {
            out.locked.push((*id, why));
            continue;
        }
        if !scope.dry_run {
            repo.delete_file("snapshots", id).await?;
        }
        out.removed.push(*id);
    }
    Ok(out)
}

/// How many of each period's newest snapshot to keep (UTC periods), and which to keep
/// whatever their age.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Every snapshot younger than this many seconds, counted back from the group's newest
    /// (so that a host that stopped backing up keeps its last ones).
    pub within: Option<i64>,
    /// Every snapshot carrying all the tags of any of these lists.
    pub tags: Vec<Vec<String>>,
    /// The newest N.
    pub last: Option<u32>,
    /// The newest per hour, for N hours that have one.
    pub hourly: Option<u32>,
    /// Per day.
    pub daily: Option<u32>,
    /// Per ISO week.
    pub weekly: Option<u32>,
    /// Per month.
    pub monthly: Option<u32>,
    /// Per year.
    pub yearly: Option<u32>,
}

impl Policy {
    /// True when no rule is set (forget would remove everything).
    pub fn is_empty(&self) -> bool {
        self.within.is_none()
            && self.tags.is_empty()
            && [
                self.last,
                self.hourly,
                self.daily,
                self.weekly,
                self.monthly,
                self.yearly,
            ]
            .iter()
            .all(Option::is_none)
    }
}

/// A `--keep-within` duration as restic writes it: numbers with units y, m (months), d, h,
/// e.g. `1y6m`, `30d`, `12h`. A month counts 30 days, a year 365.
pub fn parse_within(s: &str) -> Result<i64> {
    let bad = || Error::Invalid(format!("--keep-within '{s}': use e.g. 30d, 12h, 1y6m"));
    let (mut total, mut num) = (0i64, String::new());
    for c in s.trim().chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let n: i64 = num.parse().map_err(|_| bad())?;
        num.clear();
        let unit = match c {
            'y' => 365 * 86_400,
            'm' => 30 * 86_400,
            'd' => 86_400,
            'h' => 3_600,
            _ => return Err(bad()),
        };
        total = n
            .checked_mul(unit)
            .and_then(|v| v.checked_add(total))
            .ok_or_else(bad)?;
    }
    match num.is_empty() && total > 0 {
        true => Ok(total),
        false => Err(bad()),
    }
}

/// (year, month) of a day count since 1970-01-01.
fn year_month(days: i64) -> (i64, i64) {
    let (y, m, _) = crate::snapshot::civil_from_days(days);
    (y, m)
}

type Groups<'a> = BTreeMap<(String, Vec<String>, Vec<String>), Vec<&'a (Id, Snapshot)>>;
/// A rule: how many to keep, and the period a snapshot time falls in.
type Rule<'a> = (Option<u32>, &'a dyn Fn(i64) -> i64);

/// The snapshots to keep; each host and path set is judged on its own.
pub fn keep(snaps: &[(Id, Snapshot)], p: &Policy) -> HashSet<Id> {
    keep_grouped(snaps, p, GroupBy::default())
}

/// The snapshots to keep, each group `by` makes judged on its own.
pub fn keep_grouped(snaps: &[(Id, Snapshot)], p: &Policy, by: GroupBy) -> HashSet<Id> {
    let mut groups: Groups = BTreeMap::new();
    for s in snaps {
        groups.entry(by.key(&s.1)).or_default().push(s);
    }
    let mut kept = HashSet::new();
    // A snapshot dated past tomorrow is kept and counts for no rule: whoever can write one
    // (an append-only client) would otherwise fill --keep-last with snapshots of 2100 and
    // have every real one forgotten, and --keep-within would count back from 2100.
    let horizon = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(i64::MAX, |d| d.as_secs() as i64 + 86_400);
    for (_, mut g) in groups {
        g.sort_by_key(|s| std::cmp::Reverse((s.1.time, s.1.nanos)));
        let future = g.iter().take_while(|s| s.1.time > horizon).count();
        kept.extend(g.drain(..future).map(|s| s.0));
        let newest = g.first().map_or(0, |s| s.1.time);
        for (id, s) in g.iter().map(|x| (&x.0, &x.1)) {
            let young = p.within.is_some_and(|w| s.time > newest - w);
            let tagged = p
                .tags
                .iter()
                .any(|set| set.iter().all(|t| s.tags.contains(t)));
            if young || tagged {
                kept.insert(*id);
            }
        }
        let rules: [Rule; 6] = [
            (p.last, &|_| 0),
            (p.hourly, &|t| t.div_euclid(3600)),
            (p.daily, &|t| t.div_euclid(86_400)),
            (p.weekly, &|t| (t.div_euclid(86_400) + 3).div_euclid(7)),
            (p.monthly, &|t| {
                let (y, m) = year_month(t.div_euclid(86_400));
                y * 12 + m
            }),
            (p.yearly, &|t| year_month(t.div_euclid(86_400)).0),
        ];
        for (i, (n, bucket)) in rules.iter().enumerate() {
            let Some(n) = n else { continue };
            let mut left = *n;
            let mut last_bucket = None;
            for (id, s) in g.iter().map(|x| (&x.0, &x.1)) {
                if left == 0 {
                    break;
                }
                let b = bucket(s.time);
                // keep-last counts every snapshot; the others one per period.
                if i == 0 || last_bucket != Some(b) {
                    kept.insert(*id);
                    left -= 1;
                    last_bucket = Some(b);
                }
            }
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(t: i64) -> (Id, Snapshot) {
        (
            Id::of(&t.to_le_bytes()),
            Snapshot {
                time: t,
                nanos: 0,
                hostname: "h".into(),
                paths: vec!["/d".into()],
                tags: vec![],
                tree: Id::default(),
                parent: None,
                summary: Default::default(),
                start: None,
                extra: None,
            },
        )
    }

    #[test]
    fn daily_keeps_the_newest_of_each_day() {
        let day = 86_400;
        let s: Vec<_> = [0, 100, day, day + 5, 2 * day, 3 * day]
            .iter()
            .map(|&t| snap(t))
            .collect();
        let k = keep(
            &s,
            &Policy {
                daily: Some(3),
                ..Default::default()
            },
        );
        let want: HashSet<Id> = [3 * day, 2 * day, day + 5]
            .iter()
            .map(|&t| snap(t).0)
            .collect();
        assert_eq!(k, want);
        let k = keep(
            &s,
            &Policy {
                last: Some(2),
                ..Default::default()
            },
        );
        assert_eq!(k.len(), 2);
        assert_eq!(year_month(0), (1970, 1));
        assert_eq!(year_month(19_723), (2024, 1)); // 2024-01-01
    }

    #[test]
    fn snapshots_dated_in_the_future_are_kept_and_count_for_nothing() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let day = 86_400;
        let real: Vec<_> = (1..=3).map(|d| snap(now - d * day)).collect();
        let planted: Vec<_> = (0..5).map(|y| snap(now + (75 + y) * 365 * day)).collect();
        let all: Vec<_> = real.iter().chain(&planted).cloned().collect();
        for p in [
            Policy {
                last: Some(2),
                ..Default::default()
            },
            Policy {
                within: Some(4 * day),
                ..Default::default()
            },
        ] {
            let k = keep(&all, &p);
            assert!(planted.iter().all(|s| k.contains(&s.0)), "{p:?}");
            let real_kept = real.iter().filter(|s| k.contains(&s.0)).count();
            assert!(real_kept >= 2, "{p:?}: {real_kept} real snapshots kept");
        }
    }

    #[test]
    fn within_tags_and_groups() {
        let day = 86_400;
        let mut s: Vec<_> = [0, day, 5 * day, 9 * day]
            .iter()
            .map(|&t| snap(t))
            .collect();
        s[0].1.tags = vec!["keep".into(), "x".into()];
        s[1].1.hostname = "other".into();
        let p = Policy {
            within: Some(parse_within("5d").unwrap()),
            tags: vec![vec!["keep".into()]],
            ..Default::default()
        };
        // Group "h": newest 9d; within 5d keeps 5d and 9d; the tag keeps 0.
        // Group "other": its newest (1d) is kept.
        let k = keep(&s, &p);
        let want: HashSet<Id> = [0, day, 5 * day, 9 * day]
            .iter()
            .map(|&t| snap(t).0)
            .collect();
        assert_eq!(k, want);
        // One group of all: the 1d snapshot is now 8 days older than the newest.
        let all = GroupBy::parse("").unwrap();
        let k = keep_grouped(&s, &p, all);
        let want: HashSet<Id> = [0, 5 * day, 9 * day].iter().map(|&t| snap(t).0).collect();
        assert_eq!(k, want);
        assert!(GroupBy::parse("host,color").is_err());
        assert_eq!(parse_within("1y6m").unwrap(), (365 + 180) * day);
        for bad in ["", "5", "5w", "d", "-1d"] {
            assert!(parse_within(bad).is_err(), "{bad}");
        }
    }
}

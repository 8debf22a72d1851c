//! `forget`: which snapshots a retention policy keeps, and removing the others.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use ferry_transfer::{Error, Result};

use crate::id::Id;
use crate::repo::Repo;
use crate::snapshot::Snapshot;

/// What [`forget`] did.
#[derive(Debug, Clone, Default)]
pub struct Forgotten {
    /// Snapshots the policy keeps.
    pub kept: Vec<Id>,
    /// Snapshots removed.
    pub removed: Vec<Id>,
}

/// Removes every snapshot `policy` does not keep, under an exclusive lock, as restic does:
/// the snapshot list it decides on cannot change underneath (a backup adding one, another
/// forget or a prune). The data goes with the next prune. An empty policy is refused: it
/// would remove every snapshot.
pub async fn forget(repo: Arc<Repo>, policy: &Policy) -> Result<Forgotten> {
    if policy.is_empty() {
        return Err(Error::Invalid(
            "no policy: give at least one --keep-* option (forget would remove every snapshot)"
                .into(),
        ));
    }
    crate::lock::under(&repo, true, remove_unkept(&repo, policy)).await
}

async fn remove_unkept(repo: &Repo, policy: &Policy) -> Result<Forgotten> {
    let snaps = repo.snapshots().await?;
    let kept = keep(&snaps, policy);
    let mut out = Forgotten::default();
    for (id, _) in &snaps {
        if kept.contains(id) {
            out.kept.push(*id);
        } else {
            repo.delete_file("snapshots", id).await?;
            out.removed.push(*id);
        }
    }
    Ok(out)
}

/// How many of each period's newest snapshot to keep (UTC periods).
#[derive(Debug, Clone, Default)]
pub struct Policy {
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
        [
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

/// (year, month) of a day count since 1970-01-01 (Howard Hinnant's civil_from_days).
fn year_month(days: i64) -> (i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m)
}

type Groups<'a> = BTreeMap<(String, Vec<String>), Vec<&'a (Id, Snapshot)>>;
/// A rule: how many to keep, and the period a snapshot time falls in.
type Rule<'a> = (Option<u32>, &'a dyn Fn(i64) -> i64);

/// The snapshots to keep; each host and path set is judged on its own.
pub fn keep(snaps: &[(Id, Snapshot)], p: &Policy) -> HashSet<Id> {
    let mut groups: Groups = BTreeMap::new();
    for s in snaps {
        groups
            .entry((s.1.hostname.clone(), s.1.paths.clone()))
            .or_default()
            .push(s);
    }
    let mut kept = HashSet::new();
    for (_, mut g) in groups {
        g.sort_by_key(|s| std::cmp::Reverse((s.1.time, s.1.nanos)));
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
}

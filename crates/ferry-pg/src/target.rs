//! Recovery targets: where a point-in-time restore stops.

use chrono::{DateTime, FixedOffset};
use ferry_transfer::{Error, Result};

use crate::lsn::Lsn;
use crate::record::PgBackup;

/// Where recovery stops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The end of the archived WAL.
    Latest,
    /// A time; the text is passed to PostgreSQL as given.
    Time(DateTime<FixedOffset>, String),
    /// A WAL position.
    Lsn(Lsn),
    /// A transaction id.
    Xid(String),
    /// A restore point made with pg_create_restore_point.
    Name(String),
}

/// Parses a time the way PostgreSQL prints timestamps with time zone, or RFC 3339; the zone
/// is required, since the restoring host's zone need not be the server's.
pub fn parse_time(s: &str) -> Result<DateTime<FixedOffset>> {
    let t = s.trim();
    if let Ok(d) = DateTime::parse_from_rfc3339(t) {
        return Ok(d);
    }
    let t2 = if t.len() > 3 && (t.ends_with('Z') || t.ends_with(" UTC")) {
        format!("{}+00:00", t.trim_end_matches('Z').trim_end_matches(" UTC"))
    } else {
        t.to_string()
    };
    for f in [
        "%Y-%m-%d %H:%M:%S%.f%#z",
        "%Y-%m-%d %H:%M:%S%.f%:z",
        "%Y-%m-%dT%H:%M:%S%.f%#z",
    ] {
        if let Ok(d) = DateTime::parse_from_str(&t2, f) {
            return Ok(d);
        }
    }
    Err(Error::Invalid(format!(
        "'{s}' is not a time with a zone (like 2026-11-22 14:05:00.25+00)"
    )))
}

impl Target {
    /// Whether `b` ends early enough to be replayed up to this target: recovery cannot stop
    /// before a backup is consistent. A transaction must not have ended when the backup
    /// stopped; a backup recorded without that (made before ferry kept it) may do. Unknown
    /// for names, which [`crate::choose`] finds in the WAL: any backup may do.
    pub fn reachable_from(&self, b: &PgBackup) -> bool {
        match self {
            Target::Time(t, _) => b.stop_time <= t.timestamp_micros(),
            Target::Lsn(l) => b.stop_lsn <= *l,
            Target::Xid(x) => match (x.parse(), &b.stop_snapshot) {
                (Ok(x), Some(s)) => not_ended(x, s).unwrap_or(true),
                _ => true,
            },
            Target::Latest | Target::Name(_) => true,
        }
    }

    /// The `postgresql.auto.conf` settings for this target.
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        match self {
            Target::Latest => vec![],
            Target::Time(_, s) => vec![("recovery_target_time", s.clone())],
            Target::Lsn(l) => vec![("recovery_target_lsn", l.to_string())],
            Target::Xid(x) => vec![("recovery_target_xid", x.clone())],
            Target::Name(n) => vec![("recovery_target_name", n.clone())],
        }
    }

    /// For messages.
    pub fn describe(&self) -> String {
        match self {
            Target::Latest => "the end of the archived WAL".into(),
            Target::Time(_, s) => format!("time {s}"),
            Target::Lsn(l) => format!("LSN {l}"),
            Target::Xid(x) => format!("transaction {x}"),
            Target::Name(n) => format!("restore point '{n}'"),
        }
    }
}

/// Whether transaction `xid` had not ended in `snapshot` (`xmin:xmax:xip,...` of 64-bit
/// ids, as `pg_current_snapshot()` prints it): not yet begun, or running. An id given
/// without its epoch (32 bits, as `recovery_target_xid` reads it) is taken as the nearest
/// to the snapshot's. `None` when the snapshot does not parse.
fn not_ended(xid: u64, snapshot: &str) -> Option<bool> {
    let mut parts = snapshot.split(':');
    let _xmin: u64 = parts.next()?.parse().ok()?;
    let xmax: u64 = parts.next()?.parse().ok()?;
    let running = parts
        .next()?
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u64>().ok())
        .collect::<Option<Vec<u64>>>()?;
    let xid = if xid >> 32 == 0 && xmax >> 32 > 0 {
        let same_epoch = (xmax & !0xFFFF_FFFF) | xid;
        if same_epoch > xmax + (1 << 31) {
            same_epoch - (1 << 32)
        } else {
            same_epoch
        }
    } else {
        xid
    };
    Some(xid >= xmax || running.contains(&xid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_postgres_and_rfc3339_times() {
        let a = parse_time("2026-11-22 14:05:00.25+00").unwrap();
        let b = parse_time("2026-11-22T14:05:00.25Z").unwrap();
        let c = parse_time("2026-11-22 15:05:00.25+01:00").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.timestamp_micros(), c.timestamp_micros());
        assert!(parse_time("2026-11-22 14:05:00").is_err());
    }

    #[test]
    fn a_transaction_had_ended_unless_running_or_not_yet_begun() {
        let s = "100:105:100,103";
        assert_eq!(not_ended(99, s), Some(false));
        assert_eq!(not_ended(100, s), Some(true));
        assert_eq!(not_ended(101, s), Some(false));
        assert_eq!(not_ended(103, s), Some(true));
        assert_eq!(not_ended(105, s), Some(true));
        assert_eq!(not_ended(104, "100:105:"), Some(false));
        // Epoch 2: a 32-bit id is read in the snapshot's epoch, or the one before.
        let e = 2u64 << 32;
        let s = format!("{}:{}:", e + 10, e + 20);
        assert_eq!(not_ended(30, &s), Some(true));
        assert_eq!(not_ended(5, &s), Some(false));
        assert_eq!(not_ended(0xFFFF_FFF0, &s), Some(false));
        assert_eq!(not_ended(e + 30, &s), Some(true));
        assert_eq!(not_ended(1, "nonsense"), None);
    }
}

//! Snapshots: what was backed up, when, from where, pointing at the root tree.

use serde::{Deserialize, Serialize};

use crate::id::Id;

/// Counts a backup reports and its snapshot keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Files read because they were new or changed.
    pub files_read: u64,
    /// Files taken from the parent snapshot without reading.
    pub files_unchanged: u64,
    /// Directories.
    pub dirs: u64,
    /// Bytes of every file in the snapshot.
    pub total_bytes: u64,
    /// Bytes read from files.
    pub bytes_read: u64,
    /// Blobs new to the repository.
    pub blobs_new: u64,
    /// Plaintext bytes of the new blobs.
    pub bytes_new: u64,
    /// Bytes uploaded (packs, compressed and encrypted).
    pub bytes_stored: u64,
    /// Files or directories that could not be read.
    pub errors: u64,
    /// Files, directories and other entries left out by the backup's exclusions (what is
    /// under an excluded directory is not counted: it was never read).
    #[serde(default)]
    pub excluded: u64,
    /// Bytes of the files left out.
    #[serde(default)]
    pub excluded_bytes: u64,
}

impl Snapshot {
    /// Parses a snapshot file's plaintext; `what` names it in the error.
    pub fn decode(b: &[u8], what: &str) -> ferry_transfer::Result<Snapshot> {
        serde_json::from_slice(b)
            .map_err(|e| ferry_transfer::Error::Checksum(format!("{what}: {e}")))
    }
}

/// One snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Seconds since the epoch.
    pub time: i64,
    /// Nanoseconds within the second: orders snapshots made in the same second.
    #[serde(default)]
    pub nanos: u32,
    /// Host that made it.
    pub hostname: String,
    /// What was backed up (absolute paths, or the stream's name).
    pub paths: Vec<String>,
    /// Free-form tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The root tree: one node per path.
    pub tree: Id,
    /// The snapshot whose metadata let unchanged files go unread.
    #[serde(default)]
    pub parent: Option<Id>,
    /// Counts.
    pub summary: Summary,
    /// When the backup started, nanoseconds since the epoch: a file whose ctime is not
    /// safely before it may have changed while it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<i64>,
    /// What the layer above records with the snapshot (a PostgreSQL backup's label and WAL
    /// range); encrypted with the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<serde_json::Value>,
}

/// (year, month, day) of a day count since 1970-01-01 in the proleptic Gregorian calendar
/// (Howard Hinnant's civil_from_days): snapshot times named and grouped by UTC date.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The host's name, for snapshots.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Which snapshots a command considers, as restic's `--host`, `--tag` and `--path` choose
/// them: any of the hosts; any of the tag lists, each of whose tags the snapshot must carry
/// (`--tag a,b` is a and b); every one of the paths. Empty parts choose everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Hostnames, any of which matches.
    pub hosts: Vec<String>,
    /// Tag lists, any of which matches when the snapshot carries all its tags.
    pub tags: Vec<Vec<String>>,
    /// Paths the snapshot must all have been made of.
    pub paths: Vec<String>,
}

impl Filter {
    /// True when `s` is chosen.
    pub fn matches(&self, s: &Snapshot) -> bool {
        let host = self.hosts.is_empty() || self.hosts.contains(&s.hostname);
        let tags = self.tags.is_empty()
            || self
                .tags
                .iter()
                .any(|set| set.iter().all(|t| s.tags.contains(t)));
        let paths = self.paths.iter().all(|p| s.paths.contains(p));
        host && tags && paths
    }

    /// True when nothing is filtered.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.tags.is_empty() && self.paths.is_empty()
    }
}

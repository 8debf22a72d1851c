//! PostgreSQL's WAL file names: segments, partial segments, backup labels, timeline histories.

use std::fmt;

use ferry_transfer::{Error, Result};

/// What kind of file PostgreSQL hands to `archive_command`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `00000002.history`: a timeline's history; archived first, read first on recovery.
    History,
    /// `000000010000000000000003`: a full segment.
    Segment,
    /// `000000010000000000000003.partial`: the last, incomplete segment of an old timeline.
    Partial,
    /// `000000010000000000000003.00000028.backup`: a base backup's label.
    Backup,
}

/// A WAL file name, parsed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WalName {
    name: String,
    kind: Kind,
    timeline: u32,
    /// `log` and `seg` as they appear in the name; 0 for histories.
    log: u32,
    seg: u32,
}

fn hex8(s: &str) -> Option<u32> {
    (s.len() == 8 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| u32::from_str_radix(s, 16).ok())
        .flatten()
}

impl WalName {
    /// Parses a bare file name (no directory).
    pub fn parse(name: &str) -> Result<Self> {
        let bad = || {
            Error::Invalid(format!(
                "'{name}' is not a WAL file name (want e.g. 000000010000000000000003, \
                 00000002.history, ….partial or ….backup)"
            ))
        };
        let (kind, stem) = if let Some(tli) = name.strip_suffix(".history") {
            let timeline = hex8(tli).ok_or_else(bad)?;
            return Ok(Self {
                name: name.into(),
                kind: Kind::History,
                timeline,
                log: 0,
                seg: 0,
            });
        } else if let Some(s) = name.strip_suffix(".partial") {
            (Kind::Partial, s)
        } else if let Some(s) = name.strip_suffix(".backup") {
            let (seg, offset) = s.split_once('.').ok_or_else(bad)?;
            hex8(offset).ok_or_else(bad)?;
            (Kind::Backup, seg)
        } else {
            (Kind::Segment, name)
        };
        // ASCII first: a name from a store listing is anyone's, and slicing a multi-byte
        // character at 8 or 16 would panic.
        if stem.len() != 24 || !stem.is_ascii() {
            return Err(bad());
        }
        Ok(Self {
            name: name.into(),
            kind,
            timeline: hex8(&stem[..8]).ok_or_else(bad)?,
            log: hex8(&stem[8..16]).ok_or_else(bad)?,
            seg: hex8(&stem[16..]).ok_or_else(bad)?,
        })
    }

    /// The segment `segno` of `timeline`, for segments of `seg_size` bytes.
    pub fn segment(timeline: u32, segno: u64, seg_size: u64) -> Self {
        let per_log = segs_per_log(seg_size);
        let (log, seg) = ((segno / per_log) as u32, (segno % per_log) as u32);
        Self {
            name: format!("{timeline:08X}{log:08X}{seg:08X}"),
            kind: Kind::Segment,
            timeline,
            log,
            seg,
        }
    }

    /// The file name.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// What kind of file this is.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The timeline the file belongs to.
    pub fn timeline(&self) -> u32 {
        self.timeline
    }

    /// The segment number within its timeline (0 for histories).
    pub fn segno(&self, seg_size: u64) -> u64 {
        u64::from(self.log) * segs_per_log(seg_size) + u64::from(self.seg)
    }

    /// The next segment on the same timeline.
    pub fn next(&self, seg_size: u64) -> Self {
        Self::segment(self.timeline, self.segno(seg_size) + 1, seg_size)
    }

    /// Where the file lives under the archive's `wal/` prefix: segments grouped by timeline
    /// and log (256 per group at 16 MiB), so that a listing of one group stays short.
    pub fn key(&self) -> String {
        match self.kind {
            Kind::History => format!("history/{}", self.name),
            _ => format!("{:08X}{:08X}/{}", self.timeline, self.log, self.name),
        }
    }
}

impl fmt::Display for WalName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

fn segs_per_log(seg_size: u64) -> u64 {
    0x1_0000_0000 / seg_size
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEG: u64 = 16 << 20;

    #[test]
    fn parses_every_kind() {
        let s = WalName::parse("0000000100000002000000FF").unwrap();
        assert_eq!(
            (s.kind(), s.timeline(), s.segno(SEG)),
            (Kind::Segment, 1, 0x2FF)
        );
        assert_eq!(s.next(SEG).as_str(), "000000010000000300000000");
        assert_eq!(s.key(), "0000000100000002/0000000100000002000000FF");
        let h = WalName::parse("0000000A.history").unwrap();
        assert_eq!((h.kind(), h.timeline()), (Kind::History, 10));
        assert_eq!(h.key(), "history/0000000A.history");
        let p = WalName::parse("000000010000000000000003.partial").unwrap();
        assert_eq!(p.kind(), Kind::Partial);
        let b = WalName::parse("000000010000000000000003.00000028.backup").unwrap();
        assert_eq!((b.kind(), b.segno(SEG)), (Kind::Backup, 3));
    }

    #[test]
    fn refuses_other_names() {
        for bad in [
            "",
            "RECOVERYXLOG",
            "00000001000000000000000",
            "00000001000000000000000G",
            "xyz.history",
            "000000010000000000000003.backup",
            "../000000010000000000000003",
        ] {
            assert!(WalName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn segment_numbers_round_trip() {
        for size in [1 << 20, 16 << 20, 1 << 30] {
            let n = WalName::segment(3, 12345, size);
            assert_eq!(WalName::parse(n.as_str()).unwrap().segno(size), 12345);
        }
    }
}

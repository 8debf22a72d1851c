//! Log sequence numbers, as PostgreSQL prints them (`16/B374D848`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A position in the WAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Lsn(pub u64);

impl Lsn {
    /// The number of the segment holding this position. `seg_size` must not be 0: a
    /// backup's record is taken only with a size PostgreSQL has
    /// ([`crate::record::PgBackup::impossible`]).
    pub fn segno(self, seg_size: u64) -> u64 {
        self.0 / seg_size
    }
}

impl FromStr for Lsn {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("'{s}' is not an LSN (like 0/16B3740)");
        let (hi, lo) = s.trim().split_once('/').ok_or_else(bad)?;
        let hi = u32::from_str_radix(hi, 16).map_err(|_| bad())?;
        let lo = u32::from_str_radix(lo, 16).map_err(|_| bad())?;
        Ok(Lsn((u64::from(hi) << 32) | u64::from(lo)))
    }
}

impl TryFrom<String> for Lsn {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<Lsn> for String {
    fn from(l: Lsn) -> String {
        l.to_string()
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let l: Lsn = "16/B374D848".parse().unwrap();
        assert_eq!(l.0, 0x16_B374_D848);
        assert_eq!(l.to_string(), "16/B374D848");
        assert_eq!(l.segno(16 << 20), 0x16_B374_D848 >> 24);
        assert!("16B374D848".parse::<Lsn>().is_err());
        assert!("x/1".parse::<Lsn>().is_err());
    }
}

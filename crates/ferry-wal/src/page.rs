//! The one part of PostgreSQL's WAL format ferry reads: the long page header that opens every
//! segment. It names the cluster (system identifier) and the segment's own position, so a push
//! can refuse a file from another cluster, or a recycled file under the wrong name, without a
//! database connection.

use ferry_transfer::{Error, Result};

use crate::name::{Kind, WalName};

/// `XLP_LONG_HEADER` in `xlp_info`: set on the first page of every segment.
const XLP_LONG_HEADER: u16 = 0x0002;
/// Bytes of `XLogLongPageHeaderData` ferry reads.
const LONG_HEADER_LEN: usize = 40;

/// What a segment's first page says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// `xlp_magic`: changes with PostgreSQL's WAL format (0xD110 for 15).
    pub magic: u16,
    /// The cluster's system identifier, fixed at initdb.
    pub system_id: u64,
    /// The cluster's WAL segment size.
    pub seg_size: u64,
}

/// Reads and checks the header of a segment or partial segment named `name`.
pub fn read(name: &WalName, data: &[u8]) -> Result<SegmentHeader> {
    let bad = |why: String| Error::Invalid(format!("{name}: {why}"));
    if data.len() < LONG_HEADER_LEN {
        return Err(bad(format!(
            "{} bytes is too short for a WAL segment",
            data.len()
        )));
    }
    let u16_at = |o: usize| u16::from_le_bytes(data[o..o + 2].try_into().expect("2 bytes"));
    let u32_at = |o: usize| u32::from_le_bytes(data[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(data[o..o + 8].try_into().expect("8 bytes"));
    if u16_at(2) & XLP_LONG_HEADER == 0 {
        return Err(bad("does not start with a WAL segment header".into()));
    }
    let seg_size = u64::from(u32_at(32));
    if !seg_size.is_power_of_two() || !(1 << 20..=1 << 30).contains(&seg_size) {
        return Err(bad(format!("header names segment size {seg_size}")));
    }
    // A recycled segment keeps its old content until overwritten: its page address is stale.
    let pageaddr = u64_at(8);
    if pageaddr != name.segno(seg_size) * seg_size {
        return Err(bad(format!(
            "content belongs to WAL position {pageaddr:X}, not to this segment"
        )));
    }
    // A .partial is a segment's prefix in a segment-sized file: larger is not one (and a
    // fetch, bounded by the segment size, would refuse it).
    if name.kind() == Kind::Partial && data.len() as u64 > seg_size {
        return Err(bad(format!(
            "{} bytes, more than the cluster's segments ({seg_size})",
            data.len()
        )));
    }
    if name.kind() == Kind::Segment && data.len() as u64 != seg_size {
        return Err(bad(format!(
            "{} bytes, but the cluster's segments are {seg_size}",
            data.len()
        )));
    }
    Ok(SegmentHeader {
        magic: u16_at(0),
        system_id: u64_at(24),
        seg_size,
    })
}

#[cfg(test)]
pub(crate) fn fake_segment(name: &WalName, system_id: u64, seg_size: u64) -> Vec<u8> {
    let mut d = vec![0u8; seg_size as usize];
    d[0..2].copy_from_slice(&0xD110u16.to_le_bytes());
    d[2..4].copy_from_slice(&XLP_LONG_HEADER.to_le_bytes());
    d[4..8].copy_from_slice(&name.timeline().to_le_bytes());
    d[8..16].copy_from_slice(&(name.segno(seg_size) * seg_size).to_le_bytes());
    d[24..32].copy_from_slice(&system_id.to_le_bytes());
    d[32..36].copy_from_slice(&(seg_size as u32).to_le_bytes());
    d[36..40].copy_from_slice(&8192u32.to_le_bytes());
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_identity_and_refuses_misfits() {
        let n = WalName::parse("000000010000000000000005").unwrap();
        let seg = fake_segment(&n, 42, 1 << 20);
        let h = read(&n, &seg).unwrap();
        assert_eq!((h.system_id, h.seg_size), (42, 1 << 20));
        let other = WalName::parse("000000010000000000000006").unwrap();
        assert!(
            read(&other, &seg).is_err(),
            "a segment under another's name"
        );
        assert!(read(&n, &seg[..1000]).is_err(), "a truncated segment");
        assert!(read(&n, &vec![0; 1 << 20]).is_err(), "zeros");
    }
}

//! PostgreSQL's data page checksums, verified as relation files are read for a backup.
//!
//! The algorithm is PostgreSQL's (`storage/checksum_impl.h`): the 8 KiB page is read as
//! 32 columns of little-endian 32-bit words, each column hashed FNV-1a-style from its own
//! base offset, two rounds of zeros mixed in, the 32 sums XORed together, then the block
//! number XORed in and the result reduced to 1..=65535 (0 means "no checksum").
//!
//! A page the server is writing while the backup reads it may be torn, and fail: as
//! pgBackRest does, a page whose LSN is at or after the backup's start is not judged, since
//! replay rewrites it from the full-page image in the WAL. New pages (all zeros) have no
//! checksum.

/// PostgreSQL's page size (the only one ferry backs up: `block_size` is checked).
pub const PAGE: usize = 8192;
/// Pages in one 1 GiB segment file of a relation (`RELSEG_SIZE`).
pub const SEGMENT_PAGES: u64 = 131_072;

const N_SUMS: usize = 32;
const FNV_PRIME: u32 = 16_777_619;
const BASE_OFFSETS: [u32; N_SUMS] = [
    0x5B1F36E9, 0xB8525960, 0x02AB50AA, 0x1DE66D2A, 0x79FF467A, 0x9BB9F8A3, 0x217E7CD2, 0x83E13D2C,
    0xF8D4474F, 0xE39EB970, 0x42C6AE16, 0x993216FA, 0x7B093B5D, 0x98DAFF3C, 0xF718902A, 0x0B1C9CDB,
    0xE58F764B, 0x187636BC, 0x5D7B3BB1, 0xE73DE7DE, 0x92BEC979, 0xCCA6C0B2, 0x304A0979, 0x85AA43D4,
    0x783125BB, 0x6CA8EAA2, 0xE407EAC6, 0x4B5CFC3E, 0x9FBF8C76, 0x15CA20BE, 0xF2CA9FD3, 0x959BD756,
];
/// Where `pd_checksum` sits in the page header.
const CHECKSUM_AT: usize = 8;

fn mix(sum: u32, value: u32) -> u32 {
    let t = sum ^ value;
    t.wrapping_mul(FNV_PRIME) ^ (t >> 17)
}

/// The checksum PostgreSQL stores in `page`, block `blkno` of its relation.
pub fn page_checksum(page: &[u8; PAGE], blkno: u64) -> u16 {
    let mut sums = BASE_OFFSETS;
    // Word i of the page goes to column i % 32, in page order.
    for (i, word) in page.chunks_exact(4).enumerate() {
        let mut w = [word[0], word[1], word[2], word[3]];
        if i * 4 == CHECKSUM_AT {
            // pd_checksum (the word's first two bytes) counts as zero.
            w[0] = 0;
            w[1] = 0;
        }
        sums[i % N_SUMS] = mix(sums[i % N_SUMS], u32::from_le_bytes(w));
    }
    for _ in 0..2 {
        for s in sums.iter_mut() {
            *s = mix(*s, 0);
        }
    }
    let folded = sums.iter().fold(0u32, |a, s| a ^ s) ^ blkno as u32;
    (folded % 65_535 + 1) as u16
}

/// What one page says about itself.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Its checksum matches.
    Good,
    /// Never written (all zeros), or written after the backup started: not judged.
    Unjudged,
    /// Its checksum does not match: damaged on disk.
    Bad,
}

/// Judges `page`, block `blkno` of its relation, for a backup that started at LSN `start`.
pub fn verify(page: &[u8; PAGE], blkno: u64, start: u64) -> Verdict {
    let hi = u32::from_le_bytes(page[0..4].try_into().expect("4 bytes"));
    let lo = u32::from_le_bytes(page[4..8].try_into().expect("4 bytes"));
    let lsn = (u64::from(hi) << 32) | u64::from(lo);
    if lsn >= start || page.iter().all(|b| *b == 0) {
        return Verdict::Unjudged;
    }
    let stored = u16::from_le_bytes([page[CHECKSUM_AT], page[CHECKSUM_AT + 1]]);
    if stored == page_checksum(page, blkno) {
        Verdict::Good
    } else {
        Verdict::Bad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checksum_changes_with_the_content_and_the_block_number_but_not_itself() {
        let mut page = [0u8; PAGE];
        for (i, b) in page.iter_mut().enumerate() {
            *b = (i * 7 % 251) as u8;
        }
        page[..8].copy_from_slice(&[0, 0, 0, 0, 1, 0, 0, 0]);
        let c = page_checksum(&page, 3);
        assert_ne!(c, 0);
        // The stored checksum is not part of what it covers.
        page[CHECKSUM_AT..CHECKSUM_AT + 2].copy_from_slice(&c.to_le_bytes());
        assert_eq!(page_checksum(&page, 3), c);
        assert_eq!(verify(&page, 3, u64::MAX), Verdict::Good);
        assert_eq!(verify(&page, 4, u64::MAX), Verdict::Bad);
        page[5000] ^= 1;
        assert_eq!(verify(&page, 3, u64::MAX), Verdict::Bad);
        // Written after the backup started: replay rewrites it.
        assert_eq!(verify(&page, 3, 1), Verdict::Unjudged);
        assert_eq!(verify(&[0u8; PAGE], 3, u64::MAX), Verdict::Unjudged);
    }
}

//! Block digests. MD5 in S3's ETag form: MD5 of the object when it is one block, else MD5 of
//! the blocks' MD5s followed by `-N`; S3 computes it itself, so comparing with the ETag proves
//! the store assembled exactly the blocks that were sent. BLAKE3 in the same shape, prefixed
//! `b3:`, where only ferry records it; SHA-256 in the same shape, prefixed `sha256:`, and
//! CRC-64/NVME of the whole object, `crc64:`, where S3 keeps them beside the ETag. A copy may
//! need two: one to check what it reads, the other to record what it writes.

use crc_fast::CrcAlgorithm::Crc64Nvme;
use ferry_store::DigestKind;
use md5::{Digest, Md5};
use sha2::Sha256;

/// Which hashes a transfer computes per block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Need {
    md5: bool,
    blake3: bool,
    sha256: bool,
    crc64: bool,
}

impl Need {
    /// The hashes for checking `expect`, if any, and for recording the `out` kind.
    pub fn for_copy(expect: Option<&str>, out: Option<DigestKind>) -> Need {
        let kinds = [expect.map(DigestKind::of), out];
        let has = |k| kinds.contains(&Some(k));
        Need {
            md5: has(DigestKind::Md5),
            blake3: has(DigestKind::Blake3),
            sha256: has(DigestKind::Sha256),
            crc64: has(DigestKind::Crc64),
        }
    }

    /// Whether any hash is computed at all.
    pub fn any(self) -> bool {
        self.md5 || self.blake3 || self.sha256 || self.crc64
    }
}

/// The hashes of one block that [`Need`] asked for, and its length (CRCs combine by it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockSum {
    md5: Option<[u8; 16]>,
    blake3: Option<[u8; 32]>,
    sha256: Option<[u8; 32]>,
    crc64: Option<u64>,
    len: u64,
}

/// Hashes one block.
pub fn block_sum(data: &[u8], need: Need) -> BlockSum {
    BlockSum {
        md5: need.md5.then(|| Md5::digest(data).into()),
        blake3: need.blake3.then(|| *blake3::hash(data).as_bytes()),
        sha256: need
            .sha256
            .then(|| <Sha256 as sha2::Digest>::digest(data).into()),
        crc64: need.crc64.then(|| crc_fast::checksum(Crc64Nvme, data)),
        len: data.len() as u64,
    }
}

/// The `kind` digest of an object written in one request (`single`) or from `blocks` in
/// order; None when those sums were not computed.
pub fn compose(kind: DigestKind, blocks: &[BlockSum], single: bool) -> Option<String> {
    match kind {
        DigestKind::Md5 => {
            let sums: Vec<_> = blocks.iter().map(|b| b.md5).collect::<Option<_>>()?;
            let empty = || Md5::digest(b"").into();
            let whole = |parts: &[u8]| Md5::digest(parts).into();
            Some(shaped("", &sums, single, empty, whole))
        }
        DigestKind::Blake3 => {
            let sums: Vec<_> = blocks.iter().map(|b| b.blake3).collect::<Option<_>>()?;
            let empty = || *blake3::hash(b"").as_bytes();
            let whole = |parts: &[u8]| *blake3::hash(parts).as_bytes();
            Some(shaped("b3:", &sums, single, empty, whole))
        }
        DigestKind::Sha256 => {
            let sums: Vec<_> = blocks.iter().map(|b| b.sha256).collect::<Option<_>>()?;
            let empty = || <Sha256 as sha2::Digest>::digest(b"").into();
            let whole = |parts: &[u8]| <Sha256 as sha2::Digest>::digest(parts).into();
            Some(shaped("sha256:", &sums, single, empty, whole))
        }
        DigestKind::Crc64 => {
            // Of the whole object, however it was cut: each block's CRC folded into the one
            // before by its length.
            let mut crc = crc_fast::checksum(Crc64Nvme, b"");
            for b in blocks {
                crc = crc_fast::checksum_combine(Crc64Nvme, crc, b.crc64?, b.len);
            }
            Some(format!("crc64:{crc:016x}"))
        }
    }
}

/// A digest in S3's shape: `prefix` and the hash of the one block (`single`; of nothing when
/// there is none), else the hash of the blocks' hashes in order followed by `-N`.
fn shaped<const N: usize>(
    prefix: &str, sums: &[[u8; N]], single: bool, empty: impl Fn() -> [u8; N],
    whole: impl Fn(&[u8]) -> [u8; N],
) -> String {
    if single {
        return format!(
            "{prefix}{}",
            hex(&sums.first().copied().unwrap_or_else(empty))
        );
    }
    let n = sums.len();
    format!("{prefix}{}-{n}", hex(&whole(&sums.concat())))
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: Need = Need {
        md5: true,
        blake3: true,
        sha256: true,
        crc64: true,
    };

    #[test]
    fn md5_matches_s3_etags() {
        assert_eq!(
            compose(DigestKind::Md5, &[], true).unwrap(),
            "d41d8cd98f00b204e9800998ecf8427e"
        );
        let parts = [block_sum(b"a", BOTH), block_sum(b"b", BOTH)];
        let mut cat = Vec::new();
        cat.extend_from_slice(&Md5::digest(b"a"));
        cat.extend_from_slice(&Md5::digest(b"b"));
        assert_eq!(
            compose(DigestKind::Md5, &parts, false).unwrap(),
            format!("{}-2", hex(&Md5::digest(&cat)))
        );
    }

    #[test]
    fn blake3_has_the_same_shape_and_says_so() {
        let one = compose(DigestKind::Blake3, &[block_sum(b"a", BOTH)], true).unwrap();
        assert_eq!(one, format!("b3:{}", blake3::hash(b"a").to_hex()));
        assert_eq!(DigestKind::of(&one), DigestKind::Blake3);
        let parts = [block_sum(b"a", BOTH), block_sum(b"b", BOTH)];
        let mut cat = Vec::new();
        cat.extend_from_slice(blake3::hash(b"a").as_bytes());
        cat.extend_from_slice(blake3::hash(b"b").as_bytes());
        let two = compose(DigestKind::Blake3, &parts, false).unwrap();
        assert_eq!(two, format!("b3:{}-2", blake3::hash(&cat).to_hex()));
        let md5 = compose(DigestKind::Md5, &parts, false).unwrap();
        assert_eq!(DigestKind::of(&md5), DigestKind::Md5);
    }

    #[test]
    fn sha256_has_s3s_composite_shape() {
        let sha = |d: &[u8]| <Sha256 as sha2::Digest>::digest(d);
        let one = compose(DigestKind::Sha256, &[block_sum(b"a", BOTH)], true).unwrap();
        assert_eq!(one, format!("sha256:{}", hex(&sha(b"a"))));
        assert_eq!(DigestKind::of(&one), DigestKind::Sha256);
        let parts = [block_sum(b"a", BOTH), block_sum(b"b", BOTH)];
        let cat = [sha(b"a").to_vec(), sha(b"b").to_vec()].concat();
        let two = compose(DigestKind::Sha256, &parts, false).unwrap();
        assert_eq!(two, format!("sha256:{}-2", hex(&sha(&cat))));
    }

    /// CRC-64/NVME's check value, and the same digest whatever blocks the data is cut in:
    /// a reader need not know how the object was uploaded.
    #[test]
    fn crc64_is_of_the_whole_however_it_is_cut() {
        let want = "crc64:ae8b14860a799888";
        let data = b"123456789";
        for cut in [vec![9], vec![1, 8], vec![4, 4, 1], vec![0, 3, 6]] {
            let mut at = 0;
            let sums: Vec<_> = cut
                .iter()
                .map(|&n| {
                    let s = block_sum(&data[at..at + n], BOTH);
                    at += n;
                    s
                })
                .collect();
            assert_eq!(
                compose(DigestKind::Crc64, &sums, cut.len() == 1).unwrap(),
                want
            );
        }
        assert_eq!(
            compose(DigestKind::Crc64, &[], true).unwrap(),
            "crc64:0000000000000000"
        );
        assert_eq!(DigestKind::of(want), DigestKind::Crc64);
        assert!(DigestKind::Crc64.any_blocks() && !DigestKind::Sha256.any_blocks());
    }

    #[test]
    fn only_what_is_needed_is_computed() {
        let need = Need::for_copy(None, Some(DigestKind::Blake3));
        let sum = block_sum(b"a", need);
        assert!(compose(DigestKind::Blake3, &[sum], true).is_some());
        assert!(compose(DigestKind::Md5, &[sum], true).is_none());
        assert!(!Need::for_copy(None, None).any());
        let need = Need::for_copy(Some("abc-2"), Some(DigestKind::Blake3));
        assert!(need.md5 && need.blake3 && !need.sha256 && !need.crc64);
        let need = Need::for_copy(Some("crc64:00"), Some(DigestKind::Sha256));
        assert!(!need.md5 && !need.blake3 && need.sha256 && need.crc64);
    }
}

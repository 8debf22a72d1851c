//! Block digests. MD5 in S3's ETag form: MD5 of the object when it is one block, else MD5 of
//! the blocks' MD5s followed by `-N`; S3 computes it itself, so comparing with the ETag proves
//! the store assembled exactly the blocks that were sent. BLAKE3 in the same shape, prefixed
//! `b3:`, where only ferry records it. A copy may need both: one to check what it reads, the
//! other to record what it writes.

use ferry_store::DigestKind;
use md5::{Digest, Md5};

/// Which hashes a transfer computes per block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Need {
    md5: bool,
    blake3: bool,
}

impl Need {
    /// The hashes for checking `expect`, if any, and for recording the `out` kind.
    pub fn for_copy(expect: Option<&str>, out: Option<DigestKind>) -> Need {
        let kinds = [expect.map(DigestKind::of), out];
        let has = |k| kinds.contains(&Some(k));
        Need {
            md5: has(DigestKind::Md5),
            blake3: has(DigestKind::Blake3),
        }
    }

    /// Whether any hash is computed at all.
    pub fn any(self) -> bool {
        self.md5 || self.blake3
    }
}

/// The hashes of one block that [`Need`] asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockSum {
    md5: Option<[u8; 16]>,
    blake3: Option<[u8; 32]>,
}

/// Hashes one block.
pub fn block_sum(data: &[u8], need: Need) -> BlockSum {
    BlockSum {
        md5: need.md5.then(|| Md5::digest(data).into()),
        blake3: need.blake3.then(|| *blake3::hash(data).as_bytes()),
    }
}

/// The `kind` digest of an object written in one request (`single`) or from `blocks` in
/// order; None when those sums were not computed.
pub fn compose(kind: DigestKind, blocks: &[BlockSum], single: bool) -> Option<String> {
    match kind {
        DigestKind::Md5 => {
            let sums: Option<Vec<_>> = blocks.iter().map(|b| b.md5).collect();
            let sums = sums?;
            if single {
                let one = sums.first().copied();
                return Some(hex(&one.unwrap_or_else(|| Md5::digest(b"").into())));
            }
            let mut h = Md5::new();
            sums.iter().for_each(|s| h.update(s));
            Some(format!("{}-{}", hex(&h.finalize()), sums.len()))
        }
        DigestKind::Blake3 => {
            let sums: Option<Vec<_>> = blocks.iter().map(|b| b.blake3).collect();
            let sums = sums?;
            if single {
                let one = sums.first().copied();
                return Some(format!(
                    "b3:{}",
                    hex(&one.unwrap_or_else(|| *blake3::hash(b"").as_bytes()))
                ));
            }
            let mut h = blake3::Hasher::new();
            sums.iter().for_each(|s| {
                h.update(s);
            });
            Some(format!(
                "b3:{}-{}",
                hex(h.finalize().as_bytes()),
                sums.len()
            ))
        }
    }
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
    fn only_what_is_needed_is_computed() {
        let need = Need::for_copy(None, Some(DigestKind::Blake3));
        let sum = block_sum(b"a", need);
        assert!(compose(DigestKind::Blake3, &[sum], true).is_some());
        assert!(compose(DigestKind::Md5, &[sum], true).is_none());
        assert!(!Need::for_copy(None, None).any());
        let need = Need::for_copy(Some("abc-2"), Some(DigestKind::Blake3));
        assert_eq!(need, BOTH);
    }
}

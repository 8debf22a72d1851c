//! The block digest: S3's ETag form, MD5 of the object when it is one block, else MD5 of the
//! blocks' MD5s followed by `-N`. S3 computes it itself, so comparing with the ETag proves the
//! store assembled exactly the blocks that were sent; ferry records it where a store does not.

use md5::{Digest, Md5};

/// MD5 of one block.
pub fn block_md5(data: &[u8]) -> [u8; 16] {
    Md5::digest(data).into()
}

/// The digest of an object written in one request (`single`) or from `blocks` in order.
pub fn compose(blocks: &[[u8; 16]], single: bool) -> String {
    if single {
        return hex(blocks.first().copied().unwrap_or_else(|| block_md5(b"")));
    }
    let mut h = Md5::new();
    for b in blocks {
        h.update(b);
    }
    format!("{}-{}", hex(h.finalize().into()), blocks.len())
}

fn hex(d: [u8; 16]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_s3_etags() {
        assert_eq!(compose(&[], true), "d41d8cd98f00b204e9800998ecf8427e");
        let parts = [block_md5(b"a"), block_md5(b"b")];
        let mut cat = Vec::new();
        cat.extend_from_slice(&parts[0]);
        cat.extend_from_slice(&parts[1]);
        assert_eq!(
            compose(&parts, false),
            format!("{}-2", hex(block_md5(&cat)))
        );
    }
}

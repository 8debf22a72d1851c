//! What S3 confirms of each part of a multipart upload. `object_store` hands a part's receipt
//! back as its `PartId`: with a checksum configured (ferry sends SHA-256) an XML record of the
//! part's ETag and of the checksum S3 answered with, which S3 gives only after checking the
//! part's bytes against the one sent. A part so confirmed needs no hash of ferry's; one
//! without (a store that ignores `x-amz-checksum-*`) is checked by its ETag, the MD5 of what
//! the store received, as every part was before: MD5 was half of an upload's CPU.

use base64::prelude::{Engine as _, BASE64_STANDARD};
use md5::{Digest, Md5};

use crate::{Error, Result};

/// One part's receipt.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Receipt {
    /// The part's ETag, quotes removed.
    pub etag: String,
    /// S3 answered with the part's checksum: it checked the bytes.
    pub confirmed: bool,
}

/// Reads a part's receipt: `object_store`'s XML record, or an ETag alone (no checksum
/// configured). Only the store's answer is in it, so nothing here is trusted beyond a
/// comparison.
pub(super) fn read(content_id: &str) -> Receipt {
    let field = |name: &str| {
        let open = format!("<{name}>");
        let start = content_id.find(&open)? + open.len();
        let len = content_id[start..].find(&format!("</{name}>"))?;
        Some(unescape(&content_id[start..start + len]))
    };
    match content_id.starts_with('<') {
        true => Receipt {
            etag: field("e_tag").unwrap_or_default().trim_matches('"').into(),
            confirmed: field("checksum_sha256").is_some_and(|c| is_sha256(&c)),
        },
        false => Receipt {
            etag: content_id.trim_matches('"').into(),
            confirmed: false,
        },
    }
}

/// True for a SHA-256 as S3 answers one (base64 of 32 bytes): the algorithm ferry sends. S3
/// refuses a part whose bytes do not match the checksum sent with it, and answers the
/// checksum only for a part it took; anything else in its place (another algorithm, a
/// value of another length, an empty one) confirms nothing, and the part's ETag is checked.
fn is_sha256(b64: &str) -> bool {
    BASE64_STANDARD.decode(b64).is_ok_and(|raw| raw.len() == 32)
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Checks part `idx` of `key` as the store received it: confirmed by its checksum, or its
/// ETag equal to the MD5 of `data` where ETags are MD5s (`md5_etags`).
pub(super) async fn check(
    key: &str, idx: usize, receipt: &Receipt, data: bytes::Bytes, md5_etags: bool,
) -> Result<()> {
    if receipt.confirmed || !md5_etags {
        return Ok(());
    }
    let sum = tokio::task::spawn_blocking(move || hex::encode(Md5::digest(&data)))
        .await
        .map_err(|e| Error::Permanent(format!("hash task: {e}")))?;
    match sum == receipt.etag.to_ascii_lowercase() {
        true => Ok(()),
        false => Err(Error::Checksum(format!(
            "{key} part {}: the store received data with ETag {:?}, ferry sent MD5 {sum} (a \
             bucket encrypting with KMS by default answers other ETags: --sse aws:kms)",
            idx + 1,
            receipt.etag.escape_debug().take(80).collect::<String>()
        ))),
    }
}

/// The ETag S3 gives an object assembled from these parts (the MD5 of their MD5s, `-N`), or
/// None when a part's ETag is no MD5.
pub(super) fn assembled(receipts: &[Receipt]) -> Option<String> {
    let mut h = Md5::new();
    for r in receipts {
        let raw: [u8; 16] = hex::decode(&r.etag).ok()?.try_into().ok()?;
        h.update(raw);
    }
    Some(format!("{}-{}", hex::encode(h.finalize()), receipts.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_are_read_with_or_without_a_checksum() {
        // As MinIO's answer to a 5 MiB part of 7s came back through object_store 0.14.
        let minio = "<PartMetadata><e_tag>\"242c0407347ba6c65f5b476da66df47c\"</e_tag>\
            <checksum_sha256>4pJf3RfIPHfppPlX/RcLKnK0isVZaJQ9z5YvK4U8iKk=</checksum_sha256>\
            </PartMetadata>";
        let r = read(minio);
        assert_eq!(r.etag, "242c0407347ba6c65f5b476da66df47c");
        assert!(r.confirmed);
        let r = read("<PartMetadata><e_tag>&quot;0cc175b9c0f1b6a831c399e269772661&quot;</e_tag><checksum_sha256>ypeBEsobvcr6wjGzmiPcTaeG7/gUfE5yuYB3ha/uSLs=</checksum_sha256></PartMetadata>");
        assert_eq!(r.etag, "0cc175b9c0f1b6a831c399e269772661");
        assert!(r.confirmed);
        let r = read("<PartMetadata><e_tag>\"abc\"</e_tag></PartMetadata>");
        assert_eq!((r.etag.as_str(), r.confirmed), ("abc", false));
        let r = read("\"0cc175b9c0f1b6a831c399e269772661\"");
        assert_eq!(
            (r.etag.as_str(), r.confirmed),
            ("0cc175b9c0f1b6a831c399e269772661", false)
        );
        assert!(
            !read("<PartMetadata><e_tag>x</e_tag><checksum_sha256></checksum_sha256>").confirmed
        );
        // Hostile answers: a value that is no SHA-256, or another algorithm's.
        for forged in [
            "<checksum_sha256>x</checksum_sha256>",
            "<checksum_sha256>AAAA</checksum_sha256>",
            "<checksum_crc64nvme>AAAAAAAAAAA=</checksum_crc64nvme>",
        ] {
            let r = read(&format!(
                "<PartMetadata><e_tag>\"abc\"</e_tag>{forged}</PartMetadata>"
            ));
            assert!(!r.confirmed, "{forged}");
        }
    }

    #[tokio::test]
    async fn an_unconfirmed_part_is_checked_by_its_etag() {
        let a = bytes::Bytes::from_static(b"a");
        let good = read("\"0CC175B9C0F1B6A831C399E269772661\"");
        assert!(check("k", 0, &good, a.clone(), true).await.is_ok());
        let bad = read("\"00000000000000000000000000000000\"");
        let e = check("k", 2, &bad, a.clone(), true).await.unwrap_err();
        assert!(
            matches!(&e, Error::Checksum(m) if m.contains("part 3")),
            "{e}"
        );
        // Confirmed by its checksum, or ETags that are no MD5s (SSE): nothing to hash.
        let confirmed = Receipt {
            etag: "0".repeat(32),
            confirmed: true,
        };
        assert!(check("k", 0, &confirmed, a.clone(), true).await.is_ok());
        assert!(check("k", 0, &bad, a, false).await.is_ok());
    }

    #[test]
    fn the_assembled_etag_is_the_md5_of_the_parts_md5s() {
        let parts = [
            read("\"0cc175b9c0f1b6a831c399e269772661\""),
            read("\"92eb5ffee6ae2fec3ad71c777531578f\""),
        ];
        let mut cat = Vec::new();
        cat.extend_from_slice(&Md5::digest(b"a"));
        cat.extend_from_slice(&Md5::digest(b"b"));
        assert_eq!(
            assembled(&parts).unwrap(),
            format!("{}-2", hex::encode(Md5::digest(&cat)))
        );
        assert_eq!(assembled(&[read("\"zz\"")]), None);
        assert_eq!(assembled(&[read(&format!("\"{}\"", "g".repeat(32)))]), None);
        assert_eq!(
            assembled(&[read(&format!("\"{}é\"", "0".repeat(29)))]),
            None
        );
    }
}

//! What a copy asks of a remote store: the requests before its blocks, and the pieces its
//! blocks come in. A memory store seen as remote logs every read.

use std::sync::Arc;

use bytes::Bytes;
use ferry_store::memory::MemoryStore;
use ferry_store::{DigestKind, Error, Meta, Store};
use ferry_transfer::{Class, Described, Engine, EngineConfig, NoProgress, Remote, SharedStore};

const MIB: u64 = 1 << 20;

/// A remote store holding `obj` (64 MiB), and [`engine_over`] it with 4 MiB blocks: 16
/// blocks, two waves.
async fn setup() -> (Arc<MemoryStore>, Arc<MemoryStore>, Remote, Remote, Bytes) {
    let body = pattern(64 * MIB, 31);
    let src = Arc::new(MemoryStore::new().remote());
    src.put("obj", body.clone(), &Meta::new()).await.unwrap();
    let (dst, s, d) = engine_over(&src, 4 * MIB);
    (src, dst, s, d, body)
}

/// A local store, and an engine with 8 requests in flight and `block`-sized blocks seen
/// through remotes of `src` and of the local store.
fn engine_over(src: &Arc<MemoryStore>, block: u64) -> (Arc<MemoryStore>, Remote, Remote) {
    let dst = Arc::new(MemoryStore::new());
    let engine = Engine::new(EngineConfig {
        concurrency: Some(8),
        block_size: Some(block),
        ..Default::default()
    });
    let s = engine.remote(src.clone() as SharedStore, Class::Bulk);
    let d = engine.remote(dst.clone() as SharedStore, Class::Bulk);
    (dst, s, d)
}

fn pattern(size: u64, k: usize) -> Bytes {
    (0..size as usize)
        .map(|i| (i * k % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// The ranges read, sorted, checked to cover bytes `from..size` once each.
fn ranges(reads: &[String], from: u64, size: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = reads
        .iter()
        .filter_map(|r| r.strip_prefix("get_range obj "))
        .map(|r| {
            let (a, b) = r.split_once("..").unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    out.sort();
    let mut at = from;
    for &(a, b) in &out {
        assert_eq!(a, at, "ranges leave a gap or overlap: {out:?}");
        at = b;
    }
    assert_eq!(at, size, "ranges stop short: {out:?}");
    out
}

#[tokio::test]
async fn a_described_object_is_not_asked_again_and_its_last_wave_comes_in_quarters() {
    let (src, dst, s, d, body) = setup().await;
    let obj = s.describe("obj").await.unwrap();
    s.copy_described_to(&obj, &d, "copy", &NoProgress)
        .await
        .unwrap();
    assert_eq!(dst.bytes("copy").unwrap(), body);

    let reads = src.reads();
    let asked: Vec<_> = reads.iter().filter(|r| r.starts_with("head")).collect();
    assert_eq!(asked, ["head obj"], "only the caller's HEAD: {reads:?}");
    let r = ranges(&reads, 0, 64 * MIB);
    // Blocks 0-7 start while 8 more wait: whole. Blocks 8-15 are the last wave: quarters.
    for &(a, b) in &r {
        let want = if a < 32 * MIB { 4 * MIB } else { MIB };
        assert_eq!(b - a, want, "range {a}..{b} in {r:?}");
    }
}

#[tokio::test]
async fn an_undescribed_object_is_described_with_its_first_bytes_in_one_request() {
    let (src, dst, s, d, body) = setup().await;
    s.copy_to("obj", &d, "copy", &NoProgress).await.unwrap();
    assert_eq!(dst.bytes("copy").unwrap(), body);

    let reads = src.reads();
    assert!(
        reads[0].starts_with("head_and_read obj "),
        "first read: {reads:?}"
    );
    let asked = reads.iter().filter(|r| r.starts_with("head")).count();
    assert_eq!(asked, 1, "described twice: {reads:?}");
    // Then only what the first bytes did not hold: the rest of block 0, the other blocks.
    let first: u64 = reads[0].rsplit("..").next().unwrap().parse().unwrap();
    assert!(first > 0 && first < 4 * MIB, "{reads:?}");
    ranges(&reads[1..], first, 64 * MIB);
}

#[tokio::test]
async fn uneven_pieces_are_checked_and_an_object_changed_after_its_description_is_refused() {
    // 13 blocks of 5 MiB, the last 4 MiB and 5 bytes: its quarters are uneven. The store
    // vouches for the digest ferry recorded, so every copy is checked against it.
    let size = 64 * MIB + 5;
    let body = pattern(size, 7);
    let src = Arc::new(MemoryStore::recording(DigestKind::Blake3).remote());
    let (dst, s, d) = engine_over(&src, 5 * MIB);
    s.upload_bytes(body.clone(), "obj", None).await.unwrap();

    let obj = s.describe("obj").await.unwrap();
    s.copy_described_to(&obj, &d, "copy", &NoProgress)
        .await
        .unwrap();
    assert_eq!(dst.bytes("copy").unwrap(), body);
    assert_eq!(s.report().verified, 1, "the copy was not checked");
    let reads = src.reads();
    let r = ranges(&reads, 0, size);
    assert!(r.contains(&(60 * MIB, 61 * MIB + 2)), "{r:?}");
    assert!(r.contains(&(63 * MIB + 6, size)), "{r:?}");

    // Written again between its description and the copy: the bytes read are the new
    // object's, the digest the old one's. Refused, and nothing appears.
    let obj = s.describe("obj").await.unwrap();
    s.upload_bytes(pattern(size, 9), "obj", None).await.unwrap();
    refused_as_damaged(&s, &obj, &d, &dst, "copy2").await;
}

/// Copying `obj` to `key` fails its checksum and leaves nothing at `key`.
async fn refused_as_damaged(s: &Remote, obj: &Described, d: &Remote, dst: &MemoryStore, key: &str) {
    let err = s
        .copy_described_to(obj, d, key, &NoProgress)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Checksum(_)), "{err}");
    assert!(dst.bytes(key).is_none());
}

/// Copies `obj` of `src` read in `block`-sized blocks, checks the copy holds `body`, and
/// returns how many reads were checked against a digest.
async fn copied_in(src: &Arc<MemoryStore>, block: u64, body: &Bytes) -> u64 {
    let (dst, s, d) = engine_over(src, block);
    let obj = s.describe("obj").await.unwrap();
    s.copy_described_to(&obj, &d, "copy", &NoProgress)
        .await
        .unwrap();
    assert_eq!(dst.bytes("copy").unwrap(), *body);
    s.report().verified
}

/// Hostile input: a store that answers a checksum the reader cannot use (a SHA-256 of parts,
/// `-1`, for an object read in one block) beside a digest it can. The usable one is checked:
/// the other must not hide it, and a damaged byte is refused.
#[tokio::test]
async fn a_checksum_the_reader_cannot_use_does_not_hide_the_digest() {
    let body = pattern(MIB, 3);
    let src = Arc::new(MemoryStore::recording(DigestKind::Md5).remote());
    let (_, s, _) = engine_over(&src, 5 * MIB);
    s.upload_bytes(body.clone(), "obj", None).await.unwrap();
    src.claim_checksum(Some(format!("sha256:{}-1", "0".repeat(64))));
    assert_eq!(copied_in(&src, 4 * MIB, &body).await, 1);
    assert!(src.tamper("obj", |d| d[1000] ^= 1));
    let (dst, s, d) = engine_over(&src, 4 * MIB);
    let obj = s.describe("obj").await.unwrap();
    refused_as_damaged(&s, &obj, &d, &dst, "copy").await;
}

/// A whole-object CRC (S3's CRC-64/NVME) is checked whatever blocks the object is read in,
/// where a per-block digest is checked only in the blocks it was written in; and one damaged
/// byte is refused.
#[tokio::test]
async fn a_whole_object_crc_is_checked_in_any_blocks() {
    let size = 21 * MIB + 3;
    let body = pattern(size, 5);
    for (kind, checked_in_other_blocks) in [(DigestKind::Crc64, 1), (DigestKind::Sha256, 0)] {
        let src = Arc::new(MemoryStore::recording(kind).remote());
        let (_, s, _) = engine_over(&src, 5 * MIB);
        s.upload_bytes(body.clone(), "obj", None).await.unwrap();
        // Read in 4 MiB blocks, not the 5 MiB it was written in.
        let verified = copied_in(&src, 4 * MIB, &body).await;
        assert_eq!(verified, checked_in_other_blocks, "{kind:?}");
    }
    let src = Arc::new(MemoryStore::recording(DigestKind::Crc64).remote());
    let (_, s, _) = engine_over(&src, 5 * MIB);
    s.upload_bytes(body.clone(), "obj", None).await.unwrap();
    assert!(src.tamper("obj", |d| d[17 * MIB as usize] ^= 1));
    let (dst, s, d) = engine_over(&src, 4 * MIB);
    let obj = s.describe("obj").await.unwrap();
    refused_as_damaged(&s, &obj, &d, &dst, "copy").await;
}

//! The WAL archive's logic on an in-memory store: push and fetch, the answers to a push of
//! a file already archived, listing, status, and what an encrypted archive refuses.

use std::sync::Arc;

use bytes::Bytes;
use ferry_store::memory::MemoryStore;
use ferry_store::{Meta, Store};
use ferry_transfer::{Class, Engine, EngineConfig, Error};
use ferry_wal::envelope::{self, Cipher};
use ferry_wal::{Archive, Cluster, Gap, Kind, Pushed, WalKey, WalName};

/// The smallest segment size PostgreSQL allows: the tests move little.
const SEG: u64 = 1 << 20;
const SYSTEM_ID: u64 = 7_301_234_567_890_123_456;
/// The archive's prefix in the store.
const ROOT: &str = "pg1";

fn archive(store: &Arc<MemoryStore>, key: Option<WalKey>) -> Arc<Archive> {
    let store: Arc<dyn Store> = store.clone();
    let remote = Engine::new(EngineConfig::default()).remote(store, Class::Bulk);
    Archive::with_key(remote, ROOT, 3, key)
}

fn name(s: &str) -> WalName {
    WalName::parse(s).unwrap()
}

/// A WAL segment as PostgreSQL writes it: the long page header naming the cluster and the
/// segment's position (what `page::read` checks), then records; `fill` varies the content.
fn segment(n: &WalName, system_id: u64, fill: u8) -> Vec<u8> {
    let mut d = vec![0u8; SEG as usize];
    d[0..2].copy_from_slice(&0xD110u16.to_le_bytes()); // xlp_magic, PostgreSQL 15
    d[2..4].copy_from_slice(&0x0002u16.to_le_bytes()); // XLP_LONG_HEADER
    d[4..8].copy_from_slice(&n.timeline().to_le_bytes());
    d[8..16].copy_from_slice(&(n.segno(SEG) * SEG).to_le_bytes()); // xlp_pageaddr
    d[24..32].copy_from_slice(&system_id.to_le_bytes());
    d[32..36].copy_from_slice(&(SEG as u32).to_le_bytes());
    d[36..40].copy_from_slice(&8192u32.to_le_bytes());
    // Records in the first pages, zeros after, as in a segment switched early.
    for (i, b) in d[40..200_000].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(fill);
    }
    d
}

fn object_key(n: &WalName) -> String {
    format!("{ROOT}/wal/{}", n.key())
}

fn key(b: u8) -> WalKey {
    WalKey::from_secret(&[b; 32])
}

#[tokio::test]
async fn push_then_fetch_round_trips() {
    let store = Arc::new(MemoryStore::new());
    let a = archive(&store, None);
    assert_eq!(a.cluster().await.unwrap(), None);
    let n = name("000000010000000000000003");
    let seg = segment(&n, SYSTEM_ID, 1);
    let pushed = a.push(&n, seg.clone()).await.unwrap();
    let Pushed::Stored { header, bytes } = &pushed else {
        panic!("{pushed:?}")
    };
    assert_eq!(header.len, SEG);
    assert_eq!(header.cipher, Cipher::None);
    // Compressed where PostgreSQL's layout says: timeline and log, then the name.
    let stored = store
        .bytes(&format!(
            "{ROOT}/wal/0000000100000000/000000010000000000000003"
        ))
        .expect("stored under its timeline and log");
    assert_eq!(stored.len() as u64, *bytes);
    assert!(*bytes < SEG / 2, "compressed: {bytes}");
    assert_eq!(a.fetch(&n).await.unwrap(), seg);
    assert!(a.peek(&n).await.unwrap().same_content(header));

    // The first push claimed the archive for its cluster.
    let claimed = Cluster {
        format: 1,
        system_id: SYSTEM_ID.to_string(),
        seg_size: SEG,
    };
    assert_eq!(a.cluster().await.unwrap(), Some(claimed.clone()));
    let fresh = archive(&store, None);
    assert_eq!(fresh.cluster().await.unwrap(), Some(claimed));

    // Files that are not segments carry no page header, and round trip as they are.
    let h = name("00000002.history");
    let body = b"1\t0/3000000\tno recovery target specified\n".to_vec();
    a.push(&h, body.clone()).await.unwrap();
    assert_eq!(a.fetch(&h).await.unwrap(), body);

    let missing = a.fetch(&name("000000010000000000000009")).await;
    assert!(matches!(missing, Err(Error::NotFound(_))), "{missing:?}");
    let missing = a.peek(&name("000000010000000000000009")).await;
    assert!(matches!(missing, Err(Error::NotFound(_))), "{missing:?}");
}

#[tokio::test]
async fn a_second_push_is_already_archived_or_refused() {
    let store = Arc::new(MemoryStore::new());
    let a = archive(&store, None);
    let n = name("000000010000000000000004");
    let seg = segment(&n, SYSTEM_ID, 1);
    let first = a.push(&n, seg.clone()).await.unwrap();
    let etag = store.head(&object_key(&n)).await.unwrap().etag;

    // The same content again (PostgreSQL retrying after a lost ack): success, nothing written.
    let again = a.push(&n, seg.clone()).await.unwrap();
    assert_eq!(again, Pushed::AlreadyArchived(first.header().clone()));
    assert_eq!(store.head(&object_key(&n)).await.unwrap().etag, etag);

    // Other content under the same name: refused, and the archived copy kept.
    let other = segment(&n, SYSTEM_ID, 2);
    let refused = a.push(&n, other).await;
    assert!(
        matches!(&refused, Err(Error::AlreadyExists(m)) if m.contains("different content")),
        "{refused:?}"
    );
    assert_eq!(store.head(&object_key(&n)).await.unwrap().etag, etag);
    assert_eq!(a.fetch(&n).await.unwrap(), seg);

    // A segment of another cluster, or one recycled under the wrong name: refused, nothing
    // stored.
    let n5 = name("000000010000000000000005");
    let foreign = a.push(&n5, segment(&n5, SYSTEM_ID + 1, 1)).await;
    assert!(
        matches!(&foreign, Err(Error::Invalid(m)) if m.contains("belongs to PostgreSQL cluster")),
        "{foreign:?}"
    );
    let recycled = a.push(&n5, segment(&n, SYSTEM_ID, 1)).await;
    assert!(matches!(recycled, Err(Error::Invalid(_))), "{recycled:?}");
    let short = a
        .push(&n5, segment(&n5, SYSTEM_ID, 1)[..4096].to_vec())
        .await;
    assert!(matches!(short, Err(Error::Invalid(_))), "{short:?}");
    assert!(store.bytes(&object_key(&n5)).is_none());

    // A damaged archived copy (its header cut short) is replaced by a good push.
    assert!(store.tamper(&object_key(&n), |d| d.truncate(20)));
    assert!(matches!(a.peek(&n).await, Err(Error::Checksum(_))));
    let fixed = a.push(&n, seg.clone()).await.unwrap();
    assert!(matches!(fixed, Pushed::Stored { .. }), "{fixed:?}");
    assert_eq!(a.fetch(&n).await.unwrap(), seg);

    // So is one whose header is intact but whose body is not: a push that answered "already
    // archived" here would let PostgreSQL recycle the only good copy.
    assert!(store.tamper(&object_key(&n), |d| {
        let last = d.len() - 1;
        d[last] ^= 0x01;
    }));
    assert!(a.peek(&n).await.is_ok(), "the header still reads");
    assert!(matches!(a.fetch(&n).await, Err(Error::Checksum(_))));
    let fixed = a.push(&n, seg.clone()).await.unwrap();
    assert!(matches!(fixed, Pushed::Stored { .. }), "{fixed:?}");
    assert_eq!(a.fetch(&n).await.unwrap(), seg);
}

/// A segment whose records are bytes zstd cannot shrink: sealed, it is more than one block,
/// and its upload is started before the archive has said whether it holds the name.
fn incompressible(n: &WalName, fill: u8) -> Vec<u8> {
    let mut d = segment(n, SYSTEM_ID, fill);
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(fill);
    for b in d[40..].iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    d
}

#[tokio::test]
async fn a_push_that_stores_nothing_leaves_no_upload_behind() {
    let store = Arc::new(MemoryStore::new());
    let a = archive(&store, None);
    let n = name("000000010000000000000004");
    let seg = incompressible(&n, 1);
    let first = a.push(&n, seg.clone()).await.unwrap();
    assert!(
        matches!(first, Pushed::Stored { bytes, .. } if bytes > SEG),
        "not more than a block: {first:?}"
    );
    assert_eq!(store.open_uploads(), 0);
    // Again (PostgreSQL retrying after a lost ack): the upload started meanwhile is aborted.
    let again = a.push(&n, seg.clone()).await.unwrap();
    assert!(matches!(again, Pushed::AlreadyArchived(_)), "{again:?}");
    assert_eq!(store.open_uploads(), 0);
    // Other content under the name: refused, and so is its upload.
    let refused = a.push(&n, incompressible(&n, 2)).await;
    assert!(
        matches!(refused, Err(Error::AlreadyExists(_))),
        "{refused:?}"
    );
    assert_eq!(store.open_uploads(), 0);
    assert_eq!(a.fetch(&n).await.unwrap(), seg);
    // Another cluster's segment: refused before any upload starts.
    let n5 = name("000000010000000000000005");
    let mut foreign = incompressible(&n5, 3);
    foreign[24..32].copy_from_slice(&(SYSTEM_ID + 1).to_le_bytes());
    let refused = a.push(&n5, foreign).await;
    assert!(matches!(refused, Err(Error::Invalid(_))), "{refused:?}");
    assert_eq!(store.open_uploads(), 0);
    assert!(store.bytes(&object_key(&n5)).is_none());
}

#[tokio::test]
async fn list_is_in_key_order_and_status_counts_it() {
    let store = Arc::new(MemoryStore::new());
    let a = archive(&store, None);
    let on = |tli: u32, segno: u64| WalName::segment(tli, segno, SEG);
    // Pushed out of order, on two timelines, with a hole at segment 4 of timeline 1.
    for n in [on(1, 5), on(1, 2), on(2, 6), on(1, 3), on(1, 4096)] {
        a.push(&n, segment(&n, SYSTEM_ID, 0)).await.unwrap();
    }
    for extra in [
        "00000002.history",
        "000000010000000000000003.00000028.backup",
    ] {
        a.push(&name(extra), b"label".to_vec()).await.unwrap();
    }
    let gap = Gap {
        name: on(1, 4).to_string(),
        reason: "queue over its limit".into(),
        unix_time: 1_700_000_000,
    };
    a.record_gap(&gap).await.unwrap();

    let listed = a.list().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "000000010000000000000002",
            "000000010000000000000003",
            "000000010000000000000003.00000028.backup",
            "000000010000000000000005",
            "000000010000000100000000",
            "000000020000000000000006",
            "00000002.history",
        ],
        "sorted by key; cluster.json and the gap record are not WAL"
    );
    for (n, info) in &listed {
        assert_eq!(info.key, object_key(n));
        assert_eq!(
            Some(info.size),
            store.bytes(&info.key).map(|b| b.len() as u64)
        );
    }
    assert_eq!(a.gaps().await.unwrap(), [gap]);

    let st = ferry_wal::status::status(&a, None, false).await.unwrap();
    assert_eq!(st.system_id, Some(SYSTEM_ID.to_string()));
    assert_eq!(st.files, 7);
    let tl: Vec<_> = st
        .timelines
        .iter()
        .map(|t| (t.timeline, t.first.as_str(), t.last.as_str(), t.segments))
        .collect();
    assert_eq!(
        tl,
        [
            (1, "000000010000000000000002", "000000010000000100000000", 4),
            (2, "000000020000000000000006", "000000020000000000000006", 1),
        ]
    );
    // The hole at 4, and the one from 6 to the end of log 0 (at 1 MiB, a log holds 4096
    // segments: 4096 is log 1's first).
    assert_eq!(
        st.timelines[0].missing,
        [
            (
                "000000010000000000000004".to_string(),
                "000000010000000000000004".to_string()
            ),
            (
                "000000010000000000000006".to_string(),
                "000000010000000000000FFF".to_string()
            ),
        ]
    );
    assert_eq!(st.histories, ["00000002.history"]);
    assert_eq!(st.backups, ["000000010000000000000003.00000028.backup"]);
    assert!(st.suspect.is_empty());
    assert_eq!(
        listed
            .iter()
            .filter(|(n, _)| n.kind() == Kind::Segment)
            .count(),
        5
    );
}

#[tokio::test]
async fn an_encrypted_archive_refuses_what_it_cannot_authenticate() {
    let store = Arc::new(MemoryStore::new());
    let a = archive(&store, Some(key(1)));
    assert!(a.encrypted());
    let n1 = name("000000010000000000000001");
    let seg1 = segment(&n1, SYSTEM_ID, 1);
    let pushed = a.push(&n1, seg1.clone()).await.unwrap();
    assert_eq!(pushed.header().cipher, Cipher::XChaCha20Poly1305);
    let stored = store.bytes(&object_key(&n1)).unwrap();
    assert_eq!(stored[10], 1, "cipher byte");
    assert!(
        !stored.windows(64).any(|w| w == &seg1[40..104]),
        "no WAL content in the clear"
    );
    assert_eq!(a.fetch(&n1).await.unwrap(), seg1);
    let again = a.push(&n1, seg1.clone()).await.unwrap();
    assert!(matches!(again, Pushed::AlreadyArchived(_)), "{again:?}");

    // Someone who can write the store plants a plaintext segment, a well-formed one.
    let n2 = name("000000010000000000000002");
    let planted = segment(&n2, SYSTEM_ID, 9);
    let (_, obj) = envelope::seal(&planted, 1, n2.as_str(), None).unwrap();
    store
        .put(&object_key(&n2), Bytes::from(obj), &Meta::new())
        .await
        .unwrap();
    let refused = a.fetch(&n2).await;
    assert!(
        matches!(&refused, Err(Error::Checksum(m)) if m.contains("unencrypted")),
        "{refused:?}"
    );
    // It is a valid object: only the key makes the archive refuse it.
    assert_eq!(archive(&store, None).fetch(&n2).await.unwrap(), planted);
    // wal-status reports it from the headers alone, without the key.
    let st = ferry_wal::status::status(&archive(&store, None), None, true)
        .await
        .unwrap();
    let suspect: Vec<&str> = st.suspect.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(suspect, [n2.as_str()]);
    // The genuine segment's push replaces the planted copy with a sealed one.
    let genuine = segment(&n2, SYSTEM_ID, 2);
    let replaced = a.push(&n2, genuine.clone()).await.unwrap();
    assert!(matches!(replaced, Pushed::Stored { .. }), "{replaced:?}");
    assert_eq!(a.fetch(&n2).await.unwrap(), genuine);

    // An encrypted object moved under another name does not decrypt; neither does one
    // under another key, nor one with a flipped bit.
    let n3 = name("000000010000000000000003");
    store
        .put(&object_key(&n3), stored, &Meta::new())
        .await
        .unwrap();
    let moved = a.fetch(&n3).await;
    assert!(
        matches!(&moved, Err(Error::Checksum(m)) if m.contains("does not decrypt")),
        "{moved:?}"
    );
    let other_key = archive(&store, Some(key(2))).fetch(&n1).await;
    assert!(
        matches!(other_key, Err(Error::Checksum(_))),
        "{other_key:?}"
    );
    assert!(store.tamper(&object_key(&n1), |d| {
        let last = d.len() - 1;
        d[last] ^= 0x01;
    }));
    let flipped = a.fetch(&n1).await;
    assert!(matches!(flipped, Err(Error::Checksum(_))), "{flipped:?}");

    // Without the key: encrypted objects cannot be read, and a push will not put plaintext
    // beside them.
    let keyless = archive(&store, None);
    let no_key = keyless.fetch(&n2).await;
    assert!(
        matches!(&no_key, Err(Error::Invalid(m)) if m.contains("encrypted")),
        "{no_key:?}"
    );
    let plain_push = keyless.push(&n2, genuine).await;
    assert!(
        matches!(&plain_push, Err(Error::Invalid(m)) if m.contains("plaintext")),
        "{plain_push:?}"
    );
    assert_eq!(a.fetch(&n2).await.unwrap(), segment(&n2, SYSTEM_ID, 2));
}

/// An object the store says is larger than any WAL file can be stored as is refused before a
/// byte of it is read: a hostile store cannot make a fetch (or a second push, which reads the
/// archived copy back) allocate what it claims. A push then replaces it.
#[tokio::test]
async fn an_oversized_object_is_refused_unread() {
    let store = Arc::new(MemoryStore::new());
    let a = archive(&store, None);
    let n = name("000000010000000000000009");
    // Zeroed pages the allocator maps lazily: the test costs no real memory.
    let huge = Bytes::from(vec![0u8; ferry_wal::envelope::MAX_OBJECT as usize + 1]);
    store
        .put(&object_key(&n), huge, &Meta::new())
        .await
        .unwrap();
    let got = a.fetch(&n).await;
    assert!(
        matches!(&got, Err(Error::Checksum(m)) if m.contains("more than")),
        "{:?}",
        got.as_ref().map(Vec::len)
    );
    let seg = segment(&n, SYSTEM_ID, 9);
    let pushed = a.push(&n, seg.clone()).await.unwrap();
    assert!(matches!(pushed, Pushed::Stored { .. }), "{pushed:?}");
    assert_eq!(a.fetch(&n).await.unwrap(), seg);
}

/// A store writer's decoys: a segment under another place than its own (to hide the hole a
/// deleted one left), and `cluster.json` (plaintext) with a segment size PostgreSQL cannot
/// have, or far too long to be one.
#[tokio::test]
async fn decoys_and_impossible_cluster_records_are_refused() {
    let store = Arc::new(MemoryStore::new());
    let a = archive(&store, None);
    let (n3, n4) = (
        name("000000010000000000000003"),
        name("000000010000000000000004"),
    );
    a.push(&n3, segment(&n3, SYSTEM_ID, 1)).await.unwrap();
    let stored = store.bytes(&object_key(&n3)).unwrap();
    store
        .put(&format!("{ROOT}/wal/x/{n4}"), stored, &Meta::new())
        .await
        .unwrap();
    let listed: Vec<String> = a
        .list()
        .await
        .unwrap()
        .iter()
        .map(|(n, _)| n.to_string())
        .collect();
    assert_eq!(listed, vec![n3.to_string()], "a decoy was listed");

    for (body, says) in [
        (
            br#"{"format":1,"system_id":"1","seg_size":0}"#.to_vec(),
            "segment size 0",
        ),
        (
            br#"{"format":1,"system_id":"1","seg_size":8589934592}"#.to_vec(),
            "segment size",
        ),
        (vec![b' '; 100 << 10], "more than the 65536"),
    ] {
        let store = Arc::new(MemoryStore::new());
        store
            .put(
                &format!("{ROOT}/wal/cluster.json"),
                Bytes::from(body),
                &Meta::new(),
            )
            .await
            .unwrap();
        let e = archive(&store, None)
            .cluster()
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{e}");
    }
}

/// A file a recovery before this one prefetched into the same spool, from another archive,
/// is not handed to this one: `in/source` names the archive the prefetched files came from.
#[test]
fn a_prefetched_file_of_another_archive_is_not_handed_over() {
    let dir = std::env::temp_dir().join(format!("ferry-wal-source-{}", std::process::id()));
    let spool = ferry_wal::Spool::open(&dir.join("spool")).unwrap();
    let n = name("000000010000000000000005");
    std::fs::write(spool.path(&format!("in/{n}")), b"from the other archive").unwrap();
    std::fs::write(spool.path("in/source"), "s3://old/archive").unwrap();
    let dest = dir.join("RECOVERYXLOG");
    let wait = std::time::Duration::ZERO;
    let take = |source| ferry_wal::fetch::take_prefetched(&spool, &n, &dest, wait, source);
    assert!(
        !take("s3://new/archive").unwrap(),
        "handed over from another archive"
    );
    assert!(!dest.exists());
    assert!(take("s3://old/archive").unwrap());
    assert_eq!(std::fs::read(&dest).unwrap(), b"from the other archive");
    std::fs::remove_dir_all(dir).unwrap();
}

/// `archive_command` now names another archive: the acks an agent wrote for the old one are
/// not taken for this push (it would exit 0 with the segment never in the new archive); the
/// agent started with the new settings claims the spool and archives it again.
#[test]
fn acks_of_an_agent_for_another_archive_are_not_taken() {
    use ferry_wal::push::{push_via_agent, Handed, PushOptions, QueuePolicy};
    let dir = std::env::temp_dir().join(format!("ferry-wal-acks-{}", std::process::id()));
    let pg_wal = dir.join("pg_wal");
    std::fs::create_dir_all(pg_wal.join("archive_status")).unwrap();
    let n = name("000000010000000000000007");
    let seg = pg_wal.join(n.as_str());
    std::fs::write(&seg, b"segment").unwrap();
    std::fs::write(pg_wal.join(format!("archive_status/{n}.ready")), b"").unwrap();
    let spool = ferry_wal::Spool::open(&dir.join("spool")).unwrap();
    let meta = std::fs::metadata(&seg).unwrap();
    let acks = ferry_wal::Spool::is_verdict;
    spool.claim("out", "s3://old/archive", acks).unwrap();
    spool.ack(n.as_str(), "00", &meta).unwrap();
    let opts = PushOptions {
        timeout: std::time::Duration::from_secs(10),
        queue_max: None,
        policy: QueuePolicy::Keep,
        source: "s3://new/archive".into(),
    };
    let mut started = 0;
    let handed = push_via_agent(&spool, &seg, &opts, &mut || {
        // The new agent: claims the spool for its archive, then archives the segment.
        started += 1;
        spool.claim("out", "s3://new/archive", acks)?;
        assert!(
            !spool.acked(n.as_str()),
            "the old archive's ack survived the claim"
        );
        spool.ack(n.as_str(), "11", &meta)
    })
    .unwrap();
    assert_eq!(handed, Handed::Archived);
    assert_eq!(started, 1, "the old archive's ack was taken");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Once the cluster's segment size is known (the prefetch agent reads it first), a segment
/// is bounded by it, not by the GiB any WAL file may hold: an object planted at the next
/// segment's name that is larger than a segment can be stored as is refused unread, and one
/// whose header claims more than a segment is refused before it is decompressed. Each of
/// the agent's fetches in flight so holds about a segment, whatever was planted.
#[tokio::test]
async fn a_segment_is_bounded_by_the_clusters_segment_size() {
    let store = Arc::new(MemoryStore::new());
    let (n1, n2, n3) = (
        name("000000010000000000000001"),
        name("000000010000000000000002"),
        name("000000010000000000000003"),
    );
    archive(&store, None)
        .push(&n1, segment(&n1, SYSTEM_ID, 1))
        .await
        .unwrap();
    // A new process, as the agent is: it reads cluster.json, then fetches.
    let a = archive(&store, None);
    assert_eq!(a.cluster().await.unwrap().unwrap().seg_size, SEG);
    let big = Bytes::from(vec![0u8; envelope::object_bound(SEG) as usize + 1]);
    store
        .put(&object_key(&n2), big, &Meta::new())
        .await
        .unwrap();
    let got = a.fetch(&n2).await;
    assert!(
        matches!(&got, Err(Error::Checksum(m)) if m.contains("more than")),
        "{:?}",
        got.as_ref().map(Vec::len)
    );
    // Four segments of zeros compress to almost nothing: the object is small, its header
    // claims 4 MiB.
    let (_, obj) = envelope::seal(&vec![0u8; 4 * SEG as usize], 3, n3.as_str(), None).unwrap();
    assert!((obj.len() as u64) < SEG);
    store
        .put(&object_key(&n3), Bytes::from(obj.clone()), &Meta::new())
        .await
        .unwrap();
    let got = a.fetch(&n3).await;
    assert!(
        matches!(&got, Err(Error::Checksum(m)) if m.contains("claims")),
        "{:?}",
        got.as_ref().map(Vec::len)
    );
    // Without the cluster's record the same object opens (a history file may be that
    // large): what refused it above was the segment size.
    let (_, data) = envelope::open(&obj, "x", n3.as_str(), None, envelope::MAX_LEN).unwrap();
    assert_eq!(data.len() as u64, 4 * SEG);
}

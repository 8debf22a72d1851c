//! The store against the one-node cluster, checked byte for byte with the `rados` CLI.

use bytes::Bytes;
use ferry_rados::{Config, Layout, RadosStore};
use ferry_store::{Error, Meta, Store, META_DIGEST};
use ferry_testkit::ceph::{ceph, Ceph};
use ferry_testkit::{random_bytes, unique};

const K: u64 = 64 << 10;

fn store(c: &Ceph, layout: Layout) -> RadosStore {
    let cfg = Config {
        conf: Some(c.conf.clone().into()),
        ..Default::default()
    };
    RadosStore::with(&c.pool, cfg, layout).unwrap()
}

/// `rados --striper get` of `key`, or None when the striper does not find it.
fn striper_get(c: &Ceph, key: &str) -> Option<Vec<u8>> {
    let out = c.try_rados(&["--striper", "get", key, "-"]);
    if !out.status.success() {
        eprintln!(
            "rados --striper get {key}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out.status.success().then_some(out.stdout)
}

/// Writes `data` as one upload of `block`-sized blocks, sent last to first.
async fn upload(s: &RadosStore, key: &str, data: &[u8], block: usize, meta: &Meta) {
    let up = s.start_upload(key, meta).await.unwrap();
    let blocks: Vec<_> = data.chunks(block).enumerate().collect();
    let mut ids = Vec::new();
    for (i, chunk) in blocks.into_iter().rev() {
        let off = (i * block) as u64;
        ids.push(
            s.put_block(&up, i, off, Bytes::copy_from_slice(chunk))
                .await
                .unwrap(),
        );
    }
    ids.reverse();
    s.complete_upload(&up, ids, &Meta::new()).await.unwrap();
}

/// The suite every store passes (ferry_testkit::conformance), under a prefix of its own in
/// the shared pool.
#[tokio::test]
async fn conformance() {
    let Some(c) = ceph() else { return };
    let s = store(&c, Layout::default());
    let dir = unique("conf");
    ferry_testkit::conformance::suite(&s, &dir).await;
    for o in s.list(&dir).await.unwrap() {
        s.delete(&o.key).await.unwrap();
    }
    assert!(s.list(&dir).await.unwrap().is_empty());
}

#[tokio::test]
async fn boundary_sizes_round_trip_and_striper_reads_them() {
    let Some(c) = ceph() else { return };
    // Three objects per set, two units per object: boundaries at every 64 KiB.
    let layout = Layout::new(K, 3, 2 * K).unwrap();
    let s = store(&c, layout);
    let dir = unique("bounds");
    let set = layout.set_size();
    let sizes = [
        0,
        1,
        K - 1,
        K,
        K + 1,
        2 * K,
        2 * K + 1,
        set - 1,
        set,
        set + 1,
        3 * set + 5,
    ];
    for (i, &size) in sizes.iter().enumerate() {
        let data = random_bytes(size as usize, i as u64);
        let key = format!("{dir}/obj-{size}");
        let mut meta = Meta::new();
        meta.insert(META_DIGEST.into(), format!("d{size}"));
        s.put(&key, Bytes::from(data.clone()), &meta).await.unwrap();
        let info = s.head(&key).await.unwrap();
        assert_eq!(info.size, size, "{key}");
        assert_eq!(
            s.digest(&info).as_deref(),
            Some(format!("d{size}").as_str())
        );
        assert_eq!(s.get_range(&key, 0..size).await.unwrap(), data, "{key}");
        if size > 3 {
            let r = 1..size - 1;
            assert_eq!(
                s.get_range(&key, r.clone()).await.unwrap(),
                data[1..size as usize - 1]
            );
        }
        assert_eq!(
            striper_get(&c, &key).as_deref(),
            Some(&data[..]),
            "{key} via rados --striper"
        );
    }
    // Listing: one entry per striped object, whatever its pieces.
    let listed = s.list(&dir).await.unwrap();
    assert_eq!(listed.len(), sizes.len());
    assert!(listed
        .iter()
        .all(|o| o.key.ends_with(&format!("obj-{}", o.size))));
    // Delete leaves no piece behind.
    for o in &listed {
        s.delete(&o.key).await.unwrap();
    }
    assert!(s.list(&dir).await.unwrap().is_empty());
    assert!(
        !c.raw_names().iter().any(|n| n.starts_with(&dir)),
        "pieces left"
    );
}

#[tokio::test]
async fn uploads_out_of_order_replace_and_shrink() {
    let Some(c) = ceph() else { return };
    let layout = Layout::new(K, 2, 4 * K).unwrap();
    let s = store(&c, layout);
    let key = unique("upload");
    let big = random_bytes((5 * layout.set_size() + 77) as usize, 1);
    upload(&s, &key, &big, layout.set_size() as usize, &Meta::new()).await;
    assert_eq!(striper_get(&c, &key).unwrap(), big);
    assert_eq!(s.get_range(&key, 0..big.len() as u64).await.unwrap(), big);
    // Unaligned blocks work too, and a smaller version leaves no stale pieces.
    let small = random_bytes((layout.set_size() + 3 * K) as usize, 2);
    upload(&s, &key, &small, (K + 123) as usize, &Meta::new()).await;
    assert_eq!(striper_get(&c, &key).unwrap(), small);
    let pieces = c.raw_names().iter().filter(|n| n.starts_with(&key)).count() as u64;
    assert_eq!(pieces, layout.pieces(small.len() as u64));
    // A one-piece put replaces it in one operation; the old metadata does not survive.
    let mut meta = Meta::new();
    meta.insert("ferry_blocks".into(), "x".into());
    s.put(&key, Bytes::from_static(b"tiny"), &meta)
        .await
        .unwrap();
    s.put(&key, Bytes::from_static(b"tiny2"), &Meta::new())
        .await
        .unwrap();
    let info = s.head(&key).await.unwrap();
    assert_eq!((info.size, info.meta.len()), (5, 0), "{info:?}");
    assert_eq!(striper_get(&c, &key).unwrap(), b"tiny2");
    s.delete(&key).await.unwrap();
    assert!(!c.raw_names().iter().any(|n| n.starts_with(&key)));
}

#[tokio::test]
async fn an_unfinished_upload_is_invisible_and_abort_cleans_up() {
    let Some(c) = ceph() else { return };
    let layout = Layout::new(K, 1, K).unwrap();
    let s = store(&c, layout);
    let key = unique("partial");
    let up = s.start_upload(&key, &Meta::new()).await.unwrap();
    for i in 0..4u64 {
        let data = Bytes::from(random_bytes(K as usize, i));
        s.put_block(&up, i as usize, i * K, data).await.unwrap();
    }
    // Pieces 1..3 exist, but no reader sees an object.
    assert!(matches!(s.head(&key).await, Err(Error::NotFound(_))));
    assert!(s.list(&key).await.unwrap().is_empty());
    assert!(striper_get(&c, &key).is_none());
    let out = c.rados(&["--striper", "ls"]);
    assert!(!String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l == key));
    s.abort_upload(&up).await.unwrap();
    assert!(!c.raw_names().iter().any(|n| n.starts_with(&key)));
}

#[tokio::test]
async fn reads_what_rados_striper_put_wrote() {
    let Some(c) = ceph() else { return };
    let s = store(&c, Layout::default());
    let dir = tempdir();
    for (i, size) in [0usize, 1, (4 << 20) - 1, 4 << 20, (9 << 20) + 3]
        .into_iter()
        .enumerate()
    {
        let key = unique("striper");
        let data = random_bytes(size, 10 + i as u64);
        let path = dir.join(&key);
        std::fs::write(&path, &data).unwrap();
        c.rados(&["--striper", "put", &key, path.to_str().unwrap()]);
        let info = s.head(&key).await.unwrap();
        assert_eq!(info.size, size as u64);
        assert_eq!(
            s.get_range(&key, 0..size as u64).await.unwrap(),
            data,
            "{size} bytes"
        );
        assert!(s.list("").await.unwrap().iter().any(|o| o.key == key));
        s.delete(&key).await.unwrap();
        assert!(striper_get(&c, &key).is_none());
        assert!(!c.raw_names().iter().any(|n| n.starts_with(&key)));
    }
    std::fs::remove_dir_all(dir).unwrap();
}

fn tempdir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(unique("ferry-rados-test"));
    std::fs::create_dir_all(&d).unwrap();
    d
}

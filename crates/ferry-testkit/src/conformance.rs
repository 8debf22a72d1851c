//! The one suite every store passes: local disk, memory, MinIO (S3), Azurite (Azure) and
//! the one-node Ceph (RADOS), each from its own crate's tests.

use bytes::Bytes;
use ferry_store::{Error, Meta, Store, META_BLOCKS};

use crate::random_bytes;

/// Puts, ranged gets, heads, missing objects, block sessions completed and aborted, listings
/// and deletes, all under the prefix `dir` (which must hold nothing else).
pub async fn suite(store: &dyn Store, dir: &str) {
    let k = |name: &str| format!("{dir}/{name}");
    let meta = Meta::from([(META_BLOCKS.to_string(), "5242880".to_string())]);

    // Whole puts, ranged gets, heads with metadata.
    let small = Bytes::from(random_bytes(1000, 1));
    store.put(&k("a"), small.clone(), &meta).await.unwrap();
    assert_eq!(store.get_range(&k("a"), 0..1000).await.unwrap(), small);
    assert_eq!(
        store.get_range(&k("a"), 10..20).await.unwrap(),
        small.slice(10..20)
    );
    let info = store.head(&k("a")).await.unwrap();
    assert_eq!(info.size, 1000);
    store
        .put(&k("empty"), Bytes::new(), &Meta::new())
        .await
        .unwrap();
    assert_eq!(store.head(&k("empty")).await.unwrap().size, 0);

    // Missing objects are NotFound, whatever the backend.
    assert!(matches!(
        store.head(&k("missing")).await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        store.get_range(&k("missing"), 0..1).await,
        Err(Error::NotFound(_))
    ));

    // Block sessions: blocks in any order, the object appears only at completion.
    let block = 5 << 20;
    let data = Bytes::from(random_bytes(2 * block + 7, 2));
    let up = store.start_upload(&k("big"), &meta).await.unwrap();
    let b2 = store
        .put_block(&up, 2, 2 * block as u64, data.slice(2 * block..))
        .await
        .unwrap();
    let b0 = store
        .put_block(&up, 0, 0, data.slice(..block))
        .await
        .unwrap();
    let b1 = store
        .put_block(&up, 1, block as u64, data.slice(block..2 * block))
        .await
        .unwrap();
    assert!(
        matches!(store.head(&k("big")).await, Err(Error::NotFound(_))),
        "visible before completion"
    );
    let ids = vec![b0, b1, b2];
    store
        .complete_upload(&up, ids.clone(), &meta)
        .await
        .unwrap();
    // What the completion leaves (GCS's parts) is the caller's to delete, as the engine does.
    for key in store.leftovers(&up, &ids) {
        store.delete(&key).await.unwrap();
    }
    let got = store
        .get_range(&k("big"), 0..data.len() as u64)
        .await
        .unwrap();
    assert!(got == data, "block upload corrupted");

    // An object's description with the bytes of a range: what head says, and those bytes,
    // cut at the object's end: a short object (all of it), a long one (the bytes asked for,
    // from its start or its middle), an empty one, and ranges that pass the end or start past it.
    let size = data.len() as u64;
    for (name, range, want) in [
        ("a", 0..4096, small.clone()),
        ("big", 0..1000, data.slice(..1000)),
        ("big", 1000..3000, data.slice(1000..3000)),
        ("big", size - 10..size + 10, data.slice(data.len() - 10..)),
        ("big", size..size + 10, Bytes::new()),
        ("big", size + 5..size + 10, Bytes::new()),
        ("empty", 0..4096, Bytes::new()),
        ("empty", 3..4096, Bytes::new()),
    ] {
        let (info, first) = store.head_and_read(&k(name), range).await.unwrap();
        let head = store.head(&k(name)).await.unwrap();
        assert_eq!(
            (info.size, &info.etag, &info.meta),
            (head.size, &head.etag, &head.meta),
            "{name}"
        );
        assert!(first == want, "{name}: {} bytes", first.len());
    }
    assert!(matches!(
        store.head_and_read(&k("missing"), 0..10).await,
        Err(Error::NotFound(_))
    ));

    // An aborted session leaves nothing.
    let up = store.start_upload(&k("aborted"), &meta).await.unwrap();
    store
        .put_block(&up, 0, 0, data.slice(..block))
        .await
        .unwrap();
    store.abort_upload(&up).await.unwrap();
    assert!(matches!(
        store.head(&k("aborted")).await,
        Err(Error::NotFound(_))
    ));

    // Listing is recursive, sorted, and shows only finished objects.
    let keys: Vec<_> = store
        .list(dir)
        .await
        .unwrap()
        .into_iter()
        .map(|o| (o.key, o.size))
        .collect();
    assert_eq!(
        keys,
        vec![
            (k("a"), 1000),
            (k("big"), data.len() as u64),
            (k("empty"), 0)
        ]
    );

    // Delete is idempotent.
    store.delete(&k("a")).await.unwrap();
    store.delete(&k("a")).await.unwrap();
    assert!(matches!(store.head(&k("a")).await, Err(Error::NotFound(_))));
}

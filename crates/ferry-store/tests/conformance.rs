//! One suite every backend passes: local disk, MinIO (S3) and Azurite (Azure), all real.

use bytes::Bytes;
use ferry_store::cloud::CloudStore;
use ferry_store::local::LocalStore;
use ferry_store::{Error, Meta, Store};
use ferry_testkit::random_bytes;

async fn suite(store: &dyn Store) {
    let meta = Meta::from([("ferry_blocks".to_string(), "5242880".to_string())]);

    // Whole puts, ranged gets, heads with metadata.
    let small = Bytes::from(random_bytes(1000, 1));
    store.put("dir/a", small.clone(), &meta).await.unwrap();
    assert_eq!(store.get_range("dir/a", 0..1000).await.unwrap(), small);
    assert_eq!(
        store.get_range("dir/a", 10..20).await.unwrap(),
        small.slice(10..20)
    );
    let info = store.head("dir/a").await.unwrap();
    assert_eq!(info.size, 1000);
    store
        .put("dir/empty", Bytes::new(), &Meta::new())
        .await
        .unwrap();
    assert_eq!(store.head("dir/empty").await.unwrap().size, 0);

    // Missing objects are NotFound, whatever the backend.
    assert!(matches!(
        store.head("dir/missing").await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        store.get_range("dir/missing", 0..1).await,
        Err(Error::NotFound(_))
    ));

    // Block sessions: blocks in any order, the object appears only at completion.
    let block = 5 << 20;
    let data = Bytes::from(random_bytes(2 * block + 7, 2));
    let up = store.start_upload("dir/big", &meta).await.unwrap();
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
        matches!(store.head("dir/big").await, Err(Error::NotFound(_))),
        "visible before completion"
    );
    store
        .complete_upload(&up, vec![b0, b1, b2], &meta)
        .await
        .unwrap();
    let got = store
        .get_range("dir/big", 0..data.len() as u64)
        .await
        .unwrap();
    assert!(got == data, "block upload corrupted");

    // An aborted session leaves nothing.
    let up = store.start_upload("dir/aborted", &meta).await.unwrap();
    store
        .put_block(&up, 0, 0, data.slice(..block))
        .await
        .unwrap();
    store.abort_upload(&up).await.unwrap();
    assert!(matches!(
        store.head("dir/aborted").await,
        Err(Error::NotFound(_))
    ));

    // Listing is recursive, sorted, and shows only finished objects.
    let keys: Vec<_> = store
        .list("dir")
        .await
        .unwrap()
        .into_iter()
        .map(|o| (o.key, o.size))
        .collect();
    assert_eq!(
        keys,
        vec![
            ("dir/a".into(), 1000),
            ("dir/big".into(), data.len() as u64),
            ("dir/empty".into(), 0)
        ]
    );

    // Delete is idempotent.
    store.delete("dir/a").await.unwrap();
    store.delete("dir/a").await.unwrap();
    assert!(matches!(store.head("dir/a").await, Err(Error::NotFound(_))));
}

#[tokio::test]
async fn local_disk() {
    let dir = std::env::temp_dir().join(ferry_testkit::unique("ferry-conf"));
    let store = LocalStore::new(&dir);
    suite(&store).await;
    // No temp files left behind by the aborted upload.
    let leftovers: Vec<_> = std::fs::read_dir(dir.join("dir"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 2, "{leftovers:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn s3_minio() {
    let Some(cfg) = ferry_testkit::s3() else {
        return;
    };
    let (store, _) = ferry_testkit::s3_bucket(&cfg).await;
    suite(&store).await;
    assert_eq!(
        store.pending_uploads("").await.unwrap(),
        Vec::<String>::new(),
        "abandoned multipart uploads"
    );
    // The store vouches for the multipart digest through its ETag.
    assert!(store
        .digest(&store.head("dir/big").await.unwrap())
        .unwrap()
        .ends_with("-3"));
}

#[tokio::test]
async fn azure_azurite() {
    let Some(cfg) = ferry_testkit::azure() else {
        return;
    };
    let (store, _) = ferry_testkit::azure_container(&cfg).await;
    suite(&store).await;
}

#[tokio::test]
async fn creating_an_existing_bucket_says_so() {
    let Some(cfg) = ferry_testkit::s3() else {
        return;
    };
    let (_, name) = ferry_testkit::s3_bucket(&cfg).await;
    let again = CloudStore::s3(&cfg, &name).unwrap().create_root().await;
    assert!(matches!(again, Err(Error::AlreadyExists(_))), "{again:?}");
}

#[tokio::test]
async fn wrong_credentials_are_denied_not_retried() {
    let Some(mut cfg) = ferry_testkit::s3() else {
        return;
    };
    let (_, name) = ferry_testkit::s3_bucket(&cfg).await;
    cfg.secret_access_key = Some("wrong".into());
    let store = CloudStore::s3(&cfg, &name).unwrap();
    let r = store.put("x", Bytes::from_static(b"x"), &Meta::new()).await;
    assert!(matches!(r, Err(Error::Denied(_))), "{r:?}");
}

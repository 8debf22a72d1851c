//! One suite every backend passes: local disk, MinIO (S3) and Azurite (Azure), all real, and
//! the in-memory store the libraries' own tests run on.

use bytes::Bytes;
use ferry_store::cloud::CloudStore;
use ferry_store::local::LocalStore;
use ferry_store::memory::MemoryStore;
use ferry_store::{DigestKind, Error, Meta, Store};
use ferry_testkit::conformance::suite;

#[tokio::test]
async fn local_disk() {
    let dir = std::env::temp_dir().join(ferry_testkit::unique("ferry-conf"));
    let store = LocalStore::new(&dir);
    suite(&store, "dir").await;
    // No temp files left behind by the aborted upload.
    let leftovers: Vec<_> = std::fs::read_dir(dir.join("dir"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 2, "{leftovers:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A write given up takes back the directories it made for its key, and only those: one
/// that was there before, one another object needs, and the store's root stay.
#[tokio::test]
async fn local_writes_given_up_take_back_the_directories_they_made() {
    let dir = std::env::temp_dir().join(ferry_testkit::unique("ferry-dirs"));
    // A root that does not exist yet: the first write makes it, and it stays.
    let store = LocalStore::new(dir.join("root"));
    let up = store.start_upload("k/obj", &Meta::new()).await.unwrap();
    store.abort_upload(&up).await.unwrap();
    assert!(dir.join("root").is_dir());
    assert!(!dir.join("root/k").exists());
    let root = dir.join("root");
    std::fs::create_dir(root.join("there")).unwrap();
    let up = store
        .start_upload("there/a/b/c/obj", &Meta::new())
        .await
        .unwrap();
    store
        .put_block(&up, 0, 0, Bytes::from_static(b"half"))
        .await
        .unwrap();
    assert!(root.join("there/a/b/c").is_dir());
    store.abort_upload(&up).await.unwrap();
    assert!(root.join("there").is_dir());
    assert!(!root.join("there/a").exists());
    // Two writes under one new directory: the one given up leaves what the other holds.
    let first = store.start_upload("x/y/one", &Meta::new()).await.unwrap();
    let second = store.start_upload("x/y/z/two", &Meta::new()).await.unwrap();
    store
        .put_block(&second, 0, 0, Bytes::from_static(b"2"))
        .await
        .unwrap();
    store
        .complete_upload(&second, vec![], &Meta::new())
        .await
        .unwrap();
    store.abort_upload(&first).await.unwrap();
    assert_eq!(
        store.get("x/y/z/two").await.unwrap(),
        Bytes::from_static(b"2")
    );
    // A directory it made that another object went into meanwhile stays too.
    let third = store.start_upload("v/w/three", &Meta::new()).await.unwrap();
    store
        .put("v/w/kept", Bytes::from_static(b"k"), &Meta::new())
        .await
        .unwrap();
    store.abort_upload(&third).await.unwrap();
    assert!(root.join("v/w/kept").is_file());
    let mut names: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["there", "v", "x"]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn memory() {
    for store in [
        MemoryStore::new(),
        MemoryStore::recording(DigestKind::Blake3),
    ] {
        suite(&store, "dir").await;
        // No session left open by the completed and the aborted upload, and nothing but the
        // objects the suite left.
        assert_eq!(store.open_uploads(), 0);
        assert_eq!(store.keys(), ["dir/big", "dir/empty"]);
        // What was stored is what the store hands back, metadata included.
        let info = store.head("dir/big").await.unwrap();
        assert_eq!(info.meta.get("ferry_blocks").unwrap(), "5242880");
        assert_eq!(store.bytes("dir/big").unwrap().len() as u64, info.size);
    }
}

#[tokio::test]
async fn s3_minio() {
    let Some(cfg) = ferry_testkit::s3() else {
        return;
    };
    let (store, _) = ferry_testkit::s3_bucket(&cfg).await;
    suite(&store, "dir").await;
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
    // Nothing ferry writes needs a digest of ferry's: S3 checks every request's body against
    // the SHA-256 sent with it, and a part's receipt (object_store's record, which s3_parts
    // reads) carries the checksum S3 answered with once it had.
    assert_eq!(store.whole_digest_kind(), None);
    assert_eq!(store.digest_kind(), None);
    let up = store.start_upload("dir/parts", &Meta::new()).await.unwrap();
    let part = Bytes::from(vec![7u8; 5 << 20]);
    let id = store.put_block(&up, 0, 0, part.clone()).await.unwrap();
    assert!(
        id.0.starts_with("<PartMetadata>") && id.0.contains("<checksum_sha256>"),
        "{id:?}"
    );
    let last = store.put_block(&up, 1, 5 << 20, part).await.unwrap();
    let made = store
        .complete_upload(&up, vec![id, last], &Meta::new())
        .await;
    assert!(made.unwrap().unwrap().ends_with("-2"));
    let body = Bytes::from_static(b"one request");
    store.put("dir/whole", body, &Meta::new()).await.unwrap();
    let info = store.head("dir/whole").await.unwrap();
    assert_eq!(
        store.digest(&info).as_deref(),
        Some("833e292568ca5f26ccd9c355a1771378")
    );
    // Beside the ETag, S3 keeps the SHA-256 ferry sent with each request (x-amz-checksum-
    // sha256), and a reader checks that instead: a third of the MD5's CPU.
    assert_eq!(
        store.read_digest(&info).as_deref(),
        Some("sha256:c6384cfeac9da45cf067bd446ea3731856261f25a7aa96ce903a3a51820ecc83")
    );
    let big = store.head("dir/big").await.unwrap();
    let sum = big
        .checksum
        .clone()
        .expect("S3's checksum of a multipart upload");
    assert!(sum.starts_with("sha256:") && sum.ends_with("-3"), "{sum}");
    assert_eq!(store.read_digest(&big), Some(sum));
}

#[tokio::test]
async fn azure_azurite() {
    let Some(cfg) = ferry_testkit::azure() else {
        return;
    };
    let (store, _) = ferry_testkit::azure_container(&cfg).await;
    suite(&store, "dir").await;
}

#[tokio::test]
async fn gcs_fake_gcs_server() {
    let Some(cfg) = ferry_testkit::gcs() else {
        return;
    };
    let (store, name) = ferry_testkit::gcs_bucket(&cfg).await;
    suite(&store, "dir").await;
    // The composed object's parts are gone, the aborted upload's too.
    assert_eq!(
        store.pending_uploads("").await.unwrap(),
        Vec::<String>::new()
    );
    let again = CloudStore::gcs(&cfg, &name).unwrap().create_root().await;
    assert!(matches!(again, Err(Error::AlreadyExists(_))), "{again:?}");
}

#[tokio::test]
async fn gcs_composes_more_blocks_than_one_request_takes() {
    let Some(cfg) = ferry_testkit::gcs() else {
        return;
    };
    let (store, _) = ferry_testkit::gcs_bucket(&cfg).await;
    // 71 blocks: three objects in the first compose round (32 + 32 + 7), then the target.
    let data = ferry_testkit::random_bytes(70 * 1000 + 17, 3);
    let up = store.start_upload("many", &Meta::new()).await.unwrap();
    let mut ids = Vec::new();
    for (i, piece) in data.chunks(1000).enumerate() {
        let b = Bytes::copy_from_slice(piece);
        ids.push(store.put_block(&up, i, (i * 1000) as u64, b).await.unwrap());
    }
    let mut meta = Meta::new();
    meta.insert("k".into(), "v".into());
    store
        .complete_upload(&up, ids.clone(), &meta)
        .await
        .unwrap();
    assert_eq!(store.get("many").await.unwrap(), data);
    // The completion leaves its parts and compose rounds, exactly what leftovers names.
    let mut left = store.leftovers(&up, &ids);
    left.sort();
    assert_eq!(left.len(), ids.len() + 3, "71 parts and 3 compose rounds");
    assert_eq!(store.pending_uploads("").await.unwrap(), left);
    for key in &left {
        store.delete(key).await.unwrap();
    }
    assert_eq!(
        store.head("many").await.unwrap().meta.get("k").unwrap(),
        "v"
    );
    assert_eq!(
        store.pending_uploads("").await.unwrap(),
        Vec::<String>::new()
    );
    let keys: Vec<String> = store
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(keys, ["many"]);
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

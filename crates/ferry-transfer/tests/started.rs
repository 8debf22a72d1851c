//! Uploads started ahead of their bytes: the store holds the upload before any byte is
//! handed over, the upload of those bytes uses it (no second one), and one given back or
//! handed the wrong object leaves nothing behind.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferry_store::memory::MemoryStore;
use ferry_transfer::{Class, Engine, EngineConfig, Error, Remote, SharedStore};

const MIB: usize = 1 << 20;

fn pattern(size: usize, k: usize) -> Bytes {
    (0..size)
        .map(|i| (i * k % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

fn remote(store: &Arc<MemoryStore>) -> Remote {
    let engine = Engine::new(EngineConfig {
        block_size: Some(4 * MIB as u64),
        ..Default::default()
    });
    engine.remote(store.clone() as SharedStore, Class::Urgent)
}

/// Waits (without a deadline that could pass on a slow machine first) until the store holds
/// `n` unfinished uploads; fails after a minute.
async fn open_uploads_reach(store: &MemoryStore, n: usize) {
    for _ in 0..60_000 {
        if store.open_uploads() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("{} uploads open, not {n}", store.open_uploads());
}

#[tokio::test]
async fn an_upload_started_ahead_carries_its_object() {
    let store = Arc::new(MemoryStore::new().remote());
    let r = remote(&store);
    let body = pattern(9 * MIB + 5, 3);
    let started = r
        .start_upload("obj", body.len() as u64)
        .expect("three blocks");
    // Begun with no byte handed over.
    open_uploads_reach(&store, 1).await;
    assert_eq!(store.bytes("obj"), None);
    r.upload_bytes(body.clone(), "obj", Some(started))
        .await
        .unwrap();
    assert_eq!(store.bytes("obj").unwrap(), body);
    // Through that upload: a second one would have left the first open.
    assert_eq!(store.open_uploads(), 0);
}

#[tokio::test]
async fn an_upload_given_back_or_handed_the_wrong_object_leaves_nothing() {
    let store = Arc::new(MemoryStore::new().remote());
    let r = remote(&store);
    let started = r.start_upload("obj", (9 * MIB) as u64).unwrap();
    open_uploads_reach(&store, 1).await;
    r.abandon(started).await;
    assert_eq!(store.open_uploads(), 0);
    assert_eq!(store.bytes("obj"), None);

    // Another size, or another key, than it was started for: refused, and aborted.
    let body = pattern(9 * MIB + 1, 5);
    for (key, size) in [("obj", 9 * MIB), ("other", body.len())] {
        let started = r.start_upload(key, size as u64).unwrap();
        let wrong = r.upload_bytes(body.clone(), "obj", Some(started)).await;
        assert!(
            matches!(&wrong, Err(Error::Permanent(m)) if m.contains("ferry bug")),
            "{wrong:?}"
        );
        assert_eq!(store.open_uploads(), 0);
        assert_eq!(store.bytes("obj"), None);
    }
}

#[tokio::test]
async fn an_object_one_request_carries_starts_nothing() {
    let store = Arc::new(MemoryStore::new().remote());
    let r = remote(&store);
    assert!(r.start_upload("obj", (4 * MIB) as u64).is_none());
    assert!(r.start_upload("obj", 0).is_none());
    assert_eq!(store.open_uploads(), 0);
}

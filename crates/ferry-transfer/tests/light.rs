//! Requests that move no payload worth scheduling (HEADs, listings, deletes, reads of a few
//! KiB) go in a lane of their own: they never wait for the slots blocks hold, as rclone's
//! checkers never wait for its transfers.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use ferry_store::memory::MemoryStore;
use ferry_store::{Meta, Store};
use ferry_transfer::{Class, Engine, EngineConfig, SharedStore};

/// Waits at most this long for what must not wait for the held write.
const PATIENCE: Duration = Duration::from_secs(20);

/// A store hook that holds each request `which` picks until released: it says so on the
/// first channel as the request arrives, and waits for one message on the second.
#[allow(clippy::type_complexity)]
fn gate(
    which: impl Fn(&str) -> bool + Send + Sync + 'static,
) -> (
    impl Fn(&str) + Send + Sync + 'static,
    mpsc::Receiver<()>,
    mpsc::Sender<()>,
) {
    let (arrived_tx, arrived) = mpsc::channel::<()>();
    let (release, released) = mpsc::channel::<()>();
    let (arrived_tx, released) = (Mutex::new(arrived_tx), Mutex::new(released));
    let hold = move |what: &str| {
        if which(what) {
            arrived_tx.lock().unwrap().send(()).unwrap();
            released.lock().unwrap().recv().unwrap();
        }
    };
    (hold, arrived, release)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checks_answer_while_a_write_holds_the_only_slot() {
    let store = Arc::new(MemoryStore::new().remote());
    store
        .put("small", Bytes::from_static(b"a record"), &Meta::new())
        .await
        .unwrap();
    store
        .put("large", Bytes::from(vec![7u8; 1 << 20]), &Meta::new())
        .await
        .unwrap();
    // The write below blocks inside the store until released: it holds the engine's one
    // slot all that time.
    let (hold, arrived, release) = gate(|_| true);
    store.on_write(hold);
    let engine = Engine::new(EngineConfig {
        concurrency: Some(1),
        ..Default::default()
    });
    let remote = engine.remote(store.clone() as SharedStore, Class::Bulk);
    let writer = tokio::spawn({
        let remote = remote.clone();
        async move {
            remote
                .upload_bytes(Bytes::from_static(b"held"), "held", None)
                .await
        }
    });
    tokio::task::spawn_blocking(move || arrived.recv_timeout(PATIENCE))
        .await
        .unwrap()
        .expect("the write reached the store");

    let checks = async {
        let info = remote.head("small").await.unwrap();
        let listed = remote.list("").await.unwrap();
        let header = remote.get_range("large", 0..64).await.unwrap();
        let record = remote.read("small", 64 << 10).await.unwrap();
        remote.delete("gone").await.unwrap();
        (info.size, listed.len(), header.len(), record)
    };
    let (size, listed, header, record) = tokio::time::timeout(PATIENCE, checks)
        .await
        .expect("a HEAD, a listing, a header, a record or a delete waited for the held write");
    assert_eq!((size, listed, header), (8, 2, 64));
    assert_eq!(record, b"a record");

    // A read of a payload takes a slot: it waits for the write.
    let payload = tokio::spawn({
        let remote = remote.clone();
        async move { remote.get_range("large", 0..(512 << 10)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !payload.is_finished(),
        "a 512 KiB read passed the held write's slot"
    );
    release.send(()).unwrap();
    writer.await.unwrap().unwrap();
    assert_eq!(payload.await.unwrap().unwrap().len(), 512 << 10);
}

// Each held check blocks its worker thread inside the store: room for all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 24)]
async fn a_wal_check_does_not_queue_behind_a_backups_checks() {
    let store = Arc::new(MemoryStore::new().remote());
    for key in ["bulk", "wal"] {
        store
            .put(key, Bytes::from_static(b"x"), &Meta::new())
            .await
            .unwrap();
    }
    // Every HEAD of "bulk" blocks inside the store until released: they fill bulk's lane.
    let (hold, arrived, release) = gate(|what| what == "head bulk");
    store.on_read(hold);
    let engine = Engine::new(EngineConfig::default());
    let bulk = engine.remote(store.clone() as SharedStore, Class::Bulk);
    let urgent = bulk.with_class(Class::Urgent);
    let lane = 16;
    let held: Vec<_> = (0..lane + 1)
        .map(|_| {
            let bulk = bulk.clone();
            tokio::spawn(async move { bulk.head("bulk").await })
        })
        .collect();
    let arrived = tokio::task::spawn_blocking(move || {
        (0..lane)
            .map(|_| arrived.recv_timeout(PATIENCE))
            .collect::<Result<Vec<_>, _>>()
            .map(|_| arrived)
    })
    .await
    .unwrap()
    .expect("bulk's checks reached the store");
    // Bulk's lane is full (its seventeenth check waits); the WAL's goes at once.
    let info = tokio::time::timeout(PATIENCE, urgent.head("wal"))
        .await
        .expect("the WAL's check waited behind bulk's");
    assert_eq!(info.unwrap().size, 1);
    assert!(
        arrived.try_recv().is_err(),
        "more bulk checks in flight than its lane holds"
    );
    for _ in 0..lane + 1 {
        release.send(()).unwrap();
    }
    for h in held {
        assert_eq!(h.await.unwrap().unwrap().size, 1);
    }
}

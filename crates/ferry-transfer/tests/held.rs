//! An upload of bytes a caller counts in its own memory budget: what it holds while each
//! write is out. Each block's share returns as that block is answered, so the completion's
//! round trip holds none; an object sent whole holds its own size, not what the caller
//! counted while making it.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ferry_store::memory::MemoryStore;
use ferry_transfer::{Class, Engine, EngineConfig, SharedStore};
use tokio::sync::Semaphore;

const MIB: usize = 1 << 20;
const TOTAL: usize = 64 * MIB;

fn pattern(size: usize, k: usize) -> Bytes {
    (0..size)
        .map(|i| (i * k % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// Uploads `body` counted twice over (as the WAL agent counts a file while it seals it and
/// copies its blocks out), 4 MiB blocks; the bytes held at each write, in order.
async fn held_at_each_write(body: &Bytes) -> Vec<(String, usize)> {
    let store = Arc::new(MemoryStore::new().remote());
    let engine = Engine::new(EngineConfig {
        concurrency: Some(8),
        block_size: Some(4 * MIB as u64),
        ..Default::default()
    });
    let remote = engine.remote(store.clone() as SharedStore, Class::Urgent);
    let budget = Arc::new(Semaphore::new(TOTAL));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (b, s) = (budget.clone(), seen.clone());
    store.on_write(move |what| {
        let held = TOTAL - b.available_permits();
        s.lock().unwrap().push((what.to_string(), held));
    });
    let held = budget
        .clone()
        .acquire_many_owned(2 * body.len() as u32)
        .await
        .unwrap();
    remote
        .upload_held(body.clone(), "seg", held, None)
        .await
        .unwrap();
    assert_eq!(store.bytes("seg").unwrap(), *body);
    assert_eq!(budget.available_permits(), TOTAL, "memory not given back");
    assert_eq!(store.open_uploads(), 0);
    let seen = seen.lock().unwrap().clone();
    seen
}

#[tokio::test]
async fn each_blocks_memory_returns_before_the_upload_is_completed() {
    let body = pattern(16 * MIB + 3, 5);
    let seen = held_at_each_write(&body).await;
    let (first, last) = (&seen[0], seen.last().unwrap());
    // Every block, and no more, is held until the first is answered...
    assert_eq!(first, &("put_block".to_string(), body.len()), "{seen:?}");
    // ...and none while the completion is out.
    assert_eq!(last, &("complete_upload".to_string(), 0), "{seen:?}");
}

#[tokio::test]
async fn an_object_sent_whole_holds_its_own_size() {
    let body = pattern(3 * MIB, 7);
    let seen = held_at_each_write(&body).await;
    assert_eq!(seen, [("put".to_string(), body.len())]);
}

//! Two transfers share one scheduler over a slow link to a real MinIO: the urgent one, started
//! second, finishes first, while the bulk one still makes progress meanwhile.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_store::local::LocalStore;
use ferry_testkit::toxiproxy::s3_behind_proxy;
use ferry_transfer::{Class, Engine, EngineConfig, Progress, SharedStore};
use serde_json::json;

#[derive(Default)]
struct Counter(AtomicU64);
impl Progress for Counter {
    fn advance(&self, bytes: u64) {
        self.0.fetch_add(bytes, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urgent_finishes_first_while_bulk_progresses() {
    let Some((mut cfg, bucket, proxy)) = s3_behind_proxy().await else {
        return;
    };
    proxy.toxic("bandwidth", "upstream", 1.0, json!({"rate": 5000}));
    cfg.endpoint = Some(proxy.endpoint());
    let s3: SharedStore = Arc::new(ferry_store::cloud::CloudStore::s3(&cfg, &bucket).unwrap());

    let dir = std::env::temp_dir().join(ferry_testkit::unique("ferry-prio"));
    std::fs::create_dir_all(&dir).unwrap();
    ferry_testkit::random_file(&dir.join("bulk"), 50 << 20, 1);
    ferry_testkit::random_file(&dir.join("urgent"), 20 << 20, 2);
    let local: SharedStore = Arc::new(LocalStore::new(&dir));

    let engine = Engine::new(EngineConfig {
        concurrency: Some(2),
        ..Default::default()
    });
    let bulk_done = Arc::new(Counter::default());
    let (local, s3) = (
        engine.remote(local, Class::Bulk),
        engine.remote(s3, Class::Bulk),
    );
    let bulk = tokio::spawn({
        let (l, s, p) = (local.clone(), s3.clone(), bulk_done.clone());
        async move {
            l.copy_to("bulk", &s, "bulk", &*p).await.unwrap();
            Instant::now()
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let bulk_before = bulk_done.0.load(Ordering::SeqCst);
    let urgent_started = Instant::now();
    local
        .with_class(Class::Urgent)
        .copy_to("urgent", &s3, "urgent", &Counter::default())
        .await
        .unwrap();
    let urgent_finished = Instant::now();
    let bulk_during = bulk_done.0.load(Ordering::SeqCst) - bulk_before;
    let bulk_finished = bulk.await.unwrap();

    assert!(
        urgent_finished < bulk_finished,
        "urgent work, started later, finished after bulk"
    );
    assert!(bulk_during > 0, "bulk starved while urgent work ran");
    eprintln!(
        "urgent took {:?}; bulk moved {} MiB meanwhile and finished {:?} after urgent",
        urgent_finished - urgent_started,
        bulk_during >> 20,
        bulk_finished - urgent_finished
    );
    std::fs::remove_dir_all(dir).unwrap();
}

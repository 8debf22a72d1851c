//! ferry's transfer engine: objects cut into blocks, blocks sent in parallel through one
//! process-wide [`Scheduler`] whose concurrency tunes itself, under a memory budget, each block
//! checked by the store and retried alone.
//!
//! The engine knows only the [`Store`] trait below it; it never prints. Progress goes to a
//! [`Progress`] the caller implements.
#![warn(missing_docs)]

mod copy;
pub mod digest;
pub mod plan;
mod remote;
pub mod retry;
pub mod scheduler;
mod staged;
mod started;
mod stream;
mod tuner;
mod yielding;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferry_store::Store;

/// What the libraries above the engine need of the store layer's types; the store itself they
/// reach only through a [`Remote`].
pub use ferry_store::{buffer, Error, ObjectInfo, Result};

pub use plan::BlockPlan;
pub use remote::{Described, Remote};
pub use retry::RetryPolicy;
pub use scheduler::{Class, Scheduler, Way};
pub use staged::Staged;
pub use started::Started;

/// A store shared between the engine's tasks.
pub type SharedStore = Arc<dyn Store>;

/// Requests in flight before the tuner has measured anything: enough to fill a 100 MB/s link
/// at 8 MB/s per connection, with the round trip between one block and the next (measured,
/// 1 GiB over wan: 16 carried 91.6-92.2 MB/s up, 24 carried 92.6-94.1; over lfp 89-90 and
/// 90-91; a 4 MB/s uplink is unchanged, the first window steps it down to a few).
const START_CONCURRENCY: usize = 24;
/// The tuner's ceiling; the memory budget caps large blocks well below it.
const MAX_CONCURRENCY: usize = 128;
/// Memory kept outside block buffers (TLS, HTTP, allocator slack) within `max_memory`.
const OVERHEAD: u64 = 48 << 20;
/// Requests that move no payload worth scheduling (HEADs, listings, deletes, reads of a few
/// KiB) in flight at once per class, beside the scheduler's: rclone's checkers beside its
/// transfers. In the scheduler's slots they held back the blocks that fill the link: a WAL
/// bulk load's sixteen existence checks took the tuner's first eight slots twice over, and
/// no block went out for 0.4 s of a 200 ms link (bench/README, "Checks beside the blocks").
/// A lane per class, so that a WAL push's check never queues behind a backup's (behind
/// `ferry serve`, every append-only write begins with one).
const LIGHT_LANE: usize = 16;
/// Largest read that goes in the light lane.
pub(crate) const LIGHT_BYTES: u64 = 128 << 10;

/// Engine settings; `None` means "choose by measurement".
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Fixed number of requests in flight; tuned when `None`.
    pub concurrency: Option<usize>,
    /// Fixed block size; chosen per object when `None`.
    pub block_size: Option<u64>,
    /// Bound on the process's buffered bytes.
    pub max_memory: u64,
    /// Retry policy for every request.
    pub retry: RetryPolicy,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            concurrency: None,
            block_size: None,
            max_memory: 256 << 20,
            retry: RetryPolicy::default(),
        }
    }
}

/// Receives progress events; the CLI draws a bar or stays quiet.
pub trait Progress: Send + Sync {
    /// More bytes are now known to be part of the job.
    fn add_total(&self, _bytes: u64) {}
    /// Bytes finished.
    fn advance(&self, _bytes: u64) {}
}

/// A [`Progress`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;
impl Progress for NoProgress {}

/// What the engine did, for `--json` and the closing line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Objects written.
    pub objects: u64,
    /// Payload bytes written.
    pub bytes: u64,
    /// Largest block size used.
    pub block_size: u64,
    /// Most requests in flight at once.
    pub concurrency: usize,
    /// Requests retried after a transient failure.
    pub retries: u64,
    /// Objects whose content was checked against a digest the source store vouched for.
    pub verified: u64,
}

#[derive(Debug, Default)]
struct Stats {
    objects: AtomicU64,
    bytes: AtomicU64,
    block_size: AtomicU64,
    retries: AtomicU64,
    verified: AtomicU64,
}

/// The transfer engine. Clone it freely: clones share one scheduler.
#[derive(Debug, Clone)]
pub struct Engine {
    sched: Arc<Scheduler>,
    /// The light lanes' permits ([`LIGHT_LANE`]), urgent and bulk.
    light: Arc<[tokio::sync::Semaphore; 2]>,
    cfg: Arc<EngineConfig>,
    stats: Arc<Stats>,
}

impl Engine {
    /// An engine with its own scheduler.
    pub fn new(cfg: EngineConfig) -> Self {
        let budget = cfg
            .max_memory
            .saturating_sub(OVERHEAD)
            .max(cfg.max_memory / 2);
        let (start, fixed) = match cfg.concurrency {
            Some(n) => (n.max(1), true),
            None => (START_CONCURRENCY, false),
        };
        let sched = Scheduler::new(start, MAX_CONCURRENCY, fixed, budget as usize);
        Self {
            sched,
            light: Arc::new([(); 2].map(|()| tokio::sync::Semaphore::new(LIGHT_LANE))),
            cfg: Arc::new(cfg),
            stats: Arc::default(),
        }
    }

    /// The scheduler every transfer of this engine goes through.
    pub fn scheduler(&self) -> &Arc<Scheduler> {
        &self.sched
    }

    /// Totals so far.
    pub fn report(&self) -> Report {
        let s = &self.stats;
        Report {
            objects: s.objects.load(Ordering::Relaxed),
            bytes: s.bytes.load(Ordering::Relaxed),
            block_size: s.block_size.load(Ordering::Relaxed),
            concurrency: self.sched.peak(),
            retries: s.retries.load(Ordering::Relaxed),
            verified: s.verified.load(Ordering::Relaxed),
        }
    }

    /// Runs one request of about `bytes` (a HEAD, a ranged read, a listing: 0 when unknown)
    /// in `class`, with the engine's retries, so that it waits its turn and survives a
    /// transient fault like a block.
    pub(crate) async fn request<T, F, Fut>(
        &self, class: Class, what: &str, bytes: u64, op: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let _slot = self.sched.slot(class, Way::Down).await;
        self.retry(what, bytes, op).await
    }

    /// [`Engine::request`] for a request that moves no payload worth scheduling (see
    /// [`LIGHT_LANE`]): it waits only for its class's light lane, never for the scheduler's
    /// slots, and is not counted by the tuner, whose slots are for the bytes that fill the
    /// link.
    pub(crate) async fn request_light<T, F, Fut>(
        &self, class: Class, what: &str, bytes: u64, op: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let lane = &self.light[usize::from(class == Class::Bulk)];
        let _lane = lane.acquire().await.expect("never closed");
        self.retry(what, bytes, op).await
    }

    /// [`Engine::request`] to `store`, holding a slot only when the store is remote.
    pub(crate) async fn request_to<T, F, Fut>(
        &self, store: &SharedStore, class: Class, what: &str, bytes: u64, op: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let _slot = self.slot_for(store, class, Way::Down).await;
        self.retry(what, bytes, op).await
    }

    /// [`Engine::request_to`] for a write: an urgent one to a remote store tells the
    /// scheduler how long it took, so that bulk work yields while urgent writes run late.
    /// Timed from its slot's clock (a wait for the slot counts only when bulk work caused it,
    /// not when urgent work queued behind itself), and not told when a retry ran meanwhile (a
    /// backoff is not the link's pace).
    pub(crate) async fn write_to<T, F, Fut>(
        &self, store: &SharedStore, class: Class, what: &str, bytes: u64, op: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let slot = self.slot_for(store, class, Way::Up).await;
        let (started, retries) = (
            slot.as_ref()
                .map_or_else(std::time::Instant::now, scheduler::Slot::clock),
            self.stats.retries.load(Ordering::Relaxed),
        );
        let r = self.retry(what, bytes, op).await;
        let retried = self.stats.retries.load(Ordering::Relaxed) != retries;
        if r.is_ok() && !retried && class == Class::Urgent && !store.is_local() {
            self.sched.urgent_written(bytes, started.elapsed());
        }
        r
    }

    /// A slot in `class` for a request to `store` whose payload goes `way`, none for local
    /// disk: a slot counts requests on the wire, so that the tuner sees the link, and reading
    /// or writing local disk, hashing or waiting for memory never holds one.
    pub(crate) async fn slot_for(
        &self, store: &SharedStore, class: Class, way: Way,
    ) -> Option<scheduler::Slot> {
        match store.is_local() {
            true => None,
            false => Some(self.sched.slot(class, way).await),
        }
    }

    /// Lets `store` open connections for a first wave of requests about to go out, beside
    /// the request the caller sends first: as many as the wave less that one, at most as
    /// many as the tuner starts with. Nothing waits for it, and nothing it hears counts; it is given
    /// up after [`WARM_TIMEOUT`] (its requests are not watched for stalls).
    pub(crate) fn warm(&self, store: &SharedStore, key: &str, wave: usize) {
        let n = wave.min(tuner::RAMP_FROM).saturating_sub(1);
        if n == 0 || store.is_local() {
            return;
        }
        let (store, key) = (store.clone(), key.to_string());
        tokio::spawn(async move { tokio::time::timeout(WARM_TIMEOUT, store.warm(&key, n)).await });
    }

    /// Runs one request in `class` once: for a call that is not safe to repeat.
    pub(crate) async fn request_once<T>(
        &self, class: Class, op: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let _slot = self.sched.slot(class, Way::Down).await;
        op.await
    }

    async fn retry<T, F, Fut>(&self, what: &str, bytes: u64, op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let on_retry = |e: &ferry_store::Error, sent| {
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            self.sched.record_error(sent, e.is_overload());
        };
        self.cfg.retry.run(what, bytes, on_retry, op).await
    }

    fn finished(&self, bytes: u64, plan: BlockPlan, verified: bool) {
        self.stats.objects.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.stats
            .block_size
            .fetch_max(plan.largest(bytes), Ordering::Relaxed);
        if verified {
            self.stats.verified.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The hashes of a block off the async workers: an 8 MiB block takes milliseconds. Nothing
/// when nothing will look at them: hashing is a third of a local backup's CPU.
async fn sum_of(data: &bytes::Bytes, need: digest::Need) -> digest::BlockSum {
    if !need.any() || data.len() < (256 << 10) {
        return digest::block_sum(data, need);
    }
    let d = data.clone();
    tokio::task::spawn_blocking(move || digest::block_sum(&d, need))
        .await
        .expect("hash task")
}

/// Time allowed to warm connections; a handshake that takes longer is no help.
const WARM_TIMEOUT: Duration = Duration::from_secs(10);

/// Time allowed to abort an upload after a failure.
const ABORT_TIMEOUT: Duration = Duration::from_secs(60);

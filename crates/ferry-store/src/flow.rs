//! Whether a request is moving: when it last sent or received a byte, and how fast the
//! process moves bytes in all.
//!
//! A slow request is not a dead one. The engine gives each attempt a [`Flow`] and runs it
//! inside [`watch`]; the HTTP client (`cloud::metered`) reports every chunk of a request body
//! handed to the connection and every chunk of a response read from it. The engine then gives
//! up on an attempt only when no byte moved for its stall timeout, however long the attempt
//! has taken. Stores that report nothing (local disk, RADOS) are watched by a deadline instead.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

/// Process start, the origin of every timestamp kept here as milliseconds.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);
/// Bytes every request of the process sent or received.
static MOVED: AtomicU64 = AtomicU64::new(0);
/// Requests that reported flow and have not finished.
static OPEN: AtomicUsize = AtomicUsize::new(0);
/// The process's recent rate, sampled when asked for.
static RATE: Mutex<Sampler> = Mutex::new(Sampler {
    at: None,
    moved: 0,
    rate: 0.0,
});

/// Bytes of a request body that may still sit in socket and network buffers after the client
/// handed the last of it over: up to this much is waited for at the per-request rate before
/// a missing answer counts as a stall.
const IN_BUFFERS: u64 = 8 << 20;
/// The per-request rate assumed for that wait when nothing faster was measured.
const SLOWEST: f64 = 32_000.0;

fn now_ms() -> u64 {
    EPOCH.elapsed().as_millis() as u64
}

/// One attempt's flow of bytes.
#[derive(Debug, Default)]
pub struct Flow {
    /// Milliseconds after [`EPOCH`] of the last byte moved, plus one; 0 while nothing reported.
    last: AtomicU64,
    /// Bytes of a request body handed over and not answered yet.
    unanswered: AtomicU64,
    open: AtomicBool,
}

impl Flow {
    /// A flow nothing has reported on yet.
    pub fn new() -> Arc<Self> {
        LazyLock::force(&EPOCH);
        Arc::default()
    }

    /// How long since a byte moved; `None` when the store reports no flow.
    pub fn idle(&self) -> Option<Duration> {
        match self.last.load(Ordering::Relaxed) {
            0 => None,
            t => Some(Duration::from_millis(now_ms().saturating_sub(t - 1))),
        }
    }

    /// Extra time to wait for an answer after a request body was handed over: the bytes that
    /// may still be in buffers, at the rate each open request moves now.
    pub fn grace(&self) -> Duration {
        let pending = self.unanswered.load(Ordering::Relaxed).min(IN_BUFFERS);
        if pending == 0 {
            return Duration::ZERO;
        }
        let per_request = rate() / OPEN.load(Ordering::Relaxed).max(1) as f64;
        Duration::from_secs_f64(pending as f64 / per_request.max(SLOWEST))
    }

    /// The request started: it counts as moving from now on.
    pub(crate) fn started(&self) {
        if !self.open.swap(true, Ordering::Relaxed) {
            OPEN.fetch_add(1, Ordering::Relaxed);
        }
        self.last.store(now_ms() + 1, Ordering::Relaxed);
    }

    /// `bytes` went out or came in.
    pub(crate) fn moved(&self, bytes: u64) {
        MOVED.fetch_add(bytes, Ordering::Relaxed);
        self.last.store(now_ms() + 1, Ordering::Relaxed);
    }

    /// The whole request body of `bytes` was handed to the connection.
    pub(crate) fn body_sent(&self, bytes: u64) {
        self.unanswered.store(bytes, Ordering::Relaxed);
        self.last.store(now_ms() + 1, Ordering::Relaxed);
    }

    /// The answer's head arrived.
    pub(crate) fn answered(&self) {
        self.unanswered.store(0, Ordering::Relaxed);
        self.last.store(now_ms() + 1, Ordering::Relaxed);
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        if *self.open.get_mut() {
            OPEN.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

tokio::task_local! {
    static CURRENT: Arc<Flow>;
}

/// Runs `fut` with `flow` as the flow its requests report to.
pub async fn watch<F: Future>(flow: Arc<Flow>, fut: F) -> F::Output {
    CURRENT.scope(flow, fut).await
}

/// The flow of the attempt being run, if the engine watches one.
pub(crate) fn current() -> Option<Arc<Flow>> {
    CURRENT.try_with(Arc::clone).ok()
}

/// Bytes every request of this process has moved so far, both ways.
pub fn moved() -> u64 {
    MOVED.load(Ordering::Relaxed)
}

struct Sampler {
    at: Option<Instant>,
    moved: u64,
    rate: f64,
}

/// The process's rate in bytes/s over the last second or so (0 until measured).
pub fn rate() -> f64 {
    let mut s = RATE.lock().unwrap();
    let now = Instant::now();
    let total = moved();
    match s.at {
        None => {
            s.at = Some(now);
            s.moved = total;
        }
        Some(at) if now.duration_since(at) >= Duration::from_secs(1) => {
            let fresh = (total - s.moved) as f64 / now.duration_since(at).as_secs_f64();
            // Weighted towards the newest second, so that the wait follows a changing link.
            s.rate = if s.rate == 0.0 {
                fresh
            } else {
                0.5 * s.rate + 0.5 * fresh
            };
            s.at = Some(now);
            s.moved = total;
        }
        Some(_) => {}
    }
    s.rate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_flow_reports_only_inside_its_watch() {
        let f = Flow::new();
        assert_eq!(f.idle(), None);
        assert!(current().is_none());
        watch(f.clone(), async {
            current().unwrap().started();
        })
        .await;
        assert!(f.idle().unwrap() < Duration::from_secs(1));
    }

    #[test]
    fn the_wait_for_an_answer_covers_buffered_bytes() {
        let f = Flow::new();
        f.started();
        assert_eq!(f.grace(), Duration::ZERO);
        f.body_sent(64 << 20);
        // Nothing measured: at most IN_BUFFERS at the slowest rate.
        let g = f.grace();
        assert!(g > Duration::from_secs(10), "{g:?}");
        assert!(
            g <= Duration::from_secs_f64(IN_BUFFERS as f64 / SLOWEST),
            "{g:?}"
        );
        f.answered();
        assert_eq!(f.grace(), Duration::ZERO);
    }
}

//! Retrying one request alone: bounded attempts, exponential backoff with full jitter (so that
//! many failed blocks do not come back in one synchronised storm), and a watch on each attempt
//! so that a stalled one is abandoned and a slow one is not.

use std::future::Future;
use std::time::{Duration, Instant};

use ferry_store::flow::{self, Flow};
use ferry_store::{Error, Result};
use rand::Rng;

/// How one request is retried.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub attempts: u32,
    /// Backoff before the second attempt (upper bound of its jitter).
    pub base: Duration,
    /// Longest backoff.
    pub cap: Duration,
    /// The stall timeout: an attempt fails when no byte of it moved, either way, for this
    /// long (plus, after an upload's body went out, the time the bytes still in buffers take
    /// to drain: [`Flow::grace`]), however long it has been running. Stores that report no
    /// flow get a deadline instead ([`RetryPolicy::deadline`]).
    pub timeout: Duration,
}

/// For stores that report no flow (local disk, RADOS): the slowest rate a request may crawl
/// at before it counts as stalled.
const FLOOR_RATE: u64 = 1 << 20;
/// Longest a request waits in all on servers that answer "busy, retry after" before those
/// answers count as failed attempts.
const BUSY_BUDGET: Duration = Duration::from_secs(300);
/// How often an attempt's flow is looked at, at most.
const TICK: Duration = Duration::from_millis(250);

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 6,
            base: Duration::from_millis(200),
            cap: Duration::from_secs(10),
            timeout: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// Deadline for one attempt moving `bytes` on a store that reports no flow.
    pub fn deadline(&self, bytes: u64) -> Duration {
        self.timeout + Duration::from_secs_f64(bytes as f64 / FLOOR_RATE as f64)
    }

    /// Full jitter: a uniform pick in `[0, min(cap, base * 2^attempt))`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self.base.saturating_mul(1 << attempt.min(16)).min(self.cap);
        ceiling.mul_f64(rand::rng().random::<f64>())
    }

    /// Runs `op` until it succeeds, fails permanently or runs out of attempts; `on_retry` is
    /// told of every transient failure, with when the failed attempt began.
    pub async fn run<T, F, Fut>(
        &self, what: &str, bytes: u64, mut on_retry: impl FnMut(&Error, Instant), mut op: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let (mut attempt, mut shed) = (0, Duration::ZERO);
        loop {
            let sent = Instant::now();
            let err = match self.watched(what, bytes, op()).await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            // A server shedding load said when to come back: that is a floor under the
            // jittered backoff, and such answers do not use up attempts until they have
            // kept the request waiting BUSY_BUDGET in all.
            let floor = match &err {
                Error::Busy(_, after) if shed < BUSY_BUDGET => {
                    shed += *after;
                    Some(*after)
                }
                _ => None,
            };
            if floor.is_none() {
                attempt += 1;
            }
            if !err.is_transient() || attempt >= self.attempts || self.attempts <= 1 {
                return Err(if attempt > 1 && err.is_transient() {
                    Error::Transient(format!("{err} (gave up after {attempt} attempts)"))
                } else {
                    err
                });
            }
            tracing::debug!(%what, attempt, error = %err, "retrying");
            on_retry(&err, sent);
            let pause = self.backoff(attempt.max(1)) + floor.unwrap_or_default();
            tokio::time::sleep(pause).await;
        }
    }
}

impl RetryPolicy {
    /// Runs one attempt until it ends or stalls, its span traced (what, bytes, ms, ok) for a
    /// timeline of a transfer: `FERRY_LOG=ferry_transfer=trace`, read by bench/timeline.py.
    async fn watched<T>(
        &self, what: &str, bytes: u64, attempt: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let started = Instant::now();
        let r = self.watch(what, bytes, attempt).await;
        let ms = started.elapsed().as_millis() as u64;
        tracing::trace!(%what, bytes, ms, ok = r.is_ok(), "request");
        r
    }

    async fn watch<T>(
        &self, what: &str, bytes: u64, attempt: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let f = Flow::new();
        let attempt = flow::watch(f.clone(), attempt);
        tokio::pin!(attempt);
        let started = Instant::now();
        let deadline = self.deadline(bytes);
        let mut tick =
            tokio::time::interval(TICK.min(self.timeout / 4).max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                r = &mut attempt => return r,
                _ = tick.tick() => {}
            }
            // Sampled on every tick, so that the rate behind `grace` is fresh when needed.
            flow::rate();
            match f.idle() {
                Some(idle) if idle > self.timeout + f.grace() => {
                    return Err(Error::Transient(format!(
                        "{what}: stalled, no byte moved for {idle:.0?}"
                    )));
                }
                Some(_) => {}
                None if started.elapsed() > deadline => {
                    return Err(Error::Transient(format!(
                        "{what}: no answer within {deadline:.0?}"
                    )));
                }
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn quick() -> RetryPolicy {
        RetryPolicy {
            attempts: 4,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(5),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn transient_errors_are_retried_until_success() {
        let calls = AtomicU32::new(0);
        let mut retries = 0;
        let r = quick()
            .run(
                "op",
                0,
                |_, _| retries += 1,
                || async {
                    match calls.fetch_add(1, Ordering::SeqCst) {
                        0 | 1 => Err(Error::Transient("reset".into())),
                        n => Ok(n),
                    }
                },
            )
            .await;
        assert_eq!(r.unwrap(), 2);
        assert_eq!(retries, 2);
    }

    #[tokio::test]
    async fn permanent_errors_and_exhaustion_stop() {
        let calls = AtomicU32::new(0);
        let r: Result<()> = quick()
            .run(
                "op",
                0,
                |_, _| {},
                || async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err(Error::Denied("no".into()))
                },
            )
            .await;
        assert!(matches!(r, Err(Error::Denied(_))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let r: Result<()> = quick()
            .run(
                "op",
                0,
                |_, _| {},
                || async { Err(Error::Transient("x".into())) },
            )
            .await;
        assert!(r
            .unwrap_err()
            .to_string()
            .contains("gave up after 4 attempts"));
    }

    #[tokio::test]
    async fn busy_answers_wait_as_told_and_spare_the_attempts() {
        // 4 attempts; 6 busy answers first: all are waited out, then one failure, then it works.
        let calls = AtomicU32::new(0);
        let started = std::time::Instant::now();
        let after = Duration::from_millis(20);
        let r = quick()
            .run(
                "op",
                0,
                |_, _| {},
                || async {
                    match calls.fetch_add(1, Ordering::SeqCst) {
                        0..=5 => Err(Error::Busy("busy".into(), after)),
                        6 => Err(Error::Transient("reset".into())),
                        n => Ok(n),
                    }
                },
            )
            .await;
        assert_eq!(r.unwrap(), 7);
        // Each busy answer was a floor under its pause.
        assert!(started.elapsed() >= after * 6, "{:?}", started.elapsed());
        // With no retries allowed, busy is an error at once.
        let once = RetryPolicy {
            attempts: 1,
            ..quick()
        };
        let r: Result<()> = once
            .run(
                "op",
                0,
                |_, _| {},
                || async { Err(Error::Busy("busy".into(), after)) },
            )
            .await;
        assert!(matches!(r, Err(Error::Busy(..))));
    }

    #[test]
    fn backoff_is_jittered_and_capped() {
        let p = RetryPolicy::default();
        let picks: Vec<_> = (0..50).map(|_| p.backoff(10)).collect();
        assert!(picks.iter().all(|d| *d <= p.cap));
        assert!(picks.windows(2).any(|w| w[0] != w[1]), "no jitter");
    }
}

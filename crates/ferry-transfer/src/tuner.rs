//! Finds the number of requests in flight that the link rewards.
//!
//! Hill climbing on measured throughput: while a larger limit raises the rate, grow it; when it
//! stops paying, step back; probe again now and then, since links change; halve on errors
//! (throttling, resets), as TCP does.

use std::time::{Duration, Instant};

/// How long one measurement lasts.
const WINDOW: Duration = Duration::from_millis(1500);
/// A rise below this is noise.
const GAIN: f64 = 1.07;
/// Quiet windows before probing upwards again.
const PROBE_AFTER: u32 = 4;

/// Adaptive concurrency limit.
#[derive(Debug)]
pub(crate) struct Tuner {
    limit: usize,
    min: usize,
    max: usize,
    fixed: bool,
    window_start: Instant,
    window_bytes: u64,
    /// The window saw requests waiting for a slot: only then does the limit bind.
    starved: bool,
    best: Option<(f64, usize)>,
    quiet: u32,
}

impl Tuner {
    pub(crate) fn new(start: usize, max: usize, fixed: bool) -> Self {
        let start = start.clamp(1, max.max(1));
        Self {
            limit: start,
            min: if fixed { start } else { 2.min(start) },
            max: if fixed { start } else { max },
            fixed,
            window_start: Instant::now(),
            window_bytes: 0,
            starved: false,
            best: None,
            quiet: 0,
        }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    pub(crate) fn note_waiting(&mut self) {
        self.starved = true;
    }

    /// Records finished bytes; returns true when the limit changed.
    pub(crate) fn on_done(&mut self, bytes: u64, now: Instant) -> bool {
        self.window_bytes += bytes;
        let elapsed = now.duration_since(self.window_start);
        if elapsed < WINDOW {
            return false;
        }
        let rate = self.window_bytes as f64 / elapsed.as_secs_f64();
        let starved = std::mem::take(&mut self.starved);
        self.window_start = now;
        self.window_bytes = 0;
        if self.fixed || !starved {
            return false;
        }
        let before = self.limit;
        match self.best {
            Some((best_rate, best_limit)) if rate < best_rate * GAIN => {
                if self.limit > best_limit && rate < best_rate / GAIN {
                    // The last step up did not pay: return to where it did.
                    self.limit = best_limit;
                    self.quiet = 0;
                } else {
                    self.quiet += 1;
                    if self.quiet >= PROBE_AFTER {
                        self.quiet = 0;
                        self.best = Some((rate, self.limit));
                        self.limit = (self.limit + self.limit / 4).clamp(self.min, self.max);
                    }
                }
            }
            _ => {
                self.best = Some((rate, self.limit));
                self.quiet = 0;
                self.limit = (self.limit + self.limit / 2).clamp(self.min, self.max);
            }
        }
        self.limit != before
    }

    /// A transient failure: back off multiplicatively.
    pub(crate) fn on_error(&mut self) {
        if !self.fixed {
            self.limit = (self.limit * 2 / 3).max(self.min);
            self.best = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link where each request carries `per_conn` bytes/s up to an aggregate `cap`.
    fn simulate(t: &mut Tuner, per_conn: f64, cap: f64, windows: usize) {
        let mut now = Instant::now();
        for _ in 0..windows {
            now += WINDOW;
            t.note_waiting();
            let rate = (t.limit() as f64 * per_conn).min(cap);
            t.on_done((rate * WINDOW.as_secs_f64()) as u64, now);
        }
    }

    #[test]
    fn grows_until_the_link_is_full() {
        let mut t = Tuner::new(4, 128, false);
        t.window_start = Instant::now();
        simulate(&mut t, 8e6, 100e6, 20);
        assert!(
            t.limit() >= 13,
            "limit {} cannot fill 100 MB/s at 8 MB/s each",
            t.limit()
        );
        assert!(
            t.limit() <= 64,
            "limit {} kept growing past the link",
            t.limit()
        );
    }

    #[test]
    fn fixed_limit_never_moves() {
        let mut t = Tuner::new(3, 128, true);
        simulate(&mut t, 8e6, 100e6, 10);
        t.on_error();
        assert_eq!(t.limit(), 3);
    }

    #[test]
    fn errors_back_off() {
        let mut t = Tuner::new(30, 128, false);
        t.on_error();
        assert_eq!(t.limit(), 20);
    }
}

//! Finds the number of requests in flight that the link rewards.
//!
//! Hill climbing on measured throughput: grow while a larger limit raises the rate; when a step
//! does not pay, go back, since fewer requests carrying the same rate mean less memory and a
//! shorter tail at the end of a transfer; now and then probe one step up or down, since links
//! change; cut the limit on errors (throttling, resets), as TCP does.

use std::time::{Duration, Instant};

/// How long one measurement lasts.
const WINDOW: Duration = Duration::from_millis(1500);
/// A change in rate below this factor is noise.
const GAIN: f64 = 1.07;
/// Settled windows before the next probe.
const PROBE_AFTER: u32 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    Up,
    Down,
}

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
    /// Rate and limit of the settled state the current probe is compared with.
    base: Option<(f64, usize)>,
    probe: Option<Probe>,
    settled: u32,
    next_down: bool,
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
            base: None,
            probe: None,
            settled: 0,
            next_down: false,
        }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    pub(crate) fn note_waiting(&mut self) {
        self.starved = true;
    }

    /// Records finished bytes; returns true when the limit rose.
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
        self.evaluate(rate);
        self.limit > before
    }

    fn set(&mut self, limit: usize) {
        self.limit = limit.clamp(self.min, self.max);
    }

    fn evaluate(&mut self, rate: f64) {
        let Some((base_rate, base_limit)) = self.base else {
            self.base = Some((rate, self.limit));
            self.probe = Some(Probe::Up);
            self.set(self.limit + self.limit / 2 + 1);
            return;
        };
        match self.probe.take() {
            Some(Probe::Up) if rate >= base_rate * GAIN => {
                // It paid: keep climbing.
                self.base = Some((rate, self.limit));
                self.probe = Some(Probe::Up);
                self.set(self.limit + self.limit / 2 + 1);
            }
            Some(Probe::Down) if rate * GAIN >= base_rate => {
                // Fewer requests carried as much: keep the smaller limit.
                self.base = Some((rate, self.limit));
            }
            Some(_) => self.set(base_limit),
            None => {
                // Settled: follow the link's present rate, probe now and then.
                self.base = Some((rate, self.limit));
                self.settled += 1;
                if self.settled >= PROBE_AFTER {
                    self.settled = 0;
                    self.next_down = !self.next_down;
                    let (probe, to) = if self.next_down && self.limit > self.min {
                        (Probe::Down, self.limit * 9 / 10)
                    } else {
                        (Probe::Up, self.limit + self.limit / 4 + 1)
                    };
                    self.probe = Some(probe);
                    self.set(to);
                }
            }
        }
    }

    /// A transient failure: back off multiplicatively.
    pub(crate) fn on_error(&mut self) {
        if !self.fixed {
            self.limit = (self.limit * 2 / 3).max(self.min);
            self.base = None;
            self.probe = None;
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
    fn does_not_ratchet_up_on_a_capped_link() {
        let mut t = Tuner::new(16, 128, false);
        simulate(&mut t, 8e6, 100e6, 60);
        assert!(
            t.limit() <= 20,
            "limit {} crept up though more requests never paid",
            t.limit()
        );
        assert!(
            t.limit() >= 10,
            "limit {} fell below what fills the link",
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

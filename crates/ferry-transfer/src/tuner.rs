//! Finds the knee: the fewest requests in flight that carry what the link carries.
//!
//! The rate is measured on the wire (bytes every request sent or received, from
//! `ferry_store::flow`), or from finished requests for stores that report no flow, in windows
//! of [`WINDOW`]; the window after a change is skipped, while new connections ramp up.
//! - Climb (x1.5) only while a step raises the rate by [`GAIN`]; a step that does not pay is
//!   taken back, since more requests carrying the same rate only queue behind each other (each
//!   block then takes longer: the slow-uplink failure, 25 streams at 0.12 MB/s each).
//! - Descend (x0.75) while fewer requests carry [`KEEP`] of the best rate seen before the
//!   descent (never the last step's, or noise would ratchet the limit down).
//! - Settled, probe every [`PROBE_AFTER`] windows, up and down in turn: links change.
//! - A transient error cuts the limit by a third, as TCP does.

use std::time::{Duration, Instant};

/// How long one measurement lasts.
const WINDOW: Duration = Duration::from_secs(2);
/// A climb must raise the rate by this factor to count (below it is noise).
const GAIN: f64 = 1.07;
/// A descent must keep this share of the best rate: the engine's promise is 0.95 of the link.
const KEEP: f64 = 0.97;
/// Settled windows before the next probe.
const PROBE_AFTER: u32 = 3;

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
    /// Counter readings at the window's start: bytes on the wire, bytes of finished requests.
    wire_at: u64,
    done_at: u64,
    /// The window saw requests waiting for a slot: only then does the limit bind.
    starved: bool,
    /// The limit changed at the start of this window: its rate is not yet the new limit's.
    settling: bool,
    /// Rate and limit of the state the current probe is compared with.
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
            wire_at: 0,
            done_at: 0,
            starved: false,
            settling: false,
            base: None,
            probe: None,
            settled: 0,
            next_down: true,
        }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    pub(crate) fn note_waiting(&mut self) {
        self.starved = true;
    }

    /// Looks at the counters (`wire`: bytes on the wire; `done`: bytes of finished requests,
    /// both since the process started); returns true when the limit rose.
    pub(crate) fn tick(&mut self, wire: u64, done: u64, now: Instant) -> bool {
        let elapsed = now.duration_since(self.window_start);
        if elapsed < WINDOW {
            return false;
        }
        let bytes = match wire - self.wire_at {
            0 => done - self.done_at,
            w => w,
        };
        let rate = bytes as f64 / elapsed.as_secs_f64();
        let starved = std::mem::take(&mut self.starved);
        let settling = std::mem::take(&mut self.settling);
        self.window_start = now;
        self.wire_at = wire;
        self.done_at = done;
        if self.fixed || settling || (!starved && self.probe.is_none()) {
            return false;
        }
        let before = self.limit;
        self.evaluate(rate);
        self.limit > before
    }

    fn set(&mut self, limit: usize) {
        let limit = limit.clamp(self.min, self.max);
        self.settling |= limit != self.limit;
        self.limit = limit;
    }

    fn up(&self) -> usize {
        self.limit + self.limit / 2 + 1
    }

    fn down(&self) -> usize {
        (self.limit * 3 / 4).min(self.limit - 1)
    }

    fn evaluate(&mut self, rate: f64) {
        let Some((base_rate, base_limit)) = self.base else {
            self.base = Some((rate, self.limit));
            self.probe = Some(Probe::Up);
            self.set(self.up());
            return;
        };
        match self.probe.take() {
            Some(Probe::Up) if rate >= base_rate * GAIN => {
                // It paid: keep climbing.
                self.base = Some((rate, self.limit));
                self.probe = Some(Probe::Up);
                self.set(self.up());
            }
            Some(Probe::Down) if rate >= base_rate * KEEP && self.limit > self.min => {
                // Fewer requests carried as much as the best before the descent: go on down.
                self.base = Some((base_rate.max(rate), self.limit));
                self.probe = Some(Probe::Down);
                self.set(self.down());
            }
            Some(Probe::Down) if rate >= base_rate * KEEP => {
                self.base = Some((base_rate.max(rate), self.limit));
            }
            Some(p) => {
                // Taken back; the next probe goes the other way.
                self.next_down = p == Probe::Up;
                self.settled = 0;
                self.set(base_limit);
            }
            None => {
                // Settled: follow the link's present rate, probe now and then.
                self.base = Some((rate, self.limit));
                self.settled += 1;
                if self.settled >= PROBE_AFTER {
                    self.settled = 0;
                    let down = self.next_down && self.limit > self.min;
                    self.next_down = !self.next_down;
                    let (probe, to) = if down {
                        (Probe::Down, self.down())
                    } else {
                        (Probe::Up, self.up())
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
            self.set((self.limit * 2 / 3).max(self.min));
            self.base = None;
            self.probe = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link where `n` requests carry `rate(n)` bytes/s; runs `windows` windows, each with
    /// requests waiting, and returns the limits seen.
    fn simulate(t: &mut Tuner, rate: impl Fn(usize) -> f64, windows: usize) -> Vec<usize> {
        let mut now = t.window_start;
        let mut wire = 0u64;
        let mut seen = Vec::new();
        for _ in 0..windows {
            now += WINDOW;
            t.note_waiting();
            wire += (rate(t.limit()) * WINDOW.as_secs_f64()) as u64;
            t.tick(wire, 0, now);
            seen.push(t.limit());
        }
        seen
    }

    /// Each request carries `per` up to an aggregate `cap`.
    fn capped(per: f64, cap: f64) -> impl Fn(usize) -> f64 {
        move |n| (n as f64 * per).min(cap)
    }

    #[test]
    fn grows_until_the_link_is_full() {
        let mut t = Tuner::new(4, 128, false);
        let seen = simulate(&mut t, capped(8e6, 100e6), 30);
        let l = *seen.last().unwrap();
        assert!(l >= 13, "limit {l} cannot fill 100 MB/s at 8 MB/s each");
        assert!(l <= 40, "limit {l} kept growing past the link");
    }

    #[test]
    fn a_slow_uplink_gets_few_requests() {
        // 4 MB/s in all, any one request can fill it: the 25 streams are the failure.
        let mut t = Tuner::new(16, 128, false);
        let seen = simulate(&mut t, capped(100e6, 4e6), 60);
        let tail = &seen[40..];
        assert!(tail.iter().all(|&l| l <= 4), "limits {seen:?}");
    }

    #[test]
    fn does_not_ratchet_up_on_a_capped_link() {
        let mut t = Tuner::new(16, 128, false);
        let seen = simulate(&mut t, capped(8e6, 100e6), 80);
        let tail = &seen[40..];
        assert!(tail.iter().all(|&l| l <= 30), "crept up: {seen:?}");
        assert!(
            tail.iter().filter(|&&l| l >= 13).count() * 2 > tail.len(),
            "mostly below what fills the link: {seen:?}"
        );
    }

    #[test]
    fn follows_a_link_that_changes() {
        // 8 MB/s per request; the aggregate drops from 100 to 25 MB/s, then comes back.
        let mut t = Tuner::new(16, 128, false);
        simulate(&mut t, capped(8e6, 100e6), 30);
        let low = simulate(&mut t, capped(8e6, 25e6), 40);
        assert!(
            low[20..].iter().all(|&l| l <= 8),
            "kept 100 MB/s worth of requests at 25: {low:?}"
        );
        let back = simulate(&mut t, capped(8e6, 100e6), 40);
        assert!(
            back[20..].iter().any(|&l| l >= 13),
            "did not climb back: {back:?}"
        );
    }

    #[test]
    fn fixed_limit_never_moves() {
        let mut t = Tuner::new(3, 128, true);
        simulate(&mut t, capped(8e6, 100e6), 10);
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

//! Bulk work yields to urgent work on the backend. A slot held by a backup's upload over a
//! WAN is also a share of the link: with dozens of bulk transfers under way, a WAL segment
//! moves at its TCP share among them (measured, 50 tenants behind the wan profile: WAL p50
//! 0.2 s alone, 0.5-1 s under a flood of backups, p99 3.5 s). LEDBAT's idea, at the
//! scheduler: the time an urgent transfer takes per byte is compared with the least seen
//! lately for transfers of its size; past twice that, the slots the bulk classes may hold are
//! cut by a quarter, and they grow back by one for each urgent transfer on time. Both at most
//! every [`STEP`], so that a cut shows before the next; bulk keeps a floor of slots, so
//! backups, restores and maintenance always move.
//!
//! The signal is measured by the server (slot wait and backend time of writes it stored),
//! never by how fast a client sends: a client trickling its WAL cannot throttle everyone's
//! backups, nor can a write refused at once (it moved no bytes) or a read (reads run at
//! another speed than writes).

use std::time::{Duration, Instant};

/// Transfers smaller than this say more about round trips than about the link: not counted.
const MIN_BYTES: u64 = 256 << 10;
/// Size classes by powers of two from [`MIN_BYTES`]; the last takes everything larger.
const CLASSES: usize = 10;
/// The least time per byte is kept over one to two of these windows.
const WINDOW: Duration = Duration::from_secs(60);
/// An urgent transfer slower per byte than this many times the least is late.
const SLACK: f64 = 2.0;
/// A late transfer cuts the bulk limit to this share of itself.
const CUT: f64 = 0.75;
/// The limit moves at most once per this long.
const STEP: Duration = Duration::from_millis(250);

/// The slots the bulk classes may hold together, moved by how urgent transfers fare.
#[derive(Debug)]
pub(crate) struct BulkLimit {
    /// Off for a backend on local disk: there the contention is for the cores and the disk,
    /// which fewer bulk slots do not give to the WAL (measured: 50 tenants, local backend,
    /// the limit sat at its floor while the WAL stayed late, and a synchronised start of 50
    /// backups crawled through 3 slots).
    on: bool,
    limit: f64,
    cap: usize,
    floor: usize,
    /// Per size class, the least seconds per byte in this window and the one before.
    best: [[f64; 2]; CLASSES],
    window: Instant,
    moved: Instant,
}

impl BulkLimit {
    /// A limit of `cap` slots, never below a sixteenth of it (two at the least).
    pub(crate) fn new(cap: usize) -> Self {
        let now = Instant::now();
        BulkLimit {
            on: true,
            limit: cap as f64,
            cap,
            floor: (cap / 16).max(2).min(cap),
            best: [[f64::INFINITY; 2]; CLASSES],
            window: now,
            moved: now - STEP,
        }
    }

    /// Slots the bulk classes may hold now.
    pub(crate) fn get(&self) -> usize {
        self.limit as usize
    }

    /// Turns the limit on or off; off, it stays at the cap.
    pub(crate) fn set_on(&mut self, on: bool) {
        self.on = on;
        if !on {
            self.limit = self.cap as f64;
        }
    }

    /// An urgent transfer of `bytes` took `took` from asking for its slot to its end.
    pub(crate) fn urgent_done(&mut self, took: Duration, bytes: u64, now: Instant) {
        if !self.on || bytes < MIN_BYTES {
            return;
        }
        let since = now.duration_since(self.window);
        if since >= WINDOW {
            // After a quiet spell longer than two windows, nothing seen before is recent.
            let keep = since < 2 * WINDOW;
            for b in &mut self.best {
                *b = [f64::INFINITY, if keep { b[0] } else { f64::INFINITY }];
            }
            self.window = now;
        }
        let class = ((bytes / MIN_BYTES).ilog2() as usize).min(CLASSES - 1);
        let per_byte = took.as_secs_f64() / bytes as f64;
        let [now_best, before] = self.best[class];
        let least = now_best.min(before);
        self.best[class][0] = now_best.min(per_byte);
        if !least.is_finite() || now.duration_since(self.moved) < STEP {
            return;
        }
        self.moved = now;
        self.limit = match per_byte > SLACK * least {
            true => (self.limit * CUT).max(self.floor as f64),
            false => (self.limit + 1.0).min(self.cap as f64),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn late_urgent_transfers_cut_bulk_and_timely_ones_give_it_back() {
        let mut l = BulkLimit::new(56);
        let mut now = Instant::now();
        let mut step = |l: &mut BulkLimit, ms: u64| {
            now += STEP;
            l.urgent_done(Duration::from_millis(ms), MIB, now);
        };
        // On time (200 ms a MiB): the limit stays at the cap.
        for _ in 0..20 {
            step(&mut l, 200);
        }
        assert_eq!(l.get(), 56);
        // Late (1 s a MiB): cut to the floor within a few seconds, never below it.
        for _ in 0..20 {
            step(&mut l, 1000);
        }
        assert_eq!(l.get(), 3);
        // Within twice the least: back up, one slot a step.
        for _ in 0..10 {
            step(&mut l, 350);
        }
        assert_eq!(l.get(), 13);
        for _ in 0..100 {
            step(&mut l, 250);
        }
        assert_eq!(l.get(), 56);
    }

    #[test]
    fn small_and_differently_sized_transfers_are_judged_apart() {
        let mut l = BulkLimit::new(56);
        let mut now = Instant::now();
        // 16 MiB segments at 2 s set their own least; a 1 MiB push at 400 ms is not late
        // against them (the least of its own size is what counts), nor is a 4 KiB file
        // that takes a round trip of 100 ms.
        for (ms, bytes) in [(2000, 16 * MIB), (400, MIB), (2000, 16 * MIB), (400, MIB)] {
            now += STEP;
            l.urgent_done(Duration::from_millis(ms), bytes, now);
        }
        for _ in 0..10 {
            now += STEP;
            l.urgent_done(Duration::from_millis(100), 4096, now);
        }
        assert_eq!(l.get(), 56);
        // A cut waits for the step: two late transfers at once cut once.
        now += STEP;
        l.urgent_done(Duration::from_millis(1000), MIB, now);
        l.urgent_done(Duration::from_millis(1000), MIB, now);
        assert_eq!(l.get(), 42);
    }

    #[test]
    fn off_it_stays_at_the_cap() {
        let mut l = BulkLimit::new(56);
        l.set_on(false);
        let mut now = Instant::now();
        for ms in [100, 1000, 1000, 1000, 1000] {
            now += STEP;
            l.urgent_done(Duration::from_millis(ms), MIB, now);
        }
        assert_eq!(l.get(), 56);
    }

    #[test]
    fn a_quiet_spell_forgets_the_least() {
        let mut l = BulkLimit::new(56);
        let mut now = Instant::now();
        l.urgent_done(Duration::from_millis(100), MIB, now);
        // Nothing for three windows; then the link is slower: the old least is not held
        // against it.
        now += 3 * WINDOW;
        for _ in 0..10 {
            now += STEP;
            l.urgent_done(Duration::from_millis(500), MIB, now);
        }
        assert_eq!(l.get(), 56);
    }

    #[test]
    fn the_least_is_forgotten_after_two_windows() {
        let mut l = BulkLimit::new(56);
        let mut now = Instant::now();
        l.urgent_done(Duration::from_millis(100), MIB, now);
        // The link got slower for good: after two windows, 500 ms is the new normal.
        for _ in 0..((2 * WINDOW.as_millis() / STEP.as_millis()) + 4) {
            now += STEP;
            l.urgent_done(Duration::from_millis(500), MIB, now);
        }
        let before = l.get();
        for _ in 0..20 {
            now += STEP;
            l.urgent_done(Duration::from_millis(500), MIB, now);
        }
        assert!(l.get() > before, "{before} -> {}", l.get());
        assert_eq!(l.get(), (before + 20).min(56));
    }
}

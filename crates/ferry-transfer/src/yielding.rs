//! Bulk work yields to urgent work on the wire. A backup's block on a WAN is also a share
//! of the link: with dozens of bulk requests under way, a WAL segment moves at its TCP share
//! among them (measured behind `ferry serve`, 50 tenants over the wan profile: a 1 MiB push
//! took 0.2 s alone, 0.7-1.2 s at p99 of its time on the wire under a flood of backups).
//! LEDBAT's idea, at the scheduler: the time an urgent write takes per byte (from its slot to
//! its answer, or from asking for the slot when bulk work made it wait there; retried ones not
//! counted) is compared with the least seen lately for writes of its size. Past half again
//! that, the bulk requests that may be in flight are cut to three quarters of those in flight;
//! not at all while bulk holds no more than its floor, since the delay is then not its doing.
//! They grow back by one for each urgent write within a quarter of the least, and hold in
//! between (uncut once they reach the tuner's limit, once urgent work is quiet for a second,
//! or once no urgent write was judged for [`UNJUDGED`]). Both at most every [`STEP`], so that
//! a cut shows before the next; bulk keeps a floor, so backups always move. Bulk work that
//! starts after a pause while urgent work runs starts from that floor
//! ([`BulkCap::start_low`]).
//!
//! Only writes to a remote store count: a local disk has no link to share, and reads run at
//! another speed than writes. Below the caller's slots, so that a client trickling its WAL
//! into `ferry serve` cannot throttle everyone's backups: the time is the engine's own.

use std::time::{Duration, Instant};

/// Transfers smaller than this say more about round trips than about the link: not counted.
const MIN_BYTES: u64 = 256 << 10;
/// Size classes by powers of two from [`MIN_BYTES`]; the last takes everything larger.
const CLASSES: usize = 10;
/// The least time per byte is kept over one to two of these windows.
const WINDOW: Duration = Duration::from_secs(60);
/// An urgent transfer slower per byte than this many times the least is late. Below the
/// WAL's target (its p99 at most twice its value alone): a cut that waits for a write at
/// twice its time comes when the p99 already is (measured behind `ferry serve` with clients
/// that keep bulk work ready: p99 4.4-4.8x alone at a slack of 2).
const SLACK: f64 = 1.5;
/// An urgent transfer within this many times the least is on time: bulk may grow. Between
/// this and [`SLACK`] the cap holds, so that it settles instead of swinging from its floor
/// to the limit and back every few seconds (seen: 2-13 with 5-10 bulk requests in flight).
const EASY: f64 = 1.25;
/// A late transfer cuts the bulk cap to this share of itself.
const CUT: f64 = 0.75;
/// The cap moves at most once per this long.
const STEP: Duration = Duration::from_millis(250);
/// A cut holds only while urgent writes keep showing how they fare: with none judged for this
/// long it is lifted, whatever else urgent work has in flight (small reads and writes are not
/// judged, and a stream of them would otherwise hold bulk work at its floor for good).
pub(crate) const UNJUDGED: Duration = Duration::from_secs(5);
/// Bulk requests always allowed in flight: a sixteenth of the tuner's limit, and at least
/// this many (fewer only when the limit itself is lower).
const FLOOR: usize = 2;

fn floor(limit: usize) -> usize {
    (limit / 16).max(FLOOR)
}

/// How many bulk requests may be in flight, moved by how urgent writes fare.
#[derive(Debug)]
pub(crate) struct BulkCap {
    /// `None` while uncut: the tuner's limit alone bounds bulk work.
    cap: Option<f64>,
    /// Per size class, the least seconds per byte in this window and the one before.
    best: [[f64; 2]; CLASSES],
    window: Instant,
    moved: Instant,
    /// When an urgent write was last judged; never, at first.
    judged: Option<Instant>,
}

impl BulkCap {
    /// An uncut cap.
    pub(crate) fn new() -> Self {
        let now = Instant::now();
        BulkCap {
            cap: None,
            best: [[f64::INFINITY; 2]; CLASSES],
            window: now,
            moved: now - STEP,
            judged: None,
        }
    }

    /// Bulk requests that may be in flight now, under the tuner's `limit`.
    pub(crate) fn get(&self, limit: usize) -> usize {
        match self.cap {
            None => limit,
            Some(c) => (c as usize).max(floor(limit)).min(limit),
        }
    }

    /// Lifts a cut (urgent work went quiet); true when there was one.
    pub(crate) fn uncut(&mut self) -> bool {
        self.cap.take().is_some()
    }

    /// Whether no urgent write was judged for [`UNJUDGED`] by `now`: a cut then has nothing
    /// to go by.
    pub(crate) fn unjudged(&self, now: Instant) -> bool {
        self.judged
            .is_none_or(|t| now.saturating_duration_since(t) >= UNJUDGED)
    }

    /// Bulk work starts after a pause while urgent work runs: from its floor, and up as
    /// urgent writes stay on time. Bulk work that arrives all at once would otherwise take
    /// the whole limit before the first late write could cut it, and hold it for as long as
    /// its blocks take (measured behind `ferry serve`, ten tenants each sending two 16 MiB
    /// packs at once beside 50 pushing WAL: two thirds of the flood's slow pushes were in its
    /// first five seconds).
    pub(crate) fn start_low(&mut self, limit: usize) {
        let floor = floor(limit) as f64;
        self.cap = Some(self.cap.map_or(floor, |c| c.min(floor)));
    }

    /// An urgent write of `bytes` took `took` (on the wire, and waiting for a slot bulk work
    /// held), while the tuner's limit was `limit`; `bulk` bulk requests are in flight as it
    /// ends. True when the cap grew.
    pub(crate) fn urgent_done(
        &mut self, took: Duration, bytes: u64, now: Instant, limit: usize, bulk: usize,
    ) -> bool {
        if bytes < MIN_BYTES {
            return false;
        }
        self.judged = Some(now);
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
            return false;
        }
        self.moved = now;
        let at = self.get(limit) as f64;
        let late = per_byte > SLACK * least;
        let easy = per_byte <= EASY * least;
        self.cap = match late {
            // Late while bulk work holds no more than its floor: the delay is not bulk's to
            // give back (the store, or the host's CPU, is slow), and a cut would only hold
            // back the bulk requests to come (measured behind `ferry serve`: cut from 31 to
            // 2 in 3 s while 1-2 backups were on the wire).
            true if bulk <= floor(limit) => self.cap,
            // A cut starts from what bulk has in flight: a cap above it holds nothing back.
            true => Some((at.min(bulk as f64) * CUT).max(floor(limit) as f64)),
            false if easy => (at + 1.0 < limit as f64).then_some(at + 1.0),
            false => self.cap,
        };
        tracing::debug!(late, easy, cap = self.get(limit), limit, bulk, "bulk cap");
        easy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn late_urgent_transfers_cut_bulk_and_timely_ones_give_it_back() {
        let mut l = BulkCap::new();
        let mut now = Instant::now();
        let mut step = |l: &mut BulkCap, ms: u64| {
            now += STEP;
            l.urgent_done(Duration::from_millis(ms), MIB, now, 56, 56);
        };
        // On time (200 ms a MiB): bulk keeps the whole limit.
        for _ in 0..20 {
            step(&mut l, 200);
        }
        assert_eq!(l.get(56), 56);
        // Late (1 s a MiB): cut to the floor within a few seconds, never below it.
        for _ in 0..20 {
            step(&mut l, 1000);
        }
        assert_eq!(l.get(56), 3);
        // Between a quarter and half again the least: the cap holds where it is.
        for _ in 0..10 {
            step(&mut l, 280);
        }
        assert_eq!(l.get(56), 3);
        // Within a quarter more than the least: back up, one slot a step.
        for _ in 0..10 {
            step(&mut l, 240);
        }
        assert_eq!(l.get(56), 13);
        // Half again the least and a little more is late.
        step(&mut l, 310);
        assert_eq!(l.get(56), 9);
        for _ in 0..100 {
            step(&mut l, 250);
        }
        assert_eq!(l.get(56), 56);
    }

    #[test]
    fn only_bulk_work_beyond_its_floor_is_cut_and_from_what_it_has_in_flight() {
        let mut l = BulkCap::new();
        let mut now = Instant::now();
        l.urgent_done(Duration::from_millis(200), MIB, now, 48, 48);
        // Late while bulk holds its floor (48 / 16 = 3 requests) or less: nothing to cut.
        for bulk in [3, 0, 2, 3] {
            now += STEP;
            l.urgent_done(Duration::from_millis(1000), MIB, now, 48, bulk);
        }
        assert_eq!(l.get(48), 48);
        // Late with 8 bulk requests on the wire: cut from those 8, not from the cap of 48.
        now += STEP;
        l.urgent_done(Duration::from_millis(1000), MIB, now, 48, 8);
        assert_eq!(l.get(48), 6);
        // And never below the floor.
        now += STEP;
        l.urgent_done(Duration::from_millis(1000), MIB, now, 48, 4);
        assert_eq!(l.get(48), 3);
    }

    #[test]
    fn small_and_differently_sized_transfers_are_judged_apart() {
        let mut l = BulkCap::new();
        let mut now = Instant::now();
        // 16 MiB segments at 2 s set their own least; a 1 MiB push at 400 ms is not late
        // against them (the least of its own size is what counts), nor is a 4 KiB file
        // that takes a round trip of 100 ms.
        for (ms, bytes) in [(2000, 16 * MIB), (400, MIB), (2000, 16 * MIB), (400, MIB)] {
            now += STEP;
            l.urgent_done(Duration::from_millis(ms), bytes, now, 56, 56);
        }
        for _ in 0..10 {
            now += STEP;
            l.urgent_done(Duration::from_millis(100), 4096, now, 56, 56);
        }
        assert_eq!(l.get(56), 56);
        // A cut waits for the step: two late transfers at once cut once.
        now += STEP;
        l.urgent_done(Duration::from_millis(1000), MIB, now, 56, 56);
        l.urgent_done(Duration::from_millis(1000), MIB, now, 56, 56);
        assert_eq!(l.get(56), 42);
    }

    #[test]
    fn a_cap_grown_back_to_the_limit_follows_the_limit() {
        let mut l = BulkCap::new();
        let mut now = Instant::now();
        l.urgent_done(Duration::from_millis(200), MIB, now, 8, 8);
        now += STEP;
        l.urgent_done(Duration::from_millis(1000), MIB, now, 8, 8);
        assert_eq!(l.get(8), 6);
        for _ in 0..2 {
            now += STEP;
            l.urgent_done(Duration::from_millis(200), MIB, now, 8, 8);
        }
        // Back at the limit it is uncut: the tuner's next step up is bulk's too.
        assert_eq!(l.get(32), 32);
    }

    #[test]
    fn a_quiet_spell_forgets_the_least() {
        let mut l = BulkCap::new();
        let mut now = Instant::now();
        l.urgent_done(Duration::from_millis(100), MIB, now, 56, 56);
        // Nothing for three windows; then the link is slower: the old least is not held
        // against it.
        now += 3 * WINDOW;
        for _ in 0..10 {
            now += STEP;
            l.urgent_done(Duration::from_millis(500), MIB, now, 56, 56);
        }
        assert_eq!(l.get(56), 56);
    }

    #[test]
    fn the_least_is_forgotten_after_two_windows() {
        let mut l = BulkCap::new();
        let mut now = Instant::now();
        l.urgent_done(Duration::from_millis(100), MIB, now, 56, 56);
        // The link got slower for good: after two windows, 500 ms is the new normal.
        for _ in 0..((2 * WINDOW.as_millis() / STEP.as_millis()) + 4) {
            now += STEP;
            l.urgent_done(Duration::from_millis(500), MIB, now, 56, 56);
        }
        let before = l.get(56);
        for _ in 0..20 {
            now += STEP;
            l.urgent_done(Duration::from_millis(500), MIB, now, 56, 56);
        }
        assert!(l.get(56) > before, "{before} -> {}", l.get(56));
        assert_eq!(l.get(56), (before + 20).min(56));
    }
}

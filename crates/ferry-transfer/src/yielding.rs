//! Bulk writes yield to urgent ones on the wire. A backup's block on a WAN is also a share
//! of the link: with dozens of bulk requests under way, a WAL segment moves at its TCP share
//! among them (measured behind `ferry serve`, 50 tenants over the wan profile: a 1 MiB push
//! took 0.2 s alone, 0.7-1.2 s at p99 of its time on the wire under a flood of backups).
//! LEDBAT's idea, at the scheduler: the time an urgent write takes per byte (from its slot to
//! its answer, or from asking for the slot when bulk work made it wait there; retried ones not
//! counted) is compared with the least seen lately for writes of its size. The writes that
//! end in a [`STEP`] are judged together: past a quarter of them late (over half again the
//! least), the bulk writes that may be in flight are cut to three quarters of those in
//! flight (bulk reads come down the other way of the link: not held, `scheduler.rs`); not while bulk holds no more than its floor, since the delay is then not its doing.
//! After a cut, only writes that began once bulk was down to it are judged (the cut shows
//! once the requests above it end: each is a pack of seconds on a WAN). With half of them or
//! more within a quarter of the least (and no cut), bulk grows by one, or by a quarter near
//! where the last overload began; in between it holds. One write alone says as much about
//! the host's CPU as about the link (measured behind `ferry serve` with restic's clients on
//! the same two cores: judged one write at a time, the cap stayed low and backups fell from
//! 20.4 to 12.4 MB/s). The cap never passes the tuner's limit and follows it up one request a
//! step; it is lifted once urgent work is quiet for a second, or once no urgent write was
//! judged for [`UNJUDGED`]. Bulk keeps a floor, so backups always move. Bulk work that starts after a pause while urgent work runs
//! starts from that floor ([`BulkCap::start_low`]).
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
/// From this share of the bulk requests in flight at the last cut to as far above it, the
/// cap grows by [`NEAR_GROWTH`] a step instead of one: where urgent writes were late is near
/// (beyond it, they may no longer be: the usual steps again), and a
/// new bulk request shows on the wire only about a second after it starts (measured behind
/// `ferry serve`, 50 tenants' WAL over wan: grown by one a step, the cap went from 5 to 20 in
/// 4 s, the writes were late all at once at 17-22, and a fifth of them were late).
const NEAR: f64 = 0.85;
/// Growth a step near the last cut: one request a second.
const NEAR_GROWTH: f64 = 0.25;
/// A step: the cap moves at most once per this long.
pub(crate) const STEP: Duration = Duration::from_millis(250);
/// A step's writes are judged once this many are in; or, with fewer, once a step of this many
/// times [`STEP`] has gone by (urgent work of a few large writes: one agent's WAL segments).
const SAMPLES: u32 = 4;
/// More than this share of a step's writes late: a cut.
const LATE_SHARE: f64 = 0.25;
/// At least this share of a step's writes on time (and no cut): one more bulk request.
const EASY_SHARE: f64 = 0.5;
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
    /// `None` while uncut (no urgent write judged lately): the tuner's limit alone bounds
    /// bulk work.
    cap: Option<f64>,
    /// Per size class, the least seconds per byte in this window and the one before.
    best: [[f64; 2]; CLASSES],
    window: Instant,
    /// When the last step was judged.
    decided: Instant,
    /// This step's writes so far.
    tally: Tally,
    /// When an urgent write was last judged; never, at first.
    judged: Option<Instant>,
    /// Urgent writes that began before this are not judged: they ran beside bulk work that
    /// the last cut has taken off the wire since. `None` while it has not (bulk still holds
    /// more requests than the cut allows).
    judge_from: Option<Instant>,
    /// Bulk requests in flight where the last overload began (the first of its cuts): near
    /// it the cap grows slowly.
    peak: Option<f64>,
    /// Whether the last move was a cut: a cut that follows one is the same overload.
    cutting: bool,
    /// The most bulk requests seen in flight in this step.
    most: usize,
}

/// How a step's urgent writes fared against the least of their size.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    n: u32,
    late: u32,
    easy: u32,
}

impl Tally {
    fn late(&self) -> bool {
        f64::from(self.late) > LATE_SHARE * f64::from(self.n)
    }

    fn easy(&self) -> bool {
        f64::from(self.easy) >= EASY_SHARE * f64::from(self.n)
    }
}

impl BulkCap {
    /// An uncut cap.
    pub(crate) fn new() -> Self {
        let now = Instant::now();
        BulkCap {
            cap: None,
            best: [[f64::INFINITY; 2]; CLASSES],
            window: now,
            decided: now,
            tally: Tally::default(),
            judged: None,
            judge_from: Some(now),
            peak: None,
            cutting: false,
            most: 0,
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
        self.peak = None;
        self.judge_from = Some(self.judge_from.unwrap_or(self.decided));
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
    /// held), ending at `now`: one of this step's.
    pub(crate) fn urgent_done(&mut self, took: Duration, bytes: u64, now: Instant) {
        if bytes < MIN_BYTES {
            return;
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
        let began = now.checked_sub(took).unwrap_or(now);
        if least.is_finite() && self.judge_from.is_some_and(|t| began >= t) {
            let t = &mut self.tally;
            t.n += 1;
            t.late += u32::from(per_byte > SLACK * least);
            t.easy += u32::from(per_byte <= EASY * least);
        }
    }

    /// Closes the step at `now` once it is [`STEP`] long and holds enough writes, while the
    /// tuner's limit is `limit` and `bulk` bulk requests are in flight. True when the cap grew.
    pub(crate) fn judge(&mut self, now: Instant, limit: usize, bulk: usize) -> bool {
        self.most = self.most.max(bulk);
        if self.judge_from.is_none() && bulk <= self.get(limit) {
            // The cut shows: the urgent writes from here on are its.
            self.judge_from = Some(now);
        }
        let since = now.saturating_duration_since(self.decided);
        let t = self.tally;
        if since < STEP || t.n == 0 || (t.n < SAMPLES && since < STEP * SAMPLES) {
            return false;
        }
        self.decided = now;
        self.tally = Tally::default();
        let most = std::mem::replace(&mut self.most, bulk) as f64;
        let before = self.get(limit);
        let at = before as f64;
        // While urgent writes are judged, the cap is a number, no higher than the limit nor
        // more than one above the most bulk requests of the step: what the tuner's limit or
        // bulk's own demand held back is not bulk's to take at once when it goes (behind
        // `ferry serve`: uncut at the limit, bulk took a probe from 20 to 40 in a step, 10
        // requests to 34, and every WAL write was late for 4 s; capped at 14 while the limit
        // held bulk to 7, it took a probe from 14 to 22 in a step, 7 to 14, and the same).
        let held = self.cap.unwrap_or(at).min(limit as f64).min(most + 1.0);
        let from = held.max(floor(limit) as f64);
        let cap = match t.late() {
            // Late while bulk work holds no more than its floor: the delay is not bulk's to
            // give back (the store, or the host's CPU, is slow), and a cut would only hold
            // back the bulk requests to come (measured behind `ferry serve`: cut from 31 to
            // 2 in 3 s while 1-2 backups were on the wire).
            true if bulk <= floor(limit) => held,
            // A cut starts from what bulk has in flight: a cap above it holds nothing back.
            // Until bulk is down to it, no write is judged (a write late beside requests the
            // cut holds back once they end would cut for them twice: seen, 22 -> 4 in a
            // second, where 16 kept the writes on time).
            // The cuts that follow it before any growth are the same overload draining (bulk
            // came down to each cut while the backlog of the one before still delayed the
            // writes): the peak stays where it began. Set at the last of them instead, 22 ->
            // 16 -> 12 -> 9 left 9 as the peak, and the cap went back up to 21 a request a
            // step, where the writes were late all at once again (behind `ferry serve`).
            true => {
                let began = self.peak.filter(|_| self.cutting).unwrap_or(0.0);
                self.peak = Some(began.max(bulk as f64));
                self.cutting = true;
                self.judge_from = None;
                (bulk as f64 * CUT).max(floor(limit) as f64)
            }
            // Grown only when bulk held all the cap allowed.
            false if t.easy() && most + 1.0 > from => {
                let near = self
                    .peak
                    .is_some_and(|p| from + 1.0 > p * NEAR && from < p / NEAR);
                let grown = from + if near { NEAR_GROWTH } else { 1.0 };
                self.cutting = false;
                grown.min(limit as f64)
            }
            false => held,
        };
        self.cap = Some(cap);
        let grew = self.get(limit) > before;
        tracing::debug!(
            n = t.n,
            late = t.late,
            easy = t.easy,
            cap = self.get(limit),
            limit,
            bulk,
            "bulk cap"
        );
        grew
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// One step: urgent writes of a MiB taking `ms` each, all begun after the step before and
    /// ending together, while the tuner's limit is `limit` and `bulk` bulk requests run.
    fn step(l: &mut BulkCap, now: &mut Instant, ms: &[u64], limit: usize, bulk: usize) {
        *now += STEP + Duration::from_millis(*ms.iter().max().expect("a write"));
        for &m in ms {
            l.urgent_done(Duration::from_millis(m), MIB, *now);
        }
        l.judge(*now, limit, bulk);
    }

    /// `n` steps of four writes of `ms` each, bulk work filling its cap under `limit`: each
    /// cut shows before the next. The cap after them.
    fn steps_at_cap(l: &mut BulkCap, now: &mut Instant, n: usize, ms: u64, limit: usize) -> usize {
        for _ in 0..n {
            let bulk = l.get(limit);
            step(l, now, &[ms; 4], limit, bulk);
        }
        l.get(limit)
    }

    /// A cap that saw writes on time, then a step of late ones with `bulk` requests in flight
    /// under `limit`; and the clock.
    fn cut_at(limit: usize, bulk: usize) -> (BulkCap, Instant) {
        let mut l = BulkCap::new();
        let mut now = Instant::now();
        step(&mut l, &mut now, &[200; 4], limit, bulk);
        step(&mut l, &mut now, &[1000; 4], limit, bulk);
        (l, now)
    }

    #[test]
    fn late_urgent_transfers_cut_bulk_and_timely_ones_give_it_back() {
        let mut l = BulkCap::new();
        let mut now = Instant::now();
        let mut steps = |l: &mut BulkCap, n: usize, ms: u64| steps_at_cap(l, &mut now, n, ms, 56);
        // On time (200 ms a MiB): bulk keeps the whole limit.
        steps(&mut l, 20, 200);
        assert_eq!(l.get(56), 56);
        // Late (1 s a MiB): cut to the floor within a few seconds, never below it.
        steps(&mut l, 20, 1000);
        assert_eq!(l.get(56), 3);
        // Between a quarter and half again the least: the cap holds where it is.
        steps(&mut l, 10, 280);
        assert_eq!(l.get(56), 3);
        // Within a quarter more than the least: back up a slot a step (the overload began at
        // 56, far above).
        steps(&mut l, 10, 240);
        assert_eq!(l.get(56), 13);
        // Half again the least and a little more is late.
        steps(&mut l, 1, 310);
        assert_eq!(l.get(56), 9);
        steps(&mut l, 100, 250);
        assert_eq!(l.get(56), 56);
    }

    #[test]
    fn a_step_is_judged_by_the_share_of_its_writes_that_run_late() {
        let mut l = BulkCap::new();
        let mut now = Instant::now();
        step(&mut l, &mut now, &[200; 4], 56, 56);
        // One late write in four is the host's noise, not bulk's doing: no cut.
        step(&mut l, &mut now, &[200, 200, 200, 1000], 56, 56);
        assert_eq!(l.get(56), 56);
        // Two in four: a cut.
        step(&mut l, &mut now, &[200, 200, 1000, 1000], 56, 56);
        assert_eq!(l.get(56), 42);
        // Bulk down to the cut: the writes from here on are judged.
        step(&mut l, &mut now, &[1000; 4], 56, 42);
        assert_eq!(l.get(56), 42);
        // No write late, but fewer than half on time: the cap holds.
        step(&mut l, &mut now, &[280, 280, 280, 200], 56, 42);
        assert_eq!(l.get(56), 42);
        // Half of them on time and no more than a quarter late: one more.
        step(&mut l, &mut now, &[240, 240, 1000, 280], 56, 42);
        assert_eq!(l.get(56), 43);
    }

    #[test]
    fn a_cut_waits_for_bulk_to_come_down_to_it() {
        let (mut l, mut now) = cut_at(56, 40);
        assert_eq!(l.get(56), 30);
        // Late again while the 40 requests of before the cut are still on the wire: the cut
        // has yet to show.
        step(&mut l, &mut now, &[1000; 4], 56, 40);
        step(&mut l, &mut now, &[1000; 4], 56, 31);
        assert_eq!(l.get(56), 30);
        // Down to it: the writes of this step began before, beside the 40.
        step(&mut l, &mut now, &[1000; 4], 56, 30);
        assert_eq!(l.get(56), 30);
        // Writes that began since, and still late: cut again.
        step(&mut l, &mut now, &[1000; 4], 56, 30);
        assert_eq!(l.get(56), 22);
    }

    #[test]
    fn writes_that_began_before_a_cut_showed_are_not_judged() {
        let (mut l, mut now) = cut_at(56, 40);
        assert_eq!(l.get(56), 30);
        now += STEP;
        l.judge(now, 56, 30);
        // Late, but begun before bulk came down to the cut: no second cut for them.
        now += STEP;
        for _ in 0..4 {
            l.urgent_done(Duration::from_millis(1000), MIB, now);
        }
        l.judge(now, 56, 30);
        assert_eq!(l.get(56), 30);
    }

    #[test]
    fn growth_slows_near_the_last_cut() {
        let (mut l, mut now) = cut_at(56, 20);
        assert_eq!(l.get(56), 15);
        let mut on_time = |l: &mut BulkCap, n: usize| steps_at_cap(l, &mut now, n, 200, 56);
        // The step where the cut shows, then a slot a step up to 17 (0.85 of the 20 that
        // were late), then one a second (four steps).
        assert_eq!(on_time(&mut l, 3), 17);
        assert_eq!(on_time(&mut l, 3), 17);
        assert_eq!(on_time(&mut l, 1), 18);
        // Past 20 / 0.85 = 23.5 without a late write: a slot a step again.
        assert_eq!(on_time(&mut l, 22), 23);
        assert_eq!(on_time(&mut l, 3), 25);
    }

    #[test]
    fn cuts_one_after_another_keep_the_peak_where_the_overload_began() {
        let (mut l, mut now) = cut_at(56, 22);
        // Still late as bulk comes down to each cut: 16, then 12.
        for bulk in [16, 16, 12, 12] {
            step(&mut l, &mut now, &[1000; 4], 56, bulk);
        }
        assert_eq!(l.get(56), 9);
        // On time: a request a step up to 0.85 of the 22 where the writes turned late
        // (18.7), then a quarter.
        // (The first step is the one where the last cut shows.)
        assert_eq!(steps_at_cap(&mut l, &mut now, 10, 200, 56), 18);
        assert_eq!(steps_at_cap(&mut l, &mut now, 4, 200, 56), 19);
        assert_eq!(steps_at_cap(&mut l, &mut now, 3, 200, 56), 19);
        // A new overload after growth starts a new peak: 20 late, then the cap near 20.
        step(&mut l, &mut now, &[1000; 4], 56, 20);
        assert_eq!(l.peak, Some(20.0));
    }

    #[test]
    fn a_few_large_writes_are_judged_without_waiting_for_more() {
        let mut l = BulkCap::new();
        let mut now = Instant::now();
        // One write a step (one agent's segments, each taking over a second).
        step(&mut l, &mut now, &[1000], 56, 56);
        step(&mut l, &mut now, &[1000], 56, 56);
        assert_eq!(l.get(56), 56);
        step(&mut l, &mut now, &[3000], 56, 56);
        assert_eq!(l.get(56), 42);
    }

    #[test]
    fn only_bulk_work_beyond_its_floor_is_cut_and_from_what_it_has_in_flight() {
        let mut l = BulkCap::new();
        let mut now = Instant::now();
        step(&mut l, &mut now, &[200; 4], 48, 3);
        // Late while bulk holds its floor (48 / 16 = 3 requests): nothing to cut; the cap
        // stays one above what bulk holds.
        for _ in 0..4 {
            step(&mut l, &mut now, &[1000; 4], 48, 3);
        }
        assert_eq!(l.get(48), 4);
        // With one more, the cut.
        step(&mut l, &mut now, &[1000; 4], 48, 4);
        assert_eq!(l.get(48), 3);
        // Late with 8 bulk requests on the wire after 48: cut from those 8, not from 48.
        let mut l = BulkCap::new();
        step(&mut l, &mut now, &[200; 4], 48, 48);
        step(&mut l, &mut now, &[200; 4], 48, 48);
        assert_eq!(l.get(48), 48);
        step(&mut l, &mut now, &[1000; 4], 48, 8);
        assert_eq!(l.get(48), 6);
        // And never below the floor (once the cut shows: the step with 4 in flight).
        step(&mut l, &mut now, &[1000; 4], 48, 4);
        step(&mut l, &mut now, &[1000; 4], 48, 4);
        assert_eq!(l.get(48), 3);
    }

    #[test]
    fn small_and_differently_sized_transfers_are_judged_apart() {
        let mut l = BulkCap::new();
        let mut now = Instant::now();
        // 16 MiB segments at 2 s set their own least; a 1 MiB push at 400 ms is not late
        // against them (the least of its own size is what counts), nor is a 4 KiB file
        // that takes a round trip of 100 ms.
        for _ in 0..3 {
            now += STEP + Duration::from_millis(2000);
            for (ms, bytes) in [(2000, 16 * MIB), (400, MIB), (2000, 16 * MIB), (400, MIB)] {
                l.urgent_done(Duration::from_millis(ms), bytes, now);
            }
            l.judge(now, 56, 56);
        }
        for _ in 0..10 {
            now += STEP;
            for _ in 0..4 {
                l.urgent_done(Duration::from_millis(100), 4096, now);
            }
            l.judge(now, 56, 56);
        }
        assert_eq!(l.get(56), 56);
        // A step's late writes cut once.
        step(&mut l, &mut now, &[1000; 8], 56, 56);
        assert_eq!(l.get(56), 42);
    }

    #[test]
    fn a_cap_grown_back_to_the_limit_follows_the_limit_a_request_a_step() {
        let (mut l, mut now) = cut_at(8, 8);
        assert_eq!(l.get(8), 6);
        // The cut shows, then a quarter of a slot a step near it, up to the limit.
        assert_eq!(steps_at_cap(&mut l, &mut now, 9, 200, 8), 8);
        // The tuner steps up to 32: bulk takes it as it grows anywhere, not at once (a
        // quarter of a request a step up to 9.4, as near the cut at 8; then one a step).
        assert_eq!(l.get(32), 8);
        assert_eq!(steps_at_cap(&mut l, &mut now, 4, 200, 32), 9);
        assert_eq!(steps_at_cap(&mut l, &mut now, 6, 200, 32), 13);
        // Stepped down to 10, then back up: from 10, not from where it was.
        assert_eq!(steps_at_cap(&mut l, &mut now, 1, 200, 10), 10);
        assert_eq!(steps_at_cap(&mut l, &mut now, 1, 200, 32), 11);
        // Urgent work quiet: the whole limit.
        assert!(l.uncut());
        assert_eq!(l.get(32), 32);
    }

    #[test]
    fn the_cap_stays_near_what_bulk_holds() {
        // Bulk held to 7 by the tuner's limit of 14 (urgent work has the rest) beside urgent
        // writes on time: its cap stays at 8, and the tuner's probe to 22 is not bulk's at once.
        let mut l = BulkCap::new();
        let mut now = Instant::now();
        for _ in 0..20 {
            step(&mut l, &mut now, &[200; 4], 14, 7);
        }
        assert_eq!(l.get(22), 8);
        // Bulk takes it: then one more a step.
        step(&mut l, &mut now, &[200; 4], 22, 8);
        assert_eq!(l.get(22), 9);
    }

    #[test]
    fn a_limit_that_jumps_while_urgent_writes_are_judged_is_bulks_a_request_a_step() {
        // Never cut: bulk held the whole limit of 20 beside urgent writes on time. The
        // tuner's probe to 40 is not bulk's at once.
        let mut l = BulkCap::new();
        let mut now = Instant::now();
        assert_eq!(steps_at_cap(&mut l, &mut now, 3, 200, 20), 20);
        assert_eq!(l.get(40), 20);
        assert_eq!(steps_at_cap(&mut l, &mut now, 2, 200, 40), 22);
    }

    #[test]
    fn a_quiet_spell_forgets_the_least() {
        let mut l = BulkCap::new();
        let mut now = Instant::now();
        step(&mut l, &mut now, &[100; 4], 56, 56);
        // Nothing for three windows; then the link is slower: the old least is not held
        // against it.
        now += 3 * WINDOW;
        for _ in 0..10 {
            step(&mut l, &mut now, &[500; 4], 56, 56);
        }
        assert_eq!(l.get(56), 56);
    }

    #[test]
    fn the_least_is_forgotten_after_two_windows() {
        let mut l = BulkCap::new();
        let mut now = Instant::now();
        step(&mut l, &mut now, &[100; 4], 56, 56);
        // The link got slower for good: after two windows, 500 ms is the new normal.
        let each = (STEP + Duration::from_millis(500)).as_millis();
        let n = (2 * WINDOW.as_millis() / each + 4) as usize;
        let before = steps_at_cap(&mut l, &mut now, n, 500, 56);
        steps_at_cap(&mut l, &mut now, 20, 500, 56);
        // Back up: slowly past the last cut (from 4 in flight), then a slot a step.
        assert!(l.get(56) >= before + 15, "{before} -> {}", l.get(56));
    }
}

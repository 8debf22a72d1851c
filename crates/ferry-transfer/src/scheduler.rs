//! One pool of request slots per process, shared by every transfer, in two priority classes.
//!
//! `Urgent` work (WAL) is served first; `Bulk` work (backups) gets one slot in every
//! [`BULK_SHARE`] grants while both wait and it has room, and always one request in flight,
//! so it never starves (the Tarsnap lesson: a queue that never runs clogs everything behind
//! it). Buffered bytes are capped by a memory budget.
//!
//! The tuner's limit is the knee for throughput; while bulk requests hold slots, urgent ones
//! may run beyond it as long as fewer than [`URGENT_RESERVE`] urgent requests are in flight, so
//! that a WAL segment never waits for a backup's block to finish (seconds on a busy WAN), nor
//! for a limit the tuner stepped down while the bulk work was slow to come. Bulk requests in
//! flight are also held below the limit while urgent writes run late (`yielding.rs`, after
//! LEDBAT), and get the whole limit back once urgent work is quiet. Only bulk *writes*: an
//! urgent write shares the link's way up with them, while bulk reads come down the other way
//! (measured behind `ferry serve`, restores' reads held bulk's cut slots beside the backups'
//! writes, and the uplink carried 70-80 MB/s of its 100 while the WAL was on time).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

use crate::tuner::{Reading, Tuner, RAMP_FROM};
use crate::yielding::BulkCap;

/// Bulk's share while urgent work waits: one grant in this many.
pub const BULK_SHARE: u32 = 4;

/// While bulk requests hold slots, an urgent request may start beyond the tuner's limit if
/// fewer than this many urgent requests are in flight. Measured behind `ferry serve` (50
/// tenants pushing 1 MiB of WAL a second over the wan profile during a flood of backups): the
/// limit stood at 5-13 for half a minute while about ten pushes were on the wire at any time,
/// and a push's p99 was 4 s of waiting for a slot beside 0.7 s of request.
/// A WAL agent pushes at most 8 segments at once; a server's urgent work is bounded by its own
/// slots.
pub const URGENT_RESERVE: usize = 16;

/// Which way a request's payload crosses the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Way {
    /// To the store: a write, sharing the way up with urgent writes.
    Up,
    /// From the store: a read (and requests that carry no payload).
    Down,
}

/// Priority class of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// Latency-sensitive work such as WAL segments: served first.
    Urgent,
    /// Throughput work such as backups: keeps a guaranteed share.
    Bulk,
}

#[derive(Debug)]
struct Slots {
    in_flight: usize,
    /// Of `in_flight`, urgent requests.
    urgent_in_flight: usize,
    /// Of `in_flight`, requests that started beyond the limit (borrowed by urgent work, or
    /// bulk's one): not the tuner's, which must not wait for them to drain.
    beyond: usize,
    /// Of `in_flight`, bulk writes: what the bulk cap holds.
    bulk_up: usize,
    urgent: VecDeque<oneshot::Sender<Slot>>,
    /// In the order they asked; a waiter passes the ones ahead of it only when their way has
    /// no room and its own has (reads never wait behind writes the cap holds back).
    bulk: VecDeque<(Way, oneshot::Sender<Slot>)>,
    urgent_streak: u32,
    tuner: Tuner,
    /// Bulk writes in flight, at most; cut while urgent writes run late.
    bulk_cap: BulkCap,
    /// When urgent work was last seen (started, waiting or written).
    urgent_seen: Instant,
    /// When a bulk write last ended; never, at first.
    bulk_ended: Option<Instant>,
    /// Times a bulk request was let in while urgent ones waited with room (bulk's share):
    /// each delayed the urgent requests waiting then.
    urgent_passed: u64,
}

impl Slots {
    /// Whether a request of `class` going `way` may start now, waiters aside. Urgent
    /// requests run within the tuner's limit, and beyond it up to their reserve while bulk
    /// requests hold slots (they borrow bulk's; alone, the WAL is held to the knee the tuner
    /// finds for it). Bulk ones run within the limit, bulk writes within their cap
    /// ([`crate::yielding`]) too, and one each way at any time, so that a stream of urgent
    /// work never starves them. Never past the most the tuner may reach (a fixed limit is
    /// fixed).
    fn room(&self, class: Class, way: Way) -> bool {
        let (limit, max) = (self.tuner.limit(), self.tuner.max());
        let bulk = self.bulk_in_flight();
        match (class, way) {
            (Class::Urgent, _) => {
                self.in_flight < limit
                    || (bulk > 0 && self.urgent_in_flight < URGENT_RESERVE && self.in_flight < max)
            }
            (Class::Bulk, Way::Up) => {
                (self.in_flight < limit && self.bulk_up < self.bulk_cap.get(limit))
                    || (self.bulk_up == 0 && self.in_flight < max)
            }
            (Class::Bulk, Way::Down) => {
                self.in_flight < limit || (bulk == self.bulk_up && self.in_flight < max)
            }
        }
    }

    /// Where in the bulk queue the first waiter whose way has room is.
    fn bulk_ready(&self) -> Option<usize> {
        let room = [Way::Up, Way::Down].map(|w| self.room(Class::Bulk, w));
        self.bulk
            .iter()
            .position(|(w, _)| room[usize::from(*w == Way::Down)])
    }

    /// Whether requests that wait now wait for the tuner's limit, so that it binds; bulk
    /// requests held back by their cap alone say nothing about the link's knee (counted, the
    /// tuner saw no gain from probes the cap kept bulk work out of, and stepped its limit
    /// down to 2 while the WAL ran in the reserve: bulk work stopped).
    fn limit_binds(&self) -> bool {
        self.in_flight >= self.tuner.limit()
    }

    /// The next waiter to serve, by class and share, with its class and way; none while no
    /// class that waits has room.
    fn next_waiter(&mut self) -> Option<(oneshot::Sender<Slot>, Class, Way)> {
        let urgent = !self.urgent.is_empty() && self.room(Class::Urgent, Way::Up);
        let bulk = self.bulk_ready();
        let take_urgent = urgent && (bulk.is_none() || self.urgent_streak + 1 < BULK_SHARE);
        if take_urgent {
            self.urgent_streak += 1;
            // An urgent waiter's way does not matter to its room.
            Some((self.urgent.pop_front()?, Class::Urgent, Way::Up))
        } else if let Some(i) = bulk {
            self.urgent_streak = 0;
            self.urgent_passed += u64::from(urgent);
            let (way, tx) = self.bulk.remove(i)?;
            Some((tx, Class::Bulk, way))
        } else {
            None
        }
    }

    fn bulk_in_flight(&self) -> usize {
        self.in_flight - self.urgent_in_flight
    }

    /// Counts a request of `class` going `way` in flight; true when it starts beyond the
    /// limit.
    fn start(&mut self, class: Class, way: Way) -> bool {
        let beyond = self.in_flight >= self.tuner.limit();
        if (class, way) == (Class::Bulk, Way::Up) {
            self.bulk_starts(Instant::now());
            self.bulk_up += 1;
        }
        self.in_flight += 1;
        self.beyond += usize::from(beyond);
        if class == Class::Urgent {
            self.urgent_in_flight += 1;
            self.urgent_seen = Instant::now();
        }
        beyond
    }

    /// A bulk write starts at `now`: from its cap's floor when it is the first after a
    /// pause of [`QUIET`] while urgent work is under way ([`BulkCap::start_low`]).
    fn bulk_starts(&mut self, now: Instant) {
        let paused = self.bulk_up == 0
            && self
                .bulk_ended
                .is_none_or(|t| now.duration_since(t) >= QUIET);
        if paused && (self.urgent_in_flight > 0 || !self.urgent.is_empty()) {
            self.bulk_cap.start_low(self.tuner.limit());
        }
    }

    /// Counts a request of `class` going `way` ended (`beyond`: as [`Slots::start`] said).
    fn end(&mut self, class: Class, way: Way, beyond: bool) {
        if (class, way) == (Class::Bulk, Way::Up) {
            self.bulk_ended = Some(Instant::now());
            self.bulk_up -= 1;
        }
        self.in_flight -= 1;
        self.beyond -= usize::from(beyond);
        self.urgent_in_flight -= usize::from(class == Class::Urgent);
    }

    /// Judges the bulk cap's step if it is due ([`BulkCap::judge`]); true when the cap grew.
    fn judge(&mut self, now: Instant) -> bool {
        let (limit, bulk) = (self.tuner.limit(), self.bulk_up);
        self.bulk_cap.judge(now, limit, bulk)
    }

    /// Hands bulk work the whole limit again once urgent work has been quiet for
    /// [`QUIET`]: a cap cut by a burst of WAL must not outlast it; or once no urgent write
    /// was judged for a while ([`BulkCap::unjudged`]). True when it did.
    fn quiet(&mut self, now: Instant) -> bool {
        let busy = self.urgent_in_flight > 0 || !self.urgent.is_empty();
        if busy {
            self.urgent_seen = now;
        }
        let idle = !busy && now.duration_since(self.urgent_seen) >= QUIET;
        (idle || self.bulk_cap.unjudged(now)) && self.bulk_cap.uncut()
    }
}

/// The process-wide request scheduler.
#[derive(Debug)]
pub struct Scheduler {
    slots: Mutex<Slots>,
    memory: Arc<Semaphore>,
    memory_total: usize,
    peak: AtomicUsize,
    /// Bytes of finished requests, for stores that report no flow.
    done: AtomicU64,
    /// Requests finished that moved bytes.
    finished: AtomicU64,
    /// The largest block a transfer reserved memory for since the last tick: the tuner's
    /// typical request until some have finished. The largest, not the last: a download
    /// reserves all its blocks at once when memory allows, the short last one last (seen:
    /// 96 MiB over a 4 MB/s link judged by its 1 MiB tail, 13 requests kept where 4 fill it).
    block: AtomicU64,
    ticking: OnceLock<()>,
}

/// How often the tuner looks at the rate: a window ends on time however long requests take.
/// The start's spans are a few ticks, a few round trips of a long link.
const TICK: Duration = Duration::from_millis(100);
/// Urgent work idle this long gives bulk work its whole limit back.
const QUIET: Duration = Duration::from_secs(1);
/// Reservations below this are read-ahead stubs and small objects, not blocks.
const BLOCK_MIN: u64 = 64 << 10;

/// A request slot; released on drop.
#[derive(Debug)]
pub struct Slot {
    sched: Option<Arc<Scheduler>>,
    class: Class,
    way: Way,
    beyond: bool,
    /// When the request's time starts, for judging whether urgent work runs late.
    clock: Instant,
    /// [`Slots::urgent_passed`] when it was granted.
    urgent_passed: u64,
}

/// Bytes of the memory budget, held while a block's buffer lives.
pub type Memory = OwnedSemaphorePermit;

impl Scheduler {
    /// A scheduler starting at `concurrency` requests in flight, tuning itself up to `max`
    /// unless `fixed`, with `memory` bytes for buffers.
    pub fn new(concurrency: usize, max: usize, fixed: bool, memory: usize) -> Arc<Self> {
        let memory = memory.clamp(1 << 20, Semaphore::MAX_PERMITS);
        Arc::new(Self {
            slots: Mutex::new(Slots {
                in_flight: 0,
                urgent_in_flight: 0,
                beyond: 0,
                bulk_up: 0,
                urgent: VecDeque::new(),
                bulk: VecDeque::new(),
                urgent_streak: 0,
                tuner: Tuner::new(concurrency, max, fixed).ramped(RAMP_FROM),
                bulk_cap: BulkCap::new(),
                urgent_seen: Instant::now(),
                bulk_ended: None,
                urgent_passed: 0,
            }),
            memory: Arc::new(Semaphore::new(memory)),
            memory_total: memory,
            peak: AtomicUsize::new(0),
            done: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            block: AtomicU64::new(0),
            ticking: OnceLock::new(),
        })
    }

    /// Bytes of the memory budget in all.
    pub fn memory(&self) -> usize {
        self.memory_total
    }

    /// Waits for `bytes` of the memory budget (a block larger than half the budget takes
    /// half of it: a stream holds the block it sends and the next it reads, and two that each
    /// took the whole budget would wait for each other forever; seen with `--max-memory
    /// 4MiB`, a budget of 1 MiB, and a WAL agent that never stored a segment).
    pub async fn reserve(&self, bytes: u64) -> Memory {
        if bytes >= BLOCK_MIN {
            self.block.fetch_max(bytes, Ordering::Relaxed);
        }
        let want = (bytes as usize)
            .clamp(1, (self.memory_total / 2).max(1))
            .min(u32::MAX as usize) as u32;
        self.memory
            .clone()
            .acquire_many_owned(want)
            .await
            .expect("never closed")
    }

    /// Waits for a request slot in `class` for a request whose payload goes `way`.
    pub async fn slot(self: &Arc<Self>, class: Class, way: Way) -> Slot {
        self.ticking
            .get_or_init(|| drop(tokio::spawn(tick(Arc::downgrade(self)))));
        let asked = Instant::now();
        let (blamed, passed_at_ask);
        let rx = {
            let mut s = self.slots.lock().unwrap();
            // Urgent requests pass waiting bulk ones; none passes its own class.
            let queued = !s.urgent.is_empty() || (class == Class::Bulk && !s.bulk.is_empty());
            if !queued && s.room(class, way) {
                return self.granted(&mut s, class, way);
            }
            // Bulk work is to blame when, without its slots, this request would have started:
            // no urgent request ahead of it, and the urgent ones in flight within the limit.
            blamed = class == Class::Urgent
                && s.bulk_in_flight() > 0
                && s.urgent.is_empty()
                && s.urgent_in_flight < s.tuner.limit();
            passed_at_ask = s.urgent_passed;
            if s.limit_binds() {
                s.tuner.note_waiting();
            }
            let (tx, rx) = oneshot::channel();
            match class {
                Class::Urgent => s.urgent.push_back(tx),
                Class::Bulk => s.bulk.push_back((way, tx)),
            }
            rx
        };
        // Queued behind the other class's waiters, this one may still have room of its own
        // (bulk's one request while urgent ones wait): it is not left for the next release.
        self.dispatch();
        let mut slot = rx.await.expect("the scheduler outlives its waiters");
        // A wait counts against bulk work only when bulk work caused it (held the slots it
        // needed, or took its share ahead of it meanwhile): eight WAL segments queueing behind
        // each other, or behind a full reserve, are not late because of a backup.
        if blamed || slot.urgent_passed != passed_at_ask {
            slot.clock = asked;
        }
        slot
    }

    /// Starts a request of `class` going `way` in `s` and hands its slot out.
    fn granted(self: &Arc<Self>, s: &mut Slots, class: Class, way: Way) -> Slot {
        let beyond = s.start(class, way);
        self.peak.fetch_max(s.in_flight, Ordering::Relaxed);
        Slot {
            sched: Some(self.clone()),
            class,
            way,
            beyond,
            clock: Instant::now(),
            urgent_passed: s.urgent_passed,
        }
    }

    /// Counts bytes of a finished request (the tuner's measure for stores that report no
    /// flow on the wire).
    pub fn record(&self, bytes: u64) {
        self.done.fetch_add(bytes, Ordering::Relaxed);
        self.finished.fetch_add(1, Ordering::Relaxed);
    }

    /// A transient failure of a request sent at `sent`: fewer requests in flight for a while
    /// when errors are not a few among many, or `shed` (the server said it has too much to do).
    pub fn record_error(&self, sent: Instant, shed: bool) {
        let finished = self.finished.load(Ordering::Relaxed);
        self.slots
            .lock()
            .unwrap()
            .tuner
            .on_error(Instant::now(), sent, finished, shed);
    }

    /// Current limit of requests in flight.
    pub fn limit(&self) -> usize {
        self.slots.lock().unwrap().tuner.limit()
    }

    /// Bulk writes that may be in flight now: the limit, or fewer while urgent writes run
    /// late.
    pub fn bulk_limit(&self) -> usize {
        let s = self.slots.lock().unwrap();
        s.bulk_cap.get(s.tuner.limit())
    }

    /// An urgent write of `bytes` to a remote store took `took`, from its slot's
    /// [`Slot::clock`]: late, it holds bulk work back; on time, it lets more in.
    pub fn urgent_written(self: &Arc<Self>, bytes: u64, took: Duration) {
        self.urgent_written_at(bytes, took, Instant::now());
    }

    fn urgent_written_at(self: &Arc<Self>, bytes: u64, took: Duration, now: Instant) {
        // The step before this write ended is judged without it.
        self.judge_at(now);
        self.slots
            .lock()
            .unwrap()
            .bulk_cap
            .urgent_done(took, bytes, now);
    }

    /// Closes the bulk cap's step when it is due (on a write's end or on the tick).
    fn judge_at(self: &Arc<Self>, now: Instant) {
        let grew = self.slots.lock().unwrap().judge(now);
        if grew {
            self.dispatch();
        }
    }

    /// Most requests that were ever in flight at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    fn release(self: &Arc<Self>, class: Class, way: Way, beyond: bool) {
        self.slots.lock().unwrap().end(class, way, beyond);
        self.dispatch();
    }

    /// Hands free slots to waiters, skipping those that gave up waiting.
    fn dispatch(self: &Arc<Self>) {
        loop {
            let (tx, slot) = {
                let mut s = self.slots.lock().unwrap();
                let Some((tx, class, way)) = s.next_waiter() else {
                    return;
                };
                (tx, self.granted(&mut s, class, way))
            };
            if let Err(mut slot) = tx.send(slot) {
                // The waiter was cancelled: take the slot back without recursing.
                slot.sched = None;
                self.slots
                    .lock()
                    .unwrap()
                    .end(slot.class, slot.way, slot.beyond);
            }
        }
    }
}

/// The tuner's clock, for as long as the scheduler lives.
async fn tick(sched: Weak<Scheduler>) {
    let mut every = tokio::time::interval(TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(s) = sched.upgrade() else { return };
        let wire = ferry_store::flow::moved();
        // Read together: the request size the tuner derives is done / finished.
        let (done, finished) = (
            s.done.load(Ordering::Relaxed),
            s.finished.load(Ordering::Relaxed),
        );
        let block = s.block.swap(0, Ordering::Relaxed);
        let grew = {
            let mut slots = s.slots.lock().unwrap();
            let r = Reading {
                wire,
                done,
                in_flight: slots.in_flight - slots.beyond,
                waiting: match slots.limit_binds() {
                    true => slots.urgent.len() + slots.bulk.len(),
                    false => 0,
                },
                finished,
                block,
                borrowed: slots.beyond,
            };
            let now = Instant::now();
            let grew = slots.tuner.tick(r, now);
            let bulk_grew = slots.judge(now);
            slots.quiet(now) || grew || bulk_grew
        };
        if grew {
            s.dispatch();
        }
    }
}

impl Slot {
    /// When this request's time starts, for judging whether urgent work runs late: when it
    /// asked for its slot if bulk work made it wait (held the slots it would have had when it
    /// asked, or took its share ahead of it while it waited), else when it was granted.
    pub fn clock(&self) -> Instant {
        self.clock
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(s) = self.sched.take() {
            s.release(self.class, self.way, self.beyond);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn urgent_first_but_bulk_keeps_its_share() {
        // The limit is full and so is the urgent reserve: both classes wait.
        let s = Scheduler::new(URGENT_RESERVE + 1, URGENT_RESERVE + 1, true, 1 << 20);
        let mut urgent = Vec::new();
        for _ in 0..URGENT_RESERVE {
            urgent.push(s.slot(Class::Urgent, Way::Up).await);
        }
        let first = s.slot(Class::Bulk, Way::Up).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..8 {
            let class = if i < 4 { Class::Bulk } else { Class::Urgent };
            let (s, order) = (s.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _slot = s.slot(class, Way::Up).await;
                order.lock().unwrap().push(class);
            }));
            tokio::task::yield_now().await;
        }
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        use Class::*;
        assert_eq!(
            order,
            vec![Urgent, Urgent, Urgent, Bulk, Urgent, Bulk, Bulk, Bulk]
        );
        drop(urgent);
    }

    /// Whether a write's slot is handed out within a moment.
    async fn given(s: &Arc<Scheduler>, class: Class) -> Option<Slot> {
        given_way(s, class, Way::Up).await
    }

    /// Whether a slot for a request going `way` is handed out within a moment.
    async fn given_way(s: &Arc<Scheduler>, class: Class, way: Way) -> Option<Slot> {
        tokio::time::timeout(std::time::Duration::from_millis(50), s.slot(class, way))
            .await
            .ok()
    }

    /// A scheduler whose limit the tuner may raise up to `max` but never moves here (its
    /// clock is not started).
    fn untuned(limit: usize, max: usize) -> Arc<Scheduler> {
        let s = Scheduler::new(limit, max, false, 1 << 20);
        s.ticking.set(()).expect("not started");
        s
    }

    #[tokio::test]
    async fn urgent_requests_borrow_bulk_slots_up_to_the_reserve() {
        let s = untuned(1, 64);
        let bulk = s.slot(Class::Bulk, Way::Up).await;
        assert!(given(&s, Class::Bulk).await.is_none(), "the limit is 1");
        let mut urgent = Vec::new();
        for i in 0..URGENT_RESERVE {
            let slot = given(&s, Class::Urgent).await;
            urgent.push(slot.unwrap_or_else(|| panic!("urgent request {i} waited")));
        }
        // The reserve is full: the next urgent request waits for one of them, not for bulk.
        let next = tokio::spawn({
            let s = s.clone();
            async move { s.slot(Class::Urgent, Way::Up).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!next.is_finished(), "ran past a full reserve");
        urgent.pop();
        let next = tokio::time::timeout(std::time::Duration::from_secs(5), next).await;
        assert!(next.is_ok(), "a freed reserve slot was not handed on");
        // Urgent requests beyond the limit leave bulk work one request at a time.
        drop(bulk);
        let one = given(&s, Class::Bulk).await;
        assert!(one.is_some(), "bulk work starved behind urgent work");
        assert!(
            given(&s, Class::Bulk).await.is_none(),
            "bulk past its limit"
        );
        drop((next, urgent, one));
    }

    #[tokio::test]
    async fn urgent_work_alone_is_held_to_the_limit() {
        // A WAL agent on its own: the tuner's knee is its bound, as for any transfer.
        let s = untuned(2, 64);
        let held = [
            s.slot(Class::Urgent, Way::Up).await,
            s.slot(Class::Urgent, Way::Up).await,
        ];
        assert!(
            given(&s, Class::Urgent).await.is_none(),
            "past the limit with no bulk"
        );
        drop(held);
    }

    #[tokio::test]
    async fn a_fixed_limit_holds_urgent_work_too() {
        let s = Scheduler::new(2, 2, true, 1 << 20);
        let held = [
            s.slot(Class::Bulk, Way::Up).await,
            s.slot(Class::Urgent, Way::Up).await,
        ];
        assert!(
            given(&s, Class::Urgent).await.is_none(),
            "past --concurrency 2"
        );
        drop(held);
    }

    #[tokio::test]
    async fn bulk_waits_while_urgent_writes_run_late() {
        let s = Scheduler::new(8, 8, true, 1 << 20);
        let mut now = Instant::now();
        let mut wrote = |s: &Arc<Scheduler>, ms: u64| wrote(s, &mut now, ms);
        // Bulk work holds every slot. The first writes set the least; steps of late ones cut
        // bulk to its floor, from the 8 it has in flight, as its requests end (each cut judged
        // on writes that began once it showed).
        let mut held = bulk_slots(&s, 8).await;
        for ms in [200, 2000, 2000, 2000, 2000, 2000, 2000, 2000, 2000] {
            wrote(&s, ms);
            held.truncate(s.bulk_limit());
        }
        assert_eq!(s.bulk_limit(), 2);
        assert!(given(&s, Class::Bulk).await.is_none(), "bulk past its cap");
        let urgent = given(&s, Class::Urgent).await;
        assert!(urgent.is_some(), "urgent work waited for bulk's cap");
        // On time again: more bulk requests may run (one a step: the writes turned late at
        // 8, far above), and the one waiting is let in.
        let waiter = tokio::spawn({
            let s = s.clone();
            async move { s.slot(Class::Bulk, Way::Up).await }
        });
        tokio::task::yield_now().await;
        for _ in 0..4 {
            wrote(&s, 200);
        }
        assert_eq!(s.bulk_limit(), 4);
        let got = tokio::time::timeout(Duration::from_secs(5), waiter).await;
        assert!(got.is_ok(), "a grown cap did not let the waiter in");
        drop((held, urgent));
    }

    #[tokio::test]
    async fn bulk_reads_pass_the_cap_that_holds_bulk_writes() {
        // A restore's reads come down the link while the WAL's writes go up beside the
        // backups': a cap cut for the WAL holds back bulk writes only.
        let s = Scheduler::new(8, 8, true, 1 << 20);
        let mut now = Instant::now();
        let mut held = bulk_slots(&s, 8).await;
        for ms in [200, 2000, 2000, 2000, 2000, 2000, 2000, 2000, 2000] {
            wrote(&s, &mut now, ms);
            held.truncate(s.bulk_limit());
        }
        assert_eq!((s.bulk_limit(), held.len()), (2, 2));
        // A write waits for the cap; reads asked after it pass it, up to the limit.
        let writer = tokio::spawn({
            let s = s.clone();
            async move { s.slot(Class::Bulk, Way::Up).await }
        });
        settle().await;
        let mut reads = Vec::new();
        for i in 0..6 {
            let read = given_way(&s, Class::Bulk, Way::Down).await;
            reads.push(read.unwrap_or_else(|| panic!("read {i} waited behind the cap")));
        }
        assert!(
            given_way(&s, Class::Bulk, Way::Down).await.is_none(),
            "a read past the limit"
        );
        assert!(!writer.is_finished(), "a write past its cap");
        // Reads are not the cap's to count: a write that ends lets the waiting one in, with
        // six reads in flight.
        held.pop();
        let got = tokio::time::timeout(Duration::from_secs(5), writer).await;
        assert!(got.is_ok(), "the write waited for reads to end");
        assert!(
            given(&s, Class::Bulk).await.is_none(),
            "a write past its cap"
        );
        drop((held, reads));
    }

    #[tokio::test]
    async fn bulk_keeps_a_request_each_way_past_the_limit() {
        // Backups' writes fill the limit; a restore still reads, one request at a time.
        let s = untuned(2, 64);
        let writes = bulk_slots(&s, 2).await;
        let read = given_way(&s, Class::Bulk, Way::Down).await;
        assert!(read.is_some(), "reads starved behind writes");
        assert!(
            given_way(&s, Class::Bulk, Way::Down).await.is_none(),
            "reads past the limit beyond their one"
        );
        drop((writes, read));
        // And the other way round.
        let reads: Vec<_> =
            futures::future::join_all((0..2).map(|_| s.slot(Class::Bulk, Way::Down))).await;
        let write = given(&s, Class::Bulk).await;
        assert!(write.is_some(), "writes starved behind reads");
        assert!(
            given(&s, Class::Bulk).await.is_none(),
            "writes past the limit"
        );
        drop((reads, write));
    }

    #[tokio::test]
    async fn the_largest_reservation_is_the_block() {
        let s = Scheduler::new(4, 4, true, 64 << 20);
        let mut held = Vec::new();
        for len in [5 << 20, 5 << 20, 1 << 20, 4 << 10] {
            held.push(s.reserve(len).await);
        }
        assert_eq!(s.block.swap(0, Ordering::Relaxed), 5 << 20);
    }

    #[tokio::test]
    async fn two_blocks_larger_than_the_budget_are_held_at_once() {
        // A stream's block in flight and the next one read, each larger than the budget.
        let s = Scheduler::new(4, 4, true, 1 << 20);
        let first = s.reserve(5 << 20).await;
        let second =
            tokio::time::timeout(std::time::Duration::from_secs(5), s.reserve(5 << 20)).await;
        assert!(
            second.is_ok(),
            "the second block waits for the first forever"
        );
        drop(first);
    }

    #[tokio::test]
    async fn cancelled_waiters_do_not_leak_slots() {
        for class in [Class::Bulk, Class::Urgent] {
            let s = Scheduler::new(1, 1, true, 1 << 20);
            let held = s.slot(class, Way::Up).await;
            let waiter = tokio::spawn({
                let s = s.clone();
                async move { s.slot(class, Way::Up).await }
            });
            tokio::task::yield_now().await;
            waiter.abort();
            let _ = waiter.await;
            drop(held);
            let again = tokio::time::timeout(Duration::from_secs(5), s.slot(class, Way::Up)).await;
            assert!(again.is_ok(), "{class:?} slot leaked by a cancelled waiter");
            drop(again);
            let st = s.slots.lock().unwrap();
            assert_eq!((st.in_flight, st.urgent_in_flight, st.beyond), (0, 0, 0));
        }
    }

    #[tokio::test]
    async fn bulk_queued_behind_urgent_waiters_takes_its_one_request_at_once() {
        let s = untuned(1, 64);
        let first = s.slot(Class::Urgent, Way::Up).await;
        // Alone, urgent work waits for the limit...
        let urgent = tokio::spawn({
            let s = s.clone();
            async move { s.slot(Class::Urgent, Way::Up).await }
        });
        tokio::task::yield_now().await;
        assert!(!urgent.is_finished());
        // ...a bulk request behind it runs (its one), and the urgent one borrows beside it.
        let bulk = given(&s, Class::Bulk).await;
        assert!(bulk.is_some(), "bulk waited for an urgent request to end");
        let urgent = tokio::time::timeout(Duration::from_secs(5), urgent).await;
        assert!(urgent.is_ok(), "urgent work did not borrow beside bulk");
        assert_eq!(s.slots.lock().unwrap().beyond, 2);
        drop((first, bulk, urgent));
    }

    #[tokio::test]
    async fn a_cut_is_lifted_once_urgent_work_is_quiet() {
        let s = untuned(8, 64);
        let mut now = Instant::now();
        // Late while bulk work holds every slot: cut.
        let bulk = bulk_slots(&s, 8).await;
        for ms in [200, 2000, 2000] {
            wrote(&s, &mut now, ms);
        }
        drop(bulk);
        assert!(s.bulk_limit() < 8);
        let held = s.slot(Class::Urgent, Way::Up).await;
        // Urgent work in flight: the cut stays.
        assert!(!s.slots.lock().unwrap().quiet(Instant::now()));
        drop(held);
        let mut st = s.slots.lock().unwrap();
        let ended = Instant::now();
        assert!(!st.quiet(ended), "lifted the moment urgent work ended");
        assert!(st.quiet(ended + QUIET));
        assert_eq!(st.bulk_cap.get(8), 8);
    }

    #[tokio::test]
    async fn bulk_after_a_pause_starts_low_while_urgent_work_runs() {
        // Alone, bulk work takes the whole limit at once.
        let s = Scheduler::new(32, 32, true, 1 << 20);
        let bulk = bulk_slots(&s, 32).await;
        assert_eq!(s.bulk_limit(), 32);
        drop(bulk);
        // Beside urgent work, bulk work from a pause starts at its floor (32 / 16)...
        let s = Scheduler::new(32, 32, true, 1 << 20);
        s.ticking.set(()).expect("not started");
        let urgent = s.slot(Class::Urgent, Way::Up).await;
        let mut bulk = bulk_slots(&s, 2).await;
        assert_eq!(s.bulk_limit(), 2);
        assert!(
            given(&s, Class::Bulk).await.is_none(),
            "a third bulk request ran"
        );
        // ...and grows as urgent writes stay on time.
        let mut now = Instant::now();
        for _ in 0..3 {
            wrote(&s, &mut now, 200);
        }
        assert!(s.bulk_limit() > 2, "no growth from {}", s.bulk_limit());
        // A request that follows others without a pause does not start it over.
        bulk.clear();
        let grown = s.bulk_limit();
        let next = s.slot(Class::Bulk, Way::Up).await;
        assert_eq!(s.bulk_limit(), grown);
        // Urgent work still in flight, but no urgent write judged for a while: lifted.
        let mut st = s.slots.lock().unwrap();
        assert!(!st.quiet(now), "lifted while urgent writes were judged");
        assert!(st.quiet(now + crate::yielding::UNJUDGED));
        assert_eq!(st.bulk_cap.get(32), 32);
        drop(st);
        drop((urgent, next));
    }

    #[tokio::test]
    async fn bulk_never_starts_low_for_urgent_work_that_is_never_judged() {
        // Urgent requests in flight, none of them a write to judge (reads, small files): bulk
        // work gets its whole limit back at the next tick.
        let s = Scheduler::new(32, 32, true, 1 << 20);
        s.ticking.set(()).expect("not started");
        let urgent = s.slot(Class::Urgent, Way::Up).await;
        let bulk = s.slot(Class::Bulk, Way::Up).await;
        assert_eq!(s.bulk_limit(), 2);
        assert!(s.slots.lock().unwrap().quiet(Instant::now()));
        assert_eq!(s.bulk_limit(), 32);
        drop((urgent, bulk));
    }

    /// A step of four urgent writes of a MiB, each `ms` long, begun after the step before;
    /// judged a step after they end.
    fn wrote(s: &Arc<Scheduler>, now: &mut Instant, ms: u64) {
        *now += Duration::from_millis(ms + 300);
        for _ in 0..4 {
            s.urgent_written_at(1 << 20, Duration::from_millis(ms), *now);
        }
        s.judge_at(*now + crate::yielding::STEP);
    }

    /// Asks for an urgent slot in a task; the slot once granted.
    fn ask_urgent(s: &Arc<Scheduler>) -> tokio::task::JoinHandle<Slot> {
        let s = s.clone();
        tokio::spawn(async move { s.slot(Class::Urgent, Way::Up).await })
    }

    /// `n` bulk slots, held.
    async fn bulk_slots(s: &Arc<Scheduler>, n: usize) -> Vec<Slot> {
        futures::future::join_all((0..n).map(|_| s.slot(Class::Bulk, Way::Up))).await
    }

    /// Lets an asked urgent request reach the queue.
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    /// Asks for an urgent slot while `held` is held, then drops `held`: whether the slot's
    /// clock started at the ask (before the release) rather than at the grant.
    async fn clock_from_ask(s: &Arc<Scheduler>, held: Slot) -> bool {
        let next = ask_urgent(s);
        settle().await;
        let released = Instant::now();
        drop(held);
        next.await.unwrap().clock() < released
    }

    #[tokio::test]
    async fn a_slot_wait_counts_only_when_bulk_work_caused_it() {
        // Urgent work alone queues behind itself: its clock starts at the grant.
        let s = untuned(1, 1);
        let first = s.slot(Class::Urgent, Way::Up).await;
        assert!(
            !clock_from_ask(&s, first).await,
            "a wait behind urgent work counted"
        );
        // A bulk request holds the slot it would have had: the wait counts.
        let s = untuned(1, 1);
        let bulk = s.slot(Class::Bulk, Way::Up).await;
        assert!(
            clock_from_ask(&s, bulk).await,
            "a wait behind bulk work not counted"
        );
        // Bulk in flight, but the urgent requests fill the limit and the rest wait for them:
        // not bulk's doing.
        let s = untuned(2, 3);
        let bulk = s.slot(Class::Bulk, Way::Up).await;
        let [one, two] = [
            s.slot(Class::Urgent, Way::Up).await,
            s.slot(Class::Urgent, Way::Up).await,
        ];
        assert!(
            !clock_from_ask(&s, one).await,
            "a wait behind the urgent ones counted"
        );
        drop((bulk, two));
        // No bulk in flight at the ask; then bulk's share lets a bulk request in ahead of
        // the urgent ones waiting with room: the wait of those counts, not the earlier ones'.
        let s = Scheduler::new(2, 2, true, 1 << 20);
        let mut held = VecDeque::from([
            s.slot(Class::Urgent, Way::Up).await,
            s.slot(Class::Urgent, Way::Up).await,
        ]);
        let bulk = tokio::spawn({
            let s = s.clone();
            async move { s.slot(Class::Bulk, Way::Up).await }
        });
        settle().await;
        let mut waiting = VecDeque::new();
        for _ in 0..BULK_SHARE {
            waiting.push_back(ask_urgent(&s));
            settle().await;
        }
        // Three urgent grants in a row, then bulk's turn while the fourth waits with room.
        for i in 0..BULK_SHARE {
            let released = Instant::now();
            held.pop_front();
            if i + 1 < BULK_SHARE {
                let slot = waiting.pop_front().unwrap().await.unwrap();
                assert!(
                    slot.clock() >= released,
                    "urgent grant {i} counted its wait"
                );
                held.push_back(slot);
            }
        }
        let bulk = bulk.await.unwrap();
        let released = Instant::now();
        held.pop_front();
        let slot = waiting.pop_front().unwrap().await.unwrap();
        assert!(
            slot.clock() < released,
            "passed over by bulk's share, not counted"
        );
        drop((bulk, slot, held));
    }
}

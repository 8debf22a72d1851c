//! Who runs next. Seed 004's lessons: a low class that never runs holds its connections until
//! the clients time out and retry in lockstep; so every class keeps a share (one pick in a
//! hundred is random, and a class waiting a second is served next), tenants take turns within
//! a class, and a full queue is answered at once with 503 and a jittered Retry-After instead
//! of being held.
//!
//! A connection has at most one request here at a time (HTTP/1.1 reads the next request only
//! after answering this one), so a tenant's queue in arrival order gives each of its
//! connections one request per round.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;

use serde::Deserialize;
use tokio::sync::oneshot;

/// What a request is for, most urgent first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// WAL push and fetch: a database waits on each.
    Urgent = 0,
    /// Reads of a restore.
    Restore = 1,
    /// Writes of a backup, and the listings it starts with.
    Backup = 2,
    /// Deletes: forget, prune, expiry.
    Maintenance = 3,
}

impl Class {
    /// Every class, most urgent first.
    pub const ALL: [Class; 4] = [
        Class::Urgent,
        Class::Restore,
        Class::Backup,
        Class::Maintenance,
    ];

    /// The class's name in metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Class::Urgent => "urgent",
            Class::Restore => "restore",
            Class::Backup => "backup",
            Class::Maintenance => "maintenance",
        }
    }
}

/// The server's bounds (`[limits]` in `serve.toml`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Requests whose store work runs at once.
    pub slots: usize,
    /// Requests one tenant may have waiting in one class; past it, 503.
    pub queue: usize,
    /// Bytes of request and response bodies held in memory at once, all clients together;
    /// one tenant may hold a quarter of it.
    pub body_memory: String,
    /// Largest object one request may write or read whole.
    pub max_body: String,
    /// Connections open at once; past it, new ones are closed at once.
    pub connections: usize,
    /// Urgent requests (WAL) one tenant may have running or waiting at once; a quarter of
    /// `slots` when unset. Urgency comes from the request's path, which the tenant chooses:
    /// past it, its requests take their turn as backups.
    pub urgent_per_tenant: Option<usize>,
    /// Connections one client address may hold open; half of `connections` when unset.
    /// Behind a load balancer every connection comes from its address: set it to
    /// `connections` there.
    pub per_address: Option<usize>,
    /// Retry-After, seconds: the answer is this plus up to as much again, at random, so that
    /// refused clients do not come back together.
    pub retry_after: u64,
    /// Seconds an upload session may go without a new block before its blocks are removed
    /// (a client that went away mid-upload): between one and two of these.
    pub upload_idle: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            slots: 64,
            queue: 32,
            body_memory: "512MiB".into(),
            // restic's largest packs (--pack-size 128) run past 128 MiB by up to a blob.
            max_body: "160MiB".into(),
            connections: 4096,
            urgent_per_tenant: None,
            per_address: None,
            retry_after: 1,
            upload_idle: 6 * 3600,
        }
    }
}

/// A class waiting this long is served next, whatever is above it.
const STARVED: Duration = Duration::from_secs(1);
/// One pick in this many goes to a waiting class at random.
const RANDOM_PICK: f64 = 0.01;

/// The queue was full: come back after this long.
#[derive(Debug, Clone, Copy)]
pub struct Busy {
    /// When to try again.
    pub retry_after: Duration,
}

/// Hands out the slots in which requests do their store work.
#[derive(Debug)]
pub struct Scheduler {
    slots: usize,
    /// Slots the classes below urgent may hold: all but an eighth. (On the wire below, the
    /// transfer engine holds bulk back while urgent writes run late.)
    bulk_max: usize,
    queue: usize,
    /// See [`Limits::urgent_per_tenant`].
    urgent_per_tenant: usize,
    retry_after: u64,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    running: usize,
    /// Slots held by the classes below urgent.
    bulk: usize,
    classes: [Ring; 4],
    /// Urgent requests of each tenant, running or waiting.
    urgent_of: HashMap<Arc<str>, usize>,
}

/// One class's waiters: tenants in turn, each tenant's requests in arrival order.
#[derive(Debug, Default)]
struct Ring {
    turn: VecDeque<Arc<str>>,
    waiting: HashMap<Arc<str>, VecDeque<oneshot::Sender<()>>>,
    /// When the class was last served, or began to wait.
    since: Option<Instant>,
}

/// A slot: store work may run while it is held.
#[derive(Debug)]
pub struct Permit {
    sched: Arc<Scheduler>,
    /// The tenant whose urgent request this is; `None`: not urgent (or demoted).
    urgent: Option<Arc<str>>,
}

impl Permit {
    /// Whether it runs as urgent work: a WAL request within its tenant's bound.
    pub fn is_urgent(&self) -> bool {
        self.urgent.is_some()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.sched.release(self.urgent.is_some());
        if let Some(t) = &self.urgent {
            self.sched.uncount(t);
        }
    }
}

/// A request waiting for a slot; if it is given up (the client left), a slot handed to it
/// meanwhile is passed on.
struct Waiting {
    rx: Option<oneshot::Receiver<()>>,
    sched: Arc<Scheduler>,
    urgent: Option<Arc<str>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if rx.try_recv().is_ok() {
                self.sched.release(self.urgent.is_some());
            }
        }
        if let Some(t) = self.urgent.take() {
            self.sched.uncount(&t);
        }
    }
}

impl Scheduler {
    /// A scheduler with `limits`' slots and queue bound.
    pub fn new(limits: &Limits) -> Arc<Scheduler> {
        let slots = limits.slots.max(1);
        Arc::new(Scheduler {
            slots,
            // An eighth of the slots (one at the least, none of one) is kept for urgent work:
            // long bulk transfers holding every slot would otherwise hold up a WAL segment
            // until one of them ends (seconds over a WAN).
            bulk_max: slots - (slots / 8).max(1).min(slots - 1),
            queue: limits.queue.max(1),
            urgent_per_tenant: limits.urgent_per_tenant.unwrap_or(slots / 4).max(1),
            retry_after: limits.retry_after.max(1),
            state: Mutex::new(State {
                running: 0,
                bulk: 0,
                classes: Default::default(),
                urgent_of: HashMap::new(),
            }),
        })
    }

    /// Waits for a slot for `tenant`'s request of `class`, or says at once that its queue is
    /// full. An urgent request past its tenant's bound waits as a backup.
    pub async fn admit(self: &Arc<Self>, tenant: &str, class: Class) -> Result<Permit, Busy> {
        let tenant: Arc<str> = Arc::from(tenant);
        let (rx, urgent) = {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let held = st.urgent_of.get(&tenant).copied().unwrap_or(0);
            let class = match class == Class::Urgent && held >= self.urgent_per_tenant {
                true => Class::Backup,
                false => class,
            };
            let urgent = class == Class::Urgent;
            // Waiters exist only while every slot the class may use runs: a free one is taken
            // at once.
            if st.running < self.slots && (urgent || st.bulk < self.bulk_max) {
                st.running += 1;
                st.bulk += usize::from(!urgent);
                if urgent {
                    *st.urgent_of.entry(tenant.clone()).or_default() += 1;
                }
                return Ok(Permit {
                    sched: self.clone(),
                    urgent: urgent.then_some(tenant),
                });
            }
            let ring = &mut st.classes[class as usize];
            let q = ring.waiting.entry(tenant.clone()).or_default();
            q.retain(|tx| !tx.is_closed());
            if q.len() >= self.queue {
                return Err(self.busy());
            }
            let (tx, rx) = oneshot::channel();
            q.push_back(tx);
            // A tenant is in the turn order once, however its queue came and went.
            if !ring.turn.contains(&tenant) {
                ring.turn.push_back(tenant.clone());
            }
            if ring.since.is_none() {
                ring.since = Some(Instant::now());
            }
            if urgent {
                *st.urgent_of.entry(tenant.clone()).or_default() += 1;
            }
            (rx, urgent)
        };
        let mut w = Waiting {
            rx: Some(rx),
            sched: self.clone(),
            urgent: urgent.then_some(tenant),
        };
        let got = w.rx.as_mut().expect("set above").await;
        w.rx = None;
        match got {
            Ok(()) => Ok(Permit {
                sched: self.clone(),
                urgent: w.urgent.take(),
            }),
            Err(_) => Err(self.busy()),
        }
    }

    /// One urgent request of `tenant` fewer.
    fn uncount(&self, tenant: &Arc<str>) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = st.urgent_of.get_mut(tenant) {
            *n -= 1;
            if *n == 0 {
                st.urgent_of.remove(tenant);
            }
        }
    }

    fn busy(&self) -> Busy {
        Busy {
            retry_after: self.retry_after(),
        }
    }

    /// What a 503 tells its client to wait: `retry_after` plus up to as much again, at
    /// random, so that the clients refused together do not come back together.
    pub fn retry_after(&self) -> Duration {
        let s = self.retry_after;
        Duration::from_secs(s + rand::rng().random_range(0..=s))
    }

    /// Requests waiting, per tenant and class.
    pub fn depths(&self) -> Vec<(String, Class, usize)> {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for c in Class::ALL {
            for (t, q) in &st.classes[c as usize].waiting {
                out.push((t.to_string(), c, q.len()));
            }
        }
        out
    }

    /// A slot comes free: a waiter that may run takes it, or it goes back.
    fn release(&self, urgent: bool) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.running -= 1;
        st.bulk -= usize::from(!urgent);
        while st.running < self.slots {
            let bulk_may = st.bulk < self.bulk_max;
            let Some((tx, c)) = st.next(&mut rand::rng(), bulk_may) else {
                return;
            };
            let bulk = usize::from(c != Class::Urgent as usize);
            st.running += 1;
            st.bulk += bulk;
            if tx.send(()).is_err() {
                st.running -= 1;
                st.bulk -= bulk;
            }
        }
    }
}

impl State {
    /// The next waiter, with its class: a class waiting for [`STARVED`], else one at random
    /// one pick in [`RANDOM_PICK`], else the most urgent; within it, the tenant whose turn it
    /// is. Only urgent waiters are taken unless `bulk_may`.
    fn next(&mut self, rng: &mut impl Rng, bulk_may: bool) -> Option<(oneshot::Sender<()>, usize)> {
        let waiting: Vec<usize> = (0..4)
            .filter(|&c| !self.classes[c].turn.is_empty() && (c == 0 || bulk_may))
            .collect();
        let first = *waiting.first()?;
        let now = Instant::now();
        let starved = waiting.iter().copied().find(|&c| {
            self.classes[c]
                .since
                .is_some_and(|s| now.duration_since(s) >= STARVED)
        });
        let c = match starved {
            Some(c) => c,
            None if rng.random_bool(RANDOM_PICK) => waiting[rng.random_range(0..waiting.len())],
            None => first,
        };
        let ring = &mut self.classes[c];
        ring.since = Some(now);
        // Tenants whose waiters all left are passed over, not taken for an empty class.
        let mut got = None;
        while let Some(tenant) = ring.turn.pop_front() {
            let Some(q) = ring.waiting.get_mut(&tenant) else {
                continue;
            };
            let tx = q.pop_front();
            if q.is_empty() {
                ring.waiting.remove(&tenant);
            } else {
                ring.turn.push_back(tenant);
            }
            if tx.is_some() {
                got = tx;
                break;
            }
        }
        if ring.turn.is_empty() {
            ring.since = None;
        }
        // Another class may still wait: the caller asks again when this one had none.
        match got {
            Some(tx) => Some((tx, c)),
            None => self.next(rng, bulk_may),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(slots: usize, queue: usize) -> Limits {
        Limits {
            slots,
            queue,
            ..Limits::default()
        }
    }

    /// Queues `n` requests of `tenant` in `class`; each reports its tag when it runs.
    fn queue(
        s: &Arc<Scheduler>, tenant: &str, class: Class, n: usize, tag: &'static str,
        order: &Arc<Mutex<Vec<&'static str>>>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        (0..n)
            .map(|_| {
                let (s, t, order) = (s.clone(), tenant.to_string(), order.clone());
                tokio::spawn(async move {
                    let p = s.admit(&t, class).await.expect("queued");
                    order.lock().unwrap().push(tag);
                    drop(p);
                })
            })
            .collect()
    }

    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn tenants_take_turns_and_urgent_goes_first() {
        let s = Scheduler::new(&limits(1, 100));
        let hold = s.admit("x", Class::Backup).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut all = queue(&s, "a", Class::Backup, 4, "a", &order);
        settle().await;
        all.extend(queue(&s, "b", Class::Backup, 2, "b", &order));
        settle().await;
        all.extend(queue(&s, "w", Class::Urgent, 1, "wal", &order));
        settle().await;
        drop(hold);
        for h in all {
            h.await.unwrap();
        }
        let got = order.lock().unwrap().clone();
        // One pick in a hundred may be random: the order is checked where it must hold.
        assert_eq!(got.len(), 7);
        if got[0] == "wal" {
            assert_eq!(&got[1..5], ["a", "b", "a", "b"], "{got:?}");
        }
        assert!(
            got.iter().position(|t| *t == "wal").unwrap() <= 1,
            "{got:?}"
        );
    }

    #[tokio::test]
    async fn a_tenant_past_its_urgent_bound_waits_as_a_backup() {
        let s = Scheduler::new(&Limits {
            urgent_per_tenant: Some(2),
            ..limits(8, 100)
        });
        let a1 = s.admit("a", Class::Urgent).await.unwrap();
        let a2 = s.admit("a", Class::Urgent).await.unwrap();
        let a3 = s.admit("a", Class::Urgent).await.unwrap();
        assert!(a1.is_urgent() && a2.is_urgent());
        assert!(
            !a3.is_urgent(),
            "a third urgent request of one tenant ran as urgent"
        );
        assert!(s.admit("b", Class::Urgent).await.unwrap().is_urgent());
        // Its urgent requests done, the tenant's next one is urgent again.
        drop((a1, a3));
        assert!(s.admit("a", Class::Urgent).await.unwrap().is_urgent());
        drop(a2);
        assert!(s.state.lock().unwrap().urgent_of.is_empty());
    }

    #[tokio::test]
    async fn urgent_work_finds_a_slot_that_bulk_work_cannot_take() {
        let s = Scheduler::new(&limits(8, 100));
        let mut held = Vec::new();
        for _ in 0..7 {
            held.push(s.admit("a", Class::Backup).await.unwrap());
        }
        // The eighth slot is urgent work's: a restore waits for it, a WAL segment does not.
        let order = Arc::new(Mutex::new(Vec::new()));
        let restore = queue(&s, "b", Class::Restore, 1, "restore", &order);
        settle().await;
        assert!(order.lock().unwrap().is_empty());
        let wal = tokio::time::timeout(Duration::from_secs(5), s.admit("c", Class::Urgent))
            .await
            .expect("urgent work waited behind bulk slots")
            .unwrap();
        // An urgent slot coming free does not let the bulk classes past their bound...
        drop(wal);
        settle().await;
        assert!(order.lock().unwrap().is_empty());
        // ...a bulk one does.
        held.pop();
        for h in restore {
            h.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["restore"]);
    }

    #[tokio::test]
    async fn a_full_queue_is_refused_at_once() {
        let s = Scheduler::new(&limits(1, 2));
        let hold = s.admit("a", Class::Backup).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let queued = queue(&s, "a", Class::Backup, 2, "a", &order);
        settle().await;
        let busy = s
            .admit("a", Class::Backup)
            .await
            .expect_err("over the bound");
        assert!(busy.retry_after >= Duration::from_secs(1));
        // Another tenant, and another class, have queues of their own.
        let other = queue(&s, "b", Class::Backup, 1, "b", &order);
        settle().await;
        assert_eq!(s.depths().iter().map(|d| d.2).sum::<usize>(), 3);
        drop(hold);
        for h in queued.into_iter().chain(other) {
            h.await.unwrap();
        }
        assert_eq!(order.lock().unwrap().len(), 3);
    }

    #[test]
    fn a_lower_class_is_served_within_its_share() {
        // Always-full urgent and maintenance queues: maintenance must still get picks.
        let mut st = State {
            running: 0,
            bulk: 0,
            classes: Default::default(),
            urgent_of: HashMap::new(),
        };
        let mut rng = rand::rng();
        let mut rxs = Vec::new();
        let mut maint = 0;
        for _ in 0..10_000 {
            for c in [Class::Urgent, Class::Maintenance] {
                let ring = &mut st.classes[c as usize];
                if ring.turn.is_empty() {
                    let (tx, rx) = oneshot::channel();
                    rxs.push(rx);
                    ring.waiting.insert(Arc::from("t"), VecDeque::from([tx]));
                    ring.turn.push_back(Arc::from("t"));
                    ring.since.get_or_insert_with(Instant::now);
                }
            }
            let before = st.classes[Class::Maintenance as usize].turn.len();
            st.next(&mut rng, true).expect("waiting");
            if st.classes[Class::Maintenance as usize].turn.len() < before {
                maint += 1;
            }
        }
        assert!(
            (20..=400).contains(&maint),
            "maintenance picked {maint} of 10000"
        );
    }

    /// A request of `tenant` that waits for a slot, then is given up (its client left).
    async fn waiter_leaves(s: &Arc<Scheduler>, tenant: &str) {
        let gone = {
            let (s, t) = (s.clone(), tenant.to_string());
            tokio::spawn(async move { s.admit(&t, Class::Backup).await.map(drop) })
        };
        settle().await;
        gone.abort();
        let _ = gone.await;
    }

    /// A tenant whose only waiter left, then asked again, is in the turn order once, and
    /// every other waiter still gets a slot as slots come free.
    #[tokio::test]
    async fn a_waiter_that_left_does_not_strand_the_others() {
        let s = Scheduler::new(&limits(1, 10));
        let hold = s.admit("x", Class::Backup).await.unwrap();
        waiter_leaves(&s, "a").await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut all = queue(&s, "a", Class::Backup, 1, "a", &order);
        settle().await;
        all.extend(queue(&s, "b", Class::Backup, 2, "b", &order));
        settle().await;
        drop(hold);
        for h in all {
            tokio::time::timeout(Duration::from_secs(5), h)
                .await
                .expect("a waiter was stranded")
                .unwrap();
        }
        assert_eq!(order.lock().unwrap().len(), 3);
    }

    #[tokio::test]
    async fn a_waiter_that_leaves_passes_its_slot_on() {
        let s = Scheduler::new(&limits(1, 10));
        let hold = s.admit("a", Class::Backup).await.unwrap();
        waiter_leaves(&s, "a").await;
        drop(hold);
        // The only slot is free again.
        let p = tokio::time::timeout(Duration::from_secs(5), s.admit("b", Class::Backup))
            .await
            .expect("the slot came back")
            .unwrap();
        drop(p);
    }
}

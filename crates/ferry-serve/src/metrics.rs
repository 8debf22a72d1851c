//! `/metrics` in Prometheus' text format: per tenant and class, what waited, for how long,
//! how long the store work took (histograms: the worst case shows, not only the mean), the
//! bytes, the answers and the 503s.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::sched::{Class, Scheduler};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Who {
    tenant: String,
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendOp {
    op: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Answer {
    tenant: String,
    class: String,
    status: u16,
}

type Seconds = Family<Who, Histogram, fn() -> Histogram>;

fn seconds() -> Histogram {
    // 0.5 ms to about 33 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 17))
}

/// The server's counters.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<Answer, Counter>,
    bytes_in: Family<Who, Counter>,
    bytes_out: Family<Who, Counter>,
    busy: Family<Who, Counter>,
    wait: Seconds,
    service: Seconds,
    depth: Family<Who, Gauge>,
    backend: Family<BackendOp, Histogram, fn() -> Histogram>,
    retries: Gauge,
    bulk_limit: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("ferry_serve");
        let requests = Family::<Answer, Counter>::default();
        let bytes_in = Family::<Who, Counter>::default();
        let bytes_out = Family::<Who, Counter>::default();
        let busy = Family::<Who, Counter>::default();
        let wait: Seconds = Family::new_with_constructor(seconds);
        let service: Seconds = Family::new_with_constructor(seconds);
        let depth = Family::<Who, Gauge>::default();
        let backend: Family<BackendOp, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(seconds);
        let retries = Gauge::default();
        let bulk_limit = Gauge::default();
        registry.register("requests", "Requests answered, by status", requests.clone());
        registry.register(
            "bytes_in",
            "Bytes of request bodies stored",
            bytes_in.clone(),
        );
        registry.register("bytes_out", "Bytes of objects sent", bytes_out.clone());
        registry.register("busy", "Requests answered 503 (queue full)", busy.clone());
        registry.register("wait_seconds", "Time waiting for a slot", wait.clone());
        registry.register("service_seconds", "Time of the store work", service.clone());
        registry.register("queue_depth", "Requests waiting for a slot", depth.clone());
        registry.register(
            "backend_seconds",
            "Time of each operation on the backend, retries included",
            backend.clone(),
        );
        registry.register(
            "backend_retries",
            "Backend requests retried after a transient failure, since start",
            retries.clone(),
        );
        registry.register(
            "backend_bulk_limit",
            "Backend requests the bulk classes may have in flight now (fewer while urgent writes run late)",
            bulk_limit.clone(),
        );
        Metrics {
            bulk_limit,
            registry,
            requests,
            bytes_in,
            bytes_out,
            busy,
            wait,
            service,
            depth,
            backend,
            retries,
        }
    }
}

fn who(tenant: &str, class: Class) -> Who {
    Who {
        tenant: tenant.to_string(),
        class: class.name().to_string(),
    }
}

/// What one request did, for [`Metrics::record`].
#[derive(Debug, Default, Clone, Copy)]
pub struct Done {
    /// HTTP status answered.
    pub status: u16,
    /// Body bytes stored.
    pub bytes_in: u64,
    /// Body bytes sent.
    pub bytes_out: u64,
    /// Waiting for memory to hold a write's body.
    pub memory: Duration,
    /// Receiving a write's body.
    pub body: Duration,
    /// Waiting for a slot.
    pub wait: Duration,
    /// The store work.
    pub service: Duration,
}

impl Metrics {
    /// Counts one answered request of `tenant` in `class`.
    pub fn record(&self, tenant: &str, class: Class, d: &Done) {
        let w = who(tenant, class);
        self.requests
            .get_or_create(&Answer {
                tenant: w.tenant.clone(),
                class: w.class.clone(),
                status: d.status,
            })
            .inc();
        self.bytes_in.get_or_create(&w).inc_by(d.bytes_in);
        self.bytes_out.get_or_create(&w).inc_by(d.bytes_out);
        if d.status == 503 {
            self.busy.get_or_create(&w).inc();
        } else {
            self.wait.get_or_create(&w).observe(d.wait.as_secs_f64());
            self.service
                .get_or_create(&w)
                .observe(d.service.as_secs_f64());
        }
    }

    /// One operation on the backend (`get`, `put`, `list`, ...) took `d`.
    pub fn backend(&self, op: &str, d: Duration) {
        self.backend
            .get_or_create(&BackendOp { op: op.to_string() })
            .observe(d.as_secs_f64());
    }

    /// The text exposition, queue depths read from `sched`, and the backend's retries and
    /// bulk limit as the transfer engine has them now.
    pub fn encode(&self, sched: &Scheduler, retries: u64, bulk_limit: usize) -> String {
        self.retries.set(i64::try_from(retries).unwrap_or(i64::MAX));
        self.bulk_limit.set(bulk_limit as i64);
        self.depth.clear();
        for (t, c, n) in sched.depths() {
            self.depth.get_or_create(&who(&t, c)).set(n as i64);
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

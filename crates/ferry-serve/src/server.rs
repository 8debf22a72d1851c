//! The HTTPS listener: TLS, HTTP/1.1, authentication, and each request taken from parsing to
//! the store and back, counted and logged.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, RANGE, RETRY_AFTER};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::answer::{Held, Out};
use crate::config::{hash_matches, Config};
use crate::metrics::{Done, Metrics};
use crate::peers::Peers;
use crate::route::{self, Op, Route};
use crate::sched::{Class, Scheduler};
use crate::stall::StallIo;
use crate::store::{Body, Objects, Refused, Reserved, TenantState};

/// restic's v2 listing type: names with sizes.
const RESTIC_V2: &str = "application/vnd.x.restic.rest.v2";
/// Longest request head (request line and headers); past it, 431.
const MAX_HEAD: usize = 64 << 10;
/// Slowest a body may arrive (after [`HEAD_TIMEOUT`] of grace): bytes per second.
const MIN_RATE: u64 = 64 << 10;
/// A TLS handshake, or a request's head, must arrive within this.
const HANDSHAKE: Duration = Duration::from_secs(10);
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// A staged body goes to disk, and a streamed answer comes from it, in chunks of this many
/// bytes (see [`Body::Staged`] and [`Out::streamed`]).
const STAGED_CHUNK: usize = 1 << 20;
/// Bytes a read without a range's end asks for first, with what the object is ([`Span::First`]):
/// repository files other than packs (keys, config, snapshots, locks, most indexes) fit.
const FIRST_BYTES: u64 = 128 << 10;

/// The sweeper's task, stopped with the server.
struct Sweeper(tokio::task::JoinHandle<()>);

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The server: its tenants' objects, its scheduler and its counters.
#[derive(Debug)]
pub struct Server {
    objects: Objects,
    sched: Arc<Scheduler>,
    metrics: Metrics,
    /// Bytes of bodies in memory, in KiB permits, all tenants together.
    bodies: Arc<Semaphore>,
    /// The part of the body memory only urgent requests (WAL) may use: a WAL segment never
    /// waits for memory behind backups' packs.
    urgent: Arc<Semaphore>,
    /// The reserve's size, KiB.
    urgent_max: u32,
    /// Connections that may be open at once.
    connections: Arc<Semaphore>,
    /// And from one client address.
    peers: Arc<Peers>,
    metrics_token: Option<String>,
    /// See [`crate::sched::Limits::upload_idle`].
    upload_idle: Duration,
}

type Reply = Response<Out>;

fn reply(status: u16, body: impl Into<Bytes>) -> Reply {
    answer(status, Out::whole(body))
}

fn answer(status: u16, body: Out) -> Reply {
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r
}

/// The answer to a refused request. A 503 says when to come back: `retry_after` (None: the
/// scheduler's own, jittered).
fn refuse_after(e: &Refused, retry_after: Option<Duration>) -> Reply {
    let mut r = reply(e.status, format!("{}\n", e.why));
    if let (503, Some(after)) = (e.status, retry_after) {
        r.headers_mut().insert(RETRY_AFTER, after.as_secs().into());
    }
    if e.status == 401 {
        r.headers_mut().insert(
            "www-authenticate",
            "Basic realm=\"ferry\"".parse().expect("valid"),
        );
    }
    r
}

fn kib(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX)
}

impl Server {
    /// The answer to a refused request; a 503 with a jittered Retry-After.
    fn refuse(&self, e: &Refused) -> Reply {
        refuse_after(e, Some(self.sched.retry_after()))
    }

    /// A server for `cfg`'s tenants over `backend`, objects under `base` in it.
    pub fn new(
        cfg: &Config, backend: ferry_transfer::Remote, base: &str,
    ) -> Result<Server, String> {
        let size =
            |s: &str| ferry_store::size::parse(s).ok_or(format!("limits: {s:?} is not a size"));
        let (body_memory, max_body) = (size(&cfg.limits.body_memory)?, size(&cfg.limits.max_body)?);
        // An eighth is kept for urgent bodies: two WAL segments of 16 MiB at the least.
        let reserve = (body_memory / 8).max(32 << 20).min(body_memory / 2);
        if max_body > body_memory - reserve {
            return Err(format!(
                "limits: max_body is above what body_memory leaves besides the urgent reserve \
                 ({} MiB)",
                (body_memory - reserve) >> 20
            ));
        }
        // One tenant may hold a quarter of the body memory, and always one whole body; and
        // a quarter of the reserve, one WAL segment at the least.
        let share = (body_memory / 4).max(max_body);
        let urgent_share = (reserve / 4).max((16 << 20) + (64 << 10)).min(reserve);
        Ok(Server {
            objects: Objects::new(backend, base, &cfg.tenants, max_body, share, urgent_share),
            sched: Scheduler::new(&cfg.limits),
            metrics: Metrics::default(),
            bodies: Arc::new(Semaphore::new(kib(body_memory - reserve) as usize)),
            urgent: Arc::new(Semaphore::new(kib(reserve) as usize)),
            urgent_max: kib(urgent_share),
            connections: Arc::new(Semaphore::new(cfg.limits.connections.max(1))),
            peers: Peers::new(cfg.limits.per_address.unwrap_or(cfg.limits.connections / 2)),
            metrics_token: cfg.metrics_token_sha256.clone(),
            upload_idle: Duration::from_secs(cfg.limits.upload_idle.max(1)),
        })
    }

    /// Serves HTTPS on `listener` with `tls` until the task is dropped.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, tls: Arc<rustls::ServerConfig>) {
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        let _sweeper = Sweeper(tokio::spawn(self.clone().sweep()));
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors, most often: wait for some to close.
                    crate::logline::emit(format_args!("ferry serve: accept: {e}"));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Past the bound, the newest connection is closed at once: the ones open keep
            // being served.
            // So is one past its address's share.
            let Ok(open) = self.connections.clone().try_acquire_owned() else {
                drop(tcp);
                continue;
            };
            let Some(slot) = self.peers.enter(peer.ip()) else {
                drop(tcp);
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, me) = (acceptor.clone(), self.clone());
            tokio::spawn(async move {
                let _open = (open, slot);
                let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await
                else {
                    return;
                };
                // A client certificate, verified against client_ca during the handshake.
                let subject: Option<Arc<str>> = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|c| subject(c.as_ref()))
                    .map(Arc::from);
                let service = hyper::service::service_fn(move |req| {
                    let (me, subject) = (me.clone(), subject.clone());
                    async move { Ok::<_, Infallible>(me.handle(peer, subject.as_deref(), req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEAD_TIMEOUT)
                    .max_buf_size(MAX_HEAD)
                    .serve_connection(
                        TokioIo::new(StallIo::new(tls, HEAD_TIMEOUT, MIN_RATE)),
                        service,
                    )
                    .await;
            });
        }
    }

    /// Removes what a killed server left (temp files of bodies it was receiving) once, then
    /// abandoned upload sessions every `upload_idle`, for good.
    async fn sweep(self: Arc<Self>) {
        // Past the longest a body may take to come (its deadline), and an hour for its turn.
        let idle = HEAD_TIMEOUT
            + Duration::from_secs(self.objects.max_body() / MIN_RATE)
            + Duration::from_secs(3600);
        self.objects.sweep_temp(idle).await;
        let mut seen = HashMap::new();
        loop {
            tokio::time::sleep(self.upload_idle).await;
            self.objects.sweep_uploads(&mut seen).await;
        }
    }

    /// Answers one request.
    /// `subject`: the client certificate's subject, when the client presented one.
    pub async fn handle(
        &self, peer: SocketAddr, subject: Option<&str>, req: Request<Incoming>,
    ) -> Reply {
        let start = Instant::now();
        let (method, path) = (req.method().clone(), req.uri().path().to_string());
        // hyper bounds its read buffer, but a head that arrived whole in a few reads can pass
        // it: the bound is checked here too.
        let head: usize = req.uri().to_string().len()
            + req
                .headers()
                .iter()
                .map(|(k, v)| k.as_str().len() + v.len() + 4)
                .sum::<usize>();
        if head > MAX_HEAD {
            return reply(431, "the request's head is too large\n");
        }
        match path.as_str() {
            "/healthz" => return reply(200, "ok\n"),
            "/metrics" => {
                let open = self.metrics_token.as_deref().is_none_or(|h| {
                    bearer(req.headers()).is_some_and(|t| hash_matches(h, t.as_bytes()))
                });
                return match open {
                    true => reply(
                        200,
                        self.metrics.encode(
                            &self.sched,
                            self.objects.retries(),
                            self.objects.bulk_limit(),
                        ),
                    ),
                    false => self.refuse(&Refused::new(401, "a token is needed")),
                };
            }
            _ => {}
        }
        let who = self.authenticate(req.headers(), subject);
        let route = route::parse(&method, &path, req.uri().query());
        let (reply, class, done, tenant) = match (who, route) {
            (None, _) => (
                self.refuse(&Refused::new(401, "unknown or missing token")),
                None,
                Done::default(),
                None,
            ),
            (Some(t), Err(e)) => (
                self.refuse(&Refused::new(400, e)),
                None,
                Done::default(),
                Some(t),
            ),
            (Some(t), Ok(r)) if r.tenant != t.cfg.name => (
                self.refuse(&Refused::new(403, "another tenant's objects")),
                Some(r.class),
                Done::default(),
                Some(t),
            ),
            (Some(t), Ok(r)) => {
                let class = r.class;
                let (reply, done) = self.run(t, r, req).await;
                (reply, Some(class), done, Some(t))
            }
        };
        let status = reply.status().as_u16();
        let done = Done { status, ..done };
        if let (Some(t), Some(c)) = (tenant, class) {
            self.metrics.record(&t.cfg.name, c, &done);
        }
        log(peer, tenant, class, &method, &path, &done, start);
        reply
    }

    /// The tenant the request's credentials name: HTTP Basic (restic: the user is the
    /// tenant, the password its token), a bearer token, or else the connection's client
    /// certificate.
    fn authenticate(&self, h: &HeaderMap, subject: Option<&str>) -> Option<&TenantState> {
        let Some(auth) = h.get(AUTHORIZATION) else {
            let subject = subject?;
            return self
                .objects
                .tenants()
                .find(|t| t.cfg.client_cert_subject.as_deref() == Some(subject));
        };
        let auth = auth.to_str().ok()?;
        if let Some(b) = auth.strip_prefix("Basic ") {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .ok()?;
            let raw = String::from_utf8(raw).ok()?;
            let (user, pass) = raw.split_once(':')?;
            // Hashed before the name is looked up: an unknown name takes as long.
            let digest = crate::config::digest(pass.as_bytes());
            let t = self.objects.tenant(user)?;
            return t.cfg.digest_matches(&digest).then_some(t);
        }
        let token = bearer(h)?;
        // Hashed once, compared with every tenant's hash in constant time.
        let digest = crate::config::digest(token.as_bytes());
        self.objects
            .tenants()
            .find(|t| t.cfg.digest_matches(&digest))
    }

    /// Runs an authenticated request of `t`.
    async fn run(&self, t: &TenantState, r: Route, req: Request<Incoming>) -> (Reply, Done) {
        let mut done = Done::default();
        let headers = req.headers().clone();
        // Writes: refused before the body is read, then read whole (its length checked)
        // before a slot is taken: a slow client holds its memory (or its file), not a slot.
        let written = match &r.op {
            Op::Put { key } => Some(key.clone()),
            Op::PutPart { upload, part, .. } => Some(Objects::part_key(upload, *part)),
            _ => None,
        };
        let (body, _memory, reserved) = if let Some(key) = written {
            match self.read_body(t, r.class, &key, req, &mut done).await {
                Ok((b, m, q)) => (Some(b), m, Some(q)),
                Err(e) => return (self.refuse(&e), done),
            }
        } else {
            (None, None, None)
        };
        let (mut body, mut reserved, mut held) = (body, reserved, None);
        let mut retried = false;
        let reply = loop {
            let waited = Instant::now();
            let permit = match self.sched.admit(&t.cfg.name, r.class).await {
                Ok(p) => p,
                Err(busy) => {
                    let e = Refused::new(503, "busy: try again after Retry-After");
                    return (refuse_after(&e, Some(busy.retry_after)), done);
                }
            };
            done.wait += waited.elapsed();
            let served = Instant::now();
            let got = match &r.op {
                Op::Get { key } => self.get(t, &r, key, &headers, held.take(), &mut done).await,
                _ => {
                    let (b, q) = (body.take(), reserved.take());
                    self.op(t, &r, &headers, b, q, &mut done).await.map(Ok)
                }
            };
            drop(permit);
            done.service += served.elapsed();
            match got {
                Ok(Ok(rep)) => break rep,
                // An answer that found no memory free waits for it without a slot, then
                // comes back for one: a client that never reads its answers holds memory
                // (its tenant's share first), never the slots the other tenants need.
                Ok(Err(len)) if !retried => {
                    retried = true;
                    let holding = Instant::now();
                    let got = self.hold(t, r.class, len).await;
                    done.memory += holding.elapsed();
                    match got {
                        Ok(h) => held = Some((len, h)),
                        Err(e) => break self.refuse(&e),
                    }
                }
                Ok(Err(_)) => break self.refuse(&Refused::new(503, "busy: the object grew")),
                Err(e) => break self.refuse(&e),
            }
        };
        self.metrics.backend(r.op.name(), done.service);
        (reply, done)
    }

    /// A GET inside its slot: the object's span, then memory for it taken at once (or the
    /// memory `held` from before, when it is enough), then its bytes. `Ok(Err(len))` when no
    /// memory for `len` bytes was free: [`Server::run`] waits for it outside the slot.
    async fn get(
        &self, t: &TenantState, r: &Route, key: &str, headers: &HeaderMap,
        held: Option<(u64, Held)>, done: &mut Done,
    ) -> Result<Result<Reply, u64>, Refused> {
        let o = &self.objects;
        let asked = range(headers)?;
        // Memory held already for a longer answer than FIRST_BYTES: its read waited for it,
        // and goes by a HEAD first.
        let longer = held.as_ref().is_some_and(|(n, _)| *n > FIRST_BYTES);
        // A directory backend's file is opened (in the slot) and streamed (outside it).
        let file = o.open(t, r.class, key).await?;
        let span = match (file, asked) {
            (Some(f), asked) => Span::File(o.cut(f.size(), asked)?, f),
            (None, Some(a)) if a.end != u64::MAX && a.end - a.start <= o.max_body() => {
                Span::Asked(a)
            }
            (None, asked) if !longer && asked.as_ref().is_none_or(|a| a.end == u64::MAX) => {
                Span::First(asked)
            }
            (None, asked) => {
                let (rg, size) = o.span(t, r.class, key, asked).await?;
                Span::Known(rg, size)
            }
        };
        // A streamed answer holds memory for the chunks on their way, not for its length:
        // the one being read, and one hyper may hold unwritten.
        let need = match &span {
            Span::File(rg, _) => (rg.end - rg.start).min(2 * STAGED_CHUNK as u64),
            Span::Known(rg, _) | Span::Asked(rg) => rg.end - rg.start,
            Span::First(_) => FIRST_BYTES,
        };
        let mut held = match held {
            Some((n, h)) if n >= need => h,
            other => {
                // Memory held for a smaller answer goes back before more is asked for.
                drop(other);
                match self.hold_now(t, r.class, need) {
                    Some(h) => h,
                    None => return Ok(Err(need)),
                }
            }
        };
        // The answer holds memory until it is written (or the client is gone).
        let (rg, size, body) = match span {
            Span::File(rg, f) => {
                let size = f.size();
                let body = Out::streamed(f, rg.clone(), STAGED_CHUNK as u64, held);
                (rg, size, body)
            }
            Span::Known(rg, size) => {
                let data = o.read(t, r.class, key, rg.clone()).await?;
                (rg, size, Out::pinned(data, held))
            }
            Span::Asked(a) => {
                let (data, size) = o.read_sized(t, r.class, key, a.clone()).await?;
                // What a HEAD first would have refused (a range that starts past the end).
                let rg = o.cut(size, Some(a))?;
                (rg, size, Out::pinned(data, held))
            }
            Span::First(asked) => {
                let start = asked.as_ref().map_or(0, |a| a.start);
                let first = start..start.saturating_add(FIRST_BYTES);
                let (data, size) = o.read_sized(t, r.class, key, first.clone()).await?;
                let rg = o.cut(size, asked)?;
                let data = match rg.end <= first.end {
                    true => data,
                    // Longer: the rest after it, once the memory for the whole answer is held.
                    false => {
                        let need = rg.end - rg.start;
                        drop(held);
                        held = match self.hold_now(t, r.class, need) {
                            Some(h) => h,
                            None => return Ok(Err(need)),
                        };
                        let rest = o.read(t, r.class, key, first.end..rg.end).await?;
                        ferry_store::buffer::concat(&[&data, &rest])
                    }
                };
                (rg, size, Out::pinned(data, held))
            }
        };
        // An empty object has no byte to give a range of: all of it, 200.
        let ranged = headers.contains_key(RANGE) && size > 0;
        done.bytes_out = rg.end - rg.start;
        let mut rep = answer(if ranged { 206 } else { 200 }, body);
        if ranged {
            let v = format!("bytes {}-{}/{size}", rg.start, rg.end.saturating_sub(1));
            rep.headers_mut()
                .insert("content-range", v.parse().expect("ascii"));
        }
        Ok(Ok(rep))
    }

    /// The body of a write to `key`, read whole: into the object's temp file as it arrives
    /// where the backend is a directory (holding a chunk's memory while it does), else into
    /// one buffer of its announced length, with the share of the body-memory budget it holds
    /// until the write is done. The time waiting for memory and the time receiving go to
    /// `done`: the access log tells them apart.
    async fn read_body<'t>(
        &self, t: &'t TenantState, class: Class, key: &str, req: Request<Incoming>, done: &mut Done,
    ) -> Result<(Body, Option<Held>, Reserved<'t>), Refused> {
        let len = req
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .ok_or_else(|| Refused::new(411, "a Content-Length is needed"))?;
        let reserved = self.objects.may_write(t, len).await?;
        // A staged body holds memory only for the chunk on its way to disk.
        let streams = self.objects.streams();
        let holding = Instant::now();
        let memory = match streams {
            true => self.hold(t, class, len.min(STAGED_CHUNK as u64)).await,
            false => self.hold(t, class, len).await,
        };
        done.memory = holding.elapsed();
        let memory = memory?;
        // Its file only once the body may come: a body refused meanwhile makes nothing.
        let mut staged = match streams {
            true => Some(self.objects.stage(t, key).await?),
            false => None,
        };
        let receiving = Instant::now();
        // One buffer of the announced size (or a chunk), filled frame by frame (collecting
        // the frames and joining them would hold the body twice), from the block-buffer pool:
        // a fresh multi-MiB buffer per body faulted in every page, a tenth of the server's CPU
        // under a flood of backups (perf).
        let cap = match streams {
            true => STAGED_CHUNK.min(len as usize),
            false => len as usize,
        };
        let mut buf = ferry_store::buffer::with_capacity(cap);
        let mut body = req.into_body();
        let mut got = 0u64;
        // A body that crawls below MIN_RATE holds memory others need: it is cut off.
        let deadline = HEAD_TIMEOUT + Duration::from_secs(len / MIN_RATE);
        let read = async {
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| {
                    Refused::new(400, format!("the body did not arrive whole: {e}"))
                })?;
                if let Ok(mut data) = frame.into_data() {
                    got += data.len() as u64;
                    if got > len {
                        return Err(Refused::new(
                            400,
                            "the body is longer than its Content-Length",
                        ));
                    }
                    let Some(file) = staged.as_mut() else {
                        buf.extend_from_slice(&data);
                        continue;
                    };
                    while !data.is_empty() {
                        let n = data.len().min(cap - buf.len());
                        buf.extend_from_slice(&data.split_to(n));
                        if buf.len() == cap || got == len && data.is_empty() {
                            // Back to the pool once on disk, and the next chunk's buffer
                            // from it: no fresh pages per chunk, one chunk held at a time.
                            let full = std::mem::take(&mut buf);
                            file.write(ferry_store::buffer::bytes(full)).await?;
                            if got < len {
                                buf = ferry_store::buffer::with_capacity(cap);
                            }
                        }
                    }
                }
            }
            Ok(())
        };
        let read = tokio::time::timeout(deadline, read).await;
        done.body = receiving.elapsed();
        let whole = match read {
            Err(_) => Err(Refused::new(408, "the body came too slowly")),
            Ok(Ok(())) if got != len => Err(Refused::new(
                400,
                "the body is shorter than its Content-Length",
            )),
            Ok(r) => r,
        };
        if let Err(e) = whole {
            // Nothing of a body that did not come whole stays on disk.
            if let Some(file) = staged {
                file.discard().await;
            }
            return Err(e);
        }
        Ok(match staged {
            Some(file) => {
                ferry_store::buffer::give_back(buf);
                (Body::Staged(file), None, reserved)
            }
            None => (
                Body::Held(ferry_store::buffer::bytes(buf)),
                Some(memory),
                reserved,
            ),
        })
    }

    /// Memory for a body of `len` bytes: from the tenant's share, then from everyone's;
    /// held until the returned permits drop. Waits a while, then says busy. An urgent body
    /// that finds no memory free at once takes it from the urgent reserve instead, so that
    /// it never waits behind the bulk classes' bodies (its own tenant's backups included).
    async fn hold(&self, t: &TenantState, class: Class, len: u64) -> Result<Held, Refused> {
        let busy = || Refused::new(503, "busy: too many bodies in memory");
        let n = kib(len);
        // (A body larger than the tenant's part of the reserve waits with everyone else's.)
        let reserved = class == Class::Urgent && n <= self.urgent_max;
        if let Some(held) = self.hold_now(t, class, len) {
            return Ok(held);
        }
        let wait = async {
            if reserved {
                // The tenant's part of the reserve, then the reserve.
                let mine = t.urgent.clone().acquire_many_owned(n).await;
                let urgent = self.urgent.clone().acquire_many_owned(n).await;
                return Ok::<_, Refused>((mine.ok(), urgent.map_err(|_| busy())?));
            }
            let mine = t
                .memory
                .clone()
                .acquire_many_owned(n)
                .await
                .map_err(|_| busy())?;
            let all = self
                .bodies
                .clone()
                .acquire_many_owned(n)
                .await
                .map_err(|_| busy())?;
            Ok((Some(mine), all))
        };
        tokio::time::timeout(HEAD_TIMEOUT, wait)
            .await
            .map_err(|_| busy())?
    }

    /// [`Server::hold`]'s memory if it is free now: from the tenant's share and everyone's,
    /// or (urgent) from the reserve.
    fn hold_now(&self, t: &TenantState, class: Class, len: u64) -> Option<Held> {
        let n = kib(len);
        if class == Class::Urgent && n <= self.urgent_max {
            let now = (
                t.memory.clone().try_acquire_many_owned(n),
                self.bodies.clone().try_acquire_many_owned(n),
            );
            if let (Ok(mine), Ok(all)) = now {
                return Some((Some(mine), all));
            }
            let mine = t.urgent.clone().try_acquire_many_owned(n).ok()?;
            let urgent = self.urgent.clone().try_acquire_many_owned(n).ok()?;
            return Some((Some(mine), urgent));
        }
        let mine = t.memory.clone().try_acquire_many_owned(n).ok()?;
        Some((
            Some(mine),
            self.bodies.clone().try_acquire_many_owned(n).ok()?,
        ))
    }

    async fn op(
        &self, t: &TenantState, r: &Route, headers: &HeaderMap, body: Option<Body>,
        reserved: Option<Reserved<'_>>, done: &mut Done,
    ) -> Result<Reply, Refused> {
        let o = &self.objects;
        Ok(match &r.op {
            Op::Create => reply(200, ""),
            Op::Head { key } => {
                let size = o.head(t, r.class, key).await?;
                let mut rep = reply(200, "");
                rep.headers_mut().insert(CONTENT_LENGTH, size.into());
                rep
            }
            // (Server::run answers GETs with Server::get.)
            Op::Get { .. } => return Err(Refused::new(500, "a GET outside its path")),
            Op::Put { key } => {
                let body = body.expect("read before");
                done.bytes_in = body.len();
                o.put(t, r.class, key, body, reserved.expect("with the body"))
                    .await?;
                reply(200, "")
            }
            Op::PutPart { upload, part, .. } => {
                let body = body.expect("read before");
                done.bytes_in = body.len();
                o.put_part(
                    t,
                    r.class,
                    upload,
                    *part,
                    body,
                    reserved.expect("with the body"),
                )
                .await?;
                reply(200, "")
            }
            Op::Compose { key, upload, parts } => {
                if t.cfg.role == crate::config::Role::Read {
                    return Err(Refused::new(403, "this tenant may only read"));
                }
                let size = o.compose(t, r.class, key, upload, *parts).await?;
                reply(200, size.to_string())
            }
            Op::Abort { upload, .. } => {
                if t.cfg.role == crate::config::Role::Read {
                    return Err(Refused::new(403, "this tenant may only read"));
                }
                o.abort(t, r.class, upload).await?;
                reply(200, "")
            }
            Op::Delete { key } => {
                let size = o.delete(t, r.class, key, r.lock).await?;
                audit(&t.cfg.name, key, size);
                reply(200, "")
            }
            Op::List { prefix, restic } => {
                let all = o.list(t, r.class, prefix, *restic).await?;
                let v2 = headers
                    .get(http::header::ACCEPT)
                    .is_some_and(|a| a.as_bytes() == RESTIC_V2.as_bytes());
                let (json, kind) = match (restic, v2) {
                    (true, false) => (
                        serde_json::json!(all.iter().map(|l| &l.key).collect::<Vec<_>>()),
                        "application/json",
                    ),
                    (true, true) => (
                        serde_json::json!(all
                            .iter()
                            .map(|l| serde_json::json!({"name": l.key, "size": l.size}))
                            .collect::<Vec<_>>()),
                        RESTIC_V2,
                    ),
                    (false, _) => (
                        serde_json::json!(all
                            .iter()
                            .map(|l| serde_json::json!({"key": l.key, "size": l.size}))
                            .collect::<Vec<_>>()),
                        "application/json",
                    ),
                };
                let body = serde_json::to_vec(&json).expect("serialisable");
                done.bytes_out = body.len() as u64;
                let mut rep = reply(200, body);
                rep.headers_mut()
                    .insert(CONTENT_TYPE, kind.parse().expect("ascii"));
                rep
            }
        })
    }
}

/// A certificate's subject as RFC 4514 writes it.
fn subject(der: &[u8]) -> Option<String> {
    use x509_cert::der::Decode;
    let c = x509_cert::Certificate::from_der(der).ok()?;
    Some(c.tbs_certificate.subject.to_string())
}

fn bearer(h: &HeaderMap) -> Option<&str> {
    h.get(AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// What a read answers, as known before it is read.
enum Span {
    /// A directory backend's file, opened: the range it holds.
    File(Range<u64>, ferry_store::Opened),
    /// The range an object holds and its size, from a HEAD.
    Known(Range<u64>, u64),
    /// A range with an end that one answer may hold: the read cuts it at the object's end
    /// and tells the object's size with the bytes, one round trip where a HEAD first takes
    /// two (restic reads each blob so).
    Asked(Range<u64>),
    /// A range without an end (`bytes=A-`: restic reads every small file so, keys, config,
    /// indexes, snapshots) or none: its first [`FIRST_BYTES`] with the object's size, and the
    /// rest after them when it is longer. Over the wan bench's 80 ms a read of a few hundred
    /// bytes took 164-166 ms by a HEAD first.
    First(Option<Range<u64>>),
}

/// `Range: bytes=A-B` or `bytes=A-` as a half-open range; one range only.
fn range(h: &HeaderMap) -> Result<Option<Range<u64>>, Refused> {
    let Some(v) = h.get(RANGE) else {
        return Ok(None);
    };
    let bad = || Refused::new(416, "one range, bytes=A-B or bytes=A-");
    let spec = v
        .to_str()
        .ok()
        .and_then(|s| s.strip_prefix("bytes="))
        .ok_or_else(bad)?;
    let (a, b) = spec.split_once('-').ok_or_else(bad)?;
    let a: u64 = a.parse().map_err(|_| bad())?;
    if b.is_empty() {
        return Ok(Some(a..u64::MAX));
    }
    let b: u64 = b.parse().map_err(|_| bad())?;
    if b < a {
        return Err(bad());
    }
    Ok(Some(a..b.saturating_add(1)))
}

/// One JSON line per request on stderr; never a token, nor a header. `unix` is when the
/// request arrived (seconds, to the millisecond), so that a slow spell can be placed in time.
fn log(
    peer: SocketAddr, t: Option<&TenantState>, class: Option<Class>, m: &Method, path: &str,
    d: &Done, start: Instant,
) {
    let took = start.elapsed();
    let arrived = std::time::SystemTime::now()
        .checked_sub(took)
        .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0.0, |d| (d.as_millis() as f64) / 1e3);
    let line = serde_json::json!({
        "unix": arrived,
        "peer": peer.to_string(),
        "tenant": t.map(|t| t.cfg.name.as_str()),
        "class": class.map(Class::name),
        "method": m.as_str(),
        "path": path,
        "status": d.status,
        "in": d.bytes_in,
        "out": d.bytes_out,
        "memory_ms": d.memory.as_secs_f64() * 1e3,
        "body_ms": d.body.as_secs_f64() * 1e3,
        "wait_ms": d.wait.as_secs_f64() * 1e3,
        "service_ms": d.service.as_secs_f64() * 1e3,
        "total_ms": took.as_secs_f64() * 1e3,
    });
    crate::logline::emit(line);
}

/// The audit line of a delete.
fn audit(tenant: &str, key: &str, size: u64) {
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    crate::logline::emit(
        serde_json::json!({"audit": "delete", "tenant": tenant, "key": key, "size": size, "unix": at}),
    );
}

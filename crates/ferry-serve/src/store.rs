//! The tenants' objects in the backend: each tenant under `BASE/TENANT/`, with its role
//! enforced and its quota counted here, whatever protocol the request came in.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use ferry_store::Error;
use ferry_transfer::{Remote, Staged};
use tokio::sync::OnceCell;

use crate::config::{Role, Tenant};
use crate::listings::Listings;
use crate::sched::Class;

/// Why a request was refused, as an HTTP status and a line.
#[derive(Debug)]
pub struct Refused {
    /// The status.
    pub status: u16,
    /// Why, for the client (never a secret).
    pub why: String,
}

impl Refused {
    /// A refusal with `status`.
    pub fn new(status: u16, why: impl Into<String>) -> Refused {
        Refused {
            status,
            why: why.into(),
        }
    }
}

impl From<Error> for Refused {
    /// The client gets the kind of failure, not the backend's words: those name the
    /// backend's paths. They go to the server's log.
    fn from(e: Error) -> Refused {
        let (status, why) = match &e {
            Error::NotFound(_) => (404, "no such object"),
            Error::AlreadyExists(_) => (409, "the object exists"),
            Error::Invalid(_) => (400, "the backend refused the request"),
            // The backend refused the server, or failed for now: not the client's fault.
            Error::Denied(_) | Error::Permanent(_) | Error::Checksum(_) => {
                (502, "the backend failed")
            }
            Error::Transient(_) | Error::Busy(..) => (503, "the backend is unavailable for now"),
        };
        if status >= 500 {
            crate::logline::emit(format_args!("ferry serve: backend: {e}"));
        }
        Refused::new(status, why)
    }
}

/// Bytes of a session's blocks a compose reads at a time.
const COMPOSE_READ: u64 = 4 << 20;

/// Takes `n` from `used`, never below zero (a concurrent delete may have taken it first).
fn release(used: &AtomicU64, n: u64) {
    let _ = used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
        Some(u.saturating_sub(n))
    });
}

/// Bytes a write counted against its tenant's quota before its body came, so that writes in
/// flight together cannot pass the quota each on its own: given back unless the write is
/// kept ([`Reserved::keep`]). Nothing for a tenant without a quota.
#[derive(Debug)]
pub struct Reserved<'a> {
    used: Option<&'a AtomicU64>,
    len: u64,
}

impl Reserved<'_> {
    /// The write was stored: its bytes stay counted.
    fn keep(mut self) {
        self.used = None;
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        if let Some(used) = self.used {
            release(used, self.len);
        }
    }
}

/// A write's body, whole: in memory, or already on disk where it will appear.
#[derive(Debug)]
pub enum Body {
    /// Held in memory (counted in the body-memory budget), sent in the write's turn.
    Held(Bytes),
    /// Written to the object's temp file as it arrived (a directory backend, as
    /// rest-server does: a slow client holds a file, not memory); the write's turn makes it
    /// durable and renames it into place.
    Staged(Staged),
}

impl Body {
    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Body::Held(b) => b.len() as u64,
            Body::Staged(s) => s.len(),
        }
    }

    /// True when it has no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stores the body at `full`; its length.
    async fn write(self, remote: &Remote, full: &str) -> Result<u64, Refused> {
        Ok(match self {
            Body::Held(b) => remote.upload_bytes(b, full, None).await?,
            Body::Staged(s) => s.publish().await?,
        })
    }
}

/// One tenant's settings and the bytes it holds.
#[derive(Debug)]
pub struct TenantState {
    /// As `serve.toml` says.
    pub cfg: Tenant,
    quota: Option<u64>,
    /// Bytes under the tenant's prefix: counted by one listing at its first write, then
    /// kept by the server's own writes and deletes.
    used: OnceCell<AtomicU64>,
    /// The tenant's share of the body memory, in KiB permits.
    pub memory: std::sync::Arc<tokio::sync::Semaphore>,
    /// The tenant's share of the urgent reserve, in KiB permits: a tenant that marks its
    /// writes urgent cannot take the whole reserve from the others' WAL.
    pub urgent: std::sync::Arc<tokio::sync::Semaphore>,
}

/// The backend, seen per tenant.
#[derive(Debug)]
pub struct Objects {
    backend: Remote,
    base: String,
    tenants: HashMap<String, TenantState>,
    /// Keys being written by an append-only tenant: two creates of one key do not both
    /// pass the "does not exist" check.
    creating: Mutex<HashSet<String>>,
    max_body: u64,
    listings: Listings,
}

/// An object listed: its key below the listed prefix, and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Key below the tenant's prefix.
    pub key: String,
    /// Bytes.
    pub size: u64,
}

impl Objects {
    /// The tenants' objects under `base` in `backend`.
    /// Each tenant may hold `share` bytes of bodies in memory, and `urgent` of the urgent
    /// reserve.
    pub fn new(
        backend: Remote, base: &str, tenants: &[Tenant], max_body: u64, share: u64, urgent: u64,
    ) -> Objects {
        let base = base.trim_end_matches('/');
        let tenants = tenants
            .iter()
            .map(|t| {
                let state = TenantState {
                    quota: t.quota_bytes().ok().flatten(),
                    cfg: t.clone(),
                    used: OnceCell::new(),
                    memory: std::sync::Arc::new(tokio::sync::Semaphore::new(
                        share.div_ceil(1024).max(1) as usize,
                    )),
                    urgent: std::sync::Arc::new(tokio::sync::Semaphore::new(
                        urgent.div_ceil(1024).max(1) as usize,
                    )),
                };
                (t.name.clone(), state)
            })
            .collect();
        Objects {
            backend,
            base: if base.is_empty() {
                String::new()
            } else {
                format!("{base}/")
            },
            tenants,
            creating: Mutex::new(HashSet::new()),
            max_body,
            listings: Listings::default(),
        }
    }

    /// The tenant named `name`.
    pub fn tenant(&self, name: &str) -> Option<&TenantState> {
        self.tenants.get(name)
    }

    /// Every tenant.
    pub fn tenants(&self) -> impl Iterator<Item = &TenantState> {
        self.tenants.values()
    }

    /// Backend requests the engine retried so far.
    pub fn retries(&self) -> u64 {
        self.backend.report().retries
    }

    /// Backend requests the bulk classes may have in flight now.
    pub fn bulk_limit(&self) -> usize {
        self.backend.bulk_limit()
    }

    /// The largest body one request may carry.
    pub fn max_body(&self) -> u64 {
        self.max_body
    }

    fn full(&self, t: &TenantState, key: &str) -> String {
        format!("{}{}/{key}", self.base, t.cfg.name)
    }

    fn remote(&self, class: Class) -> Remote {
        self.backend.with_class(match class {
            Class::Urgent => ferry_transfer::Class::Urgent,
            _ => ferry_transfer::Class::Bulk,
        })
    }

    async fn used<'a>(&self, t: &'a TenantState) -> Result<&'a AtomicU64, Refused> {
        t.used
            .get_or_try_init(|| async {
                let all = self.backend.list(&self.full(t, "")).await?;
                Ok::<_, Error>(AtomicU64::new(all.iter().map(|o| o.size).sum()))
            })
            .await
            .map_err(Refused::from)
    }

    /// Refuses a write of `len` bytes before its body is read: too large, or past the quota.
    /// Counts it against the quota at once (see [`Reserved`]).
    pub async fn may_write<'a>(
        &self, t: &'a TenantState, len: u64,
    ) -> Result<Reserved<'a>, Refused> {
        if t.cfg.role == Role::Read {
            return Err(Refused::new(403, "this tenant may only read"));
        }
        if len > self.max_body {
            return Err(Refused::new(
                413,
                format!("bodies are at most {} bytes", self.max_body),
            ));
        }
        let Some(q) = t.quota else {
            return Ok(Reserved { used: None, len });
        };
        let used = self.used(t).await?;
        // An empty object counts as a byte here: a tenant at its quota does not go on making
        // objects (and inodes on a directory backend) for nothing.
        let fits = |u: u64| (u.saturating_add(len.max(1)) <= q).then_some(u + len);
        match used.fetch_update(Ordering::SeqCst, Ordering::SeqCst, fits) {
            Ok(_) => Ok(Reserved {
                used: Some(used),
                len,
            }),
            Err(u) => Err(Refused::new(507, format!("quota: {u} of {q} bytes used"))),
        }
    }

    /// True when bodies go to the backend as they arrive and answers come from it in chunks
    /// (a directory, where a chunk costs no round trip), not held whole in memory.
    pub fn streams(&self) -> bool {
        self.backend.is_local()
    }

    /// Where `key`'s body goes as it arrives (its temp file), when [`Objects::streams`].
    /// Nothing appears under `key` until the write's turn (see [`Body::Staged`]).
    pub async fn stage(&self, t: &TenantState, key: &str) -> Result<Staged, Refused> {
        self.backend
            .stage(&self.full(t, key))
            .await?
            .ok_or_else(|| Refused::new(500, "this backend takes bodies whole"))
    }

    /// Size of an object.
    pub async fn head(&self, t: &TenantState, class: Class, key: &str) -> Result<u64, Refused> {
        Ok(self.remote(class).head(&self.full(t, key)).await?.size)
    }

    /// The part of an object `range` asks for (all of it when `None`, cut at its end), and
    /// its whole size.
    pub async fn span(
        &self, t: &TenantState, class: Class, key: &str, range: Option<Range<u64>>,
    ) -> Result<(Range<u64>, u64), Refused> {
        let size = self.head(t, class, key).await?;
        Ok((self.cut(size, range)?, size))
    }

    /// The part of an object of `size` bytes that `range` asks for (all of it when `None`);
    /// a range past the end is cut at it, one that starts past it refused.
    pub fn cut(&self, size: u64, range: Option<Range<u64>>) -> Result<Range<u64>, Refused> {
        let range = range.map_or(0..size, |r| r.start..r.end.min(size));
        if range.start > range.end || (range.start >= size && size > 0) {
            return Err(Refused::new(416, format!("the object has {size} bytes")));
        }
        if range.end - range.start > self.max_body {
            return Err(Refused::new(
                413,
                format!("ranges are at most {} bytes", self.max_body),
            ));
        }
        Ok(range)
    }

    /// An object opened to be streamed from (a directory backend's file), or `None` where
    /// each read is a request (see [`ferry_store::Store::open`]).
    pub async fn open(
        &self, t: &TenantState, class: Class, key: &str,
    ) -> Result<Option<ferry_store::Opened>, Refused> {
        Ok(self.remote(class).open(&self.full(t, key)).await?)
    }

    /// The bytes of `range` of an object (cut at its end) with its whole size: one round trip
    /// where the backend answers both at once (the object stores), where [`Objects::span`]
    /// then [`Objects::read`] take two.
    pub async fn read_sized(
        &self, t: &TenantState, class: Class, key: &str, range: Range<u64>,
    ) -> Result<(Bytes, u64), Refused> {
        let (info, data) = self
            .remote(class)
            .head_and_read(&self.full(t, key), range)
            .await?;
        Ok((data, info.size))
    }

    /// `range` of an object, as [`Objects::span`] gave it.
    pub async fn read(
        &self, t: &TenantState, class: Class, key: &str, range: Range<u64>,
    ) -> Result<Bytes, Refused> {
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        Ok(self
            .remote(class)
            .get_range(&self.full(t, key), range)
            .await?)
    }

    /// For an append-only tenant: `full` claimed in this process and checked absent, so
    /// that its write is a create; the claim is held until the write is done. `None` for
    /// other roles.
    async fn create_only(
        &self, t: &TenantState, remote: &Remote, full: &str,
    ) -> Result<Option<Claim<'_>>, Refused> {
        if t.cfg.role != Role::AppendOnly {
            return Ok(None);
        }
        let claim = Claim::take(&self.creating, full)?;
        match remote.head(full).await {
            Ok(_) => Err(Refused::new(403, "append-only: the object exists")),
            Err(Error::NotFound(_)) => Ok(Some(claim)),
            Err(e) => Err(e.into()),
        }
    }

    /// Stores `body` at `key`: an append-only tenant only where nothing is.
    pub async fn put(
        &self, t: &TenantState, class: Class, key: &str, body: Body, reserved: Reserved<'_>,
    ) -> Result<(), Refused> {
        let (full, remote) = (self.full(t, key), self.remote(class));
        let _claim = self.create_only(t, &remote, &full).await?;
        // What an admin's write replaces, for the quota.
        let old = match t.quota.is_some() && t.cfg.role != Role::AppendOnly {
            true => match remote.head(&full).await {
                Ok(o) => Some(o.size),
                Err(Error::NotFound(_)) => None,
                Err(e) => return Err(e.into()),
            },
            false => None,
        };
        let len = body.write(&remote, &full).await?;
        self.listings.wrote(&full, len);
        reserved.keep();
        if let (Some(used), Some(old)) = (t.used.get(), old) {
            release(used, old);
        }
        Ok(())
    }

    /// Where session `upload`'s blocks lie (below the tenant's prefix).
    fn session_dir(upload: &str) -> String {
        format!("{}/{upload}/", crate::route::UPLOADS)
    }

    /// The key of block `part` of session `upload` (below the tenant's prefix).
    pub fn part_key(upload: &str, part: u32) -> String {
        format!("{}{part:06}", Self::session_dir(upload))
    }

    /// Stores one block of an upload session: a create, allowed to every writing tenant.
    pub async fn put_part(
        &self, t: &TenantState, class: Class, upload: &str, part: u32, body: Body,
        reserved: Reserved<'_>,
    ) -> Result<(), Refused> {
        let (full, remote) = (
            self.full(t, &Self::part_key(upload, part)),
            self.remote(class),
        );
        // Blocks too are create-only for an append-only tenant: another holder of its token
        // must not swap a block of a session under way.
        let _claim = self.create_only(t, &remote, &full).await?;
        body.write(&remote, &full).await?;
        reserved.keep();
        Ok(())
    }

    /// Makes `key` of a session's blocks `0..parts`, streamed in order into one upload
    /// through the engine (memory: one block), then removes them. An append-only tenant
    /// only where nothing is.
    pub async fn compose(
        &self, t: &TenantState, class: Class, key: &str, upload: &str, parts: u32,
    ) -> Result<u64, Refused> {
        use futures::StreamExt;
        let (full, remote) = (self.full(t, key), self.remote(class));
        // One compose per session at a time: two at once would each make an object of the
        // same blocks, counted once against the quota.
        let dir = self.full(t, &Self::session_dir(upload));
        let _session = Claim::take(&self.creating, &dir)?;
        let _claim = self.create_only(t, &remote, &full).await?;
        // Every block is there before anything is written (one listing of the session, not
        // a request per block): a missing one is 404 with nothing stored.
        let held: std::collections::HashMap<String, u64> = match remote.list(&dir).await {
            Ok(all) => all.into_iter().map(|o| (o.key, o.size)).collect(),
            Err(Error::NotFound(_)) => Default::default(),
            Err(e) => return Err(e.into()),
        };
        let mut keys = Vec::with_capacity(parts as usize);
        let mut pieces = Vec::new();
        let mut freed = 0;
        for p in 0..parts {
            let k = self.full(t, &Self::part_key(upload, p));
            let size = *held.get(&k).ok_or_else(|| {
                Refused::new(404, format!("block {p} of the upload was not sent"))
            })?;
            freed += size;
            pieces.extend(
                (0..size)
                    .step_by(COMPOSE_READ as usize)
                    .map(|at| (k.clone(), at..(at + COMPOSE_READ).min(size))),
            );
            keys.push(k);
        }
        // The blocks in order as one stream, read COMPOSE_READ bytes at a time (a compose
        // takes no body memory, so it holds little); a piece that cannot be read is a read
        // error of the stream, so the upload is abandoned, never completed short.
        let blocks = {
            let remote = remote.clone();
            futures::stream::iter(pieces).then(move |(k, range): (String, Range<u64>)| {
                let remote = remote.clone();
                async move {
                    let want = range.end - range.start;
                    let got = remote.get_range(&k, range).await;
                    match got {
                        Ok(b) if b.len() as u64 == want => Ok(b),
                        Ok(_) => Err(std::io::Error::other("a block shrank while composing")),
                        Err(e) => Err(std::io::Error::other(e)),
                    }
                }
            })
        };
        let reader = tokio_util::io::StreamReader::new(Box::pin(blocks));
        let progress = std::sync::Arc::new(ferry_transfer::NoProgress);
        let size = remote.upload(reader, &full, progress).await?;
        // The blocks are read in the sizes listed: one replaced meanwhile shows in a second
        // listing, not in the bytes read.
        let after: std::collections::HashMap<String, u64> = match remote.list(&dir).await {
            Ok(all) => all.into_iter().map(|o| (o.key, o.size)).collect(),
            Err(e) => {
                let _ = remote.delete(&full).await;
                return Err(e.into());
            }
        };
        let same = keys.iter().all(|k| after.get(k) == held.get(k));
        if size != freed || !same {
            // The blocks changed while they were read: what was stored is not what was sent.
            let _ = remote.delete(&full).await;
            return Err(Refused::new(
                409,
                "the upload's blocks changed while composing",
            ));
        }
        self.listings.wrote(&full, size);
        for k in &keys {
            remote.delete(k).await?;
        }
        // The blocks were counted as they came; the object takes their place.
        Ok(size)
    }

    /// Removes every block of session `upload`.
    pub async fn abort(&self, t: &TenantState, class: Class, upload: &str) -> Result<(), Refused> {
        let dir = self.full(t, &Self::session_dir(upload));
        // Not while a compose reads the blocks: it would store them uncounted.
        let _session = Claim::take(&self.creating, &dir)?;
        let remote = self.remote(class);
        let held = match remote.list(&dir).await {
            Ok(all) => all,
            Err(Error::NotFound(_)) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        for o in held {
            remote.delete(&o.key).await?;
            if let Some(used) = t.used.get() {
                release(used, o.size);
            }
        }
        Ok(())
    }

    /// Removes the temp files of bodies a killed server was receiving (over a directory
    /// backend): those idle for `idle`, past any live body's.
    pub async fn sweep_temp(&self, idle: std::time::Duration) {
        match self.backend.sweep_temp(&self.base, idle).await {
            Ok(0) => {}
            Ok(n) => crate::logline::emit(serde_json::json!({"sweep": "temp", "files": n})),
            Err(e) => crate::logline::emit(format_args!("ferry serve: sweep of temp files: {e}")),
        }
    }

    /// Removes the upload sessions that have not changed since the last sweep, whose blocks
    /// a client that went away would otherwise leave for good; `seen` is each session's
    /// block count and bytes at the last sweep (the sweeper keeps it between calls). Stateless
    /// across processes: a session another process is receiving changes, and is kept.
    /// Returns the sessions removed.
    pub async fn sweep_uploads(&self, seen: &mut HashMap<String, (usize, u64)>) -> usize {
        let mut now: HashMap<String, (usize, u64)> = HashMap::new();
        let mut removed = 0;
        for t in self.tenants() {
            let dir = self.full(t, &format!("{}/", crate::route::UPLOADS));
            let Ok(all) = self.backend.list(&dir).await else {
                continue;
            };
            // Block count and bytes per session, only what is named as sessions are.
            let mut here: HashMap<&str, (usize, u64)> = HashMap::new();
            for o in &all {
                let Some((session, _)) = o.key.strip_prefix(&dir).and_then(|r| r.split_once('/'))
                else {
                    continue;
                };
                if crate::route::is_session(session) {
                    let e = here.entry(session).or_default();
                    *e = (e.0 + 1, e.1 + o.size);
                }
            }
            for (session, sig) in here {
                let key = format!("{dir}{session}");
                if seen.get(&key) == Some(&sig) {
                    match self.abort(t, Class::Maintenance, session).await {
                        Ok(()) => {
                            removed += 1;
                            crate::logline::emit(
                                serde_json::json!({"sweep": "upload", "tenant": t.cfg.name,
                                    "session": session, "blocks": sig.0, "bytes": sig.1}),
                            );
                        }
                        // Being composed: not abandoned after all.
                        Err(e) if e.status == 409 => {}
                        Err(e) => crate::logline::emit(format_args!(
                            "ferry serve: sweep of {key}: {}",
                            e.why
                        )),
                    }
                }
                now.insert(key, sig);
            }
        }
        *seen = now;
        removed
    }

    /// Deletes `key`; returns its size (for the audit line). Append-only tenants may delete
    /// only restic locks (`lock`).
    pub async fn delete(
        &self, t: &TenantState, class: Class, key: &str, lock: bool,
    ) -> Result<u64, Refused> {
        match t.cfg.role {
            Role::Admin => {}
            Role::AppendOnly if lock => {}
            _ => return Err(Refused::new(403, "this tenant may not delete")),
        }
        let (full, remote) = (self.full(t, key), self.remote(class));
        let size = match remote.head(&full).await {
            Ok(o) => o.size,
            Err(Error::NotFound(_)) => return Err(Refused::new(404, "no such object")),
            Err(e) => return Err(e.into()),
        };
        remote.delete(&full).await?;
        self.listings.deleted(&full);
        if let Some(used) = t.used.get() {
            release(used, size);
        }
        Ok(size)
    }

    /// Objects under `prefix`, sorted; restic's listings give the last segment only (data
    /// files sit one level of fan-out down).
    pub async fn list(
        &self, t: &TenantState, class: Class, prefix: &str, restic: bool,
    ) -> Result<Vec<Listed>, Refused> {
        let full = self.full(t, prefix);
        // Tenants that may delete always get a fresh listing (see crate::listings).
        let kept = match t.cfg.role {
            Role::Admin => None,
            _ => self.listings.get(&full),
        };
        let all = match kept {
            Some(all) => all,
            None => {
                let mark = self.listings.mark();
                let all = match self.remote(class).list(&full).await {
                    Ok(all) => all,
                    Err(Error::NotFound(_)) => Vec::new(),
                    Err(e) => return Err(e.into()),
                };
                if t.cfg.role != Role::Admin {
                    self.listings.fill(&full, &all, mark);
                }
                all
            }
        };
        Ok(all
            .into_iter()
            .filter_map(|o| {
                let rel = o.key.strip_prefix(&full)?;
                // The upload area is the server's: its session ids are not listed.
                if o.key[self.full(t, "").len()..].starts_with(crate::route::UPLOADS) {
                    return None;
                }
                let key = match restic {
                    true => rel.rsplit('/').next()?.to_string(),
                    false => format!("{prefix}{rel}"),
                };
                Some(Listed { key, size: o.size })
            })
            .collect())
    }
}

/// A key claimed for the time of one create.
struct Claim<'a> {
    set: &'a Mutex<HashSet<String>>,
    key: String,
}

impl<'a> Claim<'a> {
    fn take(set: &'a Mutex<HashSet<String>>, key: &str) -> Result<Claim<'a>, Refused> {
        let mut s = set.lock().unwrap_or_else(|e| e.into_inner());
        if !s.insert(key.to_string()) {
            return Err(Refused::new(409, "the object is being written"));
        }
        Ok(Claim {
            set,
            key: key.to_string(),
        })
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut s = self.set.lock().unwrap_or_else(|e| e.into_inner());
        s.remove(&self.key);
    }
}

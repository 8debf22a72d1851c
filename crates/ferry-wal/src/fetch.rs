//! `wal-fetch`: what `restore_command` runs, and the prefetch agent that fetches the next
//! segments in parallel into the spool while PostgreSQL replays.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_transfer::{Error, Result};
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::archive::Archive;
use crate::name::{Kind, WalName};
use crate::spool::Spool;

/// A file the archive lacks is asked for again after this long: PostgreSQL may still be
/// archiving it on the primary.
const MISSING_RETRY: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(10);
/// What the prefetch agent's fetches in flight may hold at once: each holds a segment's
/// object, its decrypted payload and its plaintext, at most about three times the cluster's
/// segment size (the archive bounds a segment by it). 8 fetches of 16 MiB segments; 1 of
/// 1 GiB ones.
const FETCH_MEMORY: u64 = 384 << 20;

/// Writes `data` to `dest` atomically, through `ferry-fs`: a private temp file in the same
/// directory, then rename over whatever `dest` was (a link there is replaced, never
/// followed). No fsync: PostgreSQL reads the file at once, and asks again after a crash.
pub fn write_atomic(dest: &Path, data: &[u8]) -> Result<()> {
    use std::io::Write;
    let dir = dest
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = dest.file_name().unwrap_or_default().as_encoded_bytes();
    let res = ferry_fs::Dir::open_root(dir).and_then(|d| {
        let mut t = d.create_temp()?;
        let done = t.file.write_all(data).and_then(|_| d.rename(&t.name, name));
        if done.is_err() {
            let _ = d.remove(&t.name);
        }
        done
    });
    res.map_err(|e| Error::io(format!("wal-fetch {}", dest.display()), e))
}

/// Fetches `name` from the archive into `dest`, verified.
pub async fn fetch_to(archive: &Archive, name: &WalName, dest: &Path) -> Result<()> {
    let data = archive.fetch(name).await?;
    write_atomic(dest, &data)
}

/// Hands over `name` from the spool if the prefetch agent has it (waiting up to `wait` while
/// it is being fetched), fetched from the archive at `source`; false when it must be fetched
/// directly. Files prefetched from another archive (a recovery before this one into the same
/// data directory, from another repository) are not handed over.
pub fn take_prefetched(
    spool: &Spool, name: &WalName, dest: &Path, wait: Duration, source: &str,
) -> Result<bool> {
    if spool.source("in").as_deref() != Some(source) {
        return Ok(false);
    }
    let ready = spool.path(&format!("in/{name}"));
    let part = spool.path(&format!("in/.{name}.part"));
    let started = Instant::now();
    while !ready.exists() && part.exists() && started.elapsed() < wait {
        std::thread::sleep(Duration::from_millis(5));
    }
    match fs::rename(&ready, dest) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        // Another filesystem: copy, then drop the spooled file.
        Err(e) if e.raw_os_error() == Some(libc_exdev()) => {
            let data = fs::read(&ready).map_err(|e| Error::io("wal-fetch spool", e))?;
            write_atomic(dest, &data)?;
            let _ = fs::remove_file(&ready);
            Ok(true)
        }
        Err(e) => Err(Error::io(format!("wal-fetch {}", dest.display()), e)),
    }
}

fn libc_exdev() -> i32 {
    18 // EXDEV on Linux and the BSDs
}

/// Tells the prefetch agent which file PostgreSQL asked for last.
pub fn want(spool: &Spool, name: &WalName) -> Result<()> {
    let p = spool.path("in/want");
    let tmp = spool.path("in/.want.tmp");
    fs::write(&tmp, name.as_str())
        .and_then(|_| fs::rename(&tmp, &p))
        .map_err(|e| Error::io(format!("spool {}", p.display()), e))
}

/// The prefetch agent's settings.
#[derive(Debug)]
pub struct FetchAgent {
    /// Where WAL comes from.
    pub archive: Arc<Archive>,
    /// Where prefetched files wait.
    pub spool: Spool,
    /// Segments fetched ahead of the one PostgreSQL asked for.
    pub depth: u64,
    /// Exit after this long without a request.
    pub idle: Duration,
}

impl FetchAgent {
    /// Runs until PostgreSQL stops asking, holding `lock`: the spool's `fetch` lock
    /// ([`Spool::try_lock`]), taken before the archive was opened (see [`PushAgent::run`]).
    ///
    /// [`PushAgent::run`]: crate::agent::PushAgent::run
    pub async fn run(self, lock: std::fs::File) -> Result<()> {
        let _lock = lock;
        let Some(cluster) = self.archive.cluster().await? else {
            return Ok(()); // an empty archive: nothing to look ahead in
        };
        let seg_size = cluster.seg_size;
        let most = (FETCH_MEMORY / (3 * seg_size)).max(1) as usize;
        // Leftovers of an agent killed mid-fetch.
        self.remove_parts()?;
        // Prefetched files of another archive go (`wal-fetch` would not take them anyway).
        let theirs = |n: &str| WalName::parse(n).is_ok();
        self.spool.claim("in", &self.archive.url(), theirs)?;
        info!(archive = %self.archive.url(), depth = self.depth, "prefetch agent up");
        let mut tasks: JoinSet<(String, Result<()>)> = JoinSet::new();
        let mut inflight: HashSet<String> = HashSet::new();
        // Fetched ahead and maybe already handed over: PostgreSQL's `want` can lag behind
        // what it has taken, and a taken file is gone from the spool.
        let mut fetched: HashSet<String> = HashSet::new();
        let mut missing: HashMap<String, Instant> = HashMap::new();
        let mut last_want = String::new();
        let mut last_change = Instant::now();
        loop {
            while let Some(done) = tasks.try_join_next() {
                let (name, res) = done.expect("fetch task panicked");
                self.settle(name, res, &mut inflight, &mut fetched, &mut missing);
            }
            let wanted = fs::read_to_string(self.spool.path("in/want")).unwrap_or_default();
            if wanted != last_want {
                last_want = wanted.clone();
                last_change = Instant::now();
            } else if last_change.elapsed() > self.idle {
                // Nobody asks any more: whatever the fetches in flight are doing (retrying a
                // store that went away, say), their segments will not be wanted.
                info!(abandoned = tasks.len(), "no requests; prefetch agent exits");
                tasks.shutdown().await;
                self.remove_parts()?;
                break;
            }
            let targets: Vec<WalName> = match WalName::parse(wanted.trim()) {
                Ok(w) if w.kind() == Kind::Segment => {
                    let mut v = Vec::new();
                    let mut n = w.clone();
                    for _ in 0..self.depth {
                        n = n.next(seg_size);
                        v.push(n.clone());
                    }
                    v
                }
                _ => Vec::new(),
            };
            let keep: HashSet<&str> = targets.iter().map(|n| n.as_str()).collect();
            self.clean(&keep);
            fetched.retain(|f| keep.contains(f.as_str()));
            for t in &targets {
                let n = t.as_str();
                let recently_missing = missing
                    .get(n)
                    .is_some_and(|at| at.elapsed() < MISSING_RETRY);
                if inflight.contains(n)
                    || fetched.contains(n)
                    || recently_missing
                    || self.spool.path(&format!("in/{n}")).exists()
                {
                    continue;
                }
                // Fetches of names no longer looked ahead to (PostgreSQL fetched them
                // itself) do not hold back the ones it will want, up to twice the bound.
                let wanted = inflight
                    .iter()
                    .filter(|f| keep.contains(f.as_str()))
                    .count();
                if wanted >= most || inflight.len() >= 2 * most {
                    break; // the nearest first: the rest when these are done
                }
                inflight.insert(n.to_string());
                let archive = self.archive.clone();
                let spool = self.spool.clone();
                let t = t.clone();
                tasks.spawn(async move {
                    // The empty .part says "coming" to a wal-fetch that arrives meanwhile.
                    let part = spool.path(&format!("in/.{t}.part"));
                    let res = async {
                        // WAL is the database's content: the owner's alone (0600), whatever
                        // the umask and the spool directory's mode.
                        let create = || {
                            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
                            let f = fs::OpenOptions::new()
                                .write(true)
                                .create(true)
                                .truncate(true)
                                .mode(0o600)
                                .open(&part)?;
                            // (A .part left by an older run keeps its mode otherwise.)
                            f.set_permissions(fs::Permissions::from_mode(0o600))?;
                            Ok::<_, std::io::Error>(f)
                        };
                        create().map_err(|e| Error::io("spool in", e))?;
                        let data = archive.fetch(&t).await?;
                        let io = |e| Error::io("spool in", e);
                        let mut f = create().map_err(io)?;
                        f.write_all(&data).and_then(|_| f.sync_all()).map_err(io)?;
                        fs::rename(&part, spool.path(&format!("in/{t}"))).map_err(io)
                    }
                    .await;
                    if res.is_err() {
                        let _ = fs::remove_file(&part);
                    }
                    (t.to_string(), res)
                });
            }
            if tasks.is_empty() {
                tokio::time::sleep(POLL).await;
            } else {
                tokio::select! {
                    Some(done) = tasks.join_next() => {
                        let (name, res) = done.expect("fetch task panicked");
                        self.settle(name, res, &mut inflight, &mut fetched, &mut missing);
                    }
                    _ = tokio::time::sleep(POLL) => {}
                }
            }
        }
        Ok(())
    }

    /// Books a finished fetch: no longer in flight, and fetched or missing.
    fn settle(
        &self, name: String, res: Result<()>, inflight: &mut HashSet<String>,
        fetched: &mut HashSet<String>, missing: &mut HashMap<String, Instant>,
    ) {
        inflight.remove(&name);
        match res {
            Ok(()) => {
                info!("prefetched {name}");
                fetched.insert(name);
            }
            Err(Error::NotFound(_)) => {
                missing.insert(name, Instant::now());
            }
            // Waits as a miss does before it is tried again: an object that fails to open
            // (damaged, or planted to be a GiB of nothing) is not fetched in a loop.
            Err(e) => {
                warn!("prefetch {name}: {e}");
                missing.insert(name, Instant::now());
            }
        }
    }

    /// Removes the `.part` files of fetches that will not finish.
    fn remove_parts(&self) -> Result<()> {
        for f in fs::read_dir(self.spool.path("in"))
            .map_err(|e| Error::io("spool in", e))?
            .flatten()
        {
            if f.file_name().to_string_lossy().ends_with(".part") {
                let _ = fs::remove_file(f.path());
            }
        }
        Ok(())
    }

    /// Removes prefetched files PostgreSQL will not ask for (behind it, or on another
    /// timeline): WAL names not in `keep`. Only WAL names: `want` and `source` live beside
    /// them, and without `source` wal-fetch takes nothing from the spool.
    fn clean(&self, keep: &HashSet<&str>) {
        for f in self.spool.names("in").unwrap_or_default() {
            if WalName::parse(&f).is_ok() && !keep.contains(f.as_str()) {
                let _ = fs::remove_file(self.spool.path(&format!("in/{f}")));
            }
        }
    }
}

//! The push agent: one per cluster, it reads `pg_wal/archive_status/*.ready` ahead of
//! PostgreSQL's archiver, pushes many files at once over the engine's shared connections,
//! and acks each in the spool only after the store confirmed it.
//!
//! It keeps no state that a `kill -9` could lose: the spool's acks are fsynced after the
//! store confirmed, a file pushed but not acked is pushed again (and found already
//! archived), and the lock is the kernel's.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_transfer::Result;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::archive::{Archive, Gap};
use crate::name::WalName;
use crate::push::{name_of, queued, read_wal};
use crate::spool::Spool;

/// How often the agent looks at `archive_status` while it has nothing in flight.
const POLL: Duration = Duration::from_millis(10);

/// The push agent's settings.
#[derive(Debug)]
pub struct PushAgent {
    /// Where WAL goes.
    pub archive: Arc<Archive>,
    /// Where acks go.
    pub spool: Spool,
    /// The cluster's `pg_wal` directory.
    pub pg_wal: PathBuf,
    /// WAL files in flight at once, at most.
    pub parallel: usize,
    /// Bytes of WAL the agent holds in flight, at most: a file counts twice its size while
    /// it is read, sealed and its blocks copied out, then each block its size until the
    /// store has answered it (a file sent whole, its sealed size until stored).
    pub memory: u64,
    /// Exit after this long with nothing to do.
    pub idle: Duration,
}

impl PushAgent {
    /// Runs until idle, holding `lock`: the spool's `push` lock ([`Spool::try_lock`]), taken
    /// before the archive was opened, so that agents started meanwhile (wal-push starts one
    /// every 100 ms until one holds it) leave before they send a request.
    pub async fn run(self, lock: std::fs::File) -> Result<()> {
        let _lock = lock;
        self.spool
            .claim("out", &self.archive.url(), Spool::is_verdict)?;
        let stop = self.spool.path("out/stop");
        let _ = std::fs::remove_file(&stop);
        info!(pg_wal = %self.pg_wal.display(), archive = %self.archive.url(), "push agent up");
        let mut tasks: JoinSet<(String, Result<(String, std::fs::Metadata)>)> = JoinSet::new();
        let mut inflight: HashSet<String> = HashSet::new();
        // Files the drop policy gave up on: PostgreSQL may not have marked them done yet.
        let mut dropped: HashSet<String> = HashSet::new();
        let mut last_work = Instant::now();
        let mut last_sweep = Instant::now();
        let total = budget(self.memory);
        let memory = Arc::new(Semaphore::new(total));
        loop {
            while let Some(done) = tasks.try_join_next() {
                let (name, res) = done.expect("push task panicked");
                inflight.remove(&name);
                self.settle(&name, res);
            }
            dropped.extend(self.record_gaps().await);
            if !self.pg_wal.is_dir() {
                info!("pg_wal is gone; agent exits");
                break;
            }
            // A wal-push for another archive asks: archive_command changed since this agent
            // started, and its successor, started with the new settings, takes over.
            if stop.exists() {
                info!("asked to stop: wal-push archives elsewhere now; agent exits");
                break;
            }
            // Without its spool no ack can be written: every push would be retried at once,
            // forever (seen: an agent of a removed test cluster spinning a whole core).
            if !self.spool.dir().join("out").is_dir() {
                info!("the spool is gone; agent exits");
                break;
            }
            let queue = queued(&self.pg_wal)?;
            let mut waiting = false;
            for name in &queue {
                let n = name.as_str();
                if inflight.contains(n)
                    || dropped.contains(n)
                    || self.spool.acked(n)
                    || self.spool.failed(n)
                    || self.spool.path(&format!("gaps/{n}")).exists()
                {
                    continue;
                }
                waiting = true;
                if tasks.len() >= self.parallel {
                    break;
                }
                inflight.insert(n.to_string());
                let archive = self.archive.clone();
                let path = self.pg_wal.join(n);
                let name = n.to_string();
                let memory = memory.clone();
                tasks.spawn(async move {
                    let res = push_held(&archive, &path, &memory, total).await;
                    (name, res)
                });
            }
            if last_sweep.elapsed() > Duration::from_secs(1) {
                self.sweep(&queue);
                last_sweep = Instant::now();
            }
            if waiting || !tasks.is_empty() {
                last_work = Instant::now();
            } else if last_work.elapsed() > self.idle {
                info!("idle; agent exits");
                break;
            }
            if tasks.is_empty() {
                tokio::time::sleep(POLL).await;
            } else {
                tokio::select! {
                    Some(done) = tasks.join_next() => {
                        let (name, res) = done.expect("push task panicked");
                        inflight.remove(&name);
                        self.settle(&name, res);
                    }
                    _ = tokio::time::sleep(POLL) => {}
                }
            }
        }
        Ok(())
    }

    fn settle(&self, name: &str, res: Result<(String, std::fs::Metadata)>) {
        let recorded = match res {
            Ok((hash, meta)) => self.spool.ack(name, &hash, &meta),
            Err(e) => {
                warn!("{name}: {e}");
                self.spool.fail(name, &e.to_string())
            }
        };
        if let Err(e) = recorded {
            // Without an ack wal-push times out and PostgreSQL retries: nothing is lost.
            warn!("{name}: cannot record the result: {e}");
        }
    }

    /// Acks outlive their use once PostgreSQL marked the file done.
    fn sweep(&self, queue: &[WalName]) {
        let live: HashSet<&str> = queue.iter().map(|n| n.as_str()).collect();
        for f in self.spool.names("out").unwrap_or_default() {
            let Some((name, _)) = f.rsplit_once('.') else {
                continue;
            };
            if !live.contains(name) {
                let _ = std::fs::remove_file(self.spool.path(&format!("out/{f}")));
            }
        }
    }

    /// Moves gaps the drop policy recorded locally into the archive; returns their names.
    async fn record_gaps(&self) -> Vec<String> {
        let mut recorded = Vec::new();
        for name in self.spool.names("gaps").unwrap_or_default() {
            let path = self.spool.path(&format!("gaps/{name}"));
            let Ok(body) = std::fs::read(&path) else {
                continue;
            };
            let Ok(gap) = serde_json::from_slice::<Gap>(&body) else {
                warn!("{}: unreadable gap record", path.display());
                continue;
            };
            match self.archive.record_gap(&gap).await {
                Ok(()) => {
                    warn!("{name}: recorded in the archive as a gap: {}", gap.reason);
                    let _ = std::fs::remove_file(&path);
                    recorded.push(name);
                }
                Err(e) => warn!("{name}: cannot record the gap in the archive yet: {e}"),
            }
        }
        recorded
    }
}

/// The memory budget in permits of one byte, within what a semaphore holds.
fn budget(bytes: u64) -> usize {
    (bytes as usize).clamp(1, Semaphore::MAX_PERMITS)
}

/// Pushes the WAL file at `path` holding its bytes in `memory` while it is in flight;
/// returns its checksum and the identity it had before it was read.
async fn push_held(
    archive: &Archive, path: &Path, memory: &Arc<Semaphore>, total: usize,
) -> Result<(String, std::fs::Metadata)> {
    let name = name_of(path)?;
    // The identity is taken before reading: a file replaced meanwhile gets an ack that
    // matches neither, and is pushed again.
    let meta = tokio::fs::metadata(path)
        .await
        .map_err(|e| ferry_transfer::Error::io(path.display(), e))?;
    let permits = |bytes: u64| (bytes as usize).clamp(1, total).min(u32::MAX as usize) as u32;
    let read = async {
        // Waiting here, in the order files were taken, rather than reading past the budget;
        // the existence check is out meanwhile.
        let held = memory
            .clone()
            .acquire_many_owned(permits(2 * meta.len()))
            .await
            .expect("never closed");
        Ok((read_wal(path).await?, Some(held)))
    };
    let pushed = archive.push_read(&name, read).await?;
    Ok((pushed.header().hash_hex(), meta))
}

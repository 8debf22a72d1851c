//! `wal-push`: what `archive_command` runs. Synchronously, it pushes the one file; through
//! the agent, it waits for the agent's ack in the spool, starting the agent when none runs.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use ferry_transfer::{Error, Result};

use crate::archive::{Archive, Gap, Pushed};
use crate::name::WalName;
use crate::spool::{write_durable, Spool};

/// What to do when more WAL waits than `queue_max` allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueuePolicy {
    /// Keep the WAL and fail the push, so that PostgreSQL keeps it and retries.
    #[default]
    Keep,
    /// Acknowledge without archiving and record the gap: PITR across it is lost.
    Drop,
}

/// How `wal-push` behaves through the agent.
#[derive(Debug, Clone)]
pub struct PushOptions {
    /// How long to wait for the agent's ack before failing the push.
    pub timeout: Duration,
    /// Most WAL bytes waiting to be archived before the queue policy applies.
    pub queue_max: Option<u64>,
    /// What to do past `queue_max`.
    pub policy: QueuePolicy,
    /// The archive this push is for (its URL): acks of an agent that archives elsewhere
    /// (started before `archive_command` changed) are not taken, and that agent is asked
    /// to stop.
    pub source: String,
}

/// What the agent path concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handed {
    /// The agent acked the file: it is in the archive.
    Archived,
    /// The drop policy acknowledged the file without archiving it.
    Dropped(Gap),
    /// PostgreSQL did not queue this file (no `.ready`): push it directly instead.
    NotQueued,
}

/// The name of the WAL file at `path`, checked.
pub fn name_of(path: &Path) -> Result<WalName> {
    let file = path
        .file_name()
        .ok_or_else(|| Error::Invalid(format!("{}: not a file name", path.display())))?;
    WalName::parse(&file.to_string_lossy())
}

/// Reads the WAL file at `path` and pushes it.
pub async fn push_file(archive: &Archive, path: &Path) -> Result<Pushed> {
    let name = name_of(path)?;
    archive.push(&name, read_wal(path).await?).await
}

/// The bytes of the WAL file at `path`, for a push: a regular file, not through a link, and
/// not larger than WAL files are. Whoever owns pg_wal (the cluster's owner) may put a link or
/// a FIFO under a WAL file's name; ferry, if it runs as another user, would otherwise archive
/// what the link points to (its own secrets, for `wal-fetch` to hand back), or block.
pub(crate) async fn read_wal(path: &Path) -> Result<Vec<u8>> {
    let p = path.to_path_buf();
    let read = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
        use std::io::Read;
        let not_wal = || {
            std::io::Error::other(
                "not a WAL file: not a regular file, or larger than WAL files are",
            )
        };
        let (f, m) = ferry_fs::open_regular(&p).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => not_wal(),
            _ => e,
        })?;
        if m.len() > crate::envelope::MAX_LEN {
            return Err(not_wal());
        }
        let mut buf = Vec::with_capacity(m.len() as usize);
        f.take(crate::envelope::MAX_LEN).read_to_end(&mut buf)?;
        Ok(buf)
    })
    .await
    .map_err(|e| Error::Permanent(format!("wal-push {}: {e}", path.display())))?;
    read.map_err(|e| Error::io(format!("wal-push {}", path.display()), e))
}

fn ready_file(path: &Path, name: &str) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    dir.join("archive_status").join(format!("{name}.ready"))
}

/// WAL files PostgreSQL has queued in `pg_wal/archive_status`, histories first, then in
/// order, as PostgreSQL's archiver takes them.
pub fn queued(pg_wal: &Path) -> Result<Vec<WalName>> {
    let dir = pg_wal.join("archive_status");
    let mut out: Vec<WalName> = fs::read_dir(&dir)
        .map_err(|e| Error::io(format!("{}", dir.display()), e))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let f = e.file_name().to_string_lossy().into_owned();
            WalName::parse(f.strip_suffix(".ready")?).ok()
        })
        .collect();
    out.sort_by(|a, b| (a.kind(), a.as_str()).cmp(&(b.kind(), b.as_str())));
    Ok(out)
}

/// Hands the WAL file at `path` to the agent and waits for its verdict; `start_agent` is
/// called whenever no agent holds the spool.
pub fn push_via_agent(
    spool: &Spool, path: &Path, opts: &PushOptions, start_agent: &mut dyn FnMut() -> Result<()>,
) -> Result<Handed> {
    let name = name_of(path)?;
    let meta =
        fs::metadata(path).map_err(|e| Error::io(format!("wal-push {}", path.display()), e))?;
    if !ready_file(path, name.as_str()).exists() {
        return Ok(Handed::NotQueued);
    }
    // (No source at all: an agent of an older ferry, which writes none, is trusted as before.)
    let ours = || spool.source("out").is_none_or(|s| s == opts.source);
    if let Some(v) = ours()
        .then(|| spool.verdict(name.as_str(), &meta))
        .flatten()
    {
        return v.map(|()| Handed::Archived).map_err(Error::Permanent);
    }
    if let Some(max) = opts.queue_max {
        let pg_wal = path.parent().unwrap_or(Path::new("."));
        let waiting = queued(pg_wal)?
            .iter()
            .filter(|n| !spool.acked(n.as_str()))
            .count() as u64;
        let bytes = waiting * meta.len();
        if bytes > max {
            let figures = format!(
                "{waiting} WAL files ({} MiB) wait to be archived, over queue-max {} MiB",
                bytes >> 20,
                max >> 20
            );
            return match opts.policy {
                QueuePolicy::Keep => Err(Error::Transient(format!(
                    "{figures}: keeping {name} in pg_wal and failing this push so that \
                     PostgreSQL retries (the agent goes on archiving; queue-policy=drop \
                     would give up point-in-time recovery instead)"
                ))),
                QueuePolicy::Drop => {
                    let gap = Gap {
                        name: name.to_string(),
                        reason: format!("dropped by queue-policy=drop: {figures}"),
                        unix_time: SystemTime::now()
                            .duration_since(SystemTime::UNIX_EPOCH)
                            .map_or(0, |d| d.as_secs()),
                    };
                    let body = serde_json::to_vec(&gap).expect("serializable");
                    write_durable(&spool.path(&format!("gaps/{name}")), &body)?;
                    // The agent carries the gap into the archive.
                    if !spool.locked("push")? {
                        start_agent()?;
                    }
                    Ok(Handed::Dropped(gap))
                }
            };
        }
    }
    let started = Instant::now();
    let mut next_check = started;
    let mut nap = Duration::from_millis(1);
    loop {
        if Instant::now() >= next_check {
            if !spool.locked("push")? {
                start_agent()?;
            } else if !ours() {
                // An agent of another archive runs: it stops at its next turn.
                let _ = write_durable(&spool.path("out/stop"), b"");
            }
            next_check = Instant::now() + Duration::from_millis(100);
        }
        std::thread::sleep(nap);
        // Polling a file is a stat: cheap enough to keep the ack-to-return delay under 2 ms.
        nap = (nap * 2).min(Duration::from_millis(2));
        if let Some(v) = ours()
            .then(|| spool.verdict(name.as_str(), &meta))
            .flatten()
        {
            return v.map(|()| Handed::Archived).map_err(Error::Permanent);
        }
        if started.elapsed() > opts.timeout {
            return Err(Error::Transient(format!(
                "the agent did not archive {name} within {:?} (see {})",
                opts.timeout,
                spool.path("agent.log").display()
            )));
        }
    }
}

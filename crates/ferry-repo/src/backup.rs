//! A whole backup as one call: the shared lock, what the repository already holds, the
//! parent snapshot, the archiver.
//!
//! [`Backup::paths`] starts listing the directories at once, so that the listing overlaps
//! the repository's opening (Argon2, the first round trips); [`Backup::run`] then takes the
//! lock while it reads the index (see [`crate::backup_lock`]) and runs again, with the index
//! read under the lock, in the rare case a prune changed it in between.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use ferry_transfer::{Error, Result};

use crate::archiver::{Archiver, BackupProgress, Gate, Outcome};
use crate::backup_lock::BackupLock;
use crate::blob::{Trees, PRELOAD_MAX};
use crate::exclude::Exclude;
use crate::index::Index;
use crate::policy::{Everything, Policy};
use crate::repo::Repo;
use crate::snapshot::{hostname, Snapshot};
use crate::walk::{ReadAhead, Scan};
use crate::Id;

/// What a backup saves.
enum Source {
    /// Files and directories, absolute, listed ahead from the start.
    Paths {
        paths: Vec<PathBuf>,
        ahead: Arc<ReadAhead>,
        policy: Arc<dyn Policy>,
    },
    /// One stream, stored as the file `name`; taken by the first run.
    Stream {
        reader: Option<Box<dyn Read + Send>>,
        name: String,
    },
}

/// A backup to run: what to save and the snapshot's tags.
pub struct Backup {
    source: Source,
    tags: Vec<String>,
    /// The snapshot's hostname: this host's unless told.
    host: String,
}

impl Backup {
    /// A backup of `paths` (made absolute), tagged `tags`, leaving out what `exclude`
    /// says. Each path must exist; its directories start being listed now, while the caller
    /// opens the repository.
    pub fn paths(paths: &[PathBuf], tags: Vec<String>, mut exclude: Exclude) -> Result<Backup> {
        let mut abs = Vec::with_capacity(paths.len());
        for p in paths {
            let a = std::path::absolute(p)
                .map_err(|e| Error::Invalid(format!("bad path {}: {e}", p.display())))?;
            if std::fs::symlink_metadata(&a).is_err() {
                return Err(Error::Invalid(format!(
                    "{}: no such file or directory",
                    p.display()
                )));
            }
            abs.push(a);
        }
        exclude.set_sources(&abs);
        let policy: Arc<dyn Policy> = Arc::new(exclude);
        let ahead = ReadAhead::start(abs.clone(), policy.clone());
        Ok(Backup {
            source: Source::Paths {
                paths: abs,
                ahead,
                policy,
            },
            tags,
            host: hostname(),
        })
    }

    /// A backup of one stream, stored as the file `name`, tagged `tags`.
    pub fn stream(reader: Box<dyn Read + Send>, name: &str, tags: Vec<String>) -> Backup {
        Backup {
            source: Source::Stream {
                reader: Some(reader),
                name: name.to_string(),
            },
            tags,
            host: hostname(),
        }
    }

    /// The absolute paths backed up (none for a stream).
    pub fn sources(&self) -> &[PathBuf] {
        match &self.source {
            Source::Paths { paths, .. } => paths,
            Source::Stream { .. } => &[],
        }
    }

    /// Records the snapshot as made on `host` (restic's `backup --host`): its parent is then
    /// that host's latest snapshot of the same paths.
    pub fn host(mut self, host: String) -> Backup {
        self.host = host;
        self
    }

    /// A walk of the sources for the total the backup will read (none for a stream).
    pub fn scan(&self) -> Option<Scan> {
        match &self.source {
            Source::Paths { paths, policy, .. } => Some(Scan {
                paths: paths.clone(),
                policy: policy.clone(),
            }),
            Source::Stream { .. } => None,
        }
    }

    /// Runs the backup into `repo` under a shared lock; returns the new snapshot.
    pub async fn run(
        mut self, repo: &Arc<Repo>, progress: Arc<dyn BackupProgress>,
    ) -> Result<Outcome> {
        let started = Instant::now();
        // The index is first read while the lock is being taken. If a prune changed it in
        // that window (nothing was written yet), the backup runs again with the index read
        // under it. A stream cannot be read twice: it reads the index under the lock at once.
        let speculate = matches!(self.source, Source::Paths { .. });
        if let Some(o) = self.attempt(repo, &progress, speculate, started).await? {
            return Ok(o);
        }
        tracing::info!("the repository's index changed while the lock was taken: reading it again");
        match self.attempt(repo, &progress, false, started).await? {
            Some(o) => Ok(o),
            None => Err(Error::Permanent(
                "the repository's index changed under the backup's lock".into(),
            )),
        }
    }

    /// One try: `None` when the index changed while the lock was being taken.
    async fn attempt(
        &mut self, repo: &Arc<Repo>, progress: &Arc<dyn BackupProgress>, speculate: bool,
        started: Instant,
    ) -> Result<Option<Outcome>> {
        let mut lock = BackupLock::start(repo, speculate);
        let gate = if speculate {
            None
        } else {
            let gate = lock.gate(None);
            gate.clone().await?;
            Some(gate)
        };
        let work = async {
            let mut known = self.known(repo).await?;
            if speculate && !known.errs.is_empty() {
                // Unreadable index files may be ones a finishing prune removed: the lock
                // decides, then the index is read again under it.
                lock.gate(None).await?;
                lock.mark_changed();
                return Err(Error::Permanent(
                    "index files could not be read while the lock was taken".into(),
                ));
            }
            tracing::debug!(
                ms = started.elapsed().as_millis(),
                "index and snapshots read"
            );
            let gate = match gate {
                Some(g) => g,
                None => {
                    let g = lock.gate(Some(std::mem::take(&mut known.loaded)));
                    tokio::spawn(g.clone()); // taken now, not when first written through
                    g
                }
            };
            let r = self.save(repo, progress, known, gate.clone()).await;
            // Whatever happened, the lock is released only once it is known whether it
            // was held.
            let _ = gate.await;
            r
        };
        let r = work.await;
        let changed = lock.index_changed();
        lock.release().await?;
        match r {
            Err(_) if changed => Ok(None),
            Err(e) => Err(e),
            Ok(o) => Ok(Some(o)),
        }
    }

    /// The index, the snapshots and the trees cached locally, read at once.
    async fn known(&self, repo: &Arc<Repo>) -> Result<Known> {
        let stream = matches!(self.source, Source::Stream { .. });
        let ((index, loaded, errs), snaps, trees) =
            tokio::try_join!(repo.load_index(), repo.snapshots(), async {
                // A stream has no parent to compare against.
                match stream {
                    true => Ok(Trees::default()),
                    false => Ok(Trees::cached(repo, PRELOAD_MAX).await),
                }
            },)?;
        Ok(Known {
            index,
            loaded,
            errs,
            snaps,
            trees,
        })
    }

    async fn save(
        &mut self, repo: &Arc<Repo>, progress: &Arc<dyn BackupProgress>, known: Known, gate: Gate,
    ) -> Result<Outcome> {
        crate::repo::whole_index(known.errs)?;
        let index = Arc::new(known.index);
        let parent = match &self.source {
            Source::Paths { paths, .. } => parent_of(known.snaps, paths, &self.host),
            Source::Stream { .. } => None,
        };
        let trees = parent_trees(repo, &index, known.trees, parent.is_some()).await?;
        let policy = match &self.source {
            Source::Paths { policy, .. } => policy.clone(),
            Source::Stream { .. } => Arc::new(Everything),
        };
        let arch = Archiver::with_policy(repo.clone(), index, trees, progress.clone(), policy);
        arch.write_after(gate.clone());
        arch.host(self.host.clone());
        let tags = self.tags.clone();
        let work = async {
            match &mut self.source {
                Source::Paths { paths, ahead, .. } => {
                    arch.read_ahead(ahead.clone());
                    arch.backup_paths(paths, parent, tags).await
                }
                Source::Stream { reader, name } => {
                    let reader = reader.take().ok_or_else(|| {
                        Error::Permanent("a stream is backed up once only".into())
                    })?;
                    arch.backup_stream(reader, name, tags).await
                }
            }
        };
        // A lock that cannot be taken ends the backup at once, not at its first write.
        tokio::select! {
            r = work => r,
            Err(e) = gate => Err(e),
        }
    }
}

/// What an archiver starts from when the caller holds the lock already (`ferry-pg`'s base
/// backup): the index, refused when a file of it cannot be read, and with a parent to
/// compare against, the parent's trees read up front in a few parallel pack reads.
pub async fn starting_point(repo: &Repo, parent: bool) -> Result<(Arc<Index>, Trees)> {
    let (index, _) = repo.index().await?;
    let trees = parent_trees(repo, &index, Trees::default(), parent).await?;
    Ok((Arc::new(index), trees))
}

/// The trees an archiver compares against: with a parent, `cached` completed with the
/// parent's listings, read up front in a few parallel pack reads; without one, none.
async fn parent_trees(repo: &Repo, index: &Index, cached: Trees, parent: bool) -> Result<Trees> {
    match parent {
        true => cached.complete(repo, index, PRELOAD_MAX).await,
        false => Ok(Trees::default()),
    }
}

/// What a backup reads from the repository before it starts.
struct Known {
    index: Index,
    /// The index files read.
    loaded: Vec<Id>,
    /// Index files that could not be read.
    errs: Vec<Error>,
    snaps: Vec<(Id, Snapshot)>,
    /// Trees decoded from the cache so far.
    trees: Trees,
}

/// The latest snapshot of the same paths from this host: files unchanged since are not read.
fn parent_of(snaps: Vec<(Id, Snapshot)>, paths: &[PathBuf], host: &str) -> Option<(Id, Snapshot)> {
    let shown: Vec<String> = paths.iter().map(|p| show(p)).collect();
    snaps
        .into_iter()
        .rfind(|(_, s)| s.hostname == host && s.paths == shown)
}

fn show(p: &Path) -> String {
    p.display().to_string()
}

/// How a list of paths to back up is written (`--files-from` and its kin).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListFormat {
    /// One path a line; blank lines and lines starting with `#` are left out, and blanks
    /// around a path trimmed (restic's `--files-from`).
    Lines,
    /// One path a line, taken as written: only the line break ends it.
    Verbatim,
    /// Paths separated by NUL bytes (`find -print0`): any name at all.
    Nul,
}

/// The paths listed in `data`, written as `format` says; names need not be UTF-8.
pub fn path_list(data: &[u8], format: ListFormat) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let to_path = |b: &[u8]| PathBuf::from(std::ffi::OsStr::from_bytes(b));
    match format {
        ListFormat::Nul => data
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
            .map(to_path)
            .collect(),
        ListFormat::Verbatim => data
            .split(|&b| b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .filter(|l| !l.is_empty())
            .map(to_path)
            .collect(),
        ListFormat::Lines => data
            .split(|&b| b == b'\n')
            .map(|l| l.trim_ascii())
            .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
            .map(to_path)
            .collect(),
    }
}

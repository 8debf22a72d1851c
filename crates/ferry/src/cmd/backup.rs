//! `ferry backup` and `ferry restore`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use ferry_repo::archiver::{Archiver, BackupProgress, Gate};
use ferry_repo::backup_lock::BackupLock;
use ferry_repo::blob::{Trees, PRELOAD_MAX};
use ferry_repo::index::Index;
use ferry_repo::policy::Everything;
use ferry_repo::walk::ReadAhead;
use ferry_repo::{Id, Repo};
use ferry_transfer::{Engine, Progress};

use crate::cli::{BackupArgs, Global, OverwriteArg, RestoreArgs};
use crate::cmd::repo::{find, open};
use crate::places::Stores;
use crate::progress::Bar;
use crate::Output;

/// The progress bar backups and restores draw.
pub(crate) struct BarProgress {
    pub(crate) bar: Bar,
    files: AtomicU64,
    files_total: AtomicU64,
}

impl BarProgress {
    pub(crate) fn new(out: &Output) -> Arc<Self> {
        Arc::new(BarProgress {
            bar: Bar::new(out.progress),
            files: AtomicU64::new(0),
            files_total: AtomicU64::new(0),
        })
    }
}

impl BackupProgress for BarProgress {
    fn scanned(&self, bytes: u64) {
        self.bar.add_total(bytes);
        self.files_total.fetch_add(1, Ordering::Relaxed);
    }
    fn done(&self, bytes: u64) {
        self.bar.advance(bytes);
    }
    fn file_done(&self) {
        let done = self.files.fetch_add(1, Ordering::Relaxed) + 1;
        let total = self.files_total.load(Ordering::Relaxed).max(done);
        self.bar.files(done, total);
    }
}

/// Sizes of everything under `paths`, for the bar's total and ETA; runs beside the backup.
fn scan(paths: Vec<PathBuf>, p: Arc<BarProgress>) {
    fn walk(path: &std::path::Path, p: &BarProgress) {
        let Ok(m) = std::fs::symlink_metadata(path) else {
            return;
        };
        if m.is_file() {
            p.scanned(m.len());
        } else if m.is_dir() {
            if let Ok(d) = std::fs::read_dir(path) {
                for e in d.flatten() {
                    walk(&e.path(), p);
                }
            }
        }
    }
    for path in paths {
        walk(&path, &p);
    }
}

pub async fn backup(
    args: &BackupArgs,
    g: &Global,
    stores: &mut Stores,
    engine: &Engine,
    out: &Output,
) -> Result<()> {
    let started = Instant::now();
    // Directories are listed while the key is unwrapped and the index read.
    let ahead = (!args.stdin).then(|| {
        let paths = args
            .paths
            .iter()
            .filter_map(|p| std::path::absolute(p).ok());
        ReadAhead::start(paths.collect(), Arc::new(Everything))
    });
    let repo = open(g, stores, engine).await?;
    tracing::debug!(ms = started.elapsed().as_millis(), "repository open");
    // The index is first read while the lock is being taken. If a prune changed it in that
    // window (nothing was written yet), the backup runs again with the index read under it.
    // A stream cannot be read twice: a stdin backup reads the index under the lock at once.
    let speculate = !args.stdin;
    if run_backup(args, &repo, out, started, speculate, ahead.clone()).await? == Run::Done {
        return Ok(());
    }
    tracing::info!("the repository's index changed while the lock was taken: reading it again");
    run_backup(args, &repo, out, started, false, ahead).await?;
    Ok(())
}

#[derive(PartialEq)]
enum Run {
    Done,
    IndexChanged,
}

async fn run_backup(
    args: &BackupArgs,
    repo: &Arc<Repo>,
    out: &Output,
    started: Instant,
    speculate: bool,
    ahead: Option<Arc<ReadAhead>>,
) -> Result<Run> {
    let mut lock = BackupLock::start(repo, speculate);
    let gate = if speculate {
        None
    } else {
        let gate = lock.gate(None);
        gate.clone().await?;
        Some(gate)
    };
    let work = async {
        // Cached tree packs are decoded while the index and snapshots are listed.
        let ((index, loaded, errs), snaps, trees) = tokio::try_join!(
            async { repo.load_index().await.map_err(anyhow::Error::from) },
            async { repo.snapshots().await.map_err(anyhow::Error::from) },
            async {
                // A stream has no parent to compare against.
                match args.stdin {
                    true => Ok(Trees::default()),
                    false => Ok(Trees::cached(repo, PRELOAD_MAX).await),
                }
            },
        )?;
        if speculate && !errs.is_empty() {
            // Unreadable index files may be ones a finishing prune removed: the lock decides,
            // then the index is read again under it.
            lock.gate(None).await?;
            lock.mark_changed();
            anyhow::bail!("index files could not be read while the lock was taken");
        }
        let known = Known {
            index,
            errs,
            snaps,
            trees,
            ahead,
        };
        let gate = match gate {
            Some(g) => g,
            None => {
                let g = lock.gate(Some(loaded));
                tokio::spawn(g.clone()); // taken now, not when first written through
                g
            }
        };
        let r = save(args, repo, out, started, known, gate.clone()).await;
        // Whatever happened, the lock is released only once it is known whether it was held.
        let _ = gate.await;
        r
    };
    let r = work.await;
    let changed = lock.index_changed();
    lock.release().await?;
    match r {
        Err(_) if changed => Ok(Run::IndexChanged),
        Err(e) => Err(e),
        Ok(()) => Ok(Run::Done),
    }
}

/// What a backup reads from the repository before it starts.
struct Known {
    index: Index,
    /// Index files that could not be read.
    errs: Vec<ferry_store::Error>,
    snaps: Vec<(Id, ferry_repo::Snapshot)>,
    /// Trees decoded from the cache so far.
    trees: Trees,
    /// Directories listed so far.
    ahead: Option<Arc<ReadAhead>>,
}

async fn save(
    args: &BackupArgs,
    repo: &Arc<Repo>,
    out: &Output,
    started: Instant,
    known: Known,
    gate: Gate,
) -> Result<()> {
    let Known {
        index,
        errs,
        snaps,
        trees,
        ahead,
    } = known;
    if let Some(e) = errs.first() {
        bail!("{e} (run ferry check)");
    }
    tracing::debug!(
        ms = started.elapsed().as_millis(),
        "index and snapshots read"
    );
    let progress = BarProgress::new(out);
    let index = Arc::new(index);
    let host = ferry_repo::snapshot::hostname();
    let parent = if args.stdin {
        None
    } else {
        let shown: Vec<String> = args
            .paths
            .iter()
            .map(|p| {
                std::path::absolute(p)
                    .map(|a| a.display().to_string())
                    .unwrap_or_default()
            })
            .collect();
        snaps
            .into_iter()
            .rfind(|(_, s)| s.hostname == host && s.paths == shown)
    };
    // The parent's listings, read up front in a few parallel pack reads.
    let trees = if parent.is_some() {
        trees.complete(repo, &index, PRELOAD_MAX).await?
    } else {
        Trees::default()
    };
    tracing::debug!(ms = started.elapsed().as_millis(), "trees preloaded");
    let arch = Archiver::new(repo.clone(), index, trees, progress.clone());
    arch.write_after(gate.clone());
    if let Some(ra) = ahead {
        arch.read_ahead(ra);
    }
    let work = async {
        if args.stdin {
            let name = args.name.clone().expect("clap requires --name");
            Ok(arch
                .backup_stream(std::io::stdin(), &name, args.tag.clone())
                .await?)
        } else {
            let mut paths = Vec::new();
            for p in &args.paths {
                let abs =
                    std::path::absolute(p).with_context(|| format!("bad path {}", p.display()))?;
                if std::fs::symlink_metadata(&abs).is_err() {
                    bail!("{}: no such file or directory", p.display());
                }
                paths.push(abs);
            }
            // The scan costs a second walk of the tree: only a drawn bar needs its totals.
            if progress.bar.is_drawn() {
                let (p2, pr) = (paths.clone(), progress.clone());
                std::thread::spawn(move || scan(p2, pr));
            }
            Ok(arch.backup_paths(&paths, parent, args.tag.clone()).await?)
        }
    };
    // A lock that cannot be taken ends the backup at once, not at its first write.
    let outcome = tokio::select! {
        r = work => r?,
        Err(e) = gate => return Err(e.into()),
    };
    progress.bar.finish();
    tracing::debug!(ms = started.elapsed().as_millis(), "snapshot saved");
    let s = &outcome.snapshot.summary;
    let secs = started.elapsed().as_secs_f64();
    if out.json {
        println!(
            "{}",
            serde_json::json!({
                "snapshot": outcome.id, "summary": s, "seconds": secs,
                "errors": outcome.errors,
                "new_fraction": if s.bytes_read == 0 { 0.0 } else { s.bytes_new as f64 / s.bytes_read as f64 },
            })
        );
    } else {
        // The dedup ratio: of what was read, how much was new to the repository.
        let ratio = if s.bytes_read == 0 {
            "nothing read".to_string()
        } else {
            format!(
                "{:.1}% of what was read",
                100.0 * s.bytes_new as f64 / s.bytes_read as f64
            )
        };
        eprintln!(
            "snapshot {} saved: {} files ({} unchanged), {:.1} MB; read {:.1} MB, new {:.1} MB \
             ({ratio}), stored {:.1} MB, in {secs:.1}s",
            outcome.id.short(),
            s.files_read + s.files_unchanged,
            s.files_unchanged,
            s.total_bytes as f64 / 1e6,
            s.bytes_read as f64 / 1e6,
            s.bytes_new as f64 / 1e6,
            s.bytes_stored as f64 / 1e6,
        );
    }
    if !outcome.errors.is_empty() {
        for e in &outcome.errors {
            eprintln!("ferry: could not read {e}");
        }
        return Err(super::Exit::Incomplete(format!(
            "snapshot {} saved without {} unreadable files or directories (listed above)",
            outcome.id.short(),
            outcome.errors.len()
        ))
        .into());
    }
    Ok(())
}

pub async fn restore(
    args: &RestoreArgs,
    g: &Global,
    stores: &mut Stores,
    engine: &Engine,
    out: &Output,
) -> Result<()> {
    let started = Instant::now();
    let repo = open(g, stores, engine).await?;
    let (id, snap) = find(&repo, &args.snapshot).await?;
    let (index, _, errs) = repo.load_index().await?;
    if let Some(e) = errs.first() {
        bail!("{e} (run ferry check)");
    }
    let progress = BarProgress::new(out);
    progress.bar.add_total(snap.summary.total_bytes);
    use ferry_repo::restorer::{Options, Overwrite, Select};
    let opts = Options {
        include: args.paths.clone(),
        special: !args.no_special,
        select: Select::new(&args.include, &args.exclude)?,
        overwrite: match args.overwrite {
            OverwriteArg::Always => Overwrite::Always,
            OverwriteArg::IfChanged => Overwrite::IfChanged,
            OverwriteArg::Never => Overwrite::Never,
        },
        delete: args.delete,
    };
    let work = ferry_repo::restorer::restore(
        repo.clone(),
        Arc::new(index),
        &snap,
        &args.target,
        &opts,
        progress.clone(),
    );
    let done = work.await?;
    progress.bar.finish();
    let secs = started.elapsed().as_secs_f64();
    if out.json {
        println!(
            "{}",
            serde_json::json!({"snapshot": id, "files": done.files, "dirs": done.dirs,
                "bytes": done.bytes, "seconds": secs, "errors": done.errors,
                "skipped": done.skipped, "deleted": done.deleted})
        );
    } else {
        eprintln!(
            "restored snapshot {} to {}: {} files, {} directories, {:.1} MB in {secs:.1}s{}{}",
            id.short(),
            args.target.display(),
            done.files,
            done.dirs,
            done.bytes as f64 / 1e6,
            match done.skipped {
                0 => String::new(),
                n => format!("; {n} left as they were"),
            },
            match done.deleted {
                0 => String::new(),
                n => format!("; {n} deleted"),
            },
        );
    }
    if !done.errors.is_empty() {
        for e in &done.errors {
            eprintln!("ferry: not restored: {e}");
        }
        bail!(
            "{} files could not be restored from damaged or missing data (listed above)",
            done.errors.len()
        );
    }
    Ok(())
}

//! `ferry backup` and `ferry restore`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use ferry_repo::archiver::{Archiver, BackupProgress};
use ferry_transfer::{Engine, Progress};

use crate::cli::{BackupArgs, Global, RestoreArgs};
use crate::cmd::repo::{find, list, locked, open};
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
    let repo = open(g, stores, engine).await?;
    locked(&repo, run_backup(args, &repo, out, started)).await
}

async fn run_backup(
    args: &BackupArgs,
    repo: &Arc<ferry_repo::Repo>,
    out: &Output,
    started: Instant,
) -> Result<()> {
    let (index, _, errs) = repo.load_index().await?;
    if let Some(e) = errs.first() {
        bail!("{e} (run ferry check)");
    }
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
        list(repo)
            .await?
            .into_iter()
            .rfind(|(_, s)| s.hostname == host && s.paths == shown)
    };
    // The parent's listings, read up front in a few parallel pack reads.
    let trees = if parent.is_some() {
        ferry_repo::blob::Trees::preload(repo, &index, ferry_repo::blob::PRELOAD_MAX).await?
    } else {
        ferry_repo::blob::Trees::default()
    };
    let arch = Archiver::new(repo.clone(), index, trees, progress.clone());
    let outcome = if args.stdin {
        let name = args.name.clone().expect("clap requires --name");
        arch.backup_stream(std::io::stdin(), &name, args.tag.clone())
            .await?
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
        let (p2, pr) = (paths.clone(), progress.clone());
        std::thread::spawn(move || scan(p2, pr));
        arch.backup_paths(&paths, parent, args.tag.clone()).await?
    };
    progress.bar.finish();
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
    // Shared lock: a prune must not delete packs while they are read.
    let work = ferry_repo::restorer::restore(
        repo.clone(),
        Arc::new(index),
        &snap,
        &args.target,
        &args.paths,
        progress.clone(),
    );
    let done = locked(&repo, work).await?;
    progress.bar.finish();
    let secs = started.elapsed().as_secs_f64();
    if out.json {
        println!(
            "{}",
            serde_json::json!({"snapshot": id, "files": done.files, "dirs": done.dirs,
                "bytes": done.bytes, "seconds": secs, "errors": done.errors})
        );
    } else {
        eprintln!(
            "restored snapshot {} to {}: {} files, {} directories, {:.1} MB in {secs:.1}s",
            id.short(),
            args.target.display(),
            done.files,
            done.dirs,
            done.bytes as f64 / 1e6
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

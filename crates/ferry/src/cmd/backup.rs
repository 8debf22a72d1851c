//! `ferry backup` and `ferry restore`.

use std::time::Instant;

use std::io::Read;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use ferry_repo::backup::{path_list, Backup, ListFormat};
use ferry_repo::exclude::Exclude;
use ferry_repo::walk::Totals;

use crate::cli::{BackupArgs, OverwriteArg, RestoreArgs};
use crate::cmd::repo::open;
use crate::ctx::Ctx;
use crate::output::{BarProgress, Output};

pub async fn backup(args: &BackupArgs, ctx: &mut Ctx) -> Result<()> {
    args.jitter.wait().await;
    let (g, stores, out) = ctx.parts();
    let started = Instant::now();
    let job = match args.stdin {
        true => {
            let name = args.name.as_deref().expect("clap requires --name");
            Backup::stream(Box::new(std::io::stdin()), name, args.tag.clone())
        }
        false => {
            let exclude = Exclude::new(&stores.settings().exclude(&args.exclude)?)?;
            Backup::paths(&sources(args)?, args.tag.clone(), exclude)?
        }
    };
    let job = match &args.host {
        Some(h) if h.trim().is_empty() => bail!("--host: an empty hostname"),
        Some(h) => job.host(h.clone()),
        None => job,
    };
    let repo = open(g, stores).await?;
    tracing::debug!(ms = started.elapsed().as_millis(), "repository open");
    if args.dry_run {
        let scan = job.scan().expect("clap refuses --dry-run with --stdin");
        let t = tokio::task::spawn_blocking(move || scan.totals()).await?;
        return dry_run(&t, out);
    }
    let progress = BarProgress::new(out);
    // The scan costs a second walk of the tree: only a drawn bar needs its totals.
    if let (true, Some(scan)) = (progress.wants_totals(), job.scan()) {
        let p = progress.clone();
        std::thread::spawn(move || scan.run(p.as_ref()));
    }
    let outcome = job.run(&repo, progress.clone()).await?;
    progress.finish();
    tracing::debug!(ms = started.elapsed().as_millis(), "snapshot saved");
    let s = &outcome.snapshot.summary;
    let secs = started.elapsed().as_secs_f64();
    if out.json {
        println!(
            "{}",
            serde_json::json!({
                "message_type": "summary",
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
        let excluded = match s.excluded {
            0 => String::new(),
            n => format!(" ({n} excluded, {:.1} MB)", s.excluded_bytes as f64 / 1e6),
        };
        eprintln!(
            "snapshot {} saved: {} files ({} unchanged){excluded}, {:.1} MB; read {:.1} MB, new \
             {:.1} MB ({ratio}), stored {:.1} MB, in {secs:.1}s",
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

fn dry_run(t: &Totals, out: &Output) -> Result<()> {
    if out.json {
        println!(
            "{}",
            serde_json::json!({"dry_run": true, "would_back_up": t})
        );
    } else {
        eprintln!(
            "would back up {} files and {} directories, {:.1} MB; {} excluded ({:.1} MB)",
            t.files,
            t.dirs,
            t.bytes as f64 / 1e6,
            t.excluded,
            t.excluded_bytes as f64 / 1e6
        );
    }
    Ok(())
}

/// The paths given, then those of every --files-from list; an empty list is refused (it
/// would back up nothing, and was surely not meant so).
fn sources(args: &BackupArgs) -> Result<Vec<PathBuf>> {
    let mut paths = args.paths.clone();
    let lists = [
        (&args.files_from, ListFormat::Lines, "--files-from"),
        (
            &args.files_from_verbatim,
            ListFormat::Verbatim,
            "--files-from-verbatim",
        ),
        (&args.files_from_raw, ListFormat::Nul, "--files-from-raw"),
    ];
    for (files, format, flag) in lists {
        for f in files {
            let data = match f.as_os_str() == "-" {
                true => read_all(std::io::stdin()),
                false => std::fs::read(f),
            }
            .with_context(|| format!("{flag} {}", f.display()))?;
            let listed = path_list(&data, format);
            if listed.is_empty() {
                bail!("{flag} {}: lists no path", f.display());
            }
            paths.extend(listed);
        }
    }
    Ok(paths)
}

fn read_all(mut r: impl Read) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    r.read_to_end(&mut v).map(|_| v)
}

pub async fn restore(args: &RestoreArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let started = Instant::now();
    let repo = open(g, stores).await?;
    let (id, snap) = repo
        .snapshot_in(&args.snapshot, &args.filter.filter())
        .await?;
    let progress = BarProgress::new(out);
    progress.add_total(snap.summary.total_bytes);
    use ferry_repo::restorer::{Options, Overwrite, Select};
    let opts = Options {
        include: args.paths.clone(),
        special: !args.no_special,
        select: Select::new(&args.include, &args.exclude)?,
        overwrite: match args.overwrite {
            OverwriteArg::Always => Overwrite::Always,
            OverwriteArg::IfChanged => Overwrite::IfChanged,
            OverwriteArg::IfDifferent => Overwrite::IfDifferent,
            OverwriteArg::Never => Overwrite::Never,
        },
        delete: args.delete,
        owner: None,
    };
    let work =
        ferry_repo::restorer::restore(repo.clone(), &snap, &args.target, &opts, progress.clone());
    let done = work.await?;
    progress.finish();
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

//! `ferry pg backup | backups | expire | verify`; `restore` is in `pg_restore.rs`, `check`
//! and `info` in `pg_check.rs`.

use std::time::Instant;

use anyhow::{bail, Result};
use ferry_pg::backup::BackupOptions;
use ferry_pg::expire::Keep;
use ferry_pg::restore::show_time;

use crate::cli::{PgBackupArgs, PgCommand, PgExpireArgs};
use crate::cmd::repo::open;
use crate::ctx::Ctx;
use crate::output::BarProgress;
use crate::settings::parse_size;

/// Runs one `ferry pg` command.
pub async fn run(cmd: &PgCommand, ctx: &mut Ctx) -> Result<()> {
    match cmd {
        PgCommand::Backup(a) => backup(a, ctx).await,
        PgCommand::Restore(a) => super::pg_restore::restore(a, ctx).await,
        PgCommand::Backups => list(ctx).await,
        PgCommand::Expire(a) => expire(a, ctx).await,
        PgCommand::Verify(a) => verify(a.read_data, ctx).await,
        PgCommand::Check(a) => super::pg_check::check(a, ctx).await,
        PgCommand::Info(a) => super::pg_check::info(a, ctx).await,
    }
}

pub(super) fn mb(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

async fn backup(a: &PgBackupArgs, ctx: &mut Ctx) -> Result<()> {
    a.jitter.wait().await;
    let (g, stores, out) = ctx.parts();
    let started = Instant::now();
    let block = parse_size(&a.block)?;
    if block == 0 || !block.is_multiple_of(8192) || block > 16 << 20 {
        bail!(
            "--block {}: must be a multiple of 8KiB up to 16MiB",
            a.block
        );
    }
    let repo = open(g, stores).await?;
    let progress = BarProgress::new(out);
    let opts = BackupOptions {
        conninfo: a.conninfo.clone(),
        pgdata: a.pgdata.clone(),
        block: block as u32,
        full: a.full,
        primary_conninfo: a.primary_conninfo.clone(),
    };
    let res = ferry_pg::backup::backup(repo.clone(), &opts, progress.clone()).await;
    progress.finish();
    let done = res?;
    let s = &done.snapshot.summary;
    let b = &done.record;
    let bad = &done.bad_pages;
    let secs = started.elapsed().as_secs_f64();
    if out.json {
        println!(
            "{}",
            serde_json::json!({"backup": done.id, "record": b, "summary": s, "seconds": secs,
                "stored_fraction": if s.total_bytes == 0 { 0.0 } else { s.bytes_stored as f64 / s.total_bytes as f64 },
                "bad_pages": bad.count,
                "bad_page_list": bad.pages.iter().map(|(f, blk)| serde_json::json!({"file": f, "block": blk})).collect::<Vec<_>>()})
        );
    } else {
        eprintln!(
            "backup {} of {} saved: {} ({} files, {} unchanged); read {}, stored {} ({:.1}% of its size); \
             WAL {} to {}, consistent at LSN {}; in {secs:.1}s",
            done.id.short(),
            b.data_dir,
            mb(s.total_bytes),
            s.files_read + s.files_unchanged,
            s.files_unchanged,
            mb(s.bytes_read),
            mb(s.bytes_stored),
            100.0 * s.bytes_stored as f64 / s.total_bytes.max(1) as f64,
            b.start_wal,
            b.stop_wal,
            b.stop_lsn,
        );
        for (file, blk) in &bad.pages {
            eprintln!("bad page: {file} block {blk}: its checksum does not match");
        }
    }
    if bad.count > 0 {
        bail!(
            "{} pages failed their checksum (damaged on disk); the backup {} is complete and \
             holds them as they are",
            bad.count,
            done.id.short()
        );
    }
    Ok(())
}

async fn list(ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let repo = open(g, stores).await?;
    let snaps = repo.snapshots().await?;
    let all = ferry_pg::record::backups(snaps);
    if out.json {
        let rows: Vec<_> = all
            .iter()
            .map(|(id, s, b)| {
                serde_json::json!({"id": id, "time": show_time(b.stop_time),
                "size": s.summary.total_bytes, "stored": s.summary.bytes_stored, "record": b})
            })
            .collect();
        println!("{}", serde_json::Value::Array(rows));
        return Ok(());
    }
    println!(
        "{:<10} {:<28} {:>12} {:>12}  WAL",
        "id", "ended (UTC)", "size", "stored"
    );
    for (id, s, b) in &all {
        println!(
            "{:<10} {:<28} {:>12} {:>12}  {} - {}",
            id.short(),
            show_time(b.stop_time),
            mb(s.summary.total_bytes),
            mb(s.summary.bytes_stored),
            b.start_wal,
            b.stop_wal
        );
    }
    Ok(())
}

async fn expire(a: &PgExpireArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let repo = open(g, stores).await?;
    let keep = Keep {
        last: a.keep,
        days: a.keep_days,
    };
    let e = ferry_pg::expire::expire(repo.clone(), &keep, a.dry_run).await?;
    let pruned = if a.dry_run || e.backups.is_empty() {
        None
    } else {
        Some(ferry_repo::prune::prune(repo.clone(), false).await?)
    };
    if out.json {
        println!(
            "{}",
            serde_json::json!({"expired": e.backups.iter().map(|(id, _)| id).collect::<Vec<_>>(),
                "kept": e.kept, "wal_files_removed": e.wal_files, "wal_from": e.wal_from,
                "bytes_freed": pruned.as_ref().map(|p| p.bytes_freed), "dry_run": a.dry_run,
                "locked": e.locked, "locked_why": e.locked_why})
        );
    } else {
        let verb = if a.dry_run { "would remove" } else { "removed" };
        if let Some(why) = &e.locked_why {
            eprintln!(
                "kept {} backups and WAL files the policy lets go: Object Lock, {why} (one of them)",
                e.locked
            );
        }
        eprintln!(
            "{verb} {} backups and {} WAL files (WAL kept from {}); {} backups kept{}",
            e.backups.len(),
            e.wal_files,
            e.wal_from.as_deref().unwrap_or("-"),
            e.kept,
            pruned
                .map(|p| format!(", {} freed", mb(p.bytes_freed)))
                .unwrap_or_default()
        );
    }
    Ok(())
}

async fn verify(read_data: bool, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let repo = open(g, stores).await?;
    let v = ferry_pg::verify::verify(repo.clone(), read_data).await?;
    let bad = v.backups.iter().filter(|f| !f.ok()).count();
    if out.json {
        let rows: Vec<_> = v
            .backups
            .iter()
            .map(|f| serde_json::json!({"id": f.id, "ok": f.ok(), "missing": f.missing, "holes": f.holes}))
            .collect();
        println!(
            "{}",
            serde_json::json!({"backups": rows, "errors": v.errors})
        );
    } else {
        for f in &v.backups {
            let state = if f.ok() { "ok" } else { "BROKEN" };
            eprintln!(
                "backup {} ({}): {state}",
                f.id.short(),
                show_time(f.backup.stop_time)
            );
            for m in &f.missing {
                eprintln!("  missing WAL {m}: the backup cannot become consistent");
            }
            for h in &f.holes {
                eprintln!("  missing WAL {h}: recovery from this backup stops before it");
            }
        }
        for e in &v.errors {
            eprintln!("error: {e}");
        }
    }
    if bad > 0 || !v.errors.is_empty() {
        bail!(
            "{bad} of {} backups cannot reach every archived point; {} repository errors",
            v.backups.len(),
            v.errors.len()
        );
    }
    if !out.json {
        eprintln!(
            "{} backups verified: all WAL present, data sound",
            v.backups.len()
        );
    }
    Ok(())
}

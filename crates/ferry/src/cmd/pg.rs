//! `ferry pg backup | restore | backups | expire | verify`; `check` and `info` are in
//! `pg_check.rs`.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use ferry_pg::backup::BackupOptions;
use ferry_pg::expire::Keep;
use ferry_pg::restore::{show_time, RestoreOptions};
use ferry_pg::Target;

use crate::cli::{PgBackupArgs, PgCommand, PgExpireArgs, PgRestoreArgs};
use crate::cmd::repo::open;
use crate::ctx::Ctx;
use crate::output::BarProgress;
use crate::places::Stores;
use crate::settings::parse_size;

/// Runs one `ferry pg` command.
pub async fn run(cmd: &PgCommand, ctx: &mut Ctx) -> Result<()> {
    match cmd {
        PgCommand::Backup(a) => backup(a, ctx).await,
        PgCommand::Restore(a) => restore(a, ctx).await,
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

/// `--tablespace-map OID=DIR`; the directory made absolute.
fn tablespace_map(m: &str) -> Result<(u32, std::path::PathBuf)> {
    let Some((oid, dir)) = m.split_once('=') else {
        bail!("--tablespace-map '{m}': OID=DIR");
    };
    let oid = oid
        .parse()
        .with_context(|| format!("--tablespace-map '{m}': OID is a number"))?;
    if dir.is_empty() {
        bail!("--tablespace-map '{m}': no directory");
    }
    Ok((oid, std::path::absolute(dir)?))
}

fn target(a: &PgRestoreArgs) -> Result<Target> {
    Ok(if let Some(t) = &a.target_time {
        Target::Time(ferry_pg::target::parse_time(t)?, t.clone())
    } else if let Some(l) = &a.target_lsn {
        Target::Lsn(l.parse().map_err(anyhow::Error::msg)?)
    } else if let Some(x) = &a.target_xid {
        if x.parse::<u64>().is_err() {
            bail!("--target-xid {x}: not a transaction id");
        }
        Target::Xid(x.clone())
    } else if let Some(n) = &a.target_name {
        Target::Name(n.clone())
    } else {
        Target::Latest
    })
}

/// A word for a shell command line, in double quotes, with `%` doubled: PostgreSQL replaces
/// `%f`, `%p`, `%r` in restore_command and reads `%%` as `%` (and refuses any other `%x`
/// from version 16).
fn sh(word: &str) -> Result<String> {
    if word.contains(['"', '$', '`', '\\', '\n', '\'']) {
        bail!("'{word}' cannot go into restore_command: it holds quotes, $, ` or \\");
    }
    Ok(format!("\"{}\"", word.replace('%', "%%")))
}

/// `ferry wal-fetch` with the repository, credentials' sources and store settings this
/// restore used, for PostgreSQL to run (secrets stay out: see [`Settings::to_args`]).
fn restore_command(stores: &Stores) -> Result<String> {
    let exe = std::env::current_exe().context("where is ferry")?;
    let settings = stores.settings();
    settings.repo.as_ref().context("no repository")?;
    let mut cmd = vec![sh(&exe.display().to_string())?];
    for pair in settings.to_args().chunks(2) {
        // The flag is ferry's own word; the value is the user's, and quoted.
        cmd.extend([pair[0].clone(), sh(&pair[1])?]);
    }
    cmd.extend(["wal-fetch".into(), "%f".into(), "%p".into()]);
    Ok(cmd.join(" "))
}

async fn restore(a: &PgRestoreArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let started = Instant::now();
    let target = target(a)?;
    let restore_command = restore_command(stores)?;
    let repo = open(g, stores).await?;
    let progress = BarProgress::new(out);
    let opts = RestoreOptions {
        to: std::path::absolute(&a.to)?,
        target: target.clone(),
        backup: a.backup.clone(),
        action: a.target_action.clone(),
        restore_command: restore_command.clone(),
        delta: a.delta,
        tablespace_map: a
            .tablespace_map
            .iter()
            .map(|m| tablespace_map(m))
            .collect::<Result<_>>()?,
    };
    let res = ferry_pg::restore::restore(repo.clone(), &opts, progress.clone()).await;
    progress.finish();
    let r = res?;
    let secs = started.elapsed().as_secs_f64();
    if out.json {
        println!(
            "{}",
            serde_json::json!({"backup": r.id, "to": opts.to, "files": r.files, "bytes": r.bytes,
                "kept": r.kept, "removed": r.removed, "target": target.describe(), "restore_command": restore_command,
                "warnings": r.warnings, "seconds": secs})
        );
    } else {
        eprintln!(
            "restored backup {} (consistent at LSN {}, {}) into {}: {} files, {} in {secs:.1}s",
            r.id.short(),
            r.backup.stop_lsn,
            show_time(r.backup.stop_time),
            opts.to.display(),
            r.files,
            mb(r.bytes),
        );
        if a.delta {
            eprintln!(
                "delta: {} files already right were kept, {} entries the backup does not hold removed",
                r.kept, r.removed
            );
        }
        eprintln!(
            "start PostgreSQL on it to recover to {} ({} at the target); WAL comes from: {restore_command}",
            target.describe(),
            if target == Target::Latest { "promote" } else { &a.target_action },
        );
    }
    for w in &r.warnings {
        eprintln!(
            "ferry: warning: WAL segment {w} is missing from the archive: replay stops there"
        );
    }
    if g.password_file.is_none() && g.password_command.is_none() {
        eprintln!("ferry: note: restore_command reads the password from FERRY_PASSWORD: start the server with it set");
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::Cli;
    use crate::places::Stores;
    use crate::settings::Settings;

    /// The restore_command reaches the same store the restore read: endpoint and region too.
    #[test]
    fn restore_command_carries_the_store_settings() {
        let cli = Cli::parse_from([
            "ferry",
            "--repo",
            "s3://bucket/prefix",
            "--s3-endpoint",
            "https://s3.example:9000",
            "--s3-region",
            "eu-north-1",
            "--ceph-conf",
            "/etc/ceph/other.conf",
            "--rados-stripe-unit",
            "8MiB",
            "--azure-connection-string",
            "AccountKey=SECRETKEY",
            "pg",
            "backups",
        ]);
        let settings = Settings::load(&cli.global).unwrap();
        let stores = Stores::new(settings);
        let cmd = super::restore_command(&stores).unwrap();
        for want in [
            r#"--repo "s3://bucket/prefix""#,
            r#"--s3-endpoint "https://s3.example:9000""#,
            r#"--s3-region "eu-north-1""#,
            r#"--ceph-conf "/etc/ceph/other.conf""#,
            r#"--rados-stripe-unit "8MiB""#,
            "wal-fetch %f %p",
        ] {
            assert!(cmd.contains(want), "{cmd} lacks {want}");
        }
        // A secret never goes on a command line (postgresql.auto.conf, ps).
        assert!(!cmd.contains("SECRETKEY"), "{cmd}");
        assert!(!cmd.contains("azure"), "{cmd}");
    }

    #[test]
    fn restore_command_doubles_percent_signs() {
        // PostgreSQL would read "%d" as an unknown escape (refused from version 16).
        assert_eq!(super::sh("/srv/100%done").unwrap(), "\"/srv/100%%done\"");
    }
}

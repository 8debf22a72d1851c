//! `ferry pg restore`: the target and tablespace maps parsed, the `restore_command` the
//! restored server will run, the restore, and what to do next printed.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use ferry_pg::restore::{show_time, RestoreOptions};
use ferry_pg::Target;

use super::pg::mb;
use crate::cli::PgRestoreArgs;
use crate::cmd::repo::open;
use crate::ctx::Ctx;
use crate::output::BarProgress;
use crate::places::Stores;

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

pub async fn restore(a: &PgRestoreArgs, ctx: &mut Ctx) -> Result<()> {
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
    let repo = stores.settings().repo.clone().unwrap_or_default();
    if ferry_store::Location::secret_in(&repo).is_some() && g.config.is_none() {
        eprintln!("ferry: note: the repository's URL may carry a secret (a SAS token, a query or user info), left out of restore_command: start the server with FERRY_REPO set, or restore with --config naming a file that holds it");
    }
    let served = repo.starts_with("ferry+https://");
    if served && g.serve_token_file.is_none() {
        eprintln!("ferry: note: restore_command reads the tenant token from FERRY_SERVE_TOKEN: start the server with it set, or restore with --serve-token-file");
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

    /// A repository URL with a SAS token stays out of restore_command (postgresql.auto.conf,
    /// every local user's `ps`): the child reads it from FERRY_REPO or the config file.
    #[test]
    fn restore_command_leaves_a_sas_token_out() {
        let cli = Cli::parse_from([
            "ferry",
            "--repo",
            "https://acct.blob.core.windows.net/c/r?sv=1&sig=SECRETSIG",
            "pg",
            "backups",
        ]);
        let settings = Settings::load(&cli.global).unwrap();
        let cmd = super::restore_command(&Stores::new(settings)).unwrap();
        assert!(
            !cmd.contains("SECRETSIG") && !cmd.contains("--repo"),
            "{cmd}"
        );
        assert!(cmd.ends_with("wal-fetch %f %p"), "{cmd}");
    }

    #[test]
    fn restore_command_doubles_percent_signs() {
        // PostgreSQL would read "%d" as an unknown escape (refused from version 16).
        assert_eq!(super::sh("/srv/100%done").unwrap(), "\"/srv/100%%done\"");
    }
}

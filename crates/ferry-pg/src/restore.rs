//! `ferry pg restore`: the newest backup that can reach the target, its files in parallel,
//! and the settings that make PostgreSQL replay the archive up to the target.
//!
//! Everything that can be checked is checked before the first byte is written (the target
//! directory is empty, a backup reaches the target, its WAL is all archived); if the restore
//! fails after that, what it wrote is removed again.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferry_repo::archiver::BackupProgress;
use ferry_repo::{Id, Repo, Snapshot};
use ferry_store::{Error, Result};

use crate::record::{backups, PgBackup};
use crate::target::Target;
use crate::walview::WalView;

/// A restore request.
pub struct RestoreOptions {
    /// The new data directory: absent or empty.
    pub to: PathBuf,
    /// Where recovery stops.
    pub target: Target,
    /// A backup id prefix, instead of the newest that reaches the target.
    pub backup: Option<String>,
    /// `recovery_target_action`: promote, pause or shutdown.
    pub action: String,
    /// The `restore_command` to write.
    pub restore_command: String,
}

/// What was restored.
pub struct Restored {
    /// The backup's snapshot id.
    pub id: Id,
    /// Its record.
    pub backup: PgBackup,
    /// Files and bytes written.
    pub files: u64,
    /// See `files`.
    pub bytes: u64,
    /// WAL holes after the backup a replay would stop at (the target may lie before them).
    pub warnings: Vec<String>,
}

fn is_empty_dir(p: &Path) -> Result<bool> {
    match std::fs::read_dir(p) {
        Ok(mut d) => Ok(d.next().is_none()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(Error::io(p.display(), e)),
    }
}

/// Chooses the backup for `opts` among the repository's.
async fn choose(repo: &Repo, opts: &RestoreOptions) -> Result<(Id, Snapshot, PgBackup)> {
    let snaps = ferry_repo::checker::snapshots(repo, &mut Vec::new()).await?;
    let all = backups(snaps);
    if all.is_empty() {
        return Err(Error::NotFound(format!(
            "{} holds no PostgreSQL backup (make one with ferry pg backup)",
            repo.url()
        )));
    }
    if let Some(want) = &opts.backup {
        let hits: Vec<_> = all
            .iter()
            .filter(|(id, _, _)| id.hex().starts_with(&want.to_ascii_lowercase()))
            .collect();
        let (id, snap, b) = match hits.as_slice() {
            [one] => *one,
            [] => return Err(Error::NotFound(format!("no PostgreSQL backup {want}"))),
            _ => return Err(Error::Invalid(format!("backup id {want} is ambiguous"))),
        };
        if !opts.target.reachable_from(b) {
            return Err(Error::Invalid(format!(
                "backup {} ends after {}: recovery cannot stop before a backup is consistent",
                id.short(),
                opts.target.describe()
            )));
        }
        return Ok((*id, snap.clone(), b.clone()));
    }
    match all
        .iter()
        .rev()
        .find(|(_, _, b)| opts.target.reachable_from(b))
    {
        Some((id, snap, b)) => Ok((*id, snap.clone(), b.clone())),
        None => {
            let oldest = &all[0].2;
            Err(Error::Invalid(format!(
                "no backup ends before {}: the oldest ends at {} (LSN {})",
                opts.target.describe(),
                show_time(oldest.stop_time),
                oldest.stop_lsn
            )))
        }
    }
}

/// Microseconds since the epoch, as PostgreSQL prints times in UTC.
pub fn show_time(us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(us)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S%.6f+00").to_string())
        .unwrap_or_else(|| us.to_string())
}

/// The WAL `b` cannot do without, and the holes after it.
async fn check_wal(repo: &Repo, b: &PgBackup, target: &Target) -> Result<Vec<String>> {
    let view = WalView::load(repo, b.seg_size).await?;
    let start = b.start_lsn.segno(b.seg_size);
    let stop = b.stop_lsn.segno(b.seg_size);
    let stop = stop.max(start);
    let missing = view.missing(b.timeline, start, stop);
    if let Some(m) = missing.first() {
        return Err(Error::NotFound(format!(
            "WAL segment {m}, which the backup needs to become consistent, is not in the \
             archive ({} of {} missing)",
            missing.len(),
            stop - start + 1
        )));
    }
    let holes = view.holes_after(b.timeline, stop + 1);
    if let (Target::Lsn(l), Some(h)) = (target, holes.first()) {
        if let Ok(n) = ferry_wal::WalName::parse(h) {
            if n.segno(b.seg_size) <= l.segno(b.seg_size) {
                return Err(Error::NotFound(format!(
                    "WAL segment {h}, between the backup and LSN {l}, is not in the archive"
                )));
            }
        }
    }
    Ok(holes)
}

/// Single quotes doubled, for a value in postgresql.conf.
fn conf_value(v: &str) -> String {
    format!("'{}'", v.replace('\'', "''"))
}

fn write_file(path: &Path, body: &str, owner: (u32, u32)) -> Result<()> {
    let io = |e| Error::io(path.display(), e);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io)?;
    f.write_all(body.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    chown(path, owner);
    Ok(())
}

/// Gives `path` to the backed-up directory's owner when we may (as root); otherwise it stays
/// ours, which is right when the restoring user runs the server.
fn chown(path: &Path, (uid, gid): (u32, u32)) {
    let _ = std::os::unix::fs::chown(path, Some(uid), Some(gid));
}

/// Restores into `opts.to`.
pub async fn restore(
    repo: Arc<Repo>,
    opts: &RestoreOptions,
    progress: Arc<dyn BackupProgress>,
) -> Result<Restored> {
    if !is_empty_dir(&opts.to)? {
        return Err(Error::AlreadyExists(format!(
            "{} is not empty: ferry pg restore writes only into an empty or new directory",
            opts.to.display()
        )));
    }
    if !["promote", "pause", "shutdown"].contains(&opts.action.as_str()) {
        return Err(Error::Invalid(format!(
            "target action '{}' is not promote, pause or shutdown",
            opts.action
        )));
    }
    let (id, snap, b) = choose(&repo, opts).await?;
    let warnings = check_wal(&repo, &b, &opts.target).await?;
    let (index, _, errs) = repo.load_index().await?;
    if let Some(e) = errs.into_iter().next() {
        return Err(e);
    }
    let existed = opts.to.exists();
    let done = async {
        std::fs::create_dir_all(&opts.to).map_err(|e| Error::io(opts.to.display(), e))?;
        let r = ferry_repo::restorer::restore(
            repo.clone(),
            Arc::new(index),
            &snap,
            &opts.to,
            &[],
            progress,
        )
        .await?;
        if let Some(e) = r.errors.first() {
            return Err(Error::Checksum(format!(
                "{} files could not be restored, first: {e}",
                r.errors.len()
            )));
        }
        configure(&opts.to, &b, opts, id)?;
        Ok(r)
    }
    .await;
    match done {
        Ok(r) => Ok(Restored {
            id,
            backup: b,
            files: r.files,
            bytes: r.bytes,
            warnings,
        }),
        Err(e) => {
            // Leave the directory as it was found: absent, or empty.
            if existed {
                if let Ok(d) = std::fs::read_dir(&opts.to) {
                    for e in d.flatten() {
                        let p = e.path();
                        let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
                    }
                }
            } else {
                let _ = std::fs::remove_dir_all(&opts.to);
            }
            Err(e)
        }
    }
}

/// The label, the signal file and the recovery settings.
fn configure(to: &Path, b: &PgBackup, opts: &RestoreOptions, id: Id) -> Result<()> {
    write_file(&to.join("backup_label"), &b.label, b.owner)?;
    if let Some(map) = &b.tablespace_map {
        write_file(&to.join("tablespace_map"), map, b.owner)?;
    }
    write_file(&to.join("recovery.signal"), "", b.owner)?;
    let mut conf = format!(
        "\n# Added by ferry pg restore of backup {} (made {}).\n",
        id.short(),
        show_time(b.stop_time)
    );
    let mut settings = vec![
        ("restore_command", opts.restore_command.clone()),
        ("recovery_target_timeline", "latest".to_string()),
    ];
    settings.extend(opts.target.settings());
    if opts.target != Target::Latest {
        settings.push(("recovery_target_action", opts.action.clone()));
    }
    for (k, v) in settings {
        conf.push_str(&format!("{k} = {}\n", conf_value(&v)));
    }
    write_file(&to.join("postgresql.auto.conf"), &conf, b.owner)?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(b.mode & 0o750))
        .map_err(|e| Error::io(to.display(), e))?;
    chown(to, b.owner);
    Ok(())
}

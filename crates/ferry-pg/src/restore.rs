//! `ferry pg restore`: the newest backup that can reach the target, its files in parallel,
//! and the settings that make PostgreSQL replay the archive up to the target.
//!
//! Everything that can be checked is checked before the first byte is written (the target
//! directory is empty, a backup reaches the target, its WAL is all archived); if the restore
//! fails after that, what it wrote is removed again.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferry_repo::archiver::BackupProgress;
use ferry_repo::index::Index;
use ferry_repo::lock::Lock;
use ferry_repo::restorer::{Overwrite, Select};
use ferry_repo::tree::NodeKind;
use ferry_repo::{Id, Repo, Snapshot};
use ferry_transfer::{Error, Result};

use crate::record::{PgBackup, Tablespace};
use crate::tablespace;
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
    /// Into an existing data directory, keeping the files that hold the backup's content
    /// and rewriting or removing the rest (pgBackRest's `--delta`).
    pub delta: bool,
    /// Tablespaces put elsewhere than where they were: OID and directory.
    pub tablespace_map: Vec<(u32, PathBuf)>,
}

/// What was restored.
#[derive(Debug)]
pub struct Restored {
    /// The backup's snapshot id.
    pub id: Id,
    /// Its record.
    pub backup: PgBackup,
    /// Files and bytes written.
    pub files: u64,
    /// See `files`.
    pub bytes: u64,
    /// With `delta`: files already right, left as they were.
    pub kept: u64,
    /// With `delta`: entries removed, which the backup does not hold.
    pub removed: u64,
    /// WAL holes after the backup a replay would stop at (the target may lie before them).
    pub warnings: Vec<String>,
}

pub(crate) fn is_empty_dir(p: &Path) -> Result<bool> {
    match std::fs::read_dir(p) {
        Ok(mut d) => Ok(d.next().is_none()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(Error::io(p.display(), e)),
    }
}

/// Refuses a `--delta` target that is not a stopped data directory: anything but a missing
/// or empty directory must hold `PG_VERSION` (a delta removes what the backup does not hold:
/// pointed at the wrong directory, it would empty it), and no `postmaster.pid`.
fn delta_target(to: &Path) -> Result<()> {
    if is_empty_dir(to)? {
        return Ok(());
    }
    if !to.join("PG_VERSION").is_file() {
        return Err(Error::Invalid(format!(
            "{} is not a PostgreSQL data directory (no PG_VERSION): --delta rewrites a data \
             directory and removes what the backup does not hold",
            to.display()
        )));
    }
    if to.join("postmaster.pid").symlink_metadata().is_ok() {
        return Err(Error::Invalid(format!(
            "{} has a postmaster.pid: stop PostgreSQL first (if it does not run, remove the \
             file)",
            to.display()
        )));
    }
    Ok(())
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
            crate::walview::count(missing.len()),
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

/// The files pg restore writes into the data directory it restored: through `ferry-fs`, so
/// that an entry the snapshot put under one of these names (a symlink to a file of the
/// host's, say) is replaced, never written through or chowned.
struct Conf {
    dir: ferry_fs::Dir,
    owner: (u32, u32),
}

impl Conf {
    fn io(name: &str) -> impl Fn(std::io::Error) -> Error + '_ {
        move |e| Error::io(format!("{name} in the restored data directory"), e)
    }

    /// Replaces `name` with `body`, mode 0600, the cluster owner's.
    fn write(&self, name: &str, body: &[u8]) -> Result<()> {
        self.dir
            .write_file(name.as_bytes(), body, 0o600, Some(self.owner))
            .map_err(Self::io(name))
    }

    /// Appends `body` to the regular file `name` (made when missing), by writing the whole
    /// new file and renaming it over the old one.
    fn append(&self, name: &str, body: &str) -> Result<()> {
        let mut all = match self.dir.read_file(name.as_bytes(), MAX_CONF) {
            Ok(body) => body.unwrap_or_default(),
            // A link or a device where the file belongs: it is replaced, never followed.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                tracing::warn!("{name} in the backup is not a regular file ({e}): replaced");
                Vec::new()
            }
            Err(e) => return Err(Self::io(name)(e)),
        };
        all.extend_from_slice(body.as_bytes());
        self.write(name, &all)
    }
}

/// Larger than any postgresql.auto.conf PostgreSQL writes.
const MAX_CONF: u64 = 64 << 20;

/// Restores into `opts.to`.
pub async fn restore(
    repo: Arc<Repo>, opts: &RestoreOptions, progress: Arc<dyn BackupProgress>,
) -> Result<Restored> {
    if !["promote", "pause", "shutdown"].contains(&opts.action.as_str()) {
        return Err(Error::Invalid(format!(
            "target action '{}' is not promote, pause or shutdown",
            opts.action
        )));
    }
    if opts.delta {
        delta_target(&opts.to)?;
    }
    // One lock and one index from the first tree read to the last file: no prune runs
    // between the data directory and its tablespaces, and the index is read once.
    let (lock, (index, _)) = Lock::acquire_then(repo.clone(), false, repo.index()).await?;
    let r = restore_locked(repo, Arc::new(index), opts, progress).await;
    lock.release_after(r).await
}

/// [`restore`], with the repository's lock held and its index read under it.
async fn restore_locked(
    repo: Arc<Repo>, index: Arc<Index>, opts: &RestoreOptions, progress: Arc<dyn BackupProgress>,
) -> Result<Restored> {
    // One descriptor of the data directory from here to the end: whoever can write the
    // directory above it (the cluster's owner, often) may swap the path for a link meanwhile,
    // and every write, the mode and owner set last, and the clean-up after a failure go
    // where it was opened. Private (0700) before any content; its mode is set last.
    let shown = opts.to.display();
    let (root, made) =
        ferry_fs::Dir::create_root_made(&opts.to).map_err(|e| Error::io(&shown, e))?;
    if !opts.delta && !root.entries().map_err(|e| Error::io(&shown, e))?.is_empty() {
        return Err(Error::AlreadyExists(format!(
            "{shown} is not empty: ferry pg restore writes only into an empty or new directory \
             (--delta: into a data directory, rewriting what differs)"
        )));
    }
    let found = Found::of(&root).map_err(|e| Error::io(&shown, e))?;
    // What a failed restore leaves: the data directory and each tablespace's as they were
    // found, empty (their modes and owners put back), and gone where this restore made them.
    let undo = |opened: &[Opened]| {
        found.undo(&root, made.then_some(opts.to.as_path()));
        for o in opened {
            o.found.undo(&o.dir, o.made.as_deref());
        }
    };
    let chosen = async {
        let (id, snap, b) =
            crate::choose::choose(&repo, &opts.target, opts.backup.as_deref()).await?;
        owned(&root, made, &b, &opts.to)?;
        private(&root, &opts.to)?;
        no_special(&repo, &index, &snap).await?;
        let spaces = tablespace::places(&b, &opts.to, &opts.tablespace_map, opts.delta)?;
        let warnings = check_wal(&repo, &b, &opts.target).await?;
        Ok::<_, Error>((id, snap, b, spaces, warnings))
    }
    .await;
    let (id, snap, b, spaces, warnings) = match chosen {
        Ok(c) => c,
        Err(e) => {
            if !opts.delta {
                undo(&[]);
            }
            return Err(e);
        }
    };
    let mut opened: Vec<Opened> = Vec::new();
    let done = async {
        let mut how = ferry_repo::restorer::Options {
            overwrite: if opts.delta {
                Overwrite::IfDifferent
            } else {
                Overwrite::Always
            },
            delete: opts.delta,
            // Left out, should [`no_special`] have let one through: FIFOs, devices, setuid
            // and setgid bits, file capabilities.
            special: false,
            // The cluster owner's, whoever the snapshot names: PostgreSQL's files are all
            // its, and another user of the host must not get one (pg_hba.conf, say).
            owner: Some(b.owner),
            ..Default::default()
        };
        if !spaces.is_empty() {
            // Tablespaces go to their own places; PostgreSQL makes the links from
            // tablespace_map when it starts.
            how.select = Select::new(&[], &["/pg_tblspc/*".to_string()])?;
        }
        let into = root
            .try_clone()
            .map_err(|e| Error::io(opts.to.display(), e))?;
        let mut r = ferry_repo::restorer::restore_into(
            repo.clone(),
            index.clone(),
            &snap,
            into,
            &opts.to,
            &how,
            progress.clone(),
        )
        .await?;
        for (t, dest) in &spaces {
            let tree = tablespace::tree(&repo, &index, &snap, t.oid).await?;
            let sub = Snapshot {
                tree,
                ..snap.clone()
            };
            let io = |e| Error::io(dest.display(), e);
            let mapped = opts.tablespace_map.iter().any(|(oid, _)| *oid == t.oid);
            let (dir, made) = tablespace::open_place(t, dest, &b, mapped)?;
            // What was checked by path holds for what was opened.
            tablespace::check_opened(&dir, t, dest, opts.delta, &b, mapped || made)?;
            opened.push(Opened {
                dir: dir.try_clone().map_err(io)?,
                found: Found::of(&dir).map_err(io)?,
                made: made.then(|| dest.clone()),
            });
            private(&dir, dest)?;
            let one = ferry_repo::restorer::Options {
                overwrite: how.overwrite,
                delete: how.delete,
                special: false,
                owner: how.owner,
                ..Default::default()
            };
            let into = dir.try_clone().map_err(io)?;
            let got = ferry_repo::restorer::restore_into(
                repo.clone(),
                index.clone(),
                &sub,
                into,
                dest,
                &one,
                progress.clone(),
            )
            .await?;
            dir.set_mode(0o700, Some(b.owner)).map_err(io)?;
            r.files += got.files;
            r.bytes += got.bytes;
            r.errors.extend(got.errors);
        }
        if let Some(e) = r.errors.first() {
            return Err(Error::Checksum(format!(
                "{} files could not be restored, first: {e}",
                r.errors.len()
            )));
        }
        configure(&root, &opts.to, &b, opts, id, &spaces)?;
        Ok(r)
    }
    .await;
    match done {
        Ok(r) => Ok(Restored {
            id,
            backup: b,
            files: r.files,
            bytes: r.bytes,
            kept: r.skipped,
            removed: r.deleted,
            warnings,
        }),
        // What a delta restore changed cannot be undone; run again, it finishes the job.
        Err(e) if opts.delta => Err(Error::Permanent(format!(
            "{e}; {} is partly restored: run the delta restore again",
            opts.to.display()
        ))),
        Err(e) => {
            // Tablespace directories were checked empty or absent: made empty again too.
            undo(&opened);
            Err(e)
        }
    }
}

/// A tablespace directory a restore writes into, and what a failed restore puts back.
struct Opened {
    dir: ferry_fs::Dir,
    found: Found,
    /// Its path, when this restore made it.
    made: Option<PathBuf>,
}

/// A directory's mode and owner when a restore opened it, before [`private`] and the
/// cluster owner's chown.
#[derive(Clone, Copy)]
struct Found {
    mode: u32,
    owner: (u32, u32),
}

impl Found {
    fn of(dir: &ferry_fs::Dir) -> std::io::Result<Found> {
        let st = dir.stat()?;
        Ok(Found {
            mode: st.st_mode & 0o7777,
            owner: (st.st_uid, st.st_gid),
        })
    }

    /// Empties `dir`, puts its mode and owner back (an operator's place of root's must not
    /// stay the cluster owner's), and removes it where it was `made`: through its parent's
    /// descriptor, only while the name there is still the directory made (a writer of a
    /// directory higher up who swaps the path cannot have another directory removed).
    fn undo(self, dir: &ferry_fs::Dir, made: Option<&Path>) {
        let _ = dir.empty();
        if let Ok(now) = Found::of(dir) {
            if now.mode != self.mode || now.owner != self.owner {
                let _ = dir.set_mode(self.mode, (now.owner != self.owner).then_some(self.owner));
            }
        }
        let parent_and_name = made.and_then(|p| Some((p.parent()?, p.file_name()?)));
        if let Some((parent, name)) = parent_and_name {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            if let Ok(parent) = ferry_fs::Dir::open_root(parent) {
                let _ = parent.remove_dir_if_same(name.as_bytes(), dir);
            }
        }
    }
}

/// A data directory that was there already must be the cluster owner's (or this user's,
/// restoring as that owner): an empty directory of root's that the path was made to name
/// (a link planted by whoever writes the directory above) would otherwise be filled and
/// handed to the cluster's owner.
fn owned(root: &ferry_fs::Dir, made: bool, b: &PgBackup, to: &Path) -> Result<()> {
    let uid = root.stat().map_err(|e| Error::io(to.display(), e))?.st_uid;
    match b.not_owners(uid).filter(|_| !made) {
        None => Ok(()),
        Some(why) => Err(Error::Invalid(format!(
            "{} {why}: give it to that user, or name a new directory",
            to.display()
        ))),
    }
}

/// Makes `dir` (the data directory, or a tablespace's) 0700 before anything is written into
/// it (once it is known to be the cluster owner's): a directory found group-writable (0770)
/// would let the group swap in files of its own (`postgresql.auto.conf` with an
/// `archive_command`) while the restore writes.
fn private(dir: &ferry_fs::Dir, path: &Path) -> Result<()> {
    dir.set_mode(0o700, None)
        .map_err(|e| Error::io(path.display(), e))
}

/// Refuses a backup whose snapshot holds what no data directory holds: a device, or an entry
/// with setuid, setgid or sticky bits (but a directory's setgid, inherited from its parent
/// where PostgreSQL made it, which is dropped). PostgreSQL makes none of these and only root
/// can make most: a password holder forged the snapshot, and restored as root it would leave
/// root's setuid programs or device nodes in the cluster owner's hands. Checked before
/// anything is written. FIFOs and sockets (PostgreSQL's own, with `unix_socket_directories`
/// in the data directory) are left out with a warning, as pgBackRest leaves them out.
async fn no_special(repo: &Repo, index: &Index, snap: &Snapshot) -> Result<()> {
    ferry_repo::browse::walk(repo, index, snap.tree, |path, n| {
        if let Some(why) = not_data(n) {
            return Err(Error::Invalid(format!(
                "the backup's snapshot holds {path:?}, {why}: no data directory holds one; \
                 the snapshot is damaged or forged, nothing was restored"
            )));
        }
        if matches!(n.kind, NodeKind::Fifo | NodeKind::Socket) {
            tracing::warn!("{path:?} in the backup is a FIFO or socket: left out")
        }
        Ok(())
    })
    .await
}

/// Why `n` has no place in a data directory, if it has none.
fn not_data(n: &ferry_repo::tree::Node) -> Option<&'static str> {
    let bits = match n.kind {
        NodeKind::Chardev | NodeKind::Blockdev => return Some("a device"),
        NodeKind::Socket => 0,
        NodeKind::Dir => n.mode & 0o5000,
        _ => n.mode & 0o7000,
    };
    (bits != 0).then_some("with setuid, setgid or sticky bits")
}

/// The label, the signal file and the recovery settings.
fn configure(
    root: &ferry_fs::Dir, to: &Path, b: &PgBackup, opts: &RestoreOptions, id: Id,
    spaces: &[(Tablespace, PathBuf)],
) -> Result<()> {
    let c = Conf {
        dir: root.try_clone().map_err(|e| Error::io(to.display(), e))?,
        owner: b.owner,
    };
    c.write("backup_label", b.label.as_bytes())?;
    // Made from the places checked, never the record's own map: its lines would make
    // pg_tblspc links wherever they say.
    if !spaces.is_empty() {
        c.write("tablespace_map", tablespace::map_file(spaces)?.as_bytes())?;
    }
    c.write("recovery.signal", b"")?;
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
    c.append("postgresql.auto.conf", &conf)?;
    c.dir
        .set_mode(b.mode & 0o750, Some(b.owner))
        .map_err(|e| Error::io(to.display(), e))
}

//! Tablespaces in a restore: where each goes, whether that place may be written, and its
//! files' tree in the backup's snapshot (`pg_tblspc/OID`).

use std::path::{Component, Path, PathBuf};

use ferry_repo::index::Index;
use ferry_repo::{Id, Repo, Snapshot};
use ferry_transfer::{Error, Result};

use crate::record::{PgBackup, Tablespace};
use crate::restore::is_empty_dir;

/// Where each tablespace of `b` goes, restoring into `to`: `map` (`--tablespace-map`) or where
/// it was. Each place must be
/// an absolute path, absent or empty, outside the data directory, and named once; a remap
/// must name a tablespace of the backup.
pub(crate) fn places(
    b: &PgBackup, to: &Path, map: &[(u32, PathBuf)], delta: bool,
) -> Result<Vec<(Tablespace, PathBuf)>> {
    for (oid, _) in map {
        if !b.tablespaces.iter().any(|t| t.oid == *oid) {
            return Err(Error::Invalid(format!(
                "--tablespace-map {oid}: the backup has no tablespace {oid} (it has: {})",
                b.tablespaces
                    .iter()
                    .map(|t| t.oid.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    // PostgreSQL makes a pg_tblspc link of each line: a map without tablespaces to put
    // anywhere is not a backup's.
    let stray = b.tablespace_map.as_deref().unwrap_or("");
    if b.tablespaces.is_empty() && !stray.trim().is_empty() {
        return Err(Error::Invalid(
            "the backup's record has a tablespace_map but no tablespaces: it is damaged or \
             forged, nothing was restored"
                .into(),
        ));
    }
    let mut out: Vec<(Tablespace, PathBuf)> = Vec::new();
    for t in &b.tablespaces {
        let mapped = map.iter().find(|(oid, _)| *oid == t.oid);
        let dest = mapped.map_or_else(|| PathBuf::from(&t.location), |(_, d)| d.clone());
        let shown = dest.display().to_string();
        // The cluster's owner wrote the location (pg_tblspc's link): `..` in it would walk
        // out of what the path seems to name once a missing part of it is made. It becomes a
        // line of tablespace_map, written as it is: PostgreSQL reads a line break there as
        // the line's end and a backslash as an escape, and ferry writes paths as UTF-8.
        let plain = dest
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        if !dest.is_absolute() || !plain || map_line(&dest).is_none() {
            return Err(Error::Invalid(format!(
                "tablespace {}: {shown:?} is not a plain absolute path (give --tablespace-map \
                 {}=DIR)",
                t.oid, t.oid
            )));
        }
        if mapped.is_none() {
            not_taken(t, &dest, b)?;
        }
        if dest.starts_with(to) || out.iter().any(|(_, d)| d == &dest) {
            return Err(Error::Invalid(format!(
                "tablespace {}: {shown} is inside the data directory or another tablespace's place",
                t.oid
            )));
        }
        // A delta rewrites a tablespace too, but only one that looks like one: it holds
        // PostgreSQL's version directory (PG_15_202209061), as a data directory PG_VERSION.
        let fresh = is_empty_dir(&dest)?;
        if delta && !fresh && !is_tablespace(&dest) {
            return Err(Error::Invalid(format!(
                "tablespace {}: {shown} is not a tablespace directory (no PG_* version \
                 directory): --delta would empty it",
                t.oid
            )));
        }
        if !delta && !fresh {
            return Err(Error::AlreadyExists(format!(
                "tablespace {}: {shown} is not empty (give --tablespace-map {}=DIR to put it \
                 elsewhere)",
                t.oid, t.oid
            )));
        }
        out.push((t.clone(), dest));
    }
    Ok(out)
}

/// A place the backup names (not the operator) may be a directory of the cluster's owner or
/// nothing: a restore as root would otherwise fill, and hand to the cluster's owner, any empty
/// directory the location names (`/usr/local/sbin`, first in root's PATH).
/// A place that does not exist yet is made in its parent, which must then be the cluster
/// owner's: a parent reached through a link the owner controls could be any directory
/// (`/etc/systemd/system`), and what is made there is handed to the cluster's owner.
fn not_taken(t: &Tablespace, dest: &Path, b: &PgBackup) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = match std::fs::symlink_metadata(dest) {
        // A link to nothing: making the place would replace it with a directory in a parent
        // nobody checked (root's, where a link to a removed file was left).
        Ok(l) if l.file_type().is_symlink() && std::fs::metadata(dest).is_err() => {
            return Err(Error::Invalid(format!(
                "tablespace {}: {} is a symbolic link to nothing: give --tablespace-map {}=DIR",
                t.oid,
                dest.display(),
                t.oid
            )));
        }
        Ok(_) => std::fs::metadata(dest),
        Err(_) => {
            let parent = dest.parent().unwrap_or(Path::new("/"));
            let m = std::fs::metadata(parent).map_err(|e| {
                Error::Invalid(format!(
                    "tablespace {}: {} does not exist, nor its parent ({e}): give \
                     --tablespace-map {}={} to make it",
                    t.oid,
                    dest.display(),
                    t.oid,
                    dest.display()
                ))
            })?;
            return match b.not_owners(m.uid()) {
                None => Ok(()),
                Some(why) => Err(Error::Invalid(format!(
                    "tablespace {}: {} does not exist, and its parent {why}: give \
                     --tablespace-map {}={} to make it there",
                    t.oid,
                    dest.display(),
                    t.oid,
                    dest.display()
                ))),
            };
        }
    };
    let Ok(m) = m else {
        return Ok(());
    };
    match b.not_owners(m.uid()) {
        None => Ok(()),
        Some(why) => Err(Error::Invalid(format!(
            "tablespace {}: {} {why}: give --tablespace-map {}={} to restore there",
            t.oid,
            dest.display(),
            t.oid,
            dest.display()
        ))),
    }
}

/// Opens the place `dest` of tablespace `t`, or makes it. One the operator named is made as
/// asked; one the backup names is made only in a parent of the cluster's owner, checked
/// through the parent's descriptor (the path may have been swapped since [`places`] looked).
/// One that is there is only opened, never made: "made" is what exempts the place from the
/// owner check, and only a directory made in a parent checked here may say it.
/// Returns the directory and whether it was made.
pub(crate) fn open_place(
    t: &Tablespace, dest: &Path, b: &PgBackup, mapped: bool,
) -> Result<(ferry_fs::Dir, bool)> {
    let io = |e| Error::io(dest.display(), e);
    if mapped {
        return ferry_fs::Dir::create_root_made(dest).map_err(io);
    }
    if std::fs::symlink_metadata(dest).is_ok() {
        // A link to nothing fails here (ENOENT): it is not replaced.
        let dir = ferry_fs::Dir::open_root(dest).map_err(io)?;
        return Ok((dir, false));
    }
    let (Some(parent), Some(name)) = (dest.parent(), dest.file_name()) else {
        return Err(Error::Invalid(format!(
            "tablespace {}: {} names no directory to make",
            t.oid,
            dest.display()
        )));
    };
    let p = ferry_fs::Dir::open_root(parent).map_err(io)?;
    let uid = p.stat().map_err(io)?.st_uid;
    if let Some(why) = b.not_owners(uid) {
        return Err(Error::Invalid(format!(
            "tablespace {}: the parent of {} changed while it was opened: it {why}",
            t.oid,
            dest.display()
        )));
    }
    use std::os::unix::ffi::OsStrExt;
    p.make_dir(name.as_bytes(), false, false).map_err(io)
}

/// What [`places`] checked by path, checked again on the directory opened there (the path
/// may have been swapped for a link meanwhile): empty, unless `delta`, and the cluster
/// owner's unless `trusted` (the operator named it, or this restore made it).
pub(crate) fn check_opened(
    dir: &ferry_fs::Dir, t: &Tablespace, dest: &Path, delta: bool, b: &PgBackup, trusted: bool,
) -> Result<()> {
    let io = |e| Error::io(dest.display(), e);
    if !delta && !dir.entries().map_err(io)?.is_empty() {
        return Err(Error::AlreadyExists(format!(
            "tablespace {}: {} changed while it was opened: not empty now",
            t.oid,
            dest.display()
        )));
    }
    let st = dir.stat().map_err(io)?;
    match b.not_owners(st.st_uid).filter(|_| !trusted) {
        None => Ok(()),
        Some(why) => Err(Error::Invalid(format!(
            "tablespace {}: {} changed while it was opened: it {why}",
            t.oid,
            dest.display()
        ))),
    }
}

/// `dest` as it can stand in a line of `tablespace_map`: UTF-8, with no line break (the
/// line's end to PostgreSQL) and no backslash (an escape to it).
fn map_line(dest: &Path) -> Option<&str> {
    dest.to_str().filter(|d| !d.contains(['\n', '\r', '\\']))
}

/// `tablespace_map`: "OID PATH" per line, which PostgreSQL turns into pg_tblspc links when
/// it starts; made only from places [`places`] checked (UTF-8, no line break, no backslash).
pub(crate) fn map_file(spaces: &[(Tablespace, PathBuf)]) -> Result<String> {
    let mut map = String::new();
    for (t, dest) in spaces {
        let Some(d) = map_line(dest) else {
            return Err(Error::Invalid(format!(
                "tablespace {}: {dest:?} cannot be a line of tablespace_map",
                t.oid
            )));
        };
        map.push_str(&format!("{} {d}\n", t.oid));
    }
    Ok(map)
}

/// Whether `dir` holds a PostgreSQL version directory, as every tablespace does.
fn is_tablespace(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|d| {
        d.flatten().any(|e| {
            e.file_name().to_string_lossy().starts_with("PG_")
                && e.file_type().is_ok_and(|t| t.is_dir())
        })
    })
}

/// The tree of tablespace `oid` in `snap`: `pg_tblspc/OID`.
pub(crate) async fn tree(repo: &Repo, index: &Index, snap: &Snapshot, oid: u32) -> Result<Id> {
    let sub = |tree: ferry_repo::tree::Tree, name: &str| {
        tree.nodes
            .into_iter()
            .find(|n| n.name == name && n.kind == ferry_repo::tree::NodeKind::Dir)
            .and_then(|n| n.subtree)
            .ok_or_else(|| {
                Error::Checksum(format!(
                    "the backup's snapshot has no directory {name} for tablespace {oid}"
                ))
            })
    };
    let root = ferry_repo::load_tree(repo, index, &snap.tree).await?;
    let links = ferry_repo::load_tree(repo, index, &sub(root, "pg_tblspc")?).await?;
    sub(links, &oid.to_string())
}

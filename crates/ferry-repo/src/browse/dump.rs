//! `dump`: one file of a snapshot as a stream of its bytes, or a directory as a tar archive,
//! blob by blob: a few blobs are read ahead, no file is held whole.
//!
//! Everything that can be checked without the data is checked before the first byte is
//! written: the path, every name under a directory, every file's blobs and their sizes in the
//! index. A damaged or hostile snapshot is refused with nothing on the output.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use ferry_transfer::{Error, Result};
use futures::{Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::{bound, child, Trees};
use crate::index::Index;
use crate::repo::Repo;
use crate::tree::{Node, NodeKind};
use crate::Id;

/// Blobs read ahead of the one being written.
const AHEAD: usize = 8;

/// A path looked up in a snapshot.
#[derive(Debug, Clone)]
pub struct Found {
    /// Absolute, within the snapshot.
    pub path: PathBuf,
    /// Its entry; `None` for the snapshot's root, which no entry describes.
    pub node: Option<Node>,
    /// The root tree, when `node` is `None`.
    root: Id,
}

impl Found {
    /// True for a directory (and the root).
    pub fn is_dir(&self) -> bool {
        self.node.as_ref().is_none_or(|n| n.kind == NodeKind::Dir)
    }

    /// Its listing: `None` for an empty directory or anything else.
    fn tree(&self) -> Option<Id> {
        match &self.node {
            None => Some(self.root),
            Some(n) => n.subtree.filter(|_| n.kind == NodeKind::Dir),
        }
    }
}

/// The entry at `path` (absolute; relative is taken from the root) in the snapshot whose
/// root tree is `root`.
pub async fn lookup(repo: &Repo, index: &Index, root: Id, path: &Path) -> Result<Found> {
    let missing = |why: &str| Error::Invalid(format!("{}: {why}", path.display()));
    let mut found = Found {
        path: PathBuf::from("/"),
        node: None,
        root,
    };
    for comp in path.components() {
        let name = match comp {
            Component::RootDir | Component::CurDir => continue,
            Component::Normal(name) => name,
            _ => return Err(missing("give the path without '..'")),
        };
        let dir = match (found.is_dir(), found.tree()) {
            (false, _) => return Err(missing("not in the snapshot (a parent is no directory)")),
            (true, None) => return Err(missing("not in the snapshot")),
            (true, Some(dir)) => dir,
        };
        let tree = crate::load_tree(repo, index, &dir).await?;
        let node = tree
            .nodes
            .into_iter()
            .find(|n| n.name_bytes() == name.as_bytes())
            .ok_or_else(|| missing("not in the snapshot"))?;
        found.path.push(name);
        found.node = Some(node);
    }
    Ok(found)
}

/// Writes the file `node`'s content to `out`; returns its size.
pub async fn write_file<W: AsyncWrite + Unpin>(
    repo: &Repo, index: &Index, path: &Path, node: &Node, out: &mut W,
) -> Result<u64> {
    if node.kind != NodeKind::File {
        return Err(Error::Invalid(format!(
            "{}: a {}: only a file or a directory can be dumped",
            path.display(),
            kind_name(node.kind)
        )));
    }
    check_content(index, path, node)?;
    let mut blobs = blobs(repo, index, node.content.clone());
    copy(&mut blobs, index, path, node, out).await?;
    out.flush()
        .await
        .map_err(|e| Error::io("writing the output", e))?;
    Ok(node.size)
}

/// Writes the directory `found` to `out` as a tar archive, member paths relative to its
/// parent (`dir/...`; the root's entries as they are); returns the members written.
pub async fn write_tar<W: AsyncWrite + Unpin>(
    repo: &Repo, index: &Index, found: &Found, out: &mut W,
) -> Result<u64> {
    let entries = entries(repo, index, found).await?;
    for (rel, n) in &entries {
        if n.kind == NodeKind::File {
            check_content(index, rel, n)?;
        }
    }
    let ids = entries.iter().flat_map(|(_, n)| n.content.iter().copied());
    let mut blobs = blobs(repo, index, ids.collect());
    let mut tar = tar::Builder::new(Vec::new());
    let mut members = 0;
    for (rel, n) in &entries {
        let Some(mut h) = header(n)? else {
            continue; // a socket: tar has no such member
        };
        let what = |e: std::io::Error| Error::Invalid(format!("{}: {e}", rel.display()));
        match n.kind {
            NodeKind::Symlink => {
                let target = hex::decode(n.target.as_deref().unwrap_or_default())
                    .map_err(|_| Error::Invalid(format!("{}: target is not hex", rel.display())))?;
                let target = PathBuf::from(OsString::from_vec(target));
                tar.append_link(&mut h, rel, &target).map_err(what)?
            }
            // A directory's member ends in '/', as tar itself writes it.
            NodeKind::Dir => tar
                .append_data(&mut h, rel.join(""), std::io::empty())
                .map_err(what)?,
            // The header alone: the content follows from the blobs.
            _ => tar
                .append_data(&mut h, rel, std::io::empty())
                .map_err(what)?,
        }
        write(out, &std::mem::take(tar.get_mut())).await?;
        if n.kind == NodeKind::File {
            copy(&mut blobs, index, rel, n, out).await?;
            let pad = (512 - n.size % 512) % 512;
            write(out, &[0; 512][..pad as usize]).await?;
        }
        members += 1;
    }
    let end = tar.into_inner().map_err(|e| Error::io("tar", e))?;
    write(out, &end).await?;
    out.flush()
        .await
        .map_err(|e| Error::io("writing the output", e))?;
    Ok(members)
}

/// Every entry in and under `found`, named as the archive names them, parents first.
async fn entries(repo: &Repo, index: &Index, found: &Found) -> Result<Vec<(PathBuf, Node)>> {
    let mut out = Vec::new();
    let base = match &found.node {
        None => PathBuf::new(),
        Some(n) => {
            let parent = found.path.parent().unwrap_or(Path::new("/"));
            let rel = PathBuf::from(child(parent, n)?.file_name().unwrap_or_default());
            out.push((rel.clone(), n.clone()));
            rel
        }
    };
    let mut level: Vec<(PathBuf, Id)> = found.tree().map(|t| (base, t)).into_iter().collect();
    while !level.is_empty() {
        let mut trees = Trees::default();
        trees.load(repo, index, level.iter().map(|l| l.1)).await?;
        let mut next = Vec::new();
        for (dir, id) in level {
            bound(out.len() + next.len(), "entries")?;
            for n in &trees.get(&id).nodes {
                let rel = child(&dir, n)?;
                if let Some(sub) = n.subtree.filter(|_| n.kind == NodeKind::Dir) {
                    next.push((rel.clone(), sub));
                }
                out.push((rel, n.clone()));
            }
        }
        level = next;
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The tar header of `n`, path not yet set; `None` for what tar cannot hold.
fn header(n: &Node) -> Result<Option<tar::Header>> {
    use tar::EntryType as E;
    let mut h = tar::Header::new_gnu();
    let kind = match n.kind {
        NodeKind::File => E::Regular,
        NodeKind::Dir => E::Directory,
        NodeKind::Symlink => E::Symlink,
        NodeKind::Fifo => E::Fifo,
        NodeKind::Chardev => E::Char,
        NodeKind::Blockdev => E::Block,
        NodeKind::Socket => return Ok(None),
    };
    h.set_entry_type(kind);
    h.set_size(if n.kind == NodeKind::File { n.size } else { 0 });
    h.set_mode(n.mode & 0o7777);
    h.set_uid(u64::from(n.uid));
    h.set_gid(u64::from(n.gid));
    // Seconds: the GNU header holds no fraction, nor a time before 1970.
    h.set_mtime(u64::try_from(n.mtime.div_euclid(1_000_000_000)).unwrap_or(0));
    if let (Some(rdev), E::Char | E::Block) = (n.rdev, kind) {
        let rdev = rdev as libc::dev_t;
        let err = |e: std::io::Error| Error::Invalid(e.to_string());
        h.set_device_major(libc::major(rdev)).map_err(err)?;
        h.set_device_minor(libc::minor(rdev)).map_err(err)?;
    }
    Ok(Some(h))
}

/// Refuses a file whose blobs the index lacks or whose sizes do not add up to its own.
fn check_content(index: &Index, path: &Path, n: &Node) -> Result<()> {
    let mut total = 0u64;
    for id in &n.content {
        let loc = index.get(id).ok_or_else(|| {
            let why = format!("blob {} is in no index (run ferry check)", id.short());
            Error::NotFound(format!("{}: {why}", path.display()))
        })?;
        total += u64::from(loc.plain_len);
    }
    match total == n.size {
        true => Ok(()),
        false => Err(Error::Checksum(format!(
            "{}: its blobs hold {total} bytes, its size is {} (run ferry check)",
            path.display(),
            n.size
        ))),
    }
}

/// The blobs `ids`, in order, a few read ahead.
fn blobs<'a>(
    repo: &'a Repo, index: &'a Index, ids: Vec<Id>,
) -> impl Stream<Item = (Id, Result<Vec<u8>>)> + Unpin + 'a {
    let load = move |id: Id| async move { (id, crate::load_blob(repo, index, &id).await) };
    Box::pin(futures::stream::iter(ids).map(load).buffered(AHEAD))
}

/// Writes the next `n.content.len()` blobs of `blobs`, each of the length the index gave
/// (which [`check_content`] added up to the size the header says).
async fn copy<W: AsyncWrite + Unpin>(
    blobs: &mut (impl Stream<Item = (Id, Result<Vec<u8>>)> + Unpin), index: &Index, path: &Path,
    n: &Node, out: &mut W,
) -> Result<()> {
    for _ in &n.content {
        let Some((id, data)) = blobs.next().await else {
            return Err(Error::Permanent("blob stream ended early".into()));
        };
        let data = data?;
        if index.get(&id).map(|l| l.plain_len as usize) != Some(data.len()) {
            return Err(Error::Checksum(format!(
                "{}: blob {} is not the length its index gives",
                path.display(),
                id.short()
            )));
        }
        write(out, &data).await?;
    }
    Ok(())
}

async fn write<W: AsyncWrite + Unpin>(out: &mut W, b: &[u8]) -> Result<()> {
    out.write_all(b)
        .await
        .map_err(|e| Error::io("writing the output", e))
}

/// A kind as people say it.
fn kind_name(k: NodeKind) -> &'static str {
    match k {
        NodeKind::File => "file",
        NodeKind::Dir => "directory",
        NodeKind::Symlink => "symbolic link",
        NodeKind::Fifo => "named pipe",
        NodeKind::Chardev => "character device",
        NodeKind::Blockdev => "block device",
        NodeKind::Socket => "socket",
    }
}

//! One entry of a restore on disk, made through the safe file layer (`ferry-fs`): beneath
//! its directory's descriptor, never through a link, private until its metadata is set.

use std::os::unix::fs::FileExt;

use ferry_fs::{Dir, Meta, Special, Temp};

use crate::id::Id;
use crate::tree::{Node, NodeKind};

/// The xattr that grants a file capabilities when executed.
const CAPABILITY: &[u8] = b"security.capability";

/// What a restore keeps of a snapshot's node. A restore holds one per entry from the walk to
/// the end: a [`Node`] is 216 bytes, this 56, with what few entries have boxed apart (100k
/// entries: 16 MB less at the restore's peak).
pub(super) struct Entry {
    pub kind: NodeKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Modification time, ns since the epoch.
    pub mtime: i64,
    /// Size in bytes (files).
    pub size: u64,
    /// Content blobs, in order (files).
    pub content: Box<[Id]>,
    /// Link target, device number, xattrs, hard-link identity: `None` when it has none.
    rare: Option<Box<Rare>>,
}

/// The parts of a node most entries do not have.
#[derive(Default)]
struct Rare {
    /// Link target, hex.
    target: Option<String>,
    rdev: Option<u64>,
    /// Name and value, hex.
    xattrs: Vec<(String, String)>,
    /// (device, inode) of a file with more than one link.
    link: Option<(u64, u64)>,
}

impl From<Node> for Entry {
    fn from(n: Node) -> Entry {
        let link = (n.kind == NodeKind::File && n.nlink > 1).then_some((n.dev, n.inode));
        let rare =
            (n.target.is_some() || n.rdev.is_some() || !n.xattrs.is_empty() || link.is_some())
                .then(|| {
                    Box::new(Rare {
                        target: n.target,
                        rdev: n.rdev,
                        xattrs: n.xattrs,
                        link,
                    })
                });
        Entry {
            kind: n.kind,
            mode: n.mode,
            uid: n.uid,
            gid: n.gid,
            mtime: n.mtime,
            size: n.size,
            content: n.content.into_boxed_slice(),
            rare,
        }
    }
}

impl Entry {
    /// (device, inode) of a file with more than one link: its other names are hard links.
    pub fn link(&self) -> Option<(u64, u64)> {
        self.rare.as_ref().and_then(|r| r.link)
    }

    fn xattrs(&self) -> &[(String, String)] {
        self.rare.as_ref().map_or(&[], |r| &r.xattrs)
    }
}

/// The metadata `n` records, as the file layer sets it. Without `special`, setuid and
/// setgid bits and file capabilities are left out.
pub(super) fn meta(n: &Entry, special: bool) -> Meta {
    let xattrs = if n.kind == NodeKind::Symlink {
        Vec::new()
    } else {
        n.xattrs()
            .iter()
            .filter_map(|(k, v)| Some((hex::decode(k).ok()?, hex::decode(v).ok()?)))
            .filter(|(k, _)| special || k != CAPABILITY)
            .collect()
    };
    Meta {
        uid: n.uid,
        gid: n.gid,
        mode: if special { n.mode } else { n.mode & !0o6000 },
        mtime_ns: n.mtime,
        xattrs,
    }
}

/// Makes the symlink or special file `n` as `name` in `dir`, with its metadata. Special
/// files only when `special`: devices and pipes are left out otherwise.
pub(super) fn make_other(
    dir: &Dir, name: &[u8], n: &Entry, owner: bool, special: bool,
) -> std::io::Result<()> {
    let m = meta(n, special);
    let kind = match n.kind {
        NodeKind::Symlink => {
            let target = n.rare.as_ref().and_then(|r| r.target.as_deref());
            let t = hex::decode(target.unwrap_or_default()).map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, "link target is not hex")
            })?;
            return dir.symlink(&t, name, &m, owner);
        }
        NodeKind::Fifo => Special::Fifo,
        NodeKind::Chardev => Special::Chardev,
        NodeKind::Blockdev => Special::Blockdev,
        NodeKind::File | NodeKind::Dir | NodeKind::Socket => return Ok(()),
    };
    if !special {
        return Ok(());
    }
    let rdev = n.rare.as_ref().and_then(|r| r.rdev);
    dir.special(name, kind, rdev.unwrap_or(0), &m, owner)
}

/// Makes the file `n` under a private temp name, sized (holes where nothing is written,
/// so sparse files come back sparse); its blobs are written into it later.
pub(super) fn create(dir: &Dir, n: &Entry) -> std::io::Result<Temp> {
    let t = dir.create_temp()?;
    t.file.set_len(n.size)?;
    Ok(t)
}

/// Why [`write_whole`] failed.
pub(super) enum Failed {
    /// The content is not in place: the file is damaged.
    Content(std::io::Error),
    /// The file is in place under its name, without all its metadata.
    Meta(std::io::Error),
}

/// Writes a file whose content is the one blob `plain`, sets its metadata through its
/// descriptor and gives it its name: one pass where a file of several blobs takes three
/// (create; write, blob by blob; metadata and name). Most files of a tree of small ones are
/// such files.
pub(super) fn write_whole(
    dir: &Dir, name: &[u8], n: &Entry, plain: &[u8], owner: bool, special: bool,
) -> std::result::Result<(), Failed> {
    let t = dir.create_temp().map_err(Failed::Content)?;
    // All zeros: a hole, so that sparse files come back sparse.
    let wrote = if plain.iter().all(|&b| b == 0) {
        t.file.set_len(n.size)
    } else {
        t.file.write_all_at(plain, 0)
    };
    if let Err(e) = wrote {
        let _ = dir.remove(&t.name);
        return Err(Failed::Content(e));
    }
    dir.finish(&t.file, &t.name, name, &meta(n, special), owner)
        .map_err(Failed::Content)?
        .map_err(Failed::Meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_stays_small_and_keeps_what_restoring_needs() {
        // A restore holds one per entry of the snapshot: a field added here costs that much.
        assert!(
            std::mem::size_of::<Entry>() <= 56,
            "{}",
            std::mem::size_of::<Entry>()
        );
        let mut n: Node = serde_json::from_str(
            r#"{"name":"f","kind":"file","mode":420,"uid":1,"gid":2,"mtime":3,"ctime":4,
                "inode":5,"dev":6,"nlink":2,"size":7,"xattrs":[["75736572","76"]]}"#,
        )
        .unwrap();
        let e = Entry::from(n.clone());
        assert_eq!(e.link(), Some((6, 5)));
        let m = meta(&e, true);
        assert_eq!((m.uid, m.gid, m.mode, m.mtime_ns), (1, 2, 420, 3));
        assert_eq!(m.xattrs, vec![(b"user".to_vec(), b"v".to_vec())]);
        n.nlink = 1;
        n.xattrs.clear();
        let e = Entry::from(n);
        assert!(e.link().is_none() && e.rare.is_none());
    }
}

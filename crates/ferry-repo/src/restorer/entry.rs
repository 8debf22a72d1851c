//! One entry of a restore on disk, made through the safe file layer (`ferry-fs`): beneath
//! its directory's descriptor, never through a link, private until its metadata is set.

use std::os::unix::fs::FileExt;

use ferry_fs::{Dir, Meta, Special, Temp};

use crate::tree::{Node, NodeKind};

/// The xattr that grants a file capabilities when executed.
const CAPABILITY: &[u8] = b"security.capability";

/// The metadata `n` records, as the file layer sets it. Without `special`, setuid and
/// setgid bits and file capabilities are left out.
pub(super) fn meta(n: &Node, special: bool) -> Meta {
    let xattrs = if n.kind == NodeKind::Symlink {
        Vec::new()
    } else {
        n.xattrs
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
    dir: &Dir, name: &[u8], n: &Node, owner: bool, special: bool,
) -> std::io::Result<()> {
    let m = meta(n, special);
    let kind = match n.kind {
        NodeKind::Symlink => {
            let t = hex::decode(n.target.as_deref().unwrap_or_default()).map_err(|_| {
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
    dir.special(name, kind, n.rdev.unwrap_or(0), &m, owner)
}

/// Makes the file `n` under a private temp name, sized (holes where nothing is written,
/// so sparse files come back sparse); its blobs are written into it later.
pub(super) fn create(dir: &Dir, n: &Node) -> std::io::Result<Temp> {
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
    dir: &Dir, name: &[u8], n: &Node, plain: &[u8], owner: bool, special: bool,
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

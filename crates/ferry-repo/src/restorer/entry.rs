//! One entry of a restore on disk: made, written, given its metadata.

use std::ffi::{CString, OsStr, OsString};
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use ferry_store::{Error, Result};
use xattr::FileExt as _;

use crate::dirfd;
use crate::tree::{Node, NodeKind};

fn cstr(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid(format!("{}: NUL in path", p.display())))
}

/// Sets owner (when root), mode, times and xattrs, without following symlinks.
pub(super) fn apply_meta(path: &Path, n: &Node) -> std::io::Result<()> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        dirfd::set_owner(path, n.uid, n.gid)?;
    }
    let symlink = n.kind == NodeKind::Symlink;
    if !symlink {
        for (k, v) in &n.xattrs {
            if let (Ok(k), Ok(v)) = (hex::decode(k), hex::decode(v)) {
                let _ = xattr::set(path, OsStr::from_bytes(&k), &v);
            }
        }
    }
    dirfd::set_mode_and_mtime(path, (!symlink).then_some(n.mode), n.mtime)
}

/// Makes the entry `n` at `path`: a file under its temp name, sized (holes where nothing
/// is written, so sparse files come back sparse), or a symlink or special file.
pub(super) fn create(path: &Path, n: &Node) -> std::io::Result<()> {
    match n.kind {
        NodeKind::File => dirfd::create(&temp_of(path)).and_then(|f| f.set_len(n.size)),
        NodeKind::Symlink => {
            let t = hex::decode(n.target.as_deref().unwrap_or_default()).unwrap_or_default();
            let _ = fs::remove_file(path);
            std::os::unix::fs::symlink(OsStr::from_bytes(&t), path)
        }
        NodeKind::Fifo | NodeKind::Chardev | NodeKind::Blockdev => {
            let kind = match n.kind {
                NodeKind::Fifo => libc::S_IFIFO,
                NodeKind::Chardev => libc::S_IFCHR,
                _ => libc::S_IFBLK,
            };
            let c = cstr(path).map_err(std::io::Error::other)?;
            let _ = fs::remove_file(path);
            // SAFETY: valid path; mknod creates a node or fails.
            let rc = unsafe {
                libc::mknod(
                    c.as_ptr(),
                    kind | (n.mode & 0o7777),
                    n.rdev.unwrap_or(0) as libc::dev_t,
                )
            };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        }
        NodeKind::Dir | NodeKind::Socket => Ok(()),
    }
}

pub(super) fn temp_of(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    let mut t = OsString::from(".");
    t.push(name);
    t.push(".ferry-restore");
    path.with_file_name(t)
}

/// Why [`write_whole`] failed.
pub(super) enum Failed {
    /// The content is not in place: the file is damaged.
    Content(std::io::Error),
    /// The file is in place under its name, without all its metadata.
    Meta(std::io::Error),
}

/// Writes a file whose content is the one blob `plain`, sets its metadata through the
/// descriptor still open, and gives it its name: one pass where a file of several blobs
/// takes three (create; write, blob by blob; rename and metadata by name). Most files of a
/// tree of small ones are such files.
pub(super) fn write_whole(
    path: &Path,
    n: &Node,
    plain: &[u8],
    owner: bool,
) -> std::result::Result<(), Failed> {
    let temp = temp_of(path);
    let f = dirfd::create(&temp).map_err(Failed::Content)?;
    // All zeros: a hole, so that sparse files come back sparse.
    let wrote = if plain.iter().all(|&b| b == 0) {
        f.set_len(n.size)
    } else {
        f.write_all_at(plain, 0)
    };
    wrote.map_err(Failed::Content)?;
    let meta = apply_meta_fd(&f, n, owner);
    drop(f);
    dirfd::rename_within(&temp, path).map_err(Failed::Content)?;
    meta.map_err(Failed::Meta)
}

/// [`apply_meta`] for an open regular file, through its descriptor: no name to look up.
fn apply_meta_fd(f: &fs::File, n: &Node, owner: bool) -> std::io::Result<()> {
    let fd = f.as_raw_fd();
    if owner {
        // SAFETY: fd is open. Best effort, as by name; before xattrs, which a chown clears.
        unsafe { libc::fchown(fd, n.uid, n.gid) };
    }
    for (k, v) in &n.xattrs {
        if let (Ok(k), Ok(v)) = (hex::decode(k), hex::decode(v)) {
            let _ = f.set_xattr(OsStr::from_bytes(&k), &v);
        }
    }
    // SAFETY: fd is open.
    if unsafe { libc::fchmod(fd, n.mode) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let times = dirfd::times(n.mtime);
    // SAFETY: fd is open; times holds the two timespecs futimens reads.
    if unsafe { libc::futimens(fd, times.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

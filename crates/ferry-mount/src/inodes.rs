//! The mounted tree's inodes: the directories ferry makes up (`snapshots/`, `hosts/`,
//! `tags/`, `ids/`), and below each snapshot its own tree, listed when first visited.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferry_repo::tree::{Node, NodeKind};
use ferry_repo::Id;
use fuser::{FileAttr, FileType, INodeNo};

/// A directory's entries, sorted by name, shared: a lookup is a binary search and a listing
/// starts where the last one stopped, never copying the entries (a directory of a million
/// entries, listed a hundred at a time, would otherwise cost a million squared).
#[derive(Default)]
pub(crate) struct Entries(Vec<(OsString, u64)>);

impl Entries {
    /// The inode named `name`.
    pub(crate) fn get(&self, name: &OsStr) -> Option<u64> {
        let i = self
            .0
            .binary_search_by(|(n, _)| n.as_os_str().cmp(name))
            .ok()?;
        Some(self.0[i].1)
    }

    /// The entries from the `from`th on.
    pub(crate) fn from(&self, from: usize) -> &[(OsString, u64)] {
        self.0.get(from..).unwrap_or_default()
    }
}

impl From<BTreeMap<OsString, u64>> for Entries {
    fn from(m: BTreeMap<OsString, u64>) -> Entries {
        Entries(m.into_iter().collect())
    }
}

/// What an inode is.
pub(crate) enum What {
    /// A directory ferry makes up, with its entries.
    Made(Arc<Entries>),
    /// A directory of a snapshot: its tree, listed on first visit, and dropped when the
    /// kernel has forgotten it and them ([`crate::table`]).
    Tree {
        id: Id,
        children: Mutex<Option<Arc<Entries>>>,
    },
    /// A file of a snapshot.
    File(Arc<Node>),
    /// A link: a snapshot's symlink, or one ferry makes (`latest`).
    Link(Vec<u8>),
    /// A device, FIFO or socket of a snapshot: shown, never opened.
    Other,
}

/// One inode: what it is and its attributes.
pub(crate) struct Inode {
    pub(crate) what: What,
    pub(crate) attr: FileAttr,
}

/// Attributes of a directory ferry makes up: read-only, owned by the mounting user.
pub(crate) fn made_attr(ino: u64, time: SystemTime) -> FileAttr {
    attr(ino, FileType::Directory, 0o555, 0, time)
}

/// Attributes of a link ferry makes up.
pub(crate) fn link_attr(ino: u64, len: usize, time: SystemTime) -> FileAttr {
    attr(ino, FileType::Symlink, 0o777, len as u64, time)
}

fn attr(ino: u64, kind: FileType, perm: u16, size: u64, time: SystemTime) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: time,
        mtime: time,
        ctime: time,
        crtime: time,
        kind,
        perm,
        nlink: 1,
        // SAFETY: getuid/getgid cannot fail.
        uid: unsafe { libc::getuid() },
        gid: unsafe { libc::getgid() },
        rdev: 0,
        flags: 0,
        blksize: 4096,
    }
}

/// The inode for snapshot entry `n` numbered `ino`: its kind, mode, owner, size and mtime
/// as stored. Write bits are taken away: the mount is read-only.
pub(crate) fn node_inode(ino: u64, n: Node) -> Inode {
    let kind = match n.kind {
        NodeKind::File => FileType::RegularFile,
        NodeKind::Dir => FileType::Directory,
        NodeKind::Symlink => FileType::Symlink,
        NodeKind::Fifo => FileType::NamedPipe,
        NodeKind::Chardev => FileType::CharDevice,
        NodeKind::Blockdev => FileType::BlockDevice,
        NodeKind::Socket => FileType::Socket,
    };
    let time = UNIX_EPOCH + Duration::from_nanos(n.mtime.max(0) as u64);
    let target = n.target.as_deref().and_then(hex_decode);
    // The kernel refuses an attribute past i64::MAX (and then never forgets the lookup that
    // carried it, which would pin the directory's entries).
    let size = match kind {
        FileType::Symlink => target.as_ref().map_or(0, Vec::len) as u64,
        _ => n.size.min(i64::MAX as u64),
    };
    let mut a = attr(ino, kind, (n.mode & 0o7555) as u16, size, time);
    a.uid = n.uid;
    a.gid = n.gid;
    let what = match (n.kind, n.subtree) {
        (NodeKind::Dir, Some(id)) => What::Tree {
            id,
            children: Mutex::new(None),
        },
        (NodeKind::Dir, None) => What::Made(Arc::default()),
        (NodeKind::File, _) => What::File(Arc::new(n)),
        (NodeKind::Symlink, _) => What::Link(target.unwrap_or_default()),
        _ => What::Other,
    };
    Inode { what, attr: a }
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A snapshot entry's name as the kernel is given it: refused (None) when it could not be a
/// file name, so that a hostile snapshot cannot show `..` or a name with a `/`.
pub(crate) fn entry_name(n: &Node) -> Option<OsString> {
    let b = n.checked_name().ok()?;
    Some(OsStr::from_bytes(&b).to_os_string())
}

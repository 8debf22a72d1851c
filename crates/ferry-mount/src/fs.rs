//! The FUSE side: lookups, attributes, listings, links and reads, answered from the inode
//! table and the repository. FUSE calls come on fuser's threads; the repository is async,
//! so each call that needs it blocks on the runtime it was given.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_repo::index::Index;
use ferry_repo::Repo;
use fuser::{
    Errno, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen, Request,
};

use crate::content::Blobs;
use crate::inodes::{entry_name, node_inode, Entries, Inode, What};
use crate::table::Table;

/// Nothing in a snapshot changes: the kernel may keep what it was told.
const TTL: Duration = Duration::from_secs(3600);

/// The mounted repository.
pub(crate) struct RepoFs {
    pub(crate) repo: Arc<Repo>,
    pub(crate) index: Arc<Index>,
    pub(crate) rt: tokio::runtime::Handle,
    pub(crate) inodes: Mutex<Table>,
    /// Past this many inodes held, directories not listed yet fail with ENOMEM.
    pub(crate) max_inodes: usize,
    /// The bound was said once.
    pub(crate) warned: AtomicBool,
    pub(crate) blobs: Blobs,
}

impl RepoFs {
    fn get(&self, ino: INodeNo) -> Option<Arc<Inode>> {
        self.inodes.lock().expect("inodes").get(u64::from(ino))
    }

    /// Adds an inode made by `make` from its number: what ferry makes up (never dropped).
    pub(crate) fn add(&self, make: impl FnOnce(u64) -> Inode) -> u64 {
        self.inodes.lock().expect("inodes").add(0, make)
    }

    /// The entries of directory `ino` (`inode`): a snapshot directory's tree is read when
    /// first visited, or again once the kernel forgot it (entries with names no file can
    /// have are left out).
    fn children(&self, ino: u64, inode: &Inode) -> Result<Arc<Entries>, Errno> {
        match &inode.what {
            What::Made(c) => Ok(c.clone()),
            What::Tree { id, children } => {
                if let Some(c) = children.lock().expect("children").clone() {
                    return Ok(c);
                }
                let tree = self
                    .rt
                    .block_on(ferry_repo::load_tree(&self.repo, &self.index, id))
                    .map_err(|e| {
                        tracing::warn!("tree {}: {e}", id.short());
                        Errno::EIO
                    })?;
                let mut table = self.inodes.lock().expect("inodes");
                if table.len() + tree.nodes.len() > self.max_inodes {
                    if !self.warned.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            "more than {} entries held: directories not listed yet are refused \
                             until the kernel forgets some (trees that share subtrees, or a \
                             mount browsed whole)",
                            self.max_inodes
                        );
                    }
                    return Err(Errno::ENOMEM);
                }
                let mut c = BTreeMap::new();
                for n in tree.nodes {
                    if let Some(name) = entry_name(&n) {
                        c.insert(name, table.add(ino, |i| node_inode(i, n)));
                    }
                }
                drop(table);
                let ours: Arc<Entries> = Arc::new(c.into());
                // One lock at a time: the table's release takes the table's, then these.
                let kept = {
                    let mut held = children.lock().expect("children");
                    held.get_or_insert_with(|| ours.clone()).clone()
                };
                if !Arc::ptr_eq(&kept, &ours) {
                    let made = ours.from(0).iter().map(|(_, c)| *c);
                    self.inodes.lock().expect("inodes").discard(made);
                }
                Ok(kept)
            }
            _ => Err(Errno::ENOTDIR),
        }
    }
}

impl Filesystem for RepoFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(dir) = self.get(parent) else {
            return reply.error(Errno::ENOENT);
        };
        let found = self.children(u64::from(parent), &dir).map(|c| c.get(name));
        match found {
            Ok(Some(ino)) => match self.get(INodeNo(ino)) {
                Some(i) => {
                    self.inodes.lock().expect("inodes").looked_up(ino);
                    reply.entry(&TTL, &i.attr, Generation(0))
                }
                None => reply.error(Errno::ENOENT),
            },
            Ok(None) => reply.error(Errno::ENOENT),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.inodes
            .lock()
            .expect("inodes")
            .forget(u64::from(ino), nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.get(ino) {
            Some(i) => reply.attr(&TTL, &i.attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.get(ino).as_deref().map(|i| &i.what) {
            Some(What::Link(t)) => reply.data(t),
            Some(_) => reply.error(Errno::EINVAL),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        match self.get(ino).as_deref().map(|i| &i.what) {
            Some(What::File(_)) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Some(What::Other) => reply.error(Errno::EACCES),
            Some(_) => reply.error(Errno::EISDIR),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn read(
        &self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, size: u32,
        _flags: OpenFlags, _lock: Option<LockOwner>, reply: ReplyData,
    ) {
        let Some(What::File(node)) = self.get(ino).map(|i| match &i.what {
            What::File(n) => What::File(n.clone()),
            _ => What::Other,
        }) else {
            return reply.error(Errno::EISDIR);
        };
        match self.blobs.read(self, &node, offset, size as usize) {
            Ok(data) => reply.data(&data),
            Err(e) => {
                tracing::warn!("read {}: {e}", node.name);
                reply.error(Errno::EIO)
            }
        }
    }

    fn readdir(
        &self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(dir) = self.get(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let children = match self.children(u64::from(ino), &dir) {
            Ok(c) => c,
            Err(e) => return reply.error(e),
        };
        // Offsets: 1 and 2 after the dots, 3 + k after the kth entry; a listing goes on from
        // the offset it is given, without walking what came before.
        let dots = [(ino, OsStr::new(".")), (ino, OsStr::new(".."))];
        for (i, (child, name)) in dots.iter().enumerate().skip(offset as usize) {
            if reply.add(*child, i as u64 + 1, FileType::Directory, name) {
                return reply.ok();
            }
        }
        let first = (offset as usize).saturating_sub(dots.len());
        for (k, (name, c)) in children.from(first).iter().enumerate() {
            let Some(kind) = self.get(INodeNo(*c)).map(|i| i.attr.kind) else {
                continue;
            };
            if reply.add(INodeNo(*c), (dots.len() + first + k) as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

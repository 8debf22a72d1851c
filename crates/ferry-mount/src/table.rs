//! The inode table: every inode the kernel may ask about, with the lookups the kernel holds
//! on it and the directory it was listed in. A snapshot directory's entries go, with their
//! inodes, once the kernel has forgotten the directory and everything in it (FUSE's
//! `forget`): browsing a large snapshot then holds what the kernel still caches, not every
//! entry ever listed. Numbers are never reused, so a forgotten number cannot name another
//! entry.

use std::collections::HashMap;
use std::sync::Arc;

use crate::inodes::{Inode, What};

struct Slot {
    inode: Arc<Inode>,
    /// Lookups the kernel holds (each `lookup` answered adds one; `forget` takes them back).
    lookups: u64,
    /// The snapshot directory it was listed in; 0 for what ferry makes up, never dropped.
    parent: u64,
}

/// Every live inode by number.
pub(crate) struct Table {
    slots: HashMap<u64, Slot>,
    next: u64,
}

impl Table {
    pub(crate) fn new() -> Table {
        Table {
            slots: HashMap::new(),
            next: 1,
        }
    }

    /// The inode numbered `ino`.
    pub(crate) fn get(&self, ino: u64) -> Option<Arc<Inode>> {
        self.slots.get(&ino).map(|s| s.inode.clone())
    }

    /// Adds the inode `make` builds from its number, listed in `parent` (0: made up).
    pub(crate) fn add(&mut self, parent: u64, make: impl FnOnce(u64) -> Inode) -> u64 {
        let ino = self.next;
        self.next += 1;
        let inode = Arc::new(make(ino));
        self.slots.insert(
            ino,
            Slot {
                inode,
                lookups: 0,
                parent,
            },
        );
        ino
    }

    /// Puts `inode` in place of what `ino` was (the root, once its entries are made).
    pub(crate) fn replace(&mut self, ino: u64, inode: Inode) {
        if let Some(s) = self.slots.get_mut(&ino) {
            s.inode = Arc::new(inode);
        }
    }

    /// Inodes held.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Drops inodes made for entries that were not kept (another listing of the same
    /// directory won the race).
    pub(crate) fn discard(&mut self, inos: impl IntoIterator<Item = u64>) {
        for ino in inos {
            self.slots.remove(&ino);
        }
    }

    /// The kernel was given `ino` in a lookup's answer.
    pub(crate) fn looked_up(&mut self, ino: u64) {
        if let Some(s) = self.slots.get_mut(&ino) {
            s.lookups += 1;
        }
    }

    /// The kernel forgot `n` lookups of `ino`: once none is left, its directory's entries
    /// (and then its parents') may go.
    pub(crate) fn forget(&mut self, ino: u64, n: u64) {
        let Some(s) = self.slots.get_mut(&ino) else {
            return;
        };
        s.lookups = s.lookups.saturating_sub(n);
        let mut at = ino;
        while at != 0 && self.release(at) {
            at = self.slots.get(&at).map_or(0, |s| s.parent);
        }
    }

    /// Drops the entries of directory `ino` when the kernel holds none of them nor it;
    /// true when `ino` is now idle (its parent may be released in turn).
    fn release(&mut self, ino: u64) -> bool {
        if self.slots.get(&ino).is_none_or(|s| s.lookups != 0) {
            return false;
        }
        let Some(inode) = self.get(ino) else {
            return false;
        };
        let What::Tree { children, .. } = &inode.what else {
            return true;
        };
        let listed = children.lock().expect("children").clone();
        let Some(entries) = listed else {
            return true;
        };
        if !entries.from(0).iter().all(|(_, c)| self.idle(*c)) {
            return false;
        }
        *children.lock().expect("children") = None;
        self.discard(entries.from(0).iter().map(|(_, c)| *c));
        true
    }

    /// True when the kernel holds no lookup of `ino` and, for a directory, none of its
    /// entries are listed any more.
    fn idle(&self, ino: u64) -> bool {
        let Some(s) = self.slots.get(&ino) else {
            return true;
        };
        s.lookups == 0
            && match &s.inode.what {
                What::Tree { children, .. } => children.lock().expect("children").is_none(),
                _ => true,
            }
    }
}

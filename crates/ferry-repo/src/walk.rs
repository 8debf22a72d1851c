//! Reading directories for a backup: each entry's metadata as a [`Node`], and a read-ahead
//! that lists directories while the repository is still being opened (Argon2, the index),
//! so that the walk of an unchanged tree overlaps what it cannot start without.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::archiver::BackupProgress;
use crate::policy::{Pick, Policy};
use crate::tree::{Node, NodeKind};

/// A directory's entries, sorted by name, each with its node or why it could not be read.
pub(crate) type Entries = Vec<(OsString, std::io::Result<Node>)>;

/// The read-ahead keeps at most this many entries waiting: about 60 MiB of nodes.
const AHEAD_MAX: usize = 250_000;

/// The xattrs of `path`, names and values in hex; unreadable ones are left out, as on
/// filesystems without xattrs.
pub(crate) fn xattrs_of(path: &Path) -> Vec<(String, String)> {
    hexed(xattr::list(path), |x| xattr::get(path, x))
}

/// The xattrs of the open file `f`, as [`xattrs_of`] gives a path's.
pub(crate) fn xattrs_of_file(f: &fs::File) -> Vec<(String, String)> {
    use xattr::FileExt;
    hexed(f.list_xattr(), |x| f.get_xattr(x))
}

/// The xattrs `names` lists, each read by `get`, names and values in hex.
fn hexed<I: Iterator<Item = OsString>>(
    names: std::io::Result<I>, get: impl Fn(&std::ffi::OsStr) -> std::io::Result<Option<Vec<u8>>>,
) -> Vec<(String, String)> {
    let Ok(names) = names else {
        return Vec::new();
    };
    names
        .filter_map(|x| {
            let v = get(&x).ok()??;
            Some((hex::encode(x.as_bytes()), hex::encode(v)))
        })
        .collect()
}

/// Opens the regular file `path` that was listed as `node`, or refuses: whoever owns the
/// directory may have swapped the entry since it was listed (for a link, a FIFO that would
/// block the backup for good, a device that never ends, or another file whose bytes would be
/// stored under this one's owner and mode, setuid bits included). Not through a link, not
/// blocking, and the same file (device and inode) as listed.
pub(crate) fn open_listed(path: &Path, node: &Node) -> std::io::Result<fs::File> {
    let changed =
        || std::io::Error::other("changed while the backup ran: not the file it listed; left out");
    let (f, m) = ferry_fs::open_regular(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => changed(),
        _ => e,
    })?;
    if m.ino() != node.inode || m.dev() != node.dev {
        return Err(changed());
    }
    Ok(f)
}

/// The node for `path`, with a directory's xattrs (a file's come with its content).
pub(crate) fn node(path: &Path, name: &std::ffi::OsStr) -> std::io::Result<Node> {
    let mut n = node_of(&fs::symlink_metadata(path)?, path, name)?;
    if n.kind == NodeKind::Dir {
        n.xattrs = xattrs_of(path);
    }
    Ok(n)
}

/// The node for `path` whose metadata is `m`; without xattrs for files, which
/// [`Archiver::save_node`] takes from the parent when the file is unchanged.
pub(crate) fn node_of(
    m: &fs::Metadata, path: &Path, name: &std::ffi::OsStr,
) -> std::io::Result<Node> {
    let ft = m.file_type();
    let kind = if ft.is_file() {
        NodeKind::File
    } else if ft.is_dir() {
        NodeKind::Dir
    } else if ft.is_symlink() {
        NodeKind::Symlink
    } else if ft.is_fifo() {
        NodeKind::Fifo
    } else if ft.is_char_device() {
        NodeKind::Chardev
    } else if ft.is_block_device() {
        NodeKind::Blockdev
    } else {
        NodeKind::Socket
    };
    let mut n = Node {
        name: String::new(),
        name_hex: false,
        kind,
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        mtime: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        ctime: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
        inode: m.ino(),
        dev: m.dev(),
        nlink: m.nlink(),
        size: if kind == NodeKind::File { m.size() } else { 0 },
        content: Vec::new(),
        subtree: None,
        target: None,
        rdev: matches!(kind, NodeKind::Chardev | NodeKind::Blockdev).then(|| m.rdev()),
        xattrs: Vec::new(),
    };
    n.set_name(name);
    if kind == NodeKind::Symlink {
        n.target = Some(hex::encode(fs::read_link(path)?.as_os_str().as_bytes()));
    }
    Ok(n)
}

/// A directory's entries, and which directory they are of.
pub(crate) struct Listed {
    /// Its device and inode, from the open directory: what was listed, whatever the path
    /// names by now.
    pub(crate) id: (u64, u64),
    pub(crate) entries: Entries,
}

/// Lists `dir` and reads every entry's metadata, relative to the open directory (fstatat),
/// not by a path the kernel walks again from the root. The policy is applied by the caller,
/// which needs the metadata to decide and counts what it leaves out. The directory is opened
/// once and listed through that descriptor: a caller compares [`Listed::id`] with what the
/// parent's listing said, so that a directory swapped for a link since (to `/root`, by whoever
/// owns the parent) is never read as if it were the one listed.
pub(crate) fn entries(dir: &Path) -> std::io::Result<Listed> {
    use std::os::unix::fs::OpenOptionsExt;
    let open = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(dir)?;
    let m = open.metadata()?;
    let by_fd = Path::new("/proc/self/fd").join(std::os::fd::AsRawFd::as_raw_fd(&open).to_string());
    let mut found: Vec<fs::DirEntry> = fs::read_dir(&by_fd)?.collect::<std::io::Result<_>>()?;
    found.sort_by(|a, b| a.file_name().as_bytes().cmp(b.file_name().as_bytes()));
    let entries = found
        .into_iter()
        .map(|e| {
            let (name, path) = (e.file_name(), e.path());
            let node = e.metadata().and_then(|m| {
                let mut n = node_of(&m, &path, &name)?;
                if n.kind == NodeKind::Dir {
                    n.xattrs = xattrs_of(&path);
                }
                Ok(n)
            });
            (name, node)
        })
        .collect();
    drop(open);
    Ok(Listed {
        id: (m.dev(), m.ino()),
        entries,
    })
}

/// Directories listed ahead of a backup, depth-first in the order the archiver visits them,
/// on a thread of its own, until the archiver starts ([`ReadAhead::stop`]).
pub struct ReadAhead {
    /// Nanoseconds since the epoch when the first directory was listed: the snapshot's start.
    started: i64,
    stop: AtomicBool,
    listed: Mutex<HashMap<PathBuf, std::io::Result<Listed>>>,
}

impl ReadAhead {
    /// Starts listing the directories `paths` (absolute) and everything under them.
    pub fn start(paths: Vec<PathBuf>, policy: Arc<dyn Policy>) -> Arc<ReadAhead> {
        let ra = Arc::new(ReadAhead {
            started: crate::archiver::now_ns(),
            stop: AtomicBool::new(false),
            listed: Mutex::new(HashMap::new()),
        });
        let me = ra.clone();
        std::thread::spawn(move || {
            let mut held = 0;
            let mut todo: Vec<PathBuf> = paths.into_iter().rev().collect();
            while let Some(dir) = todo.pop() {
                if me.stop.load(Ordering::Relaxed) || held >= AHEAD_MAX {
                    break;
                }
                if !fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
                    continue;
                }
                let listed = entries(&dir);
                if let Ok(found) = &listed {
                    held += found.entries.len();
                    // Only into what the backup takes: an excluded tree is never read.
                    let subdirs = found.entries.iter().rev().filter_map(|(name, n)| {
                        let (n, path) = (n.as_ref().ok()?, dir.join(name));
                        let take = n.kind == NodeKind::Dir && policy.pick(&path, n) == Pick::Take;
                        take.then_some(path)
                    });
                    todo.extend(subdirs);
                }
                me.listed.lock().expect("listed").insert(dir, listed);
            }
        });
        ra
    }

    /// Stops listing: the archiver lists the rest itself.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// The listing of `dir`, if read ahead; each is handed out once.
    pub(crate) fn take(&self, dir: &Path) -> Option<std::io::Result<Listed>> {
        self.listed.lock().expect("listed").remove(dir)
    }

    /// When the read-ahead began, in nanoseconds since the epoch.
    pub(crate) fn started(&self) -> i64 {
        self.started
    }
}

/// A walk of a backup's sources for the sizes of what it will read, under the same policy,
/// so that a progress bar can show a total and an ETA; it runs beside the backup.
pub struct Scan {
    pub(crate) paths: Vec<PathBuf>,
    pub(crate) policy: Arc<dyn Policy>,
}

/// What a backup of the sources would take and leave out (`backup --dry-run`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Totals {
    /// Files it would take.
    pub files: u64,
    /// Directories it would take (the sources' own included).
    pub dirs: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// Entries left out (what is under an excluded directory is not counted).
    pub excluded: u64,
    /// Bytes of the files left out.
    pub excluded_bytes: u64,
}

impl Scan {
    /// Tells `progress` the size of every file the backup takes. Unreadable entries are
    /// passed over: the backup reports them.
    pub fn run(self, progress: &dyn BackupProgress) {
        self.walk(&mut |n, pick| {
            if pick == Pick::Take && n.kind == NodeKind::File {
                progress.scanned(n.size);
            }
        });
    }

    /// Counts what the backup would take and leave out.
    pub fn totals(self) -> Totals {
        let mut t = Totals::default();
        self.walk(&mut |n, pick| match (pick, n.kind) {
            (Pick::Skip, _) => {
                t.excluded += 1;
                t.excluded_bytes += n.size;
            }
            (_, NodeKind::Dir) => t.dirs += 1,
            (_, NodeKind::File) => {
                t.files += 1;
                t.bytes += n.size;
            }
            _ => {}
        });
        t
    }

    /// Calls `seen` with every entry under the sources and the policy's pick for it; the
    /// sources themselves are taken.
    fn walk(self, seen: &mut dyn FnMut(&Node, Pick)) {
        let mut todo: Vec<PathBuf> = Vec::new();
        for p in self.paths.into_iter().rev() {
            let name = p.file_name().unwrap_or(p.as_os_str()).to_owned();
            let Ok(n) = node(&p, &name) else {
                continue;
            };
            seen(&n, Pick::Take);
            if n.kind == NodeKind::Dir {
                todo.push(p);
            }
        }
        while let Some(path) = todo.pop() {
            let Ok(found) = entries(&path) else {
                continue;
            };
            for (name, n) in found.entries.into_iter().rev() {
                let (Ok(n), child) = (n, path.join(&name)) else {
                    continue;
                };
                let pick = self.policy.pick(&child, &n);
                seen(&n, pick);
                if pick == Pick::Take && n.kind == NodeKind::Dir {
                    todo.push(child);
                }
            }
        }
    }
}

//! [`Dir`]: an open directory, and every call that makes or changes an entry in it.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use crate::name::check_name;
use crate::regular::{regular, reopen};

/// Owner, mode, times and extended attributes to give an entry.
#[derive(Debug, Clone, Default)]
pub struct Meta {
    /// Owner, set only when the caller asks (only root may give files away).
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Permission bits with setuid, setgid and sticky.
    pub mode: u32,
    /// Modification (and access) time, ns since the epoch.
    pub mtime_ns: i64,
    /// Extended attributes, name and value.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// A special file [`Dir::special`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// A named pipe.
    Fifo,
    /// A character device.
    Chardev,
    /// A block device.
    Blockdev,
}

/// A file made by [`Dir::create_temp`]: open, private, under a name nobody could guess.
#[derive(Debug)]
pub struct Temp {
    /// The open file.
    pub file: File,
    /// Its name in the directory.
    pub name: CString,
    /// Its (device, inode): [`Dir::open_temp`] opens it again only if the name still holds it.
    pub id: (u64, u64),
}

/// An open directory. Every entry below it is reached through it, one component at a time,
/// never through a symlink.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

/// Deepest a tree [`Dir::remove_tree`] removes goes, in directories below the one named.
pub const MAX_DEPTH: usize = 1024;

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn err(kind: io::ErrorKind, msg: impl Into<String>) -> io::Error {
    io::Error::new(kind, msg.into())
}

/// `name` as a C string, refused unless it is one entry's name.
fn entry(name: &[u8]) -> io::Result<CString> {
    check_name(name).map_err(|e| err(io::ErrorKind::InvalidInput, e.to_string()))?;
    CString::new(name).map_err(|_| err(io::ErrorKind::InvalidInput, "NUL in name"))
}

/// The status of the open descriptor `fd` (an `O_PATH` one too).
pub(crate) fn stat_fd(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value; fstat fills it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open; st is a valid out-pointer.
    check(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

fn random_name() -> CString {
    let n: u128 = rand::random();
    CString::new(format!(".ferry-{n:032x}")).expect("no NUL")
}

/// Makes an entry under a fresh random name with `make`; a name already taken (by chance,
/// or planted) is never reused: another is drawn.
fn fresh(make: impl Fn(&CStr) -> io::Result<libc::c_int>) -> io::Result<CString> {
    loop {
        let temp = random_name();
        match make(&temp) {
            Ok(_) => return Ok(temp),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Access and modification times, both `mtime_ns`, as utimensat and futimens take them.
fn times(mtime_ns: i64) -> [libc::timespec; 2] {
    let ts = libc::timespec {
        tv_sec: mtime_ns.div_euclid(1_000_000_000),
        tv_nsec: mtime_ns.rem_euclid(1_000_000_000),
    };
    [ts, ts]
}

/// Gives the open file or directory `fd` its metadata: owner first (a chown clears setuid
/// bits and `security.capability`), then xattrs, mode and times. A failed chown is not an
/// error: an unprivileged restore cannot give files away either.
pub fn set_meta(f: &impl AsRawFd, m: &Meta, owner: bool) -> io::Result<()> {
    set_meta_fd(f.as_raw_fd(), m, owner)
}

fn set_meta_fd(fd: RawFd, m: &Meta, owner: bool) -> io::Result<()> {
    if owner {
        // SAFETY: fd is open.
        unsafe { libc::fchown(fd, m.uid, m.gid) };
    }
    drop_inherited_acls(fd);
    for (k, v) in &m.xattrs {
        let Ok(k) = CString::new(k.as_slice()) else {
            continue;
        };
        // SAFETY: fd is open, k NUL-terminated, v a valid buffer of its length. Best effort:
        // the target's filesystem may not take every namespace.
        unsafe { libc::fsetxattr(fd, k.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    }
    // SAFETY: fd is open.
    check(unsafe { libc::fchmod(fd, m.mode & 0o7777) })?;
    let t = times(m.mtime_ns);
    // SAFETY: fd is open; t holds the two timespecs futimens reads.
    check(unsafe { libc::futimens(fd, t.as_ptr()) }).map(drop)
}

/// Removes the ACLs `fd` got from its directory's default ACL when it was made. Whoever owns
/// a directory in the target may give it a default ACL (`setfacl -d -m u:them:rwx`); what is
/// made in it inherits that, and the final chmod would open it to them (a root 0640 file
/// readable by them). The snapshot's own ACLs, if any, are set after this with its xattrs.
fn drop_inherited_acls(fd: RawFd) {
    for name in [c"system.posix_acl_access", c"system.posix_acl_default"] {
        // SAFETY: fd is open, name NUL-terminated. ENODATA (none), ENOTSUP (the filesystem
        // has no ACLs) and EACCES (not our file: then not inherited from us) all leave
        // nothing to do.
        unsafe { libc::fremovexattr(fd, name.as_ptr()) };
    }
}

/// Raises the soft limit on open descriptors to the hard one: a restore holds a directory
/// open for each directory it writes into.
pub fn raise_fd_limit() {
    // SAFETY: an all-zero rlimit is valid; getrlimit fills it.
    let mut l: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: l is a valid out-pointer; setrlimit reads it.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

impl Dir {
    fn openat(&self, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
        // SAFETY: self.fd is an open directory, name NUL-terminated.
        let fd = check(unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                0o600,
            )
        })?;
        // SAFETY: fd was just opened and is owned by nothing else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn open_dir_c(&self, name: &CStr) -> io::Result<Dir> {
        let fd = self.openat(name, libc::O_RDONLY | libc::O_DIRECTORY)?;
        Ok(Dir { fd })
    }

    /// Opens the directory at `path`, which the caller chose and so may hold symlinks,
    /// creating what is missing (mode 0700).
    pub fn create_root(path: &Path) -> io::Result<Dir> {
        Self::create_root_made(path).map(|(d, _)| d)
    }

    /// [`Dir::create_root`], and whether it made the directory. The last component is made
    /// and opened through its parent's descriptor, never through a link: one planted there
    /// after the path was seen missing is removed, not followed.
    pub fn create_root_made(path: &Path) -> io::Result<(Dir, bool)> {
        use std::os::unix::fs::DirBuilderExt;
        if path.exists() {
            return Ok((Self::open_root(path)?, false));
        }
        let mkdir_p = |p: &Path| {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(p)
        };
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            mkdir_p(path)?;
            return Ok((Self::open_root(path)?, true));
        };
        let parent = match parent.as_os_str().is_empty() {
            true => Path::new("."),
            false => parent,
        };
        if !parent.exists() {
            mkdir_p(parent)?;
        }
        Self::open_root(parent)?.make_dir(name.as_bytes(), false, false)
    }

    /// Opens the existing directory at `path`, which the caller chose.
    pub fn open_root(path: &Path) -> io::Result<Dir> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| err(io::ErrorKind::InvalidInput, "NUL in path"))?;
        // SAFETY: c is NUL-terminated; the descriptor is owned from here on.
        let fd = check(unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: fd was just opened and is owned by nothing else.
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The existing directory `name` in this one, not through a symlink.
    pub fn open_dir(&self, name: &[u8]) -> io::Result<Dir> {
        self.open_dir_c(&entry(name)?)
    }

    /// The existing directory at `rel` below this one, each component checked and none a
    /// symlink.
    pub fn open_path(&self, rel: &Path) -> io::Result<Dir> {
        let mut cur: Option<Dir> = None;
        for c in rel.components() {
            let Component::Normal(name) = c else {
                return Err(err(
                    io::ErrorKind::InvalidInput,
                    format!("{}: not a path beneath", rel.display()),
                ));
            };
            let next = cur.as_ref().unwrap_or(self).open_dir(name.as_bytes())?;
            cur = Some(next);
        }
        match cur {
            Some(d) => Ok(d),
            None => self.try_clone(),
        }
    }

    /// Another descriptor of this directory.
    pub fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir {
            fd: self.fd.try_clone()?,
        })
    }

    /// The directory `name` in this one, made (mode 0700) when missing. An existing
    /// directory is kept and, when `private`, made 0700 at once (and root's, when `owner`)
    /// so that nobody else can enter it before its final metadata is set. Anything else
    /// there, a symlink included, is unlinked first. Returns whether it was made.
    pub fn make_dir(&self, name: &[u8], private: bool, owner: bool) -> io::Result<(Dir, bool)> {
        let c = entry(name)?;
        for _ in 0..4 {
            // SAFETY: self.fd is open, c NUL-terminated.
            let rc = unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o700) };
            if rc == 0 {
                return Ok((self.open_dir_c(&c)?, true));
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(e);
            }
            match self.open_dir_c(&c) {
                Ok(d) => {
                    if private {
                        if owner {
                            // SAFETY: d.fd is open. Best effort, as every chown here.
                            unsafe { libc::fchown(d.fd.as_raw_fd(), 0, 0) };
                        }
                        // SAFETY: d.fd is open. Fails only for a directory not ours as a
                        // non-root user, which that user cannot protect anyway.
                        unsafe { libc::fchmod(d.fd.as_raw_fd(), 0o700) };
                    }
                    return Ok((d, false));
                }
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOTDIR) | Some(libc::ELOOP) | Some(libc::ENOENT)
                    ) =>
                {
                    self.unlink(&c)?;
                }
                Err(e) => return Err(e),
            }
        }
        Err(err(
            io::ErrorKind::Other,
            "the entry keeps changing under the restore",
        ))
    }

    fn unlink(&self, c: &CStr) -> io::Result<()> {
        // SAFETY: self.fd is open, c NUL-terminated; unlinkat never follows a link.
        let rc = unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOENT) => Ok(()),
            Some(libc::EISDIR) => {
                // SAFETY: as above; only an empty directory goes.
                check(unsafe {
                    libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR)
                })
                .map(drop)
            }
            _ => Err(e),
        }
    }

    /// Removes the entry `name` (a file, a link, or an empty directory) without following
    /// it; gone already is fine.
    pub fn remove(&self, name: &CStr) -> io::Result<()> {
        self.unlink(name)
    }

    /// Removes `name` in this directory when it is the empty directory `dir` itself (same
    /// device and inode, seen without following a link); whether it did. Only a directory
    /// goes (`AT_REMOVEDIR`): an entry swapped in after the check is a file or link left in
    /// place, or a directory whoever writes this one could remove anyway.
    pub fn remove_dir_if_same(&self, name: &[u8], dir: &Dir) -> io::Result<bool> {
        let c = entry(name)?;
        let me = dir.stat()?;
        match self.lstat(name)? {
            Some(st)
                if st.st_mode & libc::S_IFMT == libc::S_IFDIR
                    && (st.st_dev, st.st_ino) == (me.st_dev, me.st_ino) => {}
            _ => return Ok(false),
        }
        // SAFETY: self.fd is open, c NUL-terminated; AT_REMOVEDIR never follows a link.
        check(unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) })?;
        Ok(true)
    }

    /// A new file, created exclusive and mode 0600 under a random name: nobody else can
    /// open it, and no entry planted under a guessed name can stand in for it.
    pub fn create_temp(&self) -> io::Result<Temp> {
        loop {
            let name = random_name();
            match self.openat(&name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL) {
                Ok(fd) => {
                    let st = stat_fd(fd.as_raw_fd())?;
                    return Ok(Temp {
                        file: File::from(fd),
                        name,
                        id: (st.st_dev, st.st_ino),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Opens the file [`Dir::create_temp`] made again for writing, refused unless `name`
    /// still holds that very file.
    pub fn open_temp(&self, name: &CStr, id: (u64, u64)) -> io::Result<File> {
        // Checked before it is opened, not after: whatever replaced it (a FIFO, which an
        // open for writing would wait on for good; a device) is never opened.
        let (node, st) = self.node(name)?;
        if (st.st_dev, st.st_ino) != id {
            return Err(err(
                io::ErrorKind::Other,
                "the restore's temp file was replaced",
            ));
        }
        reopen(&node, libc::O_WRONLY)
    }

    /// The entry `name` itself as an `O_PATH` descriptor, and its status: it opens nothing
    /// (no device acts, no FIFO waits), and a symlink is the link, not what it points to.
    fn node(&self, name: &CStr) -> io::Result<(OwnedFd, libc::stat)> {
        let node = self.openat(name, libc::O_PATH)?;
        let st = stat_fd(node.as_raw_fd())?;
        Ok((node, st))
    }

    /// Gives the entry `from` the name `to`, replacing whatever `to` was (an empty directory
    /// included), never writing through it.
    pub fn rename(&self, from: &CStr, to: &[u8]) -> io::Result<()> {
        let to = entry(to)?;
        let fd = self.fd.as_raw_fd();
        // SAFETY: fd is open; both names NUL-terminated. rename replaces the name itself.
        let rc = unsafe { libc::renameat(fd, from.as_ptr(), fd, to.as_ptr()) };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if matches!(e.raw_os_error(), Some(libc::EISDIR) | Some(libc::ENOTEMPTY)) {
            // A directory in the way: it goes if it is empty.
            // SAFETY: as above.
            check(unsafe { libc::unlinkat(fd, to.as_ptr(), libc::AT_REMOVEDIR) }).map_err(
                |_| {
                    err(
                        io::ErrorKind::AlreadyExists,
                        "a directory that is not empty is in the way",
                    )
                },
            )?;
            // SAFETY: as above.
            return check(unsafe { libc::renameat(fd, from.as_ptr(), fd, to.as_ptr()) }).map(drop);
        }
        Err(e)
    }

    /// Finishes the temp file `name` (open as `file`): its metadata through the descriptor
    /// first, so that nobody sees it under its name before its mode is final, then the name
    /// `to`. A failed rename removes the temp file (the outer error). A file whose metadata
    /// could not be set still takes its name, and the inner error says why.
    pub fn finish(
        &self, file: &File, name: &CStr, to: &[u8], m: &Meta, owner: bool,
    ) -> io::Result<io::Result<()>> {
        let meta = set_meta_fd(file.as_raw_fd(), m, owner);
        if let Err(e) = self.rename(name, to) {
            let _ = self.unlink(name);
            return Err(e);
        }
        Ok(meta)
    }

    /// Replaces the file `name` with `data`: a private temp file, written, fsynced, given
    /// `mode` (and `owner`'s ids when given), renamed over whatever `name` was, and the
    /// directory fsynced. Nothing there is written through or followed.
    pub fn write_file(
        &self, name: &[u8], data: &[u8], mode: u32, owner: Option<(u32, u32)>,
    ) -> io::Result<()> {
        use std::io::Write;
        let mut t = self.create_temp()?;
        let done = (|| {
            t.file.write_all(data)?;
            if let Some((uid, gid)) = owner {
                // SAFETY: the file is open. Best effort: only root gives files away.
                unsafe { libc::fchown(t.file.as_raw_fd(), uid, gid) };
            }
            // SAFETY: the file is open.
            check(unsafe { libc::fchmod(t.file.as_raw_fd(), mode & 0o7777) })?;
            t.file.sync_all()?;
            self.rename(&t.name, name)?;
            // SAFETY: self.fd is an open directory.
            check(unsafe { libc::fsync(self.fd.as_raw_fd()) }).map(drop)
        })();
        if done.is_err() {
            let _ = self.unlink(&t.name);
        }
        done
    }

    /// The regular file `name`, open for reading; `None` when there is none. Anything else
    /// there (a symlink, a FIFO, a device) is an `InvalidData` error, never opened: a device
    /// acts on open (a watchdog arms, a tape rewinds), so the entry is checked through an
    /// `O_PATH` descriptor first and only a regular file is opened, through that very
    /// descriptor (see `regular::reopen`).
    pub fn open_file(&self, name: &[u8]) -> io::Result<Option<(File, libc::stat)>> {
        let c = entry(name)?;
        let (node, st) = match self.node(&c) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        regular(st.st_mode).map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => err(io::ErrorKind::InvalidData, "a symlink, not a file"),
            _ => e,
        })?;
        Ok(Some((
            reopen(&node, libc::O_RDONLY | libc::O_NONBLOCK)?,
            st,
        )))
    }

    /// The content of the regular file `name`; `None` when there is none. Anything else
    /// there (a symlink, a FIFO, a device) is an error, never opened.
    pub fn read_file(&self, name: &[u8], max: u64) -> io::Result<Option<Vec<u8>>> {
        use std::io::Read;
        let Some((file, st)) = self.open_file(name)? else {
            return Ok(None);
        };
        if st.st_size as u64 > max {
            return Err(err(
                io::ErrorKind::InvalidData,
                "larger than a file of its kind",
            ));
        }
        let mut out = Vec::with_capacity(st.st_size as usize);
        file.take(max).read_to_end(&mut out)?;
        Ok(Some(out))
    }

    /// Sets this directory's mode and, when given, its owner, through its descriptor.
    pub fn set_mode(&self, mode: u32, owner: Option<(u32, u32)>) -> io::Result<()> {
        let fd = self.fd.as_raw_fd();
        if let Some((uid, gid)) = owner {
            // SAFETY: fd is open. Best effort, as every chown here.
            unsafe { libc::fchown(fd, uid, gid) };
        }
        drop_inherited_acls(fd);
        // SAFETY: fd is open.
        check(unsafe { libc::fchmod(fd, mode & 0o7777) }).map(drop)
    }

    /// Refuses this directory unless this process's user owns it and nobody else may write
    /// to it: a place ferry keeps its own state in (a spool, a cache).
    pub fn check_private(&self, what: &Path) -> io::Result<()> {
        let st = stat_fd(self.fd.as_raw_fd())?;
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        if st.st_uid != me {
            return Err(err(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} is owned by uid {}, not by this user (uid {me}): refused",
                    what.display(),
                    st.st_uid
                ),
            ));
        }
        if st.st_mode & 0o022 != 0 {
            return Err(err(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} may be written by others (mode {:o}): refused",
                    what.display(),
                    st.st_mode & 0o7777
                ),
            ));
        }
        Ok(())
    }

    /// Sets this directory's own metadata through its descriptor.
    pub fn set_meta(&self, m: &Meta, owner: bool) -> io::Result<()> {
        set_meta_fd(self.fd.as_raw_fd(), m, owner)
    }

    /// Makes the symlink `name` -> `target` (made under a random name, given its owner and
    /// times, then renamed over whatever was there). The link is never followed.
    pub fn symlink(&self, target: &[u8], name: &[u8], m: &Meta, owner: bool) -> io::Result<()> {
        let t =
            CString::new(target).map_err(|_| err(io::ErrorKind::InvalidInput, "NUL in link"))?;
        let fd = self.fd.as_raw_fd();
        // SAFETY: fd is open; both strings NUL-terminated.
        let temp = fresh(|temp| check(unsafe { libc::symlinkat(t.as_ptr(), fd, temp.as_ptr()) }))?;
        let done = (|| {
            let flags = libc::AT_SYMLINK_NOFOLLOW;
            if owner {
                // SAFETY: as above; the link itself changes owner.
                unsafe { libc::fchownat(fd, temp.as_ptr(), m.uid, m.gid, flags) };
            }
            let ts = times(m.mtime_ns);
            // SAFETY: as above; ts holds the two timespecs utimensat reads.
            check(unsafe { libc::utimensat(fd, temp.as_ptr(), ts.as_ptr(), flags) })?;
            self.rename(&temp, name)
        })();
        if done.is_err() {
            let _ = self.unlink(&temp);
        }
        done
    }

    /// Makes the special file `name` with its metadata (made under a random name, mode 0600,
    /// set up through an `O_PATH` descriptor checked to be the node just made, then renamed).
    pub fn special(
        &self, name: &[u8], kind: Special, rdev: u64, m: &Meta, owner: bool,
    ) -> io::Result<()> {
        let fmt = match kind {
            Special::Fifo => libc::S_IFIFO,
            Special::Chardev => libc::S_IFCHR,
            Special::Blockdev => libc::S_IFBLK,
        };
        let fd = self.fd.as_raw_fd();
        let temp = fresh(|temp| {
            // SAFETY: fd is open, temp NUL-terminated; mknodat makes a node or fails.
            check(unsafe { libc::mknodat(fd, temp.as_ptr(), fmt | 0o600, rdev as libc::dev_t) })
        })?;
        let done = (|| {
            let node = self.openat(&temp, libc::O_PATH)?;
            let st = stat_fd(node.as_raw_fd())?;
            if st.st_mode & libc::S_IFMT != fmt {
                return Err(err(io::ErrorKind::Other, "the new node was replaced"));
            }
            let n = node.as_raw_fd();
            if owner {
                // SAFETY: n is open; AT_EMPTY_PATH acts on it, an O_PATH descriptor.
                unsafe { libc::fchownat(n, c"".as_ptr(), m.uid, m.gid, libc::AT_EMPTY_PATH) };
            }
            // chmod and utimens do not take an O_PATH descriptor; its /proc name resolves to
            // the node itself, never to whatever the directory entry holds by now.
            let proc = CString::new(format!("/proc/self/fd/{n}")).expect("no NUL");
            // SAFETY: proc is NUL-terminated.
            check(unsafe { libc::chmod(proc.as_ptr(), m.mode & 0o7777) })?;
            let ts = times(m.mtime_ns);
            // SAFETY: as above; ts holds two timespecs.
            check(unsafe { libc::utimensat(libc::AT_FDCWD, proc.as_ptr(), ts.as_ptr(), 0) })?;
            self.rename(&temp, name)
        })();
        if done.is_err() {
            let _ = self.unlink(&temp);
        }
        done
    }

    /// The status of this directory itself.
    pub fn stat(&self) -> io::Result<libc::stat> {
        // SAFETY: an all-zero stat is valid; fstat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: self.fd is open, st writable.
        check(unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) })?;
        Ok(st)
    }

    /// Removes everything in this directory, as [`Dir::remove_tree`] removes an entry's.
    pub fn empty(&self) -> io::Result<()> {
        for n in self.entries()? {
            self.remove_tree(&n)?;
        }
        Ok(())
    }

    /// The status of the entry `name` itself (a symlink is not followed); `None` when there
    /// is none.
    pub fn lstat(&self, name: &[u8]) -> io::Result<Option<libc::stat>> {
        let c = entry(name)?;
        // SAFETY: an all-zero stat is valid; fstatat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: self.fd is open, c NUL-terminated, st writable.
        let rc = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        match rc {
            0 => Ok(Some(st)),
            _ => match io::Error::last_os_error() {
                e if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
                e => Err(e),
            },
        }
    }

    /// The names in this directory (not `.` and `..`). Read through the descriptor's
    /// `/proc/self/fd` link, which names the open directory itself, not a path.
    pub fn entries(&self) -> io::Result<Vec<Vec<u8>>> {
        std::fs::read_dir(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))?
            .map(|e| e.map(|e| e.file_name().as_bytes().to_vec()))
            .collect()
    }

    /// Removes the entry `name` and, when it is a directory, everything in it: each
    /// directory entered by descriptor, never through a symlink (a link is removed, never
    /// what it points to). A directory swapped for a link midway fails to open: an error,
    /// nothing outside touched. The walk keeps its levels on the heap, one descriptor each,
    /// and refuses to go deeper than [`MAX_DEPTH`]: a tree planted a million levels deep
    /// costs an error, not the stack or every descriptor.
    pub fn remove_tree(&self, name: &[u8]) -> io::Result<()> {
        let c = entry(name)?;
        let Some(st) = self.lstat(name)? else {
            return Ok(());
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return self.unlink(&c);
        }
        // Each level: its directory, the names in it left to remove, and its own name.
        let first = self.open_dir_c(&c)?;
        let names = first.entries()?;
        let mut levels = vec![(first, names, c)];
        loop {
            let depth = levels.len();
            let Some((dir, names, _)) = levels.last_mut() else {
                return Ok(());
            };
            let Some(n) = names.pop() else {
                let (_, _, done) = levels.pop().expect("a level");
                // Emptied now: unlink takes it as the directory it is.
                levels.last().map_or(self, |l| &l.0).unlink(&done)?;
                continue;
            };
            let c = entry(&n)?;
            match dir.lstat(&n)? {
                None => {}
                Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
                    if depth >= MAX_DEPTH {
                        return Err(err(
                            io::ErrorKind::Other,
                            format!("more than {MAX_DEPTH} directories deep: left in place"),
                        ));
                    }
                    let sub = dir.open_dir_c(&c)?;
                    let names = sub.entries()?;
                    levels.push((sub, names, c));
                }
                Some(_) => dir.unlink(&c)?,
            }
        }
    }

    /// Makes `name` a hard link to the entry `from` of `dir` (never following a symlink
    /// there), replacing whatever `name` was.
    pub fn hard_link(&self, dir: &Dir, from: &[u8], name: &[u8]) -> io::Result<()> {
        let from = entry(from)?;
        let fd = self.fd.as_raw_fd();
        let temp = fresh(|temp| {
            // SAFETY: both descriptors open, both names NUL-terminated; flags 0: no follow.
            check(unsafe { libc::linkat(dir.fd.as_raw_fd(), from.as_ptr(), fd, temp.as_ptr(), 0) })
        })?;
        let done = self.rename(&temp, name);
        if done.is_err() {
            let _ = self.unlink(&temp);
        }
        done
    }
}

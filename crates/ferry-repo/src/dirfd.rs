//! Filesystem calls relative to the directory an entry lives in, held open. A restore makes
//! five calls per file (create, open, rename, owner, mode and times); by full path, the kernel
//! would walk every component of every one of them, which perf put at a tenth of a restore
//! of 100k small files.

use std::cell::RefCell;
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

thread_local! {
    /// The directory this thread used last, and in which round: a restore works through one
    /// directory's files before the next one's.
    static LAST: RefCell<Option<(u64, PathBuf, OwnedFd)>> = const { RefCell::new(None) };
}

/// Bumped by [`forget`]: descriptors opened in an earlier round are not reused.
static ROUND: AtomicU64 = AtomicU64::new(0);

/// Stops every thread from reusing the directories it holds open: between two restores a
/// directory may have been removed and made again under the same name.
pub(crate) fn forget() {
    ROUND.fetch_add(1, Ordering::Relaxed);
}

fn cstr(b: &[u8]) -> io::Result<CString> {
    CString::new(b).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Calls `f` with a descriptor of `path`'s directory and `path`'s last component.
fn at<R>(path: &Path, f: impl FnOnce(RawFd, &CString) -> io::Result<R>) -> io::Result<R> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let name = cstr(path.file_name().unwrap_or_default().as_bytes())?;
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        let round = ROUND.load(Ordering::Relaxed);
        if last
            .as_ref()
            .is_none_or(|(r, d, _)| *r != round || d != dir)
        {
            let c = cstr(dir.as_os_str().as_bytes())?;
            // SAFETY: valid NUL-terminated path; the descriptor is owned from here on.
            let fd = check(unsafe {
                libc::open(
                    c.as_ptr(),
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
            })?;
            // SAFETY: fd was just opened and is owned by nothing else.
            *last = Some((round, dir.to_path_buf(), unsafe {
                OwnedFd::from_raw_fd(fd)
            }));
        }
        let (_, _, fd) = last.as_ref().expect("set above");
        f(fd.as_raw_fd(), &name)
    })
}

fn open_at(path: &Path, flags: libc::c_int) -> io::Result<File> {
    at(path, |dir, name| {
        // SAFETY: dir is an open directory, name a valid NUL-terminated name.
        let fd =
            check(unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, 0o666) })?;
        // SAFETY: fd was just opened and is owned by nothing else.
        Ok(unsafe { File::from_raw_fd(fd) })
    })
}

/// Creates (or empties) the file at `path` for writing.
pub(crate) fn create(path: &Path) -> io::Result<File> {
    open_at(path, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC)
}

/// Opens the existing file at `path` for writing.
pub(crate) fn open_write(path: &Path) -> io::Result<File> {
    open_at(path, libc::O_WRONLY)
}

/// Renames `from` to `to`, both in the same directory.
pub(crate) fn rename_within(from: &Path, to: &Path) -> io::Result<()> {
    let to_name = cstr(to.file_name().unwrap_or_default().as_bytes())?;
    at(from, |dir, from_name| {
        // SAFETY: dir is an open directory; both names are valid and NUL-terminated.
        check(unsafe { libc::renameat(dir, from_name.as_ptr(), dir, to_name.as_ptr()) }).map(drop)
    })
}

/// Sets the owner of the entry at `path`, not following a symlink there; best effort, as
/// `chown` by an unprivileged restore would be. Before xattrs: a chown clears
/// `security.capability`.
pub(crate) fn set_owner(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    at(path, |dir, name| {
        // SAFETY: dir is an open directory, name valid and NUL-terminated.
        unsafe { libc::fchownat(dir, name.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) };
        Ok(())
    })
}

/// Sets the mode (unless `mode` is None: symlinks have none) and mtime of the entry at
/// `path`, not following a symlink there.
pub(crate) fn set_mode_and_mtime(path: &Path, mode: Option<u32>, mtime_ns: i64) -> io::Result<()> {
    at(path, |dir, name| {
        if let Some(mode) = mode {
            // SAFETY: dir is an open directory, name valid and NUL-terminated.
            check(unsafe { libc::fchmodat(dir, name.as_ptr(), mode, 0) })?;
        }
        let times = times(mtime_ns);
        // SAFETY: as above, with a two-element timespec array, as utimensat requires.
        check(unsafe {
            libc::utimensat(
                dir,
                name.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
        .map(drop)
    })
}

/// Access and modification times, both `mtime_ns`, as utimensat and futimens take them.
pub(crate) fn times(mtime_ns: i64) -> [libc::timespec; 2] {
    let ts = libc::timespec {
        tv_sec: mtime_ns.div_euclid(1_000_000_000),
        tv_nsec: mtime_ns.rem_euclid(1_000_000_000),
    };
    [ts, ts]
}

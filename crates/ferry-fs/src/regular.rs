//! Reading a file by path that someone else may swap: the one way ferry opens a file it was
//! told about (a listed entry of a backup, a WAL segment PostgreSQL names) when whoever owns
//! the directory may since have put something else under that name.

use std::ffi::CString;
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Opens `path` for reading if it is a regular file: never through a link (the last
/// component; a link is an `ELOOP` error), and never anything else, not even for a moment.
/// Opening is what acts on a device (a watchdog arms, a tape rewinds, a serial line raises
/// its modem lines) and what a FIFO's writer waits for, so the entry is first taken as an
/// `O_PATH` descriptor (which opens nothing), checked through it, and only a regular file is
/// opened, through that descriptor ([`reopen`]): what was checked is what is read. Anything
/// else is an `InvalidData` error.
pub fn open_regular(path: &Path) -> io::Result<(File, Metadata)> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    // SAFETY: c is NUL-terminated.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nothing else.
    let node = unsafe { OwnedFd::from_raw_fd(fd) };
    regular(crate::dir::stat_fd(node.as_raw_fd())?.st_mode)?;
    let f = reopen(&node, libc::O_RDONLY | libc::O_NONBLOCK)?;
    let m = f.metadata()?;
    Ok((f, m))
}

/// Refuses a `mode` that is not a regular file's, naming what it is: a symlink with
/// `ELOOP` (what `O_NOFOLLOW` said before), anything else with `InvalidData`.
pub(crate) fn regular(mode: libc::mode_t) -> io::Result<()> {
    let what = match mode & libc::S_IFMT {
        libc::S_IFREG => return Ok(()),
        libc::S_IFLNK => return Err(io::Error::from_raw_os_error(libc::ELOOP)),
        libc::S_IFDIR => "a directory",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFSOCK => "a socket",
        _ => "of an unknown kind",
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{what}, not a regular file: never opened"),
    ))
}

/// Opens the inode the `O_PATH` descriptor `node` holds again, with `flags`. Its
/// `/proc/self/fd` link resolves to that very inode, never to whatever the name holds by
/// now, so nothing can be swapped in between the check and the open: race-free. (Opening the
/// name again and comparing device and inode afterwards would be too late: a device swapped
/// in would already have been opened.) Needs /proc, as [`crate::Dir::entries`] does.
pub(crate) fn reopen(node: &OwnedFd, flags: libc::c_int) -> io::Result<File> {
    let proc = CString::new(format!("/proc/self/fd/{}", node.as_raw_fd())).expect("no NUL");
    // SAFETY: proc is NUL-terminated. No O_NOFOLLOW: the /proc link is what is followed.
    let fd = unsafe { libc::open(proc.as_ptr(), flags | libc::O_CLOEXEC | libc::O_NOCTTY) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENOENT) => {
                io::Error::other("cannot open through /proc/self/fd: is /proc mounted?")
            }
            _ => e,
        });
    }
    // SAFETY: fd was just opened and is owned by nothing else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_opens() {
        let d = std::env::temp_dir().join(format!("ferry-regular-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("f"), b"x").unwrap();
        std::os::unix::fs::symlink(d.join("f"), d.join("link")).unwrap();
        let fifo = std::ffi::CString::new(d.join("fifo").into_os_string().into_encoded_bytes());
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.unwrap().as_ptr(), 0o600) }, 0);
        assert_eq!(open_regular(&d.join("f")).unwrap().1.len(), 1);
        // A FIFO nobody writes to: refused at once, not waited on.
        let e = open_regular(&d.join("fifo")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert_eq!(
            open_regular(&d.join("link")).unwrap_err().raw_os_error(),
            Some(libc::ELOOP)
        );
        assert!(open_regular(&d).is_err(), "a directory");
        std::fs::remove_dir_all(d).unwrap();
    }
}

//! Reading a file by path that someone else may swap: the one way ferry opens a file it was
//! told about (a listed entry of a backup, a WAL segment PostgreSQL names) when whoever owns
//! the directory may since have put something else under that name.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens `path` for reading if it is a regular file: never through a link (the last
/// component; a link is an error), never blocking (a FIFO would block the reader for good
/// and a terminal would become its controlling one), and checked through the descriptor, so
/// that what was checked is what is read. Anything else is an `InvalidData` error.
pub fn open_regular(path: &Path) -> io::Result<(File, Metadata)> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    Ok((f, m))
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

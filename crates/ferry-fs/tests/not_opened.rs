//! Reads refuse what is not a regular file without opening it: opening is what acts on a
//! device (a watchdog arms, a tape rewinds) and what a FIFO's other end waits for. A FIFO
//! tells whether it was opened: a blocking open of its other end returns only once someone
//! opens this end.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use ferry_fs::Dir;

fn scratch(tag: &str) -> PathBuf {
    use std::hash::{BuildHasher, RandomState};
    let d = std::env::temp_dir().join(format!(
        "ferry-fs-{tag}-{}-{:x}",
        std::process::id(),
        RandomState::new().hash_one(0u8)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Runs `act` and says whether it opened the FIFO `fifo` for reading (`read`) or for writing.
/// A thread waits in a blocking open of the other end meanwhile; `act` must return within
/// 10 s, and the waiter is let go after.
fn opens<T: Send + 'static>(
    fifo: &Path, read: bool, act: impl FnOnce() -> T + Send + 'static,
) -> (bool, T) {
    let (tx, rx) = mpsc::channel();
    let p = fifo.to_path_buf();
    let waiter = std::thread::spawn(move || {
        let other = std::fs::OpenOptions::new().read(!read).write(read).open(&p);
        tx.send(()).unwrap();
        other.unwrap()
    });
    // Long enough for the waiter to be inside its open.
    std::thread::sleep(Duration::from_millis(200));
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || done_tx.send(act()).unwrap());
    let out = done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the call blocked on the FIFO");
    let opened = rx.recv_timeout(Duration::from_millis(500)).is_ok();
    if !opened {
        // Let the waiter go: open this end ourselves, without blocking (the waiter is there).
        std::fs::OpenOptions::new()
            .read(read)
            .write(!read)
            .custom_flags(libc::O_NONBLOCK)
            .open(fifo)
            .unwrap();
    }
    waiter.join().unwrap();
    (opened, out)
}

fn refused_unopened<T: std::fmt::Debug>(r: std::io::Result<T>) {
    let e = r.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
    assert!(e.to_string().contains("a FIFO, not a regular file"), "{e}");
}

#[test]
fn read_file_refuses_a_fifo_without_opening_it() {
    let d = scratch("fifo-read");
    mkfifo(&d.join("postgresql.auto.conf"));
    let dir = Dir::open_root(&d).unwrap();
    let (opened, r) = opens(&d.join("postgresql.auto.conf"), true, move || {
        dir.read_file(b"postgresql.auto.conf", 1 << 20)
    });
    assert!(!opened, "read_file opened the FIFO");
    refused_unopened(r);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn open_regular_refuses_a_fifo_without_opening_it() {
    let d = scratch("fifo-regular");
    let p = d.join("000000010000000000000001");
    mkfifo(&p);
    let q = p.clone();
    let (opened, r) = opens(&p, true, move || ferry_fs::open_regular(&q).map(|_| ()));
    assert!(!opened, "open_regular opened the FIFO");
    refused_unopened(r);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn open_temp_never_opens_a_fifo_put_in_its_place() {
    let d = scratch("fifo-temp");
    let dir = Dir::open_root(&d).unwrap();
    let t = dir.create_temp().unwrap();
    let name = d.join(std::ffi::OsStr::from_bytes(t.name.to_bytes()));
    mkfifo(&d.join("fifo"));
    std::fs::rename(d.join("fifo"), &name).unwrap();
    let (opened, r) = opens(&name, false, move || {
        dir.open_temp(&t.name, t.id).map(|_| ())
    });
    assert!(!opened, "open_temp opened the FIFO");
    assert!(r.is_err());
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_device_is_named_and_a_regular_file_still_reads() {
    let d = scratch("device");
    let dir = Dir::open_root(&d).unwrap();
    dir.write_file(b"f", b"content", 0o600, None).unwrap();
    assert_eq!(dir.read_file(b"f", 1 << 20).unwrap().unwrap(), b"content");
    let t = dir.create_temp().unwrap();
    assert!(dir.open_temp(&t.name, t.id).is_ok());
    let (f, m) = ferry_fs::open_regular(&d.join("f")).unwrap();
    assert_eq!((m.len(), f.metadata().unwrap().len()), (7, 7));
    // Only root makes devices: /dev/null's numbers, which nothing here opens anyway.
    let c = std::ffi::CString::new(d.join("null").as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) } == 0 {
        let e = dir.read_file(b"null", 1 << 20).unwrap_err();
        assert!(
            e.to_string()
                .contains("a character device, not a regular file"),
            "{e}"
        );
    }
    std::fs::remove_dir_all(d).unwrap();
}

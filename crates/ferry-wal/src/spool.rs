//! The spool: a local directory where the agents and the commands PostgreSQL runs meet.
//!
//! ```text
//! push.lock         held by the push agent for its life (flock: released by the kernel on kill -9)
//! fetch.lock        held by the prefetch agent
//! agent.log         both agents' stderr
//! out/NAME.ok       fsynced ack: NAME is in the archive (written only after the store confirmed)
//! out/NAME.error    why the agent failed on NAME; wal-push reports it and removes it
//! gaps/NAME         drop policy: NAME acked without archiving, not yet recorded in the archive
//! in/NAME           a prefetched, verified WAL file waiting for wal-fetch
//! in/.NAME.part     a prefetch in progress
//! in/want           the file wal-fetch asked for last: where prefetch looks ahead from
//! ```

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use ferry_transfer::{Error, Result};

/// An open spool directory.
#[derive(Debug, Clone)]
pub struct Spool {
    dir: PathBuf,
}

fn io(what: &Path, e: std::io::Error) -> Error {
    Error::io(format!("spool {}", what.display()), e)
}

/// Writes `data` to `path` so that it survives a crash whole or not at all: a temp file,
/// fsync, rename, fsync of the directory.
pub fn write_durable(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().expect("a file in a directory");
    let name = path.file_name().expect("a file name").to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    let res = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if res.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    res.map_err(|e| io(path, e))
}

/// Size, mtime (ns) and inode: what tells one file from another under the same name.
fn identity(m: &fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!(
        "{} {} {}",
        m.len(),
        m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        m.ino()
    )
}

impl Spool {
    /// Opens (creating) the spool at `dir`; a clear error when it cannot be used.
    pub fn open(dir: &Path) -> Result<Self> {
        // Private: made 0700, and refused when another user owns it or others may write to
        // it (they could plant acks, or links where the agents write).
        let root = ferry_fs::Dir::create_root(dir).map_err(|e| io(dir, e))?;
        root.check_private(dir).map_err(|e| io(dir, e))?;
        for sub in ["out", "in", "gaps"] {
            let d = dir.join(sub);
            let (sd, _) = root
                .make_dir(sub.as_bytes(), false, false)
                .map_err(|e| io(&d, e))?;
            sd.check_private(&d).map_err(|e| io(&d, e))?;
        }
        // Creating directories can succeed on a spool whose files cannot be written.
        let probe = dir
            .join("out")
            .join(format!(".probe{}", std::process::id()));
        File::create(&probe).map_err(|e| io(dir, e))?;
        let _ = fs::remove_file(&probe);
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// The spool's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of a file in the spool.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// Takes the lock `name` if nobody holds it; the lock lasts as long as the returned file.
    pub fn try_lock(&self, name: &str) -> Result<Option<File>> {
        let p = self.path(&format!("{name}.lock"));
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .map_err(|e| io(&p, e))?;
        match f.try_lock() {
            Ok(()) => Ok(Some(f)),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(io(&p, e)),
        }
    }

    /// True while some process holds lock `name`.
    pub fn locked(&self, name: &str) -> Result<bool> {
        Ok(self.try_lock(name)?.is_none())
    }

    /// Records that `name` is durably archived: its checksum and the identity of the file
    /// pushed (size, mtime, inode), which wal-push compares with the file it was handed.
    pub fn ack(&self, name: &str, hash_hex: &str, file: &fs::Metadata) -> Result<()> {
        let _ = fs::remove_file(self.path(&format!("out/{name}.error")));
        let body = format!("{hash_hex} {}", identity(file));
        write_durable(&self.path(&format!("out/{name}.ok")), body.as_bytes())
    }

    /// Records why the agent failed on `name`.
    pub fn fail(&self, name: &str, msg: &str) -> Result<()> {
        let p = self.path(&format!("out/{name}.error"));
        let tmp = self.path(&format!("out/.{name}.error.tmp"));
        fs::write(&tmp, msg)
            .and_then(|_| fs::rename(&tmp, &p))
            .map_err(|e| io(&p, e))
    }

    /// The archive (its URL) the files in `sub` (`out`: acks; `in`: prefetched WAL) came
    /// from, as the agent that wrote them claimed it.
    pub fn source(&self, sub: &str) -> Option<String> {
        fs::read_to_string(self.path(&format!("{sub}/source"))).ok()
    }

    /// Makes the files in `sub` those of the archive at `source`: the ones `theirs` names,
    /// of another archive (an agent started before `archive_command` or the repository
    /// changed), are removed, never taken as this archive's.
    pub fn claim(&self, sub: &str, source: &str, theirs: impl Fn(&str) -> bool) -> Result<()> {
        if self.source(sub).as_deref() == Some(source) {
            return Ok(());
        }
        for n in self.names(sub)?.into_iter().filter(|n| theirs(n)) {
            let p = self.path(&format!("{sub}/{n}"));
            fs::remove_file(&p).map_err(|e| io(&p, e))?;
        }
        write_durable(&self.path(&format!("{sub}/source")), source.as_bytes())
    }

    /// True for the name of a verdict file in `out/`: an ack or an error.
    pub fn is_verdict(file: &str) -> bool {
        file.ends_with(".ok") || file.ends_with(".error")
    }

    /// True when `name` has an ack.
    pub fn acked(&self, name: &str) -> bool {
        self.path(&format!("out/{name}.ok")).exists()
    }

    /// True when the agent failed on `name` and wal-push has not collected the error yet.
    pub fn failed(&self, name: &str) -> bool {
        self.path(&format!("out/{name}.error")).exists()
    }

    /// The agent's verdict on `name`, if any: `Ok` when the file described by `file` is
    /// archived, the error otherwise (which is removed, so that the next attempt tries again).
    /// An ack for another file of the same name (a stale spool) is removed and ignored.
    pub fn verdict(
        &self, name: &str, file: &fs::Metadata,
    ) -> Option<std::result::Result<(), String>> {
        let ok = self.path(&format!("out/{name}.ok"));
        if let Ok(body) = fs::read_to_string(&ok) {
            if body.split_once(' ').map(|(_, id)| id) == Some(identity(file).as_str()) {
                return Some(Ok(()));
            }
            let _ = fs::remove_file(&ok);
            return None;
        }
        let p = self.path(&format!("out/{name}.error"));
        let msg = fs::read_to_string(&p).ok()?;
        let _ = fs::remove_file(&p);
        Some(Err(msg))
    }

    /// Names of the files in `sub` (not hidden ones), sorted.
    pub fn names(&self, sub: &str) -> Result<Vec<String>> {
        let d = self.path(sub);
        let mut out: Vec<String> = fs::read_dir(&d)
            .map_err(|e| io(&d, e))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        out.sort();
        Ok(out)
    }
}

//! A directory as a store: temp name in the same directory, fsync, rename, fsync the directory.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bytes::Bytes;

use crate::{BlockId, DigestKind, Error, Limits, Meta, ObjectInfo, Result, Store, Upload};

/// Marks ferry's temp files so listings skip them and a later run can clean them up.
const TMP_MARK: &str = ".ferry-tmp-";

/// A store rooted at a local directory. Keys are `/`-separated paths below the root.
#[derive(Debug, Clone)]
pub struct LocalStore {
    root: PathBuf,
    /// Files 0600 and directories 0700, whatever the umask: a repository's key files can be
    /// attacked offline by whoever reads them.
    private: bool,
}

impl LocalStore {
    /// A store rooted at `root` (which need not exist until the first write); files and
    /// directories are created as the umask says, as `cp` users expect.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            private: false,
        }
    }

    /// A store whose files are created 0600 and directories 0700: for repositories.
    pub fn private(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            private: true,
        }
    }

    /// A new file at `tmp` (never an existing one, never through a link), in this store's mode.
    fn create(&self, tmp: &Path) -> std::io::Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(if self.private { 0o600 } else { 0o666 })
            .open(tmp)
    }

    /// Creates `dir` and its missing ancestors; returns the topmost one it had to create
    /// below the root, which [`unmake`] removes again when what needed it is given up.
    fn make_dirs(&self, dir: &Path) -> Result<Option<PathBuf>> {
        use std::os::unix::fs::DirBuilderExt;
        let top = first_missing(&self.root, dir);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(if self.private { 0o700 } else { 0o777 })
            .create(dir)
            .map_err(|e| Error::io(dir.display(), e))?;
        Ok(top)
    }

    /// A new temp file for the object at `dst`, with the topmost directory made for it. A
    /// directory another write gave up removes between being made and the file's creation
    /// (it was empty) is made again.
    fn create_for(&self, dst: &Path) -> Result<(PathBuf, File, Option<PathBuf>)> {
        let mut tries = 0;
        loop {
            let made = prepare_parent(self, dst)?;
            let tmp = Self::temp_for(dst);
            match self.create(&tmp) {
                Ok(f) => return Ok((tmp, f, made)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 3 => tries += 1,
                Err(e) => {
                    unmake(tmp.parent(), made.as_deref());
                    return Err(Error::io(tmp.display(), e));
                }
            }
        }
    }

    fn path(&self, key: &str) -> PathBuf {
        if key.is_empty() {
            self.root.clone()
        } else {
            self.root.join(key)
        }
    }

    fn temp_for(path: &Path) -> PathBuf {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        let tag: u64 = rand::random();
        path.with_file_name(format!(".{name}{TMP_MARK}{tag:016x}"))
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Permanent(format!("local I/O task failed: {e}")))?
}

/// Makes the directory `path` goes in; the topmost directory made, if any.
fn prepare_parent(store: &LocalStore, path: &Path) -> Result<Option<PathBuf>> {
    if path.is_dir() {
        return Err(Error::AlreadyExists(format!(
            "{} is a directory",
            path.display()
        )));
    }
    match path.parent() {
        Some(parent) => store.make_dirs(parent),
        None => Ok(None),
    }
}

/// The topmost of `dir` and its ancestors below `root` that does not exist: what making
/// `dir` creates. Never `root` itself nor anything above it.
fn first_missing(root: &Path, dir: &Path) -> Option<PathBuf> {
    let mut top = None;
    let mut at = dir;
    while at != root && at.starts_with(root) {
        match fs::symlink_metadata(at) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => top = Some(at.to_path_buf()),
            _ => break,
        }
        match at.parent() {
            Some(p) => at = p,
            None => break,
        }
    }
    top
}

/// Removes `dir` and its ancestors up to `top` (made for a write now given up), each only
/// while empty: a directory another write has put anything in stays, and so do all above
/// it. A key's directories are not objects; left behind, a tenant's cut-off writes to deep
/// keys would pile up empty directories no quota counts.
fn unmake(dir: Option<&Path>, top: Option<&Path>) {
    let (Some(mut at), Some(top)) = (dir, top) else {
        return;
    };
    if !at.starts_with(top) {
        return;
    }
    // remove_dir never follows a link (a link in a directory's place fails with ENOTDIR).
    while fs::remove_dir(at).is_ok() && at != top {
        match at.parent() {
            Some(p) => at = p,
            None => return,
        }
    }
}

/// Removes a write's temp file and the directories made for it (see [`unmake`]).
fn give_up(tmp: &Path, made: Option<&Path>) -> std::io::Result<()> {
    let gone = match fs::remove_file(tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    };
    unmake(tmp.parent(), made);
    gone
}

/// A local upload's id: its temp file's path and, after a NUL (no path holds one), the
/// topmost directory its start made, if any.
fn upload_id(tmp: &Path, made: Option<&Path>) -> String {
    let tmp = tmp.to_string_lossy();
    match made {
        Some(m) => format!("{tmp}\0{}", m.to_string_lossy()),
        None => tmp.into_owned(),
    }
}

/// The temp file and the directory made, from [`upload_id`].
fn parse_id(id: &str) -> (PathBuf, Option<PathBuf>) {
    match id.split_once('\0') {
        Some((tmp, made)) => (PathBuf::from(tmp), Some(PathBuf::from(made))),
        None => (PathBuf::from(id), None),
    }
}

/// fsync the file, rename it into place, fsync the directory so the rename survives a crash.
/// On failure the caller removes the temp file ([`give_up`]).
fn publish(tmp: &Path, dst: &Path) -> Result<()> {
    File::open(tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(tmp.display(), e))?;
    if dst.is_dir() {
        // The temp file goes with the caller's give_up, as on every failure here.
        return Err(Error::AlreadyExists(format!(
            "{} is a directory",
            dst.display()
        )));
    }
    fs::rename(tmp, dst).map_err(|e| Error::io(dst.display(), e))?;
    let dir = dst
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir.display(), e))
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<ObjectInfo>) -> Result<()> {
    let entries = fs::read_dir(dir).map_err(|e| Error::io(dir.display(), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir.display(), e))?;
        let name = entry.file_name();
        if name.to_string_lossy().contains(TMP_MARK) {
            continue;
        }
        let path = entry.path();
        let meta = fs::metadata(&path).map_err(|e| Error::io(path.display(), e))?;
        if meta.is_dir() {
            walk(root, &path, out)?;
        } else if meta.is_file() {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            out.push(ObjectInfo {
                checksum: None,
                key: rel.to_string_lossy().into_owned(),
                size: meta.len(),
                ..Default::default()
            });
        }
    }
    Ok(())
}

/// Removes the temp files below `dir` last modified before `cutoff`; how many. Only regular
/// files by their own metadata: a link named like a temp file is not followed nor removed,
/// nor a directory walked through a link.
fn sweep(dir: &Path, cutoff: std::time::SystemTime) -> Result<usize> {
    let mut gone = 0;
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(Error::io(dir.display(), e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir.display(), e))?;
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            // One directory that cannot be read does not keep the others from the sweep.
            gone += sweep(&path, cutoff).unwrap_or(0);
        } else if meta.is_file()
            && entry.file_name().to_string_lossy().contains(TMP_MARK)
            && meta.modified().is_ok_and(|m| m < cutoff)
            && fs::remove_file(&path).is_ok()
        {
            gone += 1;
        }
    }
    Ok(gone)
}

#[async_trait]
impl Store for LocalStore {
    fn url(&self) -> String {
        self.root.display().to_string()
    }

    fn is_local(&self) -> bool {
        true
    }

    fn limits(&self) -> Limits {
        Limits::UNBOUNDED
    }

    fn digest(&self, _info: &ObjectInfo) -> Option<String> {
        None
    }

    fn digest_kind(&self) -> Option<DigestKind> {
        None
    }

    async fn put(&self, key: &str, data: Bytes, _meta: &Meta) -> Result<()> {
        let (dst, me) = (self.path(key), self.clone());
        blocking(move || {
            let (tmp, mut f, made) = me.create_for(&dst)?;
            if let Err(e) = f.write_all(&data) {
                drop(f);
                let _ = give_up(&tmp, made.as_deref());
                return Err(Error::io(tmp.display(), e));
            }
            drop(f);
            publish(&tmp, &dst).inspect_err(|_| {
                let _ = give_up(&tmp, made.as_deref());
            })
        })
        .await
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let path = self.path(key);
        blocking(move || {
            let f = File::open(&path).map_err(|e| Error::io(path.display(), e))?;
            let mut buf = crate::buffer::take((range.end - range.start) as usize);
            f.read_exact_at(&mut buf, range.start)
                .map_err(|e| Error::io(path.display(), e))?;
            Ok(buf.freeze())
        })
        .await
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        let path = self.path(key);
        let key = key.to_string();
        blocking(move || {
            let io = |e| Error::io(path.display(), e);
            let f = File::open(&path).map_err(io)?;
            let size = f.metadata().map_err(io)?.len();
            crate::too_long(&key, size)?;
            // Read past the size stat gave, in case the file grows meanwhile, but not far.
            let mut buf = Vec::with_capacity(size as usize);
            f.take(crate::bounded::MAX_GET + 1)
                .read_to_end(&mut buf)
                .map_err(io)?;
            crate::too_long(&key, buf.len() as u64)?;
            Ok(Bytes::from(buf))
        })
        .await
    }

    async fn head(&self, key: &str) -> Result<ObjectInfo> {
        let (path, key) = (self.path(key), key.to_string());
        // Off the async workers, as every other call here: a stat can wait on a busy disk.
        blocking(move || {
            let meta = fs::metadata(&path).map_err(|e| Error::io(path.display(), e))?;
            if !meta.is_file() {
                return Err(Error::Invalid(format!(
                    "{} is not a regular file",
                    path.display()
                )));
            }
            Ok(ObjectInfo {
                checksum: None,
                key,
                size: meta.len(),
                ..Default::default()
            })
        })
        .await
    }

    async fn open(&self, key: &str) -> Result<Option<crate::Opened>> {
        let path = self.path(key);
        blocking(move || {
            let io = |e| Error::io(path.display(), e);
            let f = File::open(&path).map_err(io)?;
            let meta = f.metadata().map_err(io)?;
            if !meta.is_file() {
                return Err(Error::Invalid(format!(
                    "{} is not a regular file",
                    path.display()
                )));
            }
            let name = path.display().to_string();
            Ok(Some(crate::Opened::new(f, meta.len(), &name)))
        })
        .await
    }

    async fn sweep_temp(&self, prefix: &str, idle: std::time::Duration) -> Result<usize> {
        let dir = self.path(prefix);
        let cutoff = std::time::SystemTime::now() - idle;
        blocking(move || sweep(&dir, cutoff)).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let root = self.root.clone();
        let start = self.path(prefix);
        blocking(move || {
            let mut out = Vec::new();
            match fs::metadata(&start) {
                Ok(m) if m.is_dir() => walk(&root, &start, &mut out)?,
                Ok(m) => out.push(ObjectInfo {
                    checksum: None,
                    key: start
                        .strip_prefix(&root)
                        .unwrap_or(&start)
                        .to_string_lossy()
                        .into(),
                    size: m.len(),
                    ..Default::default()
                }),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(start.display(), e)),
            }
            out.sort_by(|a, b| a.key.cmp(&b.key));
            Ok(out)
        })
        .await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let (path, key) = (self.path(key), key.to_string());
        blocking(move || match fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(key, e)),
            _ => Ok(()),
        })
        .await
    }

    async fn create_root(&self) -> Result<()> {
        let me = self.clone();
        blocking(move || me.make_dirs(&me.root).map(drop)).await
    }

    async fn start_upload(&self, key: &str, _meta: &Meta) -> Result<Upload> {
        let (dst, me) = (self.path(key), self.clone());
        let key = key.to_string();
        blocking(move || {
            let (tmp, _, made) = me.create_for(&dst)?;
            Ok(Upload::new(key, upload_id(&tmp, made.as_deref())))
        })
        .await
    }

    async fn put_block(
        &self, up: &Upload, idx: usize, offset: u64, data: Bytes,
    ) -> Result<BlockId> {
        let (tmp, _) = parse_id(&up.id);
        blocking(move || {
            let f = OpenOptions::new()
                .write(true)
                .open(&tmp)
                .map_err(|e| Error::io(tmp.display(), e))?;
            f.write_all_at(&data, offset)
                .map_err(|e| Error::io(tmp.display(), e))?;
            Ok(BlockId(idx.to_string()))
        })
        .await
    }

    async fn complete_upload(
        &self, up: &Upload, _blocks: Vec<BlockId>, _meta: &Meta,
    ) -> Result<Option<String>> {
        let ((tmp, made), dst) = (parse_id(&up.id), self.path(&up.key));
        // The temp file goes on failure here, not in a later abort that a caller cancelled
        // meanwhile would never send.
        blocking(move || {
            publish(&tmp, &dst).inspect_err(|_| {
                let _ = give_up(&tmp, made.as_deref());
            })
        })
        .await?;
        Ok(None)
    }

    async fn abort_upload(&self, up: &Upload) -> Result<()> {
        let (tmp, made) = parse_id(&up.id);
        blocking(move || give_up(&tmp, made.as_deref()).map_err(|e| Error::io(tmp.display(), e)))
            .await
    }
}

//! What a backup takes and how it cuts files: the choices a layer above (PostgreSQL base
//! backups, say) makes per path, without the archiver knowing why.

use std::path::Path;

/// How a file's content is cut into blobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunking {
    /// Content-defined chunks (FastCDC, sizes from the repository config): finds shared
    /// content wherever it moved to.
    ContentDefined,
    /// Blocks of this many bytes from offset 0: for files changed in place in aligned pages,
    /// where a changed page should cost one small block, not a 1 MiB chunk.
    Fixed(u32),
}

/// Per-path choices of one backup. Paths are absolute, as the archiver walks them.
pub trait Policy: Send + Sync {
    /// Whether `path` (and, for a directory, what is under it) is backed up.
    fn include(&self, _path: &Path) -> bool {
        true
    }
    /// How the file at `path` is cut.
    fn chunking(&self, _path: &Path) -> Chunking {
        Chunking::ContentDefined
    }
    /// Whether an entry that disappears between listing and reading is an error; a running
    /// database drops and renames files all the time, and its WAL covers them.
    fn vanished_is_error(&self) -> bool {
        true
    }
}

/// Everything, content-defined: `ferry backup`.
pub struct Everything;

impl Policy for Everything {}

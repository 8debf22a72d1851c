//! What a backup takes and how it cuts files: the choices a layer above (PostgreSQL base
//! backups, say) makes per path, without the archiver knowing why.

use std::path::Path;

use crate::tree::Node;

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

/// What a backup does with one entry it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// Backed up, and for a directory what is under it.
    Take,
    /// Left out, and for a directory what is under it; counted as excluded.
    Skip,
    /// A directory kept as an empty one: a mount point under `--one-file-system`, so that
    /// a restore has a place to mount on.
    Empty,
    /// A symlink to a directory, backed up as that directory (PostgreSQL's `pg_tblspc`
    /// links to tablespaces); anything else there is taken as it is.
    Follow,
}

/// Per-path choices of one backup. Paths are absolute, as the archiver walks them.
pub trait Policy: Send + Sync {
    /// What happens to the entry at `path`, whose metadata is `node`.
    fn pick(&self, _path: &Path, _node: &Node) -> Pick {
        Pick::Take
    }
    /// How the file at `path` is cut.
    fn chunking(&self, _path: &Path) -> Chunking {
        Chunking::ContentDefined
    }
    /// Whether the entry at `path` is saved after every other entry of its directory (one
    /// such entry after another). A file whose directory is also `last` in its own, and so on
    /// up to the root, is read after everything else: PostgreSQL's `global/pg_control`, whose
    /// minimum recovery point must cover every page copied from a standby.
    fn last(&self, _path: &Path) -> bool {
        false
    }
    /// Sees each block of a file cut in [`Chunking::Fixed`] blocks as it is read, at its
    /// offset, before it is stored: for checks of the content (PostgreSQL's page checksums).
    /// Blocks of one file may come from several threads, in any order.
    fn inspect(&self, _path: &Path, _offset: u64, _block: &[u8]) {}
    /// Whether an entry that disappears between listing and reading is an error; a running
    /// database drops and renames files all the time, and its WAL covers them.
    fn vanished_is_error(&self) -> bool {
        true
    }
}

/// Everything, content-defined: `ferry backup`.
pub struct Everything;

impl Policy for Everything {}

//! ferry's backup repository.
//!
//! Files are cut into content-defined chunks (FastCDC), each named by a keyed BLAKE3 of its
//! plaintext, compressed with zstd where that pays, encrypted (XChaCha20-Poly1305) and gathered
//! into packs of tens of MiB that the transfer engine uploads in its bulk class. Index files
//! map blobs to packs; snapshots point at trees of file metadata. The format is written down in
//! `docs/format.md`.
#![warn(missing_docs)]

pub mod archiver;
pub mod backup;
pub mod backup_lock;
pub mod blob;
pub(crate) mod blocks;
pub mod browse;
pub mod cache;
pub mod checker;
mod chunker;
pub mod copy;
pub mod crypto;
pub mod exclude;
pub mod forget;
pub mod id;
pub mod index;
mod kdf_memory;
pub mod limits;
pub mod lock;
pub mod pack;
pub mod pattern;
pub mod policy;
pub mod prune;
pub mod repair;
pub mod repo;
pub mod restorer;
pub mod snapshot;
pub mod stats;
pub mod tagging;
pub mod tree;
pub mod walk;

pub use blob::{load_blob, load_tree};
pub use id::Id;
pub use repo::Repo;
pub use snapshot::Snapshot;

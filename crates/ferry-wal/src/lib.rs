//! ferry's PostgreSQL WAL archive.
//!
//! `archive_command = 'ferry wal-push %p'` and `restore_command = 'ferry wal-fetch %f %p'`
//! land here. One object per WAL file, compressed, checksummed and, given a [`WalKey`]
//! derived from the repository's key, encrypted ([`envelope`]), in an [`Archive`] that knows
//! which cluster it belongs to. Pushes go through the transfer engine's
//! urgent class, either one at a time ([`push::push_file`]) or through the [`agent`] that
//! pushes ahead of PostgreSQL and acks in the [`spool`]. Fetches can be served from the
//! spool by the prefetch agent ([`fetch`]). The layout is written down in `docs/wal.md`.
#![warn(missing_docs)]

pub mod agent;
pub mod archive;
pub mod audit;
pub mod envelope;
pub mod fetch;
pub mod name;
pub mod page;
pub mod push;
pub mod spawn;
pub mod spool;
pub mod status;

pub use archive::{Archive, Cluster, Gap, Pushed};
pub use envelope::WalKey;
pub use name::{Kind, WalName};
pub use spool::Spool;

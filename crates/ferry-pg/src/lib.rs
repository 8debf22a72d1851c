//! PostgreSQL base backups into a ferry repository and point-in-time restores from them.
//!
//! A base backup is a repository snapshot of the data directory ([`backup`]) whose relation
//! files are cut into page-aligned blocks ([`layout`]), carrying a [`record::PgBackup`]: the
//! backup label and the WAL range it needs. The WAL itself lives in the same repository's WAL
//! archive (ferry-wal), which [`restore`], [`expire`] and [`verify`] read to know what a
//! backup can reach. The design is written down in `docs/pg.md`.
#![warn(missing_docs)]

pub mod backup;
pub mod check;
pub mod checksum;
pub mod choose;
pub mod conn;
pub mod expire;
pub mod home;
pub mod info;
pub mod layout;
pub mod libpq;
pub mod lsn;
pub mod passfile;
pub mod record;
pub mod restore;
pub mod tablespace;
pub mod target;
pub mod tls;
pub mod verify;
pub mod walaccess;
pub mod walrecord;
pub mod walview;

pub use lsn::Lsn;
pub use record::PgBackup;
pub use target::Target;

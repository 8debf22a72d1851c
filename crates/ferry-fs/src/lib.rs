//! The one way ferry writes into a place it was asked to write: a restore target, a
//! PostgreSQL data directory, the file PostgreSQL asked a WAL segment for.
//!
//! Everything below the place is resolved beneath an open directory descriptor, one checked
//! component at a time, never through a symlink: a name from a snapshot, or an entry a local
//! user planted in the target, cannot send a write elsewhere. Files are created exclusive
//! under unpredictable names, mode 0600, and get their owner, mode and times through their
//! descriptor before they take their name. An entry in the way is unlinked and re-created,
//! never written through. The threat model is docs/security.md.

#![warn(missing_docs)]

mod dir;
mod name;
mod regular;

pub use dir::{raise_fd_limit, set_meta, Dir, Meta, Special, Temp, MAX_DEPTH};
pub use name::{check_name, NameError};
pub use regular::open_regular;

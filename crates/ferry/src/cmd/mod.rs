//! One module per command.

pub mod backup;
pub mod browse;
pub mod copy;
pub mod cp;
pub mod key;
pub mod ls;
pub mod maint;
pub mod manage;
pub mod mount;
pub mod pg;
pub mod pg_check;
pub mod pg_restore;
pub mod repair;
pub mod repo;
pub mod serve;
pub mod wal;

/// A non-zero exit that is not an error in the usual sense.
#[derive(Debug)]
pub enum Exit {
    /// A run that finished but left things out: exit status 3, as restic does.
    Incomplete(String),
    /// A WAL file PostgreSQL probes for (the next timeline's history, the segment past the
    /// archive's end) that the archive lacks: exit 1, said without "error", since every
    /// recovery logs a few.
    Miss(String),
    /// A WAL file PostgreSQL needs that could not be fetched for another reason (the store
    /// unreachable, the object damaged or forged), outside a standby: exit 255, which
    /// PostgreSQL takes as fatal. Any status up to 125 reads as "not in the archive", and a
    /// recovery to the archive's end would then end early, here, and promote.
    Abort(String),
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Incomplete(m) | Exit::Miss(m) | Exit::Abort(m) => f.write_str(m),
        }
    }
}
impl std::error::Error for Exit {}

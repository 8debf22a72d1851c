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
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Incomplete(m) | Exit::Miss(m) => f.write_str(m),
        }
    }
}
impl std::error::Error for Exit {}

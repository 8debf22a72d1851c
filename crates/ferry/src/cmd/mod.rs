//! One module per command.

pub mod backup;
pub mod cp;
pub mod ls;
pub mod maint;
pub mod pg;
pub mod repo;
pub mod wal;

/// An outcome that exits 1 but is no error: a WAL file PostgreSQL probes for (the next
/// timeline's history, the segment past the archive's end) and the archive lacks. Said
/// without "error", since every recovery logs a few.
#[derive(Debug)]
pub struct Miss(pub String);

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Miss {}

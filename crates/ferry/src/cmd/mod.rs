//! One module per command.

pub mod backup;
pub mod cp;
pub mod ls;
pub mod maint;
pub mod pg;
pub mod repo;
pub mod wal;

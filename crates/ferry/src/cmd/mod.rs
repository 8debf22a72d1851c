//! One module per command.

pub mod cp;
pub mod ls;
pub mod wal;

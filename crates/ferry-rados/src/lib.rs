//! `rados://pool/name`: ferry's store on a Ceph cluster, through librados.
//!
//! Objects are striped over RADOS objects in libradosstriper's layout, so `rados --striper`
//! reads what ferry writes and the other way round, but ferry drives librados itself: many
//! aio reads and writes in flight, bounded, and a striped object appears only when whole.
#![warn(missing_docs)]

mod aio;
mod cluster;
mod ffi;
mod io;
pub mod layout;
mod store;

pub use cluster::Config;
pub use layout::Layout;
pub use store::RadosStore;

//! `rados://pool/name`: ferry's store on a Ceph cluster, through librados.
//!
//! Objects are striped over RADOS objects in libradosstriper's layout, so `rados --striper`
//! reads what ferry writes and the other way round, but ferry drives librados itself: many
//! aio reads and writes in flight, bounded, and a striped object appears only when whole.
#![warn(missing_docs)]

#[cfg(librados)]
mod aio;
#[cfg(librados)]
mod cluster;
#[cfg(librados)]
mod ffi;
#[cfg(librados)]
mod io;
pub mod layout;
#[cfg(librados)]
mod store;

use std::sync::Arc;

#[cfg(librados)]
pub use cluster::Config;
pub use layout::Layout;
#[cfg(librados)]
pub use store::RadosStore;

/// A store on `pool`, configured from the environment (`CEPH_CONF`, `CEPH_ARGS`,
/// `FERRY_RADOS_*`); it connects on first use.
#[cfg(librados)]
pub fn open(pool: &str) -> ferry_store::Result<Arc<dyn ferry_store::Store>> {
    Ok(Arc::new(RadosStore::new(pool)?))
}

/// Without librados at build time there is nothing to connect with.
#[cfg(not(librados))]
pub fn open(_pool: &str) -> ferry_store::Result<Arc<dyn ferry_store::Store>> {
    Err(ferry_store::Error::Invalid(
        "this ferry was built where librados was not installed (install librados-dev, rebuild)"
            .into(),
    ))
}

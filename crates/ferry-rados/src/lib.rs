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

use std::path::PathBuf;
use std::sync::Arc;

pub use layout::Layout;
pub use store::RadosStore;

/// Where the cluster is and how long an operation may wait.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// `ceph.conf`; unset: librados' own search (`CEPH_CONF`, /etc/ceph/ceph.conf, ...).
    pub conf: Option<PathBuf>,
    /// Seconds an OSD or monitor operation may wait before it fails with ETIMEDOUT; unset:
    /// 60. Without a bound librados waits forever for a stopped OSD, and a backup would
    /// hang instead of failing.
    pub op_timeout: Option<u64>,
    /// Asynchronous operations in flight at most (0: the default, 32).
    pub aio: usize,
}

/// How to reach the cluster and how to lay objects out: the program's settings (flags,
/// its environment, its config file) resolved by the caller; this crate reads no variable
/// of its own (librados still reads `CEPH_ARGS`, as every Ceph tool does).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The cluster and its timeouts.
    pub cluster: Config,
    /// Stripe unit; unset: the default, or the object size when that is smaller.
    pub stripe_unit: Option<u64>,
    /// Stripe count; unset: the default.
    pub stripe_count: Option<u64>,
    /// RADOS object size; unset: follows the stripe unit.
    pub object_size: Option<u64>,
}

/// A store on `pool` with `opts`; it connects on first use.
pub fn open(pool: &str, opts: &Options) -> ferry_store::Result<Arc<dyn ferry_store::Store>> {
    let layout = Layout::with_sizes(opts.stripe_unit, opts.stripe_count, opts.object_size)?;
    Ok(Arc::new(RadosStore::with(
        pool,
        opts.cluster.clone(),
        layout,
    )?))
}

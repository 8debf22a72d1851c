//! A connection to a Ceph cluster and an I/O context on one pool.

use std::ffi::CString;
use std::io;
use std::os::raw::c_int;
use std::ptr;

use ferry_store::{Error, Result};

use crate::{ffi, Config};

/// A librados return code as a store error, classified by errno.
pub fn check(rc: c_int, what: impl std::fmt::Display) -> Result<c_int> {
    if rc >= 0 {
        return Ok(rc);
    }
    let msg = format!("{what}: {}", io::Error::from_raw_os_error(-rc));
    Err(match -rc {
        libc::ENOENT => Error::NotFound(msg),
        libc::EEXIST => Error::AlreadyExists(msg),
        libc::EACCES | libc::EPERM => Error::Denied(msg),
        libc::EINVAL | libc::ENAMETOOLONG | libc::EFBIG | libc::E2BIG => Error::Invalid(msg),
        libc::ETIMEDOUT
        | libc::ECONNREFUSED
        | libc::ECONNRESET
        | libc::EAGAIN
        | libc::EINTR
        | libc::ENOTCONN
        | libc::ESHUTDOWN
        | libc::EHOSTUNREACH
        | libc::EIO => Error::Transient(msg),
        _ => Error::Permanent(msg),
    })
}

/// A C string for librados; keys with NUL bytes cannot name RADOS objects.
pub fn cstr(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::Invalid(format!("'{s}' contains a NUL byte")))
}

/// The client name from `CEPH_ARGS` (`--id X`, `--user X`, `-n/--name client.X`), as the
/// ceph tools take it; librados fixes the name at creation, before it reads that variable.
fn client_id() -> Option<String> {
    let args = std::env::var("CEPH_ARGS").ok()?;
    let mut it = args.split_whitespace();
    while let Some(a) = it.next() {
        let (flag, inline) = a.split_once('=').map_or((a, None), |(f, v)| (f, Some(v)));
        let value = || {
            inline
                .map(str::to_string)
                .or_else(|| it.clone().next().map(str::to_string))
        };
        match flag {
            "--id" | "--user" | "-i" => return value(),
            "-n" | "--name" => return value().map(|n| n.trim_start_matches("client.").into()),
            _ => {}
        }
    }
    None
}

/// A connected cluster handle.
pub struct Cluster {
    handle: ffi::rados_t,
}

// SAFETY: librados handles are thread-safe (documented for rados_t and rados_ioctx_t).
unsafe impl Send for Cluster {}
// SAFETY: as above.
unsafe impl Sync for Cluster {}

impl Cluster {
    /// Reads the configuration and connects; blocks for up to the op timeout.
    pub fn connect(cfg: &Config) -> Result<Self> {
        ffi::load().map_err(|e| Error::Invalid(format!("rados:// needs librados: {e}")))?;
        let id = client_id().map(|i| cstr(&i)).transpose()?;
        let mut handle: ffi::rados_t = ptr::null_mut();
        // SAFETY: out-pointer to a local; the id string outlives the call.
        let rc = unsafe {
            ffi::rados_create(&mut handle, id.as_ref().map_or(ptr::null(), |s| s.as_ptr()))
        };
        check(rc, "creating the librados handle")?;
        let cluster = Self { handle };
        let conf = cfg
            .conf
            .as_ref()
            .map(|p| cstr(&p.to_string_lossy()))
            .transpose()?;
        // SAFETY: valid handle; NULL asks librados to search CEPH_CONF and the default paths.
        let rc = unsafe {
            ffi::rados_conf_read_file(handle, conf.as_ref().map_or(ptr::null(), |s| s.as_ptr()))
        };
        let shown = cfg
            .conf
            .as_ref()
            .map_or("CEPH_CONF or /etc/ceph/ceph.conf".into(), |p| {
                p.display().to_string()
            });
        if rc < 0 {
            let e = io::Error::from_raw_os_error(-rc);
            return Err(Error::Invalid(format!(
                "reading the Ceph configuration {shown}: {e} (set --ceph-conf or CEPH_CONF)"
            )));
        }
        // SAFETY: valid handle; NULL means CEPH_ARGS.
        check(
            unsafe { ffi::rados_conf_parse_env(handle, ptr::null()) },
            "parsing CEPH_ARGS",
        )?;
        let t = cfg.op_timeout.unwrap_or(60).max(1).to_string();
        for opt in [
            "rados_osd_op_timeout",
            "rados_mon_op_timeout",
            "client_mount_timeout",
        ] {
            cluster.set(opt, &t)?;
        }
        // SAFETY: valid, configured handle.
        check(
            unsafe { ffi::rados_connect(handle) },
            format!("connecting to Ceph ({shown})"),
        )?;
        Ok(cluster)
    }

    fn set(&self, opt: &str, value: &str) -> Result<()> {
        let (o, v) = (cstr(opt)?, cstr(value)?);
        // SAFETY: valid handle and C strings.
        check(
            unsafe { ffi::rados_conf_set(self.handle, o.as_ptr(), v.as_ptr()) },
            opt,
        )
        .map(drop)
    }

    /// Creates a pool with the cluster's default settings; an existing pool is fine.
    pub fn create_pool(&self, pool: &str) -> Result<()> {
        let p = cstr(pool)?;
        // SAFETY: valid handle and C string.
        match check(
            unsafe { ffi::rados_pool_create(self.handle, p.as_ptr()) },
            format!("creating pool {pool}"),
        ) {
            Err(Error::AlreadyExists(_)) => Ok(()),
            Ok(_) => {
                // An untagged pool puts the cluster in HEALTH_WARN; failing to tag costs only that.
                let name = pool.replace('\\', "\\\\").replace('"', "\\\"");
                let json = format!(
                    r#"{{"prefix": "osd pool application enable", "pool": "{name}", "app": "rados"}}"#
                );
                if let Err(e) = self.mon_command(&json) {
                    tracing::warn!("tagging pool {pool} with application rados: {e}");
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Sends one JSON command to the monitors.
    fn mon_command(&self, json: &str) -> Result<()> {
        let c = cstr(json)?;
        let mut cmd = [c.as_ptr()];
        let (mut out, mut outlen) = (ptr::null_mut(), 0);
        let (mut outs, mut outslen) = (ptr::null_mut(), 0);
        // SAFETY: valid handle and command array; librados allocates the outputs, freed below.
        let rc = unsafe {
            ffi::rados_mon_command(
                self.handle,
                cmd.as_mut_ptr(),
                1,
                ptr::null(),
                0,
                &mut out,
                &mut outlen,
                &mut outs,
                &mut outslen,
            )
        };
        // SAFETY: buffers librados allocated (or null), read within their length, freed once.
        let status = unsafe {
            let text = if outs.is_null() {
                String::new()
            } else {
                let s = std::slice::from_raw_parts(outs.cast::<u8>(), outslen);
                String::from_utf8_lossy(s).into_owned()
            };
            ffi::rados_buffer_free(out);
            ffi::rados_buffer_free(outs);
            text
        };
        check(rc, format!("{json}: {status}")).map(drop)
    }

    /// An I/O context on `pool`.
    pub fn pool(&self, pool: &str) -> Result<ffi::rados_ioctx_t> {
        let p = cstr(pool)?;
        let mut io: ffi::rados_ioctx_t = ptr::null_mut();
        // SAFETY: valid handle, C string and out-pointer.
        let rc = unsafe { ffi::rados_ioctx_create(self.handle, p.as_ptr(), &mut io) };
        check(rc, format!("opening pool {pool}")).map_err(|e| match e {
            Error::NotFound(m) => {
                Error::NotFound(format!("{m} (create it: ferry mkdir rados://{pool})"))
            }
            e => e,
        })?;
        Ok(io)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SAFETY: the handle was created by rados_create and every ioctx on it is gone (Pool
        // holds an Arc of its Cluster).
        unsafe { ffi::rados_shutdown(self.handle) }
    }
}

//! Single RADOS operations on pieces, each one librados aio call.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr;
use std::sync::Arc;

use bytes::Bytes;
use ferry_store::buffer::{self, Buffer};
use ferry_store::{Error, Result};

use crate::aio::Aio;
use crate::cluster::{check, cstr, Cluster};
use crate::ffi;

/// An I/O context on one pool; keeps its cluster connected.
pub struct Pool {
    io: ffi::rados_ioctx_t,
    _cluster: Arc<Cluster>,
}

// SAFETY: librados I/O contexts are thread-safe.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: created by rados_ioctx_create; no operation holds it once the last Arc is gone
        // (aio futures hold an Arc<Pool> until they resolve).
        unsafe { ffi::rados_ioctx_destroy(self.io) }
    }
}

/// The xattrs of a first piece, read in one operation.
struct XattrRead {
    op: ffi::rados_read_op_t,
    iter: ffi::rados_xattrs_iter_t,
    rval: c_int,
}

// SAFETY: the read op is used by one thread at a time (submit, then the completed future).
unsafe impl Send for XattrRead {}

impl Drop for XattrRead {
    fn drop(&mut self) {
        // SAFETY: both were created for this read and are released once, here.
        unsafe {
            if !self.iter.is_null() {
                ffi::rados_getxattrs_end(self.iter);
            }
            ffi::rados_release_read_op(self.op);
        }
    }
}

/// What `publish` writes: the first piece's bytes and xattrs.
struct WriteOp(ffi::rados_write_op_t);

// SAFETY: as for XattrRead.
unsafe impl Send for WriteOp {}

impl Drop for WriteOp {
    fn drop(&mut self) {
        // SAFETY: created by rados_create_write_op, released once.
        unsafe { ffi::rados_release_write_op(self.0) }
    }
}

/// librados takes at most osd_max_write_size (90 MB) in one write.
const MAX_OP: usize = 32 << 20;

impl Pool {
    /// An I/O context on `pool` of `cluster`.
    pub fn open(cluster: Arc<Cluster>, pool: &str) -> Result<Self> {
        Ok(Self {
            io: cluster.pool(pool)?,
            _cluster: cluster,
        })
    }

    /// Writes `data` at `off` of object `oid`.
    pub async fn write(&self, oid: &str, off: u64, data: Bytes) -> Result<()> {
        let o = cstr(oid)?;
        let mut done = 0;
        while done < data.len() {
            let part = data.slice(done..(done + MAX_OP).min(data.len()));
            let len = part.len();
            let what = format!("rados write {oid}");
            let op = {
                let p = part.as_ptr();
                Aio::start(&what, part, |c| {
                    // SAFETY: the buffer is kept alive by the operation; oid is copied by librados.
                    unsafe {
                        ffi::rados_aio_write(
                            self.io,
                            o.as_ptr(),
                            c,
                            p.cast(),
                            len,
                            off + done as u64,
                        )
                    }
                })?
            };
            check(op.await.0, &what)?;
            done += len;
        }
        Ok(())
    }

    /// Reads `len` bytes at `off` of `oid`; bytes past its end or of a missing piece are
    /// zeros, as libradosstriper reads sparse striped objects.
    pub async fn read(&self, oid: &str, off: u64, len: usize) -> Result<Buffer> {
        let o = cstr(oid)?;
        let what = format!("rados read {oid}");
        let op = {
            let mut buf = buffer::take(len);
            let p = buf.as_mut_ptr();
            Aio::start(&what, buf, |c| {
                // SAFETY: the buffer moves into the operation's keep-alive; its heap memory stays put.
                unsafe { ffi::rados_aio_read(self.io, o.as_ptr(), c, p.cast(), len, off) }
            })?
        };
        let (rv, mut buf) = op.await;
        let got = match check(rv, &what) {
            Ok(n) => (n as usize).min(len),
            Err(Error::NotFound(_)) => 0,
            Err(e) => return Err(e),
        };
        // The buffer held an earlier block: what the piece lacks reads as zeros.
        buf[got..].fill(0);
        Ok(buf)
    }

    /// Removes `oid`; false when it did not exist.
    pub async fn remove(&self, oid: &str) -> Result<bool> {
        let o = cstr(oid)?;
        let what = format!("rados remove {oid}");
        // SAFETY: oid is copied by librados.
        let op = Aio::start(&what, (), |c| unsafe {
            ffi::rados_aio_remove(self.io, o.as_ptr(), c)
        })?;
        match check(op.await.0, &what) {
            Ok(_) => Ok(true),
            Err(Error::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Every xattr of `oid`.
    pub async fn xattrs(&self, oid: &str) -> Result<BTreeMap<String, Vec<u8>>> {
        let o = cstr(oid)?;
        let what = format!("rados getxattrs {oid}");
        let aio = {
            // SAFETY: a fresh read op, owned by `read` from here on.
            let mut read = Box::new(XattrRead {
                op: unsafe { ffi::rados_create_read_op() },
                iter: ptr::null_mut(),
                rval: 0,
            });
            // SAFETY: the out-pointers point into the box, which the operation keeps alive.
            unsafe { ffi::rados_read_op_getxattrs(read.op, &mut read.iter, &mut read.rval) };
            let op = read.op;
            // SAFETY: as above; oid is copied by librados.
            Aio::start(&what, read, |c| unsafe {
                ffi::rados_aio_read_op_operate(op, self.io, c, o.as_ptr(), ffi::OPERATION_NOFLAG)
            })?
        };
        let (rv, read) = aio.await;
        check(rv, &what)?;
        check(read.rval, &what)?;
        let mut out = BTreeMap::new();
        loop {
            let (mut name, mut val, mut len) = (ptr::null(), ptr::null(), 0usize);
            // SAFETY: the iterator is valid until `read` drops; the pointers it hands out too.
            check(
                unsafe { ffi::rados_getxattrs_next(read.iter, &mut name, &mut val, &mut len) },
                &what,
            )?;
            if name.is_null() {
                return Ok(out);
            }
            // SAFETY: librados hands out a NUL-terminated name and `len` bytes of value.
            let (n, v) = unsafe {
                (
                    CStr::from_ptr(name).to_string_lossy().into_owned(),
                    if len == 0 {
                        Vec::new()
                    } else {
                        std::slice::from_raw_parts(val.cast::<u8>(), len).to_vec()
                    },
                )
            };
            out.insert(n, v);
        }
    }

    /// Replaces `oid` by `data` and exactly `xattrs`, in one atomic operation: a reader sees
    /// the old object or the new one. The object is created, then removed, then written, so
    /// that xattrs of an older object (its metadata, a striper lock record) do not survive.
    pub async fn replace(
        &self, oid: &str, data: &[u8], xattrs: &[(String, Vec<u8>)],
    ) -> Result<()> {
        let o = cstr(oid)?;
        let what = format!("rados write {oid}");
        let names = xattrs
            .iter()
            .map(|(n, _)| cstr(n))
            .collect::<Result<Vec<_>>>()?;
        // SAFETY: a fresh write op, released by WriteOp's drop.
        let op = WriteOp(unsafe { ffi::rados_create_write_op() });
        // SAFETY: librados copies buffers and names into the op as they are added.
        unsafe {
            ffi::rados_write_op_create(op.0, ffi::CREATE_IDEMPOTENT, ptr::null());
            ffi::rados_write_op_remove(op.0);
            ffi::rados_write_op_create(op.0, ffi::CREATE_IDEMPOTENT, ptr::null());
            ffi::rados_write_op_write_full(op.0, data.as_ptr().cast(), data.len());
            for (name, (_, v)) in names.iter().zip(xattrs) {
                ffi::rados_write_op_setxattr(op.0, name.as_ptr(), v.as_ptr().cast(), v.len());
            }
        }
        let aio = {
            let raw = op.0;
            // SAFETY: the op is kept alive by the operation; oid is copied by librados.
            Aio::start(&what, op, |c| unsafe {
                ffi::rados_aio_write_op_operate(
                    raw,
                    self.io,
                    c,
                    o.as_ptr(),
                    ptr::null_mut(),
                    ffi::OPERATION_NOFLAG,
                )
            })?
        };
        check(aio.await.0, &what).map(drop)
    }

    /// Names of every object in the pool; blocking (librados lists synchronously).
    pub fn names(&self) -> Result<Vec<String>> {
        let mut ctx: ffi::rados_list_ctx_t = ptr::null_mut();
        // SAFETY: valid ioctx and out-pointer.
        check(
            unsafe { ffi::rados_nobjects_list_open(self.io, &mut ctx) },
            "rados list",
        )?;
        let mut out = Vec::new();
        let res = loop {
            let mut entry = ptr::null();
            // SAFETY: valid list context; key and namespace are not wanted.
            let rc = unsafe {
                ffi::rados_nobjects_list_next(ctx, &mut entry, ptr::null_mut(), ptr::null_mut())
            };
            if rc == -libc::ENOENT {
                break Ok(out);
            }
            if let Err(e) = check(rc, "rados list") {
                break Err(e);
            }
            // SAFETY: a NUL-terminated name valid until the next call.
            out.push(
                unsafe { CStr::from_ptr(entry) }
                    .to_string_lossy()
                    .into_owned(),
            );
        };
        // SAFETY: opened above, closed once.
        unsafe { ffi::rados_nobjects_list_close(ctx) };
        res
    }
}

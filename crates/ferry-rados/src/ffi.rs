//! The part of librados' C API (Ceph 16, `rados/librados.h`) this crate calls, declared by hand
//! so that building needs no bindgen and no clang.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_void};

pub type rados_t = *mut c_void;
pub type rados_ioctx_t = *mut c_void;
pub type rados_completion_t = *mut c_void;
pub type rados_write_op_t = *mut c_void;
pub type rados_read_op_t = *mut c_void;
pub type rados_xattrs_iter_t = *mut c_void;
pub type rados_list_ctx_t = *mut c_void;
pub type rados_callback_t = Option<unsafe extern "C" fn(rados_completion_t, *mut c_void)>;

/// `LIBRADOS_CREATE_IDEMPOTENT`: create the object if missing, no error if present.
pub const CREATE_IDEMPOTENT: c_int = 0;
/// `LIBRADOS_OPERATION_NOFLAG`.
pub const OPERATION_NOFLAG: c_int = 0;

// Linked by build.rs, which finds librados.
extern "C" {
    pub fn rados_create(cluster: *mut rados_t, id: *const c_char) -> c_int;
    pub fn rados_conf_read_file(cluster: rados_t, path: *const c_char) -> c_int;
    pub fn rados_conf_parse_env(cluster: rados_t, var: *const c_char) -> c_int;
    pub fn rados_conf_set(cluster: rados_t, option: *const c_char, value: *const c_char) -> c_int;
    pub fn rados_connect(cluster: rados_t) -> c_int;
    pub fn rados_shutdown(cluster: rados_t);
    pub fn rados_pool_create(cluster: rados_t, name: *const c_char) -> c_int;
    pub fn rados_mon_command(
        cluster: rados_t, cmd: *mut *const c_char, cmdlen: usize, inbuf: *const c_char,
        inbuflen: usize, outbuf: *mut *mut c_char, outbuflen: *mut usize, outs: *mut *mut c_char,
        outslen: *mut usize,
    ) -> c_int;
    pub fn rados_buffer_free(buf: *mut c_char);
    pub fn rados_ioctx_create(
        cluster: rados_t, pool: *const c_char, io: *mut rados_ioctx_t,
    ) -> c_int;
    pub fn rados_ioctx_destroy(io: rados_ioctx_t);

    pub fn rados_aio_create_completion2(
        cb_arg: *mut c_void, cb_complete: rados_callback_t, pc: *mut rados_completion_t,
    ) -> c_int;
    pub fn rados_aio_get_return_value(c: rados_completion_t) -> c_int;
    pub fn rados_aio_release(c: rados_completion_t);
    pub fn rados_aio_write(
        io: rados_ioctx_t, oid: *const c_char, c: rados_completion_t, buf: *const c_char,
        len: usize, off: u64,
    ) -> c_int;
    pub fn rados_aio_read(
        io: rados_ioctx_t, oid: *const c_char, c: rados_completion_t, buf: *mut c_char, len: usize,
        off: u64,
    ) -> c_int;
    pub fn rados_aio_remove(io: rados_ioctx_t, oid: *const c_char, c: rados_completion_t) -> c_int;

    pub fn rados_create_write_op() -> rados_write_op_t;
    pub fn rados_release_write_op(op: rados_write_op_t);
    pub fn rados_write_op_create(op: rados_write_op_t, exclusive: c_int, category: *const c_char);
    pub fn rados_write_op_remove(op: rados_write_op_t);
    pub fn rados_write_op_write_full(op: rados_write_op_t, buf: *const c_char, len: usize);
    pub fn rados_write_op_setxattr(
        op: rados_write_op_t, name: *const c_char, value: *const c_char, len: usize,
    );
    pub fn rados_aio_write_op_operate(
        op: rados_write_op_t, io: rados_ioctx_t, c: rados_completion_t, oid: *const c_char,
        mtime: *mut libc::time_t, flags: c_int,
    ) -> c_int;

    pub fn rados_create_read_op() -> rados_read_op_t;
    pub fn rados_release_read_op(op: rados_read_op_t);
    pub fn rados_read_op_getxattrs(
        op: rados_read_op_t, iter: *mut rados_xattrs_iter_t, prval: *mut c_int,
    );
    pub fn rados_aio_read_op_operate(
        op: rados_read_op_t, io: rados_ioctx_t, c: rados_completion_t, oid: *const c_char,
        flags: c_int,
    ) -> c_int;
    pub fn rados_getxattrs_next(
        iter: rados_xattrs_iter_t, name: *mut *const c_char, val: *mut *const c_char,
        len: *mut usize,
    ) -> c_int;
    pub fn rados_getxattrs_end(iter: rados_xattrs_iter_t);

    pub fn rados_nobjects_list_open(io: rados_ioctx_t, ctx: *mut rados_list_ctx_t) -> c_int;
    pub fn rados_nobjects_list_next(
        ctx: rados_list_ctx_t, entry: *mut *const c_char, key: *mut *const c_char,
        nspace: *mut *const c_char,
    ) -> c_int;
    pub fn rados_nobjects_list_close(ctx: rados_list_ctx_t);
}

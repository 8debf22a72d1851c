//! The part of librados' C API (Ceph 16, `rados/librados.h`) this crate calls, declared by hand
//! so that building needs no bindgen, no clang and no librados: the library is opened on the
//! first connection. Linked at build time, it cost every ferry process 50 ms at a cold start
//! and 20 ms warm (libceph-common and its C++ dependencies load and run their initialisers),
//! paid by each `wal-push` PostgreSQL runs and by every command that never names `rados://`.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_void};
use std::sync::OnceLock;

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

/// The library's file name: its soname, which the runtime package installs (the unversioned
/// `librados.so` comes only with the development package).
const LIBRARY: &str = "librados.so.2";

/// Declares each function once: a field of the table [`load`] fills, and a function of the
/// same name that calls through it.
macro_rules! librados {
    ($(pub fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?;)*) => {
        /// librados' functions, resolved from the library opened once.
        struct Api {
            $($name: unsafe extern "C" fn($($ty),*) $(-> $ret)?,)*
        }

        impl Api {
            fn resolve(lib: &'static libloading::Library) -> Result<Self, libloading::Error> {
                // SAFETY: each symbol's type is the prototype in librados.h (Ceph 16 and
                // later keep these); the library stays loaded for the process's life.
                unsafe {
                    Ok(Self {
                        $($name: *lib.get::<unsafe extern "C" fn($($ty),*) $(-> $ret)?>(stringify!($name))?,)*
                    })
                }
            }
        }

        $(
            /// Calls librados' function of this name; [`load`] must have succeeded.
            #[allow(clippy::too_many_arguments)]
            pub unsafe fn $name($($arg: $ty),*) $(-> $ret)? {
                // SAFETY: the caller keeps the C function's contract.
                unsafe { (api().$name)($($arg),*) }
            }
        )*
    };
}

static API: OnceLock<Result<Api, String>> = OnceLock::new();

/// Opens librados, once per process; the error says what is missing (and stays for the
/// process: a long-running one needs a restart after librados2 is installed).
pub fn load() -> Result<(), String> {
    API.get_or_init(|| {
        // RTLD_NOW: a dependency missing a symbol fails here, with a message, not at the
        // first call with an abort.
        let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL;
        // SAFETY: loading runs librados' initialisers, which have no preconditions.
        let lib = unsafe { libloading::os::unix::Library::open(Some(LIBRARY), flags) }
            .map(libloading::Library::from)
            .map_err(|e| format!("{e} (install Ceph's librados2 package)"))?;
        // Never unloaded: completions call back into it from librados' own threads.
        let lib: &'static libloading::Library = Box::leak(Box::new(lib));
        Api::resolve(lib).map_err(|e| format!("{LIBRARY}: {e} (Ceph 16 or later is needed)"))
    })
    .as_ref()
    .map(|_| ())
    .map_err(Clone::clone)
}

fn api() -> &'static Api {
    match API.get() {
        Some(Ok(api)) => api,
        _ => panic!("librados called before ffi::load succeeded (ferry bug)"),
    }
}

librados! {
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
